"""MNIST: handwritten digits in IDX files; classifiers, and an autoencoder that rebuilds them."""

from __future__ import annotations

from pathlib import Path

from distrain.datasets import DataSet, ModelSpec, register
from distrain.datasets.mnist.pipeline import DEFAULTS
from distrain.train.models import keras_module, perceptron
from distrain.train.tasks import CLASSIFICATION, RECONSTRUCTION


def _shape(info) -> tuple[int, ...]:
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
    shape = _shape(info)
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
    shape = _shape(info)
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
    shape = _shape(info)
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
    shape = _shape(info)
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


@register
class Mnist(DataSet):
    """MNIST in its IDX files (``train-images-idx3-ubyte.gz`` and the three others)."""

    name = "mnist"
    pipeline = DEFAULTS
    # Its cases of the reliability matrix (distrain.faults), each proved by a marked test.
    fault_cases = (
        ("mnist/truncated-gzip", "MNIST: truncated gzip refused, naming the file"),
        ("mnist/not-gzip", "MNIST: non-gzip bytes in a .gz file refused"),
        ("mnist/wrong-magic", "MNIST: wrong IDX magic refused"),
        ("mnist/wrong-dimensions", "MNIST: data length not matching the dimensions refused"),
        ("mnist/count-mismatch", "MNIST: image/label count mismatch refused"),
        ("mnist/empty-file", "MNIST: empty file refused"),
        ("mnist/missing-file", "MNIST: missing file named"),
        ("mnist/dead-letter", "MNIST: bad records dead-lettered, input = good + rejected, ratio"),
        ("mnist/accounting", "MNIST: records lost between the header and the output fail the step"),
    )
    summary = "handwritten digits, 28x28 grey images in IDX files, 10 classes"
    sample_size = 10000  # training images; the test set is a fifth
    sample_unit = "training images"
    title = "MNIST"
    experiments = {
        "averaging": {},
        "scaling": {},
        "parallelism": {
            "models": ("mlp", "cnn", "vgg11", "convae"),
            "batch_size": 64,
            "learning_rate": 1e-3,
            "sizes": {"tiny": 600, "small": 2000, "full": 0},
        },
    }
    models = {
        "mlp": ModelSpec(mlp, CLASSIFICATION, summary="784-256-128-10 perceptron"),
        "cnn": ModelSpec(cnn, CLASSIFICATION, summary="two conv + pool blocks, a dense layer"),
        "fc": ModelSpec(fc, CLASSIFICATION, summary="seed 000's 784-480-160-10 net"),
        **{
            f"fc-x{w}": ModelSpec(
                fc_wide(w), CLASSIFICATION, summary=f"seed 000's net {w}x as wide"
            )
            for w in FC_WIDTHS
        },
        "softmax": ModelSpec(softmax, CLASSIFICATION, summary="softmax regression (convex)"),
        "softmax-l2": ModelSpec(
            softmax_l2, CLASSIFICATION, summary=f"softmax regression, L2 {SOFTMAX_L2:g}"
        ),
        "cnn-seed": ModelSpec(cnn_seed, CLASSIFICATION, summary="seed 000's CNN, mean pooling"),
        "vgg11": ModelSpec(vgg11, CLASSIFICATION, summary="VGG11 at quarter widths, 32x32"),
        "convae": ModelSpec(
            convae,
            RECONSTRUCTION,
            view="reconstruction",
            summary="convolutional autoencoder, scored by reconstruction error",
        ),
    }

    def write_sample(self, out, size, seed):
        from distrain.datasets.mnist.sample import MnistSampleConfig, write_mnist_sample

        size = size or self.sample_size
        write_mnist_sample(
            out, MnistSampleConfig(train_size=size, test_size=max(1, size // 5), seed=seed)
        )

    def download(self, out, source):
        from distrain.datasets.mnist.download import download_mnist

        download_mnist(out)

    def raw_files(self, src):
        from distrain.datasets.mnist.idx import MNIST_FILES, mnist_paths

        return [p for split in MNIST_FILES for p in mnist_paths(Path(src), split)]

    def check_raw_files(self, src):
        """The four IDX files, their headers and lengths (a truncated gzip is caught)."""
        from distrain.datasets.mnist.idx import MNIST_FILES, inspect_mnist_split, mnist_paths

        for split in MNIST_FILES:
            inspect_mnist_split(*mnist_paths(Path(src), split))

    def preprocess(self, raw, out, validation_fraction, seed, beam_args, overwrite=False):
        from distrain.datasets.mnist import beam as mnist

        cfg = mnist.MnistPreprocessConfig(raw, out, validation_fraction, seed, overwrite=overwrite)
        return mnist.preprocess_mnist(cfg, beam_args)

    def parser(self, info):
        """Parses images as floats in [0, 1] with their labels.

        The ``reconstruction`` view pairs each image with itself.
        """
        import tensorflow as tf

        shape = _shape(info)
        spec = {
            "image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64),
        }
        itself = info.view_name == "reconstruction"

        def parse(records):
            features = tf.io.parse_example(records, spec)
            images = tf.io.decode_raw(features["image"], tf.uint8)
            images = tf.cast(tf.reshape(images, [-1, *shape]), tf.float32) / 255.0
            if itself:
                return images, images
            return images, tf.cast(features["label"], tf.int32)

        return parse
