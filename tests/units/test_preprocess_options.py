"""The options every Beam preprocessing job takes are declared once and checked alike."""

import dataclasses

import pytest

from distrain.datasets.dbpedia.beam import DbpediaPreprocessConfig
from distrain.datasets.gutenberg.beam import GutenbergPreprocessConfig
from distrain.datasets.mnist.beam import MnistPreprocessConfig
from distrain.datasets.tfrecord.beam import TfrecordPreprocessConfig
from distrain.preprocess.options import JobOptions

CONFIGS = [
    MnistPreprocessConfig,
    DbpediaPreprocessConfig,
    GutenbergPreprocessConfig,
    TfrecordPreprocessConfig,
]
SHARED = [f.name for f in dataclasses.fields(JobOptions)]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_each_job_takes_the_shared_options_first(config):
    assert issubclass(config, JobOptions)
    assert [f.name for f in dataclasses.fields(config)][: len(SHARED)] == SHARED
    assert config("raw", "out").overwrite is False


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("num_shards", -1, "num_shards must be >= 0"),
        ("range_mb", 0.0, "range_mb must be positive, got 0"),
        ("max_bad_ratio", 1.5, r"max_bad_ratio must be in \[0, 1\], got 1.5"),
        ("validation_fraction", 1.0, r"validation_fraction must be in .*, got 1.0"),
    ],
)
def test_every_job_refuses_a_bad_shared_option_alike(config, field, value, message):
    with pytest.raises(ValueError, match=message):
        config("raw", "out", **{field: value})


def test_a_job_that_counts_its_unit_of_work_in_records_checks_that_field_too():
    with pytest.raises(ValueError, match="rows_per_range must be >= 0"):
        DbpediaPreprocessConfig("raw", "out", rows_per_range=-1)
    with pytest.raises(ValueError, match="batch_size must be >= 0"):
        TfrecordPreprocessConfig("raw", "out", batch_size=-1)


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_only_the_two_folders_go_by_position(config):
    # By position, a seed would land in whatever field came next in the shared order.
    with pytest.raises(TypeError):
        config("raw", "out", 0.1, 3)
    assert config("raw", "out", validation_fraction=0.2).validation_fraction == 0.2
