"""Keras layers of distrain's own models, registered so that a saved model loads by name.

Imported when a model that uses them is built or loaded (it imports tf-keras).
"""

from __future__ import annotations

import tensorflow as tf
import tf_keras as keras


@keras.saving.register_keras_serializable(package="distrain")
class MeanEmbedding(keras.layers.Layer):
    """The mean of the embeddings of each row's token ids, padding (id 0) left out.

    What ``Embedding(mask_zero=True)`` followed by ``GlobalAveragePooling1D`` computes,
    without the ``[rows, length, dim]`` tensor between them: each distinct id of the batch
    is looked up once, and the rows' means are a sparse matrix (``1/length`` at each of a
    row's tokens) times those embeddings. The embeddings' gradient is then one row per
    distinct id of the batch instead of one per token position, padding included, which
    the optimizer's lazy update otherwise has to sum first (at a text classifier's batch of 512
    rows, 67,000 positions for some 20,000 distinct ids). A row without tokens gives zeros.

    Args:
        input_dim: Size of the vocabulary (ids ``0 .. input_dim - 1``; 0 is padding).
        output_dim: Size of an embedding.
        embeddings_initializer: Initialiser of the table.
    """

    def __init__(self, input_dim: int, output_dim: int, embeddings_initializer="uniform", **kw):
        super().__init__(**kw)
        self.input_dim, self.output_dim = int(input_dim), int(output_dim)
        self.embeddings_initializer = keras.initializers.get(embeddings_initializer)

    def build(self, input_shape):
        self.embeddings = self.add_weight(
            name="embeddings",
            shape=(self.input_dim, self.output_dim),
            initializer=self.embeddings_initializer,
        )
        super().build(input_shape)

    def call(self, ids):
        ids = tf.cast(ids, tf.int64)
        at = tf.where(tf.not_equal(ids, 0))  # (row, position) of every token, row-major
        unique, which = tf.unique(tf.gather_nd(ids, at), out_idx=tf.int64)
        lengths = tf.math.count_nonzero(ids, axis=1, dtype=self.compute_dtype)
        weights = tf.gather(1.0 / tf.maximum(lengths, 1.0), at[:, 0])
        shape = tf.stack([tf.shape(ids, out_type=tf.int64)[0], tf.size(unique, out_type=tf.int64)])
        bag = tf.sparse.SparseTensor(tf.stack([at[:, 0], which], axis=1), weights, shape)
        # The gather's gradient is the lookup's rows only: an IndexedSlices of distinct ids.
        return tf.sparse.sparse_dense_matmul(bag, tf.gather(self.embeddings, unique))

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.output_dim)

    def get_config(self) -> dict:
        return {
            **super().get_config(),
            "input_dim": self.input_dim,
            "output_dim": self.output_dim,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }
