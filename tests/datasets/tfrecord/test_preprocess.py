"""The tfrecord data set: features.json, the raw-file checks, dead letters, gzip, the parser."""

from __future__ import annotations

import json

import numpy as np
import pytest

from distrain import datasets
from distrain.datasets.testing import BEAM_ARGS
from distrain.datasets.tfrecord.beam import TfrecordPreprocessConfig, preprocess_tfrecord
from distrain.datasets.tfrecord.sample import SPEC, sample_records, write_frames
from distrain.datasets.tfrecord.spec import (
    FeatureSpec,
    SpecError,
    check_example,
    count_frames,
    read_frames,
)
from distrain.learning.models import load_info
from distrain.preprocess.records import (
    TFRecordFramingError,
    bytes_feature,
    example,
    float_feature,
    int64_feature,
)
from distrain.preprocess.writing import BadRecordsError

PLUGIN = datasets.get("tfrecord")


def _record(x=(0.0,) * 8, bucket=(1,), label=(2,), **others) -> bytes:
    """An example of the sample's spec; a feature given as None is left out."""
    given = {"x": (float_feature, x), "bucket": (int64_feature, bucket)}
    given["label"] = (int64_feature, label)
    features = {k: encode(v) for k, (encode, v) in given.items() if v is not None}
    return example({**features, **others})


def _raw(tmp_path, records: list[bytes], gzipped: bool = False):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "features.json").write_text(json.dumps(SPEC))
    good = sample_records(200, seed=3)
    write_frames(raw / "train-00000-of-00002.tfrecord", good[:100])
    name = "train-00001-of-00002.tfrecord" + (".gz" if gzipped else "")
    write_frames(raw / name, good[100:] + records, gzipped=gzipped)
    return raw, name


def test_the_spec_is_read_and_its_mistakes_named(tmp_path):
    spec = FeatureSpec.from_dict(SPEC, "f.json")
    assert list(spec.features) == ["x", "bucket"] and spec.label == "label"
    assert spec.features["x"].size == 8 and spec.features["bucket"].size == 1
    bad = {"features": {"x": {"dtype": "float64", "shape": [2]}, "y": {"dtype": "int64"}}}
    with pytest.raises(SpecError, match="f.json: feature 'x': dtype must be one of"):
        FeatureSpec.from_dict({**bad, "label": "y"}, "f.json")
    with pytest.raises(SpecError, match="label 'z' is not one of the features"):
        FeatureSpec.from_dict({**SPEC, "label": "z"}, "f.json")
    one_value = r"must be int64 \(a class\) or float32 \(a regression target\) with one value"
    with pytest.raises(SpecError, match=f"label 'x' {one_value}"):
        FeatureSpec.from_dict({**SPEC, "label": "x"}, "f.json")  # float32, 8 values
    text = {"features": {**SPEC["features"], "t": {"dtype": "bytes"}}, "label": "t"}
    with pytest.raises(SpecError, match=f"label 't' {one_value} .*got bytes"):
        FeatureSpec.from_dict(text, "f.json")
    with pytest.raises(SpecError, match=r"features.json: not found"):
        FeatureSpec.load(tmp_path)


def test_each_record_is_checked_against_the_spec():
    spec = FeatureSpec.from_dict(SPEC, "f.json")
    assert check_example(_record(), spec) == (2, "")
    assert check_example(_record(bucket=None), spec) == (-1, "feature 'bucket' missing")
    assert check_example(_record(x=(1.0,) * 7), spec)[1] == (
        "feature 'x': 7 values, features.json says 8 (shape [8])"
    )
    wrong = example(
        {"x": int64_feature(range(8)), "bucket": int64_feature((1,)), "label": int64_feature((0,))}
    )
    assert check_example(wrong, spec)[1] == "feature 'x': int64_list, features.json says float32"
    assert check_example(b"\xff\xff\xff", spec)[1].startswith("not a tf.train.Example")
    assert check_example(_record(label=(-1,)), spec)[1].startswith("label -1 outside")


