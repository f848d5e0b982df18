"""Beam preprocessing of Project Gutenberg books for character-level language models.

    python -m distrain.datasets.gutenberg.beam --input-dir BOOKS --output-dir OUT [beam options]

Each ``*.txt`` book is stripped of Gutenberg's header and footer (current and legacy
START/END markers); a book without markers, with an empty body or with binary content is
rejected with its reason and counted, never passed through whole. Newlines are
normalised. The last ``validation_fraction`` of each book (contiguous, so no window
straddles the two) is validation. The character vocabulary comes from the training parts
only (id 0 is out-of-vocabulary). Windows of ``seq_len + 1`` characters with a ``stride``
become TFRecords of ``chars`` (int64); pairs of consecutive lines, both long enough, become
``pairs/`` TFRecords of ``source`` (the first line's end) and ``target`` (a line break and
the next line's start), for encoder-decoders; ``text/`` keeps each part's normalised text
for baselines and prompts; ``metadata.json`` has the counts, vocabulary and rejects.
"""

from __future__ import annotations

import codecs
import json
import os
import re
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path

import apache_beam as beam

from distrain.preprocess.options import JobOptions, check_fraction, run_job
from distrain.preprocess.records import example, int64_feature, records_per_file, write_text
from distrain.preprocess.runners import job_pipeline
from distrain.preprocess.transforms import ByTag, CombineAll
from distrain.preprocess.writing import (
    WriteJsonLines,
    WriteOutputs,
    batch_file_name,
    check_accounting,
    check_bad_ratio,
    list_shards,
    read_outputs,
    read_single_json,
    staged_output,
    write_metadata,
)

SPLITS = ("train", "validation")
OOV = 0
_START = re.compile(
    r"^\s*(?:\*\*\*\s*START OF (?:THE|THIS) PROJECT GUTENBERG E(?:BOOK|TEXT)[^\n]*?\*\*\*"
    r"|\*END\*THE SMALL PRINT![^\n]*)[^\n]*\n",
    re.IGNORECASE | re.MULTILINE,
)
_END = re.compile(
    r"^\s*(?:\*\*\*\s*END OF (?:THE|THIS) PROJECT GUTENBERG E(?:BOOK|TEXT)"
    r"|End of (?:the )?Project Gutenberg(?:'s)? (?:E(?:Book|Text)|Etext|\w))",
    re.IGNORECASE | re.MULTILINE,
)


class GutenbergFormatError(ValueError):
    """The input directory holds no book files."""


@dataclass(frozen=True, kw_only=True)
class GutenbergPreprocessConfig(JobOptions):
    """Settings of the Gutenberg preprocessing job.

    Attributes:
        input_dir: Directory of ``*.txt`` books.
        output_dir: Where TFRecords, text, dead letters and metadata go.
        seq_len: Characters of context per window (windows hold seq_len + 1).
        stride: Characters between window starts.
        validation_fraction: Share at the end of each book held out for validation.
        min_char_count: Least occurrences in the training text for a vocabulary entry.
        num_shards: TFRecord files per split; 0 (default): one file per group of books
            and split (windows, and pairs apart), written where the group is encoded,
            with no shuffle of the records.
        range_mb: Megabytes of window records per group of books: books are taken in
            name order, each whole, until their windows come to about this much (the
            estimate takes one byte per character id). A group's memory is bounded by
            this; object stores read few large files far faster than many small ones.
        max_bad_ratio: Largest share of rejected books before the job fails.
        source_len: Line pairs (the ``pairs`` view, for encoder-decoders): characters
            kept of the first line's end.
        target_len: Line pairs: characters of the next line's start to predict.
        overwrite: Replace an output folder that holds files (else it is refused).
    """

    max_bad_ratio: float = 0.5
    seq_len: int = 100
    stride: int = 50
    min_char_count: int = 1
    source_len: int = 48
    target_len: int = 32

    def __post_init__(self) -> None:
        if min(self.seq_len, self.stride, self.source_len, self.target_len) < 1:
            raise ValueError("seq_len, stride, source_len and target_len must be positive")
        check_fraction(
            "validation_fraction", self.validation_fraction, low_open=True, high_open=True
        )
        super().__post_init__()


def group_books(sizes: dict[str, int], config: GutenbergPreprocessConfig) -> list[list[str]]:
    """Books in name order cut into groups whose windows come to about ``range_mb``.

    A window of ``seq_len + 1`` one-byte ids starts every ``stride`` characters, so a
    book of ``n`` bytes makes about ``n / stride`` records of that size. A group is
    closed once it reaches ``range_mb``; a book is never cut.
    """
    record = window_example([1] * (config.seq_len + 1))
    per_group = records_per_file(int(config.range_mb * 2**20), record) * config.stride
    groups: list[list[str]] = [[]]
    held = 0
    for book in sorted(sizes):
        if held >= per_group:
            groups.append([])
            held = 0
        groups[-1].append(book)
        held += sizes[book]
    return groups


