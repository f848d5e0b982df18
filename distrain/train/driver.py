"""The epoch driver: epochs, checkpoint cadence, resume, timing and history, for every mode.

A mode hands the driver its *steps* (its way of making updates, a :class:`Steps`) and the
driver does the rest, as Keras's fit loop calls its callbacks: one loop, and the bookkeeping
every mode gets for free. What watches the run from inside the loop is a *hook*
(:mod:`distrain.train.hooks`): the TensorBoard event files and the progress lines and
reports, for every mode. The arithmetic of that bookkeeping is plain functions here,
tested without TensorFlow (``tests/units/test_driver.py``).
"""

from __future__ import annotations

import hashlib
import json
import os
import resource
import sys
import time
from pathlib import Path
from typing import Protocol

import numpy as np

from distrain.base.errors import ConfigError
from distrain.learning import precision
from distrain.learning.staleness import summarize
from distrain.train.config import TrainConfig
from distrain.train.hooks import Hook
from distrain.train.status import ProgressHook
from distrain.train.tensorboard import TensorBoardHook


def next_stop(epoch: int, position: int, per_epoch: int, every: int) -> int:
    """Where the segment that starts at ``position`` of ``epoch`` ends (a position).

    At the next global update that is a multiple of ``every`` (a checkpoint), or at the
    epoch's end, whichever comes first; ``every`` 0 means epoch ends only.
    """
    if not every:
        return per_epoch
    step = epoch * per_epoch + position
    return min(per_epoch, (step // every + 1) * every - epoch * per_epoch)


def next_checkpoint(
    step: int, per_epoch: int, epochs: int, every_steps: int, every_epochs: int
) -> int:
    """The first global update at or after ``step`` where the driver writes a checkpoint.

    Mid-epoch every ``every_steps`` updates (0: never), at the end of every
    ``every_epochs``-th epoch, and at the end of training.
    """
    end = epochs * per_epoch
    epoch = -(-step // per_epoch)  # the first epoch end at or after step
    while epoch < epochs and (epoch == 0 or epoch % every_epochs):
        epoch += 1
    found = min(end, epoch * per_epoch)
    if every_steps:
        mid = -(-step // every_steps) * every_steps
        while mid < found and mid % per_epoch == 0:  # an epoch end has its own rule
            mid += every_steps
        found = min(found, mid)
    return found


def resume_point(step: int, epoch: int, per_epoch: int, epochs: int, where: str) -> tuple[int, int]:
    """(first epoch, updates already done in it) for a run restored at ``step`` after ``epoch``.

    Raises:
        ConfigError: The checkpoint does not fit epochs of ``per_epoch`` updates (the
            batch size, workers or data changed since it was written). Permanent: a
            retry finds the same checkpoint.
    """
    done = step - epoch * per_epoch
    if epoch < epochs and not 0 <= done < per_epoch:
        raise ConfigError(
            f"the checkpoint in {where} is at step {step} after {epoch} epochs, which does "
            f"not fit epochs of {per_epoch} updates: the batch size, workers or data "
            "changed; use a new output directory"
        )
    return epoch, max(done, 0)


def steady(epochs: list):
    """The epochs a run's speed is read from: all but the first, which pays for tracing.

    With one epoch there is nothing else to use.
    """
    return epochs[1:] or epochs


def steady_throughput(epochs: list[dict]) -> float:
    """Examples per second over the :func:`steady` epochs."""
    if not epochs:
        return 0.0
    steady_epochs = steady(epochs)
    examples = epochs[-1]["examples"] - (epochs[0]["examples"] if len(epochs) > 1 else 0)
    seconds = sum(e["step_seconds"] for e in steady_epochs)
    return examples / seconds if seconds else 0.0


def step_spread(durations: list[float]) -> dict:
    """Median, 10th and 90th percentile of step durations, in milliseconds."""
    ms = np.asarray(durations, dtype=np.float64) * 1e3
    p10, median, p90 = np.percentile(ms, [10, 50, 90])
    return {"count": int(ms.size), "median": float(median), "p10": float(p10), "p90": float(p90)}


def epoch_list(epochs: list[int]) -> str:
    """Epoch numbers in words, runs of consecutive ones joined: ``4-6, 9``."""
    parts: list[str] = []
    for e in sorted(epochs):
        if parts and parts[-1][1] == e - 1:
            parts[-1][1] = e
        else:
            parts.append([e, e])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in parts)


def weights_digest(weights) -> str:
    """A short digest of a model's weights (a list of arrays): equal only for equal weights."""
    h = hashlib.blake2b(digest_size=8)
    for w in weights:
        a = np.ascontiguousarray(w)
        h.update(str((a.dtype, a.shape)).encode())
        h.update(a.tobytes())
    return h.hexdigest()


class Plateau:
    """Until-plateau bookkeeping: the best validation loss, its epoch, whether to stop.

    As Keras's ``EarlyStopping(monitor="val_loss", restore_best_weights=True)``, with two
    rules no mode can fool (issue 51): patience counts only the evaluations whose scored
    weights changed since the evaluation before (an EASGD centre or averaged model that
    no exchange moved scores the same again: that is not a plateau), and the run is not
    stopped before its scored weights have taken ``min_exchanges`` exchanges. Its
    :meth:`reason` says in words why the run stopped or went on.

    Args:
        patience: Evaluations of changed weights without improvement that end training
            (0: never stop early).
        min_exchanges: Exchanges of the scored weights before which no stop is made.
    """

    def __init__(self, patience: int, min_exchanges: int = 0):
        self.patience, self.min_exchanges = patience, min_exchanges
        self.best: float | None = None
        self.best_epoch = 0
        self.last_epoch = 0
        self.digest: str | None = None  # of the weights last evaluated
        self.exchanges = 0  # of the scored weights, at the last evaluation
        self.since_best: list[int] = []  # evaluated epochs of changed weights after the best
        self.unchanged: list[int] = []  # evaluated epochs whose weights had not changed
        self.held_at: int | None = None  # the first epoch the exchanges alone held a stop

    def update(
        self,
        epoch: int,
        val_loss: float | None,
        digest: str | None = None,
        exchanges: int | None = None,
    ) -> bool:
        """Records epoch ``epoch``'s (1-based) evaluation; True if it is the best so far.

        Args:
            epoch: The epoch evaluated.
            val_loss: Its validation loss (None: not evaluated; nothing is recorded).
            digest: :func:`weights_digest` of the weights scored (None: unknown, counted
                as changed).
            exchanges: Exchanges of the scored weights so far (None: not counted).
        """
        if val_loss is None:
            return False
        self.last_epoch = epoch
        if exchanges is not None:
            self.exchanges = exchanges
        changed = digest is None or digest != self.digest
        self.digest = digest
        if not changed:  # the same weights scored again: neither better nor a plateau
            self.unchanged.append(epoch)
            return False
        if self.best is None or val_loss < self.best:
            self.best, self.best_epoch = val_loss, epoch
            self.since_best = []
            return True
        self.since_best.append(epoch)
        if self.patient_out and not self.enough_exchanges and self.held_at is None:
            self.held_at = epoch
        return False

    @property
    def patient_out(self) -> bool:
        """Whether ``patience`` evaluations of changed weights have passed since the best."""
        return bool(self.patience) and len(self.since_best) >= self.patience

    @property
    def enough_exchanges(self) -> bool:
        """Whether the scored weights have taken the exchanges a stop needs."""
        return self.exchanges >= self.min_exchanges

    @property
    def stop(self) -> bool:
        """Whether to stop: patience ran out, after the exchanges a stop needs."""
        return self.patient_out and self.enough_exchanges

    def replay(self, epochs: list[dict]) -> None:
        """The state after the epochs of a history (a resumed run's)."""
        for record in epochs:
            self.update(
                record["epoch"],
                record.get("val_loss"),
                record.get("weights_digest"),
                record.get("exchanges"),
            )

    def reason(self) -> str:
        """Why the run stopped, or why it went on to its last epoch, in checkable words."""
        if not self.patience or self.best is None:
            return "ran every epoch: no validation plateau rule"
        if self.stop:
            counted = self.since_best
            words = (
                f"stopped: validation loss did not improve over {len(counted)} evaluations "
                f"whose weights changed (epochs {epoch_list(counted)}); best "
                f"{self.best:.4f} at epoch {self.best_epoch}"
            )
            if self.min_exchanges:
                words += (
                    f"; {self.exchanges} exchanges of the scored weights (at least "
                    f"{self.min_exchanges} before a stop)"
                )
        else:
            words = (
                f"ran to epoch {self.last_epoch}: validation loss best {self.best:.4f} at "
                f"epoch {self.best_epoch}, then {len(self.since_best)} evaluation(s) of "
                f"changed weights without improvement (patience {self.patience})"
            )
            if self.held_at is not None:
                words += (
                    f"; patience ran out at epoch {self.held_at}, but the scored weights had "
                    f"taken fewer than the {self.min_exchanges} exchanges a stop needs "
                    f"({self.exchanges} by epoch {self.last_epoch})"
                )
        if self.unchanged:
            words += (
                f"; epochs {epoch_list(self.unchanged)} not counted: their scored weights "
                "had not changed since the evaluation before"
            )
        return words

    def to_dict(self) -> dict:
        """The history's ``until_plateau`` record."""
        return {
            "patience": self.patience,
            "best_epoch": self.best_epoch,
            "best_val_loss": self.best,
            "stopped_early": self.stop,
            "min_exchanges": self.min_exchanges,
            "exchanges": self.exchanges,
            "unchanged_epochs": list(self.unchanged),
            "reason": self.reason(),
        }


def atomic_write_json(path: Path, data: dict) -> None:
    """Writes ``data`` to ``path`` through a temporary file and a rename."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


class Steps(Protocol):
    """How a mode makes updates; the driver calls these, in this order.

    Attributes:
        gradients_per_update: Batches whose gradients make one update.
    """

    gradients_per_update: int

    def updates_per_epoch(self) -> int:
        """Updates that make one pass over the training data."""

    def start(self) -> None:
        """After the replica is restored, before the first update."""

    def run(self, epoch: int, position: int, stop: int) -> tuple[float, float, list[float]]:
        """Makes the epoch's updates ``position`` to ``stop``.

        Returns:
            This process's summed loss and correct count over them, and the seconds of
            each step it timed (empty when it times none).
        """

    def epoch_seconds(self, measured: float) -> float:
        """The epoch's training seconds (``measured``: the driver's clock over its segments)."""

    def epoch_totals(self, loss_sum: float, correct: float, seen: int) -> tuple[float, float, int]:
        """The epoch's totals over every worker (this process's sums in).

        A mode's steps whose ranks train on different data may also set ``rank_loss_sums``
        (each data rank's summed loss over the epoch, in rank order): the history keeps
        each one's loss per label. The ranks saw equal shares of the epoch's examples
        unless it also sets ``rank_shares`` (each one's fraction, in rank order).
        """

    def refresh(self) -> None:
        """Makes the replica's weights current, before they are evaluated, saved or checkpointed.

        A parameter-server chief copies the servers' values. The replica's step must be
        current after every :meth:`run` without it.
        """

    def epoch_note(self) -> str:
        """Extra words for the epoch's line (staleness, dropped gradients)."""

    def history(self) -> dict:
        """The mode's fields of ``history.json``."""

    def finish(self) -> None:
        """After the last epoch, before the model and the history are saved."""


def default_hooks(cfg: TrainConfig, replica) -> list[Hook]:
    """Every run's hooks: its TensorBoard event files, its progress lines and reports."""
    hooks: list[Hook] = [ProgressHook(cfg, replica)]
    if getattr(replica, "model", None) is not None:  # (test doubles of a replica have none)
        hooks.insert(0, TensorBoardHook(cfg, replica))
    return hooks


class EpochDriver:
    """Runs the epochs of one run: the same loop for every mode.

    Args:
        cfg: The run's configuration.
        replica: The run's model, optimizer, checkpoints and evaluation
            (:class:`distrain.train.replica.Replica`).
        steps: The mode's way of making updates.
        hooks: What watches the loop (default: :func:`default_hooks`).
    """

    def __init__(self, cfg: TrainConfig, replica, steps: Steps, hooks: list[Hook] | None = None):
        self.cfg, self.replica, self.steps = cfg, replica, steps
        self.hooks = default_hooks(cfg, replica) if hooks is None else list(hooks)
        self.epochs: list[dict] = []
        self.resumed_at: list[int] = []
        self.resumed_wall = 0.0
        self.step_durations: list[list[float]] = []
        self.examples_so_far: int | None = None  # set by steps whose world size varies
        self.plateau = Plateau(cfg.until_plateau, cfg.min_exchanges)
        # What a restart set aside (None: the run did not start over), and the notes of
        # earlier resumes of this run (the replica keeps this one's).
        self.restarted: dict | None = None
        self.earlier_notes: list[str] = []

    def restore(self) -> None:
        """Resumes from the newest readable checkpoint and the history written with it.

        With ``restart`` nothing is restored: the checkpoints are set aside
        (:meth:`distrain.train.replica.Replica.restart`), the history beside them goes to
        ``history.before-restart.json``, and the new history says so (``restarted``).
        """
        r = self.replica
        history_path = r.out / "history.json"
        if self.cfg.restart:
            self.restarted = r.restart()
            if r.rank == 0 and history_path.exists():
                aside = r.out / "history.before-restart.json"
                os.replace(history_path, aside)
                self.restarted["history_set_aside"] = str(aside)
            return
        path = r.restore()
        if path is None:
            return
        if history_path.exists():
            old = json.loads(history_path.read_text())
            self.epochs = old.get("epochs", [])[: r.epoch]
            self.resumed_at = list(old.get("resumed_at_steps", []))
            self.restarted = old.get("restarted")
            self.earlier_notes = list(old.get("resume_notes", []))
        self.resumed_at.append(r.step)
        self.resumed_wall = self.epochs[-1]["wall_seconds"] if self.epochs else 0.0
        self.plateau.replay(self.epochs)
        r.log(f"resumed from {path} (step {r.step}, {r.epoch} epochs done)")

    def run(self) -> dict:
        """Restores, trains every epoch left, saves; returns the history."""
        cfg, r, steps = self.cfg, self.replica, self.steps
        per_epoch = steps.updates_per_epoch()
        if not cfg.min_exchanges:  # the mode's rule (Mode.min_exchanges)
            self.plateau.min_exchanges = cfg.run.impl.min_exchanges(per_epoch)
        self.restore()
        first_epoch, done = resume_point(
            r.step, r.epoch, per_epoch, cfg.epochs, str(r.out / "checkpoints")
        )
        self.log_start()
        steps.start()
        self.call_hooks("on_train_begin")
        every = cfg.checkpoint_every_steps
        start = time.perf_counter()
        for epoch in range(first_epoch, cfg.epochs):
            if self.plateau.stop:  # a resumed run that had stopped
                break
            t0 = time.perf_counter()
            begin = position = done if epoch == first_epoch else 0
            loss_sum = correct = 0.0
            durations: list[float] = []
            while position < per_epoch:
                stop = next_stop(epoch, position, per_epoch, every)
                batch_loss, batch_correct, timed = steps.run(epoch, position, stop)
                loss_sum += batch_loss
                correct += batch_correct
                durations.extend(timed)
                position = stop
                step = epoch * per_epoch + stop
                if every and step % every == 0 and stop < per_epoch:
                    r.checkpoint(step, steps)
                self.call_hooks("on_segment_end", step)
            seconds = steps.epoch_seconds(time.perf_counter() - t0)
            seen = (per_epoch - begin) * steps.gradients_per_update * cfg.batch_size
            loss_sum, correct, seen = steps.epoch_totals(loss_sum, correct, seen)
            self.end_epoch(epoch, loss_sum, correct, seen, seconds, start, durations)
        steps.finish()
        steps.refresh()
        self.restore_best()
        r.save_model()
        history = self.history()
        if r.rank == 0:
            atomic_write_json(r.out / "history.json", history)
        self.call_hooks("on_train_end", history)
        return history

    def call_hooks(self, point: str, *args) -> None:
        """Calls each hook's ``point``; a hook that fails is told once and left out after.

        Watching a run never ends it: a hook's error (a full disk under the event files)
        costs the hook, not the training.
        """
        for hook in list(self.hooks):
            try:
                getattr(hook, point)(self, *args)
            except Exception as err:  # noqa: BLE001 (a hook never fails the run)
                self.hooks.remove(hook)
                self.replica.log(f"{type(hook).__name__} stopped: {type(err).__name__}: {err}")

    def best_weights_path(self) -> Path:
        """Where this process keeps the weights of the best validated epoch (until plateau)."""
        return self.replica.out / "best-weights" / f"rank{self.replica.rank}.npz"

    def keep_best(self) -> None:
        """Writes the model's weights as the best so far (each process its own part)."""
        path = self.best_weights_path()
        path.parent.mkdir(exist_ok=True)
        tmp = path.with_name(path.name + ".tmp.npz")
        np.savez(tmp, *self.replica.model.get_weights())
        os.replace(tmp, path)

    def restore_best(self) -> None:
        """Until plateau: the model gets the best validated epoch's weights back."""
        if not self.plateau.patience or not self.best_weights_path().exists():
            return
        with np.load(self.best_weights_path()) as saved:
            self.replica.model.set_weights([saved[f"arr_{i}"] for i in range(len(saved.files))])
        p = self.plateau
        self.replica.log(
            f"until plateau: {p.reason()}; restored epoch {p.best_epoch}'s weights "
            f"(val_loss {p.best:.4f})"
        )

    def exchanges(self) -> int:
        """Exchanges of the scored weights so far: the steps' count, else every update.

        Steps whose scored weights move only at an exchange (EASGD's centre, averaged
        replicas) counts them (``exchanges()``); in every other mode each update moves them.
        """
        count = getattr(self.steps, "exchanges", None)
        return int(count()) if count is not None else int(self.replica.step)

    def log_start(self) -> None:
        """The run's opening line: data, model, spec, batch, rate, threads."""
        cfg, r = self.cfg, self.replica
        optimizer = getattr(r, "optimizer", None)
        rate = f"lr {cfg.effective_learning_rate:g}"
        if getattr(optimizer, "is_users", False):  # its own rate: the setting does not apply
            rate = f"the model file's {type(optimizer.optimizer).__name__} (its own rate)"
        r.log(
            f"{r.info.dataset}/{cfg.model}: {r.info.splits['train']} train examples, "
            f"{cfg.run}, batch {cfg.batch_size} per worker, {rate}, "
            f"{cfg.threads} thread(s) per worker"
        )
        if getattr(r, "chosen", ""):  # what the model chose from the data's size
            r.log(f"{cfg.model}: {r.chosen}")

    def end_epoch(self, epoch, loss_sum, correct, seen, step_seconds, start, durations=()) -> None:
        """Validation, the epoch's record and line, and the chief's checkpoint.

        ``durations``: seconds of each step this epoch (the modes that time their steps):
        their spread goes into the record, and the history gives the spread over the
        epochs after the first as the run's ``step_ms``.
        """
        cfg, r, steps = self.cfg, self.replica, self.steps
        last = epoch + 1 == cfg.epochs
        val_loss = val_acc = None
        # Until plateau: every epoch is validated, its loss decides whether to go on.
        if last or (epoch + 1) % cfg.validation_freq == 0 or cfg.until_plateau:
            # Only for what reads the weights: a parameter-server chief copies them from
            # the servers, which costs their time while the workers go on.
            steps.refresh()
            val_loss, val_acc = r.evaluate()
        per_label = max(seen * r.labels_per_example, 1)
        watch = getattr(r, "losses", None)  # (test doubles of a replica have none)
        if watch is not None:
            watch.epoch(epoch + 1, loss_sum)  # on_nan=stop: before the epoch's checkpoint
        by_rank = getattr(steps, "rank_loss_sums", None)
        record = {
            "epoch": epoch + 1,
            # Losses and accuracy are per label (per character for a language model).
            "loss": loss_sum / per_label,
            "accuracy": correct / per_label,
            "val_loss": val_loss,
            "val_accuracy": val_acc,
            "wall_seconds": self.resumed_wall + time.perf_counter() - start,
            "step_seconds": step_seconds,
            # Examples in all updates so far (a resumed run counts the steps before it).
            "examples": self.examples_so_far
            if self.examples_so_far is not None
            else r.step * cfg.batch_size * steps.gradients_per_update,
        }
        if by_rank and len(by_rank) > 1:
            shares = getattr(steps, "rank_shares", None) or [1 / len(by_rank)] * len(by_rank)
            if all(shares):  # (a worker that counted no step has no loss of its own)
                # Each rank's loss per label, over the labels of its share of ``seen``.
                record["rank_loss"] = [
                    s / (per_label * f) for s, f in zip(by_rank, shares, strict=True)
                ]
        if durations:
            record["step_ms"] = step_spread(list(durations))
            self.step_durations.append(list(durations))
        digest = None
        if cfg.until_plateau and val_loss is not None:
            # Until plateau: patience counts only evaluations of weights that changed.
            model = getattr(r, "model", None)  # (test doubles of a replica may have none)
            digest = weights_digest(model.get_weights()) if model is not None else None
            record["weights_digest"] = digest
            record["exchanges"] = self.exchanges()
        self.epochs.append(record)
        r.set_epoch(epoch + 1)
        if (
            self.plateau.update(epoch + 1, val_loss, digest, record.get("exchanges"))
            and cfg.until_plateau
        ):
            self.keep_best()
        validation = (
            f"val_loss {val_loss:.4f}  val_acc {val_acc:.4f}  " if val_loss is not None else ""
        )
        r.log(
            f"epoch {epoch + 1}/{cfg.epochs}  loss {record['loss']:.4f}  "
            f"acc {record['accuracy']:.4f}  {validation}"
            f"{record['wall_seconds']:.1f}s  {seen / max(step_seconds, 1e-9):,.0f} ex/s"
            f"{steps.epoch_note()}"
        )
        if (epoch + 1) % cfg.checkpoint_every_epochs == 0 or last or self.plateau.stop:
            r.checkpoint(r.step, steps)  # by the processes that write checkpoints
            if r.rank == 0:
                atomic_write_json(r.out / "history.json", self.history())
        self.call_hooks("on_epoch_end", record, list(durations))

    def history(self) -> dict:
        """The run's history: every mode's fields, then the mode's own."""
        cfg, r, epochs = self.cfg, self.replica, self.epochs
        history = {
            "run": {**cfg.run.to_dict(), "model": cfg.model, "dataset": r.info.dataset},
            "config": json.loads(cfg.to_json()),
            "epochs": epochs,
            "train_seconds": epochs[-1]["wall_seconds"] if epochs else 0.0,
            "step_seconds": sum(e["step_seconds"] for e in epochs),
            "total_examples": epochs[-1]["examples"] if epochs else 0,
            "examples_per_second": steady_throughput(epochs),
            "global_batch_size": cfg.batch_size * self.steps.gradients_per_update,
            "steps": r.step,
            "resumed_at_steps": self.resumed_at,
            "python": sys.version.split()[0],
            # What the model computed in (the setting reaches only the models that opt in).
            "precision": precision.of_model(getattr(r, "model", None)),
            "staleness": [0] * r.step,  # modes with stale gradients say otherwise
            # The cores the run's processes shared (a local run; None: a node each).
            "host_cores": int(os.environ.get("DISTRAIN_HOST_CORES") or 0) or None,
        }
        if self.step_durations:
            # The typical step beside the mean that examples/second gives: on a shared
            # host the two part when bursts of another load slow some steps down. As for
            # examples/second, the first epoch (tracing) is left out if there are more.
            durations = steady(self.step_durations)
            history["step_ms"] = step_spread([d for epoch in durations for d in epoch])
        if cfg.until_plateau:
            history["until_plateau"] = self.plateau.to_dict()
        if self.restarted is not None:  # this run started over (--restart), from step 0
            history["restarted"] = self.restarted
        if getattr(r, "user_choices", None):  # the model file's loss, optimizer, class weights
            history["user_choices"] = r.user_choices
        notes = [*self.earlier_notes, *getattr(r, "notes", [])]
        if notes:  # what a resume could not check (a checkpoint of an older distrain)
            history["resume_notes"] = notes
        # This process's parameters and peak memory (resident set); modes that split the
        # model report every rank's instead.
        model = getattr(r, "model", None)  # (test doubles of a replica have none)
        watch = getattr(r, "losses", None)
        if model is not None:
            weights = model.trainable_variables
            history["parameters_per_rank"] = [int(sum(v.shape.num_elements() for v in weights))]
        history["peak_memory_per_rank"] = [
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # kilobytes on Linux
        ]
        if watch is not None:
            history.update(watch.history())  # on_nan, and what continue trained through
        history.update(self.steps.history())
        if "staleness_summary" not in history and any(history["staleness"]):
            history["staleness_summary"] = summarize(history["staleness"])
        return history
