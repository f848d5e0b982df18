"""Configuration of a training run: the run spec (mode and scale) and the trainer settings."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

# Horovod controllers for sync runs (see TrainConfig.controller).
CONTROLLERS = ("auto", "gloo", "mpi")
# The runs a pipeline compares unless told otherwise: every mode once.
DEFAULT_RUNS = ["single:1", "sync:2", "async:2:ps=1", "syncreplicas:3:aggregate=2"]


class ConfigError(ValueError):
    """A run spec or a training setting is invalid."""


class TrainingError(RuntimeError):
    """Training could not run or did not finish."""


@dataclass(frozen=True)
class RunSpec:
    """One distributed-training configuration to run and compare.

    The string form is ``MODE:WORKERS[:key=value...]``, for example ``single:1``,
    ``sync:2``, ``async:2:ps=1``, ``syncreplicas:3:aggregate=2`` or ``sync:3:min=2``
    (elastic). The mode (:mod:`distrain.train.modes`) checks its options and fills their
    defaults.

    Attributes:
        mode: The mode's registered name.
        workers: Worker processes.
        options: The mode's options as ``(key, value)`` pairs, checked and complete.
    """

    mode: str
    workers: int = 1
    options: tuple = ()

    def __post_init__(self) -> None:
        from distrain.train.modes import mode_class

        cls = mode_class(self.mode)
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(
                f"{self.mode}: workers must be a positive integer, got {self.workers}"
            )
        given = dict(self.options.items() if isinstance(self.options, dict) else self.options)
        checked = cls.variant(given).check(self.workers, given)
        object.__setattr__(self, "options", tuple(sorted(checked.items())))

    def options_dict(self) -> dict:
        """The options as a dict."""
        return dict(self.options)

    def option(self, key: str, default=None):
        """One option's value."""
        return self.options_dict().get(key, default)

    @property
    def impl(self):
        """The :class:`distrain.train.modes.Mode` that runs this spec."""
        from distrain.train.modes import mode_for

        return mode_for(self)

    @property
    def name(self) -> str:
        """The short name shown in tables: ``mode:workers`` (and what sets a variant apart)."""
        return self.impl.short_name()

    @property
    def parameter_servers(self) -> int:
        """Parameter-server processes (0 for modes without)."""
        return self.impl.parameter_servers

    @property
    def processes(self) -> int:
        """Training processes (ranks or workers): ``workers``, or more (hybrid's D x M)."""
        return self.impl.processes()

    def __str__(self) -> str:
        return ":".join([self.mode, str(self.workers), *(f"{k}={v}" for k, v in self.options)])

    @classmethod
    def parse(cls, text: str) -> RunSpec:
        """Parses ``MODE:WORKERS[:key=value...]``.

        Raises:
            ConfigError: The text is not a valid run spec.
        """
        parts = [p.strip() for p in str(text).strip().split(":")]
        if not parts or not parts[0]:
            raise ConfigError(f"empty run spec {text!r}")
        mode = parts[0]
        from distrain.train.modes import mode_class, mode_names

        # A mode's positional options: bare values after the worker count (hybrid:D:M).
        positional = list(mode_class(mode).positional) if mode in mode_names() else []
        workers = 1
        if len(parts) > 1:
            if not re.fullmatch(r"-?\d+", parts[1]):
                raise ConfigError(
                    f"run spec {text!r}: workers must be an integer, got {parts[1]!r}"
                )
            workers = int(parts[1])
        options: dict[str, str] = {}
        for extra in parts[2:]:
            if "=" not in extra and positional:
                extra = f"{positional.pop(0)}={extra}"
            key, eq, value = extra.partition("=")
            if not eq or not key or not value:
                raise ConfigError(
                    f"run spec {text!r}: expected key=value after the worker count, got {extra!r}"
                )
            if key in options:  # the last would win without a word
                raise ConfigError(f"run spec {text!r}: option {key!r} given twice")
            options[key] = value
        try:
            return cls(mode=mode, workers=workers, options=tuple(options.items()))
        except ConfigError as err:
            raise ConfigError(f"run spec {text!r}: {err}") from None

    def to_dict(self) -> dict:
        """The spec as a JSON-ready dict, with its name and parameter servers."""
        return {
            "name": self.name,
            "spec": str(self),
            "mode": self.mode,
            "workers": self.workers,
            "processes": self.processes,
            "options": self.options_dict(),
            "parameter_servers": self.parameter_servers,
        }