@pytest.mark.case("tfrecord/no-spec")
def test_a_folder_without_features_json_or_train_files_is_refused_naming_what_is_missing(tmp_path):
    with pytest.raises(SpecError, match="no features.json and no train-\\*.tfrecord files"):
        PLUGIN.check_raw_files(tmp_path)
    (tmp_path / "features.json").write_text(json.dumps(SPEC))
    with pytest.raises(SpecError, match=r"no train-\*.tfrecord files"):
        PLUGIN.check_raw_files(tmp_path)
    write_frames(tmp_path / "train-0.tfrecord", sample_records(3, 0))
    PLUGIN.check_raw_files(tmp_path)
    (tmp_path / "features.json").unlink()
    with pytest.raises(SpecError, match="no features.json"):
        PLUGIN.check_raw_files(tmp_path)


@pytest.mark.case("tfrecord/framing")
def test_a_file_that_is_not_whole_tfrecords_is_refused_naming_it(tmp_path):
    path = tmp_path / "train-0.tfrecord"
    write_frames(path, sample_records(3, 0))
    assert count_frames(path) == 3
    path.write_bytes(path.read_bytes()[:-5])
    with pytest.raises(TFRecordFramingError, match=f"{path}: ends inside record 3"):
        count_frames(path)
    (tmp_path / "features.json").write_text(json.dumps(SPEC))
    path.write_bytes(b"not a tfrecord file at all")
    with pytest.raises(TFRecordFramingError, match="train-0.tfrecord: record 1: the length's"):
        PLUGIN.check_raw_files(tmp_path)


def test_gzip_files_are_read_by_suffix_or_magic_bytes(tmp_path):
    records = sample_records(5, 1)
    write_frames(tmp_path / "a.tfrecord.gz", records, gzipped=True)
    (tmp_path / "b.tfrecord").write_bytes((tmp_path / "a.tfrecord.gz").read_bytes())  # magic only
    for name in ("a.tfrecord.gz", "b.tfrecord"):
        assert [data for data, ok in read_frames(tmp_path / name) if ok] == records
        assert count_frames(tmp_path / name) == 5
    cut = tmp_path / "c.tfrecord.gz"  # a truncated gzip stream: named, not an EOFError
    cut.write_bytes((tmp_path / "a.tfrecord.gz").read_bytes()[:-30])
    with pytest.raises(TFRecordFramingError, match=f"{cut}: cannot be read"):
        count_frames(cut)


@pytest.mark.case("tfrecord/missing-feature", "tfrecord/wrong-length")
def test_bad_records_are_dead_lettered_with_file_and_record_and_gzip_is_read(tmp_path):
    bad = [_record(x=(1.0,) * 7), _record(bucket=None)]
    raw, name = _raw(tmp_path, bad, gzipped=True)
    out = tmp_path / "out"
    cfg = TfrecordPreprocessConfig(
        str(raw), str(out), validation_fraction=0.1, seed=0, max_bad_ratio=0.05
    )
    meta = preprocess_tfrecord(cfg, list(BEAM_ARGS))
    assert meta["input_records"] == {"train-00000-of-00002.tfrecord": 100, name: 102}
    assert meta["rejected"]["count"] == 2
    # No test files: validation and test are each held out of the training records.
    assert meta["test_from_train"] and sum(meta["splits"].values()) == 200
    assert meta["splits"]["test"] > 0 and meta["splits"]["validation"] > 0
    assert meta["num_classes"] == 4 and meta["label"] == "label"
    assert meta["features"] == {
        "x": {"dtype": "float32", "shape": [8]},
        "bucket": {"dtype": "int64", "shape": []},
    }
    letters = [json.loads(line) for f in (out / "dead_letter").iterdir() for line in f.open()]
    assert letters == [
        {
            "file": name,
            "record": 101,
            "reason": "feature 'x': 7 values, features.json says 8 (shape [8])",
        },
        {"file": name, "record": 102, "reason": "feature 'bucket' missing"},
    ]


def test_above_the_bad_ratio_the_job_fails_and_leaves_its_dead_letters(tmp_path):
    raw, _ = _raw(tmp_path, [_record(bucket=None)] * 5)
    cfg = TfrecordPreprocessConfig(str(raw), str(tmp_path / "out"), validation_fraction=0.1, seed=0)
    with pytest.raises(BadRecordsError, match="5 of 205 records rejected"):
        preprocess_tfrecord(cfg, list(BEAM_ARGS))
    assert not (tmp_path / "out").exists() and (tmp_path / "out.failed" / "dead_letter").is_dir()


