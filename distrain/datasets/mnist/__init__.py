"""MNIST: handwritten digits in IDX files; classifiers, and an autoencoder that rebuilds them."""

from __future__ import annotations

from pathlib import Path

from distrain.datasets import DataSet, ModelSpec, register
from distrain.datasets.info import Feature, FeatureSpec
from distrain.datasets.mnist.defaults import DEFAULTS
from distrain.datasets.mnist.download import download_mnist
from distrain.datasets.mnist.idx import MNIST_FILES, inspect_mnist_split, mnist_paths
from distrain.datasets.mnist.models import (
    FC_WIDTHS,
    SOFTMAX_L2,
    cnn,
    cnn_seed,
    convae,
    fc,
    fc_wide,
    image_shape,
    mlp,
    softmax,
    softmax_l2,
    vgg11,
)
from distrain.datasets.mnist.sample import MnistSampleConfig, write_mnist_sample
from distrain.learning.tasks import CLASSIFICATION, RECONSTRUCTION


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
        size = size or self.sample_size
        write_mnist_sample(
            out, MnistSampleConfig(train_size=size, test_size=max(1, size // 5), seed=seed)
        )

    def download(self, out, source):
        download_mnist(out)

    def raw_files(self, src):
        return [p for split in MNIST_FILES for p in mnist_paths(Path(src), split)]

    def check_raw_files(self, src):
        """The four IDX files, their headers and lengths (a truncated gzip is caught)."""
        for split in MNIST_FILES:
            inspect_mnist_split(*mnist_paths(Path(src), split))

    def preprocess(self, raw, out, validation_fraction, seed, beam_args, overwrite=False):
        from distrain.datasets.mnist import beam as mnist

        cfg = mnist.MnistPreprocessConfig(
            raw, out, validation_fraction=validation_fraction, seed=seed, overwrite=overwrite
        )
        return mnist.preprocess_mnist(cfg, beam_args)

    def feature_spec(self, info):
        """The image (float32 in [0, 1], rows x columns) and the digit."""
        return FeatureSpec({"image": Feature("float32", image_shape(info))}, "label", as_dict=False)

    def parser(self, info, serving: bool = False):
        """Parses images as floats in [0, 1] with their labels.

        The ``reconstruction`` view pairs each image with itself. ``serving``: a record may
        leave its label out (read as 0).
        """
        import tensorflow as tf

        shape = image_shape(info)
        spec = {
            "image": tf.io.FixedLenFeature([], tf.string),
            "label": tf.io.FixedLenFeature([], tf.int64, default_value=0 if serving else None),
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

    def serving_parser(self, info):
        """:meth:`parser`, the label optional."""
        return self.parser(info, serving=True)
