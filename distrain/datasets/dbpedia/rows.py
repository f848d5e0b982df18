"""Parsing DBPedia-14's raw layout: ``classes.txt``, RFC 4180 CSV rows and their tokens.

A malformed row (wrong column count, class index not a number or outside classes.txt,
empty text, bytes that are not UTF-8, a quoted field left open) is reported with its
file, line and reason instead of stopping the job; a file is read in byte ranges that
start at row boundaries, each range a Beam element (:class:`PlanCsvRanges`,
:class:`ParseCsvRange`).
"""

from __future__ import annotations

import codecs
import csv
import io
import os
import re
from pathlib import Path
from typing import BinaryIO, NamedTuple

import apache_beam as beam
import numpy as np

_TOKEN = re.compile(r"[a-z0-9]+(?:'[a-z]+)?")
# Bytes that were not UTF-8, as decoding with ``surrogateescape`` leaves them.
_NOT_UTF8 = re.compile("[\udc80-\udcff]")
_CLASS_INDEX = re.compile(r"\s*\d+\s*")
# A line that starts a row of the layout: a class index (quoted or not), then a comma.
ROW_START = re.compile(rb'(?:\xef\xbb\xbf)?"?[ \t]*\d+[ \t]*"?[ \t]*,')
# A record whose quoted field stays open past this many lines or bytes is rejected, and
# reading resumes at the next line that starts a row (dbpedia_csv rows are one line).
MAX_RECORD_LINES = 32
MAX_RECORD_BYTES = 1 << 20


class DbpediaFormatError(ValueError):
    """A file of the dbpedia_csv layout is missing or unusable as a whole."""


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
    names = path.read_text(encoding="utf-8-sig").splitlines()
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


class CsvRecords(NamedTuple):
    """Where the records of CSV bytes are (:func:`csv_records`).

    Attributes:
        ends: The offset after each record.
        lines: The number of line breaks before each record's start (its 0-based line).
        runaway: Whether the record is a quote left open (past the bounds or the end of
            the data), cut at the next line that starts a row.
    """

    ends: np.ndarray
    lines: np.ndarray
    runaway: np.ndarray


def physical_lines(data: bytes) -> int:
    r"""Lines of ``data`` as a text editor counts them (``\n``, ``\r\n``, a lone ``\r``).

    The jobs' input count: it knows nothing of quotes, rows or the parser.
    """
    breaks = data.count(b"\n") + data.count(b"\r") - data.count(b"\r\n")
    return breaks + (1 if data and data[-1:] not in (b"\n", b"\r") else 0)