def test_the_parser_gives_a_dict_of_the_features_by_name_and_the_label(tmp_path):
    import tensorflow as tf

    from distrain.learning.inputs import make_dataset

    raw = tmp_path / "raw"
    spec = {
        "features": {**SPEC["features"], "tag": {"dtype": "bytes", "shape": [2]}},
        "label": "label",
        "class_names": ["a", "b", "c", "d"],
    }
    raw.mkdir()
    (raw / "features.json").write_text(json.dumps(spec))
    records = [_record(label=(i % 4,), tag=bytes_feature((b"u", b"v"))) for i in range(40)]
    write_frames(raw / "train-0.tfrecord", records)
    write_frames(raw / "test-0.tfrecord", records[:8])
    PLUGIN.preprocess(str(raw), str(tmp_path / "out"), 0.2, 0, list(BEAM_ARGS))
    info = load_info(tmp_path / "out")
    assert info.class_names == ["a", "b", "c", "d"] and info.splits["test"] == 8
    features, labels = next(iter(make_dataset(info, "test", 4)))
    assert sorted(features) == ["bucket", "tag", "x"]
    assert features["x"].dtype == tf.float32 and features["x"].shape == (4, 8)
    assert features["bucket"].dtype == tf.int64 and features["bucket"].shape == (4,)
    assert features["tag"].dtype == tf.string and features["tag"].shape == (4, 2)
    assert labels.dtype == tf.int32 and labels.numpy().tolist() == [0, 1, 2, 3]
    with pytest.raises(datasets.DataSetError, match="tag is bytes: give a model of your own"):
        PLUGIN.model("feature-mlp").build(info, 0)


def test_nothing_to_download():
    with pytest.raises(datasets.DataSetError, match="your own files"):
        PLUGIN.check_source("download")


def test_the_default_job_writes_a_file_per_range_of_range_mb_and_num_shards_n_files(tmp_path):
    # Files of tens of MB by default, not one per 1,024 records (issue 41).
    from distrain.datasets.testing import read_back
    from distrain.preprocess.records import FRAME_BYTES

    raw, _ = _raw(tmp_path, [])  # two training files of 100 records, of 78 bytes each
    framed = 78 + FRAME_BYTES
    range_mb = 30 * framed / 2**20  # batches of 30, 30, 30 and 10 records per file
    cfg = TfrecordPreprocessConfig(str(raw), str(tmp_path / "out"), range_mb=range_mb)
    meta = preprocess_tfrecord(cfg, list(BEAM_ARGS))
    sizes = read_back(tmp_path / "out", meta["shards"])
    assert len(sizes["train"]) == 8 and max(sizes["train"]) <= 30 * framed
    # A file per range and split that the range has records of (the seeded split leaves
    # some ranges without validation or test records); none over the range's size.
    assert {split: len(s) for split, s in sizes.items()} == {"train": 8, "validation": 6, "test": 7}
    assert all(max(s) <= 30 * framed for s in sizes.values())
    assert sum(sum(s) for s in sizes.values()) == 200 * framed
    counts = {split: sum(f["records"] for f in files) for split, files in meta["shards"].items()}
    assert counts == meta["splits"]
    exact = TfrecordPreprocessConfig(str(raw), str(tmp_path / "n"), num_shards=2, range_mb=range_mb)
    meta = preprocess_tfrecord(exact, list(BEAM_ARGS))
    sizes = read_back(tmp_path / "n", meta["shards"])
    assert {split: len(s) for split, s in sizes.items()} == {"train": 2, "validation": 2, "test": 2}
    assert sum(sum(s) for s in sizes.values()) == 200 * framed


# ---- issue 49: NaN and inf values, and labels without class_names, are dead letters ----------


