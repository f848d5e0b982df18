"""Models, built with tf-keras (Keras 2), one registry for every data set."""

from __future__ import annotations

from collections.abc import Callable

from distrain.train.inputs import DatasetInfo


def _keras():
    import tf_keras

    return tf_keras


def mnist_mlp(info: DatasetInfo, seed: int):
    """A 784-256-128-10 perceptron with ReLU; outputs logits."""
    keras = _keras()
    init = keras.initializers.GlorotUniform
    shape = tuple(info.metadata.get("image_shape", [28, 28]))
    return keras.Sequential(
        [
            keras.layers.Input(shape=shape),
            keras.layers.Flatten(),
            keras.layers.Dense(256, activation="relu", kernel_initializer=init(seed)),
            keras.layers.Dense(128, activation="relu", kernel_initializer=init(seed + 1)),
            keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 2)),
        ],
        name="mnist_mlp",
    )


def mnist_cnn(info: DatasetInfo, seed: int):
    """A small LeNet-like network: two 3x3 conv + pool blocks, then a dense layer."""
    keras = _keras()
    init = keras.initializers.GlorotUniform
    shape = tuple(info.metadata.get("image_shape", [28, 28]))
    return keras.Sequential(
        [
            keras.layers.Input(shape=shape),
            keras.layers.Reshape((*shape, 1)),
            keras.layers.Conv2D(16, 3, activation="relu", kernel_initializer=init(seed)),
            keras.layers.MaxPooling2D(),
            keras.layers.Conv2D(32, 3, activation="relu", kernel_initializer=init(seed + 1)),
            keras.layers.MaxPooling2D(),
            keras.layers.Flatten(),
            keras.layers.Dense(128, activation="relu", kernel_initializer=init(seed + 2)),
            keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 3)),
        ],
        name="mnist_cnn",
    )


def dbpedia_fasttext(info: DatasetInfo, seed: int, dim: int = 64):
    """fastText-style classifier: embeddings of unigrams and bigrams, averaged, then softmax."""
    keras = _keras()
    return keras.Sequential(
        [
            keras.layers.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(
                info.metadata["vocab_size"],
                dim,
                mask_zero=True,
                embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed),
            ),
            keras.layers.GlobalAveragePooling1D(),
            keras.layers.Dense(
                info.num_classes, kernel_initializer=keras.initializers.GlorotUniform(seed + 1)
            ),
        ],
        name="dbpedia_fasttext",
    )


def dbpedia_logreg(info: DatasetInfo, seed: int):
    """Logistic regression on the normalised bag of n-grams (one weight per n-gram and class)."""
    keras = _keras()
    return keras.Sequential(
        [
            keras.layers.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(
                info.metadata["vocab_size"],
                info.num_classes,
                mask_zero=True,
                embeddings_initializer="zeros",
            ),
            # The average of the n-grams' class weights is the linear score of the
            # normalised bag of n-grams.
            keras.layers.GlobalAveragePooling1D(),
        ],
        name="dbpedia_logreg",
    )


def gutenberg_lstm(info: DatasetInfo, seed: int, units=(200, 100), embed: int = 32):
    """Two-layer character LSTM predicting the next character at every position."""
    keras = _keras()
    vocab = info.metadata["vocab_size"]
    layers = [
        keras.layers.Input(shape=(None,), dtype="int32"),
        keras.layers.Embedding(
            vocab, embed, embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed)
        ),
    ]
    for i, n in enumerate(units):
        layers.append(
            keras.layers.LSTM(
                n,
                return_sequences=True,
                kernel_initializer=keras.initializers.GlorotUniform(seed + 1 + i),
                recurrent_initializer=keras.initializers.Orthogonal(seed=seed + 10 + i),
            )
        )
    layers.append(
        keras.layers.Dense(vocab, kernel_initializer=keras.initializers.GlorotUniform(seed + 20))
    )
    return keras.Sequential(layers, name="gutenberg_lstm")


MODEL_BUILDERS: dict[tuple[str, str], Callable] = {
    ("mnist", "mlp"): mnist_mlp,
    ("mnist", "cnn"): mnist_cnn,
    ("dbpedia", "fasttext"): dbpedia_fasttext,
    ("dbpedia", "logreg"): dbpedia_logreg,
    ("gutenberg", "lstm"): gutenberg_lstm,
}


def build_model(info: DatasetInfo, name: str, seed: int = 0):
    """Builds the named model for the data set.

    Raises:
        ValueError: No such model for this data set.
    """
    key = (info.dataset, name)
    if key not in MODEL_BUILDERS:
        have = sorted(m for d, m in MODEL_BUILDERS if d == info.dataset)
        raise ValueError(f"no model {name!r} for {info.dataset}; available: {', '.join(have)}")
    return MODEL_BUILDERS[key](info, seed)
