"""The training loop: one model, input pipeline and loop for every mode.

The mode is configuration. Lines where distributed behaviour differs from a single
process are marked ``# [sync]`` (Horovod ring-allreduce), the way Horovod's own
examples mark theirs.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import numpy as np

from distrain.train.config import TrainConfig
from distrain.train.inputs import DatasetInfo, make_dataset
from distrain.train.models import build_model


class TrainingError(RuntimeError):
    """Training could not run or did not finish."""


def _log(rank: int, message: str) -> None:
    if rank == 0:
        print(message, flush=True)


def _atomic_write_json(path: Path, data: dict) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2))
    os.replace(tmp, path)


def train(cfg: TrainConfig) -> dict:
    """Trains in the current process, as one rank of the configured mode.

    For ``single`` this is the whole run. For ``sync`` every process started by
    ``horovodrun`` calls this; Horovod gives each its rank.

    Args:
        cfg: The run's configuration.

    Returns:
        The run's history (the content of ``history.json``).
    """
    import tensorflow as tf
    import tf_keras as keras

    if cfg.run.mode not in ("single", "sync"):
        raise TrainingError(f"mode {cfg.run.mode!r} is not run by this loop")
    tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)

    hvd = None
    rank, size = 0, 1
    if cfg.run.mode == "sync":
        import horovod.tensorflow as hvd  # [sync]

        hvd.init()  # [sync]
        rank, size = hvd.rank(), hvd.size()  # [sync]
        if size != cfg.run.workers:
            raise TrainingError(f"started with {size} processes, the run asks {cfg.run.workers}")

    tf.random.set_seed(cfg.seed)
    np.random.seed(cfg.seed)
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    info = DatasetInfo.load(cfg.data_dir)

    # [sync] each rank reads a disjoint 1/size of the data; every rank runs the same
    # number of steps (floor), or the allreduce of the last step would wait forever.
    local_train = info.splits["train"] // size
    steps_per_epoch = max(1, local_train // cfg.batch_size)
    train_ds = make_dataset(
        info,
        "train",
        cfg.batch_size,
        shard=(size, rank),  # [sync]
        shuffle=True,
        seed=cfg.seed + rank,
        repeat=True,
        drop_remainder=True,
    )
    val_ds = make_dataset(info, "validation", 512, shard=(size, rank))  # [sync]

    model = build_model(info, cfg.model, cfg.seed)
    # [sync] the learning rate is scaled by the number of workers (see TrainConfig).
    optimizer = keras.optimizers.Adam(cfg.effective_learning_rate)
    optimizer.build(model.trainable_variables)
    loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

    # Checkpoints: written by rank 0 only, read back on restart.
    epoch_var = tf.Variable(0, dtype=tf.int64, trainable=False)
    ckpt = tf.train.Checkpoint(model=model, optimizer=optimizer, epoch=epoch_var)
    manager = tf.train.CheckpointManager(ckpt, str(out / "checkpoints"), max_to_keep=2)
    history_path = out / "history.json"
    epochs: list[dict] = []
    if manager.latest_checkpoint:
        ckpt.restore(manager.latest_checkpoint).expect_partial()
        if history_path.exists():
            epochs = json.loads(history_path.read_text()).get("epochs", [])[: int(epoch_var)]
        _log(rank, f"[{cfg.run.name}] resumed from {manager.latest_checkpoint}")

    # [sync] start every rank from rank 0's weights and optimizer state.
    if hvd is not None:
        hvd.broadcast_variables(model.variables + optimizer.variables, root_rank=0)  # [sync]

    @tf.function
    def train_step(x, y):
        with tf.GradientTape() as tape:
            logits = model(x, training=True)
            loss = loss_fn(y, logits)
        if hvd is not None:
            tape = hvd.DistributedGradientTape(tape)  # [sync] allreduce-average gradients
        grads = tape.gradient(loss, model.trainable_variables)
        optimizer.apply_gradients(zip(grads, model.trainable_variables))
        correct = tf.reduce_sum(tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == y, tf.float32))
        return loss * tf.cast(tf.shape(y)[0], tf.float32), correct

    @tf.function
    def eval_step(x, y):
        logits = model(x, training=False)
        loss = keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)
        correct = tf.cast(tf.argmax(logits, -1, output_type=tf.int32) == y, tf.float32)
        return tf.reduce_sum(loss), tf.reduce_sum(correct)

    def global_sums(*values: float) -> list[float]:
        if hvd is None:
            return list(values)
        summed = hvd.allreduce(tf.constant(values, tf.float64), op=hvd.Sum)  # [sync]
        return [float(v) for v in summed.numpy()]

    def evaluate() -> tuple[float, float]:
        loss_sum = correct = count = 0.0
        for x, y in val_ds:
            batch_loss, batch_correct = eval_step(x, y)
            loss_sum += float(batch_loss)
            correct += float(batch_correct)
            count += int(y.shape[0])
        loss_sum, correct, count = global_sums(loss_sum, correct, count)
        return loss_sum / max(count, 1), correct / max(count, 1)

    _log(
        rank,
        f"[{cfg.run.name}] {info.dataset}/{cfg.model}: {info.splits['train']} train examples, "
        f"{size} worker(s) x {steps_per_epoch} steps x batch {cfg.batch_size}, "
        f"lr {cfg.effective_learning_rate:g}, {cfg.threads} thread(s) per worker",
    )
    iterator = iter(train_ds)
    elapsed_before = epochs[-1]["wall_seconds"] if epochs else 0.0
    step_seconds = sum(e.get("step_seconds", 0.0) for e in epochs)
    start = time.perf_counter()
    for epoch in range(int(epoch_var), cfg.epochs):
        epoch_start = time.perf_counter()
        loss_sum = correct = 0.0
        for _ in range(steps_per_epoch):
            x, y = next(iterator)
            batch_loss, batch_correct = train_step(x, y)
            loss_sum += float(batch_loss)
            correct += float(batch_correct)
        epoch_step_seconds = time.perf_counter() - epoch_start
        step_seconds += epoch_step_seconds
        seen = steps_per_epoch * cfg.batch_size
        loss_sum, correct, seen_all = global_sums(loss_sum, correct, seen)
        val_loss, val_acc = evaluate()
        record = {
            "epoch": epoch + 1,
            "loss": loss_sum / seen_all,
            "accuracy": correct / seen_all,
            "val_loss": val_loss,
            "val_accuracy": val_acc,
            "wall_seconds": elapsed_before + time.perf_counter() - start,
            "step_seconds": epoch_step_seconds,
            "examples": (epochs[-1]["examples"] if epochs else 0) + int(seen_all),
        }
        epochs.append(record)
        epoch_var.assign(epoch + 1)
        _log(
            rank,
            f"[{cfg.run.name}] epoch {epoch + 1}/{cfg.epochs}  loss {record['loss']:.4f}  "
            f"acc {record['accuracy']:.4f}  val_loss {val_loss:.4f}  val_acc {val_acc:.4f}  "
            f"{record['wall_seconds']:.1f}s  {seen_all / epoch_step_seconds:,.0f} ex/s",
        )
        if rank == 0 and ((epoch + 1) % cfg.checkpoint_every_epochs == 0 or epoch + 1 == cfg.epochs):
            manager.save(checkpoint_number=epoch + 1)  # [sync] rank 0 only
            _atomic_write_json(history_path, _history(cfg, info, epochs, step_seconds, size))

    history = _history(cfg, info, epochs, step_seconds, size)
    if cfg.dump_rank_weights:
        weights_dir = out / "weights"
        weights_dir.mkdir(exist_ok=True)
        np.savez(weights_dir / f"rank{rank}.npz", *[v.numpy() for v in model.weights])
    if rank == 0:  # [sync] only rank 0 writes the model and the history
        model.save(out / "model.keras")
        _atomic_write_json(history_path, history)
    if hvd is not None:
        hvd.join()  # [sync] no rank leaves before the others are done
    return history


def _history(cfg: TrainConfig, info: DatasetInfo, epochs: list[dict], step_seconds, size) -> dict:
    total = epochs[-1]["examples"] if epochs else 0
    # Steady-state throughput leaves out the first epoch, which pays for graph tracing
    # and (sync) Horovod's negotiation; with one epoch there is nothing else to use.
    steady = epochs[1:] or epochs
    steady_examples = total - (epochs[0]["examples"] if len(epochs) > 1 else 0)
    steady_seconds = sum(e["step_seconds"] for e in steady)
    return {
        "run": {**cfg.run.to_dict(), "model": cfg.model, "dataset": info.dataset},
        "config": json.loads(cfg.to_json()),
        "epochs": epochs,
        "train_seconds": epochs[-1]["wall_seconds"] if epochs else 0.0,
        "step_seconds": step_seconds,
        "total_examples": total,
        "examples_per_second": steady_examples / steady_seconds if steady_seconds else 0.0,
        "global_batch_size": cfg.batch_size * size,
        "python": sys.version.split()[0],
    }
