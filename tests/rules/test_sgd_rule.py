"""fastText's rule, :class:`distrain.learning.optim.SGD`, against values computed by hand.

Known values in, the exact values out: a rate per example (``examples`` times the mean
gradient a step computes) that falls linearly to zero over the run's updates; a sparse
gradient moves only its rows, repeated rows adding up, in one scatter (nothing made unique
first); a dense gradient moves every coordinate. The same rule runs eagerly (single,
sync), traced, and in the v1 graphs that parameter-server workers build.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from distrain.learning.optim import SGD

# Rate 0.1 per example, 2 examples an update, falling to zero over 4 updates: the updates'
# step sizes are 0.2, 0.15, 0.1, 0.05, then 0.
INITIAL = np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]], np.float32)
STEPS = [
    ("sparse", [1, 3, 1], [[1.0, 0.0], [0.0, 2.0], [0.5, -1.0]]),  # row 1: 1.5, -1 (summed)
    ("dense", None, [[1.0, 1.0], [0.0, 0.0], [2.0, 0.0], [0.0, 0.0]]),
    ("sparse", [3], [[-2.0, 4.0]]),
    ("sparse", [0, 0], [[1.0, 1.0], [1.0, 1.0]]),
    ("sparse", [2], [[100.0, 100.0]]),  # past the last update: the rate is 0
]
# By hand: row 1: 3 - 0.2 * 1.5, 4 + 0.2 * 1; row 3: 8 - 0.2 * 2, then 7 + 0.1 * 2, 7.6 - 0.1 * 4;
# row 0: 1 - 0.15, 2 - 0.15, then each - 0.05 * 2; row 2: 5 - 0.15 * 2.
EXPECTED = np.array([[0.75, 1.75], [2.7, 4.2], [4.7, 6.0], [7.2, 7.2]])


def _grad(kind, indices, values):
    if kind == "dense":
        return tf.constant(values, tf.float32)
    return tf.IndexedSlices(
        tf.constant(values, tf.float32), tf.constant(indices, tf.int64), tf.constant([4, 2])
    )


def _sgd():
    return SGD(0.1, examples=2, linear_updates=4)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf.function"])
def test_sgd_follows_the_hand_computed_steps(traced):
    var = tf.Variable(INITIAL)
    opt = _sgd()
    opt.build([var])

    def apply(grad):
        opt.apply_gradients([(grad, var)])

    if traced:
        apply = tf.function(apply)
    for step in STEPS:
        apply(_grad(*step))
    np.testing.assert_allclose(var.numpy(), EXPECTED, rtol=1e-6)
    assert int(opt.iterations.numpy()) == len(STEPS)
    assert opt.variables == (opt.iterations,)  # no slots: nothing else to checkpoint or move


def test_sgd_follows_the_hand_computed_steps_in_a_parameter_server_graph():
    # [ps] the update runs where the variable is, out of a v1 session
    graph = tf.Graph()
    with graph.as_default():
        var = tf.Variable(INITIAL)
        opt = _sgd()
        opt.build([var])
        indices = tf.compat.v1.placeholder(tf.int64, [None])
        values = tf.compat.v1.placeholder(tf.float32, [None, 2])
        dense = tf.compat.v1.placeholder(tf.float32, [4, 2])
        sparse_update = opt.apply_gradients([(tf.IndexedSlices(values, indices, [4, 2]), var)])
        dense_update = opt.apply_gradients([(dense, var)])
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for kind, i, v in STEPS:
                if kind == "dense":
                    sess.run(dense_update, {dense: v})
                else:
                    sess.run(sparse_update, {indices: i, values: v})
            np.testing.assert_allclose(sess.run(var), EXPECTED, rtol=1e-6)


def test_the_scale_multiplies_one_updates_step():
    # [async] lr=staleness divides an update's step size: 0.2 * 0.5 on the first update.
    var = tf.Variable(INITIAL)
    opt = _sgd()
    opt.build([var])
    opt.apply_gradients([(_grad("sparse", [2], [[1.0, -1.0]]), var)], scale=tf.constant(0.5))
    np.testing.assert_allclose(var.numpy()[2], [4.9, 6.1], rtol=1e-6)


def test_the_sparse_step_makes_nothing_unique():
    # The rows' sum happens in the scatter: no Unique, no segment sum in the step's graph.
    var = tf.Variable(INITIAL)
    opt = _sgd()
    opt.build([var])

    @tf.function
    def step(grad):
        opt.apply_gradients([(grad, var)])

    spec = tf.IndexedSlicesSpec([4, 2], tf.float32, tf.int64, tf.int32, [2])
    graph = step.get_concrete_function(spec).graph
    kinds = {op.type for op in graph.get_operations()}
    assert "ResourceScatterSub" in kinds
    assert not kinds & {"Unique", "UnsortedSegmentSum"}


def _info(train_rows: int):
    from types import SimpleNamespace

    return SimpleNamespace(
        splits={"train": train_rows}, metadata={"vocab_size": 50}, num_classes=14
    )


@pytest.mark.parametrize(
    "rows, dim, rule", [(3_796, 64, "adam"), (29_999, 64, "adam"), (30_000, 10, "sgd")]
)
def test_dbpedias_default_model_chooses_its_size_and_rule_from_the_data(rows, dim, rule):
    from distrain.datasets.dbpedia.models import fasttext
    from distrain.learning.choices import make_optimizer
    from distrain.learning.models import model_spec
    from distrain.learning.optim import SGD, Adam

    spec, info = model_spec("dbpedia", "fasttext"), _info(rows)
    assert fasttext(info, 0).layers[0].output_dim == dim
    optimizer = make_optimizer(spec, info, 0.04, examples=512, run_updates=7 * 20)
    assert type(optimizer) is {"adam": Adam, "sgd": SGD}[rule]
    if rule == "sgd":  # per example at the run's batch, falling to 0 over the run's updates
        assert (optimizer.examples, optimizer.linear_updates) == (512, 140)
    assert f"{rows:,} training rows" in spec.chosen(info) and f"{dim} dimensions" in spec.chosen(
        info
    )
    # The other models keep their optimizer whatever the size.
    assert type(make_optimizer(model_spec("dbpedia", "nbow"), info, 0.04)) is Adam
