"""Nothing lost, nothing mixed, nothing silently started over (issue 37).

Each test here reproduces one way a run could end with data or a model that is not what
its counts say, and checks it against counts taken apart from the code that made them:
the records actually in the files, the lines of the input, the bytes of a header.
"""

from __future__ import annotations

import gzip
import json
import struct

import numpy as np
import pytest

from distrain.datasets.dbpedia.beam import DbpediaPreprocessConfig, preprocess_dbpedia
from distrain.datasets.gutenberg.beam import GutenbergPreprocessConfig, preprocess_gutenberg
from distrain.datasets.gutenberg.sample import book_text
from distrain.datasets.mnist.beam import MnistPreprocessConfig, preprocess_mnist
from distrain.datasets.mnist.idx import IdxFormatError, write_idx
from distrain.preprocess.failures import Failure
from distrain.preprocess.records import count_tfrecords
from distrain.preprocess.writing import OutputExistsError

OPTIONS = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
WORDS = "the quick brown fox jumps over a lazy dog while seven wizards quietly judge boxes"


def _book(i: int) -> str:
    rng = np.random.default_rng(i)
    lines = [" ".join(rng.choice(WORDS.split(), 12)) for _ in range(60)]
    return book_text(f"Book {i}", "Anon", "\n".join(lines) + "\n", 1000 + i)


def _books(folder, names):
    folder.mkdir(parents=True, exist_ok=True)
    for i, name in enumerate(names):
        (folder / name).write_text(_book(i), encoding="utf-8")
    return folder


def _on_disk(out, split: str) -> int:
    """Records in every TFRecord file of a split's folder, read with TensorFlow."""
    import tensorflow as tf

    files = sorted(str(p) for p in (out / split).glob("*.tfrecord"))
    return sum(1 for _ in tf.data.TFRecordDataset(files)) if files else 0


@pytest.mark.case("integrity/shard-names")
def test_books_whose_names_differ_in_punctuation_keep_their_own_shards(tmp_path):
    raw = _books(tmp_path / "raw", ["pg-11.txt", "pg_11.txt", "pg 11.txt"])
    out = tmp_path / "out"
    # A group of books per file by default: here ranges so small that each book is one.
    cfg = GutenbergPreprocessConfig(str(raw), str(out), range_mb=1e-6)
    meta = preprocess_gutenberg(cfg, OPTIONS)
    for split in ("train", "validation"):
        assert _on_disk(out, split) == meta["splits"][split] > 0
    # Each file the writer listed holds the records it says.
    listed = meta["shards"]["train"]
    assert len(listed) == 3
    for item in listed:
        assert count_tfrecords(out / item["file"]) == item["records"]
        assert (out / item["file"]).stat().st_size == item["bytes"]


def _rows(n, first=0):
    row = b'%d,"T%d","alpha beta words %d"\n'
    return b"".join(row % (i % 14 + 1, i, i) for i in range(first, n))


