"""Beam preprocessing of DBPedia-14 (the ``dbpedia_csv`` layout) for bag-of-n-grams models.

    python -m distrain.datasets.dbpedia.beam --input-dir RAW --output-dir OUT [beam options]

Rows ``class_index,"title","abstract"`` are parsed (:mod:`.rows`) with RFC 4180 quoting
(commas, quotes and line breaks inside fields). A malformed row (wrong column count,
class index not a number or outside classes.txt, empty text, bytes that are not UTF-8)
goes to the dead-letter output with its file, line and reason; input rows = good + rejected is
checked and written to the metadata, and above ``max_bad_ratio`` the job fails.
The vocabulary (unigrams and word bigrams, min count, top-K) is built from the training
split only, with Beam combiners. Output: TFRecords of ``tokens`` (int64 ids: unigrams, then
bigrams; 0 is padding, 1 out-of-vocabulary) and ``label`` (0-based), ``vocab.txt`` and
``metadata.json``.
"""

from __future__ import annotations

import os
import zlib
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import apache_beam as beam
import numpy as np

from distrain.datasets.dbpedia.rows import (
    MAX_RECORD_BYTES,
    MAX_RECORD_LINES,
    DbpediaFormatError,
    ParseCsvRange,
    PlanCsvRanges,
    ngrams,
    read_classes,
    tokenize,
)
from distrain.preprocess.options import JobOptions, run_job
from distrain.preprocess.records import example, int64_feature, write_text
from distrain.preprocess.runners import job_pipeline
from distrain.preprocess.transforms import ByTag, CombineAll, validation_mask
from distrain.preprocess.writing import (
    WriteOutputs,
    check_accounting,
    check_bad_ratio,
    list_shards,
    read_outputs,
    staged_output,
    write_metadata,
)

SPLITS = ("train", "validation", "test")
PAD, OOV = 0, 1
COUNT_BATCH = 4096  # rows per element of the counting pass (its memory, not the output's)
VOCAB_BUCKETS = 32  # n-grams counted per bucket: a merge holds 1/32 of each range's counts


@dataclass(frozen=True, kw_only=True)
class DbpediaPreprocessConfig(JobOptions):
    """Settings of the DBPedia preprocessing job.

    Attributes:
        input_dir: Directory with classes.txt, train.csv and test.csv.
        output_dir: Where TFRecords, vocabulary, dead letters and metadata go.
        validation_fraction: Share of train.csv held out for validation.
        seed: Seed of the train/validation assignment.
        min_count: Least occurrences in the training split for a vocabulary entry.
        max_unigrams: Most unigrams kept (the most frequent).
        max_bigrams: Most word bigrams kept (0: unigrams only).
        max_tokens: Longest token sequence kept per example.
        num_shards: TFRecord files per split; 0 (default): one file per range of the
            CSV and split, written where the range is parsed, with no shuffle of the
            records (files of about ``range_mb`` times the split's share, tens of MB).
        max_bad_ratio: Largest share of rejected rows before the job fails.
        rows_per_range: CSV rows per unit of parallel parsing (a file is cut into
            ranges of whole rows; workers read their ranges themselves); 0 (default):
            ranges of about ``range_mb`` megabytes instead.
        range_mb: Megabytes of CSV per range when ``rows_per_range`` is 0. A range is
            parsed and encoded as one element (its memory is bounded by this, not by the
            input's size) and written as one file per split: object stores read few
            large files far faster than many small ones.
        max_record_lines: A record whose quoted field is still open after this many
            lines is rejected, with every line up to the next line that starts a row.
        max_record_bytes: The same bound in bytes.
        overwrite: Replace an output folder that holds files (else it is refused).
    """

    max_bad_ratio: float = 0.01
    seed: int = 0
    min_count: int = 2
    max_unigrams: int = 50_000
    max_bigrams: int = 100_000
    max_tokens: int = 400
    rows_per_range: int = 0
    max_record_lines: int = MAX_RECORD_LINES
    max_record_bytes: int = MAX_RECORD_BYTES

    records_field = "rows_per_range"

    def __post_init__(self) -> None:
        super().__post_init__()
        positive = (
            self.min_count,
            self.max_unigrams,
            self.max_tokens,
            self.max_record_lines,
            self.max_record_bytes,
        )
        if min(positive) < 1:
            raise ValueError(
                "min_count, max_unigrams, max_tokens, max_record_lines and "
                "max_record_bytes must be positive"
            )

    @property
    def range_bytes(self) -> int:
        """Bytes of CSV per range when ranges are cut by size (``rows_per_range`` 0)."""
        return 0 if self.rows_per_range else max(1, int(self.range_mb * 2**20))