def csv_records(
    data: bytes,
    chunk_bytes: int = 1 << 24,
    max_lines: int = MAX_RECORD_LINES,
    max_bytes: int = MAX_RECORD_BYTES,
) -> CsvRecords:
    r"""The records of CSV bytes, found by quote parity, without the csv module.

    In RFC 4180 a record ends at a line break outside quotes: after an even number of
    ``"`` since its start (an escaped quote, ``""``, adds two). Line breaks are ``\n``,
    ``\r\n`` and a lone ``\r``, as Python's csv module reads them. A quote left open
    (one stray ``"``) would make the rest of the data one record; instead a record still
    open past ``max_lines`` lines or ``max_bytes`` bytes, or at the end of the data, is
    a *runaway*: it ends before the next line that starts a row (:data:`ROW_START`), where
    reading resumes. The same bytes from the same record start give the same records, so
    a file cut at record ends (:func:`csv_row_ranges`) reads as the whole does.

    Args:
        data: CSV bytes (any ASCII-compatible encoding).
        chunk_bytes: Bytes scanned per numpy pass (bounds the memory used).
        max_lines: Most lines of one record.
        max_bytes: Most bytes of one record of more than one line.

    Returns:
        The records (:class:`CsvRecords`).
    """
    raw = np.frombuffer(data, dtype=np.uint8)
    breaks, parities, parity = [], [], 0
    for offset in range(0, len(raw), chunk_bytes):
        part = raw[offset : offset + chunk_bytes]
        # Quote parity after each byte of the part, carried over from the parts before.
        after = np.bitwise_xor.accumulate((part == 34).view(np.uint8)) ^ np.uint8(parity)
        cr = np.flatnonzero(part == 13)
        following = np.minimum(offset + cr + 1, len(raw) - 1)
        lone_cr = cr[(offset + cr + 1 >= len(raw)) | (raw[following] != 10)]
        at = np.sort(np.concatenate([np.flatnonzero(part == 10), lone_cr]))
        breaks.append(at + offset)
        parities.append(after[at])
        parity = int(after[-1]) if len(after) else parity
    at = np.concatenate(breaks).astype(np.int64) if breaks else np.zeros(0, dtype=np.int64)
    closed = np.concatenate(parities).astype(np.uint8) if breaks else np.zeros(0, np.uint8)
    # Every line: where it ends, and its quote parity at that end (from the data's start).
    line_end = at + 1
    if len(data) and (not len(line_end) or line_end[-1] != len(data)):
        line_end = np.append(line_end, len(data))  # the last line has no final break
        closed = np.append(closed, np.uint8(parity))
    n = len(line_end)
    # The fast way, right when no quote stays open: records end where the parity is even.
    last = np.flatnonzero(closed == 0)  # the last line of each record
    first = np.concatenate([[0], last[:-1] + 1]) if len(last) else last
    line_start = np.concatenate([[0], line_end[:-1]]) if n else line_end
    too_long = (last - first + 1 > max_lines) | (
        (last > first) & (line_end[last] - line_start[first] > max_bytes)
    )
    if not too_long.any() and (not n or (len(last) and last[-1] == n - 1)):
        ends = line_end[last]
        return CsvRecords(ends, first, np.zeros(len(ends), dtype=bool))
    # Otherwise line by line from the first record that is not right.
    bad = np.flatnonzero(too_long)
    keep = int(bad[0]) if len(bad) else len(last)
    starts, stops, runaway = first[:keep].tolist(), last[:keep].tolist(), [False] * keep
    odd = np.bitwise_xor(closed, np.concatenate([[0], closed[:-1]]).astype(np.uint8)).tolist()
    line_start, line_end = line_start.tolist(), line_end.tolist()
    k = int(first[keep]) if keep < len(first) else (stops[-1] + 1 if stops else 0)
    while k < n:
        j, open_quote = k, odd[k]
        while open_quote:
            j += 1
            if j >= n or j - k + 1 > max_lines or line_end[j] - line_start[k] > max_bytes:
                break
            open_quote ^= odd[j]
        if open_quote:  # a runaway: it ends before the next line that starts a row
            j = k + 1
            while j < n and not ROW_START.match(data, line_start[j]):
                j += 1
            j -= 1
        starts.append(k)
        stops.append(j)
        runaway.append(bool(open_quote))
        k = j + 1
    ends = np.array([line_end[j] for j in stops], dtype=np.int64)
    return CsvRecords(ends, np.array(starts, dtype=np.int64), np.array(runaway, dtype=bool))


def parse_csv(
    path: str,
    data: bytes,
    num_classes: int,
    first_line: int = 1,
    max_lines: int = MAX_RECORD_LINES,
    max_bytes: int = MAX_RECORD_BYTES,
):
    """Parses one dbpedia_csv file, or a range of its records, into good rows and rejects.

    Each record (:func:`csv_records`) is read by a csv reader of its own, so a malformed
    record (a field over the csv module's size limit, a quote left open) is rejected
    alone and reading goes on with the next. A UTF-8 byte-order mark at the start of
    the file is skipped.

    Args:
        path: The file's name (for messages).
        data: Its bytes, or the bytes of whole records of it (see :func:`csv_row_ranges`).
        num_classes: Classes in classes.txt (indices are 1-based).
        first_line: The file's line number of the first line of ``data``.
        max_lines: Most lines of one record (:func:`csv_records`).
        max_bytes: Most bytes of one record of more than one line.

    Yields:
        ``("ok", line, label0, text, lines)`` or ``("bad", line, raw, reason, lines)``,
        one per record; ``line`` is the line of the file where the record starts and
        ``lines`` how many lines of the file it takes (counted in its own bytes).
    """
    start = len(codecs.BOM_UTF8) if first_line == 1 and data.startswith(codecs.BOM_UTF8) else 0
    found = csv_records(data[start:], max_lines=max_lines, max_bytes=max_bytes)
    ends = (found.ends + start).tolist()
    begins = [start, *ends[:-1]][: len(ends)]
    for begin, end, line, runaway in zip(
        begins, ends, found.lines.tolist(), found.runaway.tolist(), strict=True
    ):
        record = data[begin:end]
        lines = physical_lines(record)
        if runaway:
            text = _printable(record[:500].decode("utf-8", errors="surrogateescape"))
            reason = (
                f"unbalanced quote: a quoted field runs past {max_lines} lines, {max_bytes} "
                "bytes or the end of the file; its lines are rejected up to the next line "
                "that starts a row"
            )
            yield "bad", first_line + line, text, reason, lines
        else:
            yield (*_parse_record(record, first_line + line, num_classes), lines)


