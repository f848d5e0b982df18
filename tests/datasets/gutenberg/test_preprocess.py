"""Project Gutenberg: book layout, markers (current and legacy), rejects, windows, baseline."""

import codecs
import json

import pytest

from distrain.datasets.gutenberg.beam import (
    GutenbergPreprocessConfig,
    decode_book,
    preprocess_gutenberg,
    read_texts,
    split_book,
    strip_gutenberg,
    windows,
)
from distrain.datasets.gutenberg.sample import (
    GutenbergSampleConfig,
    book_text,
    write_gutenberg_sample,
)
from distrain.preprocess.writing import BadRecordsError
from tests.conftest import BEAM_IN_MEMORY

OPTIONS = BEAM_IN_MEMORY
BODY = "CHAPTER I.\r\n\r\nIt was a dark night.\r\n"


def test_sample_book_layout(tmp_path):
    summary = write_gutenberg_sample(tmp_path, GutenbergSampleConfig(books=2, chars_per_book=2000))
    text = open(summary["files"][0], encoding="utf-8", newline="").read()
    assert text.startswith("The Project Gutenberg eBook of ")
    assert "\r\n*** START OF THE PROJECT GUTENBERG EBOOK " in text
    assert "*** END OF THE PROJECT GUTENBERG EBOOK " in text
    assert "THE FULL PROJECT GUTENBERG LICENSE" in text
    assert "\r\n" in text and "\n" not in text.replace("\r\n", "")


@pytest.mark.parametrize(
    "start, end",
    [
        (
            "*** START OF THE PROJECT GUTENBERG EBOOK PRIDE ***",
            "*** END OF THE PROJECT GUTENBERG EBOOK PRIDE ***",
        ),
        (
            "*** START OF THIS PROJECT GUTENBERG EBOOK PRIDE ***",
            "*** END OF THIS PROJECT GUTENBERG EBOOK PRIDE ***",
        ),
        (
            "***START OF THE PROJECT GUTENBERG EBOOK PRIDE***",
            "***END OF THE PROJECT GUTENBERG EBOOK PRIDE***",
        ),
        (
            "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*",
            "End of the Project Gutenberg EBook of Pride",
        ),
        (
            "*** START OF THE PROJECT GUTENBERG ETEXT PRIDE ***",
            "End of Project Gutenberg's Pride, by Jane",
        ),
    ],
)
def test_marker_variants(start, end):
    text = f"Header lines\r\nTitle: Pride\r\n\r\n{start}\r\n\r\n{BODY}\r\n{end}\r\nLicence text\r\n"
    body, reason = strip_gutenberg(text)
    assert reason == "ok"
    assert body == "CHAPTER I.\n\nIt was a dark night.\n"
    assert "Licence" not in body and "Header" not in body


@pytest.mark.case("gutenberg/no-markers", "gutenberg/empty-body")
def test_books_without_markers_or_body_are_rejected():
    assert strip_gutenberg("just some text\nwith no markers\n") == (None, "no START marker")
    no_end = "*** START OF THE PROJECT GUTENBERG EBOOK X ***\nbody\n"
    assert strip_gutenberg(no_end) == (None, "no END marker")
    empty = (
        "*** START OF THE PROJECT GUTENBERG EBOOK X ***\n\n\n"
        "*** END OF THE PROJECT GUTENBERG EBOOK X ***\n"
    )
    assert strip_gutenberg(empty) == (None, "empty body")


@pytest.mark.case("gutenberg/binary")
def test_decoding_binary_and_latin1():
    assert decode_book(b"\x00\x01\x02binary") == (None, "binary file (NUL bytes)")
    assert decode_book(b"  \n") == (None, "empty file")
    assert decode_book("caf\u00e9".encode()) == ("caf\u00e9", "utf-8")
    assert decode_book(b"caf\xe9 au lait") == ("caf\u00e9 au lait", "latin-1")


def test_split_and_windows():
    parts = split_book("a" * 90 + "b" * 10, 0.1)
    assert parts == {"train": "a" * 90, "validation": "b" * 10}
    ids = list(range(10))
    assert windows(ids, 4, 2) == [[0, 1, 2, 3, 4], [2, 3, 4, 5, 6], [4, 5, 6, 7, 8]]
    assert windows(ids, 20, 5) == []


