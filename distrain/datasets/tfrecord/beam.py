"""Beam preprocessing of the user's TFRecords: every record checked against ``features.json``.

    python -m distrain.datasets.tfrecord.beam --input-dir RAW --output-dir OUT [beam options]

Input: ``RAW/features.json``, ``RAW/train-*.tfrecord`` and optionally ``RAW/test-*.tfrecord``
(either may be gzipped: a ``.gz`` suffix or gzip's magic bytes). Output:
``OUT/{train,validation,test}/part-*.tfrecord`` holding the good records as they came,
``OUT/dead_letter/*.jsonl`` (each bad record's file, number from 1 and reason: among
them a NaN or infinite float value, naming the feature, and a label at or above
``max_label`` without class_names, naming the value) and
``OUT/metadata.json`` (counts per split and per input file, the feature spec, the class
histogram, or for a float32 label, a regression's target, no classes but the label's count,
mean and standard deviation per split; and what a model needs from the training split: each
numeric feature's statistics and each bytes feature's vocabulary,
:mod:`distrain.datasets.tfrecord.analyze`, also in ``OUT/statistics.json``). Validation is
held out of the training files by a hash of (file name, record number); without test files
the same share of them is held out as the test split too.
File-level problems (no features.json, a file that is not TFRecords) stop the job before
Beam starts, with an error naming the file; per-record problems go to the dead letters.
"""

from __future__ import annotations

import zlib
from dataclasses import asdict, dataclass
from pathlib import Path

import apache_beam as beam
import numpy as np

from distrain.datasets.tfrecord.analyze import AnalyzeTrain
from distrain.datasets.tfrecord.spec import (
    INT32_MAX,
    MAX_LABEL,
    SOURCES,
    FeatureSpec,
    SpecError,
    check_example,
    check_first_frame,
    count_frames,
    read_frames,
    reason_kind,
    source_files,
)
from distrain.preprocess.options import JobOptions, run_job
from distrain.preprocess.records import FRAME_BYTES
from distrain.preprocess.runners import job_pipeline
from distrain.preprocess.transforms import ByTag, CombineAll, SumStatsFn, validation_mask
from distrain.preprocess.writing import (
    WriteJsonLines,
    WriteOutputs,
    check_accounting,
    check_bad_ratio,
    list_shards,
    read_outputs,
    read_single_json,
    staged_output,
    write_metadata,
)

NAME = "tfrecord"
SPLITS = ("train", "validation", "test")
STATISTICS = "statistics.json"  # what AnalyzeTrain found, copied into metadata.json


@dataclass(frozen=True, kw_only=True)
class TfrecordPreprocessConfig(JobOptions):
    """Settings of the tfrecord preprocessing job.

    Attributes:
        input_dir: The folder of ``features.json`` and the ``train-*``/``test-*`` files.
        output_dir: Where TFRecords, dead letters and metadata go.
        validation_fraction: Share of the training records held out for validation (and,
            without test files, the same share again for test).
        seed: Seed of the split assignment.
        num_shards: TFRecord files per split; 0 (default): one file per batch and split,
            written where the batch is checked (files of about ``range_mb`` times the
            split's share).
        batch_size: Records per batch (the unit of work: checked and written as one
            element); 0 (default): batches of about ``range_mb`` megabytes of records.
        range_mb: Megabytes of records (framed, as they are written) per batch when
            ``batch_size`` is 0. A batch's memory is bounded by this; object stores read
            few large files far faster than many small ones.
        max_bad_ratio: Largest share of rejected records before the job fails (1 %).
        max_label: Without ``class_names`` in features.json, labels must lie in ``0 ..
            max_label - 1``; a record with a larger one is a dead letter naming it. The
            class count (and metadata.json's histogram) follows the largest label, so
            this bounds them whatever the data (at most 2**31: labels are int32).
        vocabulary_size: The most tokens a bytes feature's vocabulary keeps (the most
            frequent in the training split; ties by the token's UTF-8 bytes, ascending).
        max_token_bytes: Longer tokens (UTF-8 bytes) are left out of the vocabulary and
            counted; with ``vocabulary_size`` it bounds what metadata.json holds.
        overwrite: Replace an output folder that holds files (else it is refused).
    """

    max_bad_ratio: float = 0.01  # as DBPedia's: the user's data may hold a few bad records
    seed: int = 0
    batch_size: int = 0
    max_label: int = MAX_LABEL
    vocabulary_size: int = 10_000
    max_token_bytes: int = 100

    records_field = "batch_size"

    def __post_init__(self) -> None:
        super().__post_init__()
        if not 1 <= self.max_label <= INT32_MAX + 1:
            raise ValueError(
                f"max_label must be in 1..{INT32_MAX + 1} (labels are int32), got {self.max_label}"
            )
        if self.vocabulary_size < 1 or self.max_token_bytes < 1:
            raise ValueError(
                "vocabulary_size and max_token_bytes must be positive, got "
                f"{self.vocabulary_size} and {self.max_token_bytes}"
            )