def _split_batch(batch, seed: int, fraction: float):
    """A source batch to one batch per split: ``(split, [(line, label, text), ...])``."""
    source, rows = batch
    if source != "train":
        yield "test", rows
        return
    to_val = validation_mask(np.array([r[0] for r in rows]), seed, fraction)
    for split, chosen in (("train", ~to_val), ("validation", to_val)):
        part = [row for row, keep in zip(rows, chosen, strict=True) if keep]
        if part:
            yield split, part


def ngram_bucket(gram: str, buckets: int) -> int:
    """The counting bucket of an n-gram: a stable hash, the same in every worker process."""
    return zlib.crc32(gram.encode("utf-8", "surrogatepass")) % buckets


class _CountByBucket(beam.DoFn):
    """A batch of training rows to its n-gram counts, ``(bucket, (unigrams, bigrams))``.

    The counts are keyed by bucket so that a bucket's merge holds its share of every
    range's counts, not all of them: the local runner gives a merge all its inputs at
    once, one accumulator per bundle, and a bundle a range.
    """

    def __init__(self, with_bigrams: bool, buckets: int):
        self.with_bigrams, self.buckets = with_bigrams, buckets

    def process(self, rows):
        counts = Counter(), Counter()
        for _, _, text in rows:
            unigrams, bigrams = ngrams(tokenize(text), self.with_bigrams)
            counts[0].update(unigrams)
            counts[1].update(bigrams)
        parts = [(Counter(), Counter()) for _ in range(self.buckets)]
        for kind, counter in enumerate(counts):
            for gram, count in counter.items():
                parts[ngram_bucket(gram, self.buckets)][kind][gram] = count
        for bucket, part in enumerate(parts):
            if part[0] or part[1]:
                yield bucket, part


class _MergeCounts(beam.CombineFn):
    """Sums ``(unigrams, bigrams)`` counters."""

    def create_accumulator(self):
        return Counter(), Counter()

    def add_input(self, acc, counts):
        acc[0].update(counts[0])
        acc[1].update(counts[1])
        return acc

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for acc in accumulators:
            self.add_input(merged, acc)
        return merged

    def extract_output(self, acc):
        return acc


def top_ngrams(counts, min_count: int, k: int) -> list[tuple[str, int]]:
    """The ``k`` most frequent of ``(n-gram, count)`` pairs seen ``min_count`` times or more.

    Ties go by the n-gram, so that the top of a union is the top of its parts' tops.
    """
    kept = [(w, c) for w, c in counts if c >= min_count]
    kept.sort(key=lambda wc: (-wc[1], wc[0]))
    return kept[:k]


class _MergeTops(beam.CombineFn):
    """The buckets' top unigrams and bigrams to the overall top of each.

    Exact: a bucket's top holds every n-gram of the overall top that falls in it.
    """

    def __init__(self, max_unigrams: int, max_bigrams: int):
        self.limits = (max_unigrams, max_bigrams)

    def create_accumulator(self):
        return [], []

    def add_input(self, acc, tops):
        return tuple(
            top_ngrams([*mine, *theirs], 1, k)
            for mine, theirs, k in zip(acc, tops, self.limits, strict=True)
        )

    def merge_accumulators(self, accumulators):
        merged = self.create_accumulator()
        for acc in accumulators:
            merged = self.add_input(merged, acc)
        return merged

    def extract_output(self, acc):
        return acc


