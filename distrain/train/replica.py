"""One process's copy of the model: optimizer, checkpoints, evaluation and the training step.

Every mode trains through one of these (a parameter-server chief keeps one as the copy
it checkpoints and evaluates). What a mode adds, a collective for sync ranks or the
parameter servers, it passes in; the lines where it matters are marked ``[sync]``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distrain.base.errors import ConfigError, TrainingError
from distrain.datasets import texts as read_texts
from distrain.learning import lm, precision
from distrain.learning.choices import make_optimizer, recorded, training_task
from distrain.learning.inputs import make_dataset, shard_size
from distrain.learning.lm import (
    StreamScorer,
    random_resets,
    stream_batches_per_epoch,
    stream_dataset,
)
from distrain.learning.models import load_info, model_spec
from distrain.learning.tasks import CLASSIFICATION
from distrain.train.config import TrainConfig
from distrain.train.fingerprint import SETTINGS, differences
from distrain.train.fingerprint import settings as run_settings
from distrain.train.nonfinite import LossWatch, check_weights

VAL_BATCH = 512


@dataclass
class Group:
    """The processes that train one model together (a sync run's ranks; else just this one).

    Attributes:
        rank: This process's rank in the group (which shard of the data it reads).
        size: Processes in the group.
        hvd: ``horovod.tensorflow`` when the group allreduces (sync), else None.
        process_set: The group's Horovod process set, when it is not the whole world
            (a hybrid run's data-parallel group).
        world_rank: This process's rank among all of the run's (who writes the history
            and the model), when it differs from ``rank``.
    """

    rank: int = 0
    size: int = 1
    hvd: object = None
    process_set: object = None
    world_rank: int | None = None

    @property
    def collectives(self) -> dict:
        """Keyword arguments that keep a Horovod collective inside the group."""
        return {} if self.process_set is None else {"process_set": self.process_set}

    def sums(self, *values: float) -> list[float]:
        """Each value summed over the group."""
        if self.hvd is None:
            return list(values)
        import tensorflow as tf

        summed = self.hvd.allreduce(  # [sync]
            tf.constant(values, tf.float64), op=self.hvd.Sum, **self.collectives
        )
        return [float(v) for v in summed.numpy()]

    def gather(self, value: float) -> list[float]:
        """``value`` from each process of the group, in rank order."""
        if self.hvd is None:
            return [value]
        import tensorflow as tf

        gathered = self.hvd.allgather(  # [sync]
            tf.constant([value], tf.float64), **self.collectives
        )
        return [float(v) for v in gathered.numpy()]


def batch_gradients(model, variables, x, y, task=None, clip_norm: float = 0.0):
    """One batch's summed loss, correct count and gradients: every mode's step computes these.

    Built in a graph (a traced step, or a parameter-server worker's graph). The gradients
    come from ``tf.gradients`` with each op's gradients gated (grouped before they are
    used), as TensorFlow's graph optimizers compute theirs: ungated, oneDNN fuses a
    convolution's filter and bias gradients into one kernel, which made the suite's CNN
    step 4-6 % (a traced step) to 10 % (a parameter-server worker's) slower on the
    development machine (BENCHMARKS.md).

    Args:
        model: A Keras model.
        variables: The variables to differentiate by (the trainable ones).
        x: Features.
        y: Targets.
        task: What the model learns (:mod:`distrain.learning.tasks`; default: classification).
        clip_norm: Clip the gradients to this global norm (0: not clipped).
    """
    import tensorflow as tf

    task = task or CLASSIFICATION
    outputs = model(x, training=True)
    losses = task.training_losses(y, outputs)  # the user's class weights, if any
    objective = tf.reduce_mean(losses)
    if model.losses:  # the layers' penalties (an L2 regulariser), as Keras's fit adds them
        objective += tf.add_n(model.losses)
    grads = tf.gradients(objective, variables, gate_gradients=True)
    if clip_norm:
        grads, _ = tf.clip_by_global_norm(grads, clip_norm)
    return tf.reduce_sum(losses), tf.reduce_sum(task.hits(y, outputs)), grads


def allreduce_gradients(hvd, process_set=None):
    """[sync] The gradients' mean over the Horovod ranks (as ``DistributedGradientTape``).

    ``process_set``: only over these ranks (a hybrid run's data-parallel group).
    """
    kwargs = {} if process_set is None else {"process_set": process_set}

    def reduce(grads):
        return [hvd.allreduce(g, op=hvd.Average, **kwargs) for g in grads]

    return reduce


class Replica:
    """The model, its optimizer, the version and epoch counters, checkpoints and validation.

    Args:
        cfg: The run's configuration.
        group: The processes training together (default: this one alone).
        learning_rate: The optimizer's rate (default: the config's effective one).
        run_cfg: The run's configuration as given, when ``cfg`` is this rank's variant of
            it (``avg``'s own seed per rank): the checkpoints' fingerprint is of the run's.
    """

    #: Whether a language model's validation scores the contiguous text with a stateful
    #: copy of the model (a split model's layers have no stateful copy).
    scores_text = True

    def __init__(
        self,
        cfg: TrainConfig,
        group: Group | None = None,
        learning_rate=None,
        run_cfg: TrainConfig | None = None,
    ):
        import tensorflow as tf
        import tf_keras as keras

        self.cfg, self.tf, self.keras = cfg, tf, keras
        self.run_cfg = run_cfg or cfg
        # What a resume did not check (a checkpoint of an older distrain), for the history.
        self.notes: list[str] = []
        self.group = group or Group()
        self.out = Path(cfg.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.info = load_info(cfg.data_dir, cfg.model)  # as the model reads the data
        spec = model_spec(self.info.dataset, cfg.model)
        # The model's task, with the user's loss and class weights when the file has them.
        self.task = training_task(spec, self.info)
        # What the user's file chose (loss, optimizer, class weights), for the history.
        self.user_choices = recorded(spec, self.info)
        self.labels_per_example = self.task.labels_per_example(self.info)
        # A stream language model's clipping and decay, and whether it trains on
        # contiguous streams with its state carried (the modes that carry state).
        self.lm = spec.stream
        self.streams = self.lm is not None and cfg.run.impl.carries_state
        if self.streams:  # an example is a row of a stream batch: bptt characters
            self.labels_per_example = self.lm.bptt
        model = spec.build(self.info, cfg.seed)
        # What the model chose from the data (its size), for the run's opening line.
        self.chosen = spec.chosen(self.info) if spec.chosen else ""
        if self.streams:
            model = lm.recurrent_copy(model, cfg.batch_size)  # stateful: a row per stream
        self.model = self.build_model(model)
        # [sync] [syncreplicas] the rate is scaled by the gradients averaged per update.
        # A user's optimizer (the model file's) has its own rate and schedule.
        updates = self.batches_per_epoch()
        self.optimizer = make_optimizer(
            spec,
            self.info,
            learning_rate or cfg.effective_learning_rate,
            examples=cfg.batch_size,
            run_updates=updates * cfg.schedule_span,
            **(self.lm.schedule(updates, cfg.schedule_span) if self.lm else {}),
            **cfg.rate_schedule(updates),  # [sync] linear scaling's warm-up
        )
        self.optimizer.build(self.model.trainable_variables)
        # The parameter version: +1 for every update applied to the variables.
        self.version = tf.Variable(0, dtype=tf.int64, trainable=False, name="version")
        self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        # Examples trained on so far, and in the current epoch: a run whose batches per
        # update change (elastic) resumes mid-epoch from these.
        self.examples = tf.Variable(0, dtype=tf.int64, trainable=False, name="examples")
        self.epoch_examples = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch_ex")
        # What shapes the variables and decides the updates, saved in every checkpoint: a
        # resume checks it first.
        self.fingerprint = self.model_fingerprint()
        self.fingerprint_var = tf.Variable(
            json.dumps(self.fingerprint, sort_keys=True), trainable=False, name="fingerprint"
        )
        self.ckpt = tf.train.Checkpoint(
            model=self.model,
            optimizer=self.optimizer,
            epoch=self.epoch_var,
            version=self.version,
            examples=self.examples,
            epoch_examples=self.epoch_examples,
            fingerprint=self.fingerprint_var,
        )
        # TensorFlow writes a checkpoint's files under temporary names and only then
        # points the ``checkpoint`` state file at it: a run killed while saving leaves
        # the previous checkpoints as they were.
        self.manager = tf.train.CheckpointManager(self.ckpt, str(self.checkpoint_dir()), 3)
        self.set_group(self.group)
        # What this process's steps do with a non-finite loss (on_nan).
        self.losses = LossWatch(cfg.on_nan, cfg.run.name, f"rank {self.rank}", self.log)

    def build_model(self, model):
        """The model this process trains, from the data set's (a split mode's share of it)."""
        return model

    @property
    def rank(self) -> int:
        """This process's rank among all of the run's (0 writes the history and the model)."""
        g = self.group
        return g.rank if g.world_rank is None else g.world_rank

    @property
    def writes_checkpoints(self) -> bool:
        """Whether this process saves checkpoints (rank 0: it holds the whole model)."""
        return self.rank == 0

    def checkpoint_dir(self) -> Path:
        """Where this process's checkpoints go."""
        return self.out / "checkpoints"

    @property
    def step(self) -> int:
        """Updates applied so far."""
        return int(self.version.numpy())

    @property
    def epoch(self) -> int:
        """Epochs finished."""
        return int(self.epoch_var.numpy())

    def set_epoch(self, epoch: int) -> None:
        self.epoch_var.assign(epoch)

    def set_group(self, group: Group) -> None:
        """The group changed (an elastic run's): validation is read in shares of the new size."""
        self.group = group
        self.val_ds = make_dataset(
            self.info,
            "validation",
            VAL_BATCH,
            shard=(group.size, group.rank),  # [sync]
        )
        self.__dict__.pop("_val_iterator", None)

    def batches_per_epoch(self) -> int:
        """This process's training batches in one pass over its shard of the data.

        [sync] Every rank runs the same number of steps on its 1/size (floor), or the last
        step's allreduce would wait forever.
        """
        g = self.group
        if self.streams:
            shard = (g.size, g.rank)
            return stream_batches_per_epoch(self.info, self.cfg.batch_size, shard, self.lm.bptt)
        return max(1, self.info.splits["train"] // g.size // self.cfg.batch_size)

    def log(self, message: str) -> None:
        """A line on the run's output, from rank 0 only."""
        if self.rank == 0:
            print(f"[{self.cfg.run.name}] {message}", flush=True)

    # ---- training ----------------------------------------------------------------------

    def train_shard(self, seed: int, **selection):
        """This process's training batches: shuffled with ``seed``, repeated, full batches.

        [sync] Each rank reads a disjoint 1/size of the split. ``selection``: more of
        :func:`make_dataset`'s choice of records (``common_every``, ``held_out``). A
        stream model in a mode that carries state reads contiguous streams instead, in
        order (:func:`distrain.learning.lm.stream_dataset`).
        """
        if self.streams:
            g = self.group
            return stream_dataset(
                self.info,
                "train",
                self.cfg.batch_size,
                shard=(g.size, g.rank),  # [sync] each rank its own part of the text
                repeat=True,
                seq_len=self.lm.bptt,
            )
        return make_dataset(
            self.info,
            "train",
            self.cfg.batch_size,
            shard=(self.group.size, self.group.rank),  # [sync]
            shuffle=True,
            seed=seed,
            repeat=True,
            drop_remainder=True,
            **selection,
        )

    def gradients(self, x, y, reduce=None):
        """Forward and backward pass on one batch: (summed loss, correct count, gradients).

        Args:
            x: Features.
            y: Labels.
            reduce: Combines the gradients with the other processes' ([sync] Horovod's
                allreduce, :func:`allreduce_gradients`).
        """
        clip = self.lm.clip_norm if self.lm else 0.0
        variables = self.model.trainable_variables
        loss_sum, correct, grads = batch_gradients(self.model, variables, x, y, self.task, clip)
        if reduce is not None:
            grads = reduce(grads)
        return loss_sum, correct, grads

    def train_step(self, reduce=None):
        """The traced step: gradients, one update, the version; returns (loss sum, correct)."""
        tf = self.tf

        per_epoch = self.batches_per_epoch() if self.streams else 0
        # Each process its own rows' resets ([sync] a rank's rows are its own streams).
        seed = self.cfg.seed * 1000 + self.rank

        @tf.function
        def train_step(x, y):
            if self.streams and self.lm.reset_probability:
                random_resets(self.model, self.lm, seed, self.version, per_epoch)
            loss_sum, correct, grads = self.gradients(x, y, reduce)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
            self.version.assign_add(1)
            return loss_sum, correct

        return train_step

    # ---- evaluation --------------------------------------------------------------------

    def eval_function(self):
        """The traced validation step: one trace, for every batch shape and epoch."""
        if not hasattr(self, "_eval_step"):
            tf, model, task = self.tf, self.model, self.task

            @tf.function(input_signature=list(self.val_ds.element_spec))
            def eval_step(x, y):
                return task.sums(y, model(x, training=False))

            self._eval_step = eval_step
        return self._eval_step

    def evaluate(self) -> tuple[float, float]:
        """Validation loss and accuracy per label, over the whole split (every rank's share).

        A language model is scored over the contiguous validation text, each character
        once (:class:`distrain.learning.lm.StreamScorer`), as the evaluate step scores it; a split
        model (:attr:`scores_text` off) on the validation windows, its evaluate step on the
        text.
        """
        if self.task.text_scoring and self.scores_text:
            return self.evaluate_text()
        eval_step = self.eval_function()
        if "_val_iterator" not in self.__dict__:
            # One iterator over the repeated split: each evaluation takes exactly one pass.
            g = self.group
            rows = shard_size(self.info.splits["validation"], g.size, g.rank)  # [sync]
            self._val_batches = -(-rows // VAL_BATCH)
            self._val_iterator = iter(self.val_ds.repeat())
        loss_sum = correct = count = 0.0
        for _ in range(self._val_batches):
            x, y = next(self._val_iterator)
            batch_loss, batch_correct = eval_step(x, y)
            loss_sum += float(batch_loss)
            correct += float(batch_correct)
            count += int(np.prod(y.shape))
        loss_sum, correct, count = self.group.sums(loss_sum, correct, count)  # [sync]
        return loss_sum / max(count, 1), correct / max(count, 1)

    def evaluate_text(self) -> tuple[float, float]:
        """A language model's validation nats and accuracy per character (every rank's rows)."""
        if "_scorer" not in self.__dict__:
            self._texts = list(read_texts(self.cfg.data_dir, "validation").values())
            streams = self.lm.evaluation_streams if self.lm else 32
            context = int(self.info.metadata["seq_len"])
            self._scorer = StreamScorer(self.model, streams=streams, context=context)
        self._scorer.set_weights(self.model)
        g = self.group
        score = self._scorer.score(self._texts, self.info.metadata["vocabulary"], (g.size, g.rank))
        nats, correct, count = g.sums(score.nats, score.correct, score.count)  # [sync]
        return nats / max(count, 1), correct / max(count, 1)

    # ---- checkpoints and the saved model ----------------------------------------------

    def model_fingerprint(self) -> dict:
        """What shapes this process's variables and decides the updates to come.

        The data set, the model, every variable's shape, and the run's settings that
        change the arithmetic (:func:`distrain.train.fingerprint.settings`). Stored in each
        checkpoint; a checkpoint with another one is not this run's to go on from.
        """
        return {
            "dataset": self.info.dataset,
            "model": self.cfg.model,
            "variables": [list(v.shape) for v in self.model.weights],
            SETTINGS: run_settings(
                self.run_cfg,
                self.optimizer,
                precision.of_model(self.model),
                self.info.metadata,
                self.lm,
                self.user_choices,
            ),
        }

    def stored_fingerprint(self, path: str) -> dict | None:
        """The fingerprint saved in a checkpoint (None: one from before they were saved).

        Raises:
            Exception: The checkpoint cannot be read (TensorFlow's error, as it comes).
        """
        key = "fingerprint/.ATTRIBUTES/VARIABLE_VALUE"
        reader = self.tf.train.load_checkpoint(path)
        if not reader.has_tensor(key):
            return None
        return json.loads(reader.get_tensor(key).decode())

    def fingerprint_differences(self, theirs: dict) -> list[str]:
        """How a checkpoint's fingerprint differs from this run's: the model, then settings.

        The settings are named ``NAME OLD → NEW``. A checkpoint of an older distrain that
        records no settings (or not all of today's) is accepted as far as it goes: a note
        (:attr:`notes`, logged) names what was not checked.
        """
        ours = self.fingerprint
        found = [
            f"{k}: {theirs.get(k)!r} in the checkpoint, {ours[k]!r} now"
            for k in ("dataset", "model")
            if theirs.get(k) != ours[k]
        ]
        old, new = theirs.get("variables", []), ours["variables"]
        if len(old) != len(new):
            found.append(f"{len(old)} variables in the checkpoint, {len(new)} now")
        else:
            found += [
                f"variable {i}: shape {a} in the checkpoint, {b} now"
                for i, (a, b) in enumerate(zip(old, new, strict=True))
                if a != b
            ][:3]
        changed, unrecorded = differences(theirs.get(SETTINGS, {}), ours[SETTINGS])
        return found + changed, unrecorded

    def check_fingerprint(self, path: str, theirs: dict | None) -> None:
        """Refuses a checkpoint whose fingerprint differs from this run's, naming how.

        Raises:
            ConfigError: The checkpoint is of another model, data or settings (a
                permanent error: a retry finds the same checkpoint), in one line naming
                each difference.
        """
        if theirs is None:
            self._note(f"checkpoint {path} has no fingerprint (an older version); not checked")
            return
        found, unrecorded = self.fingerprint_differences(theirs)
        if found:
            raise ConfigError(
                f"{path}: a checkpoint of another model, data or settings ("
                + "; ".join(found)
                + "); resume with the settings it was made with, start over with --restart "
                "(its checkpoints are set aside), or use a new --output"
            )
        if unrecorded:
            self._note(
                f"checkpoint {path} does not record {', '.join(unrecorded)} (written by an "
                "older distrain): resumed without checking them; the checkpoints from here "
                "on record them"
            )

    def _note(self, message: str) -> None:
        self.notes.append(message)
        self.log(message)

    def _checkpoints_on_disk(self) -> list[str]:
        """The checkpoints in the folder by their own files (``ckpt-N.index``), oldest first."""
        found = []
        for index in self.checkpoint_dir().glob("ckpt-*.index"):
            number = index.name[len("ckpt-") : -len(".index")]
            if number.isdigit():
                found.append((int(number), str(index)[: -len(".index")]))
        return [path for _, path in sorted(found)]

    def _rebuild_state(self) -> None:
        """Rewrites an unreadable ``checkpoint`` state file from the checkpoints' files.

        TensorFlow reads a garbled state file as no checkpoint at all, and the run would
        start over from step 0 and overwrite the old checkpoints.

        Raises:
            TrainingError: The state file cannot be rewritten.
        """
        tf = self.tf
        on_disk = self._checkpoints_on_disk()
        if not on_disk:
            return
        state = self.checkpoint_dir() / "checkpoint"
        self.log(
            f"{state} is missing or unreadable but {len(on_disk)} checkpoint(s) are there; "
            f"rebuilt it from their files (newest: {on_disk[-1]})"
        )
        # With their times: the manager keeps (and later rotates) only checkpoints newer
        # than the state's "last preserved" time.
        times = [Path(f"{path}.index").stat().st_mtime for path in on_disk]
        try:
            tf.compat.v1.train.update_checkpoint_state(
                str(self.checkpoint_dir()),
                on_disk[-1],
                all_model_checkpoint_paths=on_disk,
                all_model_checkpoint_timestamps=times,
                last_preserved_timestamp=min(times) - 1.0,
            )
        except Exception as err:  # noqa: BLE001 (any failure: refuse, naming the file)
            raise TrainingError(f"{state}: unreadable and cannot be rebuilt ({err})") from err
        self.manager = tf.train.CheckpointManager(self.ckpt, str(self.checkpoint_dir()), 3)

    def restore(self) -> str | None:
        """Restores the newest readable checkpoint; returns its path (None: there is none).

        A checkpoint that cannot be read (a damaged file) is reported and the one before
        it is tried; when none can be read the run fails rather than start over silently.
        An unreadable state file is rebuilt from the checkpoints' files. A checkpoint of
        another model or configuration (its fingerprint) is refused.

        Raises:
            TrainingError: No checkpoint in the directory can be read.
            ConfigError: The newest readable checkpoint is of another model or
                configuration.
        """
        if self.writes_checkpoints:
            self._remove_unfinished_saves()
        if not self.manager.checkpoints:
            self._rebuild_state()
        candidates = list(reversed(self.manager.checkpoints))
        errors = []
        for path in candidates:
            try:
                theirs = self.stored_fingerprint(path)
            except Exception as err:  # noqa: BLE001 (any damage: try an older checkpoint)
                self._unreadable(path, err, errors)
                continue
            self.check_fingerprint(path, theirs)  # another model's: refused, not skipped
            try:
                self.ckpt.restore(path).expect_partial()
                return path
            except Exception as err:  # noqa: BLE001 (any damage: try an older checkpoint)
                self._unreadable(path, err, errors)
        if errors:
            raise TrainingError(
                f"no readable checkpoint in {self.checkpoint_dir()}: " + "; ".join(errors)
            )
        return None

    def restart(self) -> dict:
        """Starts over from step 0: nothing restored, the checkpoints set aside (``--restart``).

        The process that writes the checkpoints moves their folder whole to
        ``<folder>.before-restart`` (one an earlier restart set aside is removed first,
        and the log says so); the others only restore nothing.

        Returns:
            For the history: the folder the checkpoints went to (None: there were none),
            the newest one's step, and how its fingerprint differs from this run's.
            Empty for a process that writes no checkpoints.
        """
        if not self.writes_checkpoints:
            return {}
        folder = self.checkpoint_dir()
        if not folder.exists():
            self.log("restart: no checkpoints to set aside; training starts from step 0")
            return {"set_aside": None, "from_step": None, "differences": []}
        self._remove_unfinished_saves()
        found = self._checkpoints_on_disk()
        step, changed = None, []
        if found:
            step = int(Path(found[-1]).name[len("ckpt-") :])
            try:
                theirs = self.stored_fingerprint(found[-1])
                changed = (
                    self.fingerprint_differences(theirs)[0]
                    if theirs is not None
                    else ["no fingerprint (an older version)"]
                )
            except Exception as err:  # noqa: BLE001 (it is set aside either way)
                changed = [f"unreadable ({type(err).__name__})"]
        aside = folder.with_name(folder.name + ".before-restart")
        if aside.exists():
            shutil.rmtree(aside)
            self.log(f"restart: removed {aside}, set aside by an earlier restart")
        folder.rename(aside)
        self.manager = self.tf.train.CheckpointManager(self.ckpt, str(folder), 3)
        newest = f"newest {Path(found[-1]).name} at step {step}" if found else "none readable"
        why = "; ".join(changed) if changed else "same settings"
        self.log(
            f"restart: set aside {len(found)} checkpoint(s) of {folder} ({newest}; {why}) "
            f"in {aside}; training starts from step 0"
        )
        return {"set_aside": str(aside), "from_step": step, "differences": changed}

    def _remove_unfinished_saves(self) -> None:
        """Removes what a save cut short left (``ckpt-N_temp``: the run was killed saving).

        TensorFlow writes a checkpoint into ``ckpt-N_temp`` and renames its files into
        place when they are complete, so such a folder is never a checkpoint; left alone,
        one would stay beside the run's checkpoints for ever.
        """
        for leftover in sorted(self.checkpoint_dir().glob("ckpt-*_temp")):
            shutil.rmtree(leftover, ignore_errors=True)
            self.log(f"removed {leftover}: a checkpoint save that did not finish")

    def _unreadable(self, path: str, err: BaseException, errors: list[str]) -> None:
        first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
        errors.append(f"{path}: {type(err).__name__}: {first_line}")
        self.log(f"checkpoint {path} is unreadable ({first_line}); trying an older one")

    def refuse_non_finite(self, what: str, values=None) -> None:
        """With ``on_nan=stop``, refuses to write non-finite weights (``what``: the file).

        A peer's non-finite gradient reaches this process's weights through the update
        before the peer's own check stops the run: what is saved never holds them.

        Raises:
            NonFiniteLoss: A weight is NaN or infinite.
        """
        if self.losses.stops:
            values = values if values is not None else [v.numpy() for v in self.model.weights]
            check_weights(values, f"[{self.cfg.run.name}] rank {self.rank}: {what}")

    def checkpoint(self, step: int, engine=None) -> None:
        """Rank 0's (the chief's) checkpoint at update ``step``."""
        if self.writes_checkpoints:  # [sync] rank 0 only ([tensor] each part's holder)
            if engine is not None:
                engine.refresh()  # [ps] the parameter servers' values, workers at the limit
            self.refuse_non_finite(f"the checkpoint at step {step} in {self.checkpoint_dir()}")
            self.manager.save(checkpoint_number=step)

    def save_model(self) -> None:
        """``model.keras`` (rank 0), and every rank's weights if the config asks."""
        self.refuse_non_finite(f"{self.out / 'model.keras'} after step {self.step}")
        if self.cfg.dump_rank_weights:
            weights_dir = self.out / "weights"
            weights_dir.mkdir(exist_ok=True)
            values = [v.numpy() for v in self.model.weights]
            np.savez(weights_dir / f"rank{self.rank}.npz", *values)
        if self.rank == 0:  # [sync] only rank 0 writes the model
            self.model.save(self.out / "model.keras")
