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

        ids = tf.cast(inputs, tf.int32)
        present = tf.not_equal(ids, 0)
        tokens = tf.boolean_mask(ids, present)  # the non-zero ids, row by row
        rows = tf.cast(tf.where(present)[:, 0], tf.int32)  # the row of each
        distinct, which = tf.unique(tokens)
        # A gather of the variable's distinct rows (its gradient: one row per distinct id).
        # Not tf.nn.embedding_lookup_sparse: Grappler rewrites its gather and segment mean
        # into one op on the whole table, read (copied, 28 MB on DBPedia) at every step.
        vectors = tf.gather(self.embeddings, distinct)
        batch = tf.shape(ids)[0]
        summed = tf.math.unsorted_segment_sum(tf.gather(vectors, which), rows, batch)
        counts = tf.reduce_sum(tf.cast(present, summed.dtype), axis=1, keepdims=True)
        return summed / tf.maximum(counts, 1.0)

    def compute_mask(self, inputs, mask=None):
        return None

    def compute_output_shape(self, input_shape):
        return (input_shape[0], self.output_dim)
