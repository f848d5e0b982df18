"""Training modes as plugins: one module per mode, registered by name.

A mode is one :class:`Mode` subclass in one module of this package, as Beam keeps one
package per runner behind a name. It parses its own run-spec options, names the engine
that starts its processes on this machine and on Kubernetes (one process, Horovod's
ranks in :mod:`distrain.train.horovod`, or parameter servers in
:mod:`distrain.train.ps`), trains in the processes it started, and names its columns in
the comparison. Nothing outside this package branches
on a mode's name: the launcher, the Kubernetes objects and the comparison ask the mode.

Adding a mode: a module here with a :func:`register`-ed subclass, its name in
:data:`BUILT_IN`, and a test (docs/modes.md, "Adding a mode"). Another package adds modes
without touching this one: a :class:`Mode` subclass as an entry point of the group
``distrain.modes`` (:mod:`distrain.base.plugins`), loaded with the built-in modes.
"""

from __future__ import annotations

import importlib
import threading
from pathlib import Path
from typing import ClassVar

from distrain.base import plugins
from distrain.base.errors import ConfigError
from distrain.train.engine import ONE_PROCESS, Engine, Process

# The modules of the built-in modes, in the order the comparison lists them.
BUILT_IN = (
    "single",
    "sync",
    "elastic",
    "asynchronous",
    "syncreplicas",
    "ssp",
    "easgd",
    "avg",
    "tensor",
    "pipeline",
    "hybrid",
)

_REGISTRY: dict[str, type[Mode]] = {}
_LOADED = False
_LOADING = threading.RLock()  # re-entrant: a mode's module may ask for another mode


def register(cls: type[Mode]) -> type[Mode]:
    """Class decorator: makes ``cls`` the mode named ``cls.name``.

    Raises:
        ConfigError: Another mode already has the name.
    """
    held = _REGISTRY.get(cls.name)
    if held is not None and held is not cls:
        raise ConfigError(f"mode {cls.name!r} is already registered ({held.__module__})")
    _REGISTRY[cls.name] = cls
    return cls


def _accept_plugin(name: str, obj: object, origin: str) -> None:
    if not (isinstance(obj, type) and issubclass(obj, Mode)):
        raise plugins.PluginError(f"expected a Mode subclass, got {obj!r}")
    if obj.name != name:
        raise plugins.PluginError(f"its class names itself {obj.name!r}, the entry point {name!r}")
    register(obj)


def _load() -> None:
    """Imports the built-in modes once, then the modes of other packages' entry points.

    A module imported on its own registers only itself. Under a lock: a thread that asks
    while another imports waits for every mode (the benchmark suite starts runs from
    threads).
    """
    global _LOADED
    with _LOADING:
        if not _LOADED:
            for module in BUILT_IN:
                importlib.import_module(f"{__name__}.{module}")
            _LOADED = True
            plugins.load(plugins.MODES, _accept_plugin)


def mode_class(name: str) -> type[Mode]:
    """The mode registered as ``name``.

    Raises:
        ConfigError: No such mode.
    """
    _load()
    if name not in _REGISTRY:
        broken = plugins.broken_named(plugins.MODES, name)
        if broken is not None:
            raise ConfigError(
                f"mode {name!r}: its plugin (from {broken.origin}) failed to load: {broken.error}"
            )
        raise ConfigError(f"unknown mode {name!r}; expected one of {', '.join(mode_names())}")
    return _REGISTRY[name]


def mode_names() -> list[str]:
    """Every registered mode's name: the built-in ones in :data:`BUILT_IN`'s order, then others."""
    _load()

    def rank(name: str) -> int:
        module = _REGISTRY[name].__module__.rsplit(".", 1)[-1]
        return BUILT_IN.index(module) if module in BUILT_IN else len(BUILT_IN)

    return sorted(_REGISTRY, key=rank)


def mode_for(spec) -> Mode:
    """The mode that runs ``spec`` (a :class:`distrain.train.config.RunSpec`)."""
    return mode_class(spec.mode).variant(spec.options_dict())(spec)


