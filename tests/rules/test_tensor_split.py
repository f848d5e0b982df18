"""Exact tests of the column split (``tensor``) on two Horovod ranks.

The same batch and weights through the unsplit model and through each rank's share of the
split one: the losses must agree, each split kernel's gradient must be its columns of the
unsplit kernel's gradient (an LSTM's: its units' columns of each of the four gates), and
the layers that are not split must have the unsplit model's gradients, all to 1e-5. The
weights gathered back must be the unsplit model's.
"""

from __future__ import annotations

import pytest

from distrain.train.config import TrainConfig
from tests.rules.ranks import run_on_ranks

_SPLIT = """
import json, sys
import distrain  # noqa: F401
import numpy as np
import tensorflow as tf
from distrain.train.config import TrainConfig
from distrain.datasets.info import DatasetInfo
from distrain.learning.models import build_model
from distrain.train.replica import batch_gradients
from distrain.train.horovod import start_horovod
from distrain.train.runtime import configure_tensorflow
from distrain.learning.split import ColumnDense, ModelGroup, parameters, split_model, whole_weights

cfg = TrainConfig.from_json(open(sys.argv[2]).read())
configure_tensorflow(cfg)
hvd, _ = start_horovod(False)
group = ModelGroup(hvd, hvd.rank(), hvd.size())
info = DatasetInfo.load(cfg.data_dir)
shape = tuple(info.metadata.get("image_shape", [28, 28]))
rng = np.random.RandomState(7)  # the same batch on both ranks
x = tf.constant(rng.rand(32, *shape).astype(np.float32))
y = tf.constant(rng.randint(0, info.num_classes, 32).astype(np.int32))
result = {"rank": hvd.rank()}
for name in ("mlp", "cnn"):
    whole = build_model(info, name, 3)
    before = [w.numpy() for w in whole.weights]
    split = split_model(whole, group)

    def step(model):
        return tf.function(lambda: batch_gradients(model, model.trainable_variables, x, y))()

    loss_w, correct_w, grads_w = step(whole)
    loss_s, correct_s, grads_s = step(split)
    by_var_w = {id(v): g for v, g in zip(whole.trainable_variables, grads_w)}
    by_var_s = {id(v): g for v, g in zip(split.trainable_variables, grads_s)}
    worst, split_kernels = 0.0, 0
    for full_layer, layer in zip(whole.layers, split.layers, strict=True):
        if isinstance(layer, ColumnDense):
            split_kernels += 1
            start = sum(layer.sizes[: group.rank])
            cols = slice(start, start + layer.sizes[group.rank])
            pairs = [(full_layer.kernel, layer.kernel, cols), (full_layer.bias, layer.bias, cols)]
        else:
            pairs = [(v, v, slice(None)) for v in layer.trainable_weights]
        for full_var, var, cols in pairs:
            want = by_var_w[id(full_var)].numpy()[..., cols]
            got = by_var_s[id(var)].numpy()
            assert want.shape == got.shape, (want.shape, got.shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
            worst = max(worst, float(np.abs(got - want).max()))
    gathered = whole_weights(split, group)
    same_weights = all(np.array_equal(a, b) for a, b in zip(gathered, before, strict=True))
    result[name] = {
        "loss": [float(loss_w), float(loss_s)],
        "correct": [float(correct_w), float(correct_s)],
        "worst": worst,
        "split_kernels": split_kernels,
        "parameters": [parameters(whole), parameters(split)],
        "gathered_equal": same_weights,
    }
open(f"{sys.argv[1]}/result-{hvd.rank()}.json", "w").write(json.dumps(result))
"""


@pytest.mark.slow
@pytest.mark.horovod
def test_split_losses_and_gradients_equal_the_unsplit_models(mnist_examples, tmp_path):
    cfg = TrainConfig(data_dir=str(mnist_examples), output_dir=str(tmp_path / "o"), run="tensor:2")
    config = cfg.save(tmp_path / "config.json")
    for result in run_on_ranks(tmp_path, _SPLIT, str(config)):
        for name, dense_layers in (("mlp", 3), ("cnn", 2)):
            r = result[name]
            whole, split = r["loss"]
            assert split == pytest.approx(whole, rel=1e-5), (name, r)
            assert r["correct"][0] == r["correct"][1]
            assert r["split_kernels"] == dense_layers
            assert r["worst"] <= 1e-5
            assert r["gathered_equal"], name
            # The dense layers are most of either model: each rank holds about half.
            full, mine = r["parameters"]
            assert mine < 0.6 * full, (name, r["parameters"])