class ReadRecordBatches(beam.DoFn):
    """Reads one raw file: ``(source, file, first record number, [(data, crc ok)])`` batches.

    A batch holds ``batch_size`` records, or (``batch_size`` 0) as many as first reach
    ``range_bytes`` framed.
    """

    def __init__(self, batch_size: int, range_bytes: int):
        self.batch_size, self.range_bytes = batch_size, range_bytes

    def process(self, item):
        source, path = item
        batch, start, size = [], 1, 0
        for frame in read_frames(path):
            batch.append(frame)
            size += len(frame[0]) + FRAME_BYTES
            if len(batch) == self.batch_size or (not self.batch_size and size >= self.range_bytes):
                yield source, path, start, batch
                start, batch, size = start + len(batch), [], 0
        if batch:
            yield source, path, start, batch


def record_keys(path: str, numbers: np.ndarray) -> np.ndarray:
    """A record's key for the split hash: its file's name (crc32) and its number in it."""
    name = zlib.crc32(Path(path).name.encode("utf-8", "surrogatepass"))
    return (np.uint64(name) << np.uint64(32)) | numbers.astype(np.uint64)


class _CheckBatchFn(beam.DoFn):
    """Checks, splits and keeps one batch: ``(tag, value)`` pairs for :class:`ByTag`."""

    def __init__(
        self,
        spec: dict,
        seed: int,
        validation_fraction: float,
        test_from_train: bool,
        max_label: int = MAX_LABEL,
    ):
        self.spec, self.max_label = spec, max_label
        self.seed, self.fraction, self.test_from_train = seed, validation_fraction, test_from_train

    def setup(self):
        self._spec = FeatureSpec.from_dict(self.spec, "features.json")

    def process(self, batch):
        source, path, start, frames = batch
        numbers = np.arange(start, start + len(frames))
        if source == "train":
            keys = record_keys(path, numbers)
            held = validation_mask(keys, self.seed, self.fraction)
            targets = np.where(held, "validation", "train")
            if self.test_from_train:
                wider = validation_mask(keys, self.seed, 2 * self.fraction)
                targets = np.where(wider & (targets == "train"), "test", targets)
        else:
            targets = np.full(len(frames), source)
        name = Path(path).name
        stats: dict = {"by_file": {name: {"read": len(frames), "rejected": 0}}, "rejected": {}}
        kept: dict[str, list[bytes]] = {split: [] for split in SPLITS}
        labels: dict[str, dict] = {}
        regression = self._spec.label_dtype == "float32"
        for (data, crc_ok), number, split in zip(frames, numbers.tolist(), targets, strict=True):
            label, reason = (-1, "the record's checksum does not match its bytes")
            if crc_ok:
                label, reason = check_example(data, self._spec, self.max_label)
            if reason:
                kind = reason_kind(reason)  # counts stay few whatever the bad values
                stats["by_file"][name]["rejected"] += 1
                stats["rejected"][kind] = stats["rejected"].get(kind, 0) + 1
                yield "dead_letter", {"file": name, "record": number, "reason": reason}
                continue
            kept[str(split)].append(data)
            counts = labels.setdefault(str(split), {})
            if regression:  # a target value: summed, never counted by value
                for key, add in (("count", 1), ("sum", label), ("sum_squares", label * label)):
                    counts[key] = counts.get(key, 0) + add
            else:
                counts[str(label)] = counts.get(str(label), 0) + 1
        stats["target_sums" if regression else "labels"] = labels
        for split, records in kept.items():
            if records:
                yield split, ((name, start), records)
        yield "stats", stats


