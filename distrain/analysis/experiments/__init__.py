"""Experiments: the seed papers' studies as configurations a user reruns, each ending in a report.

An experiment is one module here (as a mode is one in ``train/modes/`` and a data set one
in ``datasets/``), registered by name. It declares, per scale, what it runs (an
:class:`ExperimentConfig`: the data, and one :class:`Point` per training run with its
model, run spec, epochs and seed) and how its results read (:meth:`Experiment.analyse`:
tables, figures and sentences computed from the numbers). The configuration is written to
``experiment.json`` and reruns exactly from it (:func:`load_config`).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from distrain import datasets
from distrain.base.errors import ConfigError
from distrain.learning.models import model_spec
from distrain.train.config import RunSpec, TrainConfig

SCALES = ("tiny", "small", "full")
# Experiments that ship with distrain, in the order the CLI lists them.
BUILT_IN = ("consistency", "averaging", "parallelism", "scaling")
FORMAT_VERSION = 1

_REGISTRY: dict[str, type[Experiment]] = {}


@dataclass(frozen=True)
class Point:
    """One training run of an experiment.

    Attributes:
        dataset: The data set it trains on.
        model: The data set's model.
        run: The run spec (``MODE:WORKERS[:OPTION=VALUE...]``), stored in its canonical
            form (every option spelled out) so that a rerun cannot read a default differently.
        epochs: Passes over the training split.
        batch_size: Examples per step per worker.
        learning_rate: Base learning rate.
        seed: Seed of the weights and of the order of the examples.
        knobs: What the study varies at this point (``{"period": 8, "init": "shared"}``),
            which the analysis groups by.
        threads: TensorFlow's threads in each of the run's processes (0: the cores
            shared out among them).
    """

    dataset: str
    model: str
    run: str
    epochs: int
    batch_size: int
    learning_rate: float
    seed: int = 0
    knobs: dict = field(default_factory=dict)
    threads: int = 0

    def key(self) -> tuple:
        """What identifies the point's result: a training history carries the same."""
        return (self.dataset, self.model, self.run, self.seed, self.epochs, self.threads)

    def settings(self) -> dict:
        """The point as :class:`TrainConfig` fields (its run spec, model, epochs, ...)."""
        return {
            "run": self.run,
            "model": self.model,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "seed": self.seed,
            "threads_per_worker": self.threads,
        }

    def params(self) -> dict:
        """The point as a pipeline loop item (the training step's arguments)."""
        return {
            "model": self.model,
            "run": self.run,
            "epochs": self.epochs,
            "batch_size": self.batch_size,
            "learning_rate": self.learning_rate,
            "seed": self.seed,
            "threads": self.threads,
        }


@dataclass(frozen=True)
class DataSource:
    """Where a data set's raw files come from, and the seed of its sample and split.

    Attributes:
        dataset: The data set.
        source: ``sample`` (generated), ``download`` or a directory.
        sample_size: Size of a generated sample (0: the data set's default).
    """

    dataset: str
    source: str = "sample"
    sample_size: int = 0


