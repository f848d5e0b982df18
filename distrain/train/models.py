"""Models, built with tf-keras (Keras 2), one registry for every data set."""

from __future__ import annotations

from collections.abc import Callable

from distrain.lm import char_lstm
from distrain.train.inputs import DatasetInfo


def _keras():
    import tf_keras

    return tf_keras


def _perceptron(info: DatasetInfo, seed: int, hidden: tuple[int, ...], name: str):
    """Flattened images through ReLU layers of ``hidden`` units; outputs logits."""
    keras = _keras()
    init = keras.initializers.GlorotUniform
    shape = tuple(info.metadata.get("image_shape", [28, 28]))
    layers = [keras.layers.Input(shape=shape), keras.layers.Flatten()]
    for i, units in enumerate(hidden):
        layers.append(keras.layers.Dense(units, "relu", kernel_initializer=init(seed + i)))
    layers.append(keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + len(hidden))))
    return keras.Sequential(layers, name=name)


def mnist_mlp(info: DatasetInfo, seed: int):
    """A 784-256-128-10 perceptron with ReLU; outputs logits."""
    return _perceptron(info, seed, (256, 128), "mnist_mlp")


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


def mnist_fc(info: DatasetInfo, seed: int):
    """Seed 000's fully connected net: 784-480-160-10, ReLU; outputs logits."""
    return _perceptron(info, seed, (480, 160), "mnist_fc")


def mnist_cnn_seed(info: DatasetInfo, seed: int):
    """Seed 000's CNN: 5x5 convolutions with 6, 12 and (4x4) 12 maps, mean pooling, softmax.

    The first two convolutions are each followed by 2x2 mean pooling; the last maps its
    4x4 input to 1x1, and one dense layer gives the logits.
    """
    keras = _keras()
    init = keras.initializers.GlorotUniform
    shape = tuple(info.metadata.get("image_shape", [28, 28]))
    return keras.Sequential(
        [
            keras.layers.Input(shape=shape),
            keras.layers.Reshape((*shape, 1)),
            keras.layers.Conv2D(6, 5, activation="relu", kernel_initializer=init(seed)),
            keras.layers.AveragePooling2D(),
            keras.layers.Conv2D(12, 5, activation="relu", kernel_initializer=init(seed + 1)),
            keras.layers.AveragePooling2D(),
            keras.layers.Conv2D(12, 4, activation="relu", kernel_initializer=init(seed + 2)),
            keras.layers.Flatten(),
            keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 3)),
        ],
        name="mnist_cnn_seed",
    )


# VGG11's convolutions ("M": 2x2 max pooling), at a quarter of the original widths: the
# full widths (64 to 512 maps, two 4096-unit dense layers) need minutes per epoch of the
# MNIST sample on two CPU cores, and the layer pattern is what the parallel splits see.
VGG11 = (16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M")


def mnist_vgg11(info: DatasetInfo, seed: int, dense: int = 512):
    """VGG11 (Simonyan and Zisserman's configuration A) on the images padded to 32x32.

    Eight 3x3 convolutions with ReLU in five blocks, each block ending in 2x2 max
    pooling, then two dense layers of ``dense`` units and the logits; widths a quarter
    of the original's (:data:`VGG11`).
    """
    keras = _keras()
    init = keras.initializers.GlorotUniform
    shape = tuple(info.metadata.get("image_shape", [28, 28]))
    pad = ((32 - shape[0]) // 2, (32 - shape[1]) // 2)
    layers = [
        keras.layers.Input(shape=shape),
        keras.layers.Reshape((*shape, 1)),
        keras.layers.ZeroPadding2D(pad),
    ]
    for i, item in enumerate(VGG11):
        if item == "M":
            layers.append(keras.layers.MaxPooling2D())
        else:
            layers.append(
                keras.layers.Conv2D(
                    item, 3, padding="same", activation="relu", kernel_initializer=init(seed + i)
                )
            )
    layers += [
        keras.layers.Flatten(),
        keras.layers.Dense(dense, activation="relu", kernel_initializer=init(seed + 20)),
        keras.layers.Dense(dense, activation="relu", kernel_initializer=init(seed + 21)),
        keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 22)),
    ]
    return keras.Sequential(layers, name="mnist_vgg11")


