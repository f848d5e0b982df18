"""Data sets as plugins: one package per data set, registered by name.

A data set's package holds everything about it: its plugin (the :class:`DataSet`
subclass in its ``__init__``: sample, download, raw-file checks, Beam job, parser, models
with their tasks, pipeline defaults, fault cases and the experiments it serves), and the
modules behind it (``sample.py``, ``download.py``, ``beam.py``, ``defaults.py``, its
models and parsers). Nothing outside ``distrain/datasets/`` names a data set: generic code
asks the registry (:func:`names`, :func:`get`, :func:`texts`, :func:`serving`).

Adding a data set: a package here whose plugin is decorated with :func:`register`,
named in :data:`BUILT_IN`, and its test: a subclass of
:class:`distrain.datasets.testing.DataSetTestCase` naming it. Another package adds data
sets and models without touching this one, through the entry-point groups
``distrain.datasets`` (a :class:`DataSet` subclass) and ``distrain.models`` (a
:class:`PluginModel`), loaded the first time the registry is asked (:mod:`distrain.base.plugins`).
"""

from __future__ import annotations

import importlib
import os
import re
import shutil
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from distrain.base import plugins
from distrain.datasets.info import DataError, DatasetInfo, FeatureSpec

# The runs a pipeline compares unless told otherwise (``--runs``, a pipeline's ``runs``).
DEFAULT_RUNS = ["single:1", "sync:2", "async:2:ps=1", "syncreplicas:3:aggregate=2"]

# The built-in data sets' packages, in the order the CLI and the README list them. The
# registry imports them by name on the first lookup (:func:`_load`): a plugin imports the
# registry, never the other way, so generic training code may ask the registry.
BUILT_IN = ("mnist", "dbpedia", "gutenberg", "tfrecord")

# A model in the user's code: ``FILE.py:FUNCTION`` or ``package.module:FUNCTION``, then an
# optional ``@TASK``. The registry only tells one from a registered model's name: the learning
# layer resolves it (:func:`distrain.learning.models.model_spec`, :mod:`distrain.learning.usermodel`
# builds it), so that no import runs from the registry up to the code that uses it.
USER_MODEL = re.compile(
    r"^(?P<where>(?:.+\.py)|(?:[A-Za-z_][\w]*(?:\.[A-Za-z_][\w]*)*))"
    r":(?P<function>[A-Za-z_]\w*)(?:@(?P<task>[\w-]+))?$"
)


def is_user_model(name: str) -> bool:
    """Whether ``name`` names a function in the user's code rather than a built-in model."""
    return bool(USER_MODEL.match(str(name)))


class DataSetError(ValueError):
    """An unknown data set or model, or raw files that are not the data set's."""


@dataclass(frozen=True)
class PipelineDefaults:
    """A data set's pipeline: its name and the defaults of its parameters."""

    dataset: str
    description: str
    model: str
    epochs: int
    batch_size: int
    learning_rate: float
    target_accuracy: float
    runs: list[str] = field(default_factory=lambda: list(DEFAULT_RUNS))
    sample_size: int = 0
    # Runs stop on a validation plateau of this patience (epochs are then the most), so
    # that the comparison judges converged runs, not the slowest to converge (0: off).
    until_plateau: int = 3
    # The pipeline exports the run its verdict picks and pushes it (TrainConfig.export).
    export: bool = True


#: distrain's own optimizers a model spec may name (:mod:`distrain.learning.optim`).
OPTIMIZERS = ("adam", "sgd")