_RECURRENT = """
import json, sys
import distrain  # noqa: F401
import numpy as np
import tensorflow as tf
import tf_keras as keras
from distrain.train.config import TrainConfig
from distrain.datasets.info import DatasetInfo
from distrain.learning.models import build_model
from distrain.train.replica import batch_gradients
from distrain.train.horovod import start_horovod
from distrain.train.runtime import configure_tensorflow
from distrain.learning.split import ColumnLayer, ModelGroup, split_model, whole_weights

cfg = TrainConfig.from_json(open(sys.argv[2]).read())
configure_tensorflow(cfg)
hvd, _ = start_horovod(False)
group = ModelGroup(hvd, hvd.rank(), hvd.size())
VOCAB, STEPS, BATCH = 23, 9, 6
info = DatasetInfo(data_dir=".", dataset="gutenberg", num_classes=0, class_names=[],
                   splits={}, files={}, metadata={"vocab_size": VOCAB})


def encoder_decoder(seed):
    # Two LSTMs of 7 units (4 and 3 a rank): the encoder's last state starts the decoder,
    # a dense layer reads each of its steps. The encoder's input is masked (zero: padding).
    L, init = keras.layers, keras.initializers
    source = L.Input((None,), dtype="int32")
    target = L.Input((None,), dtype="int32")
    e = L.Embedding(VOCAB, 5, mask_zero=True,
                    embeddings_initializer=init.RandomUniform(-1, 1, seed))(source)
    _, h, c = L.LSTM(7, return_state=True, kernel_initializer=init.GlorotUniform(seed + 1),
                     recurrent_initializer=init.Orthogonal(seed=seed + 2),
                     bias_initializer=init.RandomUniform(-0.5, 0.5, seed + 3))(e)
    d = L.Embedding(VOCAB, 5, embeddings_initializer=init.RandomUniform(-1, 1, seed + 4))(target)
    seq = L.LSTM(7, return_sequences=True, kernel_initializer=init.GlorotUniform(seed + 5),
                 recurrent_initializer=init.Orthogonal(seed=seed + 6))(d, initial_state=[h, c])
    logits = L.Dense(VOCAB, kernel_initializer=init.GlorotUniform(seed + 7))(seq)
    return keras.Model([source, target], logits, name="encoder_decoder")


def columns(units, gates, rank):
    # Rank 0 the first ceil(units / 2) units of every gate block, rank 1 the rest.
    sizes = [(units + 1) // 2, units // 2]
    start = sum(sizes[:rank])
    return [g * units + start + k for g in range(gates) for k in range(sizes[rank])]


rng = np.random.RandomState(7)  # the same batch on both ranks
tokens = rng.randint(1, VOCAB, (BATCH, STEPS)).astype(np.int32)
source = tokens.copy()
source[:, STEPS - 3:] = 0
source[0, 2:] = 0
y = tf.constant(rng.randint(0, VOCAB, (BATCH, STEPS)).astype(np.int32))
cases = {
    "lstm": (build_model(info, "lstm-seed", 3), tf.constant(tokens)),
    "rnn": (build_model(info, "rnn", 3), tf.constant(tokens)),
    "encdec": (encoder_decoder(3), (tf.constant(source), tf.constant(tokens))),
}
result = {"rank": hvd.rank()}
for name, (whole, x) in cases.items():
    before = [w.numpy() for w in whole.weights]
    split = split_model(whole, group)

    def step(model):
        return tf.function(lambda: batch_gradients(model, model.trainable_variables, x, y))()

    loss_w, _, grads_w = step(whole)
    loss_s, _, grads_s = step(split)
    dense = lambda g: tf.convert_to_tensor(g).numpy()  # noqa: E731 (embeddings' rows)
    by_var_w = {id(v): dense(g) for v, g in zip(whole.trainable_variables, grads_w)}
    by_var_s = {id(v): dense(g) for v, g in zip(split.trainable_variables, grads_s)}
    worst, split_layers = 0.0, []
    for full_layer, layer in zip(whole.layers, split.layers, strict=True):
        if isinstance(layer, ColumnLayer):
            split_layers.append(type(layer).__name__)
            gates = 4 if isinstance(full_layer, keras.layers.LSTM) else 1
            cols = columns(layer.units, gates, group.rank)
            # kernel, recurrent kernel, bias: the unsplit layer's order
            pairs = zip(full_layer.trainable_weights, layer.trainable_weights, strict=True)
            pairs = [(full, mine, cols) for full, mine in pairs]
        else:
            pairs = [(v, v, slice(None)) for v in layer.trainable_weights]
        for full_var, var, cols in pairs:
            want, got = by_var_w[id(full_var)][..., cols], by_var_s[id(var)]
            assert want.shape == got.shape, (name, var.name, want.shape, got.shape)
            np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5, err_msg=var.name)
            worst = max(worst, float(np.abs(got - want).max()))
    gathered = whole_weights(split, group)
    same = all(np.array_equal(a, b) for a, b in zip(gathered, before, strict=True))
    result[name] = {"loss": [float(loss_w), float(loss_s)], "worst": worst,
                    "split_layers": split_layers, "gathered_equal": same}
open(f"{sys.argv[1]}/result-{hvd.rank()}.json", "w").write(json.dumps(result))
"""


