"""``distrain run tfrecord --model FILE.py:build@regression``: a float label, made with
TensorFlow's own writer, through the whole pipeline in single, sync and async (issue 48,
point 3's acceptance)."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest

USER_MODEL = """
import tf_keras as keras


def build(info, seed):
    inputs = info.feature_spec.keras_inputs(keras)
    init = keras.initializers.GlorotUniform(seed)
    x = keras.layers.Dense(16, activation="relu", kernel_initializer=init)(inputs["x"])
    return keras.Model(inputs, keras.layers.Dense(1)(x))
"""


def _write(path, x: np.ndarray, y: np.ndarray) -> None:
    import tensorflow as tf

    with tf.io.TFRecordWriter(str(path)) as writer:
        for features, target in zip(x, y, strict=True):
            feature = {
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=features)),
                "y": tf.train.Feature(float_list=tf.train.FloatList(value=[target])),
            }
            writer.write(
                tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()
            )


@pytest.mark.slow
@pytest.mark.horovod
def test_a_regression_runs_in_single_sync_and_async_and_beats_the_mean_predictor(tmp_path, cli_env):
    model_file = tmp_path / "team_regression.py"
    model_file.write_text(USER_MODEL)
    raw = tmp_path / "raw"
    raw.mkdir()
    spec = {
        "features": {"x": {"dtype": "float32", "shape": [2]}, "y": {"dtype": "float32"}},
        "label": "y",
    }
    (raw / "features.json").write_text(json.dumps(spec))
    rng = np.random.default_rng(7)
    for name, n in (("train-00000-of-00001.tfrecord", 800), ("test-00000-of-00001.tfrecord", 300)):
        x = rng.normal(size=(n, 2)).astype(np.float32)
        _write(raw / name, x, 2 * x[:, 0] - x[:, 1] + rng.normal(0, 0.3, n))
    out = tmp_path / "out"
    proc = subprocess.run(
        [sys.executable, "-m", "distrain", "run", "tfrecord", "--data", str(raw)]
        + ["--output", str(out), "--runs", "single:1,sync:2,async:2", "--epochs", "5"]
        + ["--learning-rate", "0.03", "--model", f"{model_file}:build@regression"],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=1500,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    comparison = json.loads((out / "comparison.json").read_text())
    rows = {row["mode"]: row for row in comparison["rows"]}
    assert set(rows) == {"single", "sync", "async", "baseline"}
    for row in rows.values():
        assert row["task"] == "regression"
        for key in ("mse", "mae", "r2"):
            low, high = row[f"{key}_interval"]
            assert low <= row[key] <= high, (row["name"], key)
    base = rows["baseline"]
    assert base["name"] == "mean"
    # The mean predictor: about the labels' variance (5 + 0.09), R² about 0.
    assert 3.0 < base["mse"] < 8.0 and abs(base["r2"]) < 0.1
    baseline_report = next(r for r in comparison["runs"] if r["run"]["mode"] == "baseline")
    train_mean = baseline_report["evaluation"]["train_label_mean"]
    assert abs(train_mean) < 0.5
    for mode in ("single", "sync", "async"):
        # Measurably better than the mean predictor: the intervals separate.
        assert rows[mode]["mse_interval"][1] < base["mse_interval"][0], rows[mode]
        assert rows[mode]["r2"] > 0.5, (mode, rows[mode]["r2"])
    verdict = comparison["verdict"]
    assert verdict["criterion"] == "mse"
    assert verdict["reason"].startswith(
        "A regression has no accuracy target; decided on test MSE (lower is better)."
    )
    assert "MSE" in proc.stdout and "mean      baseline" in proc.stdout