def _parse_record(record: bytes, line: int, num_classes: int):
    text = record.decode("utf-8", errors="surrogateescape")
    try:
        row = next(csv.reader((text,), strict=True), [])
    except csv.Error as err:
        if "field limit" in str(err):
            reason = f"field over the csv field limit ({csv.field_size_limit()} characters)"
        else:
            reason = f"malformed CSV ({err})"
        return "bad", line, _printable(text[:500]), reason
    raw = ",".join(row)
    if _NOT_UTF8.search(raw):
        return "bad", line, _printable(raw), "bytes that are not UTF-8"
    if len(row) != 3:
        return "bad", line, raw, f"expected 3 columns, found {len(row)}"
    index, title, abstract = row
    if not _CLASS_INDEX.fullmatch(index):
        return "bad", line, raw, f"class index {index!r} is not a number"
    label = int(index)
    if not 1 <= label <= num_classes:
        return "bad", line, raw, f"class index {label} outside 1..{num_classes}"
    body = f"{title.strip()} {abstract.strip()}".strip()
    if not tokenize(body):
        return "bad", line, raw, "empty text"
    return "ok", line, label - 1, body


def _printable(text: str) -> str:
    """Text with bytes that were not UTF-8 shown as Latin-1 characters."""
    return text.encode("utf-8", "surrogateescape").decode("utf-8", "replace")


def csv_row_ranges(
    data: bytes,
    rows_per_range: int,
    max_lines: int = MAX_RECORD_LINES,
    max_bytes: int = MAX_RECORD_BYTES,
    range_bytes: int = 0,
    window_bytes: int = 1 << 23,
) -> list[tuple[int, int, int, int]]:
    """Cuts CSV bytes into ranges of whole records (:func:`plan_csv_ranges` over them)."""
    return plan_csv_ranges(
        io.BytesIO(data), rows_per_range, max_lines, max_bytes, range_bytes, window_bytes
    )[0]


def plan_csv_ranges(
    f: BinaryIO,
    rows_per_range: int,
    max_lines: int = MAX_RECORD_LINES,
    max_bytes: int = MAX_RECORD_BYTES,
    range_bytes: int = 0,
    window_bytes: int = 1 << 23,
) -> tuple[list[tuple[int, int, int, int]], int]:
    """Cuts a CSV file into ranges of whole records, reading it a window at a time.

    Record boundaries come from :func:`csv_records` (quoted fields may hold commas,
    quotes and line breaks; a quote left open ends at the next line starting a row). The
    file is never in memory whole: each window of about ``window_bytes`` starts at a
    record start, and only its records that end at least ``max_bytes`` before its end
    are taken (they are the records the whole file has there: a record is decided by its
    own bytes, at most ``max_bytes`` past its start when it has several lines, and a
    runaway by the lines up to the next row start, all inside the window); the next
    window starts after them. A window that takes no record is doubled.

    Args:
        f: The file, opened for binary reading (seekable).
        rows_per_range: Records per range (the last range may have fewer); 0: by size.
        max_lines: Most lines of one record.
        max_bytes: Most bytes of one record of more than one line.
        range_bytes: With ``rows_per_range`` 0, bytes per range: each range ends with
            the first record that takes it to this size (the last may be smaller).
        window_bytes: Bytes read at once (grown to fit a longer record).

    Returns:
        ``(ranges, lines)``: ``(byte_start, byte_end, first_line, records)`` per range,
        in file order, covering the file exactly (``first_line``: the 1-based line where
        it starts), and the file's physical lines (:func:`physical_lines`).
    """
    if rows_per_range < 0 or (rows_per_range == 0 and range_bytes < 1):
        raise ValueError("rows_per_range must be positive, or range_bytes with rows_per_range 0")
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    pos = len(codecs.BOM_UTF8) if f.read(len(codecs.BOM_UTF8)) == codecs.BOM_UTF8 else 0
    total_lines = 0  # physical lines before ``pos`` (a record start)
    ranges: list[tuple[int, int, int, int]] = []
    start, first_line, count = 0, 1, 0  # the range being filled
    window = max(window_bytes, 4 * max_bytes)
    while pos < size:
        f.seek(pos)
        data = f.read(window)
        at_end = pos + len(data) >= size
        found = csv_records(data, max_lines=max_lines, max_bytes=max_bytes)
        ends, lines = found.ends, found.lines
        if not at_end:
            taken = int(np.searchsorted(ends, len(data) - max_bytes - 1, side="right"))
            if taken == 0:
                window *= 2
                continue
            ends, lines = ends[:taken], lines[:taken]
        for end, line in zip((ends + pos).tolist(), lines.tolist(), strict=True):
            if not count:
                first_line = total_lines + line + 1
            count += 1
            if count == rows_per_range or (not rows_per_range and end >= start + range_bytes):
                ranges.append((start, end, first_line, count))
                start, count = end, 0
        consumed = int(ends[-1])
        total_lines += physical_lines(data[:consumed])
        pos += consumed
    if count or not ranges:
        ranges.append((start, size, first_line, count))
    return ranges, total_lines