_UNICODE_BOMS = (
    (codecs.BOM_UTF32_LE, "utf-32"),
    (codecs.BOM_UTF32_BE, "utf-32"),
    (codecs.BOM_UTF16_LE, "utf-16"),
    (codecs.BOM_UTF16_BE, "utf-16"),
)


def decode_book(data: bytes) -> tuple[str | None, str]:
    """Text of a book file and its encoding, or ``(None, reason)`` for binary content.

    A UTF-16 or UTF-32 byte-order mark names the encoding (such files are full of NUL
    bytes, which otherwise mean binary content). Then UTF-8 (its byte-order mark
    dropped); a file that is not UTF-8 is Latin-1 (older Gutenberg files), unless it
    also holds UTF-8 multi-byte sequences: then it has mixed encodings (pieces pasted
    together) and each line is decoded on its own, so that neither part turns into
    mojibake. The encoding returned is ``utf-16``, ``utf-32``, ``utf-8``, ``latin-1`` or
    ``mixed``.
    """
    for bom, encoding in _UNICODE_BOMS:
        if data.startswith(bom):
            try:
                text = data.decode(encoding)  # the codec reads and drops the mark
            except UnicodeDecodeError as err:
                return None, f"not {encoding.upper()} despite its byte-order mark ({err.reason})"
            if not text.strip():
                return None, "empty file"
            return text, encoding
    if not data.strip():
        return None, "empty file"
    if b"\x00" in data:
        return None, "binary file (NUL bytes)"
    try:
        return data.decode("utf-8-sig"), "utf-8"
    except UnicodeDecodeError:
        pass
    lines = data.splitlines(keepends=True)
    utf8_lines = 0
    decoded = []
    for line in lines:
        try:
            text = line.decode("utf-8")
            utf8_lines += any(b >= 0x80 for b in line)
        except UnicodeDecodeError:
            text = line.decode("latin-1")
        decoded.append(text)
    text = "".join(decoded)
    # Every byte decodes as Latin-1, so check it is text.
    controls = sum(1 for ch in text if ord(ch) < 32 and ch not in "\r\n\t\f")
    if controls > 0.01 * len(text):
        return None, "binary file (control bytes)"
    return text.lstrip("\ufeff"), "mixed" if utf8_lines else "latin-1"


def strip_gutenberg(text: str) -> tuple[str | None, str]:
    """The body between the START and END markers, newlines normalised.

    Returns:
        ``(body, "ok")``, or ``(None, reason)`` when a marker is missing or the body is empty.
    """
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    start = _START.search(text)
    if not start:
        return None, "no START marker"
    end = _END.search(text, start.end())
    if not end:
        return None, "no END marker"
    body = text[start.end() : end.start()].strip("\n")
    if not body.strip():
        return None, "empty body"
    return body + "\n", "ok"


def split_book(body: str, validation_fraction: float) -> dict[str, str]:
    """The first part of a book for training, the last part for validation."""
    cut = int(len(body) * (1.0 - validation_fraction))
    return {"train": body[:cut], "validation": body[cut:]}


def windows(ids: list[int], seq_len: int, stride: int) -> list[list[int]]:
    """Windows of ``seq_len + 1`` ids, starting every ``stride`` ids (none cut short)."""
    return [ids[s : s + seq_len + 1] for s in range(0, len(ids) - seq_len, stride)]


def line_pairs(text: str, source_len: int, target_len: int) -> list[tuple[str, str]]:
    """Consecutive lines as pairs for an encoder-decoder.

    Each pair ``(a, b)`` of lines both long enough becomes ``(a's last source_len
    characters, a line break and b's first target_len)``: none is padded or cut short.
    """
    lines = text.split("\n")
    return [
        (a[-source_len:], "\n" + b[:target_len])
        for a, b in zip(lines, lines[1:], strict=False)
        if len(a) >= source_len and len(b) >= target_len
    ]


def pair_example(source: list[int], target: list[int]) -> bytes:
    """One serialised line pair: ``source`` and ``target`` (int64 character ids)."""
    return example({"source": int64_feature(source), "target": int64_feature(target)})


def window_example(ids: list[int]) -> bytes:
    """One serialised Gutenberg example: ``chars`` (int64 character ids of a window)."""
    return example({"chars": int64_feature(ids)})


