"""The benchmark sections measured apart: section 10 at the searched rate, each race untuned
and tuned (issue 51)."""

import json
import subprocess

from benchmarks.render import render_markdown
from tests.conftest import ROOT


def _lm_cell(text, seed, model, ngram, rate=0.004):
    return {
        "text": text,
        "package": f"{text}-pkg",
        "chars": 1000,
        "characters_scored": 100,
        "seed": seed,
        "run": "single:1",
        "ngram": "7-gram KN",
        "ngram_bits_per_char": ngram,
        "bits_per_char": model,
        "row_bits_per_char_min": model - 0.3,
        "row_bits_per_char_max": model + 0.3,
        "train_seconds": 500.0,
        "epochs": 13,
        "learning_rate": rate,
        "precision": "float32",
        "load_before": [1.0, 1.0, 1.0],
        "load_after": [2.0, 2.0, 2.0],
    }


def test_section_10_at_the_searched_rate_counts_the_cells_that_clear_the_bar(tmp_path):
    from benchmarks.prose import merge_tuned, render_tuned_texts

    def searched(text, chosen, cells):
        return {
            "text": text,
            "wall_seconds": 2000.0,
            "tuning": {
                "range": "learning_rate=1e-3..4e-3",
                "grid": [0.001, 0.002, 0.004],
                "eta": 2,
                "rungs": [{"candidates": 3, "epochs": 2}, {"candidates": 1, "epochs": 4}],
                "chosen": chosen,
                "process_seconds": 900.0,
                "candidates": [
                    {"learning_rate": 0.001, "rungs": [{"epochs": 2, "score": 1.5}]},
                    {"learning_rate": 0.002, "rungs": [{"epochs": 4, "score": 1.4}]},
                    {"learning_rate": 0.004, "rungs": [{"epochs": 2, "score": None}]},
                ],
            },
            "cells": cells,
        }

    lines = tmp_path / "tuned.jsonl"
    texts = [
        searched("a", 0.002, [_lm_cell("a", s, 1.5, 1.7, 0.002) for s in (0, 1)]),
        searched("b", 0.002, [_lm_cell("b", 0, 2.2, 2.25, 0.002)]),
    ]
    lines.write_text("".join(json.dumps(t) + "\n" for t in texts))
    results = tmp_path / "results.json"
    results.write_text(json.dumps({"prose": {"text": "kept"}}))
    merged = merge_tuned(lines, results, "A note.")
    assert merged["search"] == {
        "range": "learning_rate=1e-3..4e-3",
        "grid": 3,
        "eta": 2,
        "epochs": 4,
    }
    data = json.loads(results.read_text())["prose"]
    assert data["text"] == "kept" and data["texts_tuned"] == merged
    untuned = {"cells": [_lm_cell("a", 0, 1.65, 1.7), _lm_cell("b", 0, 2.0, 2.25)]}
    out = render_tuned_texts(merged, untuned)
    table = next(line for line in out if line.startswith("| a | "))
    # Scores are nats per character: shown in bits; a diverged candidate says so.
    assert "0.001: 2.164 (2 ep.); 0.002: 2.020 (4 ep.); 0.004: diverged (2 ep.)" in table
    assert table.endswith("| 0.002 | 900 | 2,000 |")
    assert out[-1] == (
        "At the searched rate 2 of 3 cells beat their n-gram by 0.1 bits/char or more; "
        "at the default rate (the table above) 1 of 2."
    )
    assert "A note." in out[2] and "--tune-epochs 4" in out[2]


def test_each_race_untuned_and_tuned_renders_side_by_side_and_parses_a_run(tmp_path, monkeypatch):
    from benchmarks import tuned

    def row(name, lr, acc, ttt, search=None):
        return {
            "name": name,
            "mode": name.split(":")[0],
            "learning_rate": lr,
            "accuracy": acc,
            "accuracy_interval": [acc - 0.01, acc + 0.01],
            "time_to_target": ttt,
            "time_to_target_interval": None if ttt is None else [ttt - 5, ttt + 1],
            "target_reached": "3/3" if ttt is not None else "0/3",
            "search_process_seconds": search,
            "time_to_tuned_model": None if search is None or ttt is None else ttt + 100,
            "tuning": None if search is None else {"chosen": lr},
        }

    def fake_run(cmd, capture_output, text):
        out = tmp_path / cmd[cmd.index("--output") + 1].split("/")[-1]
        tuned_run = "--tune" in cmd
        rows = [
            row("single:1", 0.003 if tuned_run else 0.001, 0.98, 2.0, 50.0 if tuned_run else None),
            row("sync:2", 0.001, 0.97, None, 60.0 if tuned_run else None),
            {"name": "majority", "mode": "baseline"},
        ]
        verdict = {"reason": "Tuned verdict." if tuned_run else "Untuned verdict."}
        (out / "comparison.json").write_text(json.dumps({"rows": rows, "verdict": verdict}))
        return subprocess.CompletedProcess(cmd, 0, "", "")

    for name in ("mnist-untuned", "mnist-tuned"):
        (tmp_path / name).mkdir()
    monkeypatch.setattr("benchmarks.common.subprocess.run", fake_run)
    found = tuned.bench_dataset("mnist", tmp_path, "single:1,sync:2", 3, "learning_rate=1e-3..3e-1")
    assert [r["name"] for r in found["tuned"]["rows"]] == ["single:1", "sync:2"]  # no baseline
    assert found["tuned"]["command"].endswith("--tune learning_rate=1e-3..3e-1")
    lines_file = tmp_path / "found.jsonl"
    lines_file.write_text(json.dumps(found) + "\n")
    results = tmp_path / "results.json"
    results.write_text("{}")
    section = tuned.merge(lines_file, results, "Quiet machine.")
    assert (section["runs"], section["repeats"]) == ("single:1,sync:2", 3)
    out = tuned.render(section)
    assert (
        "| single:1 | 0.001 | 0.9800 (0.9700–0.9900) | 2.0 (0.0–3.0) | 0.003 "
        "| 0.9800 (0.9700–0.9900) | 2.0 (0.0–3.0) | 50 | 102.0 |" in out
    )
    assert any(line.startswith("| sync:2 |") and "not reached (0/3)" in line for line in out)
    assert any(line.startswith("Untuned (") and line.endswith("Untuned verdict.") for line in out)
    assert any(line.startswith("Tuned (") and line.endswith("Tuned verdict.") for line in out)
    assert "## Each race untuned and tuned" in render_markdown_section(section)


def render_markdown_section(section: dict) -> str:
    """The whole report with only this section's results added (the rest from a full run)."""
    results = json.loads((ROOT / "benchmarks" / "results.json").read_text())
    results["tuned"] = section
    return render_markdown(results)