def parse_run_specs(text: str | list[str]) -> list[RunSpec]:
    """Parses a comma-separated list (or a list) of run specs and rejects duplicates."""
    items = text.split(",") if isinstance(text, str) else list(text)
    specs = [RunSpec.parse(item) for item in items if str(item).strip()]
    if not specs:
        raise ConfigError("no run specs given")
    names = [s.name for s in specs]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ConfigError(f"duplicate runs: {', '.join(dupes)} (each mode:workers once)")
    return specs


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run; the same for every mode.

    Attributes:
        data_dir: Preprocessed data: ``metadata.json`` and TFRecord shards per split.
        output_dir: Where the model, checkpoints and ``history.json`` go.
        run: The mode and scale.
        model: One of the data set's models (default: its first).
        epochs: Passes over the training split (each worker sees 1/N of it per epoch).
        batch_size: Examples per step per worker.
        learning_rate: Base learning rate for one worker.
        scale_learning_rate: Multiply the learning rate by the number of workers whose
            gradients are combined per step (sync: N; syncreplicas: the aggregate), as
            Horovod recommends.
        seed: Seed for weights and shuffling.
        threads_per_worker: TensorFlow intra-op threads per worker process; 0 gives each
            worker an equal share of this machine's cores.
        checkpoint_every_epochs: Checkpoint at the end of every this many epochs (and of
            the last).
        checkpoint_every_steps: Also checkpoint every this many global steps (updates of
            the variables) inside an epoch; 0: only at epoch ends. Rank 0 / the chief
            writes; a rerun in the same output directory resumes from the newest readable
            checkpoint and ends at the same total step count.
        validation_freq: Validate at the end of every this many epochs (and of the
            last), as Keras's ``validation_freq``; the other epochs' records have no
            validation numbers. Validation is work the training processes wait for
            (single, sync) or share the machine with (a parameter-server chief's).
        until_plateau: Patience: stop when the validation loss has not improved for this
            many epochs and give the model the best epoch's weights back (``epochs`` is
            then the most); 0: train every epoch. Every epoch is validated.
        dump_rank_weights: Every rank writes its final weights to ``weights/rank<r>.npz``
            (used to check that ranks agree).
        start_timeout: Seconds to wait for all worker processes to start.
        operation_timeout: PS modes: seconds one session call may wait on another
            process (the sessions' ``operation_timeout_in_ms``) before the process fails
            with a transient error: a stopped parameter server ends the run (which a
            retry resumes) instead of hanging it.
        elastic_commit_steps: Elastic sync runs: the state (variables, step, the epoch's
            progress) is committed in memory every this many steps; after a lost worker
            the others go back to the last commit.
        controller: sync mode: how Horovod's ranks coordinate and allreduce on this
            machine. ``mpi``: under ``mpirun``, as the MPI Operator runs them on a cluster;
            ``gloo``: Horovod's own TCP transport; ``auto``: MPI when this Horovod build
            has it and the run is not elastic (elastic Horovod needs gloo), else gloo.
        idle_horovod_threads: sync mode, ranks without a GPU: run Horovod's background
            thread (and MPI's progress threads) at the kernel's idle priority, taking a
            core only when TensorFlow's threads leave it (see
            :func:`distrain.train.worker.start_horovod`), instead of preempting the compute
            at every cycle's wake-up. Off by default: on 2 shared cores its effect on sync
            efficiency was not told apart from the run-to-run drift (see the README).
    """

    data_dir: str
    output_dir: str
    run: RunSpec = field(default_factory=lambda: RunSpec("single"))
    model: str = "mlp"
    epochs: int = 5
    batch_size: int = 64
    learning_rate: float = 1e-3
    scale_learning_rate: bool = True
    seed: int = 0
    threads_per_worker: int = 0
    checkpoint_every_epochs: int = 1
    checkpoint_every_steps: int = 500
    validation_freq: int = 1
    until_plateau: int = 0
    dump_rank_weights: bool = False
    start_timeout: int = 120
    operation_timeout: int = 300
    elastic_commit_steps: int = 10
    controller: str = "auto"
    idle_horovod_threads: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.run, str):
            object.__setattr__(self, "run", RunSpec.parse(self.run))
        elif isinstance(self.run, dict):
            run = self.run
            options = tuple(dict(run.get("options") or {}).items())
            object.__setattr__(self, "run", RunSpec(run["mode"], run["workers"], options))
        from distrain.train.models import model_names

        if self.model not in model_names():
            raise ConfigError(
                f"unknown model {self.model!r}; expected one of {', '.join(model_names())}"
            )
        for name in (
            "epochs",
            "batch_size",
            "checkpoint_every_epochs",
            "validation_freq",
            "start_timeout",
            "operation_timeout",
            "elastic_commit_steps",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.until_plateau < 0:
            raise ConfigError(
                f"until_plateau must be 0 (off) or a patience, got {self.until_plateau}"
            )
        if self.checkpoint_every_steps < 0:
            raise ConfigError("checkpoint_every_steps must be 0 (epoch ends only) or positive")
        if self.threads_per_worker < 0:
            raise ConfigError("threads_per_worker must be 0 (automatic) or positive")
        if self.controller not in CONTROLLERS:
            raise ConfigError(
                f"unknown controller {self.controller!r}; expected one of {', '.join(CONTROLLERS)}"
            )
        self.run.impl.check_config(self)

    @property
    def threads(self) -> int:
        """Intra-op threads for each worker process."""
        if self.threads_per_worker:
            return self.threads_per_worker
        return max(1, (os.cpu_count() or 1) // self.run.processes)

    @property
    def effective_learning_rate(self) -> float:
        """The learning rate after scaling by the number of combined gradients."""
        if not self.scale_learning_rate:
            return self.learning_rate
        return self.learning_rate * self.run.impl.gradients_per_update()

    def to_json(self) -> str:
        """Serialises the config (the run spec as a dict)."""
        data = dataclasses.asdict(self)
        data["run"] = self.run.to_dict()
        return json.dumps(data, indent=2, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> TrainConfig:
        """Reads a config written by :meth:`to_json`."""
        return cls(**json.loads(text))

    def save(self, path: str | os.PathLike) -> Path:
        """Writes the config as JSON to ``path``."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json())
        return path
