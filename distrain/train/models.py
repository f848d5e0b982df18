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


MODEL_BUILDERS: dict[tuple[str, str], Callable] = {
    ("mnist", "mlp"): mnist_mlp,
    ("mnist", "cnn"): mnist_cnn,
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
