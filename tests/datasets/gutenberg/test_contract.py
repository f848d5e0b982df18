"""The gutenberg data set against the contract every data set passes (distrain.datasets.testing)."""

from distrain.datasets.testing import DataSetTestCase


class TestGutenberg(DataSetTestCase):
    DATASET = "gutenberg"
    SAMPLE_SIZE = 30_000  # characters over three books