@pytest.mark.slow
@pytest.mark.horovod
def test_split_recurrent_models_losses_and_gradients_equal_the_unsplit_models(tmp_path):
    cfg = TrainConfig(data_dir=str(tmp_path), output_dir=str(tmp_path / "o"), run="tensor:2")
    config = cfg.save(tmp_path / "config.json")
    layers = {
        "lstm": ["ColumnLSTM", "ColumnLSTM", "ColumnDense"],
        "rnn": ["ColumnSimpleRNN", "ColumnSimpleRNN", "ColumnDense"],
        "encdec": ["ColumnLSTM", "ColumnLSTM", "ColumnDense"],
    }
    for result in run_on_ranks(tmp_path, _RECURRENT, str(config)):
        for name, split_layers in layers.items():
            r = result[name]
            whole, split = r["loss"]
            assert split == pytest.approx(whole, rel=1e-5), (name, r)
            assert r["split_layers"] == split_layers
            assert r["worst"] <= 1e-5
            assert r["gathered_equal"], name


def test_split_modes_train_a_stream_language_model_on_windows():
    from distrain.train.modes import mode_class

    # A split layer has no stateful copy: the default LSTM must not be made stateful.
    for mode in ("tensor", "pipeline", "hybrid"):
        assert mode_class(mode).carries_state is False, mode
    assert mode_class("sync").carries_state and mode_class("single").carries_state


def test_recurrent_models_are_accepted_by_the_split_modes(tmp_path):
    for run in ("tensor:2", "hybrid:1:2"):
        for model in ("lstm", "rnn"):
            cfg = TrainConfig(data_dir=str(tmp_path), output_dir="o", run=run, model=model)
            assert cfg.model == model


def test_layers_the_split_does_not_cover_are_refused_by_name():
    import tf_keras as keras

    from distrain.learning.split import ModelGroup, split_model, unsplittable

    model = keras.Sequential(
        [
            keras.layers.Input((5, 3)),
            keras.layers.LSTM(4, return_sequences=True, name="fine"),
            keras.layers.GRU(4, return_sequences=True, name="gated"),
            keras.layers.SimpleRNN(4, dropout=0.5, name="dropping"),
            keras.layers.Dense(2),
        ]
    )
    refused = unsplittable(model)
    assert [r.split(":")[0] for r in refused] == ["gated", "dropping"]
    assert "GRU" in refused[0] and "dropout" in refused[1]
    with pytest.raises(ValueError, match="no column split for gated: GRU layers"):
        split_model(model, ModelGroup(hvd=None, rank=0, size=2))