@pytest.mark.case("gutenberg/dead-letter", "gutenberg/no-markers", "gutenberg/binary")
def test_job_rejects_counts_and_keeps_validation_out_of_vocabulary(tmp_path):
    raw = tmp_path / "raw"
    write_gutenberg_sample(raw, GutenbergSampleConfig(books=2, chars_per_book=3000, seed=3))
    body = "Ordinary words. " * 200 + "\n" + "QQQ ZZZ " * 40
    (raw / "pg5.txt").write_bytes(book_text("Odd", "Anon", body.replace("\n", "\r\n"), 5).encode())
    (raw / "nomarkers.txt").write_text("no markers in this one\n" * 20)
    (raw / "binary.txt").write_bytes(b"\x00\xff" * 100)
    cfg = GutenbergPreprocessConfig(str(raw), str(tmp_path / "out"), seq_len=20, stride=10)
    meta = preprocess_gutenberg(cfg, OPTIONS)
    assert meta["books"]["accepted"] == 3 and meta["rejected"]["count"] == 2
    assert meta["rejected"]["reasons"] == {"no START marker": 1, "binary file (NUL bytes)": 1}
    assert meta["labels_per_example"] == 20
    # 'Q' and 'Z' appear only in the last 10 % of pg5.txt: validation, not vocabulary.
    assert "Q" not in meta["vocabulary"] and meta["oov_characters"]["validation"] > 0
    texts = read_texts(tmp_path / "out", "validation")
    assert set(texts) == {"pg5.txt", "pg90001.txt", "pg90002.txt"}
    expected = sum(
        len(range(0, len(t) - 20, 10)) for t in read_texts(tmp_path / "out", "train").values()
    )
    assert meta["splits"]["train"] == expected
    dead = [
        json.loads(x)
        for f in (tmp_path / "out" / "dead_letter").glob("*.jsonl")
        for x in f.read_text().splitlines()
    ]
    assert sorted(d["reason"] for d in dead) == ["binary file (NUL bytes)", "no START marker"]


@pytest.mark.case("gutenberg/mixed-encodings")
def test_mixed_encodings_are_decoded_line_by_line():
    data = "Caf\u00e9 in UTF-8\n".encode() + b"Caf\xe9 in Latin-1\n" + "na\u00efve\n".encode()
    text, encoding = decode_book(data)
    assert encoding == "mixed"
    # Neither part turns into mojibake ("CafÃ©").
    assert text == "Caf\u00e9 in UTF-8\nCaf\u00e9 in Latin-1\nna\u00efve\n"
    assert decode_book(b"only Latin-1: caf\xe9\n") == ("only Latin-1: caf\u00e9\n", "latin-1")


@pytest.mark.case("gutenberg/dead-letter")
def test_too_many_rejected_books_fail_the_job(tmp_path):
    raw = tmp_path / "raw"
    write_gutenberg_sample(raw, GutenbergSampleConfig(books=1, chars_per_book=2000, seed=1))
    for i in range(2):
        (raw / f"bad{i}.txt").write_text("no markers here\n" * 10)
    cfg = GutenbergPreprocessConfig(str(raw), str(tmp_path / "out"), max_bad_ratio=0.5)
    with pytest.raises(BadRecordsError, match="2 of 3 records rejected"):
        preprocess_gutenberg(cfg, OPTIONS)
    dead = list((tmp_path / "out.failed" / "dead_letter").glob("*.jsonl"))
    assert not (tmp_path / "out").exists()
    assert sum(len(f.read_text().splitlines()) for f in dead) == 2


def test_traced_generation_and_scoring_match_eager_calls(tmp_path):
    """The LM evaluation runs the model as a traced graph: same numbers as eager calls.

    Scoring is over the contiguous text, each character after a book's first once: one
    eager call over each whole text is the reference (the scorer's rows begin up to 200
    characters before their first scored one, which leaves a small difference).
    """
    import numpy as np
    import tensorflow as tf

    from distrain.datasets.info import DatasetInfo
    from distrain.learning.lm import encode
    from distrain.learning.models import build_model
    from distrain.learning.predict import evaluate_language_model, generate_text, load_model

    raw, data = tmp_path / "raw", tmp_path / "data"
    write_gutenberg_sample(raw, GutenbergSampleConfig(books=2, chars_per_book=3000, seed=5))
    cfg = GutenbergPreprocessConfig(str(raw), str(data), seq_len=20, stride=10)
    preprocess_gutenberg(cfg, OPTIONS)
    info = DatasetInfo.load(data)
    model = build_model(info, "lstm-seed", seed=3)
    model.save(tmp_path / "model.keras")
    model = load_model(tmp_path / "model.keras")

    vocabulary = info.metadata["vocabulary"]
    index = {c: i for i, c in enumerate(vocabulary)}
    rng, ids, expected = np.random.default_rng(0), [index.get(c, 0) for c in "The "], []
    for _ in range(12):  # the eager reference: the whole text so far in one call per character
        logits = model(np.array([ids], dtype=np.int32), training=False).numpy()[0, -1]
        probs = np.exp(logits / 0.8 - (logits / 0.8).max())
        probs[0] = 0.0
        ids.append(int(rng.choice(len(probs), p=probs / probs.sum())))
        expected.append(vocabulary[ids[-1]])
    assert generate_text(model, vocabulary, "The ", 12, 0.8, seed=0, context=8) == "".join(expected)

    nats = count = 0.0
    for text in read_texts(data, "validation").values():
        ids = encode(text, vocabulary)
        logits = model(ids[None, :-1], training=False)[0]
        losses = tf.nn.sparse_softmax_cross_entropy_with_logits(ids[1:], logits)
        nats, count = nats + float(tf.reduce_sum(losses)), count + len(ids) - 1
    scores = evaluate_language_model(tmp_path / "model.keras", data, sample_length=5)
    assert scores["characters"] == count
    assert scores["nats_per_char"] == pytest.approx(nats / count, rel=1e-3)
    assert len(scores["sample"]) == 5
    # Each scored row's bits/char, their spread and the rows that stand out (none here).
    assert len(scores["row_bits_per_char"]) > 1 and scores["scoring_passes"] >= 1
    assert scores["row_bits_per_char_min"] <= scores["bits_per_char"] + 1e-6
    assert scores["row_bits_per_char_max"] >= scores["bits_per_char"] - 1e-6
    assert isinstance(scores["outlier_rows"], list)


