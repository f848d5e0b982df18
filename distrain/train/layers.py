"""Keras layers that the data sets' models share (registered, so saved models load).

Imported by :mod:`distrain.train.models` when it builds them, and by
:func:`distrain.train.predict.load_model` before it loads a saved model.
"""

from __future__ import annotations

import tf_keras as keras


@keras.utils.register_keras_serializable(package="distrain")
class MeanEmbedding(keras.layers.Embedding):
    """The mean of each row's token embeddings, padding (id 0) left out.

    What ``Embedding(mask_zero=True)`` then ``GlobalAveragePooling1D()`` compute, without
    touching the padding: the batch's ids are taken as a sparse tensor (the non-zero ones),
    each distinct id is looked up once and each row's embeddings averaged
    (``tf.nn.embedding_lookup_sparse``, combiner ``mean``). The table's gradient is then
    one row per distinct id of the batch, where the padded lookup's was one row per
    position, padding included (issue 41: a batch of 512 rows of DBPedia n-grams is about
    a third padding, and its ~67,000 looked-up rows cost the lookup, its gradient and the
    optimizer's merge of repeated rows). A row with no tokens averages to zeros. The
    weights are ``Embedding``'s (one table, ``embeddings``), under the same name.
    """

    def __init__(self, input_dim, output_dim, **kwargs):
        kwargs.pop("mask_zero", None)  # the padding is left out, not masked
        super().__init__(input_dim, output_dim, **kwargs)

    def call(self, inputs):
        import tensorflow as tf

        ids = tf.sparse.from_dense(tf.cast(inputs, tf.int64))  # the non-zero ids
        mean = tf.nn.embedding_lookup_sparse(self.embeddings, ids, None, combiner="mean")
        # Rows past the last with a token are missing from the lookup's result.
        rows = tf.shape(inputs, out_type=tf.int64)[0]
        missing = rows - tf.shape(mean, out_type=tf.int64)[0]
        return tf.pad(mean, [[0, missing], [0, 0]])

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.output_dim)