def build_vocabulary(counts, min_count: int, max_unigrams: int, max_bigrams: int) -> list[str]:
    """Vocabulary list: ``<pad>``, ``<oov>``, then unigrams and bigrams by frequency.

    ``counts``: the unigram and bigram counts, each a mapping or ``(n-gram, count)`` pairs.
    """
    uni, bi = (c.items() if hasattr(c, "items") else c for c in counts)
    words = [w for w, _ in top_ngrams(uni, min_count, max_unigrams)]
    words += [w for w, _ in top_ngrams(bi, min_count, max_bigrams)]
    return ["<pad>", "<oov>", *words]


def encode(text: str, index: dict[str, int], max_tokens: int, with_bigrams: bool) -> list[int]:
    """Token ids of a text: unigrams (OOV as 1), then known bigrams; at most max_tokens."""
    uni, bi = ngrams(tokenize(text), with_bigrams)
    ids = [index.get(w, OOV) for w in uni] + [index[b] for b in bi if b in index]
    return ids[:max_tokens]


def text_example(ids: list[int], label: int) -> bytes:
    """One serialised DBPedia example: ``tokens`` (int64 ids) and ``label`` (int64)."""
    return example({"tokens": int64_feature(ids), "label": int64_feature((label,))})


class _Encoder:
    """Encodes batches of rows with the vocabulary (built on first use, once per worker)."""

    def __init__(self, num_classes: int, max_tokens: int, with_bigrams: bool):
        self.num_classes, self.max_tokens, self.with_bigrams = num_classes, max_tokens, with_bigrams
        self._index = None

    def __call__(self, split: str, batch, vocabulary: str):
        """``(split, ((split, first_line), [record, ...]))``, then ``("histogram", {...})``."""
        if self._index is None:
            self._index = {w: i for i, w in enumerate(vocabulary.removesuffix("\n").split("\n"))}
        records, histogram = [], [0] * self.num_classes
        for _, label, text in batch:
            ids = encode(text, self._index, self.max_tokens, self.with_bigrams)
            records.append(text_example(ids, label))
            histogram[label] += 1
        yield split, ((split, batch[0][0]), records)
        yield "histogram", {"histogram": {split: histogram}}


class _EncodeDoFn(beam.DoFn):
    """:class:`EncodeText`'s DoFn: encodes a batch of rows, or parses a range first."""

    def __init__(self, encoder: _Encoder, parse, seed: int, validation_fraction: float):
        self.encoder, self.parse = encoder, parse
        self.seed, self.validation_fraction = seed, validation_fraction

    def process(self, item, vocabulary):
        if self.parse is None:
            yield from self.encoder(*item, vocabulary)
            return
        for _, source_rows in self.parse.process(item):
            for split, batch in _split_batch(source_rows, self.seed, self.validation_fraction):
                yield from self.encoder(split, batch, vocabulary)


class EncodeText(beam.PTransform):
    """Rows split by name to serialised ``tf.train.Example`` per split, given a vocabulary.

    Input: batches ``(split, [(line, label, text), ...])``, or, with ``parse``, ranges of
    the CSV files (:class:`~distrain.datasets.dbpedia.rows.PlanCsvRanges`), each parsed
    (``parse``: a :class:`~distrain.datasets.dbpedia.rows.ParseCsvRange` with
    ``rows_only``), split (``seed``, ``validation_fraction``) and encoded in one DoFn call,
    so that no row leaves the call: the local runner holds a stage's whole input in memory,
    and the stage that waits for the vocabulary then holds only the ranges, not the rows.
    Side input: the vocabulary as one string, an entry per line (``vocab.txt``).
    Output: a dict of PCollections per split of batches ``((split, first_line), [record,
    ...])`` (one Beam element per batch, not per row), plus ``histogram`` (class counts per
    split, one dict per batch).
    """

    def __init__(
        self,
        vocabulary,
        num_classes: int,
        max_tokens: int,
        with_bigrams: bool,
        parse: ParseCsvRange | None = None,
        seed: int = 0,
        validation_fraction: float = 0.0,
    ):
        super().__init__()
        self.vocabulary = vocabulary
        self.encoder = _Encoder(num_classes, max_tokens, with_bigrams)
        self.parse, self.seed, self.validation_fraction = parse, seed, validation_fraction

    def expand(self, items):
        encode = _EncodeDoFn(self.encoder, self.parse, self.seed, self.validation_fraction)
        return (
            items
            | "Encode" >> beam.ParDo(encode, beam.pvalue.AsSingleton(self.vocabulary))
            | "ByTag" >> ByTag(*SPLITS, "histogram")
        )