@dataclass(frozen=True)
class ModelSpec:
    """One model of a data set.

    Attributes:
        build: ``build(info, seed)`` returns the (built) tf-keras model.
        task: What the model learns and how it is scored (a :class:`distrain.learning.tasks.Task`,
            of the learning layer above this one).
        view: Which records the model reads (``""``: the data set's main records; else a
            view its preprocessing writes, e.g. Gutenberg's line ``pairs``).
        stages: Whether pipeline stages can cut it: a ``Sequential`` model of fixed-shape
            inputs without masks (stages pass activations, not masks).
        summary: One line for ``--help`` and the README.
        stream: A language model that trains on contiguous streams with its state carried
            from batch to batch in the modes that carry state, and how
            (:class:`distrain.learning.lm.StreamTraining`); None: records in shuffled order.
        choices: The user's own loss, optimizer and class weights, from a model file
            (:class:`distrain.learning.choices.Choices`); None: distrain's.
        optimizer: distrain's optimizer for it (when ``choices`` gives none): ``"adam"``
            (:class:`distrain.learning.optim.Adam`, lazy on sparse rows), or ``"sgd"``
            (:class:`distrain.learning.optim.SGD`, fastText's rule: a rate per example that
            falls linearly to zero over the run's updates); or ``optimizer(info)``, one of
            them chosen from the data (its size, say).
        chosen: ``chosen(info)``: one line saying what the model chose from the data (its
            size, its optimizer), which the run's log says; None: it chooses nothing.
    """

    build: Callable
    task: object
    view: str = ""
    stages: bool = True
    summary: str = ""
    stream: object = None
    choices: object = None
    optimizer: str | Callable = "adam"
    chosen: Callable | None = None

    def __post_init__(self) -> None:
        if not callable(self.optimizer) and self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer must be 'adam' or 'sgd', got {self.optimizer!r}")

    def optimizer_for(self, info) -> str:
        """The optimizer of distrain's for the model on this data: ``"adam"`` or ``"sgd"``.

        Raises:
            ValueError: ``optimizer(info)`` named neither.
        """
        name = self.optimizer(info) if callable(self.optimizer) else self.optimizer
        if name not in OPTIMIZERS:
            raise ValueError(f"optimizer(info) must give 'adam' or 'sgd', got {name!r}")
        return name


@dataclass(frozen=True)
class PluginModel:
    """A model another package adds to an installed data set.

    The object of an entry point of the group ``distrain.models``, whose name is the
    model's name.

    Attributes:
        dataset: The registered data set it reads.
        spec: The model.
    """

    dataset: str
    spec: ModelSpec