@dataclass(frozen=True)
class ExperimentConfig:
    """Everything an experiment ran: enough to run it again exactly.

    Attributes:
        experiment: The experiment's name.
        scale: ``tiny`` (tests), ``small`` (minutes on a laptop) or ``full``.
        seed: Seed of the generated samples and of the train/validation split.
        data: The data sets' sources.
        points: The training runs.
        settings: The experiment's own analysis settings (a target accuracy, ...).
        notes: What the scale left out, in words the report repeats.
        version: Format version of the file.
    """

    experiment: str
    scale: str
    seed: int
    data: tuple[DataSource, ...]
    points: tuple[Point, ...]
    settings: dict = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    version: int = FORMAT_VERSION

    def datasets(self) -> list[str]:
        """The data sets, in the order of :attr:`data`."""
        return [d.dataset for d in self.data]

    def source(self, dataset: str) -> DataSource:
        """The source of ``dataset``."""
        for d in self.data:
            if d.dataset == dataset:
                return d
        raise ConfigError(f"{self.experiment}: no data source for {dataset}")

    def points_of(self, dataset: str) -> list[Point]:
        """The points that train on ``dataset``."""
        return [p for p in self.points if p.dataset == dataset]

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)

    @classmethod
    def from_dict(cls, raw: dict) -> ExperimentConfig:
        """Reads a configuration back, checking every field; unknown fields are refused."""
        raw = dict(raw)
        if raw.get("version", FORMAT_VERSION) != FORMAT_VERSION:
            raise ConfigError(f"experiment config version {raw['version']}, expected 1")
        try:
            data = tuple(DataSource(**d) for d in raw.pop("data"))
            points = tuple(Point(**p) for p in raw.pop("points"))
            raw["notes"] = tuple(raw.get("notes", ()))
            cfg = cls(data=data, points=points, **raw)
        except (KeyError, TypeError) as err:
            raise ConfigError(f"experiment config: {err}") from err
        return cfg.checked()

    def checked(self) -> ExperimentConfig:
        """This configuration with canonical run specs; refuses what cannot run.

        Raises:
            ConfigError: An unknown experiment, scale, data set or model, a bad run spec, a
                point on a data set without a source, or two points that are the same run.
        """
        get(self.experiment)  # an unknown experiment is refused
        if self.scale not in SCALES:
            raise ConfigError(f"scale must be one of {', '.join(SCALES)}, got {self.scale!r}")
        sources = self.datasets()
        points, seen = [], set()
        for p in self.points:
            if p.dataset not in sources:
                raise ConfigError(f"point {p.model} {p.run}: no data source for {p.dataset}")
            try:
                model_spec(p.dataset, p.model)
            except ValueError as err:  # an unknown model, with the data set's list
                raise ConfigError(f"point {p.model} {p.run}: {err}") from err
            try:  # the settings' own checks, as the training step will make them
                TrainConfig(data_dir="-", output_dir="-", **p.settings())
            except ConfigError as err:
                raise ConfigError(f"point {p.model} {p.run}: {err}") from err
            canonical = dataclasses.replace(p, run=str(RunSpec.parse(p.run)))
            if canonical.key() in seen:
                raise ConfigError(f"two points are the same run: {canonical.key()}")
            seen.add(canonical.key())
            points.append(canonical)
        return dataclasses.replace(self, points=tuple(points))


def load_config(path: str | Path) -> ExperimentConfig:
    """An ``experiment.json`` as written by a run, checked."""
    try:
        raw = json.loads(Path(path).read_text())
    except json.JSONDecodeError as err:
        raise ConfigError(f"{path}: not JSON ({err})") from err
    return ExperimentConfig.from_dict(raw)


class Experiment:
    """A study: what it runs at each scale and how its results read.

    Subclasses set :attr:`name`, :attr:`title` and :attr:`paper`, and implement
    :meth:`config` and :meth:`analyse`. The data sets it runs on declare it
    (:attr:`distrain.datasets.DataSet.experiments`).
    """

    name = ""
    title = ""
    paper = ""  # the seed paper it reruns

    @property
    def datasets(self) -> tuple[str, ...]:
        """The names of the data sets it runs on (those that declare it)."""
        return tuple(d.name for d in datasets.serving(self.name))

    def dataset(self):
        """The one data set it runs on (:class:`distrain.datasets.DataSet`)."""
        return datasets.serving(self.name)[0]

    def config(self, scale: str = "small", seed: int = 0) -> ExperimentConfig:
        """The configuration at ``scale``."""
        raise NotImplementedError

    def analyse(self, config: ExperimentConfig, results: list, figures: bool = True) -> dict:
        """The report's parts from the results (each a ``report.Result``).

        ``figures=False`` leaves the figures out (tests of the sentences).

        Returns:
            ``{"sentences": [...], "tables": [Table], "figures": [(title, figure)],
            "numbers": {...}}``; the sentences are computed from the numbers.
        """
        raise NotImplementedError


def register(cls: type[Experiment]) -> type[Experiment]:
    """Class decorator: makes an experiment available by its name."""
    if not cls.name:
        raise ValueError(f"{cls.__name__} has no name")
    _REGISTRY[cls.name] = cls
    return cls


def _load_built_in() -> None:
    for module in BUILT_IN:
        importlib.import_module(f"distrain.analysis.experiments.{module}")


def names() -> list[str]:
    """Every registered experiment's name, the built-in ones first."""
    _load_built_in()
    return sorted(_REGISTRY, key=lambda n: BUILT_IN.index(n) if n in BUILT_IN else len(BUILT_IN))


def get(name: str) -> Experiment:
    """The experiment called ``name``."""
    _load_built_in()
    if name not in _REGISTRY:
        raise ConfigError(f"unknown experiment {name!r}; expected one of {', '.join(names())}")
    return _REGISTRY[name]()
