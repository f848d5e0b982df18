"""The tfrecord data set against the contract every data set passes (distrain.datasets.testing)."""

from distrain.datasets.testing import DataSetTestCase


class TestTfrecord(DataSetTestCase):
    DATASET = "tfrecord"
    SAMPLE_SIZE = 200  # training records, two files (one gzipped)
