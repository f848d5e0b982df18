"""One writer per output folder, and nothing left behind by a killed job (issue 49).

Two jobs into one output folder used to both exit 0, one output silently lost (the
check for an empty folder and the move into place were separate steps), and a killed
preprocessing job left its ``.NAME.tmp-*`` folder for ever. The jobs here are real
processes, started together or killed with SIGKILL.
"""

from __future__ import annotations

import errno
import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

import pytest

from distrain.preprocess.failures import Failure
from distrain.preprocess.outputs import OutputBusyError, lock_path, one_writer
from distrain.preprocess.records import count_tfrecords
from distrain.preprocess.writing import staged_output
from tests.conftest import ROOT, VENV_BIN

HOST = socket.gethostname()
# A process that holds an output's lock until it is killed (prints "held" once it does).
HOLDER = (
    "import sys, time\n"
    "from distrain.preprocess.outputs import one_writer\n"
    "with one_writer(sys.argv[1]):\n"
    "    print('held', flush=True)\n"
    "    time.sleep(600)\n"
)


@pytest.fixture(scope="module")
def raw(tmp_path_factory):
    """MNIST files big enough that a preprocessing job outlasts its start-up (20,000 images)."""
    from distrain.steps import fetch

    out = tmp_path_factory.mktemp("mnist_raw_big")
    fetch("mnist", "sample", out, sample_size=20_000, seed=3)
    return out