class Mode:
    """A way of training: its spec options, its engine, its training, its columns.

    The mode names its :attr:`engine` (one process, Horovod's ranks, or parameter
    servers), which starts its processes here and on Kubernetes; the mode adds only what
    departs from it.

    Args:
        spec: The run spec (already checked by :meth:`check`).
    """

    #: The name in run specs (``MODE:WORKERS[:key=value...]``).
    name: ClassVar[str] = ""
    #: A run spec of this mode, small and valid (the contract tests run it; docs may show
    #: it). Empty: ``NAME:N``, N its fixed worker count or 2.
    example: ClassVar[str] = ""
    #: Run-spec options: key -> meaning. :meth:`check` gives their defaults and types.
    options: ClassVar[dict[str, str]] = {}
    #: The spec's fixed worker count, if it has one (single: 1).
    fixed_workers: ClassVar[int | None] = None
    #: Options that may be given as bare values after the worker count, in this order
    #: (``hybrid:2:2`` is ``hybrid:2:model=2``).
    positional: ClassVar[tuple[str, ...]] = ()
    #: Whether a language model's state is carried from one batch to the next: stream
    #: models (:mod:`distrain.learning.lm`) then train on contiguous streams, one per batch row.
    #: Modes that do not carry it train them on shuffled windows from a zero state.
    carries_state: ClassVar[bool] = False
    #: How the run's processes start and exchange (:class:`distrain.train.engine.Engine`).
    engine: ClassVar[Engine] = ONE_PROCESS
    #: Whether each worker's update is applied without waiting for the others, so that a
    #: gradient's staleness grows with the workers, unbounded (async's): the plan measures
    #: such a mode's steps at the planned workers' staleness instead of carrying them over.
    unbounded_staleness: ClassVar[bool] = False

    def __init__(self, spec):
        self.spec = spec

    # ---- the spec ----------------------------------------------------------------------

    @classmethod
    def variant(cls, options: dict) -> type[Mode]:
        """The class that runs a spec with these options (sync with ``min`` is elastic)."""
        return cls

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        """Checks a spec's options and fills their defaults; returns them typed.

        Raises:
            ConfigError: An option this mode does not know, or a bad value.
        """
        if cls.fixed_workers is not None and workers != cls.fixed_workers:
            raise ConfigError(
                f"{cls.name} mode runs exactly {cls.fixed_workers} worker, got {workers}"
            )
        for key in options:
            if key not in cls.options:
                takes = ", ".join(f"{k}=N" for k in cls.options) or "no options"
                raise ConfigError(f"{cls.name} mode has no option {key!r} (it takes {takes})")
        return dict(options)

    @staticmethod
    def integer(options: dict, key: str, default: int | None = None) -> int | None:
        """``options[key]`` as an integer (``default`` when absent).

        Raises:
            ConfigError: Not an integer.
        """
        value = options.get(key, default)
        if value is None or isinstance(value, int):
            return value
        try:
            return int(str(value))
        except ValueError:
            raise ConfigError(f"{key}={value!r}: expected an integer") from None

    def check_config(self, cfg) -> None:
        """Refuses trainer settings this mode cannot honour (a :class:`TrainConfig` check).

        Raises:
            ConfigError: A setting the mode cannot honour.
        """

    def check_model(self, cfg, model) -> None:
        """Refuses a built model this mode cannot train (default: none is refused).

        The training step asks it of a model of the user's code before any process starts.

        Raises:
            ConfigError: One line naming the layer the mode cannot handle.
        """

    def check_optimizer(self, cfg, optimizer) -> None:
        """Refuses a model file's tf-keras optimizer this mode cannot apply (default: none).

        The training step asks it before any process starts
        (:func:`distrain.learning.choices.check`).

        Raises:
            ConfigError: One line naming the mode and the optimizer's setting.
        """

    @property
    def parameter_servers(self) -> int:
        """Parameter-server processes the run has."""
        return 0

    def processes(self) -> int:
        """Training processes the run has (its ranks, or workers besides parameter servers)."""
        return self.spec.workers

    def gradients_per_update(self) -> int:
        """Batches whose gradients make one update (the learning rate is scaled by it)."""
        return 1

    def min_exchanges(self, updates_per_epoch: int) -> int:
        """Exchanges of the scored weights before an until-plateau stop (the default rule).

        One epoch's worth at the mode's period. By default every update moves the scored
        weights (an exchange), so the rule never holds back a stop that patience allows:
        patience needs at least one epoch after the best. Modes whose scored weights
        move only at an exchange (easgd's centre, avg's average) say otherwise.
        """
        return updates_per_epoch

    def short_name(self) -> str:
        """The name in tables: ``mode:workers`` and what makes the run a different one."""
        return f"{self.spec.mode}:{self.spec.workers}"

    # ---- processes ---------------------------------------------------------------------

    def local_processes(self, cfg, config_path: Path, logs: Path) -> list[Process]:
        """The processes of a run on this machine (one of them ``main``): the engine's."""
        return self.engine.local_processes(self, cfg, config_path, logs)

    def needs_cluster(self) -> bool:
        """Whether, on Kubernetes, the run needs pods of its own (else the step's pod runs it)."""
        return self.processes() > 1  # hybrid:1:2 is one data group of two ranks

    def kubernetes_objects(self, cfg, k, name: str, config_path: str) -> list[dict]:
        """The Kubernetes objects the run becomes: the engine's.

        Raises:
            ConfigError: The mode cannot run as a cluster job, or not with these settings.
        """
        return self.engine.kubernetes_objects(self, cfg, k, name, config_path)

    def trainjob_objects(self, cfg, k, name: str, config_path: str) -> list[dict]:
        """The objects the run becomes with ``launcher=trainjob`` (Kubeflow Trainer v2).

        The engine's: a mode that Trainer v2.3 has no runtime for (the parameter-server
        modes: Trainer dropped TFJob) keeps its Jobs.

        Raises:
            ConfigError: The mode cannot run as a cluster job, or not with these settings.
        """
        return self.engine.trainjob_objects(self, cfg, k, name, config_path)

    def check_kubernetes(self, cfg) -> None:
        """Refuses, before any work, settings this mode cannot honour on Kubernetes."""
        self.engine.check_kubernetes(self, cfg)

    # ---- training (in a process the mode started) -------------------------------------

    def train(self, cfg) -> dict:
        """Trains in this process, in the role the mode gave it; returns the history."""
        raise NotImplementedError

    # ---- the cost model ------------------------------------------------------------------

    def predicted_step(self, t1: float, prof: dict, batch: int, link: dict | None):
        """The cost model's seconds of one of this run's steps (:mod:`distrain.base.costmodel`).

        Args:
            t1: One process's step on one core with the same model and batch per worker,
                stretched by :func:`distrain.base.costmodel.contention` when the run's
                processes share cores.
            prof: The model's :func:`distrain.base.costmodel.profile`.
            batch: Examples per step per worker.
            link: ``bytes_per_second`` and ``latency_seconds`` of the run's link (None:
                not measured).

        Returns:
            Seconds, or None: no equation for this mode, or it needs a link.
        """
        return None

    # ---- the comparison ------------------------------------------------------------------

    @classmethod
    def columns(cls, run: dict, history: dict) -> dict:
        """This mode's cells of the comparison table for one run.

        Args:
            run: The run's ``history["run"]``.
            history: The run's history.
        """
        return cls.engine.columns(run, history)