def build_char_vocabulary(counts: Counter, min_count: int) -> list[str]:
    """``<oov>`` then the characters seen at least ``min_count`` times, most frequent first."""
    kept = sorted((c for c, n in counts.items() if n >= min_count), key=lambda c: (-counts[c], c))
    return ["<oov>", *kept]


class ReadBook(beam.DoFn):
    """Reads a group of books (a list of paths) into ``(tag, value)`` pairs.

    Tags (separated by :class:`ByTag`): ``books`` (one list ``[(book, {split: text}),
    ...]`` of the group's accepted books, if any), ``dead_letter`` (a file and the reason
    it was rejected) and ``stats``.
    """

    def __init__(self, validation_fraction: float):
        self.validation_fraction = validation_fraction

    def process(self, paths: list[str]):
        accepted = []
        for path in paths:
            for tag, value in self._read(path):
                if tag == "books":
                    accepted.append(value)
                else:
                    yield tag, value
        if accepted:
            yield "books", accepted

    def _read(self, path: str):
        with open(path, "rb") as f:
            data = f.read()
        name = os.path.basename(path)
        text, encoding = decode_book(data)
        body, reason = (None, encoding) if text is None else strip_gutenberg(text)
        if body is None:
            yield "dead_letter", {"file": path, "reason": reason, "bytes": len(data)}
            yield (
                "stats",
                {"books": {"rejected": 1}, "rejected": {reason: 1}, "bytes_read": len(data)},
            )
            return
        yield (
            "stats",
            {"books": {"accepted": 1}, "encodings": {encoding: 1}, "bytes_read": len(data)},
        )
        yield "books", (name, split_book(body, self.validation_fraction))


class _CountChars(beam.CombineFn):
    def create_accumulator(self):
        return Counter()

    def add_input(self, acc, text):
        acc.update(text)
        return acc

    def merge_accumulators(self, accumulators):
        out = Counter()
        for acc in accumulators:
            out.update(acc)
        return out

    def extract_output(self, acc):
        return acc


class _WriteTexts(beam.DoFn):
    """Writes a group's texts as JSON lines ``{"book", "split", "text"}``, a file per group.

    Named by the group's first book, lines in book and split order: the bytes depend on the
    books alone, not on the runner. Output: the file's name.
    """

    def __init__(self, prefix: str):
        self.prefix = prefix

    def process(self, group):
        lines = sorted(
            (
                {"book": book, "split": s, "text": t}
                for book, parts in group
                for s, t in parts.items()
            ),
            key=lambda line: (line["book"], line["split"]),
        )
        path = f"{self.prefix}-{batch_file_name(group[0][0])}.jsonl"
        yield write_text("".join(json.dumps(line, sort_keys=True) + "\n" for line in lines), path)