class CheckExamples(beam.PTransform):
    """Batches of raw records to the good records of each split, and the bad ones.

    Input: ``(source, file, first record number, [(data, checksum ok), ...])``. Output: a
    dict of PCollections: ``train``, ``validation``, ``test`` (batches ``((file, first
    number), [record, ...])``), ``dead_letter`` (``{"file", "record", "reason"}``) and
    ``stats`` (one dict: records read and rejected per file, rejects per reason (a
    label's reason without its value, :func:`reason_kind`), label counts per split, or
    for a float32 label its count, sum and sum of squares per split). A record with a NaN
    or infinite float value, or (without class_names) a label at or above ``max_label``,
    is a dead letter like any other.
    """

    def __init__(
        self,
        spec: FeatureSpec,
        seed: int,
        fraction: float,
        test_from_train: bool,
        max_label: int = MAX_LABEL,
    ):
        super().__init__()
        self.spec, self.max_label = spec.to_dict(), max_label
        self.seed, self.fraction, self.test_from_train = seed, fraction, test_from_train

    def expand(self, batches):
        check = _CheckBatchFn(
            self.spec, self.seed, self.fraction, self.test_from_train, self.max_label
        )
        outputs = (
            batches
            | "CheckBatches" >> beam.ParDo(check)
            | "ByTag" >> ByTag(*SPLITS, "dead_letter", "stats")
        )
        result = {name: outputs[name] for name in (*SPLITS, "dead_letter")}
        result["stats"] = outputs["stats"] | "SumStats" >> CombineAll(SumStatsFn())
        return result


def validate_inputs(input_dir: str) -> tuple[FeatureSpec, dict[str, list[tuple[str, int]]]]:
    """features.json and every raw file, before Beam starts: the spec and each file's count.

    The counts come from the files' framing alone (:func:`count_frames`), independent of
    the job's reader and of the Example parser.

    Raises:
        SpecError: features.json is missing or malformed, or there is no training file.
        TFRecordFramingError: A file is not a whole TFRecord file (named).
    """
    spec = FeatureSpec.load(input_dir)
    found = {source: source_files(input_dir, source) for source in SOURCES}
    if not found["train"]:
        raise SpecError(f"{input_dir}: no training files (train-*.tfrecord or train-*.tfrecord.gz)")
    counts = {}
    for source, paths in found.items():
        for path in paths:
            check_first_frame(path)
        counts[source] = [(str(path), count_frames(path)) for path in paths]
    return spec, counts


def _run_pipeline(cfg: TfrecordPreprocessConfig, spec, inputs, out: Path, beam_args) -> None:
    """The Beam job itself."""
    files = [(source, path) for source, items in inputs.items() for path, _ in items]
    with job_pipeline(beam_args) as pipeline:
        batches = (
            pipeline
            | "Files" >> beam.Create(files)
            | "Read" >> beam.ParDo(ReadRecordBatches(cfg.batch_size, int(cfg.range_mb * 2**20)))
            | "Spread" >> beam.Reshuffle()
        )
        result = batches | "Check" >> CheckExamples(
            spec, cfg.seed, cfg.validation_fraction, not inputs["test"], cfg.max_label
        )
        found = result["train"] | "Analyze" >> AnalyzeTrain(
            spec, cfg.vocabulary_size, cfg.max_token_bytes
        )
        # [analyzers] one small JSON document, listed in the manifest like every output
        written = found | "WriteStatistics" >> WriteJsonLines(
            str(out / STATISTICS), "", exact_name=True
        )
        _ = {**result, "statistics": written} | "WriteOutputs" >> WriteOutputs(
            out, SPLITS, cfg.num_shards, lambda d: (d["file"], d["record"])
        )


