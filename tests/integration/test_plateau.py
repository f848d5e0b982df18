"""Until plateau: stop when validation stops improving, keep the best epoch's weights."""

import numpy as np
import pytest

from distrain.base.errors import ConfigError
from distrain.cli import build_parser
from distrain.train.config import TrainConfig
from distrain.train.driver import Plateau


def test_plateau_stops_after_patience_epochs_without_improvement():
    p = Plateau(2)
    for epoch, loss in enumerate([1.0, 0.8, 0.9, 0.8, 0.85], start=1):
        p.update(epoch, loss)
        assert p.stop == (epoch >= 4), epoch  # 0.8 again is no improvement
    assert (p.best_epoch, p.best) == (2, 0.8)
    record = p.to_dict()
    assert record.pop("reason").startswith("stopped: validation loss did not improve")
    assert record == {
        "patience": 2,
        "best_epoch": 2,
        "best_val_loss": 0.8,
        "stopped_early": True,
        "min_exchanges": 0,
        "exchanges": 0,
        "unchanged_epochs": [],
    }
    # Epochs without validation do not count; patience 0 never stops.
    q = Plateau(0)
    q.replay([{"epoch": 1, "val_loss": 1.0}, {"epoch": 2, "val_loss": None}])
    assert (q.best_epoch, q.last_epoch, q.stop) == (1, 1, False)
    for epoch in range(2, 20):
        q.update(epoch, 2.0)
    assert not q.stop


def test_until_plateau_flag_config_and_pipeline_parameter():
    parser = build_parser()
    base = ["train", "--data", "d", "--output", "o"]
    assert parser.parse_args(base).until_plateau == 0
    assert parser.parse_args([*base, "--until-plateau"]).until_plateau == 3
    assert parser.parse_args([*base, "--until-plateau=5"]).until_plateau == 5
    run = parser.parse_args(["run", "gutenberg", "--output", "o", "--until-plateau", "2"])
    assert run.until_plateau == 2
    with pytest.raises(ConfigError, match="until_plateau"):
        TrainConfig(data_dir="d", output_dir="o", until_plateau=-1)
    from distrain.pipelines.dataset_pipelines import gutenberg_pipeline

    params = gutenberg_pipeline.pipeline_spec.root.input_definitions.parameters
    assert "until_plateau" in params  # (a missing key would read as a default entry)
    # The pipelines stop each run on a validation plateau by default (issue 39: runs
    # compared converged), with a patience of 3 epochs; 0 turns it off.
    assert params["until_plateau"].default_value.number_value == 3


def _validation_loss(data_dir, model_path) -> float:
    import tensorflow as tf

    from distrain.datasets.info import DatasetInfo
    from distrain.learning.inputs import make_dataset
    from distrain.learning.predict import load_model

    model = load_model(model_path)
    nats = count = 0.0
    for x, y in make_dataset(DatasetInfo.load(data_dir), "validation", 512):
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(y, model(x, training=False))
        nats, count = nats + float(tf.reduce_sum(losses)), count + int(tf.size(y))
    return nats / count


@pytest.mark.slow
@pytest.mark.parametrize(
    "run",
    ["single:1", pytest.param("sync:2", marks=pytest.mark.horovod), "async:2"],
)
def test_training_stops_at_a_plateau_and_keeps_the_best_weights(mnist_examples, tmp_path, run):
    """A rate this high makes the validation loss stop improving within a few epochs."""
    from distrain.train.launch import run_training

    out = tmp_path / "run"
    cfg = TrainConfig(
        data_dir=str(mnist_examples),
        output_dir=str(out),
        run=run,
        epochs=12,
        learning_rate=0.03,
        until_plateau=1,
    )
    history = run_training(cfg, timeout=600)
    plateau = history["until_plateau"]
    losses = [e["val_loss"] for e in history["epochs"]]
    assert plateau["stopped_early"], losses
    assert len(losses) == plateau["best_epoch"] + 1 < 12
    assert min(losses) == pytest.approx(plateau["best_val_loss"])
    assert losses[-1] >= plateau["best_val_loss"]
    # The saved model is the best epoch's, not the last one's.
    saved = _validation_loss(mnist_examples, out / "model.keras")
    assert saved == pytest.approx(plateau["best_val_loss"], rel=1e-4)
    assert not np.isclose(saved, losses[-1], rtol=1e-4)
    # A rerun into the same directory has nothing left to train.
    again = run_training(cfg, timeout=600)
    assert len(again["epochs"]) == len(losses) and again["steps"] == history["steps"]
