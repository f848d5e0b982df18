"""The training loop: one model, input pipeline, gradient step and bookkeeping for every mode.

The mode is configuration. What differs between modes is only how a step's gradients
reach the variables, and those lines are marked, the way Horovod's examples mark theirs:

* ``# [sync]``: Horovod ring-allreduce; every rank runs this file (SPMD).
* ``# [ps]``: parameter-server modes (async, syncreplicas): the workers drive their own
  steps against the parameter servers (:mod:`distrain.train.ps`, where the rules of
  async and syncreplicas are); the chief runs the epochs here, between segments of
  updates.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from distrain.train.config import PS_MODES, TrainConfig, TrainingError
from distrain.train.inputs import DatasetInfo, make_dataset, shard_size
from distrain.train.models import build_model
from distrain.train.staleness import summarize

VAL_BATCH = 512
# [single] Training steps per traced call (fewer at an epoch's end or a checkpoint).
STEPS_PER_CALL = 16


def _atomic_write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def configure_tensorflow(cfg: TrainConfig) -> None:
    """Thread pools and seeds of a training process, before TensorFlow starts its runtime."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.random.set_seed(cfg.seed)
    np.random.seed(cfg.seed)


def train(cfg: TrainConfig) -> dict:
    """Trains in this process, in the role the mode gives it.

    ``single``: the whole run. ``sync``: one rank (``horovodrun`` starts N). ``async`` and
    ``syncreplicas``: the coordinator (chief) of a parameter-server cluster described by
    ``TF_CONFIG``; the launcher starts the worker and parameter-server processes.

    Args:
        cfg: The run's configuration.

    Returns:
        The run's history (the content of ``history.json``). A parameter-server chief
        does not return: it exits the process once its outputs are written.
    """
    configure_tensorflow(cfg)
    if cfg.run.mode not in PS_MODES:
        return _Trainer(cfg).run()
    # [ps] every process of the cluster runs this; TF_CONFIG says which role it has.
    from distrain.train.ps import Role, Worker, rule_for

    role = Role.from_environment()
    code = 0
    try:
        if role.job == "worker":
            Worker(cfg, DatasetInfo.load(cfg.data_dir), role, rule_for(cfg)).run()
        else:
            _Trainer(cfg).run()
    except BaseException:  # noqa: BLE001 (reported, then the process ends at once)
        import traceback

        traceback.print_exc()
        code = 1
    # [ps] ends here, its outputs written: a TensorFlow server's teardown can wait for
    # peers that are gone or stopped, so the process does not wait for it.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def step_spread(durations: list[float]) -> dict:
    """Median, 10th and 90th percentile of step durations, in milliseconds."""
    ms = np.asarray(durations, dtype=np.float64) * 1e3
    p10, median, p90 = np.percentile(ms, [10, 50, 90])
    return {"count": int(ms.size), "median": float(median), "p10": float(p10), "p90": float(p90)}