def _tf_example(x, label: int, y: float = 0.5) -> bytes:
    """A record made by TensorFlow's own tf.train.Example (features x [8], y [], label)."""
    import tensorflow as tf

    feature = {
        "x": tf.train.Feature(float_list=tf.train.FloatList(value=list(x))),
        "y": tf.train.Feature(float_list=tf.train.FloatList(value=[y])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


TWO_FLOATS = {
    "features": {
        "x": {"dtype": "float32", "shape": [8]},
        "y": {"dtype": "float32", "shape": []},
        "label": {"dtype": "int64", "shape": []},
    },
    "label": "label",
}


def _tf_folder(tmp_path, records: list[bytes]):
    """features.json (TWO_FLOATS) and one training file written by tf.io.TFRecordWriter."""
    import tensorflow as tf

    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "features.json").write_text(json.dumps(TWO_FLOATS))
    with tf.io.TFRecordWriter(str(raw / "train-00000-of-00001.tfrecord")) as writer:
        for record in records:
            writer.write(record)
    return raw


@pytest.mark.case("integrity/non-finite", "integrity/label-bound")
def test_a_nan_or_inf_value_and_a_label_past_the_bound_are_named_in_the_reason():
    spec = FeatureSpec.from_dict(TWO_FLOATS, "f.json")
    assert check_example(_tf_example([0.0] * 8, 1), spec) == (1, "")
    nan = float("nan")
    assert check_example(_tf_example([0.0, nan] + [0.0] * 6, 1), spec) == (
        -1,
        "feature 'x': nan at index 1 (not finite)",
    )
    assert check_example(_tf_example([0.0] * 8, 1, y=float("-inf")), spec)[1] == (
        "feature 'y': -inf at index 0 (not finite)"
    )
    # Without class_names, a label at or above max_label (default 10,000) is refused.
    assert check_example(_tf_example([0.0] * 8, 9_999), spec) == (9_999, "")
    reason = check_example(_tf_example([0.0] * 8, 3_000_000), spec)[1]
    assert reason.startswith("label 3000000 at or above max_label 10000 (no class_names")
    assert check_example(_tf_example([0.0] * 8, 5), spec, max_label=5)[1].startswith(
        "label 5 at or above max_label 5"
    )
    # The int32 range is checked on the int64 as read, before any cast: 2**31 never wraps.
    for label in (2**31, 2**63 - 1):
        reason = check_example(_tf_example([0.0] * 8, label), spec, max_label=2**31)[1]
        assert reason == (
            f"label {label} above the int32 range (labels are int32, at most 2147483647)"
        )
    assert check_example(_tf_example([0.0] * 8, -(2**40)), spec)[1].startswith(
        f"label {-(2**40)} outside 0..9999"
    )
    # Counted by kind: one count for every value of a bad label.
    from distrain.datasets.tfrecord.spec import reason_kind

    assert reason_kind("label 3000000 at or above max_label 10000 (x)") == (
        "label at or above max_label 10000 (x)"
    )
    assert reason_kind("feature 'x': nan at index 1 (not finite)") == (
        "feature 'x': nan at index 1 (not finite)"
    )
    with pytest.raises(ValueError, match="max_label must be in 1..2147483648"):
        TfrecordPreprocessConfig("in", "out", max_label=2**31 + 1)


@pytest.mark.case("integrity/non-finite", "integrity/label-bound")
def test_check_examples_dead_letters_non_finite_values_and_labels_past_the_bound():
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from distrain.datasets.tfrecord.beam import CheckExamples

    spec = FeatureSpec.from_dict(TWO_FLOATS, "f.json")
    good = [_tf_example([float(i)] * 8, i % 3) for i in range(6)]
    bad = [
        _tf_example([float("inf")] + [0.0] * 7, 0),
        _tf_example([0.0] * 8, 3_000_000),
        _tf_example([0.0] * 8, 7_000_000),
        _tf_example([0.0] * 8, 2**31),
    ]
    batch = ("test", "/raw/test-0.tfrecord", 1, [(r, True) for r in good + bad])
    bound = "at or above max_label 10000 (no class_names in features.json: give class_names, "
    bound += "or a larger --max-label)"
    options = beam.options.pipeline_options.PipelineOptions(list(BEAM_ARGS))
    with TestPipeline(options=options) as p:
        out = p | beam.Create([batch]) | CheckExamples(spec, 0, 0.0, False)
        assert_that(
            out["dead_letter"],
            equal_to(
                [
                    {
                        "file": "test-0.tfrecord",
                        "record": 7,
                        "reason": "feature 'x': inf at index 0 (not finite)",
                    },
                    {"file": "test-0.tfrecord", "record": 8, "reason": f"label 3000000 {bound}"},
                    {"file": "test-0.tfrecord", "record": 9, "reason": f"label 7000000 {bound}"},
                    {
                        "file": "test-0.tfrecord",
                        "record": 10,
                        "reason": f"label {2**31} above the int32 range (labels are int32, at "
                        "most 2147483647)",
                    },
                ]
            ),
            label="DeadLetters",
        )
        assert_that(
            out["stats"],
            equal_to(
                [
                    {
                        "by_file": {"test-0.tfrecord": {"read": 10, "rejected": 4}},
                        # the bad labels' reasons counted as one, whatever their values
                        "rejected": {
                            "feature 'x': inf at index 0 (not finite)": 1,
                            f"label {bound}": 2,
                            "label above the int32 range (labels are int32, at most 2147483647)": 1,
                        },
                        "labels": {"test": {"0": 2, "1": 2, "2": 2}},
                    }
                ]
            ),
            label="Stats",
        )
        assert_that(
            out["test"] | beam.Map(lambda batch: len(batch[1])), equal_to([6]), label="Kept"
        )


@pytest.mark.case("integrity/non-finite")
def test_twenty_of_300_records_with_nan_or_inf_are_dead_lettered_and_the_rest_kept(tmp_path):
    import tensorflow as tf

    from distrain.datasets.testing import read_back

    rng = np.random.default_rng(5)
    poisoned = {int(i) for i in rng.choice(300, 20, replace=False)}
    values = (float("nan"), float("inf"), float("-inf"))
    records, expected = [], []
    for i in range(300):
        x, y = [float(v) for v in rng.normal(size=8)], 0.5
        if i in poisoned:
            value = values[i % 3]
            if i % 2:
                x[i % 8] = value
                expected.append((i + 1, f"feature 'x': {value} at index {i % 8} (not finite)"))
            else:
                y = value
                expected.append((i + 1, f"feature 'y': {value} at index 0 (not finite)"))
        records.append(_tf_example(x, i % 4, y))
    raw = _tf_folder(tmp_path, records)
    # At the default 1 % the job fails, as for any other dead letter.
    with pytest.raises(BadRecordsError, match="20 of 300 records rejected"):
        preprocess_tfrecord(
            TfrecordPreprocessConfig(str(raw), str(tmp_path / "a")), list(BEAM_ARGS)
        )
    out = tmp_path / "out"
    cfg = TfrecordPreprocessConfig(
        str(raw), str(out), validation_fraction=0.1, seed=0, max_bad_ratio=0.1
    )
    meta = preprocess_tfrecord(cfg, list(BEAM_ARGS))
    letters = [json.loads(line) for f in (out / "dead_letter").iterdir() for line in f.open()]
    name = "train-00000-of-00001.tfrecord"
    assert letters == [{"file": name, "record": n, "reason": r} for n, r in expected]
    assert meta["rejected"]["count"] == 20 and sum(meta["rejected"]["reasons"].values()) == 20
    assert sum(meta["splits"].values()) == 280
    # Read back by TensorFlow: 280 records, every value finite, none of the poisoned ones.
    read_back(out, meta["shards"])
    spec = {
        "x": tf.io.FixedLenFeature([8], tf.float32),
        "y": tf.io.FixedLenFeature([], tf.float32),
        "label": tf.io.FixedLenFeature([], tf.int64),
    }
    files = [str(out / f["file"]) for fs in meta["shards"].values() for f in fs]
    kept = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(files)]
    assert len(kept) == 280
    assert all(np.isfinite(r["x"].numpy()).all() and np.isfinite(r["y"].numpy()) for r in kept)


