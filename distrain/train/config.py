"""Configuration of a training run: the run spec (mode and scale) and the trainer settings."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

MODES = ("single", "sync", "async", "syncreplicas")
# Modes that run on parameter servers.
PS_MODES = ("async", "syncreplicas")
# Horovod controllers for sync runs (see TrainConfig.controller).
CONTROLLERS = ("auto", "gloo", "mpi")
MODELS = ("mlp", "cnn", "fasttext", "logreg", "lstm")
# The runs a pipeline compares unless told otherwise: every mode once.
DEFAULT_RUNS = ["single:1", "sync:2", "async:2:ps=1", "syncreplicas:3:aggregate=2"]


class ConfigError(ValueError):
    """A run spec or a training setting is invalid."""


class TrainingError(RuntimeError):
    """Training could not run or did not finish."""


@dataclass(frozen=True)
class RunSpec:
    """One distributed-training configuration to run and compare.

    The string form is ``MODE:WORKERS[:ps=P][:aggregate=A][:min=M]``, for example
    ``single:1``, ``sync:2``, ``async:2:ps=1``, ``syncreplicas:3:aggregate=2`` or
    ``sync:3:min=2`` (elastic).

    Attributes:
        mode: ``single`` (one process), ``sync`` (Horovod ring-allreduce), ``async``
            (parameter-server SGD) or ``syncreplicas`` (N of M gradients aggregated per step).
        workers: Worker processes (``single`` has exactly one).
        parameter_servers: Parameter-server processes (PS modes only; default 1).
        replicas_to_aggregate: Gradients aggregated per step (``syncreplicas`` only;
            default: all workers).
        min_workers: ``sync`` only: elastic Horovod. The run goes on while at least this
            many workers are alive (a lost worker's rank is dropped, training continues
            from the last state commit); None: every worker is needed.
    """

    mode: str
    workers: int = 1
    parameter_servers: int = 0
    replicas_to_aggregate: int | None = None
    min_workers: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"unknown mode {self.mode!r}; expected one of {', '.join(MODES)}")
        if not isinstance(self.workers, int) or self.workers < 1:
            raise ConfigError(
                f"{self.mode}: workers must be a positive integer, got {self.workers}"
            )
        if self.mode == "single" and self.workers != 1:
            raise ConfigError(f"single mode runs exactly 1 worker, got {self.workers}")
        if self.mode in PS_MODES:
            if self.parameter_servers < 1:
                object.__setattr__(self, "parameter_servers", 1)
        elif self.parameter_servers:
            raise ConfigError(f"{self.mode} mode has no parameter servers")
        if self.mode == "syncreplicas":
            agg = self.replicas_to_aggregate or self.workers
            if not 1 <= agg <= self.workers:
                raise ConfigError(
                    f"syncreplicas: replicas_to_aggregate must be between 1 and workers "
                    f"({self.workers}), got {agg}"
                )
            object.__setattr__(self, "replicas_to_aggregate", agg)
        elif self.replicas_to_aggregate is not None:
            raise ConfigError(f"{self.mode} mode does not aggregate replicas")
        if self.min_workers is not None:
            if self.mode != "sync":
                raise ConfigError(f"{self.mode} mode is not elastic: min=M is for sync runs")
            if not 1 <= self.min_workers <= self.workers:
                raise ConfigError(
                    f"sync: min workers must be between 1 and workers ({self.workers}), "
                    f"got {self.min_workers}"
                )

    @property
    def name(self) -> str:
        """The short name shown in tables: ``mode:workers``."""
        if self.min_workers is not None:
            return f"{self.mode}:{self.workers}:min={self.min_workers}"
        return f"{self.mode}:{self.workers}"

    @property
    def elastic(self) -> bool:
        """Whether the run goes on after losing workers (elastic Horovod)."""
        return self.min_workers is not None

    def __str__(self) -> str:
        parts = [self.mode, str(self.workers)]
        if self.mode in PS_MODES:
            parts.append(f"ps={self.parameter_servers}")
        if self.mode == "syncreplicas":
            parts.append(f"aggregate={self.replicas_to_aggregate}")
        if self.min_workers is not None:
            parts.append(f"min={self.min_workers}")
        return ":".join(parts)

    @classmethod
    def parse(cls, text: str) -> RunSpec:
        """Parses ``MODE:WORKERS[:ps=P][:aggregate=A]``.

        Raises:
            ConfigError: The text is not a valid run spec.
        """
        parts = [p.strip() for p in str(text).strip().split(":")]
        if not parts or not parts[0]:
            raise ConfigError(f"empty run spec {text!r}")
        mode = parts[0]
        workers = 1
        if len(parts) > 1:
            if not re.fullmatch(r"-?\d+", parts[1]):
                raise ConfigError(
                    f"run spec {text!r}: workers must be an integer, got {parts[1]!r}"
                )
            workers = int(parts[1])
        kwargs: dict[str, int] = {}
        keys = {
            "ps": "parameter_servers",
            "aggregate": "replicas_to_aggregate",
            "min": "min_workers",
        }
        for extra in parts[2:]:
            key, _, value = extra.partition("=")
            if key not in keys or not re.fullmatch(r"-?\d+", value):
                raise ConfigError(
                    f"run spec {text!r}: expected ps=N, aggregate=N or min=N after the worker "
                    "count, "
                    f"got {extra!r}"
                )
            kwargs[keys[key]] = int(value)
        return cls(mode=mode, workers=workers, **kwargs)

    def to_dict(self) -> dict:
        """The spec as a JSON-ready dict, with its name."""
        return {"name": self.name, "spec": str(self), **dataclasses.asdict(self)}


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
        model: Model name for the data set (``mlp`` or ``cnn`` for MNIST).
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
        dump_rank_weights: Every rank writes its final weights to ``weights/rank<r>.npz``
            (used to check that ranks agree).
        start_timeout: Seconds to wait for all worker processes to start.
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
    dump_rank_weights: bool = False
    start_timeout: int = 120
    elastic_commit_steps: int = 10
    controller: str = "auto"
    idle_horovod_threads: bool = False

    def __post_init__(self) -> None:
        if isinstance(self.run, str):
            object.__setattr__(self, "run", RunSpec.parse(self.run))
        elif isinstance(self.run, dict):
            run = {k: v for k, v in self.run.items() if k not in ("name", "spec")}
            object.__setattr__(self, "run", RunSpec(**run))
        if self.model not in MODELS:
            raise ConfigError(f"unknown model {self.model!r}; expected one of {', '.join(MODELS)}")
        for name in (
            "epochs",
            "batch_size",
            "checkpoint_every_epochs",
            "start_timeout",
            "elastic_commit_steps",
        ):
            if getattr(self, name) < 1:
                raise ConfigError(f"{name} must be at least 1, got {getattr(self, name)}")
        if self.learning_rate <= 0:
            raise ConfigError(f"learning_rate must be positive, got {self.learning_rate}")
        if self.checkpoint_every_steps < 0:
            raise ConfigError("checkpoint_every_steps must be 0 (epoch ends only) or positive")
        if self.threads_per_worker < 0:
            raise ConfigError("threads_per_worker must be 0 (automatic) or positive")
        if self.controller not in CONTROLLERS:
            raise ConfigError(
                f"unknown controller {self.controller!r}; expected one of {', '.join(CONTROLLERS)}"
            )
        if self.controller == "mpi" and self.run.elastic:
            raise ConfigError(f"{self.run.name}: elastic Horovod runs need the gloo controller")

    @property
    def threads(self) -> int:
        """Intra-op threads for each worker process."""
        if self.threads_per_worker:
            return self.threads_per_worker
        return max(1, (os.cpu_count() or 1) // self.run.workers)

    @property
    def effective_learning_rate(self) -> float:
        """The learning rate after scaling by the number of combined gradients."""
        if not self.scale_learning_rate:
            return self.learning_rate
        if self.run.mode == "sync":
            return self.learning_rate * self.run.workers
        if self.run.mode == "syncreplicas":
            return self.learning_rate * (self.run.replicas_to_aggregate or 1)
        return self.learning_rate

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
