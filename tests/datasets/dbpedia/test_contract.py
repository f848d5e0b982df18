"""The dbpedia data set against the contract every data set passes (distrain.datasets.testing)."""

from distrain.datasets.testing import DataSetTestCase


class TestDbpedia(DataSetTestCase):
    DATASET = "dbpedia"
    SAMPLE_SIZE = 280  # training rows, 20 per class
