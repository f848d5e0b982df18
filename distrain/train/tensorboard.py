"""A run's TensorBoard event files: ``OUTPUT/tensorboard/RUN/``, written from the epoch driver.

The driver's hook (:class:`TensorBoardHook`), as Keras's ``TensorBoard`` callback is
``fit``'s. Each point's step is the run's global update count; each event also carries
its wall-clock time, so TensorBoard draws every curve against steps or time.

``RUN/`` (rank 0, or the parameter-server chief, which holds the whole model): the
epoch's ``loss`` and ``accuracy``, ``val_loss`` and ``val_accuracy`` when the epoch is
validated, ``examples_per_second`` (the epoch's, over every worker), ``wall_seconds``,
``learning_rate`` (the optimizer's at that update) and, in the parameter-server modes,
a ``staleness`` histogram of the epoch's gradients and its mean; the model's graph once,
at the start. Per rank, in ``RUN/rank-R/`` (each sync rank writes its own) or
``RUN/worker-W/`` (the chief, from each worker's steps): ``step_time_ms`` and each
rank's own ``loss`` where the history keeps it. TensorBoard lists those as runs of their
own, ``RUN/rank-1``, so one chart overlays the ranks.

The points are written with ``tf.summary.write`` in TensorBoard's own formats (a scalar
tensor of the ``scalars`` plugin, a ``[buckets, 3]`` tensor of the ``histograms``
plugin): TensorFlow 2.21 no longer installs TensorBoard, whose package
``tf.summary.scalar`` needs, and a run must not.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import numpy as np

from distrain.train.hooks import Hook

#: The folder of a run's output that holds its event files.
TENSORBOARD_DIR = "tensorboard"


def scalar(tag: str, value: float) -> None:
    """One point of a curve, at the default writer's step (TensorBoard's scalar format)."""
    import tensorflow as tf

    tf.summary.write(tag, tf.constant(float(value), tf.float32), metadata=_plugin("scalars"))


def histogram(tag: str, values) -> None:
    """Integer values (staleness) as a histogram, a ``[left, right, count]`` bucket per value."""
    import tensorflow as tf

    counts = Counter(int(v) for v in values)
    buckets = [[k - 0.5, k + 0.5, float(n)] for k, n in sorted(counts.items())]
    tensor = tf.constant(buckets, tf.float64)
    tf.summary.write(tag, tensor, metadata=_plugin("histograms"))


def _plugin(name: str):
    import tensorflow as tf

    metadata = tf.compat.v1.SummaryMetadata()
    metadata.plugin_data.plugin_name = name
    return metadata


def logdir(output_dir: str | Path, run_name: str) -> Path:
    """Where a run's event files go: ``OUTPUT/tensorboard/RUN`` (``sync:2`` as ``sync-2``)."""
    safe = re.sub(r"[^A-Za-z0-9._=-]+", "-", run_name).strip("-") or "run"
    return Path(output_dir) / TENSORBOARD_DIR / safe