class DataSet:
    """The base of every data set's plugin.

    Attributes:
        name: The registered name (``distrain run NAME``).
        summary: One line: what the data is.
        models: The data set's models by name; the first is the default.
        sample_size: A generated sample's default size (the unit is the data set's).
        sample_unit: What ``sample_size`` counts (``--sample-size``'s help).
        title: How reports and titles name it.
        experiments: The experiments (:mod:`distrain.analysis.experiments`) it serves, each with
            what that experiment needs to know of it (e.g. which of its models run);
            an experiment asks :func:`serving` instead of naming a data set.
        pipeline: Its pipeline's name, description and parameter defaults.
        fault_cases: Its cases of the reliability matrix (:mod:`distrain.faults`):
            ``(id, what is checked)``, ids starting with ``NAME/``.
    """

    name: str = ""
    summary: str = ""
    models: dict[str, ModelSpec] = {}
    sample_size: int = 0
    sample_unit: str = ""
    title: str = ""
    experiments: dict[str, dict] = {}
    pipeline: PipelineDefaults | None = None
    fault_cases: tuple[tuple[str, str], ...] = ()

    # ---- raw files ----------------------------------------------------------------------

    def write_sample(self, out: Path, size: int, seed: int) -> None:
        """Writes a generated sample of ``size`` (0: the default) in the real format."""
        raise NotImplementedError

    def check_source(self, source: str) -> None:
        """Checks a ``download:ARGS`` source before anything is written (default: any)."""

    def download(self, out: Path, source: str) -> None:
        """Downloads the real files (``source``: ``download`` or ``download:ARGS``)."""
        raise NotImplementedError

    def raw_files(self, src: Path) -> list[Path]:
        """The raw files a directory must hold (copied by the fetch step)."""
        raise NotImplementedError

    def check_raw_files(self, src: Path) -> None:
        """The cheap file-level checks (names, headers, lengths) preprocessing makes first.

        Raises:
            ValueError: A file is missing or malformed; the message names it.
        """
        for path in self.raw_files(src):
            if not path.exists():
                raise DataSetError(f"{path}: file not found (the {self.name} layout needs it)")

    def copy_raw(self, src: Path, out: Path) -> None:
        """Copies the raw files of ``src`` into ``out``."""
        for path in self.raw_files(src):
            if not path.exists():
                raise DataSetError(f"{src}: missing {self.name} file {path.name}")
            shutil.copyfile(path, out / path.name)

    # ---- preprocessing and records ------------------------------------------------------

    def preprocess(
        self,
        raw: str,
        out: str,
        validation_fraction: float,
        seed: int,
        beam_args: list[str],
        overwrite: bool = False,
    ) -> dict:
        """Runs the data set's Beam job; returns the metadata it wrote.

        ``out`` must be empty or missing, unless ``overwrite``: then it is replaced whole
        when the job succeeds (:func:`distrain.preprocess.writing.staged_output`).
        """
        raise NotImplementedError

    def parser(self, info) -> Callable:
        """``parse(serialised records) -> (features, targets)`` for ``info``'s view."""
        raise NotImplementedError

    def serving_parser(self, info) -> Callable | None:
        """:meth:`parser` for a model server: a request's records may leave the label out.

        The built-in data sets parse the label with a default here (the targets are then
        meaningless; only the features reach the model). None (the default for a plugin):
        the export fills a missing label in by merging a default Example before each record,
        which TensorFlow logs a warning for whenever a record carries its own label.
        """
        return None

    def feature_spec(self, info) -> FeatureSpec:
        """What :meth:`parser` gives a model as input, and the label's name.

        The default reads ``features`` and ``label`` of ``metadata.json`` (features.json's
        form, :meth:`FeatureSpec.from_json`); a data set whose metadata has none says it here.

        Raises:
            DataError: Neither.
        """
        if "features" not in info.metadata:
            raise DataError(f"{info.data_dir}: the {self.name} data set gives no feature spec")
        return FeatureSpec.from_json(info.metadata, f"{info.data_dir}/metadata.json")

    def texts(self, data_dir: str | os.PathLike, split: str) -> dict[str, str]:
        """The plain text of each document of a split, by name (language models score it).

        Raises:
            DataSetError: The data set has no running text.
        """
        raise DataSetError(f"{data_dir}: the {self.name} data set has no running text")

    # ---- models -------------------------------------------------------------------------

    @property
    def default_model(self) -> str:
        """The first model of :attr:`models`."""
        return next(iter(self.models))

    def model(self, name: str) -> ModelSpec:
        """The named model of the data set's own (its plugins' included).

        A model in the user's code (:func:`is_user_model`) is resolved above the registry,
        by :func:`distrain.learning.models.model_spec`.

        Raises:
            DataSetError: The data set has no such model.
        """
        if is_user_model(name):
            raise DataSetError(
                f"model {name!r} is the user's code: distrain.learning.models.model_spec "
                "resolves it, not the data-set registry"
            )
        if name not in self.models:
            broken = plugins.broken_named(plugins.MODELS, name)
            if broken is not None:
                raise DataSetError(
                    f"model {name!r}: its plugin (from {broken.origin}) failed to load: "
                    f"{broken.error}"
                )
            raise DataSetError(
                f"model {name!r}: no such model for {self.name} "
                f"(expected one of {', '.join(self.models)})"
            )
        return self.models[name]


_REGISTRY: dict[str, DataSet] = {}
_LOADED = False
_PLUGINS_LOADED = False
_LOADING = threading.RLock()  # re-entrant: a plugin's import may ask the registry


def _load() -> None:
    """Imports the built-in data sets once, in order (each registers itself), then the plugins.

    Under a lock: a thread that asks while another imports waits for every data set.
    """
    global _LOADED
    with _LOADING:
        if not _LOADED:
            for package in BUILT_IN:
                importlib.import_module(f"{__name__}.{package}")
            # In BUILT_IN's order, whichever plugin a process imported first (a Beam job's).
            order = [n for n in BUILT_IN if n in _REGISTRY] + [n for n in _REGISTRY]
            for name in dict.fromkeys(order):
                _REGISTRY[name] = _REGISTRY.pop(name)
            _LOADED = True
        _load_plugins()


