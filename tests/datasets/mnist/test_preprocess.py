"""The MNIST Beam preprocessing: the PTransform under TestPipeline, then the whole job."""

import json

import apache_beam as beam
import numpy as np
import pytest
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from distrain.datasets.mnist.beam import MnistPreprocessConfig, MnistToExamples, preprocess_mnist
from distrain.datasets.mnist.idx import IdxFormatError, write_idx
from distrain.preprocess.transforms import validation_mask
from distrain.preprocess.writing import BadRecordsError, read_tfrecords
from tests.conftest import BEAM_IN_MEMORY, BEAM_TWO_WORKERS

OPTIONS = BEAM_IN_MEMORY


def _batch(split, start, labels, seed=0):
    rng = np.random.default_rng(seed + start)
    images = rng.integers(0, 256, (len(labels), 28, 28), dtype=np.uint8)
    return split, start, images, np.asarray(labels, dtype=np.uint8)


def _decode(record: bytes):
    from tensorflow.core.example import example_pb2

    example = example_pb2.Example.FromString(record)
    feature = example.features.feature
    image = np.frombuffer(feature["image"].bytes_list.value[0], np.uint8).reshape(28, 28)
    return image, int(feature["label"].int64_list.value[0])


@pytest.mark.case("mnist/dead-letter")
def test_to_examples_splits_encodes_and_dead_letters():
    train = _batch("train", 0, [i % 10 for i in range(40)])
    test = _batch("test", 0, [3, 4, 12, 5])  # 12 is not a digit
    mask = validation_mask(np.arange(40), seed=1, fraction=0.25)
    expected_val = sorted(int(train[3][i]) for i in np.flatnonzero(mask))
    expected_train = sorted(int(train[3][i]) for i in np.flatnonzero(~mask))
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS)) as p:
        out = p | beam.Create([train, test]) | MnistToExamples(seed=1, validation_fraction=0.25)
        labels = {
            s: out[s]
            | f"Records{s}" >> beam.FlatMap(lambda batch: batch[1])
            | f"Label{s}" >> beam.Map(lambda r: _decode(r)[1])
            for s in ("train", "validation", "test")
        }
        assert_that(labels["train"], equal_to(expected_train), label="CheckTrain")
        assert_that(labels["validation"], equal_to(expected_val), label="CheckValidation")
        assert_that(labels["test"], equal_to([3, 4, 5]), label="CheckTest")
        assert_that(
            out["dead_letter"],
            equal_to(
                [{"split": "test", "index": 2, "label": 12, "reason": "label 12 outside 0..9"}]
            ),
            label="CheckDeadLetter",
        )
        assert_that(
            out["stats"] | beam.Map(lambda s: (s["input"], s["rejected"])),
            equal_to([({"train": 40, "test": 4}, {"label 12 outside 0..9": 1})]),
            label="CheckStats",
        )


def test_examples_round_trip_pixels():
    batch = _batch("test", 100, [7, 1])
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS)) as p:
        out = p | beam.Create([batch]) | MnistToExamples()
        records = out["test"] | beam.FlatMap(lambda batch: batch[1])
        decoded = records | beam.Map(lambda r: (_decode(r)[0].tobytes(), _decode(r)[1]))
        assert_that(decoded, equal_to([(batch[2][0].tobytes(), 7), (batch[2][1].tobytes(), 1)]))


def test_split_is_deterministic_and_about_right():
    idx = np.arange(2000)
    mask = validation_mask(idx, seed=3, fraction=0.1)
    assert 150 < mask.sum() < 250
    # The same records whatever the batching or order.
    parts = np.concatenate([validation_mask(idx[i : i + 37], 3, 0.1) for i in range(0, 2000, 37)])
    np.testing.assert_array_equal(mask, parts)
    np.testing.assert_array_equal(validation_mask(idx[::-1], 3, 0.1), mask[::-1])
    assert not np.array_equal(validation_mask(idx, 4, 0.1), mask)
    assert validation_mask(idx, 3, 0.0).sum() == 0


