"""The plain TensorFlow peers of the benchmark suite: each kind trains and cleans up."""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from benchmarks.peers import KINDS, PeerError, parse_result, run_peer, worker_threads

RUNS = {
    "single": {"workers": 1},
    "mwms": {"workers": 2},
    "async": {"workers": 2},
    "syncreplicas": {"workers": 3, "aggregate": 2},
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


def test_every_kind_has_a_run():
    assert set(RUNS) == set(KINDS)


def test_parse_result_takes_the_last_line():
    text = 'noise\nRESULT {"a": 1}\nmore\nRESULT {"a": 2}\n'
    assert parse_result(text) == {"a": 2}
    assert parse_result("nothing here") is None
    # Another thread's output written right after the object, on the same line.
    assert parse_result('RESULT {"a": 3}Exception in thread QueueRunnerThread\n') == {"a": 3}


def test_worker_threads():
    assert worker_threads(3, 2) == 3
    assert worker_threads(0, 10_000) == 1
    assert worker_threads(0, 1) == max(1, os.cpu_count() or 1)


def test_bad_arguments(tmp_path):
    with pytest.raises(ValueError, match="unknown peer kind"):
        run_peer("nope", str(tmp_path), 1, 32, "mlp", 1)
    with pytest.raises(ValueError, match="one worker"):
        run_peer("single", str(tmp_path), 2, 32, "mlp", 1)
    with pytest.raises(ValueError, match="aggregate"):
        run_peer("syncreplicas", str(tmp_path), 2, 32, "mlp", 1, aggregate=3)


@pytest.mark.slow
def test_a_failing_peer_leaves_nothing(tmp_path):
    with pytest.raises(PeerError, match="worker 0 failed") as failed:
        run_peer("single", str(tmp_path), 1, 32, "mlp", 1, timeout=120)  # no metadata.json
    message = str(failed.value)
    assert "metadata.json" in message  # the worker's stderr is in the message
    logs = re.search(r"\(logs in (\S+)\)", message)
    assert logs and Path(logs[1]).is_dir()  # kept after a failure
    shutil.rmtree(logs[1])


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(RUNS))
def test_peer_trains_and_leaves_no_process(kind, mnist_examples):
    run = RUNS[kind]
    result = run_peer(
        kind,
        str(mnist_examples),
        run["workers"],
        32,
        "mlp",
        2,
        aggregate=run.get("aggregate"),
        timeout=300,
        keep_logs=True,
    )
    assert result["kind"] == kind
    assert result["workers"] == run["workers"]
    assert result["batch"] == 32 and result["model"] == "mlp"
    assert result["examples_per_second"] > 0
    assert result["seconds"] > 0 and result["steps"] > 0
    # Training reaches the end: epochs * steps per epoch global steps (async and
    # syncreplicas workers may add a few more while the chief stops).
    assert result["steps"] >= 2 * result["steps_per_epoch"]
    assert all(code == 0 for code in result["worker_exit_codes"])
    assert result["pids"]
    for pid in result["pids"]:
        assert not _alive(pid), f"process {pid} outlived run_peer"
        assert not _group_alive(pid), f"a child of process {pid} outlived run_peer"
    logs = Path(result["logs"])
    assert parse_result((logs / "worker0.out").read_text()) is not None
    shutil.rmtree(logs)
