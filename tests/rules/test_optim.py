"""The optimizer's sparse rule, lazy Adam, against a reference written here in numpy.

Known values in, the exact values out: a sparse gradient (``tf.IndexedSlices``) updates only
the rows it names (their moments and their values); every other row keeps its value and its
moments, bit for bit. The same ``Adam`` runs eagerly (single, sync), traced, and in the v1
graphs that parameter-server workers build, so the rule is checked in all three.
"""

from __future__ import annotations

import numpy as np
import pytest
import tensorflow as tf

from distrain.learning.optim import Adam

LR, B1, B2, EPS = 0.01, 0.9, 0.999, 1e-7

# Four steps over a table of 6 rows of 3: repeated indices in a step (summed), rows that
# come back after a pause (their moments must not have decayed meanwhile), rows never touched.
STEPS = [
    ([1, 3, 1], [[1.0, -2.0, 0.5], [0.25, 0.0, -1.0], [1.0, 1.0, 1.0]]),
    ([3], [[-0.5, 4.0, 2.0]]),
    ([4, 1], [[2.0, 2.0, -2.0], [0.125, -0.5, 3.0]]),
    ([3, 3], [[1.0, -1.0, 0.0], [1.0, 1.0, 0.5]]),
]
INITIAL = np.arange(18, dtype=np.float32).reshape(6, 3) / 10.0
UNTOUCHED = [0, 2, 5]


def lazy_adam_reference(initial, steps, lr=LR, b1=B1, b2=B2, eps=EPS):
    """Lazy Adam, row by row in float64: returns the values and both moments."""
    var = initial.astype(np.float64).copy()
    m, v = np.zeros_like(var), np.zeros_like(var)
    for t, (indices, values) in enumerate(steps, start=1):
        summed: dict[int, np.ndarray] = {}
        for i, row in zip(indices, values, strict=True):
            summed[i] = summed.get(i, 0.0) + np.asarray(row, np.float64)
        alpha = lr * np.sqrt(1.0 - b2**t) / (1.0 - b1**t)
        for i, g in summed.items():
            m[i] = b1 * m[i] + (1.0 - b1) * g
            v[i] = b2 * v[i] + (1.0 - b2) * g * g
            var[i] = var[i] - alpha * m[i] / (np.sqrt(v[i]) + eps)
    return var, m, v


def _slices(indices, values):
    return tf.IndexedSlices(
        tf.constant(values, tf.float32), tf.constant(indices, tf.int64), tf.constant([6, 3])
    )