def _write_raw(path, n_train=300, n_test=100, bad_labels=()):
    rng = np.random.default_rng(0)
    for prefix, n in (("train", n_train), ("t10k", n_test)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        if prefix == "train":
            for i in bad_labels:
                labels[i] = 42
        write_idx(
            path / f"{prefix}-images-idx3-ubyte.gz",
            rng.integers(0, 256, (n, 28, 28), dtype=np.uint8),
        )
        write_idx(path / f"{prefix}-labels-idx1-ubyte.gz", labels)


def test_whole_job_writes_shards_and_metadata(tmp_path):
    _write_raw(tmp_path / "raw")
    cfg = MnistPreprocessConfig(
        str(tmp_path / "raw"), str(tmp_path / "out"), num_shards=3, batch_size=64
    )
    meta = preprocess_mnist(cfg, OPTIONS)
    assert meta["splits"]["train"] + meta["splits"]["validation"] == 300
    assert meta["splits"]["test"] == 100
    assert meta["input_records"] == {"train": 300, "test": 100}
    assert meta["rejected"]["count"] == 0
    assert sum(meta["class_histogram"]["test"]) == 100
    on_disk = json.loads((tmp_path / "out" / "metadata.json").read_text())
    assert on_disk == json.loads(json.dumps(meta))
    assert len(list((tmp_path / "out" / "train").glob("part-*.tfrecord"))) == 3
    records = read_tfrecords(str(tmp_path / "out" / "train" / "part-*.tfrecord"))
    assert len(records) == meta["splits"]["train"]


def test_the_default_job_writes_a_file_per_range_of_range_mb(tmp_path):
    # Files of tens of MB by default, not one per 1,024 images (59 files of under 1 MB
    # for MNIST's 60,000): object stores read few large files far faster (issue 41).
    from distrain.datasets.mnist.beam import mnist_example
    from distrain.datasets.testing import read_back
    from distrain.preprocess.records import FRAME_BYTES

    _write_raw(tmp_path / "raw")  # 300 training images, 100 test images
    framed = len(mnist_example(bytes(28 * 28), 0)) + FRAME_BYTES
    range_mb = 120 * framed / 2**20  # 120 images a range: 120, 120 and 60 of train.
    cfg = MnistPreprocessConfig(str(tmp_path / "raw"), str(tmp_path / "out"), range_mb=range_mb)
    meta = preprocess_mnist(cfg, OPTIONS)
    sizes = read_back(tmp_path / "out", meta["shards"])
    assert len(sizes["train"]) == len(sizes["validation"]) == 3
    assert sizes["test"] == [100 * framed]
    assert sum(sizes["train"]) + sum(sizes["validation"]) == 300 * framed
    assert sorted(sizes["train"])[-2] >= 100 * framed and max(sizes["train"]) <= 120 * framed
    assert {split: sum(f["records"] for f in files) for split, files in meta["shards"].items()} == (
        meta["splits"]
    )


def test_two_workers_read_row_ranges_to_the_same_output_as_one(tmp_path):
    _write_raw(tmp_path / "raw", bad_labels=(70,))
    outputs = {}
    for name, options in {
        "one": OPTIONS,
        "two": BEAM_TWO_WORKERS,
    }.items():
        cfg = MnistPreprocessConfig(
            str(tmp_path / "raw"), str(tmp_path / name), batch_size=32, max_bad_ratio=0.01
        )
        meta = preprocess_mnist(cfg, options)
        meta.pop("config")
        records = {
            s: sorted(read_tfrecords(str(tmp_path / name / s / "part-*.tfrecord")))
            for s in ("train", "validation", "test")
        }
        outputs[name] = (meta, records)
        assert not (tmp_path / name / ".work").exists()  # the unpacked copies are gone
    assert outputs["one"] == outputs["two"]
    meta, records = outputs["one"]
    assert meta["rejected"]["count"] == 1
    assert sum(len(r) for r in records.values()) == 399


@pytest.mark.case("mnist/dead-letter")
def test_bad_records_over_the_ratio_fail_after_dead_lettering(tmp_path):
    _write_raw(tmp_path / "raw", bad_labels=(5, 17))
    cfg = MnistPreprocessConfig(str(tmp_path / "raw"), str(tmp_path / "out"))
    with pytest.raises(BadRecordsError, match="2 of 400 records rejected"):
        preprocess_mnist(cfg, OPTIONS)
    dead = [
        json.loads(line)
        for f in (tmp_path / "out.failed" / "dead_letter").glob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert sorted(d["index"] for d in dead) == [5, 17]
    # Allowed ratio: the job passes and counts them.
    ok = MnistPreprocessConfig(str(tmp_path / "raw"), str(tmp_path / "out2"), max_bad_ratio=0.01)
    meta = preprocess_mnist(ok, OPTIONS)
    assert meta["rejected"] == {"count": 2, "reasons": {"label 42 outside 0..9": 2}}
    assert sum(meta["splits"].values()) + 2 == 400


@pytest.mark.case("mnist/truncated-gzip")
def test_bad_file_is_named_before_beam_starts(tmp_path):
    _write_raw(tmp_path / "raw")
    (tmp_path / "raw" / "t10k-labels-idx1-ubyte.gz").write_bytes(b"\x1f\x8bgarbage")
    cfg = MnistPreprocessConfig(str(tmp_path / "raw"), str(tmp_path / "out"))
    with pytest.raises(IdxFormatError, match="t10k-labels-idx1-ubyte.gz: corrupt or truncated"):
        preprocess_mnist(cfg, OPTIONS)
    assert not (tmp_path / "out").exists()


def test_config_validation():
    with pytest.raises(ValueError, match="validation_fraction"):
        MnistPreprocessConfig("a", "b", validation_fraction=1.0)
    with pytest.raises(ValueError, match="max_bad_ratio"):
        MnistPreprocessConfig("a", "b", max_bad_ratio=2)
    with pytest.raises(ValueError, match="range_mb must be positive, got 0"):
        MnistPreprocessConfig("a", "b", range_mb=0)
    with pytest.raises(ValueError, match="num_shards must be >= 0 .*, got -1"):
        MnistPreprocessConfig("a", "b", num_shards=-1)
    with pytest.raises(ValueError, match="batch_size must be >= 0"):
        MnistPreprocessConfig("a", "b", batch_size=-5)


def test_command_line_entry(tmp_path, capsys):
    from distrain.datasets.mnist.beam import run

    _write_raw(tmp_path / "raw", n_train=50, n_test=20)
    meta = run(
        [
            "--input-dir",
            str(tmp_path / "raw"),
            "--output-dir",
            str(tmp_path / "out"),
            "--num-shards",
            "1",
            "--validation-fraction",
            "0.2",
            "--range-mb",
            "0.5",
            *OPTIONS,
        ]
    )
    assert meta["config"]["num_shards"] == 1 and meta["config"]["validation_fraction"] == 0.2
    assert meta["config"]["range_mb"] == 0.5
    assert '"splits"' in capsys.readouterr().out
    assert len(list((tmp_path / "out" / "train").glob("*.tfrecord"))) == 1


def test_batched_tfrecord_sink_writes_every_shard_in_order(tmp_path):
    from distrain.preprocess.writing import WriteTFRecordBatches, read_tfrecords, shard_of

    batches = [((0, i), [f"r{i}-{j}".encode() for j in range(3)]) for i in range(7)]

    def run():
        with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS)) as p:
            written = (
                p | beam.Create(batches[::-1]) | WriteTFRecordBatches(str(tmp_path / "part"), 3)
            )
            assert_that(
                written | beam.Map(lambda fc: fc[1]) | beam.CombineGlobally(sum),
                equal_to([21]),
            )

    run()
    files = sorted(tmp_path.glob("part-*.tfrecord"))
    assert [f.name for f in files] == [f"part-0000{i}-of-00003.tfrecord" for i in range(3)]
    for shard, path in enumerate(files):
        expected = [r for key, recs in batches if shard_of(key, 3) == shard for r in recs]
        assert read_tfrecords(str(path)) == expected  # batch order, whatever the input order
    before = {p.name: p.read_bytes() for p in files}
    run()  # a rerun (or a retried bundle) rewrites the same files
    assert {p.name: p.read_bytes() for p in sorted(tmp_path.glob("part-*"))} == before


