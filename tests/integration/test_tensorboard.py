"""Every run writes TensorBoard event files, read back here with TensorBoard's own reader.

``EventAccumulator`` loads a run as ``tensorboard --logdir`` does: a scalar as a
``simple_value`` or a scalar tensor (whichever writer wrote it), a histogram, the graph.
Each run's folder is ``OUTPUT/tensorboard/RUN/`` (:mod:`distrain.train.tensorboard`).
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from distrain.train.config import TrainConfig
from distrain.train.launch import run_training
from distrain.train.tensorboard import logdir


def read_events(folder: Path) -> dict:
    """The event files of one TensorBoard run (a folder, not its sub-folders).

    Read with TensorBoard's own reader (``EventAccumulator``, what ``tensorboard --logdir``
    loads a run with), keeping every event (no sampling).

    Returns:
        ``scalars``: tag -> [(step, value, wall time)]; ``histograms``: tag -> [(step,
        count)]; ``graphs``: 1 when the run holds the model's graph, else 0.
    """
    import tensorflow as tf
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    assert sorted(folder.glob("events.out.tfevents.*")), f"no event file in {folder}"
    every = {"scalars": 0, "histograms": 0, "tensors": 0, "graph": 0}
    run = EventAccumulator(str(folder), size_guidance=every)
    run.Reload()
    tags = run.Tags()
    scalars, histograms = defaultdict(list), defaultdict(list)
    for tag in tags["scalars"]:  # simple_value scalars (tf.compat.v1 writers)
        scalars[tag] += [(e.step, e.value, e.wall_time) for e in run.Scalars(tag)]
    for tag in tags["histograms"]:
        histograms[tag] += [(e.step, e.histogram_value.num) for e in run.Histograms(tag)]
    for tag in tags["tensors"]:  # tf.summary (TF 2) writes scalars and histograms as tensors
        plugin = run.SummaryMetadata(tag).plugin_data.plugin_name
        for e in run.Tensors(tag):
            array = tf.make_ndarray(e.tensor_proto)
            if plugin == "histograms":
                histograms[tag].append((e.step, float(array[:, 2].sum())))
            elif array.ndim == 0:
                scalars[tag].append((e.step, float(array), e.wall_time))
    return {"scalars": dict(scalars), "histograms": dict(histograms), "graphs": int(tags["graph"])}


def check_curves(events: dict, history: dict) -> None:
    """The run's curves match its history, epoch for epoch, at the updates they ended at."""
    epochs = history["epochs"]
    steps_per_epoch = history["steps"] // len(epochs)
    steps = [steps_per_epoch * e["epoch"] for e in epochs]
    scalars = events["scalars"]
    for tag in ("loss", "accuracy", "val_loss", "val_accuracy"):
        assert [s for s, _, _ in scalars[tag]] == steps, tag
        assert [v for _, v, _ in scalars[tag]] == pytest.approx([e[tag] for e in epochs]), tag
    walls = [w for _, _, w in scalars["loss"]]
    assert walls == sorted(walls) and walls[-1] > walls[0]  # against wall-clock time too
    assert [s for s, _, _ in scalars["examples_per_second"]] == steps
    assert all(v > 0 for _, v, _ in scalars["examples_per_second"])
    rate = history["config"]["learning_rate"]
    assert all(v > 0 for _, v, _ in scalars["learning_rate"]), rate
    assert events["graphs"] == 1


def train(mnist_examples, tmp_path, run: str, **settings) -> tuple[Path, dict]:
    out = tmp_path / run.replace(":", "-")
    cfg = TrainConfig(
        data_dir=str(mnist_examples), output_dir=str(out), run=run, epochs=2, **settings
    )
    return logdir(out, cfg.run.name), run_training(cfg, timeout=300)


def test_a_run_folder_is_named_after_the_run_and_safe_on_every_file_system(tmp_path):
    assert logdir(tmp_path, "sync:2") == tmp_path / "tensorboard" / "sync-2"
    assert logdir(tmp_path, "syncreplicas:3:aggregate=2").name == "syncreplicas-3-aggregate=2"


@pytest.mark.slow
def test_a_single_run_writes_its_curves_step_times_and_graph(mnist_examples, tmp_path):
    folder, history = train(mnist_examples, tmp_path, "single:1")
    events = read_events(folder)
    check_curves(events, history)
    # The rank's median step, per epoch, as the history's record of it.
    step_times = read_events(folder / "rank-0")["scalars"]["step_time_ms"]
    medians = [e["step_ms"]["median"] for e in history["epochs"]]
    assert [v for _, v, _ in step_times] == pytest.approx(medians, rel=1e-5)


@pytest.mark.slow
@pytest.mark.horovod
def test_a_sync_run_writes_the_curves_once_and_each_ranks_step_time(mnist_examples, tmp_path):
    folder, history = train(mnist_examples, tmp_path, "sync:2", controller="gloo")
    check_curves(read_events(folder), history)
    ranks = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert ranks == ["rank-0", "rank-1"]
    for rank in ranks:  # each rank its own steps, and its own loss from rank 0's records
        scalars = read_events(folder / rank)["scalars"]
        assert len(scalars["step_time_ms"]) == 2 and len(scalars["loss"]) == 2, rank


@pytest.mark.slow
def test_an_async_run_writes_staleness_histograms_and_each_workers_step_time(
    mnist_examples, tmp_path
):
    folder, history = train(mnist_examples, tmp_path, "async:2", batch_size=32)
    events = read_events(folder)
    check_curves(events, history)
    # Every counted gradient's staleness, epoch by epoch: together, the history's.
    counts = [n for _, n in events["histograms"]["staleness"]]
    assert sum(counts) == len(history["staleness"])
    assert len(events["scalars"]["staleness_mean"]) == len(counts)
    workers = sorted(p.name for p in folder.iterdir() if p.is_dir())
    assert workers == ["worker-0", "worker-1"]
    for worker in workers:
        step_times = read_events(folder / worker)["scalars"]["step_time_ms"]
        assert step_times and all(v > 0 for _, v, _ in step_times), worker