def _bag_of_embeddings(info: DatasetInfo, seed: int, dim: int, hidden: tuple[int, ...], name: str):
    """Averaged (masked) token embeddings, ReLU layers of ``hidden`` units, then the logits."""
    keras = _keras()
    init = keras.initializers.GlorotUniform
    layers = [
        keras.layers.Input(shape=(None,), dtype="int32"),
        keras.layers.Embedding(
            info.metadata["vocab_size"],
            dim,
            mask_zero=True,
            embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed),
        ),
        keras.layers.GlobalAveragePooling1D(),
    ]
    for i, units in enumerate(hidden):
        layers.append(keras.layers.Dense(units, "relu", kernel_initializer=init(seed + 1 + i)))
    layers.append(
        keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 1 + len(hidden)))
    )
    return keras.Sequential(layers, name=name)


def dbpedia_nbow(info: DatasetInfo, seed: int, dim: int = 64, hidden: int = 128):
    """Neural bag of words (seed 004): averaged embeddings, a ReLU layer, then softmax."""
    return _bag_of_embeddings(info, seed, dim, (hidden,), "dbpedia_nbow")


def dbpedia_fasttext(info: DatasetInfo, seed: int, dim: int = 64):
    """fastText-style classifier: embeddings of unigrams and bigrams, averaged, then softmax."""
    return _bag_of_embeddings(info, seed, dim, (), "dbpedia_fasttext")


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


def gutenberg_lstm(
    info: DatasetInfo, seed: int, units=(200, 100), embed: int = 32, cell: str = "LSTM"
):
    """Two-layer character LSTM predicting the next character at every position.

    ``cell``: the recurrent layer (``SimpleRNN`` for seed 000's plain RNN).
    """
    keras = _keras()
    recurrent = getattr(keras.layers, cell)
    vocab = info.metadata["vocab_size"]
    layers = [
        keras.layers.Input(shape=(None,), dtype="int32"),
        keras.layers.Embedding(
            vocab, embed, embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed)
        ),
    ]
    for i, n in enumerate(units):
        layers.append(
            recurrent(
                n,
                return_sequences=True,
                kernel_initializer=keras.initializers.GlorotUniform(seed + 1 + i),
                recurrent_initializer=keras.initializers.Orthogonal(seed=seed + 10 + i),
            )
        )
    layers.append(
        keras.layers.Dense(vocab, kernel_initializer=keras.initializers.GlorotUniform(seed + 20))
    )
    return keras.Sequential(layers, name=f"gutenberg_{cell.lower()}")


def gutenberg_rnn(info: DatasetInfo, seed: int):
    """Seed 000's plain RNN: the LSTM's shape (200 and 100 units) with simple recurrent cells."""
    return gutenberg_lstm(info, seed, cell="SimpleRNN")


MODEL_BUILDERS: dict[tuple[str, str], Callable] = {
    ("mnist", "mlp"): mnist_mlp,
    ("mnist", "cnn"): mnist_cnn,
    ("mnist", "fc"): mnist_fc,
    ("mnist", "cnn-seed"): mnist_cnn_seed,
    ("mnist", "vgg11"): mnist_vgg11,
    ("dbpedia", "fasttext"): dbpedia_fasttext,
    ("dbpedia", "logreg"): dbpedia_logreg,
    ("dbpedia", "nbow"): dbpedia_nbow,
    ("gutenberg", "lstm"): char_lstm,  # stateful streams where the mode carries state
    ("gutenberg", "lstm-seed"): gutenberg_lstm,
    ("gutenberg", "rnn"): gutenberg_rnn,
}


# Models with recurrent layers (which the column split does not cover).
RECURRENT_MODELS = frozenset({"lstm", "lstm-seed", "rnn"})
# Models that read sequences of varying length, with masks (pipeline stages pass neither).
SEQUENCE_MODELS = frozenset({"fasttext", "logreg", "nbow", "lstm", "lstm-seed", "rnn"})


def models_for(dataset: str) -> list[str]:
    """The names of the models for ``dataset``."""
    return [name for d, name in MODEL_BUILDERS if d == dataset]


def model_names() -> list[str]:
    """Every model's name, over all data sets, in the registry's order."""
    return list(dict.fromkeys(name for _, name in MODEL_BUILDERS))


def build_model(info: DatasetInfo, name: str, seed: int = 0):
    """Builds the named model for the data set.

    Raises:
        ValueError: No such model for this data set.
    """
    key = (info.dataset, name)
    if key not in MODEL_BUILDERS:
        have = models_for(info.dataset)
        raise ValueError(f"no model {name!r} for {info.dataset}; available: {', '.join(have)}")
    return MODEL_BUILDERS[key](info, seed)
