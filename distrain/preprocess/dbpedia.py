"""Beam preprocessing of DBPedia-14 (the ``dbpedia_csv`` layout) for bag-of-n-grams models.

    python -m distrain.preprocess.dbpedia --input-dir RAW --output-dir OUT [beam options]

Rows ``class_index,"title","abstract"`` are parsed with RFC 4180 quoting (commas, quotes
and line breaks inside fields). A malformed row (wrong column count, class index not a
number or outside classes.txt, empty text, bytes that are not UTF-8) goes to the
dead-letter output with its file, line and reason; input rows = good + rejected is
checked and written to the metadata, and above ``max_bad_ratio`` the job fails.
The vocabulary (unigrams and word bigrams, min count, top-K) is built from the training
split only, with Beam combiners. Output: TFRecords of ``tokens`` (int64 ids: unigrams, then
bigrams; 0 is padding, 1 out-of-vocabulary) and ``label`` (0-based), ``vocab.txt`` and
``metadata.json``.
"""

from __future__ import annotations

import csv
import io
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import apache_beam as beam
import numpy as np

from distrain.preprocess.common import (
    WriteJsonLines,
    WriteTFRecordBatches,
    check_bad_ratio,
    check_fraction,
    pipeline_options,
    read_single_json,
    run_job,
    validation_mask,
    write_metadata,
)

SPLITS = ("train", "validation", "test")
PAD, OOV = 0, 1
_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")


class DbpediaFormatError(ValueError):
    """A file of the dbpedia_csv layout is missing or unusable as a whole."""