def _dbpedia_layout(path, train: bytes):
    from distrain.datasets.dbpedia.sample import CLASSES

    path.mkdir()
    (path / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    (path / "train.csv").write_bytes(train)
    (path / "test.csv").write_bytes(_rows(30))
    return path


@pytest.mark.case("integrity/csv-recovery")
def test_one_stray_quote_costs_its_line_not_the_rest_of_the_file(tmp_path):
    rows = _rows(400).splitlines(keepends=True)
    stray = len(rows) - 200  # 0-based: line stray + 1 of the file
    rows[stray] = rows[stray].replace(b"alpha beta", b'alpha "beta')
    raw = _dbpedia_layout(tmp_path / "raw", b"".join(rows))
    out = tmp_path / "out"
    meta = preprocess_dbpedia(DbpediaPreprocessConfig(str(raw), str(out)), OPTIONS)
    # Every other row is kept; the one line with the quote is the only reject.
    assert meta["splits"]["train"] + meta["splits"]["validation"] == 399
    assert meta["rejected"]["count"] == 1
    dead = [
        json.loads(x)
        for x in (out / "dead_letter").glob("*.jsonl")
        for x in x.read_text().splitlines()
    ]
    assert [(d["line"], d["lines"]) for d in dead] == [(stray + 1, 1)]
    # The input count is the file's physical lines, which the parser does not count.
    assert meta["input_lines"] == {"train": 400, "test": 30}
    for split in ("train", "validation", "test"):
        assert _on_disk(out, split) == meta["splits"][split]


@pytest.mark.case("integrity/output-folder")
def test_a_rerun_into_a_used_folder_is_refused_or_replaces_it_whole(tmp_path):
    raw3 = _books(tmp_path / "raw3", ["a.txt", "b.txt", "c.txt"])
    raw2 = _books(tmp_path / "raw2", ["a.txt", "b.txt"])
    out = tmp_path / "out"
    preprocess_gutenberg(GutenbergPreprocessConfig(str(raw3), str(out)), OPTIONS)
    with pytest.raises(OutputExistsError, match=f"{out}: not empty"):
        preprocess_gutenberg(GutenbergPreprocessConfig(str(raw2), str(out)), OPTIONS)
    cfg = GutenbergPreprocessConfig(str(raw2), str(out), overwrite=True)
    meta = preprocess_gutenberg(cfg, OPTIONS)
    for split in ("train", "validation"):
        assert _on_disk(out, split) == meta["splits"][split] > 0
    assert meta["complete"] is True
    assert not list(tmp_path.glob(".out*"))  # no temporary sibling left behind
    assert Failure.of("preprocess", OutputExistsError("x")).exit_code == 2


def _overflowing_mnist(folder):
    """MNIST files whose image headers claim 4 images of 2**31 x 2**31 pixels (no data)."""
    folder.mkdir()
    for prefix in ("train", "t10k"):
        header = struct.pack(">HBB", 0, 8, 3) + struct.pack(">3I", 4, 2**31, 2**31)
        (folder / f"{prefix}-images-idx3-ubyte.gz").write_bytes(gzip.compress(header, mtime=0))
        write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", np.arange(4, dtype=np.uint8))
    return folder


@pytest.mark.case("integrity/idx-sizes")
def test_an_idx_header_whose_sizes_overflow_is_a_permanent_error_naming_the_file(tmp_path):
    raw = _overflowing_mnist(tmp_path / "raw")
    cfg = MnistPreprocessConfig(str(raw), str(tmp_path / "out"))
    with pytest.raises(IdxFormatError, match="train-images-idx3-ubyte") as caught:
        preprocess_mnist(cfg, OPTIONS)
    failure = Failure.of("preprocess", caught.value)
    assert not failure.retryable and failure.exit_code == 2
    assert not (tmp_path / "out" / "metadata.json").exists()


def test_a_quote_open_past_the_bound_is_rejected_line_by_line():
    from distrain.datasets.dbpedia.rows import csv_row_ranges, parse_csv, physical_lines

    # A quoted field over three lines is a record; with a bound of two lines it is not,
    # and every line up to the next row start is rejected with it.
    data = b'1,"a","b\nc\nd"\n2,"e","f"\n3,"g","h"\n'
    assert [(o[0], o[1], o[4]) for o in parse_csv("t.csv", data, 14)] == [
        ("ok", 1, 1 + 2),
        ("ok", 4, 1),
        ("ok", 5, 1),
    ]
    bounded = list(parse_csv("t.csv", data, 14, max_lines=2))
    assert [(o[0], o[1], o[4]) for o in bounded] == [("bad", 1, 3), ("ok", 4, 1), ("ok", 5, 1)]
    assert sum(o[4] for o in bounded) == physical_lines(data) == 5
    # Two stray quotes close together swallow the lines between them, all counted.
    two = b'1,"a","b"\n2,"x"y","z"\n3,"c","d"\n4,"p"q","r"\n5,"e","f"\n'
    out = list(parse_csv("t.csv", two, 14))
    assert [(o[0], o[1], o[4]) for o in out] == [("ok", 1, 1), ("bad", 2, 3), ("ok", 5, 1)]
    # A byte bound works the same way.
    wide = b'1,"a","' + b"x" * 50 + b"\n" + b"y" * 50 + b'"\n2,"c","d"\n'
    assert [o[0] for o in parse_csv("t.csv", wide, 14, max_bytes=64)] == ["bad", "ok"]
    # Ranges cut at record ends read as the whole file does.
    for rows in (1, 2):
        ranges = csv_row_ranges(two, rows)
        pieces = [o for a, b, line, _ in ranges for o in parse_csv("t.csv", two[a:b], 14, line)]
        assert pieces == out


@pytest.mark.case("integrity/file-list")
def test_training_reads_exactly_the_listed_files_and_refuses_any_difference(
    mnist_examples, tmp_path
):
    import shutil

    from distrain.datasets.info import DataError, DatasetInfo
    from distrain.preprocess.records import write_tfrecords

    data = tmp_path / "data"
    shutil.copytree(mnist_examples, data)
    meta = json.loads((data / "metadata.json").read_text())
    listed = [data / item["file"] for item in meta["shards"]["train"]]
    info = DatasetInfo.load(data)
    assert info.split_files("train") == [str(p) for p in sorted(listed)]

    # A file more (an earlier job's, a stray copy) is named and refused.
    extra = data / "train" / "part-older.tfrecord"
    write_tfrecords(str(extra), [b"x"])
    with pytest.raises(DataError, match="part-older.tfrecord: not in .*metadata.json's list"):
        info.split_files("train")
    extra.unlink()
    # A listed file with another count of records, or missing.
    victim = listed[0]
    original = victim.read_bytes()
    write_tfrecords(str(victim), [b"y"])
    with pytest.raises(DataError, match=f"{victim.name}: .*bytes, .*metadata.json lists"):
        info.split_files("train")
    victim.unlink()
    with pytest.raises(DataError, match=f"{victim.name}: listed in .* but missing"):
        info.split_files("train")
    victim.write_bytes(original)
    assert len(info.split_files("train")) == len(listed)
    # A metadata file without its completion mark is no data set.
    (data / "metadata.json").write_text(json.dumps({**meta, "complete": False}))
    with pytest.raises(DataError, match="not marked complete"):
        DatasetInfo.load(data)


def _mnist_raw(folder, bad_label_at=None):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", 64), ("t10k", 32)):
        images = rng.integers(0, 256, (n, 28, 28)).astype(np.uint8)
        labels = (np.arange(n) % 10).astype(np.uint8)
        if bad_label_at is not None and prefix == "train":
            labels[bad_label_at] = 42
        write_idx(folder / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(folder / f"{prefix}-labels-idx1-ubyte.gz", labels)
    return folder


@pytest.mark.case("integrity/metadata-last")
def test_a_job_that_fails_its_checks_leaves_no_data_set(tmp_path):
    from distrain.preprocess.writing import BadRecordsError

    good_raw = _mnist_raw(tmp_path / "good")
    bad_raw = _mnist_raw(tmp_path / "bad", bad_label_at=5)
    # Into a new folder: nothing that looks like a data set, the dead letters beside it.
    fresh = tmp_path / "fresh"
    with pytest.raises(BadRecordsError, match="fresh.failed/dead_letter"):
        preprocess_mnist(MnistPreprocessConfig(str(bad_raw), str(fresh)), OPTIONS)
    assert not (fresh / "metadata.json").exists()
    assert not (tmp_path / "fresh.failed" / "metadata.json").exists()
    assert list((tmp_path / "fresh.failed" / "dead_letter").glob("*.jsonl"))
    # Over an earlier, good output: it stays as it was.
    out = tmp_path / "out"
    good = preprocess_mnist(MnistPreprocessConfig(str(good_raw), str(out)), OPTIONS)
    before = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    cfg = MnistPreprocessConfig(str(bad_raw), str(out), overwrite=True)
    with pytest.raises(BadRecordsError):
        preprocess_mnist(cfg, OPTIONS)
    after = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    assert after == before
    assert json.loads((out / "metadata.json").read_text())["splits"] == good["splits"]
    assert not list(tmp_path.glob(".out.tmp-*"))


@pytest.mark.case("integrity/checkpoint-state", "integrity/checkpoint-fingerprint")
def test_checkpoints_are_found_by_their_files_and_refused_from_another_model(
    mnist_examples, tmp_path
):
    from distrain.base.errors import ConfigError
    from distrain.train.config import TrainConfig
    from distrain.train.replica import Replica

    out = tmp_path / "run"
    cfg = TrainConfig(data_dir=str(mnist_examples), output_dir=str(out), model="softmax")
    first = Replica(cfg)
    first.version.assign(7)
    first.checkpoint(7)
    first.version.assign(12)
    first.checkpoint(12)
    weights = [w.numpy() for w in first.model.weights]
    # A garbled state file: the checkpoints are found by their files, not started over.
    (out / "checkpoints" / "checkpoint").write_text("junk {{{ not a state file")
    again = Replica(cfg)
    path = again.restore()
    assert path is not None and path.endswith("ckpt-12") and again.step == 12
    for a, b in zip(weights, again.model.weights, strict=True):
        np.testing.assert_array_equal(a, b.numpy())
    assert again.manager.checkpoints[-1].endswith("ckpt-12")  # the state file is whole again
    # Another model's checkpoint in the same folder is a permanent error naming the change.
    other = Replica(TrainConfig(data_dir=str(mnist_examples), output_dir=str(out), model="mlp"))
    with pytest.raises(ConfigError, match="ckpt-12: a checkpoint of another model.*'softmax' in "):
        other.restore()
    failure = Failure.of("train", ConfigError("x"))
    assert not failure.retryable and failure.exit_code == 2
