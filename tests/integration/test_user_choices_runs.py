"""A model file's own AdamW, label-smoothed loss and class weights through the modes."""

import json
import math
import subprocess

import pytest

from tests.conftest import ROOT, VENV_BIN

EXAMPLE = ROOT / "examples" / "my_training.py"


@pytest.mark.slow
@pytest.mark.parametrize(
    "run",
    [
        "single:1",
        pytest.param("sync:2", marks=pytest.mark.horovod),
        "async:2",
        "syncreplicas:3:aggregate=2",
        "ssp:2:staleness=2",
        "easgd:2:tau=4",
        pytest.param("avg:2:period=8", marks=pytest.mark.horovod),
    ],
)
def test_the_users_optimizer_and_loss_train_in_every_mode(run, tmp_path, mnist_examples, cli_env):
    out = tmp_path / "o"
    done = subprocess.run(
        [
            str(VENV_BIN / "python"),
            "-m",
            "distrain",
            "train",
            "--data",
            str(mnist_examples),
            "--output",
            str(out),
            "--run",
            run,
            "--model",
            f"{EXAMPLE}:build",
            "--epochs",
            "2",
        ],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    history = json.loads((out / "history.json").read_text())
    chosen = history["user_choices"]
    assert chosen["optimizer"]["class_name"] == "AdamW"
    assert chosen["loss"]["config"]["label_smoothing"] == 0.1
    assert len(chosen["class_weights"]) == 10
    losses = [e["loss"] for e in history["epochs"]] + [e["val_loss"] for e in history["epochs"]]
    assert all(math.isfinite(v) for v in losses)
    # It learnt: ten classes, chance is 0.1.
    assert max(e["val_accuracy"] for e in history["epochs"]) > 0.3
    assert "the model file's AdamW" in done.stdout + done.stderr