@pytest.mark.case("gutenberg/utf16")
@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be"])
def test_books_with_a_unicode_byte_order_mark_are_decoded(encoding):
    text = book_text("Caf\u00e9", "Anon", "Na\u00efve text, \u201cquoted\u201d.\r\n" * 20, 7)
    data = ("\ufeff" + text).encode(encoding)
    assert b"\x00" in data  # what made them look binary
    assert decode_book(data) == (text, encoding[:6])
    body, reason = strip_gutenberg(decode_book(data)[0])
    assert reason == "ok" and "Na\u00efve text" in body
    # A mark with bytes that are not that encoding is a reason, not a crash.
    broken, why = decode_book(codecs.BOM_UTF16_LE + b"\x00\xd8a")
    assert broken is None and why.startswith("not UTF-16 despite its byte-order mark")


@pytest.mark.case("gutenberg/utf16", "gutenberg/dead-letter")
def test_read_book_transform_decodes_utf16_and_rejects_binary(tmp_path):
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from distrain.datasets.gutenberg.beam import ReadBook
    from distrain.preprocess.transforms import ByTag

    utf16 = tmp_path / "pg7.txt"
    utf16.write_bytes(book_text("Seven", "Anon", "Body text.\r\n" * 50, 7).encode("utf-16"))
    binary = tmp_path / "bin.txt"
    binary.write_bytes(b"\x00\x01\x02" * 50)
    with TestPipeline(options=PipelineOptions(OPTIONS)) as p:
        out = (
            p
            | beam.Create([[str(utf16), str(binary)]])  # one group of two books
            | beam.ParDo(ReadBook(0.1))
            | ByTag("books", "dead_letter", "stats")
        )
        names = out["books"] | beam.Map(lambda group: [book for book, _ in group])
        assert_that(names, equal_to([["pg7.txt"]]), label="Books")
        assert_that(
            out["dead_letter"] | beam.Map(lambda d: d["reason"]),
            equal_to(["binary file (NUL bytes)"]),
            label="DeadLetter",
        )
        assert_that(
            out["stats"],
            equal_to(
                [
                    {
                        "books": {"accepted": 1},
                        "encodings": {"utf-16": 1},
                        "bytes_read": utf16.stat().st_size,
                    },
                    {
                        "books": {"rejected": 1},
                        "rejected": {"binary file (NUL bytes)": 1},
                        "bytes_read": 150,
                    },
                ]
            ),
            label="Stats",
        )


@pytest.mark.case("gutenberg/utf16")
def test_job_accepts_a_utf16_book(tmp_path):
    raw = tmp_path / "raw"
    write_gutenberg_sample(raw, GutenbergSampleConfig(books=1, chars_per_book=3000, seed=2))
    body = "A book saved as UTF-16 by a word processor. " * 60
    (raw / "pg8.txt").write_bytes(book_text("Eight", "Anon", body, 8).encode("utf-16"))
    cfg = GutenbergPreprocessConfig(str(raw), str(tmp_path / "out"), seq_len=20, stride=10)
    meta = preprocess_gutenberg(cfg, OPTIONS)
    assert meta["books"] == {"accepted": 2, "rejected": 0, "encodings": {"utf-8": 1, "utf-16": 1}}
    assert read_texts(tmp_path / "out", "train")["pg8.txt"].startswith("A book saved as UTF-16")