def _check(var, m, v):
    want_var, want_m, want_v = lazy_adam_reference(INITIAL, STEPS)
    np.testing.assert_allclose(var, want_var, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(m, want_m, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(v, want_v, rtol=1e-6, atol=1e-9)
    # Untouched rows: the initial values exactly, moments still zero.
    assert np.array_equal(var[UNTOUCHED], INITIAL[UNTOUCHED])
    assert not m[UNTOUCHED].any() and not v[UNTOUCHED].any()


def test_the_reference_gives_the_known_first_step():
    # Step 1 of Adam moves each coordinate by lr * g / (|g| + eps / sqrt(1 - b2)): ~lr * sign(g).
    var, m, _ = lazy_adam_reference(np.zeros((2, 2)), [([1], [[2.0, -0.5]])])
    assert var[0].tolist() == [0.0, 0.0] and not m[0].any()
    expected = -LR * np.array([2.0, -0.5]) / (np.abs([2.0, -0.5]) + EPS / np.sqrt(1 - B2))
    np.testing.assert_allclose(var[1], expected, rtol=1e-12)


@pytest.mark.parametrize("traced", [False, True], ids=["eager", "tf.function"])
def test_sparse_gradients_follow_lazy_adam(traced):
    var = tf.Variable(INITIAL)
    opt = Adam(LR, beta_1=B1, beta_2=B2, epsilon=EPS)
    opt.build([var])

    def apply(grad):
        opt.apply_gradients([(grad, var)])

    apply = tf.function(apply) if traced else apply
    for indices, values in STEPS:
        apply(_slices(indices, values))
    _check(var.numpy(), opt.m[0].numpy(), opt.v[0].numpy())
    assert int(opt.iterations.numpy()) == len(STEPS)


def test_sparse_gradients_follow_lazy_adam_in_a_parameter_server_graph():
    # [ps] Workers build v1 graphs whose updates run where the variables are (a server's
    # device): the same rule must come out of a session.
    graph = tf.Graph()
    with graph.as_default():
        var = tf.Variable(INITIAL)
        opt = Adam(LR, beta_1=B1, beta_2=B2, epsilon=EPS)
        opt.build([var])
        indices = tf.compat.v1.placeholder(tf.int64, [None])
        values = tf.compat.v1.placeholder(tf.float32, [None, 3])
        update = opt.apply_gradients([(tf.IndexedSlices(values, indices, [6, 3]), var)])
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            for i, v in STEPS:
                sess.run(update, {indices: i, values: v})
            _check(*sess.run([var, opt.m[0], opt.v[0]]))


def test_an_embedding_step_moves_only_the_looked_up_rows():
    # The model's own gradient: an Embedding layer's is sparse, and only its rows move, also
    # the rows an earlier step moved (their moments are not zero, and do not decay).
    import tf_keras as keras

    layer = keras.layers.Embedding(10, 4, embeddings_initializer="ones")
    layer.build((None,))
    opt = Adam(0.1)
    opt.build(layer.trainable_variables)
    moved = []
    for ids in ([[2, 7, 2]], [[5]]):
        before = layer.embeddings.numpy().copy()
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(tf.constant(ids)))
        grads = tape.gradient(loss, layer.trainable_variables)
        assert isinstance(grads[0], tf.IndexedSlices)
        opt.apply_gradients(zip(grads, layer.trainable_variables, strict=True))
        after = layer.embeddings.numpy()
        moved.append(np.flatnonzero((after != before).any(axis=1)).tolist())
    assert moved == [[2, 7], [5]]


def test_dense_gradients_keep_the_dense_rule():
    # A dense gradient still decays every coordinate's moments (TensorFlow's fused Adam).
    var = tf.Variable(INITIAL)
    opt = Adam(LR, beta_1=B1, beta_2=B2, epsilon=EPS)
    opt.build([var])
    dense = []
    for indices, values in STEPS:
        grad = np.zeros((6, 3), np.float32)
        np.add.at(grad, indices, np.asarray(values, np.float32))
        dense.append(grad)
        opt.apply_gradients([(tf.constant(grad), var)])
    want = INITIAL.astype(np.float64)
    m, v = np.zeros_like(want), np.zeros_like(want)
    for t, g in enumerate(dense, start=1):
        m, v = B1 * m + (1 - B1) * g, B2 * v + (1 - B2) * g * g
        want = want - LR * np.sqrt(1 - B2**t) / (1 - B1**t) * m / (np.sqrt(v) + EPS)
    np.testing.assert_allclose(var.numpy(), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("graph_mode", [False, True], ids=["tf.function", "v1 graph"])
def test_lazy_adam_does_not_make_the_embedding_layers_rows_unique_again(graph_mode):
    # MeanEmbedding looks up each distinct id once (one Unique): its gradient's rows are
    # distinct, and the optimizer takes them as they are; the update is lazy Adam's still.
    import tf_keras as keras

    from distrain.learning.layers import MeanEmbedding

    ids = [[1, 3, 1, 0], [4, 3, 0, 0]]

    def build():
        layer = MeanEmbedding(6, 3, embeddings_initializer=keras.initializers.Constant(INITIAL))
        layer.build((None, None))
        opt = Adam(LR, beta_1=B1, beta_2=B2, epsilon=EPS)
        opt.build(layer.trainable_variables)
        return layer, opt

    def step(layer, opt, x):
        with tf.GradientTape() as tape:
            loss = tf.reduce_sum(layer(x) * tf.constant([[1.0, -2.0, 0.5]]))
        grads = tape.gradient(loss, layer.trainable_variables)
        return opt.apply_gradients(zip(grads, layer.trainable_variables, strict=True))

    if graph_mode:
        graph = tf.Graph()
        with graph.as_default():
            layer, opt = build()
            update = step(layer, opt, tf.constant(ids))
            with tf.compat.v1.Session(graph=graph) as sess:
                sess.run(tf.compat.v1.global_variables_initializer())
                sess.run(update)
                var = sess.run(layer.embeddings)
    else:
        layer, opt = build()
        traced = tf.function(lambda x: step(layer, opt, x) and None)
        graph = traced.get_concrete_function(tf.TensorSpec([None, None], tf.int32)).graph
        traced(tf.constant(ids))
        var = layer.embeddings.numpy()
    uniques = [op for op in graph.get_operations() if op.type in ("Unique", "UniqueV2")]
    assert len(uniques) == 1  # the layer's; none in the optimizer's sparse path
    # Row 1 twice in a row of 3 tokens, row 3 in both rows (1/3 and 1/2), row 4 once (1/2).
    g = np.array([1.0, -2.0, 0.5])
    steps = [([1, 3, 4], [g * 2 / 3, g * (1 / 3 + 1 / 2), g / 2])]
    want, _, _ = lazy_adam_reference(INITIAL, steps)
    np.testing.assert_allclose(var, want, rtol=1e-6, atol=1e-7)
