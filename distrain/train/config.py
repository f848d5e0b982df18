"""Configuration of a training run: the run spec (mode and scale) and the trainer settings."""

from __future__ import annotations

import dataclasses
import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from distrain.base.errors import ConfigError
from distrain.datasets import is_user_model
from distrain.learning.models import model_names
from distrain.learning.precision import PRECISIONS
from distrain.train.modes import mode_class, mode_for, mode_names

# Horovod controllers for sync runs (see TrainConfig.controller).
CONTROLLERS = ("auto", "gloo", "mpi")
# What a non-finite training loss does (see TrainConfig.on_nan, distrain.train.nonfinite).
ON_NAN = ("stop", "continue")
# The settings a pipeline takes as parameters (its parameter check too; the train component
# takes every setting); the others keep TrainConfig's defaults there.
PIPELINE_SETTINGS = (
    "model",
    "epochs",
    "until_plateau",
    "batch_size",
    "learning_rate",
    "seed",
    "controller",
    "export",
)
# TrainConfig's fields that say where and what, not how: every other field is a setting.
_NOT_SETTINGS = ("data_dir", "output_dir", "run")


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


def _model_names() -> tuple:
    """The registered models' names (the choices of :attr:`TrainConfig.model`)."""
    return tuple(model_names())


# Checks of a setting's value: (holds, what the message says after the setting's name).
AT_LEAST_1 = (lambda v: v >= 1, "must be at least 1")
POSITIVE = (lambda v: v > 0, "must be positive")


def _zero_or_positive(zero: str) -> tuple:
    return (lambda v: v >= 0, f"must be 0 ({zero}) or positive")


def setting(default, help: str, *, check=None, choices=None, flag=None, **field_kwargs):
    """A config field declared once: its default, help text, check and command-line flag.

    The type is the field's annotation. :meth:`TrainConfig.check` applies ``check`` and
    ``choices``; :mod:`distrain.base.flags` derives the flag of ``distrain train`` from the rest.

    Args:
        default: The default (a callable: the ``default_factory``; ``dataclasses.MISSING``:
            required).
        help: What the setting does, one or a few sentences (the flag's help).
        check: ``(holds, message)``: the value is refused unless ``holds(value)``, with
            ``"NAME MESSAGE, got VALUE"``.
        choices: The allowed values, or a callable returning them.
        flag: argparse keywords of the flag that differ from the derived ones (``nargs``,
            ``const``, ``metavar``, the flag's ``name``).
        **field_kwargs: Passed to :func:`dataclasses.field`.
    """
    metadata = {"help": help, "check": check, "choices": choices, "flag": dict(flag or {})}
    if callable(default) and not isinstance(default, type):
        field_kwargs["default_factory"] = default
    elif default is not dataclasses.MISSING:
        field_kwargs["default"] = default
    return field(metadata=metadata, **field_kwargs)


