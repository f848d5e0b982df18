"""A model over several inputs of the tfrecord data set, set up from the Beam job's analyzers.

For ``distrain data tfrecord``'s mixed sample (``amount`` float32, ``store`` int64,
``colour`` and ``review`` bytes; see docs/your-data.md), and any folder of the same
features. Nothing here calls ``adapt()``: the normalisation comes from
``info.statistics``, the lookups' vocabularies from ``info.vocabulary``, both computed
over the training split by the preprocessing job, and the saved model carries them.

    distrain train --data DIR --model examples/mixed_model.py:build --run async:2
"""

import tf_keras as keras


def build(info, seed):
    """Normalised amount, embedded store and colour, a bag of the review's words; logits."""
    init = keras.initializers.GlorotUniform
    stats = info.statistics
    inputs = info.feature_spec.keras_inputs(keras)
    amount = keras.layers.Normalization(
        axis=None, mean=stats["amount"].mean, variance=stats["amount"].variance
    )(inputs["amount"])
    amount = keras.layers.Reshape((1,))(amount)
    # Ids 0 .. max seen in training; a larger one at test time is out of vocabulary (0).
    # Sizes are counted here, not asked of the layers: in the parameter-server modes the
    # model is built in a tf.compat.v1 graph, where ``vocabulary_size()`` is a tensor.
    ids = list(range(int(stats["store"].max) + 1))
    store = keras.layers.IntegerLookup(vocabulary=ids)(inputs["store"])
    store = keras.layers.Embedding(len(ids) + 1, 4, embeddings_initializer=init(seed + 1))(store)
    colours = info.vocabulary("colour")
    colour = keras.layers.StringLookup(vocabulary=colours)(inputs["colour"])
    colour = keras.layers.Embedding(len(colours) + 1, 4, embeddings_initializer=init(seed + 2))(
        colour
    )
    words = info.vocabulary("review")
    # A multi-hot bag of words is as wide as the vocabulary: given as max_tokens (the words
    # and the out-of-vocabulary slot) with pad_to_max_tokens, so the width is a number in
    # a graph too.
    review = keras.layers.TextVectorization(
        max_tokens=len(words) + 1,
        pad_to_max_tokens=True,
        vocabulary=words,
        output_mode="multi_hot",
    )(inputs["review"])
    x = keras.layers.Concatenate()([amount, store, colour, review])
    x = keras.layers.Dense(32, "relu", kernel_initializer=init(seed + 3))(x)
    return keras.Model(
        inputs, keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 4))(x)
    )