def preprocess_dbpedia(config: DbpediaPreprocessConfig, beam_args: list[str] | None = None) -> dict:
    """Runs the preprocessing job and writes ``vocab.txt`` and ``metadata.json``.

    Raises:
        DbpediaFormatError: classes.txt or a CSV file is missing or empty.
        BadRecordsError: Too many lines were rejected (dead letters left in OUT.failed).
        RecordAccountingError: The lines of a file are not all in good rows or rejects.
        OutputExistsError: The output folder holds files and overwrite is off.
    """
    classes = read_classes(config.input_dir)
    for source in ("train", "test"):
        path = Path(config.input_dir) / f"{source}.csv"
        if not path.exists():
            raise DbpediaFormatError(f"{path}: file not found")
        if path.stat().st_size == 0:
            raise DbpediaFormatError(f"{path}: empty split (no rows)")
    with staged_output(config.output_dir, config.overwrite) as out:
        _run_pipeline(config, classes, out, beam_args)
        metadata = _metadata(config, classes, out)
        write_metadata(out, metadata)
    return metadata


def _run_pipeline(config: DbpediaPreprocessConfig, classes: list[str], out: Path, beam_args):
    """The Beam job itself, writing into ``out``."""
    with_bigrams = config.max_bigrams > 0
    with job_pipeline(beam_args) as pipeline:
        planned = (
            pipeline
            | "Sources" >> beam.Create(["train", "test"])
            | "PlanRanges"
            >> beam.ParDo(
                PlanCsvRanges(
                    config.input_dir,
                    config.rows_per_range,
                    config.max_record_lines,
                    config.max_record_bytes,
                    config.range_bytes,
                )
            )
            | "PlanByTag" >> ByTag("ranges", "stats")
        )
        # Two passes over the ranges, as an analyze-then-transform job does: the first
        # counts n-grams (combined, never collected) and finds the rejects, the second
        # parses each range again and encodes it with the vocabulary. Rows never wait for
        # the vocabulary: a runner holds what waits for a side input, all of it.
        ranges = planned["ranges"] | "Spread" >> beam.Reshuffle()
        parse = dict(max_lines=config.max_record_lines, max_bytes=config.max_record_bytes)
        parsed = (
            ranges
            | "ParseCsv" >> beam.ParDo(ParseCsvRange(len(classes), COUNT_BATCH, **parse))
            | "ParseByTag" >> ByTag("rows", "dead_letter", "stats")
        )
        vocabulary = (
            parsed["rows"]
            | "AssignSplit" >> beam.FlatMap(_split_batch, config.seed, config.validation_fraction)
            | "TrainOnly" >> beam.Filter(lambda item: item[0] == "train")
            | "Rows" >> beam.Map(lambda item: item[1])
            | "CountByBucket" >> beam.ParDo(_CountByBucket(with_bigrams, VOCAB_BUCKETS))
            | "MergeCounts" >> beam.CombinePerKey(_MergeCounts())
            | "TopOfBucket"
            >> beam.Map(
                lambda kv, n, k1, k2: (
                    top_ngrams(kv[1][0].items(), n, k1),
                    top_ngrams(kv[1][1].items(), n, k2),
                ),
                config.min_count,
                config.max_unigrams,
                config.max_bigrams,
            )
            | "TopOverall" >> CombineAll(_MergeTops(config.max_unigrams, config.max_bigrams))
            | "Vocabulary" >> beam.Map(build_vocabulary, 1, config.max_unigrams, config.max_bigrams)
            # One string, not a list: a side input is decoded (and sized) per bundle, and
            # a string of 150k words costs one copy where a list costs 150k objects.
            | "VocabText" >> beam.Map(lambda words: "\n".join(words) + "\n")
        )
        # The second pass parses, splits and encodes a range in one call: what waits for
        # the vocabulary is the ranges, not their rows (4x the input in memory before).
        encoded = ranges | "ToExamples" >> EncodeText(
            vocabulary,
            len(classes),
            config.max_tokens,
            with_bigrams,
            parse=ParseCsvRange(len(classes), rows_only=True, **parse),
            seed=config.seed,
            validation_fraction=config.validation_fraction,
        )
        reasons = parsed["dead_letter"] | "Reasons" >> beam.Map(
            lambda d: {
                "rejected": {d["reason"].split(" (")[0].split(":")[0]: d["lines"]},
                "rejected_by_source": {
                    os.path.basename(d["file"]).removesuffix(".csv"): d["lines"]
                },
            }
        )
        outputs = {
            **{split: encoded[split] for split in SPLITS},
            "dead_letter": parsed["dead_letter"],
            "stats": (planned["stats"], parsed["stats"], encoded["histogram"], reasons)
            | "AllStats" >> beam.Flatten(),
            "vocabulary": vocabulary | "WriteVocab" >> beam.Map(write_text, str(out / "vocab.txt")),
        }
        _ = outputs | "WriteOutputs" >> WriteOutputs(
            out, SPLITS, config.num_shards, lambda d: (d["file"], d["line"])
        )