@dataclass(frozen=True)
class DbpediaPreprocessConfig:
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
        num_shards: TFRecord files per split; 0 (default): one file per batch, written
            where the batch is made, with no shuffle of the records.
        max_bad_ratio: Largest share of rejected rows before the job fails.
    """

    input_dir: str
    output_dir: str
    validation_fraction: float = 0.1
    seed: int = 0
    min_count: int = 2
    max_unigrams: int = 50_000
    max_bigrams: int = 100_000
    max_tokens: int = 400
    num_shards: int = 0
    max_bad_ratio: float = 0.01

    def __post_init__(self) -> None:
        check_fraction("validation_fraction", self.validation_fraction, high_open=True)
        check_fraction("max_bad_ratio", self.max_bad_ratio)
        if self.min_count < 1 or self.max_unigrams < 1 or self.max_tokens < 1:
            raise ValueError("min_count, max_unigrams and max_tokens must be positive")


def tokenize(text: str) -> list[str]:
    """Lower-cased word tokens (letters and digits, with an inner apostrophe)."""
    return _TOKEN.findall(text.lower())


def ngrams(tokens: list[str], with_bigrams: bool = True) -> tuple[list[str], list[str]]:
    """Unigrams and word bigrams (``a b``) of a token list."""
    bigrams = [f"{a} {b}" for a, b in zip(tokens, tokens[1:], strict=False)] if with_bigrams else []
    return tokens, bigrams


def read_classes(input_dir: str | os.PathLike) -> list[str]:
    """The class names of ``classes.txt``, in order.

    Raises:
        DbpediaFormatError: The file is missing, empty or has blank or duplicate names.
    """
    path = Path(input_dir) / "classes.txt"
    if not path.exists():
        raise DbpediaFormatError(f"{path}: file not found (the dbpedia_csv layout needs it)")
    names = path.read_text(encoding="utf-8").splitlines()
    while names and not names[-1].strip():
        names.pop()
    if not names:
        raise DbpediaFormatError(f"{path}: no class names")
    for i, name in enumerate(names, 1):
        if not name.strip():
            raise DbpediaFormatError(f"{path}: line {i} is blank; expected a class name")
    if len(set(names)) != len(names):
        raise DbpediaFormatError(f"{path}: duplicate class names")
    return [n.strip() for n in names]


def parse_csv(path: str, data: bytes, num_classes: int):
    """Parses one dbpedia_csv file into good rows and rejects.

    Args:
        path: The file's name (for messages).
        data: Its bytes.
        num_classes: Classes in classes.txt (indices are 1-based).

    Yields:
        ``("ok", line, label0, text)`` or ``("bad", line, raw, reason)``.
    """
    text = data.decode("utf-8", errors="surrogateescape")
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    line = 1
    while True:
        start = line
        try:
            row = next(reader)
        except StopIteration:
            return
        except csv.Error as err:
            # An unbalanced quote swallows the rest of the file: reject it, say where.
            yield (
                "bad",
                start,
                text.splitlines()[start - 1][:500] if text else "",
                (f"malformed CSV ({err})"),
            )
            return
        line = reader.line_num + 1
        raw = ",".join(row)
        if any("\udc80" <= ch <= "\udcff" for ch in raw):
            yield (
                "bad",
                start,
                raw.encode("utf-8", "surrogateescape").decode("latin-1"),
                ("bytes that are not UTF-8"),
            )
            continue
        if len(row) != 3:
            yield "bad", start, raw, f"expected 3 columns, found {len(row)}"
            continue
        index, title, abstract = row
        if not re.fullmatch(r"\s*\d+\s*", index):
            yield "bad", start, raw, f"class index {index!r} is not a number"
            continue
        label = int(index)
        if not 1 <= label <= num_classes:
            yield "bad", start, raw, f"class index {label} outside 1..{num_classes}"
            continue
        body = f"{title.strip()} {abstract.strip()}".strip()
        if not tokenize(body):
            yield "bad", start, raw, "empty text"
            continue
        yield "ok", start, label - 1, body


class ParseCsvFile(beam.DoFn):
    """Reads one CSV file of the layout; emits good rows in batches and rejects one by one.

    Main output: ``(source, [(line, label, text), ...])`` batches. Tagged ``dead_letter``:
    ``{"file", "line", "raw", "reason"}``. Tagged ``stats``: rows read per source.
    """

    def __init__(self, input_dir: str, num_classes: int, batch_size: int = 512):
        self.input_dir = input_dir
        self.num_classes = num_classes
        self.batch_size = batch_size

    def process(self, source: str):
        path = os.path.join(self.input_dir, f"{source}.csv")
        with open(path, "rb") as f:
            data = f.read()
        batch, rows = [], 0
        for kind, line, a, b in parse_csv(path, data, self.num_classes):
            rows += 1
            if kind == "bad":
                yield beam.pvalue.TaggedOutput(
                    "dead_letter", {"file": path, "line": line, "raw": a, "reason": b}
                )
                continue
            batch.append((line, a, b))
            if len(batch) == self.batch_size:
                yield source, batch
                batch = []
        if batch:
            yield source, batch
        yield beam.pvalue.TaggedOutput("stats", {"input": {source: rows}})


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


class _CountNgrams(beam.CombineFn):
    """Counts unigrams and bigrams over batches of training rows."""

    def __init__(self, with_bigrams: bool):
        self.with_bigrams = with_bigrams

    def create_accumulator(self):
        return Counter(), Counter()

    def add_input(self, acc, rows):
        uni, bi = acc
        for _, _, text in rows:
            u, b = ngrams(tokenize(text), self.with_bigrams)
            uni.update(u)
            bi.update(b)
        return acc

    def merge_accumulators(self, accumulators):
        uni, bi = Counter(), Counter()
        for u, b in accumulators:
            uni.update(u)
            bi.update(b)
        return uni, bi

    def extract_output(self, acc):
        return acc


def build_vocabulary(counts, min_count: int, max_unigrams: int, max_bigrams: int) -> list[str]:
    """Vocabulary list: ``<pad>``, ``<oov>``, then unigrams and bigrams by frequency."""
    uni, bi = counts

    def top(counter, k):
        kept = [(w, c) for w, c in counter.items() if c >= min_count]
        kept.sort(key=lambda wc: (-wc[1], wc[0]))
        return [w for w, _ in kept[:k]]

    return ["<pad>", "<oov>", *top(uni, max_unigrams), *top(bi, max_bigrams)]


def encode(text: str, index: dict[str, int], max_tokens: int, with_bigrams: bool) -> list[int]:
    """Token ids of a text: unigrams (OOV as 1), then known bigrams; at most max_tokens."""
    uni, bi = ngrams(tokenize(text), with_bigrams)
    ids = [index.get(w, OOV) for w in uni] + [index[b] for b in bi if b in index]
    return ids[:max_tokens]


class EncodeText(beam.PTransform):
    """Rows split by name to serialised ``tf.train.Example`` per split, given a vocabulary.

    Input: batches ``(split, [(line, label, text), ...])``; side input: the vocabulary list.
    Output: a dict of PCollections per split of batches ``((split, first_line), [record,
    ...])`` (one Beam element per batch, not per row), plus ``histogram`` (class counts per
    split, one dict per batch).
    """

    def __init__(self, vocabulary, num_classes: int, max_tokens: int, with_bigrams: bool):
        super().__init__()
        self.vocabulary = vocabulary
        self.num_classes = num_classes
        self.max_tokens = max_tokens
        self.with_bigrams = with_bigrams

    def expand(self, rows):
        max_tokens, with_bigrams, k = self.max_tokens, self.with_bigrams, self.num_classes

        class _Encode(beam.DoFn):
            def setup(self):
                from tensorflow.core.example import example_pb2

                self._example = example_pb2.Example
                self._index = None

            def process(self, item, vocabulary):
                if self._index is None:
                    self._index = {w: i for i, w in enumerate(vocabulary)}
                split, batch = item
                records, histogram = [], [0] * k
                for _, label, text in batch:
                    example = self._example()
                    feature = example.features.feature
                    feature["tokens"].int64_list.value.extend(
                        encode(text, self._index, max_tokens, with_bigrams)
                    )
                    feature["label"].int64_list.value.append(label)
                    records.append(example.SerializeToString())
                    histogram[label] += 1
                yield beam.pvalue.TaggedOutput(split, ((split, batch[0][0]), records))
                yield beam.pvalue.TaggedOutput("histogram", {"histogram": {split: histogram}})

        out = rows | "Encode" >> beam.ParDo(
            _Encode(), beam.pvalue.AsSingleton(self.vocabulary)
        ).with_outputs(*SPLITS, "histogram")
        result = {s: out[s] for s in SPLITS}
        result["histogram"] = out.histogram
        return result


def preprocess_dbpedia(config: DbpediaPreprocessConfig, beam_args: list[str] | None = None) -> dict:
    """Runs the preprocessing job and writes ``vocab.txt`` and ``metadata.json``.

    Raises:
        DbpediaFormatError: classes.txt or a CSV file is missing or empty.
        BadRecordsError: Too many rows were rejected (after writing them out).
    """
    from distrain.preprocess.common import SumStatsFn

    classes = read_classes(config.input_dir)
    for source in ("train", "test"):
        path = Path(config.input_dir) / f"{source}.csv"
        if not path.exists():
            raise DbpediaFormatError(f"{path}: file not found")
        if path.stat().st_size == 0:
            raise DbpediaFormatError(f"{path}: empty split (no rows)")
    out = Path(config.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    with_bigrams = config.max_bigrams > 0
    with beam.Pipeline(options=pipeline_options(beam_args)) as pipeline:
        parsed = (
            pipeline
            | "Sources" >> beam.Create(["train", "test"])
            | "ParseCsv"
            >> beam.ParDo(ParseCsvFile(config.input_dir, len(classes))).with_outputs(
                "dead_letter", "stats", main="rows"
            )
        )
        rows = (
            parsed.rows
            | "Spread" >> beam.Reshuffle()
            | "AssignSplit" >> beam.FlatMap(_split_batch, config.seed, config.validation_fraction)
        )
        vocabulary = (
            rows
            | "TrainOnly" >> beam.Filter(lambda item: item[0] == "train")
            | "Rows" >> beam.Map(lambda item: item[1])
            | "CountNgrams" >> beam.CombineGlobally(_CountNgrams(with_bigrams))
            | "Vocabulary"
            >> beam.Map(build_vocabulary, config.min_count, config.max_unigrams, config.max_bigrams)
        )
        encoded = rows | "ToExamples" >> EncodeText(
            vocabulary, len(classes), config.max_tokens, with_bigrams
        )
        for split in SPLITS:
            _ = encoded[split] | f"Write{split.title()}" >> WriteTFRecordBatches(
                str(out / split / "part"), config.num_shards
            )
        _ = (
            vocabulary
            | "VocabLines" >> beam.FlatMap(lambda v: v)
            | "WriteVocab"
            >> beam.io.WriteToText(
                str(out / "vocab"), file_name_suffix=".txt", num_shards=1, shard_name_template=""
            )
        )
        _ = parsed.dead_letter | "WriteDeadLetter" >> WriteJsonLines(
            str(out / "dead_letter" / "part")
        )
        reasons = parsed.dead_letter | "Reasons" >> beam.Map(
            lambda d: {"rejected": {d["reason"].split(" (")[0]: 1}}
        )
        _ = (
            (parsed.stats, encoded["histogram"], reasons)
            | "AllStats" >> beam.Flatten()
            | "SumStats" >> beam.CombineGlobally(SumStatsFn())
            | "WriteStats" >> WriteJsonLines(str(out / "stats"), ".json", exact_name=True)
        )
    stats = read_single_json(str(out / "stats.json"))
    (out / "stats.json").unlink()
    k = len(classes)
    histogram = {s: stats.get("histogram", {}).get(s, [0] * k) for s in SPLITS}
    counts = {s: int(sum(h)) for s, h in histogram.items()}
    input_rows = {s: int(stats.get("input", {}).get(s, 0)) for s in ("train", "test")}
    rejected = int(sum(stats.get("rejected", {}).values()))
    total = sum(input_rows.values())
    if total != sum(counts.values()) + rejected:
        raise RuntimeError(
            f"row accounting failed: {total} read, {sum(counts.values())} written, "
            f"{rejected} rejected"
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
        "rejected": {"count": rejected, "reasons": stats.get("rejected", {})},
        "vocab_size": vocab_size,
        "vocab_file": "vocab.txt",
        "max_tokens": config.max_tokens,
        "files": {s: f"{s}/part-*.tfrecord" for s in SPLITS},
        "dead_letter": "dead_letter/part-*.jsonl",
        "feature_spec": {"tokens": "int64 list (0 pad, 1 oov)", "label": "int64 0-based"},
        "config": asdict(config),
    }
    write_metadata(out, metadata)
    check_bad_ratio(config.input_dir, total, rejected, config.max_bad_ratio)
    return metadata


def run(argv: list[str] | None = None) -> dict:
    """Command-line entry: every config field as an option, then any Beam options."""
    return run_job(DbpediaPreprocessConfig, preprocess_dbpedia, argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    run()