class _Trainer:
    """One run: setup shared by every mode, then the mode's way of applying gradients."""

    def __init__(self, cfg: TrainConfig):
        import tensorflow as tf
        import tf_keras as keras

        from distrain.train.optim import Adam

        self.cfg, self.tf, self.keras = cfg, tf, keras
        self.mode = cfg.run.mode
        self.out = Path(cfg.output_dir)
        self.out.mkdir(parents=True, exist_ok=True)
        self.info = DatasetInfo.load(cfg.data_dir)
        self.labels_per_example = int(self.info.metadata.get("labels_per_example", 1))
        self.hvd = None
        self.rank, self.size = 0, 1
        if self.mode == "sync":
            from distrain.train.worker import start_horovod

            # [sync] hvd.init(); Horovod's own threads at idle priority if the config asks.
            hvd, lowered = start_horovod(cfg.idle_horovod_threads)
            self.hvd, self.rank, self.size = hvd, hvd.rank(), hvd.size()  # [sync]
            self.idle_threads = len(lowered)
            if self.size != cfg.run.workers and not cfg.run.elastic:
                raise TrainingError(
                    f"started with {self.size} ranks, the run asks {cfg.run.workers}"
                )

        self.chief = None  # [ps] the chief's link to the parameter servers
        if self.mode in PS_MODES:
            from distrain.train.ps import Chief, Role, rule_for

            # [ps] its graph first: tf-keras refuses models made before one in a tf.Graph.
            self.chief = Chief(cfg, self.info, Role.from_environment(), rule_for(cfg))
        # [ps] the chief's model and optimizer are an eager copy of the parameter servers'
        # (distrain.train.ps.Chief fills it between segments): checkpoints, evaluation and
        # the saved model are the same files and code as in the other modes.
        self.model = build_model(self.info, cfg.model, cfg.seed)
        # [sync] [syncreplicas] the learning rate is scaled by the gradients averaged per step.
        self.optimizer = Adam(cfg.effective_learning_rate)
        self.optimizer.build(self.model.trainable_variables)
        # The parameter version: +1 for every update applied to the variables.
        self.version = tf.Variable(0, dtype=tf.int64, trainable=False, name="version")
        self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.ckpt = tf.train.Checkpoint(
            model=self.model,
            optimizer=self.optimizer,
            epoch=self.epoch_var,
            version=self.version,
        )
        # TensorFlow writes a checkpoint's files under temporary names and only then
        # points the ``checkpoint`` state file at it: a run killed while saving leaves
        # the previous checkpoints as they were.
        self.manager = tf.train.CheckpointManager(self.ckpt, str(self.out / "checkpoints"), 3)
        self.resumed_at: list[int] = []
        self.val_ds = make_dataset(
            self.info,
            "validation",
            VAL_BATCH,
            shard=(self.size, self.rank),  # [sync]
        )
        # Batches whose gradients make one update of the variables.
        self.gradients_per_update = {
            "sync": self.size,
            "syncreplicas": cfg.run.replicas_to_aggregate,
        }.get(self.mode, 1)
        self.epochs: list[dict] = []
        self.staleness: list[int] = []
        self.staleness_by_worker: dict[str, list[int]] = {}
        self.dropped = 0
        self.examples_so_far: int | None = None  # [sync, elastic] the world size varies
        self.elastic_resets = 0  # [sync, elastic] times the world changed
        self.worker_progress: dict[str, list[list[float]]] = {}
        self.step_durations: list[list[float]] = []  # [single, sync] per epoch of this process

    # ---- shared by every mode ------------------------------------------------------------

    def log(self, message: str) -> None:
        if self.rank == 0:
            print(f"[{self.cfg.run.name}] {message}", flush=True)

    def gradients(self, x, y):
        """Forward and backward pass on one batch: (summed loss, correct count, gradients)."""
        tf = self.tf
        with tf.GradientTape() as tape:
            logits = self.model(x, training=True)
            losses = self.keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
            loss = tf.reduce_mean(losses)
        if self.hvd is not None:
            tape = self.hvd.DistributedGradientTape(tape)  # [sync] allreduce-average gradients
        grads = tape.gradient(loss, self.model.trainable_variables)
        correct = tf.reduce_sum(
            tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == y, tf.float32)
        )
        return tf.reduce_sum(losses), correct, grads

    def global_sums(self, *values: float) -> list[float]:
        if self.hvd is None:
            return list(values)
        tf = self.tf
        summed = self.hvd.allreduce(tf.constant(values, tf.float64), op=self.hvd.Sum)  # [sync]
        return [float(v) for v in summed.numpy()]

    def eval_function(self):
        """The traced validation step: one trace, for every batch shape and epoch.

        [ps] Traced before training starts: every trace registers a function on every
        worker, and a worker that stalls later would stall the chief's first evaluation.
        """
        if not hasattr(self, "_eval_step"):
            tf, keras, model = self.tf, self.keras, self.model

            @tf.function(input_signature=list(self.val_ds.element_spec))
            def eval_step(x, y):
                logits = model(x, training=False)
                loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                correct = tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == y, tf.float32)
                return tf.reduce_sum(loss), tf.reduce_sum(correct)

            eval_step.get_concrete_function()
            self._eval_step = eval_step
        return self._eval_step

    def evaluate(self) -> tuple[float, float]:
        eval_step = self.eval_function()
        if not hasattr(self, "_val_iterator"):
            # One iterator for the whole run, over the repeated split: each evaluation
            # takes exactly one pass. [ps] A new iterator would register the input
            # pipeline's functions on every worker, a stalled one included.
            rows = shard_size(self.info.splits["validation"], self.size, self.rank)  # [sync]
            self._val_batches = -(-rows // VAL_BATCH)
            self._val_iterator = iter(self.val_ds.repeat())
        loss_sum = correct = count = 0.0
        for _ in range(self._val_batches):
            x, y = next(self._val_iterator)
            batch_loss, batch_correct = eval_step(x, y)
            loss_sum += float(batch_loss)
            correct += float(batch_correct)
            count += int(np.prod(y.shape))
        loss_sum, correct, count = self.global_sums(loss_sum, correct, count)
        return loss_sum / max(count, 1), correct / max(count, 1)

    def restore(self) -> None:
        """Resumes from the newest readable checkpoint, if the output directory has one.

        A checkpoint that cannot be read (a damaged file) is reported and the one before
        it is tried; when none can be read the run fails rather than start over silently.
        """
        candidates = list(reversed(self.manager.checkpoints))
        if not candidates:
            return
        errors = []
        for path in candidates:
            try:
                self.ckpt.restore(path).expect_partial()
                break
            except Exception as err:  # noqa: BLE001 (any damage: try an older checkpoint)
                first_line = str(err).strip().splitlines()[0] if str(err).strip() else ""
                errors.append(f"{path}: {type(err).__name__}: {first_line}")
                self.log(f"checkpoint {path} is unreadable ({first_line}); trying an older one")
        else:
            raise TrainingError(
                f"no readable checkpoint in {self.out / 'checkpoints'}: " + "; ".join(errors)
            )
        history_path = self.out / "history.json"
        if history_path.exists():
            old = json.loads(history_path.read_text())
            self.epochs = old.get("epochs", [])[: int(self.epoch_var)]
            self.resumed_at = list(old.get("resumed_at_steps", []))
        step = int(self.version.numpy())
        self.resumed_at.append(step)
        self.log(f"resumed from {path} (step {step}, {int(self.epoch_var)} epochs done)")

    def checkpoint(self, step: int) -> None:
        """The chief's checkpoint at global step ``step`` (rank 0 only in sync)."""
        if self.rank == 0:  # [sync] rank 0 only / [ps] the chief
            if self.chief is not None:
                self.chief.pull_from_servers()  # [ps] a consistent copy: workers at the limit
            self.manager.save(checkpoint_number=step)

    def step_checkpoint_due(self, step: int, last_of_epoch: bool) -> bool:
        """Whether global step ``step`` gets a mid-epoch checkpoint (epoch ends have theirs)."""
        k = self.cfg.checkpoint_every_steps
        return bool(k) and step % k == 0 and not last_of_epoch

    def resume_point(self, updates_per_epoch: int) -> tuple[int, int]:
        """(first epoch, updates already done in it) from the restored step and epoch.

        Raises:
            TrainingError: The checkpoint does not fit this run's epochs (its batch size,
                workers or data changed since it was written).
        """
        step, epoch = int(self.version.numpy()), int(self.epoch_var.numpy())
        done = step - epoch * updates_per_epoch
        if epoch < self.cfg.epochs and not 0 <= done < updates_per_epoch:
            raise TrainingError(
                f"the checkpoint in {self.out / 'checkpoints'} is at step {step} after "
                f"{epoch} epochs, which does not fit epochs of {updates_per_epoch} updates: "
                "the batch size, workers or data changed; use a new output directory"
            )
        return epoch, max(done, 0)

    def end_epoch(
        self, epoch: int, loss_sum, correct, seen, step_seconds, start, durations=None
    ) -> None:
        """Validation, the epoch's record and line, and the chief's checkpoint.

        ``durations``: seconds of each step this epoch (single and sync, which wait for
        every step): their spread goes into the record, and :meth:`history` gives the
        spread over the epochs after the first as the run's ``step_ms``.
        """
        val_loss, val_acc = self.evaluate()
        record = {
            "epoch": epoch + 1,
            # Losses and accuracy are per label (per character for a language model).
            "loss": loss_sum / max(seen * self.labels_per_example, 1),
            "accuracy": correct / max(seen * self.labels_per_example, 1),
            "val_loss": val_loss,
            "val_accuracy": val_acc,
            "wall_seconds": self.resumed_wall + time.perf_counter() - start,
            "step_seconds": step_seconds,
            # Examples in all updates so far (a resumed run counts the steps before it).
            "examples": self.examples_so_far
            if self.examples_so_far is not None
            else int(self.version.numpy()) * self.cfg.batch_size * self.gradients_per_update,
        }
        if durations:
            record["step_ms"] = step_spread(durations)
            self.step_durations.append(durations)
        self.epochs.append(record)
        self.epoch_var.assign(epoch + 1)
        extra = ""
        if self.mode in PS_MODES:
            stats = summarize(self.staleness)
            extra = f"  staleness mean {stats['mean']:.2f} max {stats['max']}"
            if self.mode == "syncreplicas":
                extra += f"  dropped {self.dropped}"
        self.log(
            f"epoch {epoch + 1}/{self.cfg.epochs}  loss {record['loss']:.4f}  "
            f"acc {record['accuracy']:.4f}  val_loss {val_loss:.4f}  val_acc {val_acc:.4f}  "
            f"{record['wall_seconds']:.1f}s  {seen / max(step_seconds, 1e-9):,.0f} ex/s{extra}"
        )
        last = epoch + 1 == self.cfg.epochs
        if self.rank == 0 and ((epoch + 1) % self.cfg.checkpoint_every_epochs == 0 or last):
            self.checkpoint(int(self.version.numpy()))
            _atomic_write_json(self.out / "history.json", self.history())

    def history(self) -> dict:
        epochs = self.epochs
        total = epochs[-1]["examples"] if epochs else 0
        # Steady-state throughput leaves out the first epoch, which pays for graph tracing
        # and the workers' connection set-up; with one epoch there is nothing else to use.
        steady = epochs[1:] or epochs
        steady_examples = total - (epochs[0]["examples"] if len(epochs) > 1 else 0)
        steady_seconds = sum(e["step_seconds"] for e in steady)
        cfg = self.cfg
        history = {
            "run": {**cfg.run.to_dict(), "model": cfg.model, "dataset": self.info.dataset},
            "config": json.loads(cfg.to_json()),
            "epochs": epochs,
            "train_seconds": epochs[-1]["wall_seconds"] if epochs else 0.0,
            "step_seconds": sum(e["step_seconds"] for e in epochs),
            "total_examples": total,
            "examples_per_second": steady_examples / steady_seconds if steady_seconds else 0.0,
            "global_batch_size": cfg.batch_size * self.gradients_per_update,
            "steps": int(self.version.numpy()),
            "resumed_at_steps": self.resumed_at,
            "python": sys.version.split()[0],
        }
        if self.mode in PS_MODES:
            history["staleness"] = self.staleness
            history["staleness_summary"] = summarize(self.staleness)
            history["staleness_by_worker"] = {
                w: summarize(d) for w, d in sorted(self.staleness_by_worker.items())
            }
            history["dropped_gradients"] = self.dropped
            # Steps still out when the run ended (syncreplicas' backups, a stalled worker's
            # call in async), never waited for.
            history["abandoned_steps"] = getattr(self, "abandoned_steps", 0)
            history["worker_progress"] = self.worker_progress
        else:
            history["staleness"] = [0] * int(self.version.numpy())  # [sync] never stale
            if self.step_durations:
                # The typical step beside the mean that examples/second gives: on a shared
                # host the two part when bursts of another load slow some steps down. As
                # for examples/second, the first epoch (tracing) is left out if there are more.
                steady = self.step_durations[1:] or self.step_durations
                history["step_ms"] = step_spread([d for epoch in steady for d in epoch])
            if self.hvd:  # [sync] the transport the ranks actually used
                history["controller"] = "mpi" if self.hvd.mpi_enabled() else "gloo"
                # [sync] Horovod's threads that rank 0 runs at idle priority (0: none)
                history["idle_horovod_threads"] = self.idle_threads
            if self.cfg.run.elastic:
                history["elastic_resets"] = self.elastic_resets
        return history

    def save(self) -> None:
        if self.cfg.dump_rank_weights:
            weights_dir = self.out / "weights"
            weights_dir.mkdir(exist_ok=True)
            values = [v.numpy() for v in self.model.weights]
            np.savez(weights_dir / f"rank{self.rank}.npz", *values)
        if self.rank != 0:
            return  # [sync] only rank 0 writes the model and the history
        self.model.save(self.out / "model.keras")
        _atomic_write_json(self.out / "history.json", self.history())

    # ---- the run -------------------------------------------------------------------------

    def run(self) -> dict:
        cfg, info = self.cfg, self.info
        self.restore()
        self.resumed_wall = self.epochs[-1]["wall_seconds"] if self.epochs else 0.0
        if self.mode in PS_MODES:
            run_epochs = self.run_ps()
        else:
            run_epochs = self.run_spmd()
        self.log(
            f"{info.dataset}/{cfg.model}: {info.splits['train']} train examples, "
            f"{cfg.run}, batch {cfg.batch_size} per worker, lr {cfg.effective_learning_rate:g}, "
            f"{cfg.threads} thread(s) per worker"
        )
        run_epochs()
        self.save()
        if self.hvd is not None:
            self.hvd.join()  # [sync] no rank leaves before the others are done
        return self.history()

    def train_shard(self, seed: int):
        """This process's training batches: shuffled with ``seed``, repeated, full batches.

        [sync] Each rank reads a disjoint 1/size of the split.
        """
        return make_dataset(
            self.info,
            "train",
            self.cfg.batch_size,
            shard=(self.size, self.rank),  # [sync]
            shuffle=True,
            seed=seed,
            repeat=True,
            drop_remainder=True,
        )

    def make_train_step(self):
        """The traced training step of single and sync: gradients, update, version."""
        tf = self.tf

        @tf.function
        def train_step(x, y):
            loss_sum, correct, grads = self.gradients(x, y)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
            self.version.assign_add(1)
            return loss_sum, correct

        return train_step

    def make_step_calls(self, iterator):
        """[single] ``calls(count)``: ``count`` training steps in one traced call.

        Returns the steps' summed loss and correct count.
        """
        tf = self.tf
        train_step = self.make_train_step()

        @tf.function
        def calls(count):
            loss_sum = tf.constant(0.0)
            correct = tf.constant(0.0)
            for _ in tf.range(count):
                batch_loss, batch_correct = train_step(*next(iterator))
                loss_sum += batch_loss
                correct += batch_correct
            return loss_sum, correct

        return calls

    def run_spmd(self):
        """Single and sync: every process runs the same steps on its shard of the data."""
        cfg = self.cfg
        if cfg.run.elastic:
            return self.run_elastic()
        # [sync] each rank reads a disjoint 1/size of the data and all run the same number
        # of steps (floor), or the last step's allreduce would wait forever.
        steps = max(1, self.info.splits["train"] // self.size // cfg.batch_size)
        train_ds = self.train_shard(cfg.seed + self.rank)
        if self.hvd is not None:
            # [sync] every rank starts from rank 0's weights, optimizer state and step.
            self.hvd.broadcast_variables(
                list(self.model.variables)
                + list(self.optimizer.variables)
                + [self.version, self.epoch_var],
                root_rank=0,
            )
        first_epoch, done = self.resume_point(steps)
        if int(self.version.numpy()):
            # A resumed run reads on from where the checkpoint was: the same batches, in
            # the same order, as a run that was never stopped.
            train_ds = train_ds.skip(int(self.version.numpy()))

        train_step = self.make_train_step()

        def run_epochs():
            iterator = iter(train_ds)
            # [single] several steps per call, the loop inside the traced function: the
            # Python between steps (a call, a read of the loss) otherwise cost a one-process
            # run about a fifth of its speed at small batches. [sync] one step per call.
            calls = self.make_step_calls(iterator) if self.hvd is None else None
            k = cfg.checkpoint_every_steps
            start = time.perf_counter()
            for epoch in range(first_epoch, cfg.epochs):
                t0 = time.perf_counter()
                loss_sum = correct = 0.0
                i = done if epoch == first_epoch else 0
                begin = i
                durations = []
                while i < steps:
                    t_step = time.perf_counter()
                    if calls is None:
                        count = 1
                        batch_loss, batch_correct = train_step(*next(iterator))
                    else:
                        # Up to the epoch's end or the next checkpoint, whichever is first.
                        count = min(STEPS_PER_CALL, steps - i)
                        if k:
                            count = min(count, k - (epoch * steps + i) % k)
                        batch_loss, batch_correct = calls(self.tf.constant(count))
                    loss_sum += float(batch_loss)  # waits for the steps (and the allreduce)
                    correct += float(batch_correct)
                    durations.extend([(time.perf_counter() - t_step) / count] * count)
                    i += count
                    step = epoch * steps + i
                    if self.step_checkpoint_due(step, i == steps):
                        self.checkpoint(step)
                seconds = time.perf_counter() - t0
                loss_sum, correct, seen = self.global_sums(
                    loss_sum, correct, (steps - begin) * cfg.batch_size
                )
                self.end_epoch(epoch, loss_sum, correct, seen, seconds, start, durations)

        return run_epochs

    def run_elastic(self):
        """[sync] Elastic Horovod: the run goes on after losing workers, down to the minimum.

        The state (variables, step, epoch and the epoch's progress and partial sums) is
        committed in memory every ``elastic_commit_steps`` steps. When a worker is lost,
        the others go back to the last commit, Horovod rebuilds the ring without it, rank
        0 broadcasts the state, and every rank reads its share of the data for the new
        world size. An epoch is a pass's worth of examples whatever the size.
        """
        cfg, hvd = self.cfg, self.hvd
        import horovod.tensorflow.elastic  # noqa: F401  [sync] hvd.elastic

        n_train = self.info.splits["train"]

        class State(hvd.elastic.TensorFlowState):
            def sync(self):
                hvd.broadcast_variables(self.variables, root_rank=0)  # [sync] from rank 0
                super().sync()

        state = State(
            variables=[
                *self.model.variables,
                *self.optimizer.variables,
                self.version,
                self.epoch_var,
            ],
            epoch_examples=0,
            loss_sum=0.0,
            correct=0.0,
            seen=0,
            epoch_seconds=0.0,
            total_examples=int(self.version.numpy()) * cfg.batch_size * cfg.run.workers,
        )

        def on_reset():
            # Not in the state: a sync restores the state to its last commit.
            self.elastic_resets += 1

        state.register_reset_callbacks([on_reset])

        def fold(local: list[float]) -> None:
            loss_sum, correct = self.global_sums(*local)  # [sync] over the live ranks
            state.loss_sum += loss_sum
            state.correct += correct
            local[:] = [0.0, 0.0]

        start = time.perf_counter()

        @hvd.elastic.run  # [sync] retried from the last commit after a lost worker
        def train_elastic(state):
            self.rank, self.size = hvd.rank(), hvd.size()
            if cfg.scale_learning_rate:
                # [sync] the learning rate follows the gradients averaged per step.
                self.optimizer.learning_rate = cfg.learning_rate * self.size
            train_step = self.make_train_step()  # traced for this world's learning rate
            if self.elastic_resets:
                self.log(
                    f"continuing with {self.size} workers from step {int(self.version)}, "
                    f"learning rate {self.optimizer.learning_rate:g}"
                )
            global_batch = self.size * cfg.batch_size
            # [sync] this world's share, in a new order after every reset.
            iterator = iter(self.train_shard(cfg.seed + self.rank + 7919 * self.elastic_resets))
            self.val_ds = make_dataset(
                self.info, "validation", VAL_BATCH, shard=(self.size, self.rank)
            )
            self.__dict__.pop("_val_iterator", None)
            step = int(self.version.numpy())
            while int(self.epoch_var.numpy()) < cfg.epochs:
                epoch = int(self.epoch_var.numpy())
                t0 = time.perf_counter()
                local = [0.0, 0.0]
                while state.epoch_examples + global_batch <= n_train:
                    batch_loss, batch_correct = train_step(*next(iterator))
                    local[0] += float(batch_loss)
                    local[1] += float(batch_correct)
                    step += 1
                    state.epoch_examples += global_batch
                    state.seen += global_batch
                    state.total_examples += global_batch
                    last = state.epoch_examples + global_batch > n_train
                    if step % cfg.elastic_commit_steps == 0 and not last:
                        fold(local)
                        state.epoch_seconds += time.perf_counter() - t0
                        t0 = time.perf_counter()
                        state.commit()  # [sync] also where a changed world is noticed
                    if self.step_checkpoint_due(step, last):
                        self.checkpoint(step)
                fold(local)
                state.epoch_seconds += time.perf_counter() - t0
                self.examples_so_far = state.total_examples
                self.end_epoch(
                    epoch, state.loss_sum, state.correct, state.seen, state.epoch_seconds, start
                )
                state.epoch_examples = state.seen = 0
                state.loss_sum = state.correct = state.epoch_seconds = 0.0
                state.commit()

        return lambda: train_elastic(state)

    def run_ps(self):
        """[ps] Async and syncreplicas, the chief's part: segments of updates, then bookkeeping.

        The workers drive their own steps (:mod:`distrain.train.ps`); the chief lets them
        go up to the next checkpoint or epoch end, waits until every granted update is
        applied, and only then copies, evaluates and checkpoints: a consistent snapshot
        numbered by applied updates.
        """
        cfg, info, chief = self.cfg, self.info, self.chief
        chief.attach(self)
        per_update = chief.rule.gradients_per_update
        # An epoch is as many updates as make one pass over the data.
        updates = max(1, info.splits["train"] // (cfg.batch_size * per_update))
        every = cfg.checkpoint_every_steps or updates
        first_epoch, done = self.resume_point(updates)

        def run_epochs():
            chief.start()  # the parameter servers get this copy's (restored) values
            start = time.perf_counter()
            for epoch in range(first_epoch, cfg.epochs):
                t0 = time.perf_counter()
                begin = position = done if epoch == first_epoch else 0
                while position < updates:
                    # The next checkpoint boundary (a global update), or the epoch's end.
                    stop = min(
                        updates,
                        ((epoch * updates + position) // every + 1) * every - epoch * updates,
                    )
                    chief.run_to(epoch * updates + stop)
                    position = stop
                    if self.step_checkpoint_due(epoch * updates + stop, stop == updates):
                        self.checkpoint(epoch * updates + stop)
                seconds = time.perf_counter() - t0
                loss_sum, correct = chief.epoch_sums()
                chief.pull_from_servers()
                self.staleness_by_worker = chief.staleness()
                self.staleness = [
                    d for w in sorted(self.staleness_by_worker) for d in self.staleness_by_worker[w]
                ]
                self.dropped = chief.rule.dropped(self.staleness)
                self.worker_progress = chief.worker_progress
                seen = (updates - begin) * per_update * cfg.batch_size
                self.end_epoch(epoch, loss_sum, correct, seen, seconds, start)
            chief.finish()
            # Steps begun and never finished: a stopped worker's.
            self.abandoned_steps = chief.unfinished_steps()

        return run_epochs
