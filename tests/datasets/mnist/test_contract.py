"""The mnist data set against the contract every data set passes (distrain.datasets.testing)."""

from distrain.datasets.testing import DataSetTestCase


class TestMnist(DataSetTestCase):
    DATASET = "mnist"
    SAMPLE_SIZE = 300  # training images
