"""MNIST's models: perceptrons, convolutional classifiers, VGG11 and an autoencoder."""

from __future__ import annotations

from distrain.learning.models import keras_module, perceptron


def image_shape(info) -> tuple[int, ...]:
    """An image's shape, as the preprocessing recorded it (28x28 before it did)."""
    return tuple(info.metadata.get("image_shape", [28, 28]))


def mlp(info, seed: int):
    """A 784-256-128-10 perceptron with ReLU; outputs logits."""
    return perceptron(info, seed, (256, 128), "mnist_mlp")


def conv_classifier(info, seed: int, convs, pooling: str, hidden: tuple[int, ...], name: str):
    """Convolutions over the image, then dense ReLU layers and the logits.

    Args:
        info: The data set's metadata.
        seed: Initialisers' seed: the layers with weights take seed, seed + 1, ...
        convs: ``(maps, kernel, pooled)`` of each convolution (ReLU), pooled 2x2 after it
            when ``pooled``.
        pooling: ``max`` or ``mean``.
        hidden: Units of each dense layer before the logits.
        name: The model's name.
    """
    keras = keras_module()
    init = keras.initializers.GlorotUniform
    shape = image_shape(info)
    pool = {"max": keras.layers.MaxPooling2D, "mean": keras.layers.AveragePooling2D}[pooling]
    layers = [keras.layers.Input(shape=shape), keras.layers.Reshape((*shape, 1))]
    for i, (maps, kernel, pooled) in enumerate(convs):
        layers.append(
            keras.layers.Conv2D(maps, kernel, activation="relu", kernel_initializer=init(seed + i))
        )
        if pooled:
            layers.append(pool())
    layers.append(keras.layers.Flatten())
    for i, units in enumerate(hidden, start=len(convs)):
        layers.append(keras.layers.Dense(units, "relu", kernel_initializer=init(seed + i)))
    logits = keras.layers.Dense(
        info.num_classes, kernel_initializer=init(seed + len(convs) + len(hidden))
    )
    return keras.Sequential([*layers, logits], name=name)


def cnn(info, seed: int):
    """A small LeNet-like network: two 3x3 conv + pool blocks, then a dense layer."""
    return conv_classifier(info, seed, [(16, 3, True), (32, 3, True)], "max", (128,), "mnist_cnn")


# The L2 penalty of ``softmax-l2`` (added to the mean cross-entropy): strongly convex.
SOFTMAX_L2 = 1e-3


def softmax(info, seed: int, l2: float = 0.0):
    """Softmax regression (seed 002's convex case): one dense layer from pixels to logits.

    With ``l2`` > 0, ``l2 * ||W||^2`` is added to the loss, which makes it strongly convex.
    """
    keras = keras_module()
    shape = image_shape(info)
    penalty = keras.regularizers.L2(l2) if l2 else None
    return keras.Sequential(
        [
            keras.layers.Input(shape=shape),
            keras.layers.Flatten(),
            keras.layers.Dense(
                info.num_classes,
                kernel_initializer=keras.initializers.GlorotUniform(seed),
                kernel_regularizer=penalty,
            ),
        ],
        name="mnist_softmax_l2" if l2 else "mnist_softmax",
    )


def softmax_l2(info, seed: int):
    """Softmax regression with an L2 penalty (seed 002's strongly convex case)."""
    return softmax(info, seed, SOFTMAX_L2)


def fc(info, seed: int):
    """Seed 000's fully connected net: 784-480-160-10, ReLU; outputs logits."""
    return perceptron(info, seed, (480, 160), "mnist_fc")


# Seed 000's net with its hidden layers this many times as wide: its study of speedup
# against model size scales the parameters by layer width.
FC_WIDTHS = (2, 4, 8)


def fc_wide(width: int):
    """A builder of seed 000's net with hidden layers ``width`` times as wide."""

    def build(info, seed: int):
        return perceptron(info, seed, (480 * width, 160 * width), f"mnist_fc_x{width}")

    return build


def cnn_seed(info, seed: int):
    """Seed 000's CNN: 5x5 convolutions with 6, 12 and (4x4) 12 maps, mean pooling, softmax.

    The first two convolutions are each followed by 2x2 mean pooling; the last maps its
    4x4 input to 1x1, and one dense layer gives the logits.
    """
    convs = [(6, 5, True), (12, 5, True), (12, 4, False)]
    return conv_classifier(info, seed, convs, "mean", (), "mnist_cnn_seed")


# VGG11's convolutions ("M": 2x2 max pooling), at a quarter of the original widths: the
# full widths (64 to 512 maps, two 4096-unit dense layers) need minutes per epoch of the
# MNIST sample on two CPU cores, and the layer pattern is what the parallel splits see.
VGG11 = (16, "M", 32, "M", 64, 64, "M", 128, 128, "M", 128, 128, "M")


def vgg11(info, seed: int, dense: int = 512):
    """VGG11 (Simonyan and Zisserman's configuration A) on the images padded to 32x32.

    Eight 3x3 convolutions with ReLU in five blocks, each block ending in 2x2 max
    pooling, then two dense layers of ``dense`` units and the logits; widths a quarter
    of the original's (:data:`VGG11`).
    """
    keras = keras_module()
    init = keras.initializers.GlorotUniform
    shape = image_shape(info)
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


def convae(info, seed: int, code: int = 64, maps: int = 32):
    """A convolutional autoencoder (seed 004's): the image back from a ``code``-number code.

    Encoder: two 3x3 convolutions of ``maps`` maps with stride 2 (28 -> 14 -> 7), then a
    linear dense layer to the code. Decoder: a dense layer back to the 7x7 maps, two 3x3
    transposed convolutions with stride 2, and a 3x3 convolution to one logit per pixel
    (the task applies the sigmoid). Strided convolutions and a linear code learnt about
    twice as fast as max pooling and a ReLU code on the MNIST sample (reconstruction MSE
    after 5 epochs at the default rate: 0.026 against 0.032; the mean image: 0.038).
    """
    keras = keras_module()
    init = keras.initializers.GlorotUniform
    shape = image_shape(info)
    small = (shape[0] // 4, shape[1] // 4, maps)
    conv = dict(padding="same", activation="relu", strides=2)
    return keras.Sequential(
        [
            keras.layers.Input(shape=shape),
            keras.layers.Reshape((*shape, 1)),
            keras.layers.Conv2D(maps, 3, kernel_initializer=init(seed), **conv),
            keras.layers.Conv2D(maps, 3, kernel_initializer=init(seed + 1), **conv),
            keras.layers.Flatten(),
            keras.layers.Dense(code, kernel_initializer=init(seed + 2)),
            keras.layers.Dense(
                small[0] * small[1] * small[2], "relu", kernel_initializer=init(seed + 3)
            ),
            keras.layers.Reshape(small),
            keras.layers.Conv2DTranspose(maps, 3, kernel_initializer=init(seed + 4), **conv),
            keras.layers.Conv2DTranspose(maps, 3, kernel_initializer=init(seed + 5), **conv),
            keras.layers.Conv2D(1, 3, padding="same", kernel_initializer=init(seed + 6)),
            keras.layers.Reshape(shape),
        ],
        name="mnist_convae",
    )
