"""The shared layers (distrain/train/layers.py): same values as the layers they replace."""

import numpy as np
import tensorflow as tf
import tf_keras as keras

from distrain.train.layers import MeanEmbedding

# Rows of token ids padded with 0: repeated ids, a full row, and a last row of padding.
IDS = np.array([[3, 1, 3, 0, 0], [2, 4, 5, 6, 1], [7, 0, 0, 0, 0], [0, 0, 0, 0, 0]], np.int32)


def _pair(dim=4, vocab=8):
    init = keras.initializers.RandomUniform(-0.5, 0.5, seed=1)
    masked = keras.Sequential(
        [
            keras.layers.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(vocab, dim, mask_zero=True, embeddings_initializer=init),
            keras.layers.GlobalAveragePooling1D(),
        ]
    )
    mean = keras.Sequential(
        [
            keras.layers.Input(shape=(None,), dtype="int32"),
            MeanEmbedding(vocab, dim, embeddings_initializer=init),
        ]
    )
    return masked, mean


def test_mean_embedding_is_the_masked_average_and_its_gradient():
    masked, mean = _pair()
    np.testing.assert_array_equal(masked.get_weights()[0], mean.get_weights()[0])
    rows = IDS[:3]  # the masked average of an empty row is 0/0
    np.testing.assert_allclose(mean(rows).numpy(), masked(rows).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(mean(IDS).numpy()[3], np.zeros(4))  # no tokens: zeros
    weights = tf.constant(np.arange(12, dtype=np.float32).reshape(3, 4))
    grads = []
    for model in (masked, mean):
        with tf.GradientTape() as tape:
            out = tf.reduce_sum(model(rows) * weights)
        grads.append(tf.convert_to_tensor(tape.gradient(out, model.trainable_variables[0])))
    np.testing.assert_allclose(grads[1].numpy(), grads[0].numpy(), rtol=1e-6, atol=1e-7)


def test_mean_embedding_gradient_has_a_row_per_distinct_id_not_per_position():
    _, mean = _pair()
    with tf.GradientTape() as tape:
        out = tf.reduce_sum(mean(IDS))
    grad = tape.gradient(out, mean.trainable_variables[0])
    assert isinstance(grad, tf.IndexedSlices)
    assert sorted(grad.indices.numpy().tolist()) == [1, 2, 3, 4, 5, 6, 7]  # no padding id 0


def test_a_saved_model_with_mean_embedding_loads(tmp_path):
    from distrain.train.predict import load_model

    _, mean = _pair()
    mean.save(tmp_path / "model.keras")
    loaded = load_model(tmp_path / "model.keras")
    np.testing.assert_allclose(loaded(IDS).numpy(), mean(IDS).numpy())
