"""Section 10 of the benchmark suite: the book it makes, time to the n-gram, its table."""

import gzip
import math

import pytest

from benchmarks.prose import (
    END,
    START,
    render_prose,
    render_texts,
    time_to_bits,
    write_prose_book,
)
from distrain.datasets.gutenberg.beam import strip_gutenberg


def test_the_prose_book_is_whole_lines_between_gutenberg_markers(tmp_path):
    source = tmp_path / "text.gz"
    source.write_bytes(gzip.compress(("line one\nline two\n" * 100).encode()))
    used = write_prose_book(tmp_path / "books", chars=25, source=source)
    book = (tmp_path / "books" / "jargon.txt").read_text()
    assert START in book and END in book
    assert used["chars"] == 18 and used["source_chars"] == 1800 and len(used["sha256"]) == 64
    body, status = strip_gutenberg(book)
    assert status == "ok" and body.strip("\n") == "line one\nline two"


def test_time_to_the_ngram_is_interpolated_between_epochs():
    ln2 = math.log(2)
    epochs = [
        {"val_loss": 2.5 * ln2, "wall_seconds": 100.0},
        {"val_loss": 2.1 * ln2, "wall_seconds": 200.0},
        {"val_loss": 1.9 * ln2, "wall_seconds": 300.0},
    ]
    assert time_to_bits(epochs, 2.0) == pytest.approx(250.0)
    assert time_to_bits(epochs, 2.6) == 100.0
    assert time_to_bits(epochs, 1.5) is None


def test_the_prose_table_sets_each_run_against_the_ngram():
    section = {
        "text": {"source": "/x.gz", "sha256": "ab" * 32, "source_chars": 1000, "chars": 900},
        "characters_scored": 89,
        "epochs": 2,
        "baseline": {"name": "7-gram KN", "bits_per_char": 2.0, "by_order": {"3": 2.9}},
        "runs": [
            {
                "run": "single:1",
                "model": "lstm",
                "bits_per_char": 1.85,
                "accuracy": 0.5,
                "epochs": 2,
                "train_seconds": 300.0,
                "val_bits": [2.2, 1.85],
                "wall_seconds": [150.0, 300.0],
                "seconds_to_ngram": 250.0,
            }
        ],
        "wall_seconds": 700.0,
        "load_before": [0.5, 0, 0],
        "load_after": [1.5, 0, 0],
    }
    md = "\n".join(render_prose(section))
    assert "## 10. Real prose" in md
    assert "| 7-gram KN | baseline | 2.000 | — |" in md
    assert "| single:1 | lstm | 1.850 | -0.150 | 0.5000 | 2 | 300 | 250 |" in md
    assert "- single:1: 2.200 (150), 1.850 (300)" in md


def test_the_text_table_sets_each_cell_against_its_own_ngram():
    cell = {
        "text": "fortunes",
        "package": "fortunes",
        "chars": 999_973,
        "characters_scored": 99_998,
        "seed": 1,
        "run": "single:1",
        "bits_per_char": 2.2,
        "row_bits_per_char_min": 1.9,
        "row_bits_per_char_max": 2.6,
        "ngram": "7-gram KN",
        "ngram_bits_per_char": 2.35,
        "train_seconds": 590.0,
        "epochs": 13,
        "precision": "bfloat16",
        "load_before": [1.0, 0, 0],
        "load_after": [2.0, 0, 0],
    }
    lines = render_texts([cell])
    assert lines[2] == (
        "| fortunes (`fortunes`) | 999,973 (99,998) | 1 | single:1 | 2.200 | 1.90-2.60 "
        "| 7-gram KN 2.350 | -0.150 | 590 | 13 | bfloat16 | 1.0/2.0 |"
    )
    del cell["precision"]  # cells measured before the setting existed trained in float32
    assert "| 13 | float32 | 1.0/2.0 |" in render_texts([cell])[2]


def test_measuring_section_10_again_keeps_its_texts_table(tmp_path, monkeypatch):
    # The texts x seeds table is measured apart (an hour and a half); a suite run, whole or
    # `--only prose`, measures the Jargon File run again and must not drop the table.
    import json

    from benchmarks import suite
    from benchmarks.common import SuiteConfig

    texts = {"cells": [{"text": "t", "seed": 0}], "measured": "2026-01-02", "note": "n"}
    previous = tmp_path / "results.json"
    previous.write_text(json.dumps({"prose": {"runs": ["old"], "texts": texts}}))
    monkeypatch.setattr(suite, "bench_prose", lambda quick, tmp, log: {"runs": ["new"]})
    monkeypatch.setattr(suite, "machine", lambda cfg: {"date": "2026-01-03"})
    section = suite._prose(SuiteConfig(), tmp_path, previous)
    assert section == {"runs": ["new"], "measured": "2026-01-03", "texts": texts}
    assert "texts" not in suite._prose(SuiteConfig(), tmp_path, tmp_path / "none.json")
    previous.write_text(json.dumps({"prose": None}))
    assert "texts" not in suite._prose(SuiteConfig(), tmp_path, previous)
