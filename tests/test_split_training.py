"""Whole runs of the model-parallel modes: train, checkpoint each part, resume, save the whole.

The exact tests (``test_tensor_split.py``, ``test_pipeline_stages.py``) check one step's
arithmetic; these check what a run does around it, through the launcher as a user runs it.
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