def _start(args, env) -> subprocess.Popen:
    return subprocess.Popen(
        [str(VENV_BIN / "distrain"), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,
    )


def _finish(procs, timeout=900) -> list[str]:
    try:
        return [p.communicate(timeout=timeout)[0] for p in procs]
    finally:
        for p in procs:
            if p.poll() is None:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()


def _winner_and_loser(procs, outputs):
    codes = [p.returncode for p in procs]
    assert sorted(codes) == [0, 2], "\n\n".join(outputs)
    return (0, 1) if codes[0] == 0 else (1, 0)


def _busy_line(out, pid: int) -> str:
    return f"{out}: another job is writing this output (pid {pid} on host {HOST} since "


def _check_complete(out) -> dict:
    meta = json.loads((out / "metadata.json").read_text())
    assert meta["complete"] is True
    for split, files in meta["shards"].items():
        assert sum(count_tfrecords(out / f["file"]) for f in files) == meta["splits"][split]
    return meta


@pytest.mark.case("integrity/one-writer")
def test_two_preprocessing_jobs_into_one_folder_the_second_fails_naming_the_first(
    raw, tmp_path, cli_env
):
    out = tmp_path / "out"
    args = ["preprocess", "mnist", "--data", raw, "--output", out]
    procs = [_start(args, cli_env) for _ in range(2)]  # started together
    outputs = _finish(procs)
    winner, loser = _winner_and_loser(procs, outputs)
    last = outputs[loser].strip().splitlines()[-1]
    assert last.startswith("distrain: preprocess failed: " + _busy_line(out, procs[winner].pid))
    assert "distrain preprocess mnist" in last  # the first job's command
    # The first job's output is whole; nothing is left beside it (temporary folder, lock).
    _check_complete(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.case("integrity/one-writer")
def test_two_training_runs_into_one_output_the_second_fails_naming_the_first(
    mnist_examples, tmp_path, cli_env
):
    out = tmp_path / "run"
    args = ["train", "--data", mnist_examples, "--output", out, "--run", "single:1"]
    procs = [_start([*args, "--epochs", "1"], cli_env) for _ in range(2)]
    outputs = _finish(procs)
    winner, loser = _winner_and_loser(procs, outputs)
    last = outputs[loser].strip().splitlines()[-1]
    assert last.startswith("distrain: train single:1 failed: " + _busy_line(out, procs[winner].pid))
    assert (out / "history.json").exists() and (out / "model.keras").exists()
    assert not lock_path(out).exists()


@pytest.mark.parametrize(
    "command",
    [
        ["run", "mnist", "--runs", "single:1"],
        ["experiment", "consistency", "--scale", "tiny"],
    ],
)
@pytest.mark.case("integrity/one-writer")
def test_a_pipeline_run_into_an_output_another_job_writes_is_refused(command, tmp_path, cli_env):
    out = tmp_path / "out"
    with one_writer(out):  # this test's process is the first job
        proc = subprocess.run(
            [str(VENV_BIN / "distrain"), *command, "--output", str(out)],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=cli_env,
            timeout=300,
        )
    assert proc.returncode == 2, proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert f"failed: {_busy_line(out.resolve(), os.getpid())}" in last
    assert not out.exists() or not any(out.iterdir())  # nothing written (experiment.json)


@pytest.mark.case("integrity/one-writer", "integrity/stale-temp")
def test_a_live_jobs_temporary_folder_is_left_alone_and_a_dead_ones_removed(tmp_path, capfd):
    out = tmp_path / "out"
    live = tmp_path / ".out.tmp-0123456789ab"  # the holder's own, as staged_output names it
    live.mkdir()
    (live / "part-0.tfrecord").write_bytes(b"x" * 1000)
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(out)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        assert holder.stdout.readline() == "held\n"
        with pytest.raises(OutputBusyError, match=re.escape(_busy_line(out, holder.pid))) as caught:
            with staged_output(out):
                pass
        assert (live / "part-0.tfrecord").read_bytes() == b"x" * 1000
        assert not out.exists()
    finally:
        holder.kill()
        holder.wait()
    failure = Failure.of("preprocess", caught.value)
    assert not failure.retryable and failure.exit_code == 2
    # Its holder dead (SIGKILL, the lock file left), the folder is a dead job's.
    assert lock_path(out).exists()
    with staged_output(out) as stage:
        (stage / "a").write_text("new")
    err = capfd.readouterr().err
    assert f"distrain: removed {live} (0.0 MB), left by a job for {out}" in err
    assert f"(pid {holder.pid} on host {HOST} since " in err
    assert (out / "a").read_text() == "new"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


@pytest.mark.case("integrity/stale-temp")
def test_a_killed_jobs_temporary_folder_is_removed_on_the_next_run(raw, tmp_path, cli_env, capfd):
    from distrain.steps import preprocess

    out = tmp_path / "out"
    proc = _start(["preprocess", "mnist", "--data", raw, "--output", out], cli_env)
    deadline = time.monotonic() + 600
    try:
        # Killed mid-write: once its temporary folder holds a file.
        while not any(f for d in tmp_path.glob(".out.tmp-*") for f in d.rglob("*.tfrecord")):
            assert proc.poll() is None, proc.communicate()[0]
            assert time.monotonic() < deadline, "the job wrote nothing in 10 minutes"
            time.sleep(0.02)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    left = sorted(tmp_path.glob(".out.tmp-*"))
    assert len(left) == 1 and not out.exists()

    preprocess("mnist", raw, out)
    err = capfd.readouterr().err
    assert f"distrain: removed {left[0]} (" in err
    assert f"(pid {proc.pid} on host {HOST} since " in err  # the killed job, named
    assert not left[0].exists()
    _check_complete(out)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_one_process_cannot_hold_an_output_twice_and_the_lock_file_goes_with_the_job(
    tmp_path, monkeypatch
):
    out = tmp_path / "out"
    monkeypatch.chdir(tmp_path)
    with one_writer(out):
        with pytest.raises(OutputBusyError, match="this same process"):
            with one_writer("out"):  # another spelling, the same folder
                pass
    assert not lock_path(out).exists()
    with one_writer(out):  # free again
        pass


@pytest.mark.parametrize(
    "broken, code, why",
    [
        ("open", errno.EROFS, "cannot write it"),  # a read-only parent (a mount point)
        ("lockf", errno.ENOLCK, "no locks there"),  # an NFS mount without lockd
    ],
)
def test_where_no_lock_can_be_had_the_job_says_so_and_goes_on(
    broken, code, why, tmp_path, capfd, monkeypatch
):
    from distrain.preprocess import outputs

    module = outputs.os if broken == "open" else outputs.fcntl
    real = getattr(module, broken)

    def fail(target, *args):
        if broken == "lockf" or str(target).endswith(".lock"):
            raise OSError(code, os.strerror(code))
        return real(target, *args)

    out = tmp_path / "out"
    with monkeypatch.context() as patch:
        patch.setattr(module, broken, fail)
        with staged_output(out) as stage:
            (stage / "a").write_text("new")
    assert f"distrain: {lock_path(out)}: {why}: {os.strerror(code)}; nothing stops" in (
        capfd.readouterr().err
    )
    assert (out / "a").read_text() == "new"
    assert lock_path(out) not in outputs._HELD  # released with the job


# A process that takes an output's lock, prints "locked", and writes its record only later:
# the moment between the two, which a job started at the same time can meet.
LATE_RECORDER = (
    "import fcntl, json, os, sys, time\n"
    "from distrain.preprocess.outputs import lock_path\n"
    "path = lock_path(sys.argv[1])\n"
    "path.parent.mkdir(parents=True, exist_ok=True)\n"
    "fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)\n"
    "fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)\n"
    "print('locked', flush=True)\n"
    "time.sleep(0.5)\n"
    "record = {'pid': os.getpid(), 'host': 'h', 'started': 0, 'command': 'distrain x'}\n"
    "os.pwrite(fd, json.dumps(record).encode(), 0)\n"
    "time.sleep(600)\n"
)


@pytest.mark.case("integrity/one-writer")
def test_a_job_refused_before_the_holder_recorded_itself_waits_to_name_it(tmp_path, cli_env):
    # Two jobs started together: the second can find the lock taken and its file still
    # empty. It waits for the holder's record instead of naming "a job that has not
    # recorded itself yet" (CI met it under load).
    out = tmp_path / "out"
    holder = subprocess.Popen(
        [sys.executable, "-c", LATE_RECORDER, str(out)],
        stdout=subprocess.PIPE,
        text=True,
        env=cli_env,
        start_new_session=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(OutputBusyError) as busy, one_writer(out):
            pass
        assert f"(pid {holder.pid} on host h since " in str(busy.value)
    finally:
        os.killpg(holder.pid, signal.SIGKILL)
        holder.wait()
