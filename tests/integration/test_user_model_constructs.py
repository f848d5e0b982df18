"""The constructs of a real model file (issue 48, point 1) trained in the modes, then evaluated.

``tests/fakes/constructs_model.py``: TF ops on a functional model's tensors, a ``Lambda``
layer, a registered and an unregistered custom layer, a layer in mixed precision, dropout,
and subclassed ``keras.Model``s (one whose constructor takes ``info``). Each trains in the
parameter-server modes (where a TF op's constant failed to be placed and a subclassed
model's variables were never shared) and in ``single``; the evaluation step then loads the
saved model from another folder, as another pod would, without the user's file beside it.
"""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import sys

import pytest

from distrain.steps import evaluate, train
from tests.conftest import ROOT

CONSTRUCTS = ROOT / "tests" / "fakes" / "constructs_model.py"

MODES = ["single:1", "async:2", "syncreplicas:3:aggregate=2", "ssp:2:staleness=2", "easgd:2:tau=4"]


@pytest.mark.slow
@pytest.mark.parametrize("run", MODES)
@pytest.mark.parametrize("function", ["functional", "subclassed"])
def test_a_model_of_every_construct_trains_in_the_mode_and_is_evaluated_elsewhere(
    function, run, tmp_path, mnist_examples
):
    out = tmp_path / "run"
    history = train(mnist_examples, out, run, model=f"{CONSTRUCTS}:{function}", epochs=1)
    assert all(math.isfinite(e["loss"]) for e in history["epochs"])
    moved = tmp_path / "elsewhere"  # the evaluation step's view: another place, another pod
    shutil.move(out, moved)
    report = evaluate(mnist_examples, moved)
    accuracy = report["evaluation"]["accuracy"]
    assert 0.0 <= accuracy <= 1.0 and math.isfinite(report["evaluation"]["macro_f1"])
    # The same model the run trained: its profile counts its weights, the subclassed one's too.
    assert report["evaluation"]["model_profile"]["parameters"] == 50_890


USER_TFRECORD_MODEL = """
import tensorflow as tf
import tf_keras as keras


@keras.utils.register_keras_serializable(package="team")
class Standardise(keras.layers.Layer):
    def __init__(self, scale=1.0, **kwargs):
        super().__init__(**kwargs)
        self.scale = scale

    def call(self, x):
        return (x - tf.reduce_mean(x, axis=-1, keepdims=True)) * self.scale

    def get_config(self):
        return {**super().get_config(), "scale": self.scale}


def build(info, seed):
    inputs = info.feature_spec.keras_inputs(keras)
    parts = [keras.layers.Flatten()(tf.cast(t, tf.float32)) for t in inputs.values()]
    x = keras.layers.Concatenate()(parts)
    x = Standardise(0.5)(x * 2.0 + 1.0)
    x = keras.layers.Dense(32, activation="relu")(x)
    x = keras.layers.Dropout(0.1)(x)
    return keras.Model(inputs, keras.layers.Dense(info.num_classes)(x))
"""


@pytest.mark.slow
@pytest.mark.horovod
def test_a_custom_layer_and_tf_op_model_runs_the_whole_pipeline_in_the_modes(tmp_path, cli_env):
    from distrain.datasets.tfrecord.sample import SPEC, sample_records, write_frames

    model_file = tmp_path / "team_model.py"
    model_file.write_text(USER_TFRECORD_MODEL)
    raw = tmp_path / "raw"
    raw.mkdir()
    (raw / "features.json").write_text(json.dumps(SPEC))
    write_frames(raw / "train-00000-of-00001.tfrecord", sample_records(800, seed=11))
    write_frames(raw / "test-00000-of-00001.tfrecord", sample_records(200, seed=12))
    out = tmp_path / "out"
    runs = "single:1,sync:2,async:2,syncreplicas:3:aggregate=2,ssp:2:staleness=2,easgd:2:tau=4"
    done = subprocess.run(
        [sys.executable, "-m", "distrain", "run", "tfrecord", "--data", str(raw),
         "--output", str(out), "--runs", runs, "--epochs", "1",
         "--model", f"{model_file}:build"],
        capture_output=True, text=True, env=cli_env, timeout=1800,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    rows = {r["mode"]: r for r in json.loads((out / "comparison.json").read_text())["rows"]}
    assert set(rows) == {"single", "sync", "async", "syncreplicas", "ssp", "easgd", "baseline"}
    for mode, row in rows.items():
        assert math.isfinite(row["accuracy"]) and 0.0 <= row["accuracy"] <= 1.0, (mode, row)
