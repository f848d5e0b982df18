"""MeanEmbedding: the mean of a row's token embeddings, as Embedding + masked average gives."""

from __future__ import annotations

import numpy as np
import tensorflow as tf
import tf_keras as keras

from distrain.learning.layers import MeanEmbedding

IDS = [[3, 5, 5, 0, 0], [7, 1, 0, 0, 0], [2, 2, 2, 2, 9], [0, 0, 0, 0, 0]]


def _models(dim=4, vocab=12):
    init = keras.initializers.RandomUniform(-0.5, 0.5, seed=3)
    inputs = keras.layers.Input((None,), dtype="int32")
    whole = keras.Sequential(
        [
            inputs,
            keras.layers.Embedding(vocab, dim, mask_zero=True, embeddings_initializer=init),
            keras.layers.GlobalAveragePooling1D(),
        ]
    )
    mean = keras.Sequential(
        [keras.layers.Input((None,), dtype="int32"), MeanEmbedding(vocab, dim, init)]
    )
    mean.set_weights(whole.get_weights())
    return whole, mean


def _output_and_gradient(model, ids, weights):
    with tf.GradientTape() as tape:
        out = model(tf.constant(ids, tf.int32))
        loss = tf.reduce_sum(out * weights)
    return out.numpy(), tape.gradient(loss, model.trainable_variables)[0]


def test_it_gives_the_masked_average_of_the_embeddings_and_its_gradient():
    whole, mean = _models()
    weights = tf.constant(np.random.default_rng(0).standard_normal((3, 4)), tf.float32)
    want_out, want_grad = _output_and_gradient(whole, IDS[:3], weights)
    out, grad = _output_and_gradient(mean, IDS[:3], weights)
    np.testing.assert_allclose(out, want_out, rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(
        tf.convert_to_tensor(grad).numpy(), tf.convert_to_tensor(want_grad).numpy(), atol=1e-7
    )
    # One gradient row per distinct id of the batch, padding left out.
    assert isinstance(grad, tf.IndexedSlices)
    assert sorted(grad.indices.numpy().tolist()) == [1, 2, 3, 5, 7, 9]


def test_a_row_without_tokens_gives_zeros():
    _, mean = _models()
    out = mean(tf.constant(IDS, tf.int32)).numpy()
    assert not out[3].any() and out[:3].any()


def test_a_saved_model_loads_with_the_layer_by_name(tmp_path):
    _, mean = _models()
    mean.save(tmp_path / "model.keras")
    loaded = keras.models.load_model(tmp_path / "model.keras", compile=False)
    ids = tf.constant(IDS, tf.int32)
    np.testing.assert_array_equal(loaded(ids).numpy(), mean(ids).numpy())