_HYBRID = """
import json, sys
import distrain  # noqa: F401
import horovod.tensorflow as hvd
import numpy as np
import tensorflow as tf
from distrain.train.config import TrainConfig
from distrain.datasets.info import DatasetInfo
from distrain.learning.models import build_model
from distrain.train.modes.hybrid import groups, layout, process_sets
from distrain.train.replica import allreduce_gradients, batch_gradients
from distrain.train.horovod import start_horovod
from distrain.train.runtime import configure_tensorflow
from distrain.learning.split import ColumnDense, split_model

cfg = TrainConfig.from_json(open(sys.argv[2]).read())
configure_tensorflow(cfg)
sets = process_sets(hvd, 2, 2)
hvd, _ = start_horovod(False, process_sets=[*sets[0], *sets[1]])
group, model_group, reduce = groups(hvd, 2, 2, sets)
d, m = layout(hvd.rank(), 2)
info = DatasetInfo.load(cfg.data_dir)
shape = tuple(info.metadata.get("image_shape", [28, 28]))

def batch(data_group):  # each data group its own batch; the ranks of a group the same
    rng = np.random.RandomState(100 + data_group)
    return (tf.constant(rng.rand(16, *shape).astype(np.float32)),
            tf.constant(rng.randint(0, info.num_classes, 16).astype(np.int32)))

whole = build_model(info, "mlp", 5)
split = split_model(whole, model_group)
x, y = batch(d)

@tf.function
def split_step():  # the hybrid step's gradients: the split's, averaged over the data groups
    _, _, g = batch_gradients(split, split.trainable_variables, x, y)
    return reduce(list(g))

grads = split_step()
# The unsplit model's gradient, averaged over both data groups' batches.
mean = None
for other in (0, 1):
    ox, oy = batch(other)
    _, _, g = tf.function(lambda: batch_gradients(whole, whole.trainable_variables, ox, oy))()
    g = [t.numpy() / 2 for t in g]
    mean = g if mean is None else [a + b for a, b in zip(mean, g)]
by_var = {id(v): g for v, g in zip(whole.trainable_variables, mean)}
got = {id(v): g for v, g in zip(split.trainable_variables, grads)}
worst = 0.0
for full_layer, layer in zip(whole.layers, split.layers):
    if isinstance(layer, ColumnDense):
        start = sum(layer.sizes[:m])
        cols = slice(start, start + layer.sizes[m])
        pairs = [(full_layer.kernel, layer.kernel, cols), (full_layer.bias, layer.bias, cols)]
    else:
        pairs = [(v, v, slice(None)) for v in layer.trainable_weights]
    for full_var, var, cols in pairs:
        want, have = by_var[id(full_var)][..., cols], got[id(var)].numpy()
        np.testing.assert_allclose(have, want, rtol=1e-5, atol=1e-5)
        worst = max(worst, float(np.abs(have - want).max()))
out = {"rank": hvd.rank(), "data": d, "model": m, "worst": worst}
open(f"{sys.argv[1]}/result-{hvd.rank()}.json", "w").write(json.dumps(out))
"""


@pytest.mark.slow
@pytest.mark.horovod
def test_hybrid_gradients_are_the_unsplit_models_mean_over_the_data_groups(
    mnist_examples, tmp_path
):
    cfg = TrainConfig(
        data_dir=str(mnist_examples), output_dir=str(tmp_path / "o"), run="hybrid:2:2"
    )
    config = cfg.save(tmp_path / "config.json")
    results = run_on_ranks(tmp_path, _HYBRID, str(config), ranks=4)
    assert [(r["data"], r["model"]) for r in results] == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(r["worst"] <= 1e-5 for r in results)


def test_hybrid_spec_counts_every_rank(tmp_path):
    from distrain.train.horovod import sync_command

    cfg = TrainConfig(data_dir=str(tmp_path), output_dir="o", run="hybrid:1:2")
    assert cfg.run.name == "hybrid:1:2" and str(cfg.run) == "hybrid:1:model=2"
    assert cfg.run.processes == 2 and cfg.run.impl.gradients_per_update() == 1
    # One data group of two ranks still needs a cluster job of two ranks.
    assert cfg.run.impl.needs_cluster()
    command = sync_command(cfg, ["worker"])
    assert command[command.index("-np") + 1] == "2"
    assert TrainConfig(data_dir=str(tmp_path), output_dir="o", run="hybrid:2:3").run.processes == 6
