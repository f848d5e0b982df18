"""DBPedia-14: the sample's layout, CSV edge cases, dead letters, vocabulary, the Beam job."""

import csv
import io
import json
from collections import Counter

import apache_beam as beam
import pytest
from apache_beam.options.pipeline_options import PipelineOptions
from apache_beam.testing.test_pipeline import TestPipeline
from apache_beam.testing.util import assert_that, equal_to

from distrain.datasets.dbpedia.beam import (
    DbpediaPreprocessConfig,
    EncodeText,
    _split_batch,
    build_vocabulary,
    encode,
    preprocess_dbpedia,
    text_example,
)
from distrain.datasets.dbpedia.rows import (
    DbpediaFormatError,
    ParseCsvRange,
    PlanCsvRanges,
    csv_row_ranges,
    ngrams,
    parse_csv,
    read_classes,
    tokenize,
)
from distrain.datasets.dbpedia.sample import CLASSES, DbpediaSampleConfig, write_dbpedia_sample
from distrain.preprocess.writing import BadRecordsError, read_tfrecords
from tests.conftest import BEAM_IN_MEMORY, BEAM_TWO_WORKERS

OPTIONS = BEAM_IN_MEMORY


def test_sample_is_the_dbpedia_csv_layout(tmp_path):
    cfg = DbpediaSampleConfig(train_per_class=20, test_per_class=5, seed=1)
    summary = write_dbpedia_sample(tmp_path, cfg)
    assert summary["counts"] == {"train": 280, "test": 70}
    assert (tmp_path / "classes.txt").read_text().splitlines() == CLASSES
    rows = list(csv.reader(io.StringIO((tmp_path / "train.csv").read_text(), newline="")))
    assert len(rows) == 280 and all(len(r) == 3 for r in rows)
    assert {int(r[0]) for r in rows} == set(range(1, 15))
    first = (tmp_path / "train.csv").read_text().splitlines()[0]
    assert first.split(",")[0].isdigit() and first.split(",", 1)[1].startswith('"')
    again = tmp_path / "again"
    write_dbpedia_sample(again, cfg)
    assert (again / "train.csv").read_bytes() == (tmp_path / "train.csv").read_bytes()


EDGE = (
    b'1,"Acme, Inc.","A company, with ""quotes"" and\na line break."\n'
    b'2,"Only two columns"\n'
    b'x,"Bad index","text"\n'
    b'15,"Out of range","text"\n'
    b'3,"","   "\n'
    b'4,"Caf\xe9","latin-1 byte"\n'
    b'5,"Fine","All good here."\n'
)


@pytest.mark.case(
    "dbpedia/columns", "dbpedia/class-index", "dbpedia/empty-text", "dbpedia/non-utf8"
)
def test_csv_edge_cases_each_get_their_reason():
    out = list(parse_csv("train.csv", EDGE, num_classes=14))
    ok = [o for o in out if o[0] == "ok"]
    bad = {o[1]: o[3] for o in out if o[0] == "bad"}
    assert [(o[1], o[2]) for o in ok] == [(1, 0), (8, 4)]
    assert ok[0][3] == 'Acme, Inc. A company, with "quotes" and\na line break.'
    assert bad == {
        3: "expected 3 columns, found 2",
        4: "class index 'x' is not a number",
        5: "class index 15 outside 1..14",
        6: "empty text",
        7: "bytes that are not UTF-8",
    }


@pytest.mark.case("dbpedia/unbalanced-quotes")
def test_unbalanced_quote_is_rejected_with_its_line():
    data = b'1,"Good","fine"\n2,"Broken,"never closed\n3,"x","y"\n'
    out = list(parse_csv("t.csv", data, 14))
    assert out[0][0] == "ok"
    assert any(o[0] == "bad" and o[1] == 2 for o in out)


def _parsed_by_range(data: bytes, ranges: list) -> list:
    """The rows of each range parsed on its own, after checking the ranges tile the file."""
    assert ranges[0][0] == 0 and ranges[-1][1] == len(data)
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    return [
        row
        for start, end, first_line, _ in ranges
        for row in parse_csv("t.csv", data[start:end], 14, first_line)
    ]