def test_the_default_job_writes_a_file_per_group_of_books_of_range_mb(tmp_path):
    # Files of tens of MB by default, not one per book and split (issue 41).
    from distrain.datasets.gutenberg.beam import group_books, window_example
    from distrain.datasets.testing import read_back
    from distrain.preprocess.records import FRAME_BYTES

    raw = tmp_path / "raw"
    write_gutenberg_sample(raw, GutenbergSampleConfig(books=5, chars_per_book=3000, seed=4))
    sizes = {str(p): p.stat().st_size for p in raw.glob("*.txt")}
    framed = len(window_example([1] * 21)) + FRAME_BYTES
    # About 1.5 books of windows (a window every 10 characters) a group: 2, 2 and 1 books.
    range_mb = 1.5 * max(sizes.values()) / 10 * framed / 2**20
    cfg = GutenbergPreprocessConfig(
        str(raw), str(tmp_path / "out"), seq_len=20, stride=10, range_mb=range_mb
    )
    groups = group_books(sizes, cfg)
    assert [len(group) for group in groups] == [2, 2, 1]
    assert sum(groups, []) == sorted(sizes)
    meta = preprocess_gutenberg(cfg, OPTIONS)
    files = read_back(tmp_path / "out", meta["shards"])
    pairs = read_back(tmp_path / "out", meta["views"]["pairs"]["shards"])
    assert {split: len(f) for split, f in {**files, **pairs}.items()} == {
        "train": 3,
        "validation": 3,
    }
    range_bytes = int(range_mb * 2**20)
    assert all(range_bytes / 2 < size < 1.5 * range_bytes for size in files["train"][:2])
    for view in (meta, meta["views"]["pairs"]):
        shards = view["shards"]
        assert {s: sum(f["records"] for f in shards[s]) for s in shards} == view["splits"]
    exact = GutenbergPreprocessConfig(
        str(raw), str(tmp_path / "n"), seq_len=20, stride=10, num_shards=2, range_mb=range_mb
    )
    meta = preprocess_gutenberg(exact, OPTIONS)
    for shards in (meta["shards"], meta["views"]["pairs"]["shards"]):
        sizes = read_back(tmp_path / "n", shards)
        assert {split: len(s) for split, s in sizes.items()} == {"train": 2, "validation": 2}


def test_encoding_from_a_second_read_gives_what_encoding_the_read_books_gives(tmp_path):
    """The job encodes each group of books from a second read of its files (so that the
    books' texts never wait for the vocabulary in the runner's memory); its records must be
    the ones encoding the first read's books gives."""
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions
    from apache_beam.testing.test_pipeline import TestPipeline
    from apache_beam.testing.util import assert_that, equal_to

    from distrain.datasets.gutenberg.beam import BooksToWindows, ReadBook
    from distrain.preprocess.transforms import ByTag

    write_gutenberg_sample(tmp_path, GutenbergSampleConfig(books=3, chars_per_book=20_000))
    paths = sorted(str(p) for p in tmp_path.glob("*.txt"))
    groups = [paths[:1], paths[1:]]
    outputs = ["train", "validation", "pairs_train", "pairs_validation", "vocabulary"]
    with TestPipeline(options=PipelineOptions(OPTIONS)) as p:
        made = p | beam.Create(groups)
        books = made | beam.ParDo(ReadBook(0.1)) | ByTag("books", "dead_letter", "stats")
        whole = books["books"] | "Whole" >> BooksToWindows(20, 10, 1)
        reread = books["books"] | "Reread" >> BooksToWindows(
            20, 10, 1, reread=(made, ReadBook(0.1))
        )
        for name in outputs:
            want = whole[name] | f"ListWhole{name}" >> beam.combiners.ToList()
            got = reread[name] | f"ListReread{name}" >> beam.combiners.ToList()
            pair = (
                (want | f"KW{name}" >> beam.Map(lambda v: ("k", ("want", sorted(map(repr, v)))))),
                (got | f"KG{name}" >> beam.Map(lambda v: ("k", ("got", sorted(map(repr, v)))))),
            )
            same = (
                pair
                | f"Both{name}" >> beam.Flatten()
                | f"Group{name}" >> beam.GroupByKey()
                | f"Same{name}" >> beam.Map(lambda kv: dict(kv[1])["want"] == dict(kv[1])["got"])
            )
            assert_that(same, equal_to([True]), label=f"Same{name}")
        counted = whole["train"] | beam.Map(lambda batch: len(batch[1]))
        assert_that(counted | beam.combiners.Count.Globally(), equal_to([2]), label="Groups")
