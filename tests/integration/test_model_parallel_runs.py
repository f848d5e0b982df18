"""Whole runs of the model-parallel modes: train, checkpoint each part, resume, save the whole.

The exact tests (``rules/test_tensor_split.py``, ``rules/test_pipeline_schedule.py``) check
one step's arithmetic; these check what a run does around it, through the launcher as a user
runs it.
"""

from __future__ import annotations

import pytest

from distrain.train.config import TrainConfig
from distrain.train.launch import run_training


def _cfg(data, out, run, **settings) -> TrainConfig:
    settings = {"epochs": 2, "batch_size": 32, "checkpoint_every_steps": 15, **settings}
    return TrainConfig(data_dir=str(data), output_dir=str(out), run=run, **settings)


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.parametrize("run", ["tensor:2", "pipeline:2:micro=4"])
def test_split_runs_checkpoint_each_part_resume_and_save_the_whole_model(
    mnist_examples, tmp_path, run
):
    import tf_keras as keras

    out = tmp_path / "out"
    first = run_training(_cfg(mnist_examples, out, run), timeout=300)
    per_epoch = 1339 // 32
    assert first["steps"] == 2 * per_epoch
    assert first["epochs"][-1]["val_accuracy"] > 0.6
    parts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert parts == ["part-0-of-2", "part-1-of-2"]
    # Each rank holds a share: fewer parameters than the whole model.
    whole = keras.models.load_model(out / "model.keras")
    total = sum(int(v.shape.num_elements()) for v in whole.trainable_variables)
    assert len(first["parameters_per_rank"]) == 2 and max(first["parameters_per_rank"]) < total
    assert len(first["peak_memory_per_rank"]) == 2
    # Two more epochs resume from each part's checkpoint, not from the start.
    again = run_training(_cfg(mnist_examples, out, run, epochs=4), timeout=300)
    assert again["resumed_at_steps"] == [2 * per_epoch]
    assert again["steps"] == 4 * per_epoch
    assert again["epochs"][-1]["val_accuracy"] >= first["epochs"][-1]["val_accuracy"] - 0.05


@pytest.mark.slow
@pytest.mark.horovod
def test_hybrid_runs_two_data_groups_of_two_model_ranks(mnist_examples, tmp_path):
    history = run_training(_cfg(mnist_examples, tmp_path / "out", "hybrid:2:2"), timeout=300)
    # Two data groups: each step takes a batch from each, so an epoch has half the steps.
    assert history["steps"] == 2 * (1339 // 2 // 32)
    assert history["global_batch_size"] == 64
    assert history["epochs"][-1]["val_accuracy"] > 0.6
    assert len(history["parameters_per_rank"]) == 4
    assert history["run"]["processes"] == 4


@pytest.fixture(scope="module")
def gutenberg_examples(tmp_path_factory):
    """Two small sample books, preprocessed into windows of 20 characters (each step of a
    split LSTM has a collective per character, so short windows keep the runs short)."""
    from distrain.datasets.gutenberg.beam import GutenbergPreprocessConfig, preprocess_gutenberg
    from distrain.datasets.gutenberg.sample import GutenbergSampleConfig, write_gutenberg_sample

    raw = tmp_path_factory.mktemp("gutenberg_raw")
    write_gutenberg_sample(raw, GutenbergSampleConfig(books=2, chars_per_book=3000, seed=3))
    out = tmp_path_factory.mktemp("gutenberg_examples")
    cfg = GutenbergPreprocessConfig(str(raw), str(out), seq_len=20, stride=20)
    preprocess_gutenberg(cfg, ["--runner=FnApiRunner", "--direct_running_mode=in_memory"])
    return out


@pytest.mark.slow
@pytest.mark.horovod
def test_split_lstm_run_trains_as_the_unsplit_one_and_saves_the_whole_model(
    gutenberg_examples, tmp_path
):
    import tf_keras as keras

    from distrain.datasets.info import DatasetInfo

    settings = {"model": "lstm-seed", "epochs": 1, "batch_size": 16, "checkpoint_every_steps": 0}
    single = run_training(_cfg(gutenberg_examples, tmp_path / "single", "single:1", **settings))
    out = tmp_path / "out"
    first = run_training(_cfg(gutenberg_examples, out, "tensor:2", **settings), timeout=300)
    per_epoch = DatasetInfo.load(gutenberg_examples).splits["train"] // 16
    assert first["steps"] == single["steps"] == per_epoch
    # The same weights, batches and arithmetic: the split run's losses are the unsplit one's
    # (validation differs in kind: a split model validates on the windows, single on the
    # text), and so are the saved models' scores on the contiguous validation text.
    for split, whole in zip(first["epochs"], single["epochs"], strict=True):
        assert split["loss"] == pytest.approx(whole["loss"], rel=1e-4)
    from distrain.steps import evaluate

    scores = [
        evaluate(gutenberg_examples, d)["evaluation"]["nats_per_char"]
        for d in (out, tmp_path / "single")
    ]
    assert scores[0] == pytest.approx(scores[1], rel=1e-4)
    parts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert parts == ["part-0-of-2", "part-1-of-2"]
    whole = keras.models.load_model(out / "model.keras")
    assert [type(layer).__name__ for layer in whole.layers][1:] == ["LSTM", "LSTM", "Dense"]
    total = sum(int(v.shape.num_elements()) for v in whole.trainable_variables)
    assert max(first["parameters_per_rank"]) < 0.6 * total