@pytest.mark.case("integrity/label-bound")
def test_a_label_of_3000000_or_2_to_the_31_without_class_names_keeps_metadata_small(tmp_path):
    records = [_tf_example([float(i % 4)] * 8, i % 4) for i in range(300)]
    records[41] = _tf_example([0.0] * 8, 3_000_000)
    records[242] = _tf_example([0.0] * 8, 2**31)
    raw = _tf_folder(tmp_path, records)
    out = tmp_path / "out"
    meta = preprocess_tfrecord(TfrecordPreprocessConfig(str(raw), str(out)), list(BEAM_ARGS))
    letters = [json.loads(line) for f in (out / "dead_letter").iterdir() for line in f.open()]
    assert [(d["file"], d["record"], d["reason"]) for d in letters] == [
        (
            "train-00000-of-00001.tfrecord",
            42,
            "label 3000000 at or above max_label 10000 (no class_names in features.json: give "
            "class_names, or a larger --max-label)",
        ),
        (
            "train-00000-of-00001.tfrecord",
            243,
            f"label {2**31} above the int32 range (labels are int32, at most 2147483647)",
        ),
    ]
    assert meta["num_classes"] == 4 and meta["rejected"]["count"] == 2
    assert (out / "metadata.json").stat().st_size < 20_000