class TensorBoardHook(Hook):
    """Writes the run's curves, per-rank step times, staleness and graph as event files.

    Args:
        cfg: The run's configuration.
        replica: This process's replica (its rank says what it writes).
    """

    def __init__(self, cfg, replica):
        self.cfg, self.replica = cfg, replica
        self.root = logdir(cfg.output_dir, cfg.run.name)
        self.writers: dict[str, object] = {}
        self.delays_seen: Counter = Counter()
        self.examples_before: int | None = None

    @property
    def chief(self) -> bool:
        """Whether this process writes the run's curves (rank 0 / the chief)."""
        return self.replica.rank == 0

    def writer(self, sub: str = ""):
        """The event file writer of ``RUN/`` or of its sub-folder ``sub``."""
        if sub not in self.writers:
            import tensorflow as tf

            path = self.root / sub if sub else self.root
            self.writers[sub] = tf.summary.create_file_writer(str(path))
        return self.writers[sub]

    def on_train_begin(self, driver) -> None:
        epochs = driver.epochs
        self.examples_before = epochs[-1]["examples"] if epochs else 0  # a resumed run's
        if self.chief:
            self.write_graph()

    def write_graph(self) -> None:
        """The model's forward pass, traced once on its inputs, as the graph dashboard's."""
        import tensorflow as tf

        model = self.replica.model
        inputs = getattr(model, "inputs", None)
        if inputs:
            specs = [tf.TensorSpec(t.shape, t.dtype) for t in inputs]
        else:  # a subclassed model: the validation batches' features
            specs = [self.replica.val_ds.element_spec[0]]

        def forward(*x):
            return model(x[0] if len(x) == 1 else list(x), training=False)

        try:
            graph = tf.function(forward).get_concrete_function(*specs).graph
        except Exception as err:  # noqa: BLE001 (the curves do not need the graph)
            self.replica.log(f"tensorboard: no model graph ({type(err).__name__}: {err})")
            return
        with self.writer().as_default():
            tf.summary.graph(graph)
        self.writer().flush()

    def on_epoch_end(self, driver, record: dict, durations: list[float]) -> None:

        r, step = self.replica, int(self.replica.step)
        if durations:  # this rank's own steps
            with self.writer(f"rank-{r.rank}").as_default(step=step):
                ms = np.asarray(durations) * 1e3
                scalar("step_time_ms", float(np.median(ms)))
        if self.chief:
            self.write_curves(driver, record, step)
        for writer in self.writers.values():
            writer.flush()

    def write_curves(self, driver, record: dict, step: int) -> None:
        """Rank 0's (the chief's) points of an epoch: the run's curves."""
        seconds = record["step_seconds"]
        examples = record["examples"] - (self.examples_before or 0)
        self.examples_before = record["examples"]
        with self.writer().as_default(step=step):
            for name in ("loss", "accuracy", "val_loss", "val_accuracy", "wall_seconds"):
                if record.get(name) is not None:
                    scalar(name, float(record[name]))
            scalar("epoch", float(record["epoch"]))
            if seconds > 0:
                scalar("examples_per_second", examples / seconds)
            rate = self.learning_rate(step)
            if rate is not None:
                scalar("learning_rate", rate)
            self.write_staleness(driver.steps)
        for rank, loss in enumerate(record.get("rank_loss") or []):
            with self.writer(f"{self.rank_word(driver.steps)}-{rank}").as_default(step=step):
                scalar("loss", float(loss))
        workers = getattr(driver.steps, "worker_step_seconds", None)
        if workers is not None:  # the parameter-server chief: each worker's steps
            for worker, seconds_per_step in sorted(workers().items()):
                with self.writer(f"worker-{worker}").as_default(step=step):
                    scalar("step_time_ms", seconds_per_step * 1e3)

    @staticmethod
    def rank_word(engine) -> str:
        """What a process of the run is called in its folder: ``worker`` (PS) or ``rank``."""
        return "worker" if hasattr(engine, "worker_step_seconds") else "rank"

    def learning_rate(self, step: int) -> float | None:
        """The optimizer's step size at update ``step`` (its schedule's), if it has one."""
        optimizer = getattr(self.replica, "optimizer", None)
        size = getattr(optimizer, "step_size", None)
        return None if size is None else float(size(float(max(step, 1))))

    def write_staleness(self, engine) -> None:
        """The epoch's gradients' staleness (the parameter-server modes measure it)."""
        delays = getattr(engine, "delays", None)
        if delays is None:
            return
        counts = Counter(delays)
        new = counts - self.delays_seen  # the run's delays so far, less the earlier epochs'
        self.delays_seen = counts
        values = np.asarray(sorted(new.elements()), dtype=np.float64)
        if values.size:
            histogram("staleness", values)
            scalar("staleness_mean", float(values.mean()))

    def on_train_end(self, driver, history: dict) -> None:
        for writer in self.writers.values():
            writer.close()
        self.writers.clear()