class BooksToWindows(beam.PTransform):
    """Split books to serialised windows per split, with the vocabulary from training text.

    Input: groups of books ``[(book, {"train": text, "validation": text}), ...]``. Output:
    dict with ``train`` and ``validation`` (per group, a batch ``((first book, split),
    [record, ...])`` of serialised ``tf.train.Example`` of ``chars``, book after book),
    ``pairs_train`` and ``pairs_validation`` (the same of line pairs), ``vocabulary`` (a
    singleton list) and ``stats``.

    With ``reread`` (``(groups of paths, a ReadBook)``), the books are encoded from a second
    read of their files, a group per DoFn call, instead of from the input: the encoding
    waits for the vocabulary (a side input), and the local runner holds a stage's whole
    input in memory, so what waits is then the groups' paths, not every book's text.
    """

    def __init__(
        self,
        seq_len: int,
        stride: int,
        min_char_count: int,
        source_len: int = 48,
        target_len: int = 32,
        reread: tuple | None = None,
    ):
        super().__init__()
        self.seq_len, self.stride, self.min_char_count = seq_len, stride, min_char_count
        self.source_len, self.target_len = source_len, target_len
        self.reread = reread

    def expand(self, books):
        seq_len, stride = self.seq_len, self.stride
        source_len, target_len = self.source_len, self.target_len
        groups, read = self.reread if self.reread else (books, None)
        vocabulary = (
            books
            | "TrainText" >> beam.FlatMap(lambda group: [parts["train"] for _, parts in group])
            | "CountChars" >> CombineAll(_CountChars())
            | "Vocabulary" >> beam.Map(build_char_vocabulary, self.min_char_count)
        )

        class _Encode(beam.DoFn):
            def setup(self):
                self._index = None

            def process(self, item, vocab):
                if read is None:
                    yield from self._group(item, vocab)
                    return
                for tag, group in read.process(item):  # the second read of the group
                    if tag == "books":
                        yield from self._group(group, vocab)

            def _group(self, group, vocab):
                if self._index is None:
                    self._index = {c: i for i, c in enumerate(vocab)}
                records = {split: [] for split in SPLITS}
                pairs = {split: [] for split in SPLITS}
                for _, parts in group:
                    yield from self._encode(parts, records, pairs)
                # One element per (group, split), not per window: a file of the group.
                for split in SPLITS:
                    yield split, ((group[0][0], split), records[split])
                    yield f"pairs_{split}", ((group[0][0], split), pairs[split])

            def _encode(self, parts, records, pairs):
                for split, text in parts.items():
                    ids = [self._index.get(c, OOV) for c in text]
                    made = windows(ids, seq_len, stride)
                    records[split] += [window_example(w) for w in made]
                    before = len(pairs[split])
                    pairs[split] += [
                        pair_example(
                            [self._index.get(c, OOV) for c in a],
                            [self._index.get(c, OOV) for c in b],
                        )
                        for a, b in line_pairs(text, source_len, target_len)
                    ]
                    yield (
                        "stats",
                        {
                            "windows": {split: len(made)},
                            "pairs": {split: len(pairs[split]) - before},
                            "characters": {split: len(text)},
                            "oov_characters": {split: ids.count(OOV)},
                        },
                    )

        out = (
            groups
            | "Encode" >> beam.ParDo(_Encode(), beam.pvalue.AsSingleton(vocabulary))
            | "ByTag" >> ByTag(*SPLITS, *(f"pairs_{s}" for s in SPLITS), "stats")
        )
        return {
            "train": out["train"],
            "validation": out["validation"],
            **{f"pairs_{s}": out[f"pairs_{s}"] for s in SPLITS},
            "vocabulary": vocabulary,
            "stats": out["stats"],
        }


def preprocess_gutenberg(
    config: GutenbergPreprocessConfig, beam_args: list[str] | None = None
) -> dict:
    """Runs the preprocessing job and writes ``metadata.json``.

    Raises:
        GutenbergFormatError: No ``*.txt`` book in the input directory.
        BadRecordsError: Too many books were rejected (dead letters left in OUT.failed).
        OutputExistsError: The output folder holds files and overwrite is off.
    """
    books = sorted(str(p) for p in Path(config.input_dir).glob("*.txt"))
    if not books:
        raise GutenbergFormatError(f"{config.input_dir}: no *.txt books")
    # The input as the file system lists it, before any book is read: names and sizes.
    sizes = {book: os.path.getsize(book) for book in books}
    with staged_output(config.output_dir, config.overwrite) as out:
        _run_pipeline(config, sizes, out, beam_args)
        metadata = _metadata(config, books, sizes, out)
        write_metadata(out, metadata)
    return metadata


def _run_pipeline(
    config: GutenbergPreprocessConfig, sizes: dict[str, int], out: Path, beam_args
) -> None:
    """The Beam job itself over the books (path: size), writing into ``out``."""
    with job_pipeline(beam_args) as pipeline:
        groups = pipeline | "Books" >> beam.Create(group_books(sizes, config))
        read = (
            groups
            | "ReadBooks" >> beam.ParDo(ReadBook(config.validation_fraction))
            | "ByTag" >> ByTag("books", "dead_letter", "stats")
        )
        # Two reads of the books: the first counts the characters (and writes the texts),
        # the second encodes a group at a time once the vocabulary is known.
        result = read["books"] | "ToWindows" >> BooksToWindows(
            config.seq_len,
            config.stride,
            config.min_char_count,
            config.source_len,
            config.target_len,
            reread=(groups, ReadBook(config.validation_fraction)),
        )
        outputs = {
            **{split: result[split] for split in SPLITS},
            **{f"pairs/{split}": result[f"pairs_{split}"] for split in SPLITS},
            "dead_letter": read["dead_letter"],
            "stats": (read["stats"], result["stats"]) | "AllStats" >> beam.Flatten(),
            # Written by the job itself: the texts of the books and the vocabulary.
            # A file per group, where the group was read: one file of every text would
            # gather the whole corpus in one place (the local runner's memory).
            "text": read["books"]
            | "WriteText" >> beam.ParDo(_WriteTexts(str(out / "text" / "part"))),
            "vocabulary": result["vocabulary"]
            | "VocabJson" >> beam.Map(lambda v: {"vocabulary": v})
            | "WriteVocab" >> WriteJsonLines(str(out / "vocabulary"), ".json", exact_name=True),
        }
        tfrecords = [*SPLITS, *(f"pairs/{split}" for split in SPLITS)]
        _ = outputs | "WriteOutputs" >> WriteOutputs(
            out, tfrecords, config.num_shards, lambda d: d["file"]
        )