def _metadata(config: DbpediaPreprocessConfig, classes: list[str], out: Path) -> dict:
    """The metadata of a finished job, once its counts agree; raises if they do not.

    The accounting is in lines of the files: each physical line (counted apart from the
    parser) is in a good row or rejected. A bad record of several lines (a quote left
    open) counts each of its lines, and so does the bad-record ratio.
    """
    files, stats = read_outputs(out)
    k = len(classes)
    histogram = {s: stats.get("histogram", {}).get(s, [0] * k) for s in SPLITS}
    counts = {s: int(sum(h)) for s, h in histogram.items()}
    # Records as the planner counted them in each file, not as the parser got to them.
    input_rows = {s: int(stats.get("input", {}).get(s, 0)) for s in ("train", "test")}
    input_lines = {s: int(stats.get("input_lines", {}).get(s, 0)) for s in ("train", "test")}
    good_lines = stats.get("good_lines", {})
    rejected_by = stats.get("rejected_by_source", {})
    for source in ("train", "test"):
        check_accounting(
            str(Path(config.input_dir) / f"{source}.csv"),
            input_lines[source],
            int(good_lines.get(source, 0)),
            int(rejected_by.get(source, 0)),
            unit="lines",
        )
    rejected = int(sum(stats.get("rejected", {}).values()))
    total = sum(input_lines.values())
    check_bad_ratio(
        config.input_dir, total, rejected, config.max_bad_ratio, config.output_dir, unit="lines"
    )
    vocab_size = sum(1 for _ in open(out / "vocab.txt", encoding="utf-8"))
    metadata = {
        "dataset": "dbpedia",
        "task": "classification",
        "num_classes": k,
        "class_names": classes,
        "splits": counts,
        "class_histogram": histogram,
        "input_records": input_rows,
        "input_lines": input_lines,
        "rejected": {"count": rejected, "reasons": stats.get("rejected", {})},
        "vocab_size": vocab_size,
        "vocab_file": "vocab.txt",
        "max_tokens": config.max_tokens,
        "files": {s: f"{s}/part-*.tfrecord" for s in SPLITS},
        "shards": list_shards(files, "", counts),
        "dead_letter": "dead_letter/part-*.jsonl",
        "feature_spec": {"tokens": "int64 list (0 pad, 1 oov)", "label": "int64 0-based"},
        "config": asdict(config),
    }
    return metadata


def run(argv: list[str] | None = None) -> dict:
    """Command-line entry: every config field as an option, then any Beam options."""
    return run_job(DbpediaPreprocessConfig, preprocess_dbpedia, argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    run()
