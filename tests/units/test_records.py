"""The TensorFlow-free Example and TFRecord writers, checked against TensorFlow's own."""

import subprocess
import sys

import numpy as np
import pytest

from distrain.preprocess import records as rec

INT64S = [0, 1, 127, 128, 300, 16383, 16384, 2**21, 2**40, 2**63 - 1, -1, -300, -(2**63)]


def _tf_example(**features):
    """The same example built with protobuf's own classes, serialised deterministically."""
    import tensorflow as tf

    feature = {}
    for name, (kind, values) in features.items():
        if kind == "int64":
            feature[name] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        elif kind == "bytes":
            feature[name] = tf.train.Feature(bytes_list=tf.train.BytesList(value=values))
        else:
            feature[name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


@pytest.mark.parametrize(
    "values",
    [INT64S, [], [5], list(range(200)), np.array(INT64S), np.arange(100, dtype=np.uint8)],
    ids=["edges", "empty", "one", "small", "numpy-edges", "numpy-small"],
)
def test_int64_feature_is_byte_identical_to_protobuf(values):
    ours = rec.example({"x": rec.int64_feature(values)})
    assert ours == _tf_example(x=("int64", [int(v) for v in values]))


def test_bytes_and_float_features_and_many_names_are_byte_identical_to_protobuf():
    blobs = [b"", b"\x00\xff", bytes(range(256)) * 80]  # the last is longer than 16 KiB
    floats = [0.0, -1.5, 3.25, 1e30, float("inf")]
    ours = rec.example(
        {
            "zeta": rec.bytes_feature(blobs),
            "alpha": rec.float_feature(floats),
            "mid": rec.int64_feature([7, -7]),
            "none": rec.float_feature([]),
        }
    )
    expected = _tf_example(
        zeta=("bytes", blobs), alpha=("float", floats), mid=("int64", [7, -7]), none=("float", [])
    )
    assert ours == expected


def test_an_example_with_no_features_parses():
    import tensorflow as tf

    parsed = tf.train.Example.FromString(rec.example({}))
    assert parsed.HasField("features") and not parsed.features.feature


def test_tfrecord_files_are_byte_identical_to_tensorflows_writer(tmp_path):
    import tensorflow as tf

    records = [b"", b"a", bytes(range(256)) * 300, rec.example({"x": rec.int64_feature([1])})]
    ours = tmp_path / "sub" / "ours.tfrecord"  # the directory is made
    assert rec.write_tfrecords(str(ours), records, chunk_bytes=100) == len(records)
    with tf.io.TFRecordWriter(str(tmp_path / "tf.tfrecord")) as writer:
        for r in records:
            writer.write(r)
    assert ours.read_bytes() == (tmp_path / "tf.tfrecord").read_bytes()
    read = [r.numpy() for r in tf.data.TFRecordDataset(str(ours))]
    assert read == records
    assert [p.name for p in ours.parent.iterdir()] == ["ours.tfrecord"]  # no temporary left


def test_a_rewritten_file_replaces_the_old_one(tmp_path):
    path = str(tmp_path / "part.tfrecord")
    rec.write_tfrecords(path, [b"old", b"older"])
    rec.write_tfrecords(path, [b"new"])
    assert rec.tfrecord_frame(b"new") == (tmp_path / "part.tfrecord").read_bytes()
    rec.write_text("a\nb\u00e9\n", str(tmp_path / "v" / "vocab.txt"))
    assert (tmp_path / "v" / "vocab.txt").read_text("utf-8") == "a\nb\u00e9\n"


@pytest.mark.parametrize("dataset,size", [("mnist", 300), ("dbpedia", 280), ("gutenberg", 20000)])
def test_preprocessing_never_imports_tensorflow(tmp_path, dataset, size):
    """Beam workers write examples without TensorFlow: its import is seconds of start-up
    per worker process. (A fresh interpreter: this test session has TF loaded.)"""
    code = f"""
import sys
from pathlib import Path
from distrain.steps import fetch, preprocess
raw, out = Path({str(tmp_path / "raw")!r}), Path({str(tmp_path / "out")!r})
fetch({dataset!r}, "sample", raw, sample_size={size})
meta = preprocess({dataset!r}, raw, out, beam_args=["--runner=FnApiRunner"])
assert sum(meta["splits"].values()) > 0, meta
print("tensorflow" in sys.modules)
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr[-3000:]
    assert out.stdout.strip().splitlines()[-1] == "False"
