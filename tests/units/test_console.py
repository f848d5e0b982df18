"""What people see: `distrain train`'s closing line; training processes without TF's notices."""

from __future__ import annotations

import math
import os
import subprocess
import sys

from distrain.console import tensorboard_command, train_summary
from tests.conftest import ROOT


def _history(**kw) -> dict:
    epochs = [
        {"epoch": 1, "val_loss": 0.9, "val_accuracy": 0.7},
        {"epoch": 2, "val_loss": None, "val_accuracy": None},
        {"epoch": 3, "val_loss": 0.5, "val_accuracy": 0.93125},
    ]
    history = {
        "run": {"name": "sync:2", "dataset": "mnist", "model": "mlp"},
        "epochs": epochs,
        "examples_per_second": 12345.6,
        "train_seconds": 41.7,
        "config": {"learning_rate": 0.001},
    }
    return {**history, **kw}


def test_train_ends_with_one_line_naming_the_run_its_quality_speed_and_files(tmp_path):
    line = train_summary(_history(), tmp_path)
    assert line == (
        f"sync:2: 3 epoch(s), val accuracy 0.9313, 12,346 examples/s, 42 s; history in "
        f"{tmp_path / 'history.json'}, curves in {tmp_path / 'tensorboard'}"
    )
    assert "\n" not in line and "{" not in line


def test_a_language_models_quality_is_its_bits_per_character(tmp_path):
    history = _history(run={"name": "single:1", "dataset": "gutenberg", "model": "lstm"})
    history["until_plateau"] = {"stopped_early": True}
    line = train_summary(history, tmp_path)
    assert f"val {0.5 / math.log(2):.3f} bits/char" in line
    assert "3 epoch(s) (stopped at the plateau)" in line


def test_the_tensorboard_command_quotes_its_folder(tmp_path):
    assert tensorboard_command(tmp_path / "my runs") == f"tensorboard --logdir '{tmp_path}/my runs'"


_IMPORT = (
    "from distrain.train.runtime import import_tensorflow; tf = import_tensorflow(); "
    "import sys; print('after', tf.constant(1).numpy(), file=sys.stderr)"
)


def _stderr(**env) -> str:
    full = dict(os.environ, PYTHONPATH=str(ROOT), TF_ENABLE_ONEDNN_OPTS="1", **env)
    full.pop("DISTRAIN_DEBUG", None)
    full.update(env)
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORT], capture_output=True, text=True, env=full, timeout=300
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stderr


def test_training_processes_load_tensorflow_without_its_start_up_notices():
    quiet = _stderr()
    assert "after 1" in quiet
    assert "absl::InitializeLog" not in quiet and "oneDNN custom operations" not in quiet
    # With --debug (the launcher passes it on to its processes) they are all there.
    loud = _stderr(DISTRAIN_DEBUG="1")
    assert "absl::InitializeLog" in loud and "oneDNN custom operations are on" in loud


def test_run_with_tensorboard_prints_the_command_that_shows_its_runs(monkeypatch, tmp_path, capsys):
    from distrain.cli import main

    def run_locally(pipeline, params, out):
        raise KeyboardInterrupt  # the command is printed before any step runs

    monkeypatch.setattr("distrain.commands.pipelines.run_locally", run_locally)
    out = tmp_path / "out"
    assert main(["run", "mnist", "--output", str(out), "--tensorboard"]) == 130
    assert (
        f"watch the runs in TensorBoard: tensorboard --logdir {out / 'kfp'}"
        in capsys.readouterr().out
    )
    assert main(["run", "mnist", "--output", str(out)]) == 130
    assert "TensorBoard" not in capsys.readouterr().out