@pytest.mark.parametrize("rows_per_range", [1, 2, 3, 100])
@pytest.mark.parametrize(
    "data",
    [
        EDGE,
        EDGE.replace(b"\n", b"\r\n"),
        EDGE + b'6,"No final line break","text"',
        b'1,"Good","fine"\n2,"Broken,"never closed\n3,"x","y"\n4,"a","b"\n',
        b'1,"a","b"\r2,"c","d"\r\n3,"e","f\r\ng"\n',
        b"",
        b'1,"a","b"\n2,"open,"x"\n3,"c","d"\nnot a row\n4,"e","f"\n5,"g","h"',
    ],
    ids=["edge", "crlf", "no-final-break", "unbalanced", "mixed-breaks", "empty", "runaway"],
)
def test_row_ranges_parse_to_what_the_whole_file_parses_to(data, rows_per_range):
    ranges = csv_row_ranges(data, rows_per_range)
    pieces = _parsed_by_range(data, ranges)
    whole = list(parse_csv("t.csv", data, 14))
    assert pieces == whole
    # One outcome per record, as the planner counted them.
    assert sum(count for *_, count in ranges) == len(whole)
    if data:
        assert len(ranges) == -(-len(whole) // rows_per_range)


@pytest.mark.parametrize("range_bytes", [1, 40, 100, 10_000])
@pytest.mark.parametrize(
    "data",
    [EDGE, EDGE + b'6,"No final line break","text"', b'1,"a","b"\r2,"c","d"\r\n3,"e","f\r\ng"\n'],
    ids=["edge", "no-final-break", "mixed-breaks"],
)
def test_ranges_by_size_end_at_the_record_that_fills_them(data, range_bytes):
    from distrain.datasets.dbpedia.rows import csv_records

    ranges = csv_row_ranges(data, 0, range_bytes=range_bytes)
    pieces = _parsed_by_range(data, ranges)
    assert pieces == list(parse_csv("t.csv", data, 14))
    ends = [0, *map(int, csv_records(data)[0])]
    for start, end, _, count in ranges[:-1]:
        # Full, and not one record longer than it takes to be full.
        assert end - start >= range_bytes
        assert ends[ends.index(end) - 1] - start < range_bytes
        assert count >= 1
    assert len(ranges) <= max(1, len(data) // range_bytes + 1)


def test_the_default_job_writes_one_file_per_range_and_split(tmp_path):
    # Few files of about range_mb each, not one per 512 rows: 2,351 files of 56 KB for
    # 560,000 rows was the small-file pattern object stores punish (issue 41).
    train, test = _rows(900), _rows(200, 1)
    raw = _layout(tmp_path / "raw", train, test)
    range_mb = 12_000 / 2**20  # about 12 kB of CSV per range
    cfg = DbpediaPreprocessConfig(str(raw), str(tmp_path / "out"), range_mb=range_mb)
    meta = preprocess_dbpedia(cfg, OPTIONS)
    ranges = {
        source: len(csv_row_ranges(data, 0, range_bytes=cfg.range_bytes))
        for source, data in (("train", train), ("test", test))
    }
    assert ranges["train"] > 2
    files = {s: sorted((tmp_path / "out" / s).glob("part-*")) for s in ("train", "validation")}
    files["test"] = sorted((tmp_path / "out" / "test").glob("part-*"))
    assert len(files["train"]) == len(files["validation"]) == ranges["train"]
    assert len(files["test"]) == ranges["test"]
    assert meta["splits"]["train"] + meta["splits"]["validation"] == 900


def test_tokenize_and_encode():
    assert tokenize("It's the U.S.A., 1999!") == ["it's", "the", "u", "s", "a", "1999"]
    vocab = build_vocabulary(
        ({"a": 5, "b": 3, "c": 1}, {"a b": 2, "b c": 1}),
        min_count=2,
        max_unigrams=10,
        max_bigrams=10,
    )
    assert vocab == ["<pad>", "<oov>", "a", "b", "a b"]
    index = {w: i for i, w in enumerate(vocab)}
    assert encode("a b c a", index, 10, True) == [2, 3, 1, 2, 4]
    assert encode("a b c a", index, 3, True) == [2, 3, 1]


def test_encode_text_transform():
    rows = [("train", [(1, 0, "alpha beta")]), ("test", [(3, 2, "beta gamma")])]
    with TestPipeline(options=PipelineOptions(OPTIONS)) as p:
        vocab = p | "V" >> beam.Create(["<pad>\n<oov>\nalpha\nbeta\nalpha beta\n"])
        out = p | beam.Create(rows) | EncodeText(vocab, 3, 10, True)

        def decode(record):
            from tensorflow.core.example import example_pb2

            f = example_pb2.Example.FromString(record).features.feature
            return list(f["tokens"].int64_list.value), f["label"].int64_list.value[0]

        def records(split):
            return out[split] | f"Records{split}" >> beam.FlatMap(lambda batch: batch[1])

        assert_that(
            records("train") | "DT" >> beam.Map(decode), equal_to([([2, 3, 4], 0)]), label="Train"
        )
        assert_that(
            records("test") | "DE" >> beam.Map(decode), equal_to([([3, 1], 2)]), label="Test"
        )
        assert_that(
            out["histogram"],
            equal_to([{"histogram": {"train": [1, 0, 0]}}, {"histogram": {"test": [0, 0, 1]}}]),
            label="Histogram",
        )


def test_encoding_ranges_gives_what_encoding_their_parsed_rows_gives(tmp_path):
    """The job's second pass parses, splits and encodes a range in one call (so that rows
    never wait for the vocabulary in the runner's memory); it must write what parsing the
    ranges, splitting their rows and encoding them one by one gives."""
    raw = _layout(
        tmp_path / "raw",
        b"".join(b'%d,"T%d","alpha beta w%d"\n' % (i % 3 + 1, i, i % 7) for i in range(50))
        + b'99,"bad","class out of range"\n',
    )
    vocab = ["<pad>", "<oov>", "alpha", "beta", "w1", "alpha beta"]
    index = {w: i for i, w in enumerate(vocab)}
    ranges = [r for tag, r in PlanCsvRanges(str(raw), 8).process("train") if tag == "ranges"]
    assert len(ranges) > 3
    parse = ParseCsvRange(len(CLASSES), rows_only=True)
    split = [s for r in ranges for _, b in parse.process(r) for s in _split_batch(b, 7, 0.25)]
    want = {
        name: [
            ((name, batch[0][0]), text_example(encode(text, index, 10, True), label))
            for name_, batch in split
            if name_ == name
            for _, label, text in batch
        ]
        for name in ("train", "validation")
    }
    assert want["train"] and want["validation"]
    with TestPipeline(options=PipelineOptions(OPTIONS)) as p:
        vocab_text = p | "V" >> beam.Create(["\n".join(vocab) + "\n"])
        out = (
            p
            | beam.Create(ranges)
            | EncodeText(vocab_text, 14, 10, True, parse=parse, seed=7, validation_fraction=0.25)
        )
        for name in ("train", "validation"):
            got = out[name] | f"Each{name}" >> beam.FlatMap(
                lambda batch: [(batch[0], r) for r in batch[1]]
            )
            assert_that(got, equal_to(want[name]), label=f"Same{name}")


def _layout(path, train: bytes, test: bytes = b'1,"t","some text"\n'):
    path.mkdir()
    (path / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    (path / "train.csv").write_bytes(train)
    (path / "test.csv").write_bytes(test)
    return path


@pytest.mark.case("dbpedia/dead-letter")
def test_job_counts_dead_letters_and_builds_vocabulary_from_training_only(tmp_path):
    train = b"".join(b'%d,"T%d","alpha beta common words"\n' % (i % 14 + 1, i) for i in range(60))
    test = b'1,"Test","zebra zebra zebra only in test"\n' + EDGE
    raw = _layout(tmp_path / "raw", train, test)
    cfg = DbpediaPreprocessConfig(
        str(raw), str(tmp_path / "out"), validation_fraction=0.2, min_count=1, max_bad_ratio=0.5
    )
    meta = preprocess_dbpedia(cfg, OPTIONS)
    assert meta["input_records"] == {"train": 60, "test": 8}
    assert meta["rejected"]["count"] == 5
    assert sum(meta["splits"].values()) + 5 == 68
    assert meta["splits"]["test"] == 3
    vocab = (tmp_path / "out" / "vocab.txt").read_text().splitlines()
    assert "alpha" in vocab and "alpha beta" in vocab
    assert "zebra" not in vocab and "quotes" not in vocab  # test words stay out
    dead = [
        json.loads(line)
        for f in (tmp_path / "out" / "dead_letter").glob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert sorted(d["line"] for d in dead) == [4, 5, 6, 7, 8]
    assert all(d["file"].endswith("test.csv") for d in dead)
    records = read_tfrecords(str(tmp_path / "out" / "train" / "part-*.tfrecord"))
    assert len(records) == meta["splits"]["train"]


def test_the_counted_vocabulary_is_the_whole_count_of_the_training_rows(tmp_path):
    """The job counts n-grams by bucket and keeps each bucket's top before the overall top;
    that must give the vocabulary of one count over every training row, ties included."""
    raw = tmp_path / "raw"
    write_dbpedia_sample(raw, DbpediaSampleConfig(train_per_class=40, test_per_class=2, seed=5))
    cfg = DbpediaPreprocessConfig(
        str(raw),
        str(tmp_path / "out"),
        min_count=2,
        max_unigrams=60,
        max_bigrams=90,
        rows_per_range=100,
    )
    preprocess_dbpedia(cfg, OPTIONS)
    data = (raw / "train.csv").read_bytes()
    rows = [(line, a, b) for kind, line, a, b, _ in parse_csv("t", data, 14) if kind != "bad"]
    uni, bi = Counter(), Counter()
    for _, batch in _split_batch(("train", rows), cfg.seed, cfg.validation_fraction):
        if _ == "train":
            for _, _, text in batch:
                u, b = ngrams(tokenize(text))
                uni.update(u)
                bi.update(b)
    want = build_vocabulary((uni, bi), 2, 60, 90)
    assert len(want) == 2 + 60 + 90  # the limits cut
    assert (tmp_path / "out" / "vocab.txt").read_text().splitlines() == want


@pytest.mark.case("dbpedia/dead-letter")
def test_too_many_bad_rows_fail_clearly(tmp_path):
    raw = _layout(tmp_path / "raw", b'1,"a","b c"\n99,"x","y"\n')
    with pytest.raises(BadRecordsError, match="1 of 3 lines rejected"):
        preprocess_dbpedia(DbpediaPreprocessConfig(str(raw), str(tmp_path / "o")), OPTIONS)


@pytest.mark.case("dbpedia/empty-split", "dbpedia/classes-missing")
def test_missing_pieces_are_named(tmp_path):
    raw = _layout(tmp_path / "raw", b"")
    with pytest.raises(DbpediaFormatError, match="train.csv: empty split"):
        preprocess_dbpedia(DbpediaPreprocessConfig(str(raw), str(tmp_path / "o")), OPTIONS)
    (raw / "classes.txt").unlink()
    with pytest.raises(DbpediaFormatError, match="classes.txt: file not found"):
        read_classes(raw)


def test_two_workers_parse_ranges_to_the_same_output_as_one(tmp_path):
    train = b"".join(
        b'%d,"T%d","alpha beta, ""quoted""\nline %d"\n' % (i % 14 + 1, i, i % 5) for i in range(90)
    )
    raw = _layout(tmp_path / "raw", train + b'99,"x","y"\n', EDGE)
    outputs = {}
    for name, options in {
        "one": OPTIONS,
        "two": BEAM_TWO_WORKERS,
    }.items():
        cfg = DbpediaPreprocessConfig(
            str(raw), str(tmp_path / name), min_count=1, max_bad_ratio=0.5, rows_per_range=7
        )
        meta = preprocess_dbpedia(cfg, options)
        meta.pop("config")
        dead = sorted(
            (d["file"], d["line"], d["reason"])
            for f in (tmp_path / name / "dead_letter").glob("*.jsonl")
            for d in map(json.loads, f.read_text().splitlines())
        )
        records = {
            s: sorted(read_tfrecords(str(tmp_path / name / s / "part-*.tfrecord")))
            for s in ("train", "validation", "test")
        }
        outputs[name] = (meta, dead, records)
    assert outputs["one"] == outputs["two"]
    meta, dead, records = outputs["one"]
    assert meta["input_records"] == {"train": 91, "test": 7}
    assert [line for path, line, _ in dead if path.endswith("train.csv")] == [181]
    assert sum(len(r) for r in records.values()) == 91 + 7 - len(dead)


LONG = 200 * 1024  # over the csv module's default field limit (128 KiB)


def _rows(n, first=0):
    row = b'%d,"T%d","alpha beta words %d"\n'
    return b"".join(row % (i % 14 + 1, i, i) for i in range(first, n))


@pytest.mark.case("dbpedia/long-field")
def test_a_field_over_the_csv_limit_is_its_own_rows_dead_letter():
    data = _rows(3) + b'4,"Long","' + b"x" * LONG + b'"\n' + _rows(6, 3)
    out = list(parse_csv("train.csv", data, 14))
    assert [o[1] for o in out] == [1, 2, 3, 4, 5, 6, 7]
    assert [o[0] for o in out] == ["ok", "ok", "ok", "bad", "ok", "ok", "ok"]
    assert out[3][3] == f"field over the csv field limit ({csv.field_size_limit()} characters)"
    assert [o[3] for o in out[4:]] == [f"T{i} alpha beta words {i}" for i in range(3, 6)]
    # The planner cuts the file around it, and every range parses to the same outcomes.
    ranges = csv_row_ranges(data, 2)
    assert sum(count for *_, count in ranges) == 7
    pieces = [o for a, b, line, _ in ranges for o in parse_csv("train.csv", data[a:b], 14, line)]
    assert pieces == out


@pytest.mark.case("dbpedia/bom")
def test_a_utf8_byte_order_mark_is_skipped():
    data = b'\xef\xbb\xbf"9","First","kept whole"\r\n' + b'3,"Second","also kept"\r\n'
    out = list(parse_csv("test.csv", data, 14))
    assert out == [("ok", 1, 8, "First kept whole", 1), ("ok", 2, 2, "Second also kept", 1)]
    # Only at the start of the file: elsewhere the same bytes are the row's own.
    later = list(parse_csv("test.csv", data, 14, first_line=5))
    assert later[0][0] == "bad" and later[0][3].startswith("class index")


def test_records_are_counted_by_quote_parity_apart_from_the_csv_module():
    from distrain.datasets.dbpedia.rows import csv_records

    data = b'1,"a\nb","c"\r\n2,"say ""hi""\rthere","d"\r3,"e","f"'
    ends, lines, runaway = csv_records(data)
    assert ends.tolist() == [13, 38, len(data)]
    assert lines.tolist() == [0, 2, 4]
    assert not runaway.any()
    # The same with the scan cut into pieces of a few bytes.
    ends2, lines2, _ = csv_records(data, chunk_bytes=3)
    assert ends2.tolist() == ends.tolist() and lines2.tolist() == lines.tolist()
    # An unbalanced quote costs its own line: reading resumes at the next row.
    out = list(parse_csv("t.csv", b'1,"a","b"\n2,"open,"x"\n3,"c","d"\n', 14))
    assert [(o[0], o[1], o[4]) for o in out] == [("ok", 1, 1), ("bad", 2, 1), ("ok", 3, 1)]
    assert out[1][3].startswith("unbalanced quote")


@pytest.mark.case("dbpedia/long-field", "dbpedia/bom")
def test_parse_csv_range_transform_keeps_reading_after_a_bad_record(tmp_path):
    from distrain.datasets.dbpedia.rows import ParseCsvRange
    from distrain.preprocess.transforms import ByTag

    path = tmp_path / "train.csv"
    data = b"\xef\xbb\xbf" + _rows(2) + b'3,"Long","' + b"y" * LONG + b'"\n' + _rows(4, 2)
    path.write_bytes(data)
    with TestPipeline(options=PipelineOptions(OPTIONS)) as p:
        out = (
            p
            | beam.Create([("train", str(path), 0, len(data), 1)])
            | beam.ParDo(ParseCsvRange(14, batch_size=2))
            | ByTag("rows", "dead_letter")
        )
        lines = out["rows"] | beam.FlatMap(lambda batch: [row[0] for row in batch[1]])
        assert_that(lines, equal_to([1, 2, 4, 5]), label="Rows")
        assert_that(
            out["dead_letter"]
            | beam.Map(lambda d: (d["file"], d["line"], d["reason"].split(" (")[0])),
            equal_to([(str(path), 3, "field over the csv field limit")]),
            label="DeadLetter",
        )


@pytest.mark.case("dbpedia/long-field", "dbpedia/bom", "dbpedia/accounting")
def test_job_keeps_every_row_around_a_long_field_and_after_a_bom(tmp_path):
    long_row = b'5,"Long","' + b"z" * LONG + b'"\n'
    train = _rows(150) + long_row + _rows(300, 150)
    test = b"\xef\xbb\xbf" + b'"9","First","zebra words"\n' + _rows(20, 1)
    raw = _layout(tmp_path / "raw", train, test)
    cfg = DbpediaPreprocessConfig(str(raw), str(tmp_path / "out"), rows_per_range=64)
    meta = preprocess_dbpedia(cfg, OPTIONS)
    assert meta["input_records"] == {"train": 301, "test": 20}
    assert meta["rejected"] == {"count": 1, "reasons": {"field over the csv field limit": 1}}
    assert meta["splits"]["train"] + meta["splits"]["validation"] == 300
    assert meta["splits"]["test"] == 20  # the first row too
    assert meta["class_histogram"]["test"][8] == 2  # "9" (first row) and row 8 of _rows
    dead = [
        json.loads(line)
        for f in (tmp_path / "out" / "dead_letter").glob("*.jsonl")
        for line in f.read_text().splitlines()
    ]
    assert [(d["file"].endswith("train.csv"), d["line"]) for d in dead] == [(True, 151)]


@pytest.mark.case("dbpedia/accounting")
def test_rows_the_parser_never_reports_fail_the_step(tmp_path, monkeypatch):
    import distrain.datasets.dbpedia.rows as dbpedia
    from distrain.preprocess.writing import RecordAccountingError

    real = dbpedia.parse_csv

    def stops_early(path, data, num_classes, first_line=1, *bounds):
        # As the reader did before: stop at the first malformed record, dropping the rest.
        for outcome in real(path, data, num_classes, first_line, *bounds):
            yield outcome
            if outcome[0] == "bad":
                return

    monkeypatch.setattr(dbpedia, "parse_csv", stops_early)
    raw = _layout(tmp_path / "raw", _rows(10) + b'2,"only two"\n' + _rows(20, 10))
    cfg = DbpediaPreprocessConfig(str(raw), str(tmp_path / "out"), max_bad_ratio=0.5)
    with pytest.raises(RecordAccountingError, match=r"train.csv: 21 lines in the input.*10 "):
        preprocess_dbpedia(cfg, OPTIONS)


def test_check_accounting():
    from distrain.preprocess.writing import RecordAccountingError, check_accounting

    check_accounting("f.csv", 10, 7, 3)
    with pytest.raises(RecordAccountingError, match="f.csv: 10 records .* 1 records lost"):
        check_accounting("f.csv", 10, 7, 2)
    with pytest.raises(RecordAccountingError, match="counted twice"):
        check_accounting("f.csv", 10, 8, 3)


class _CountedReads(io.BytesIO):
    """A file whose largest single read is remembered."""

    largest = 0

    def read(self, size=-1):
        out = super().read(size)
        self.largest = max(self.largest, len(out))
        return out


@pytest.mark.parametrize("window", [1, 16, 64])
@pytest.mark.parametrize("rows_per_range, range_bytes", [(1, 0), (3, 0), (0, 1), (0, 40)])
@pytest.mark.parametrize(
    "data",
    [
        EDGE * 5,
        EDGE.replace(b"\n", b"\r\n") * 3,
        (b'1,"a","b"\n2,"open,"x"\n3,"c","d"\nnot a row\n4,"e","f"\n5,"g","h"\n') * 4,
        b"\xef\xbb\xbf" + b'1,"a","multi\nline\nfield"\r3,"e","f"\n' * 10 + b'4,"no","break"',
    ],
    ids=["edge", "crlf", "runaway", "bom"],
)
def test_the_planner_reads_a_window_at_a_time_and_cuts_as_the_whole_file(
    data, rows_per_range, range_bytes, window
):
    # Issue 41: the planner read each CSV whole (720 MB at 16x of 140,000 rows). Windows
    # of a few bytes (records bounded to 3 lines, 60 bytes: windows of 240) must cut
    # exactly where one window over the whole file cuts, and never read more at once.
    from distrain.datasets.dbpedia.rows import physical_lines, plan_csv_ranges

    bounds = {"max_lines": 3, "max_bytes": 60}
    f = _CountedReads(data)
    ranges, lines = plan_csv_ranges(
        f, rows_per_range, range_bytes=range_bytes, window_bytes=window, **bounds
    )
    whole = csv_row_ranges(
        data, rows_per_range, range_bytes=range_bytes, window_bytes=len(data) + 1, **bounds
    )
    assert ranges == whole
    assert lines == physical_lines(data)
    assert f.largest <= 4 * bounds["max_bytes"] < len(data)
