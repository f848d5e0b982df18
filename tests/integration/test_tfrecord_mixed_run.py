"""A model over several inputs (float, int, two bytes) set up from the tfrecord job's
statistics and vocabularies, trained with ``distrain train`` (issue 48, points 1 and 5).

The parameter-server modes build the model in a ``tf.compat.v1`` graph: its lookup tables
(IntegerLookup, StringLookup, TextVectorization) are filled by each worker before its
first step; before that fix every async step failed with ``Table not initialized``.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from distrain.datasets.testing import BEAM_ARGS
from distrain.datasets.tfrecord.beam import TfrecordPreprocessConfig, preprocess_tfrecord
from distrain.datasets.tfrecord.sample import write_mixed_sample
from distrain.learning.models import load_info
from tests.conftest import ROOT

MODEL = f"{ROOT / 'examples' / 'mixed_model.py'}:build"


@pytest.fixture(scope="module")
def mixed_data(tmp_path_factory):
    base = tmp_path_factory.mktemp("mixed")
    write_mixed_sample(base / "raw", 1600, 400, seed=0)
    cfg = TfrecordPreprocessConfig(str(base / "raw"), str(base / "data"))
    preprocess_tfrecord(cfg, list(BEAM_ARGS))
    return base / "data"


def _train(data, out, run: str, env) -> dict:
    proc = subprocess.run(
        [sys.executable, "-m", "distrain", "train", "--data", str(data), "--output", str(out)]
        + ["--model", MODEL, "--run", run, "--epochs", "8", "--learning-rate", "0.003"],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return json.loads((out / "history.json").read_text())


def _check_saved(out, data):
    """The saved model loads without the model file, carries the Beam job's vocabularies
    and statistics, and scores the validation split well."""
    import tensorflow as tf
    import tf_keras as keras

    from distrain.learning.inputs import make_dataset

    info = load_info(data, MODEL)
    model = keras.models.load_model(out / "model.keras")
    configs = {layer.__class__.__name__: layer.get_config() for layer in model.layers}
    assert list(configs["StringLookup"]["vocabulary"]) == info.vocabulary("colour")
    assert list(configs["TextVectorization"]["vocabulary"]) == info.vocabulary("review")
    assert configs["Normalization"]["mean"] == pytest.approx(float(info.statistics["amount"].mean))
    correct = total = 0
    for x, y in make_dataset(info, "validation", 100, shuffle=False):
        guess = tf.argmax(model(x, training=False), axis=-1, output_type=tf.int32)
        correct += int(tf.reduce_sum(tf.cast(guess == y, tf.int32)))
        total += int(tf.size(y))
    return correct / total


@pytest.mark.slow
@pytest.mark.parametrize("run", ["single:1", "async:2"])
def test_a_model_over_float_int_and_bytes_inputs_trains_from_the_beam_statistics(
    mixed_data, tmp_path, cli_env, run
):
    history = _train(mixed_data, tmp_path / "out", run, cli_env)
    assert history["run"]["name"] == run
    # Four classes (0.25 by chance); the features together tell them apart well.
    assert _check_saved(tmp_path / "out", mixed_data) >= 0.8


@pytest.mark.slow
@pytest.mark.horovod
def test_the_same_model_trains_in_sync(mixed_data, tmp_path, cli_env):
    _train(mixed_data, tmp_path / "out", "sync:2", cli_env)
    assert _check_saved(tmp_path / "out", mixed_data) >= 0.8
