"""``distrain run tfrecord --data DIR``: the user's TFRecords through the whole pipeline."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from distrain.datasets.tfrecord.sample import SPEC, sample_records, write_frames
from distrain.preprocess.records import example, float_feature, int64_feature


@pytest.mark.slow
@pytest.mark.horovod
def test_user_tfrecords_train_in_each_mode_above_a_learnable_bar(tmp_path, cli_env):
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "features.json").write_text(json.dumps(SPEC))
    train = sample_records(1200, seed=11)
    # One malformed record: x has 7 values where features.json says 8.
    malformed = example(
        {"x": float_feature([0.0] * 7), "bucket": int64_feature([1]), "label": int64_feature([0])}
    )
    write_frames(raw / "train-00000-of-00002.tfrecord", train[:600])
    write_frames(raw / "train-00001-of-00002.tfrecord.gz", train[600:] + [malformed], gzipped=True)
    write_frames(raw / "test-00000-of-00001.tfrecord", sample_records(300, seed=12))
    out = tmp_path / "out"
    runs = "single:1,sync:2,async:2,avg:2:period=8"
    proc = subprocess.run(
        [sys.executable, "-m", "distrain", "run", "tfrecord", "--data", str(raw)]
        + ["--output", str(out), "--runs", runs, "--epochs", "4"],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    comparison = json.loads((out / "comparison.json").read_text())
    rows = {row["mode"]: row for row in comparison["rows"]}
    assert set(rows) == {"single", "sync", "async", "avg", "baseline"}
    assert rows["baseline"]["accuracy"] == pytest.approx(0.25, abs=0.05)
    for mode in ("single", "sync", "async", "avg"):
        assert rows[mode]["accuracy"] >= 0.8, (mode, rows[mode]["accuracy"])
    # The malformed record is a dead letter naming its file and number.
    letters = [
        json.loads(line)
        for path in (out / "kfp").rglob("dead_letter/*.jsonl")
        for line in path.read_text().splitlines()
    ]
    assert letters == [
        {
            "file": "train-00001-of-00002.tfrecord.gz",
            "record": 601,
            "reason": "feature 'x': 7 values, features.json says 8 (shape [8])",
        }
    ]