class PlanCsvRanges(beam.DoFn):
    """Cuts one CSV file of the layout into ranges of whole records (:func:`csv_row_ranges`).

    Output, as ``(tag, value)`` pairs: ``ranges``, ``(source, path, byte_start, byte_end,
    first_line)`` (only these cross the shuffle, and each worker reads its own ranges of
    the file), and ``stats``: the file's records and its physical lines
    (:func:`physical_lines`, the count the job's accounting trusts: it shares nothing
    with the parser).
    """

    def __init__(
        self,
        input_dir: str,
        rows_per_range: int,
        max_lines: int = MAX_RECORD_LINES,
        max_bytes: int = MAX_RECORD_BYTES,
        range_bytes: int = 0,
    ):
        self.input_dir = input_dir
        self.rows_per_range, self.range_bytes = rows_per_range, range_bytes
        self.max_lines, self.max_bytes = max_lines, max_bytes

    def process(self, source: str):
        path = os.path.join(self.input_dir, f"{source}.csv")
        with open(path, "rb") as f:
            ranges, lines = plan_csv_ranges(
                f, self.rows_per_range, self.max_lines, self.max_bytes, self.range_bytes
            )
        for start, end, first_line, _ in ranges:
            yield "ranges", (source, path, start, end, first_line)
        records = sum(count for *_, count in ranges)
        yield "stats", {"input": {source: records}, "input_lines": {source: lines}}


class ParseCsvRange(beam.DoFn):
    """Parses one range of a CSV file into ``(tag, value)`` pairs.

    Tags: ``rows``, batches ``(source, [(line, label, text), ...])`` of good rows,
    ``dead_letter``, one ``{"file", "line", "lines", "raw", "reason"}`` per rejected
    record (``lines``: the lines of the file it takes, each one counted as rejected), and
    ``stats``: the lines of the good rows, per source. ``batch_size``: rows per batch; 0
    (default): the range's rows are one batch, so that each range becomes one file per
    split. ``rows_only``: yield only ``rows`` (a second pass over ranges whose rejects and
    counts the first pass already reported).
    """

    def __init__(
        self,
        num_classes: int,
        batch_size: int = 0,
        max_lines: int = MAX_RECORD_LINES,
        max_bytes: int = MAX_RECORD_BYTES,
        rows_only: bool = False,
    ):
        self.num_classes = num_classes
        self.batch_size, self.rows_only = batch_size, rows_only
        self.max_lines, self.max_bytes = max_lines, max_bytes

    def process(self, item):
        source, path, start, end, first_line = item
        with open(path, "rb") as f:
            f.seek(start)
            data = f.read(end - start)
        batch, good_lines = [], 0
        records = parse_csv(
            path, data, self.num_classes, first_line, self.max_lines, self.max_bytes
        )
        for kind, line, a, b, lines in records:
            if kind == "bad":
                if self.rows_only:
                    continue
                yield (
                    "dead_letter",
                    {"file": path, "line": line, "lines": lines, "raw": a, "reason": b},
                )
                continue
            good_lines += lines
            batch.append((line, a, b))
            if len(batch) == self.batch_size:  # never with batch_size 0
                yield "rows", (source, batch)
                batch = []
        if batch:
            yield "rows", (source, batch)
        if not self.rows_only:
            yield "stats", {"good_lines": {source: good_lines}}