def _metadata(config, books: list[str], sizes: dict[str, int], out: Path) -> dict:
    """The metadata of a finished job, once its counts agree; raises if they do not."""
    files, stats = read_outputs(out)
    stats.update(read_single_json(str(out / "vocabulary.json")))
    (out / "vocabulary.json").unlink()
    accepted = int(stats.get("books", {}).get("accepted", 0))
    rejected = int(stats.get("books", {}).get("rejected", 0))
    check_accounting(config.input_dir, len(books), accepted, rejected)
    check_accounting(
        config.input_dir, sum(sizes.values()), int(stats.get("bytes_read", 0)), 0, unit="bytes"
    )
    if accepted == 0:
        raise GutenbergFormatError(
            f"{config.input_dir}: every book was rejected ({stats.get('rejected', {})})"
        )
    check_bad_ratio(config.input_dir, len(books), rejected, config.max_bad_ratio, config.output_dir)
    windows_by_split = {s: int(stats.get("windows", {}).get(s, 0)) for s in SPLITS}
    pairs_by_split = {s: int(stats.get("pairs", {}).get(s, 0)) for s in SPLITS}
    vocabulary = stats.get("vocabulary", ["<oov>"])
    metadata = {
        "dataset": "gutenberg",
        "task": "language_model",
        "num_classes": len(vocabulary),
        "vocab_size": len(vocabulary),
        "vocabulary": vocabulary,
        "seq_len": config.seq_len,
        "labels_per_example": config.seq_len,
        "splits": windows_by_split,
        "characters": {s: int(stats.get("characters", {}).get(s, 0)) for s in SPLITS},
        "oov_characters": {s: int(stats.get("oov_characters", {}).get(s, 0)) for s in SPLITS},
        "input_records": {"books": len(books), "bytes": sum(sizes.values())},
        "books": {
            "accepted": accepted,
            "rejected": rejected,
            "encodings": stats.get("encodings", {}),
        },
        "rejected": {"count": rejected, "reasons": stats.get("rejected", {})},
        "files": {s: f"{s}/part-*.tfrecord" for s in SPLITS},
        "shards": list_shards(files, "", windows_by_split),
        "text": "text/part-*.jsonl",
        "text_files": [f["file"] for f in files if os.path.dirname(f["file"]) == "text"],
        "dead_letter": "dead_letter/part-*.jsonl",
        "feature_spec": {"chars": f"int64[{config.seq_len + 1}] character ids (0 = OOV)"},
        # Consecutive lines, for encoder-decoders (DatasetInfo.view("pairs")).
        "views": {
            "pairs": {
                "splits": pairs_by_split,
                "files": {s: f"pairs/{s}/part-*.tfrecord" for s in SPLITS},
                "shards": list_shards(files, "pairs", pairs_by_split),
                "source_len": config.source_len,
                "target_len": config.target_len,
                "labels_per_example": config.target_len,
                "feature_spec": {
                    "source": f"int64[{config.source_len}] a line's last characters",
                    "target": f"int64[{config.target_len + 1}] a line break, then the next "
                    "line's first characters",
                },
            }
        },
        "config": asdict(config),
    }
    return metadata


def read_texts(data_dir: str | os.PathLike, split: str) -> dict[str, str]:
    """The normalised text of each book's part of a split, from a preprocessed directory.

    Reads the text files ``metadata.json`` lists (``text_files``), and only those.

    Raises:
        GutenbergFormatError: The metadata lists no text files, or a listed one is missing.
    """
    meta = Path(data_dir, "metadata.json")
    listed = json.loads(meta.read_text()).get("text_files") if meta.exists() else None
    if listed is None:
        raise GutenbergFormatError(
            f"{meta}: no list of text files (preprocessed by an older version of distrain); "
            "preprocess the data again"
        )
    texts = {}
    for name in sorted(listed):
        path = Path(data_dir, name)
        if not path.is_file():
            raise GutenbergFormatError(f"{path}: listed in {meta}, but missing")
        for line in path.read_text(encoding="utf-8").splitlines():
            item = json.loads(line)
            if item["split"] == split:
                texts[item["book"]] = item["text"]
    return dict(sorted(texts.items()))


def run(argv: list[str] | None = None) -> dict:
    """Command-line entry: every config field as an option, then any Beam options."""
    return run_job(GutenbergPreprocessConfig, preprocess_gutenberg, argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    run()
