"""A training run whose loss turns NaN stops at that step, in every mode (issue 49).

The loss is made non-finite deterministically: a learning rate of 1e30 makes Adam's first
update move every weight by about 1e30, and the second step's logits overflow, so the
second step's loss is NaN (in every worker or rank that computes one). ``distrain train``
then exits 2 with one line naming the run, the process, the epoch and the step, and no
checkpoint or ``model.keras`` is written; ``--on-nan continue`` trains on, saying so.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from .probes import assert_no_orphans

DIVERGES = ["--learning-rate", "1e30", "--batch-size", "32"]

# The last line: `distrain train` failed, with the process's own line (the run, who, where).
LINE = re.compile(
    r"^distrain: train (?P<spec>\S+) failed: .*\[(?P<run>[^\]]+)\] (?P<who>rank \d|worker:\d): "
    r"the training loss is (nan|inf|-inf) at epoch (?P<epoch>\d+), step (?P<step>\d+) .*on_nan=stop"
)


def _train(data, out, run: str, *extra: str, env) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distrain", "train", "--data", str(data), "--output", str(out)]
        + ["--run", run, "--epochs", "2", *DIVERGES, *extra],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )


# Every mode; those of several processes are slow (Horovod ranks, a parameter-server
# cluster), and the Horovod ones need it built.
RUNS = [
    pytest.param("single:1", "rank 0", id="single"),
    pytest.param("sync:2", "rank", marks=[pytest.mark.slow, pytest.mark.horovod], id="sync"),
    pytest.param(
        "sync:2:min=1", "rank", marks=[pytest.mark.slow, pytest.mark.horovod], id="elastic"
    ),
    pytest.param("async:2", "worker", marks=pytest.mark.slow, id="async"),
    pytest.param("syncreplicas:2", "worker", marks=pytest.mark.slow, id="syncreplicas"),
    pytest.param("ssp:2:staleness=1", "worker", marks=pytest.mark.slow, id="ssp"),
    pytest.param("easgd:2:tau=1", "worker", marks=pytest.mark.slow, id="easgd"),
    pytest.param("avg:2:period=4", "rank", marks=[pytest.mark.slow, pytest.mark.horovod], id="avg"),
    pytest.param("tensor:2", "rank", marks=[pytest.mark.slow, pytest.mark.horovod], id="tensor"),
    pytest.param(
        "pipeline:2", "rank 1", marks=[pytest.mark.slow, pytest.mark.horovod], id="pipeline"
    ),
    pytest.param("hybrid:1:2", "rank", marks=[pytest.mark.slow, pytest.mark.horovod], id="hybrid"),
]


@pytest.mark.case("train/non-finite-loss")
@pytest.mark.parametrize("run, who", RUNS)
def test_a_nan_loss_stops_the_run_with_exit_2_and_one_line(
    mnist_examples, tmp_path, cli_env, run, who
):
    out = tmp_path / "out"
    proc = _train(mnist_examples, out, run, env=cli_env)
    said = proc.stdout + proc.stderr
    assert proc.returncode == 2, said[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    found = LINE.match(last)
    assert found, last
    assert found["run"].startswith(found["spec"]), last  # the run's name (pipeline:2:micro=4)
    assert found["who"].startswith(who), last
    # The update made from the first step already sends the second step's loss to NaN.
    # A parameter-server worker's step is the update it read plus one, and a step's push
    # runs in the same call as its loss: both workers' first updates (finite losses) and
    # the other's NaN step may be applied before this worker's NaN step reads, so its
    # step is 2 to 4; whichever worker exits first names the run's line.
    assert found["epoch"] == "1", last
    assert found["step"] == "2" or (who == "worker" and found["step"] in ("3", "4")), last
    # Nothing written after it: no model, no history, no checkpoint (the first is at the
    # epoch's end).
    assert not (out / "model.keras").exists()
    assert not (out / "history.json").exists()
    assert not list((out / "checkpoints").glob("ckpt-*.index"))
    assert_no_orphans(out)


@pytest.mark.case("train/non-finite-loss")
def test_continue_trains_on_and_the_history_says_so(mnist_examples, tmp_path, cli_env):
    out = tmp_path / "out"
    proc = _train(mnist_examples, out, "single:1", "--on-nan", "continue", env=cli_env)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    assert "training goes on (on_nan=continue)" in proc.stdout
    history = json.loads((out / "history.json").read_text())
    assert history["on_nan"] == "continue"
    assert history["first_non_finite_loss"] == {"epoch": 1, "step": 2, "who": "rank 0"}
    # Every step after the first: the weights stay NaN.
    assert history["non_finite_losses"] == history["steps"] - 1
