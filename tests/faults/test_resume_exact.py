"""Resume as good as never stopping (issue 37, point 7).

Keras' ``BackupAndRestore`` promises that a run killed and resumed ends where an unbroken
run would. These tests hold distrain to it, judged by what the runs write and nothing of
their own accounting: the final weights of ``model.keras`` of a run killed (SIGKILL of
the whole process group, no cleanup) and resumed equal those of an unbroken run.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

EPOCHS, BATCH, EVERY = 2, 32, 5
RUNS = ["single:1", pytest.param("sync:2", marks=pytest.mark.horovod)]


def _command(data: Path, out: Path, run: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "distrain",
        "train",
        "--data",
        str(data),
        "--output",
        str(out),
        "--run",
        run,
        "--epochs",
        str(EPOCHS),
        "--batch-size",
        str(BATCH),
        "--checkpoint-every-steps",
        str(EVERY),
    ]


def _train(data: Path, out: Path, run: str) -> None:
    subprocess.run(_command(data, out, run), check=True, capture_output=True, timeout=300)


def _kill_when(data: Path, out: Path, run: str, ready) -> list[str]:
    """Starts a run and SIGKILLs its process group once ``ready(names)`` holds."""
    proc = subprocess.Popen(
        _command(data, out, run),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    folder = out / "checkpoints"
    deadline = time.monotonic() + 240
    names: list[str] = []
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            try:
                names = os.listdir(folder)
            except FileNotFoundError:
                names = []
            if ready(names):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                return names
            time.sleep(0.001)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    pytest.fail(f"{run}: the moment to kill never came (checkpoints seen: {sorted(names)})")


def _steps(names: list[str]) -> list[int]:
    return sorted(
        int(n[len("ckpt-") : -len(".index")])
        for n in names
        if n.startswith("ckpt-") and n.endswith(".index")
    )


def _weights(out: Path) -> list[np.ndarray]:
    import tf_keras

    return tf_keras.models.load_model(out / "model.keras", compile=False).get_weights()


def _assert_same_weights(a: Path, b: Path) -> None:
    wa, wb = _weights(a), _weights(b)
    assert len(wa) == len(wb)
    worst = max(float(np.max(np.abs(x - y))) for x, y in zip(wa, wb, strict=True))
    assert worst <= 1e-6, f"final weights differ by up to {worst:g} from the unbroken run's"


@pytest.fixture(scope="module")
def unbroken(mnist_examples, tmp_path_factory):
    """One unbroken run per mode, made once for the module."""
    made = {}

    def get(run: str) -> Path:
        if run not in made:
            out = tmp_path_factory.mktemp("unbroken") / run.replace(":", "-")
            _train(mnist_examples, out, run)
            made[run] = out
        return made[run]

    return get


def _history(out: Path) -> dict:
    import json

    return json.loads((out / "history.json").read_text())


@pytest.mark.slow
@pytest.mark.case("train/resume-exact")
@pytest.mark.parametrize("run", RUNS)
def test_killed_mid_epoch_and_resumed_ends_with_the_unbroken_runs_weights(
    mnist_examples, tmp_path, unbroken, run
):
    full = unbroken(run)
    per_epoch = _history(full)["steps"] // EPOCHS
    out = tmp_path / "killed"

    def mid_second_epoch(names):
        # The state file commits a save: the newest checkpoint it names, mid-epoch.
        try:
            state = (out / "checkpoints" / "checkpoint").read_text()
        except FileNotFoundError:
            return False
        found = re.search(r'^model_checkpoint_path: "ckpt-(\d+)"', state, re.M)
        step = int(found.group(1)) if found else 0
        return step > per_epoch and 0 < step % per_epoch <= per_epoch // 2

    _kill_when(mnist_examples, out, run, mid_second_epoch)
    _train(mnist_examples, out, run)
    resumed = _history(out)["resumed_at_steps"]
    assert len(resumed) == 1 and resumed[0] % per_epoch, f"not resumed mid-epoch: {resumed}"
    assert _history(out)["steps"] == _history(full)["steps"]
    _assert_same_weights(full, out)


@pytest.mark.slow
@pytest.mark.case("train/resume-exact")
@pytest.mark.parametrize("run", RUNS)
def test_killed_while_saving_a_checkpoint_resumes_from_the_one_before(
    mnist_examples, tmp_path, unbroken, run
):
    full = unbroken(run)
    out = tmp_path / "killed"

    # TensorFlow writes a checkpoint into ckpt-N_temp, then renames it into place: a kill
    # while that folder exists is a kill during the save. After a first complete one.
    def saving(names):
        return bool(_steps(names)) and any(n.endswith("_temp") for n in names)

    seen = _kill_when(mnist_examples, out, run, saving)
    cut_short = [n for n in seen if n.endswith("_temp")]
    _train(mnist_examples, out, run)
    resumed = _history(out)["resumed_at_steps"]
    assert len(resumed) == 1 and resumed[0] <= max(_steps(seen)), (resumed, seen)
    # What the cut-short save left is gone; the run's end is the unbroken run's.
    left = os.listdir(out / "checkpoints")
    assert not [n for n in left if n in cut_short], left
    _assert_same_weights(full, out)
