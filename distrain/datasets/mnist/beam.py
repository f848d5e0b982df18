"""Beam preprocessing of MNIST: IDX files to sharded TFRecords of ``tf.train.Example``.

    python -m distrain.datasets.mnist.beam --input-dir RAW --output-dir OUT [beam options]

Output: ``OUT/{train,validation,test}/part-*.tfrecord`` with features ``image`` (the
raw rows*cols uint8 bytes) and ``label`` (int64), ``OUT/dead_letter/*.jsonl`` (rejected
records and why) and ``OUT/metadata.json`` (counts, shapes, class histograms, rejects).
File-level problems (a missing or malformed IDX file) stop the job before Beam starts,
with an error naming the file; per-record problems go to the dead-letter output.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import asdict, dataclass
from pathlib import Path

import apache_beam as beam
import numpy as np

from distrain.datasets.mnist.idx import (
    IMAGES_MAGIC,
    LABELS_MAGIC,
    MNIST_FILES,
    IdxFormatError,
    idx_shape,
    inspect_mnist_split,
    mnist_paths,
    read_idx_rows,
    unpack_idx,
)
from distrain.preprocess.options import JobOptions, run_job
from distrain.preprocess.records import bytes_feature, example, int64_feature, records_per_file
from distrain.preprocess.runners import job_pipeline
from distrain.preprocess.transforms import ByTag, CombineAll, SumStatsFn, validation_mask
from distrain.preprocess.writing import (
    WriteOutputs,
    check_accounting,
    check_bad_ratio,
    list_shards,
    read_outputs,
    staged_output,
    write_metadata,
)

NUM_CLASSES = 10
SPLITS = ("train", "validation", "test")


@dataclass(frozen=True, kw_only=True)
class MnistPreprocessConfig(JobOptions):
    """Settings of the MNIST preprocessing job.

    Attributes:
        input_dir: Directory with the four MNIST IDX files (gzipped or not).
        output_dir: Where TFRecords, dead letters and metadata go.
        validation_fraction: Share of the training file held out for validation.
        seed: Seed of the train/validation assignment.
        num_shards: TFRecord files per split; 0 (default): one file per range of images
            and split, written where the range is encoded, with no shuffle of the records
            (files of about ``range_mb`` times the split's share).
        batch_size: Images per range (the unit of work: read, encoded and written as one
            element); 0 (default): ranges of about ``range_mb`` megabytes of records.
        range_mb: Megabytes of TFRecords per range when ``batch_size`` is 0 (the images
            per range follow from a record's size: 838 bytes framed for 28x28 pixels). A
            range's memory is bounded by this; object stores read few large files far
            faster than many small ones.
        max_bad_ratio: Largest share of rejected records before the job fails.
        overwrite: Replace an output folder that holds files (else it is refused).
    """

    seed: int = 0
    batch_size: int = 0

    records_field = "batch_size"


class UnpackIdxSplit(beam.DoFn):
    """Stages one MNIST split's IDX pair for reading by rows; emits its row ranges.

    Gzip can only be read from the start, so a gzipped file is unpacked once into
    ``work_dir`` (:func:`~distrain.datasets.mnist.idx.unpack_idx`). What crosses the shuffle after
    this step is ranges ``(split, images_path, labels_path, start, stop)`` of
    ``batch_size`` rows (0: as many as make ``range_bytes`` of records), a few bytes each,
    not the images: each worker reads its ranges with a seek.
    """

    def __init__(self, input_dir: str, work_dir: str, batch_size: int, range_bytes: int):
        self.input_dir = input_dir
        self.work_dir = work_dir
        self.batch_size, self.range_bytes = batch_size, range_bytes

    def process(self, split: str):
        images_path, labels_path = mnist_paths(self.input_dir, split)
        images = unpack_idx(images_path, self.work_dir)
        labels = unpack_idx(labels_path, self.work_dir)
        count, *pixels = idx_shape(images, IMAGES_MAGIC)
        if idx_shape(labels, LABELS_MAGIC)[0] != count:
            raise IdxFormatError(f"{images_path} and {labels_path}: image and label counts differ")
        size = self.batch_size or records_per_file(
            self.range_bytes, mnist_example(bytes(int(np.prod(pixels))), 0)
        )
        for start in range(0, count, size):
            yield split, str(images), str(labels), start, min(start + size, count)


class ReadIdxRows(beam.DoFn):
    """Reads one range of a split: ``(split, start, images[N, rows, cols], labels[N])``."""

    def process(self, item):
        split, images, labels, start, stop = item
        yield (
            split,
            start,
            read_idx_rows(images, start, stop, IMAGES_MAGIC),
            read_idx_rows(labels, start, stop, LABELS_MAGIC),
        )


def mnist_example(image: bytes, label: int) -> bytes:
    """One serialised MNIST example: ``image`` (28x28 uint8 pixels) and ``label``."""
    return example({"image": bytes_feature((image,)), "label": int64_feature((label,))})


class _EncodeBatchFn(beam.DoFn):
    """Validates, splits and serialises one batch into ``(tag, value)`` pairs.

    Tags: each split, ``dead_letter`` and ``stats`` (separated by :class:`ByTag`).
    """

    def __init__(self, seed: int, validation_fraction: float):
        self.seed = seed
        self.validation_fraction = validation_fraction

    def process(self, batch):
        source, start, images, labels = batch
        labels = np.asarray(labels).astype(np.int64)
        indices = np.arange(start, start + len(labels))
        valid = (labels >= 0) & (labels < NUM_CLASSES)
        if source == "train":
            to_val = validation_mask(indices, self.seed, self.validation_fraction)
            targets = np.where(to_val, "validation", "train")
        else:
            targets = np.full(len(labels), source)
        stats: dict = {"input": {source: int(len(labels))}, "rejected": {}, "histogram": {}}
        if not valid.all():
            stats["rejected_by_split"] = {source: int((~valid).sum())}
        for i in np.flatnonzero(~valid):
            reason = f"label {labels[i]} outside 0..{NUM_CLASSES - 1}"
            stats["rejected"][reason] = stats["rejected"].get(reason, 0) + 1
            yield (
                "dead_letter",
                {
                    "split": source,
                    "index": int(indices[i]),
                    "label": int(labels[i]),
                    "reason": reason,
                },
            )
        for split in ("train", "validation", "test"):
            chosen = np.flatnonzero(valid & (targets == split))
            if not len(chosen):
                continue
            stats["histogram"][split] = np.bincount(labels[chosen], minlength=NUM_CLASSES).tolist()
            records = [mnist_example(images[i].tobytes(), int(labels[i])) for i in chosen.tolist()]
            # One element per batch, not per record: Beam's per-element cost is paid once.
            yield split, ((source, start), records)
        yield "stats", stats


class MnistToExamples(beam.PTransform):
    """Batches of MNIST records to serialised ``tf.train.Example`` per split.

    Input: ``(source_split, start_index, images, labels)`` batches. Output: a dict of
    PCollections: ``train``, ``validation`` and ``test`` (batches of serialised examples:
    ``((source_split, start_index), [record, ...])``, in source order within a batch),
    ``dead_letter`` (dicts with the record and its reason) and ``stats`` (one dict of
    counts: records read per source, rejects per reason, class histogram per split).
    """

    def __init__(self, seed: int = 0, validation_fraction: float = 0.1):
        super().__init__()
        self.seed = seed
        self.validation_fraction = validation_fraction

    def expand(self, batches):
        outputs = (
            batches
            | "EncodeBatches" >> beam.ParDo(_EncodeBatchFn(self.seed, self.validation_fraction))
            | "ByTag" >> ByTag(*SPLITS, "dead_letter", "stats")
        )
        result = {name: outputs[name] for name in (*SPLITS, "dead_letter")}
        result["stats"] = outputs["stats"] | "SumStats" >> CombineAll(SumStatsFn())
        return result


def validate_inputs(input_dir: str | os.PathLike) -> dict[str, tuple[int, list[int]]]:
    """Checks every IDX file before Beam starts; returns (count, image shape) per split.

    Headers and lengths only (the gzip trailer gives the length): the data are decoded
    once, by the job, not twice.

    Raises:
        IdxFormatError: A file is missing or malformed (the message names it).
    """
    found = {}
    for split in MNIST_FILES:
        shape = inspect_mnist_split(*mnist_paths(input_dir, split))
        found[split] = (shape[0], list(shape[1:]))
    return found


def _run_pipeline(config: MnistPreprocessConfig, out: Path, work: Path, beam_args) -> None:
    """The Beam job itself; gzipped inputs are unpacked under ``work``."""
    with job_pipeline(beam_args) as pipeline:
        batches = (
            pipeline
            | "Sources" >> beam.Create(list(MNIST_FILES))
            | "Unpack"
            >> beam.ParDo(
                UnpackIdxSplit(
                    config.input_dir, str(work), config.batch_size, int(config.range_mb * 2**20)
                )
            )
            | "Spread" >> beam.Reshuffle()
            | "ReadRows" >> beam.ParDo(ReadIdxRows())
        )
        result = batches | "ToExamples" >> MnistToExamples(config.seed, config.validation_fraction)
        _ = result | "WriteOutputs" >> WriteOutputs(
            out, SPLITS, config.num_shards, lambda d: (d["split"], d["index"])
        )


def preprocess_mnist(config: MnistPreprocessConfig, beam_args: list[str] | None = None) -> dict:
    """Runs the preprocessing job and writes ``metadata.json``.

    Args:
        config: The job's settings.
        beam_args: Beam pipeline options (runner etc.); default: in-memory DirectRunner.

    Returns:
        The metadata written to ``metadata.json``.

    Raises:
        IdxFormatError: An input file is missing or malformed.
        BadRecordsError: Too many records were rejected (dead letters left in OUT.failed).
        OutputExistsError: The output folder holds files and overwrite is off.
    """
    inputs = validate_inputs(config.input_dir)
    shapes = {tuple(shape) for _, shape in inputs.values()}
    if len(shapes) != 1:
        raise ValueError(f"{config.input_dir}: train and test image shapes differ: {shapes}")
    with staged_output(config.output_dir, config.overwrite) as out:
        work = out / ".work"
        try:
            _run_pipeline(config, out, work, beam_args)
        finally:
            shutil.rmtree(work, ignore_errors=True)
        metadata = _metadata(config, inputs, shapes.pop(), out)
        write_metadata(out, metadata)
    return metadata


def _metadata(config: MnistPreprocessConfig, inputs: dict, shape, out: Path) -> dict:
    """The metadata of a finished job, once its counts agree; raises if they do not."""
    files, stats = read_outputs(out)
    histogram = {s: stats.get("histogram", {}).get(s, [0] * NUM_CLASSES) for s in SPLITS}
    counts = {s: int(sum(h)) for s, h in histogram.items()}
    # The input count is the IDX header's, not what the job got to read.
    input_records = {s: count for s, (count, _) in inputs.items()}
    rejected_by = stats.get("rejected_by_split", {})
    for split, count in input_records.items():
        written = counts[split] + (counts["validation"] if split == "train" else 0)
        images = mnist_paths(config.input_dir, split)[0]
        check_accounting(str(images), count, written, int(rejected_by.get(split, 0)))
    rejected = int(sum(stats.get("rejected", {}).values()))
    total_in = sum(input_records.values())
    check_bad_ratio(config.input_dir, total_in, rejected, config.max_bad_ratio, config.output_dir)
    return {
        "dataset": "mnist",
        "image_shape": list(shape),
        "num_classes": NUM_CLASSES,
        "class_names": [str(i) for i in range(NUM_CLASSES)],
        "splits": counts,
        "class_histogram": histogram,
        "input_records": input_records,
        "rejected": {"count": rejected, "reasons": stats.get("rejected", {})},
        "files": {s: f"{s}/part-*.tfrecord" for s in SPLITS},
        "shards": list_shards(files, "", counts),
        "dead_letter": "dead_letter/part-*.jsonl",
        "feature_spec": {"image": "bytes: raw uint8 rows*cols", "label": "int64"},
        "config": asdict(config),
    }


def run(argv: list[str] | None = None) -> dict:
    """Command-line entry: every config field as an option, then any Beam options."""
    return run_job(MnistPreprocessConfig, preprocess_mnist, argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    run()