def test_batched_sink_default_writes_a_file_per_batch(tmp_path):
    from distrain.preprocess.writing import WriteTFRecordBatches, batch_file_name, read_tfrecords

    batches = [(("train", 2048), [b"c", b"d"]), (("book 1.txt", "train"), [b"e"])]
    with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS)) as p:
        _ = p | beam.Create(batches) | WriteTFRecordBatches(str(tmp_path / "part"))
    # Text parts keep a readable form and add a hash of their exact text: names that
    # differ only in punctuation never meet in one file.
    train = batch_file_name(("train", 2048))
    assert train.startswith("train.") and train.endswith("-000002048")
    book = batch_file_name(("book 1.txt", "train"))
    assert book.startswith("book_1.txt.") and book != batch_file_name(("book-1.txt", "train"))
    assert read_tfrecords(str(tmp_path / f"part-{train}.tfrecord")) == [b"c", b"d"]
    assert read_tfrecords(str(tmp_path / f"part-{book}.tfrecord")) == [b"e"]
    assert not list(tmp_path.glob("*.tmp-*"))


def test_write_outputs_names_a_missing_output_before_the_job_runs(tmp_path):
    from distrain.preprocess.writing import WriteOutputs

    with pytest.raises(ValueError, match="WriteOutputs: no output named validation, stats"):
        with TestPipeline(options=beam.options.pipeline_options.PipelineOptions(OPTIONS)) as p:
            batches = p | "Batches" >> beam.Create([((0, 0), [b"r"])])
            dead = p | "Dead" >> beam.Create([])
            outputs = {"train": batches, "dead_letter": dead}
            _ = outputs | WriteOutputs(tmp_path, ("train", "validation"))
    assert not list(tmp_path.iterdir())


@pytest.mark.case("mnist/accounting")
def test_records_lost_between_the_header_and_the_output_fail_the_step(tmp_path, monkeypatch):
    import distrain.datasets.mnist.beam as mnist
    from distrain.preprocess.writing import RecordAccountingError

    real = mnist.read_idx_rows

    def short_read(path, start, stop, magic):
        # A reader that comes back one row short on the first range of each file.
        return real(path, start, stop - 1 if start == 0 else stop, magic)

    monkeypatch.setattr(mnist, "read_idx_rows", short_read)
    _write_raw(tmp_path / "raw")
    cfg = MnistPreprocessConfig(str(tmp_path / "raw"), str(tmp_path / "out"), batch_size=64)
    with pytest.raises(
        RecordAccountingError, match=r"train-images-idx3-ubyte.gz: 300 records in the input.* 1 "
    ):
        preprocess_mnist(cfg, OPTIONS)
