"""The training loop: one model, input pipeline, gradient step and bookkeeping for every mode.

The mode is configuration. What differs between modes is only how a step's gradients
reach the variables, and those lines are marked, the way Horovod's examples mark theirs:

* ``# [sync]``: Horovod ring-allreduce; every rank runs this file (SPMD).
* ``# [ps]``: parameter-server modes; one coordinator process runs this file and
  schedules steps on worker servers with TensorFlow's ``ClusterCoordinator``; the
  variables live on the parameter servers.
* ``# [async]``: each worker applies its gradient to the parameter servers as soon as it
  has it (Downpour-style SGD), never waiting for the others.
* ``# [syncreplicas]``: gradients are aggregated per step: the first
  ``replicas_to_aggregate`` of ``workers`` computed on the current parameters are
  averaged and applied once; later ones are stale and dropped (backup workers).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from distrain.train.config import PS_MODES, TrainConfig, TrainingError
from distrain.train.inputs import DatasetInfo, make_dataset
from distrain.train.models import build_model
from distrain.train.staleness import SyncReplicasAggregator, summarize


def _atomic_write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def train(cfg: TrainConfig) -> dict:
    """Trains in this process, in the role the mode gives it.

    ``single``: the whole run. ``sync``: one rank (``horovodrun`` starts N). ``async`` and
    ``syncreplicas``: the coordinator (chief) of a parameter-server cluster described by
    ``TF_CONFIG``; the launcher starts the worker and parameter-server processes.

    Args:
        cfg: The run's configuration.

    Returns:
        The run's history (the content of ``history.json``).
    """
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.random.set_seed(cfg.seed)
    np.random.seed(cfg.seed)
    return _Trainer(cfg).run()


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
        self.strategy = None
        self.coordinator = None
        self.rank, self.size = 0, 1
        if self.mode == "sync":
            import horovod.tensorflow as hvd  # [sync]

            hvd.init()  # [sync]
            self.hvd, self.rank, self.size = hvd, hvd.rank(), hvd.size()  # [sync]
            if self.size != cfg.run.workers:
                raise TrainingError(
                    f"started with {self.size} ranks, the run asks {cfg.run.workers}"
                )
        elif self.mode in PS_MODES:
            resolver = tf.distribute.cluster_resolver.TFConfigClusterResolver()  # [ps]
            self.strategy = tf.distribute.ParameterServerStrategy(resolver)  # [ps]
            self.coordinator = tf.distribute.coordinator.ClusterCoordinator(self.strategy)  # [ps]

        scope = self.strategy.scope() if self.strategy else contextlib.nullcontext()
        with scope:  # [ps] variables are created on the parameter servers
            self.model = build_model(self.info, cfg.model, cfg.seed)
            # [sync] [syncreplicas] the learning rate is scaled by the gradients averaged per step.
            self.optimizer = Adam(cfg.effective_learning_rate)
            self.optimizer.build(self.model.trainable_variables)
            # The parameter version: +1 for every update applied to the variables.
            self.version = tf.Variable(0, dtype=tf.int64, trainable=False, name="version")
            self.epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False, name="epoch")
        self.ckpt = tf.train.Checkpoint(
            model=self.model, optimizer=self.optimizer, epoch=self.epoch_var, version=self.version
        )
        self.manager = tf.train.CheckpointManager(self.ckpt, str(self.out / "checkpoints"), 2)
        self.val_ds = make_dataset(
            self.info,
            "validation",
            512,
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
        self.worker_progress: dict[str, list[list[float]]] = {}

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

    def evaluate(self) -> tuple[float, float]:
        if not hasattr(self, "_eval_step"):  # one traced function for every epoch
            tf, keras, model = self.tf, self.keras, self.model

            @tf.function
            def eval_step(x, y):
                logits = model(x, training=False)
                loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
                correct = tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == y, tf.float32)
                return tf.reduce_sum(loss), tf.reduce_sum(correct)

            self._eval_step = eval_step
        loss_sum = correct = count = 0.0
        for x, y in self.val_ds:
            batch_loss, batch_correct = self._eval_step(x, y)
            loss_sum += float(batch_loss)
            correct += float(batch_correct)
            count += int(np.prod(y.shape))
        loss_sum, correct, count = self.global_sums(loss_sum, correct, count)
        return loss_sum / max(count, 1), correct / max(count, 1)

    def restore(self) -> None:
        """Resumes from the last checkpoint, if the output directory has one."""
        if not self.manager.latest_checkpoint:
            return
        self.ckpt.restore(self.manager.latest_checkpoint).expect_partial()
        path = self.out / "history.json"
        if path.exists():
            old = json.loads(path.read_text())
            self.epochs = old.get("epochs", [])[: int(self.epoch_var)]
        self.log(f"resumed from {self.manager.latest_checkpoint} (epoch {int(self.epoch_var)})")

    def end_epoch(self, epoch: int, loss_sum, correct, seen, step_seconds, start) -> None:
        """Validation, the epoch's record and line, and the chief's checkpoint."""
        val_loss, val_acc = self.evaluate()
        before = self.epochs[-1] if self.epochs else {"wall_seconds": 0.0, "examples": 0}
        record = {
            "epoch": epoch + 1,
            # Losses and accuracy are per label (per character for a language model).
            "loss": loss_sum / max(seen * self.labels_per_example, 1),
            "accuracy": correct / max(seen * self.labels_per_example, 1),
            "val_loss": val_loss,
            "val_accuracy": val_acc,
            "wall_seconds": self.resumed_wall + time.perf_counter() - start,
            "step_seconds": step_seconds,
            "examples": before["examples"] + int(seen),
        }
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
            self.manager.save(checkpoint_number=epoch + 1)  # [sync] rank 0 only / [ps] the chief
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
            "python": sys.version.split()[0],
        }
        if self.mode in PS_MODES:
            history["staleness"] = self.staleness
            history["staleness_summary"] = summarize(self.staleness)
            history["staleness_by_worker"] = {
                w: summarize(d) for w, d in sorted(self.staleness_by_worker.items())
            }
            history["dropped_gradients"] = self.dropped
            history["worker_progress"] = self.worker_progress
        else:
            history["staleness"] = [0] * int(self.version.numpy())  # [sync] never stale
        return history

    def save(self) -> None:
        if self.cfg.dump_rank_weights:
            weights_dir = self.out / "weights"
            weights_dir.mkdir(exist_ok=True)
            values = [v.numpy() for v in self.model.weights]
            np.savez(weights_dir / f"rank{self.rank}.npz", *values)
        if self.rank != 0:
            return  # [sync] only rank 0 writes the model and the history
        model = self.model
        if self.strategy is not None:
            # [ps] copy the parameter servers' values into a plain model to save it.
            model = build_model(self.info, self.cfg.model, self.cfg.seed)
            model.set_weights(self.model.get_weights())
        model.save(self.out / "model.keras")
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

    def run_spmd(self):
        """Single and sync: every process runs the same steps on its shard of the data."""
        tf, cfg = self.tf, self.cfg
        # [sync] each rank reads a disjoint 1/size of the data and all run the same number
        # of steps (floor), or the last step's allreduce would wait forever.
        steps = max(1, self.info.splits["train"] // self.size // cfg.batch_size)
        train_ds = make_dataset(
            self.info,
            "train",
            cfg.batch_size,
            shard=(self.size, self.rank),  # [sync]
            shuffle=True,
            seed=cfg.seed + self.rank,
            repeat=True,
            drop_remainder=True,
        )
        if self.hvd is not None:
            # [sync] every rank starts from rank 0's weights and optimizer state.
            self.hvd.broadcast_variables(
                list(self.model.variables) + list(self.optimizer.variables), root_rank=0
            )

        @tf.function
        def train_step(x, y):
            loss_sum, correct, grads = self.gradients(x, y)
            self.optimizer.apply_gradients(zip(grads, self.model.trainable_variables, strict=True))
            self.version.assign_add(1)
            return loss_sum, correct

        def run_epochs():
            iterator = iter(train_ds)
            start = time.perf_counter()
            for epoch in range(int(self.epoch_var), cfg.epochs):
                t0 = time.perf_counter()
                loss_sum = correct = 0.0
                for _ in range(steps):
                    batch_loss, batch_correct = train_step(*next(iterator))
                    loss_sum += float(batch_loss)
                    correct += float(batch_correct)
                seconds = time.perf_counter() - t0
                loss_sum, correct, seen = self.global_sums(
                    loss_sum, correct, steps * cfg.batch_size
                )
                self.end_epoch(epoch, loss_sum, correct, seen, seconds, start)

        return run_epochs

    def run_ps(self):
        """Async and syncreplicas: the coordinator schedules steps on the worker servers."""
        tf, cfg, strategy = self.tf, self.cfg, self.strategy
        info = self.info
        variables = self.model.trainable_variables

        def dataset_fn(_context):
            # [ps] every worker reads the whole split in its own random order; an epoch is
            # a number of steps in total, taken by whichever worker is free.
            return make_dataset(
                info,
                "train",
                cfg.batch_size,
                shuffle=True,
                seed=None,
                repeat=True,
                drop_remainder=True,
            )

        per_worker = self.coordinator.create_per_worker_dataset(  # [ps]
            lambda: strategy.distribute_datasets_from_function(dataset_fn)
        )
        iterator = iter(per_worker)

        steps_per_call = cfg.steps_per_call

        @tf.function
        def async_step(iterator):
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()

            def replica_step(x, y):
                read = self.version.read_value()
                with tf.control_dependencies([read]):
                    loss_sum, correct, grads = self.gradients(x, y)
                # [async] applied straight to the parameter servers, no waiting for others.
                applied = self.optimizer.apply_gradients(zip(grads, variables, strict=True))
                with tf.control_dependencies([applied]):
                    new = self.version.assign_add(1)
                return loss_sum, correct, new - 1 - read

            # Several steps per scheduled call, so that dispatch from the coordinator does
            # not dominate small steps; each step still applies its own gradient at once.
            loss_sum = tf.constant(0.0)
            correct = tf.constant(0.0)
            delays = tf.TensorArray(tf.int64, size=steps_per_call)
            for i in tf.range(steps_per_call):
                x, y = next(iterator)
                step_loss, step_correct, delay = strategy.run(replica_step, args=(x, y))
                loss_sum += step_loss
                correct += step_correct
                delays = delays.write(i, delay)
            return loss_sum, correct, delays.stack(), worker, tf.timestamp()

        @tf.function
        def gradient_step(iterator):
            worker = tf.distribute.coordinator.experimental_get_current_worker_index()
            x, y = next(iterator)

            def replica(x, y):
                read = self.version.read_value()
                with tf.control_dependencies([read]):
                    loss_sum, correct, grads = self.gradients(x, y)
                # [syncreplicas] the gradient goes back to the chief with its version
                # (dense: sparse embedding gradients become full tensors to be averaged).
                grads = [tf.convert_to_tensor(g) for g in grads]
                return loss_sum, correct, read, worker, tf.timestamp(), grads

            return strategy.run(replica, args=(x, y))

        @tf.function
        def apply_mean(grads):
            # [syncreplicas] one update from the aggregated gradients, on the PS variables.
            self.optimizer.apply_gradients(zip(grads, variables, strict=True))
            return self.version.assign_add(1)

        progress_start = time.time()
        counts: dict[str, int] = {}

        def note(worker, timestamp, delays: list[int]) -> None:
            """Records a worker's progress and the staleness of its gradients."""
            key = str(int(worker))
            counts[key] = counts.get(key, 0) + len(delays)
            self.worker_progress.setdefault(key, []).append(
                [round(float(timestamp) - progress_start, 4), counts[key]]
            )
            self.staleness.extend(delays)
            self.staleness_by_worker.setdefault(key, []).extend(delays)

        def run_async_epochs():
            # Enough calls to cover the epoch's steps (the last call may run a few more).
            steps = max(1, info.splits["train"] // cfg.batch_size)
            calls = -(-steps // steps_per_call)
            start = time.perf_counter()
            for epoch in range(int(self.epoch_var), cfg.epochs):
                t0 = time.perf_counter()
                results = [
                    self.coordinator.schedule(async_step, args=(iterator,))  # [async]
                    for _ in range(calls)
                ]
                self.coordinator.join()  # [ps] wait for every scheduled step
                seconds = time.perf_counter() - t0
                loss_sum = correct = 0.0
                for remote in results:
                    batch_loss, batch_correct, delays, worker, timestamp = remote.fetch()
                    loss_sum += float(batch_loss)
                    correct += float(batch_correct)
                    note(worker, timestamp, [int(d) for d in delays])
                seen = calls * steps_per_call * cfg.batch_size
                self.end_epoch(epoch, loss_sum, correct, seen, seconds, start)

        def run_syncreplicas_epochs():
            agg_n = cfg.run.replicas_to_aggregate
            total = cfg.run.workers
            # An epoch is as many aggregated updates as make one pass over the data.
            updates = max(1, info.splits["train"] // (cfg.batch_size * agg_n))
            aggregator = SyncReplicasAggregator(
                agg_n,
                lambda mean: apply_mean([tf.constant(g) for g in mean]),
                version=int(self.version.numpy()),
            )
            pool = concurrent.futures.ThreadPoolExecutor(max_workers=total)

            def launch():
                remote = self.coordinator.schedule(gradient_step, args=(iterator,))  # [ps]
                return pool.submit(remote.fetch)

            # [syncreplicas] keep one step in flight per worker: the first agg_n of them
            # make the update; the rest are backups whose late gradients are dropped.
            pending = {launch() for _ in range(total)}
            start = time.perf_counter()
            try:
                for epoch in range(int(self.epoch_var), cfg.epochs):
                    t0 = time.perf_counter()
                    loss_sum = correct = 0.0
                    target = aggregator.applied + updates
                    while aggregator.applied < target:
                        done, pending = concurrent.futures.wait(
                            pending, return_when=concurrent.futures.FIRST_COMPLETED
                        )
                        for future in done:
                            batch_loss, batch_correct, read, worker, timestamp, grads = (
                                future.result()
                            )
                            outcome = aggregator.submit(grads, int(read))
                            note(worker, timestamp, [outcome.delay])
                            if outcome.accepted:
                                loss_sum += float(batch_loss)
                                correct += float(batch_correct)
                            pending.add(launch())
                    self.dropped = aggregator.dropped
                    seconds = time.perf_counter() - t0
                    seen = updates * agg_n * cfg.batch_size
                    self.end_epoch(epoch, loss_sum, correct, seen, seconds, start)
            finally:
                # Steps still in flight when training ends are finished and discarded.
                concurrent.futures.wait(pending)
                pool.shutdown()

        return run_async_epochs if self.mode == "async" else run_syncreplicas_epochs