@dataclass(frozen=True)
class TrainConfig:
    """Settings of one training run; the same for every mode.

    Each field is declared once, with its type, default, help text and check
    (:func:`setting`): ``distrain train``'s flags (:mod:`distrain.base.flags`), the steps'
    keyword arguments (:func:`distrain.steps.train`, :func:`distrain.steps.check_parameters`)
    and the check below derive from them; ``distrain train --help`` lists them.
    """

    data_dir: str = setting(
        dataclasses.MISSING,
        "preprocessed data: metadata.json and TFRecord shards per split",
        flag={"name": "--data"},
    )
    output_dir: str = setting(
        dataclasses.MISSING,
        "where the model, checkpoints and history.json go",
        flag={"name": "--output"},
    )
    run: RunSpec = setting(
        lambda: RunSpec("single"),
        "the mode and scale, MODE:WORKERS[:key=value...], e.g. single:1, sync:2, async:2:ps=1, "
        "syncreplicas:3:aggregate=2 or sync:3:min=2 (elastic)",
    )
    model: str = setting(
        "mlp",
        "model name for the data set, or the user's FILE.py:FUNCTION or package.module:FUNCTION "
        "(@TASK after it names a task other than classification; see docs/your-model.md)",
        choices=_model_names,
    )
    epochs: int = setting(
        5,
        "passes over the training split (each worker sees 1/N of it per epoch); "
        "the most, with --until-plateau",
        check=AT_LEAST_1,
    )
    schedule_epochs: int = setting(
        0,
        "the epochs the learning rate's schedule spans (a language model's decay and cosine "
        "anneal, SGD's linear decay to zero); 0: --epochs. A search's rung trains the first "
        "epochs of the last rung's schedule, so that a survivor resumes its own checkpoint",
        check=_zero_or_positive("--epochs"),
    )
    batch_size: int = setting(64, "examples per step per worker", check=AT_LEAST_1)
    learning_rate: float = setting(1e-3, "base learning rate for one worker", check=POSITIVE)
    scale_learning_rate: bool = setting(
        True,
        "multiply the learning rate by the number of workers whose gradients are combined per "
        "step (sync: N; syncreplicas: the aggregate), as Horovod recommends",
    )
    warmup_epochs: float = setting(
        0.0,
        "linear scaling's gradual warm-up (Goyal et al. 2017): the rate rises linearly from "
        "the base learning rate to the scaled one (scale_learning_rate) over this many "
        "epochs' updates, then stays; 0: none. With scale_learning_rate it is the "
        "lr_scaling=linear rule for sync:N (docs/modes.md)",
        check=(lambda v: v >= 0, "must be 0 (none) or a number of epochs"),
    )
    seed: int = setting(0, "seed of the initial weights and the data order")
    threads_per_worker: int = setting(
        0,
        "TensorFlow intra-op threads per worker process; 0 gives each worker an equal share "
        "of this machine's cores",
        check=_zero_or_positive("automatic"),
    )
    precision: str = setting(
        "auto",
        "compute precision of the models that opt in to bfloat16 (every other model computes "
        "in float32): bfloat16 runs their matrix products in bfloat16 with "
        "float32 variables, updates and logits; auto: bfloat16 where the processor has native "
        "bfloat16 (AVX-512 BF16 or AMX) and there is no GPU, else float32. Scores and samples "
        "are computed in float32 either way",
        choices=PRECISIONS,
    )
    checkpoint_every_epochs: int = setting(
        1, "checkpoint at the end of every this many epochs (and of the last)", check=AT_LEAST_1
    )
    checkpoint_every_steps: int = setting(
        500,
        "also checkpoint every this many global steps (updates of the variables) inside an "
        "epoch; 0: only at epoch ends. Rank 0 / the chief writes; a rerun in the same output "
        "directory resumes from the newest readable checkpoint and ends at the same total "
        "step count",
        check=_zero_or_positive("epoch ends only"),
    )
    restart: bool = setting(
        False,
        "start over from step 0 in an output directory that holds checkpoints: they are set "
        "aside (checkpoints.before-restart, history.before-restart.json) and history.json "
        "says restarted. Without it a rerun resumes, and a checkpoint made with other "
        "settings that change the updates (learning rate, schedule, batch size, run spec, "
        "precision, seed, the data, the model file) is refused, naming each. Every start "
        "with it starts over: leave it off a rerun that should resume",
    )
    validation_freq: int = setting(
        1,
        "validate at the end of every this many epochs (and of the last), as Keras's "
        "validation_freq; the other epochs' records have no validation numbers",
        check=AT_LEAST_1,
    )
    until_plateau: int = setting(
        0,
        "patience: stop when the validation loss has not improved over this many "
        "evaluations whose scored weights changed (3 if the flag has no value; an epoch "
        "whose scored weights no exchange moved, as an EASGD centre's, is not counted) and "
        "give the model the best epoch's weights back (epochs is then the most); 0: off, "
        "train every epoch. Every epoch is validated; history.json's until_plateau.reason "
        "says why the run stopped",
        check=(lambda v: v >= 0, "must be 0 (off) or a patience"),
        flag={"nargs": "?", "const": 3, "metavar": "PATIENCE"},
    )
    min_exchanges: int = setting(
        0,
        "until plateau: no stop before the scored weights have taken this many exchanges "
        "(every update in most modes; EASGD's centre and averaged replicas move only at "
        "an exchange); 0: the mode's rule, one epoch's worth at the mode's period "
        "(docs/modes.md)",
        check=(lambda v: v >= 0, "must be 0 (the mode's rule) or a number of exchanges"),
    )
    on_nan: str = setting(
        "stop",
        "what a NaN or infinite training loss does, checked at every step of every rank or "
        "worker: stop ends the run at the first one with one line naming the run, rank, "
        "epoch and step (a permanent error, exit 2), and nothing is saved after it; "
        "continue trains on, as Keras without TerminateOnNaN, and the log and history.json "
        "say so",
        choices=ON_NAN,
    )
    export: bool = setting(
        False,
        "export a SavedModel with serving signatures on the data set's serialized "
        "tf.train.Examples (docs/production.md): distrain train exports its run into "
        "OUTPUT/saved_model; a pipeline (on there by default) exports the run its verdict "
        "picks, after the gate, and pushes it to serving_dir",
    )
    dump_rank_weights: bool = setting(
        False,
        "every rank writes its final weights to weights/rank<r>.npz (to check that ranks agree)",
    )
    start_timeout: int = setting(
        120, "seconds to wait for all worker processes to start", check=AT_LEAST_1
    )
    deadline: int = setting(
        3 * 24 * 3600,
        "seconds before a local run is stopped (its processes print their stacks first) and "
        "fails with a transient error: a run that hangs in a way nothing else catches ends "
        "in three days by default; 0: none",
        check=(lambda v: v >= 0, "must be 0 (none) or a number of seconds"),
    )
    progress_seconds: int = setting(
        30,
        "rank 0 (the chief) prints a progress line with an ETA at most every this many "
        "seconds, at a checkpoint or an epoch's end, and in a Kubeflow Trainer TrainJob "
        "reports the same progress to the TrainJob's status (trainerStatus); 0: neither",
        check=_zero_or_positive("none"),
    )
    operation_timeout: int = setting(
        300,
        "seconds a process may wait on another: PS modes, one session call (a stopped "
        "parameter server ends the run instead of hanging it); local Horovod and single runs, "
        "a process that has not run at all (stopped, frozen: its heartbeat stopped) ends the "
        "run naming it, or is dropped from an elastic run; a retry resumes",
        check=AT_LEAST_1,
    )
    elastic_commit_steps: int = setting(
        10,
        "elastic sync runs: the state (variables, step, the epoch's progress) is committed in "
        "memory every this many steps; after a lost worker the others go back to the last commit",
        check=AT_LEAST_1,
    )
    controller: str = setting(
        "auto",
        "sync runs: how Horovod's ranks coordinate and allreduce on this machine. mpi: under "
        "mpirun, as the MPI Operator runs them on a cluster; gloo: Horovod's own TCP "
        "transport; auto: MPI when this Horovod build has it and the run is not elastic "
        "(elastic Horovod needs gloo), else gloo",
        choices=CONTROLLERS,
    )
    idle_horovod_threads: bool = setting(
        False,
        "sync runs, ranks without a GPU: run Horovod's background thread (and MPI's progress "
        "threads) at the kernel's idle priority, taking a core only when TensorFlow's threads "
        "leave it (distrain.train.worker.start_horovod), instead of preempting the compute at "
        "every cycle's wake-up. Off by default: on 2 shared cores its effect on sync "
        "efficiency was not told apart from the run-to-run drift",
    )

    def __post_init__(self) -> None:
        if isinstance(self.run, str):
            object.__setattr__(self, "run", RunSpec.parse(self.run))
        elif isinstance(self.run, dict):
            run = self.run
            options = tuple(dict(run.get("options") or {}).items())
            object.__setattr__(self, "run", RunSpec(run["mode"], run["workers"], options))
        self.check()
        self.run.impl.check_config(self)

    def check(self) -> None:
        """Each setting's declared check and choices (:func:`setting`), in field order.

        Raises:
            ConfigError: The first setting that fails them.
        """
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            choices = f.metadata.get("choices")
            if choices is not None:
                allowed = choices() if callable(choices) else choices
                if value not in allowed and not (f.name == "model" and is_user_model(value)):
                    raise ConfigError(
                        f"unknown {f.name} {value!r}; expected one of {', '.join(allowed)}"
                    )
            check = f.metadata.get("check")
            if check is not None and not check[0](value):
                raise ConfigError(f"{f.name} {check[1]}, got {value!r}")

    @classmethod
    def settings(cls) -> tuple:
        """The fields that are settings of a run (all but the data, output and run spec)."""
        return tuple(f for f in dataclasses.fields(cls) if f.name not in _NOT_SETTINGS)

    @property
    def threads(self) -> int:
        """Intra-op threads for each worker process."""
        if self.threads_per_worker:
            return self.threads_per_worker
        return max(1, (os.cpu_count() or 1) // self.run.processes)

    @property
    def schedule_span(self) -> int:
        """The epochs the learning rate's schedule spans: ``schedule_epochs``, else ``epochs``."""
        return self.schedule_epochs or self.epochs

    @property
    def effective_learning_rate(self) -> float:
        """The learning rate after scaling by the number of combined gradients."""
        if not self.scale_learning_rate:
            return self.learning_rate
        return self.learning_rate * self.run.impl.gradients_per_update()

    def rate_schedule(self, updates_per_epoch: int) -> dict:
        """The optimizer's warm-up arguments (:class:`distrain.learning.optim.Adam`).

        Goyal et al.'s gradual warm-up: from the base rate to :attr:`effective_learning_rate`
        over ``warmup_epochs`` epochs of ``updates_per_epoch`` updates (none: empty).
        """
        if not self.warmup_epochs:
            return {}
        return {
            "warmup_updates": max(1, round(self.warmup_epochs * updates_per_epoch)),
            "warmup_from": self.learning_rate,
        }

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
