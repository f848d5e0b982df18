"""The pipeline split: stage cuts, and exact gradients of GPipe's schedule on two ranks.

The same batch and weights through the unsplit model and through two stages with four
micro-batches: the last stage's loss must be the unsplit model's, and each stage's
gradients (summed over its micro-batches) the unsplit model's gradients of its layers,
to 1e-5. The weights gathered from the stages must be the unsplit model's.
"""

from __future__ import annotations

import pytest

from distrain.base.costmodel import stage_bounds
from distrain.base.errors import ConfigError
from distrain.train.config import TrainConfig
from tests.rules.ranks import run_on_ranks


def test_stage_bounds_make_the_costliest_stage_as_cheap_as_it_can_be():
    assert stage_bounds([1, 1, 1, 1], 2) == [(0, 2), (2, 4)]
    assert stage_bounds([8, 1, 1, 1, 1], 2) == [(0, 1), (1, 5)]
    assert stage_bounds([1, 1, 1, 1, 9], 2) == [(0, 4), (4, 5)]
    assert stage_bounds([3, 3, 3], 3) == [(0, 1), (1, 2), (2, 3)]
    # Every stage gets at least one layer, even when one layer outweighs the rest.
    assert stage_bounds([100, 1, 1], 3) == [(0, 1), (1, 2), (2, 3)]
    with pytest.raises(ValueError, match="cannot make 3"):
        stage_bounds([1, 1], 3)


def test_pipeline_specs_are_checked(tmp_path):
    spec = TrainConfig(data_dir=str(tmp_path), output_dir="o", run="pipeline:2").run
    assert spec.option("micro") == 4 and spec.name == "pipeline:2:micro=4"
    for run, settings, message in [
        ("pipeline:1", {}, "at least 2 stages"),
        ("pipeline:2:micro=0", {}, "at least 1"),
        ("pipeline:2:micro=3", {"batch_size": 64}, "does not divide into 3"),
        ("pipeline:2", {"model": "fasttext"}, "cannot be cut into stages"),
        ("pipeline:2", {"model": "seq2seq"}, "cannot be cut into stages"),
    ]:
        with pytest.raises(ConfigError, match=message):
            TrainConfig(data_dir=str(tmp_path), output_dir="o", run=run, **settings)


_STAGES = """
import dataclasses, json, sys
import distrain  # noqa: F401
import numpy as np
import tensorflow as tf
from distrain.train.config import TrainConfig
from distrain.datasets.info import DatasetInfo
from distrain.learning.models import build_model
from distrain.train.modes.pipeline import PipelineReplica
from distrain.train.replica import batch_gradients
from distrain.train.horovod import keep_collectives_in_order, start_horovod
from distrain.train.runtime import configure_tensorflow
from distrain.learning.split import ModelGroup

cfg = TrainConfig.from_json(open(sys.argv[2]).read())
configure_tensorflow(cfg)
keep_collectives_in_order()  # as the pipeline mode sets its processes up
hvd, _ = start_horovod(False)
info = DatasetInfo.load(cfg.data_dir)
shape = tuple(info.metadata.get("image_shape", [28, 28]))
rng = np.random.RandomState(11)  # the same batch on both ranks
x = tf.constant(rng.rand(32, *shape).astype(np.float32))
y = tf.constant(rng.randint(0, info.num_classes, 32).astype(np.int32))
result = {"rank": hvd.rank()}
for name in ("mlp", "cnn"):
    run_cfg = dataclasses.replace(cfg, model=name, output_dir=f"{cfg.output_dir}/{name}")
    group = ModelGroup(hvd, hvd.rank(), 2)
    replica = PipelineReplica(run_cfg, group, 4, [hvd.global_process_set])
    whole = build_model(info, name, cfg.seed)
    loss_w, correct_w, grads_w = tf.function(
        lambda: batch_gradients(whole, whole.trainable_variables, x, y))()
    loss_s, correct_s, grads_s = tf.function(lambda: replica.gradients(x, y))()
    start, stop = replica.bounds[replica.stage]
    by_var = {id(v): g for v, g in zip(whole.trainable_variables, grads_w)}
    mine = [by_var[id(v)] for layer in whole.layers[start:stop] for v in layer.trainable_weights]
    assert len(mine) == len(grads_s), (len(mine), len(grads_s))
    worst = 0.0
    for want, got in zip(mine, grads_s):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5, atol=1e-5)
        worst = max(worst, float(np.abs(got.numpy() - want.numpy()).max()))
    # Validation through the stages: both stages report the unsplit model's numbers.
    val_loss, val_acc = replica.evaluate()
    loss_sum = hits = count = 0.0
    for vx, vy in replica.val_ds:
        logits = whole(vx, training=False)
        losses = tf.keras.losses.sparse_categorical_crossentropy(vy, logits, from_logits=True)
        loss_sum += float(tf.reduce_sum(losses))
        right = tf.equal(tf.argmax(logits, -1, output_type=tf.int32), vy)
        hits += float(tf.reduce_sum(tf.cast(right, tf.float32)))
        count += int(vy.shape[0])
    gathered = replica.whole_weights()
    same = all(np.array_equal(a, w.numpy()) for a, w in zip(gathered, whole.weights, strict=True))
    result[name] = {
        "loss": [float(loss_w), float(loss_s)],
        "correct": [float(correct_w), float(correct_s)],
        "bounds": replica.bounds,
        "worst": worst,
        "gradients": len(grads_s),
        "gathered_equal": same,
        "evaluate": [val_loss, val_acc, loss_sum / count, hits / count],
    }
open(f"{sys.argv[1]}/result-{hvd.rank()}.json", "w").write(json.dumps(result))
"""


@pytest.mark.slow
@pytest.mark.horovod
def test_stages_gradients_over_micro_batches_equal_the_unsplit_models(mnist_examples, tmp_path):
    cfg = TrainConfig(
        data_dir=str(mnist_examples), output_dir=str(tmp_path / "o"), run="pipeline:2:micro=4"
    )
    config = cfg.save(tmp_path / "config.json")
    first, last = run_on_ranks(tmp_path, _STAGES, str(config))
    for name in ("mlp", "cnn"):
        # The loss and accuracy are the last stage's: the first computes none.
        whole, split = last[name]["loss"]
        assert split == pytest.approx(whole, rel=1e-5), (name, last[name])
        assert last[name]["correct"][0] == last[name]["correct"][1]
        assert first[name]["loss"][1] == 0.0
        for result in (first, last):
            r = result[name]
            assert r["worst"] <= 1e-5 and r["gradients"] > 0
            assert r["gathered_equal"], name
            val_loss, val_acc, want_loss, want_acc = r["evaluate"]
            assert val_loss == pytest.approx(want_loss, rel=1e-5) and val_acc == want_acc
        (a, b), (c, d) = first[name]["bounds"]
        assert a == 0 and b == c and d > c