def preprocess_tfrecord(cfg: TfrecordPreprocessConfig, beam_args: list[str] | None = None) -> dict:
    """Runs the job and writes ``metadata.json``; returns the metadata.

    Raises:
        SpecError: features.json is missing or malformed, or no training file.
        TFRecordFramingError: A raw file is not a whole TFRecord file.
        BadRecordsError: Too many records were rejected (dead letters in OUT.failed).
        RecordAccountingError: Records read and records written or rejected differ.
        OutputExistsError: The output folder holds files and overwrite is off.
    """
    spec, inputs = validate_inputs(cfg.input_dir)
    if not inputs["test"] and cfg.validation_fraction >= 0.5:
        raise ValueError(
            f"{cfg.input_dir}: no test files, so validation and test are each held out of the "
            f"training files: validation_fraction must be below 0.5, got {cfg.validation_fraction}"
        )
    with staged_output(cfg.output_dir, cfg.overwrite) as out:
        _run_pipeline(cfg, spec, inputs, out, beam_args)
        metadata = _metadata(cfg, spec, inputs, out)
        write_metadata(out, metadata)
    return metadata


def _metadata(cfg: TfrecordPreprocessConfig, spec: FeatureSpec, inputs: dict, out: Path) -> dict:
    """The metadata of a finished job, once its counts agree; raises if they do not."""
    files, stats = read_outputs(out)
    by_file = stats.get("by_file", {})
    for _, items in inputs.items():
        for path, count in items:
            done = by_file.get(Path(path).name, {"read": 0, "rejected": 0})
            rejected = int(done["rejected"])
            check_accounting(path, count, int(done["read"]) - rejected, rejected)
    if spec.label_dtype == "float32":
        target = _target_summary(stats.get("target_sums", {}))
        counts = {split: target[split]["count"] for split in SPLITS}
        num_classes, label_info = 0, {"target_summary": target}
    else:
        labels = stats.get("labels", {})
        seen = [int(label) for counts in labels.values() for label in counts]
        num_classes = len(spec.class_names) or (max(seen) + 1 if seen else 0)
        histogram = {
            split: [int(labels.get(split, {}).get(str(c), 0)) for c in range(num_classes)]
            for split in SPLITS
        }
        counts = {split: sum(h) for split, h in histogram.items()}
        label_info = {"class_histogram": histogram}
    rejected = int(sum(stats.get("rejected", {}).values()))
    total_in = sum(count for items in inputs.values() for _, count in items)
    check_bad_ratio(cfg.input_dir, total_in, rejected, cfg.max_bad_ratio, cfg.output_dir)
    return {
        "dataset": NAME,
        "num_classes": num_classes,
        "class_names": list(spec.class_names) or [str(c) for c in range(num_classes)],
        "splits": counts,
        **label_info,
        "input_records": {Path(p).name: n for items in inputs.values() for p, n in items},
        "rejected": {"count": rejected, "reasons": stats.get("rejected", {})},
        "files": {s: f"{s}/part-*.tfrecord" for s in SPLITS},
        "shards": list_shards(files, "", counts),
        "dead_letter": "dead_letter/part-*.jsonl",
        "features": {n: f.to_dict() for n, f in spec.features.items()},
        "label": spec.label,
        "label_dtype": spec.label_dtype,
        "feature_spec": spec.to_dict(),
        "test_from_train": not inputs["test"],
        **read_single_json(str(out / STATISTICS)),  # statistics and vocabularies
        "config": asdict(cfg),
    }


def _target_summary(sums: dict) -> dict:
    """A float label's count, mean and standard deviation per split, from the job's sums."""
    out = {}
    for split in SPLITS:
        own = sums.get(split, {})
        n = int(own.get("count", 0))
        mean = own.get("sum", 0.0) / n if n else None
        variance = max(own.get("sum_squares", 0.0) / n - mean * mean, 0.0) if n else None
        out[split] = {"count": n, "mean": mean, "std": variance**0.5 if n else None}
    return out


def run(argv: list[str] | None = None) -> dict:
    """Command-line entry: every config field as an option, then any Beam options."""
    return run_job(TfrecordPreprocessConfig, preprocess_tfrecord, argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    run()