def register(cls: type[DataSet]) -> type[DataSet]:
    """Class decorator: registers one instance of a data set under its name.

    Raises:
        DataSetError: Another data set already has the name.
    """
    held = _REGISTRY.get(cls.name)
    if held is not None and type(held) is not cls:
        raise DataSetError(f"data set {cls.name!r} is already registered ({type(held).__module__})")
    if held is None:
        _REGISTRY[cls.name] = cls()
    return cls


def _load_plugins() -> None:
    """Loads the data sets, then the models, of other packages' entry points, once."""
    global _PLUGINS_LOADED
    with _LOADING:
        if _PLUGINS_LOADED:
            return
        _PLUGINS_LOADED = True  # first: a plugin's module may ask the registry
        plugins.load(plugins.DATASETS, _accept_dataset)
        plugins.load(plugins.MODELS, _accept_model)


def _accept_dataset(name: str, obj: object, origin: str) -> None:
    if not (isinstance(obj, type) and issubclass(obj, DataSet)):
        raise plugins.PluginError(f"expected a DataSet subclass, got {obj!r}")
    if obj.name != name:
        raise plugins.PluginError(f"its class names itself {obj.name!r}, the entry point {name!r}")
    register(obj)


def _accept_model(name: str, obj: object, origin: str) -> None:
    if not isinstance(obj, PluginModel):
        raise plugins.PluginError(f"expected a distrain.datasets.PluginModel, got {obj!r}")
    dataset = get(obj.dataset)
    for other in _REGISTRY.values():
        if name in other.models:
            raise plugins.PluginError(f"the {other.name} data set already has a model {name!r}")
    dataset.models = {**dataset.models, name: obj.spec}


def names() -> list[str]:
    """The registered data sets' names: the built-in ones, then the plugins'."""
    _load()
    return list(_REGISTRY)


def get(name: str) -> DataSet:
    """The named data set.

    Raises:
        DataSetError: No data set of that name (or its plugin failed to load: why).
    """
    _load()
    if name not in _REGISTRY:
        broken = plugins.broken_named(plugins.DATASETS, name)
        if broken is not None:
            raise DataSetError(
                f"dataset {name!r}: its plugin (from {broken.origin}) failed to load: "
                f"{broken.error}"
            )
        raise DataSetError(f"unknown dataset {name!r}; expected one of {', '.join(_REGISTRY)}")
    return _REGISTRY[name]


def serving(experiment: str) -> list[DataSet]:
    """The data sets that serve ``experiment`` (:attr:`DataSet.experiments`), in order.

    Raises:
        DataSetError: No registered data set serves it.
    """
    found = [d for d in map(get, names()) if experiment in d.experiments]
    if not found:
        raise DataSetError(f"experiment {experiment!r}: no registered data set serves it")
    return found


def texts(data_dir: str | os.PathLike, split: str) -> dict[str, str]:
    """The running text of ``split`` of the data set preprocessed in ``data_dir``."""
    return get(DatasetInfo.load(data_dir).dataset).texts(data_dir, split)


def dataset_of(data_dir: str | os.PathLike) -> DataSet:
    """The data set preprocessed in ``data_dir`` (its ``metadata.json`` names it)."""
    return get(DatasetInfo.load(data_dir).dataset)


def default_model(data_dir: str | os.PathLike) -> str:
    """The default model of the data set preprocessed in ``data_dir``."""
    return dataset_of(data_dir).default_model


__all__ = [
    "DataSet",
    "DataSetError",
    "ModelSpec",
    "PipelineDefaults",
    "PluginModel",
    "dbpedia",
    "dataset_of",
    "get",
    "gutenberg",
    "mnist",
    "tfrecord",
]
