"""Failures: one line that says where and what, permanent or transient, an error file per step."""

import csv
import json
import subprocess
import sys
import time
import urllib.error

import pytest

from distrain.base.errors import ConfigError, TrainingError
from distrain.base.gate import GateFailed
from distrain.datasets.info import DataError
from distrain.datasets.mnist.idx import IdxFormatError
from distrain.preprocess.download import ChecksumError
from distrain.preprocess.failures import (
    ERROR_FILE,
    Failure,
    StepFailed,
    classify,
    executor_error_path,
    local_retries_stop_on_permanent_errors,
    one_line,
    read_error,
    step_errors,
)
from distrain.steps import StepError
from tests.conftest import VENV_BIN


class ApiException(Exception):  # what the kubernetes and kfp clients raise, by name
    def __init__(self, status):
        super().__init__(f"({status})")
        self.status = status


@pytest.mark.parametrize(
    "exc, transient",
    [
        (IdxFormatError("x.gz: corrupt or truncated gzip stream"), False),
        (ConfigError("unknown mode 'ring'"), False),
        (StepError("missing mnist file"), False),
        (DataError("metadata.json: not found"), False),
        (FileNotFoundError(2, "No such file", "/x"), False),
        (PermissionError(13, "denied"), False),
        (GateFailed("single:1: accuracy>=0.99 (got 0.98)"), False),
        (ApiException(404), False),
        (ApiException(403), False),
        (TrainingError("[sync:2] training failed: mpirun exited with code 137"), True),
        (ConnectionResetError("reset by peer"), True),
        (TimeoutError("timed out"), True),
        (urllib.error.URLError("Name or service not known"), True),
        (ApiException(503), True),
        (ApiException(429), True),
        (ApiException(0), True),  # no answer at all
        (RuntimeError("something distrain does not know"), True),  # retried, as before
    ],
)
def test_errors_are_told_apart(exc, transient):
    assert classify(exc) is transient


def _http(code):
    return urllib.error.HTTPError("https://example.org/f", code, "answer", {}, None)


class DataLossError(Exception):  # TensorFlow's, by name (a corrupt record)
    pass


def _permanent_and_transient_causes():
    """The table of issue 37: each cause of failure, and whether a retry can help."""
    import tarfile

    from distrain.datasets.dbpedia.rows import DbpediaFormatError
    from distrain.preprocess.download import UnsafeArchiveError
    from distrain.preprocess.records import TFRecordFramingError
    from distrain.preprocess.writing import (
        BadRecordsError,
        OutputExistsError,
        RecordAccountingError,
    )

    return [
        ("bad input", DbpediaFormatError("classes.txt: file not found"), False),
        ("too many bad records", BadRecordsError("5 of 10 lines rejected"), False),
        ("records lost", RecordAccountingError("10 lines in the input, 9 ..."), False),
        ("used output folder", OutputExistsError("out: not empty"), False),
        ("http 404", _http(404), False),
        ("http 403", _http(403), False),
        ("checksum", ChecksumError("x: sha256 mismatch; file removed"), False),
        ("unsafe archive", UnsafeArchiveError("a.tgz: link 'x' passes through"), False),
        ("corrupt archive", tarfile.ReadError("not a gzip file"), False),
        ("corrupt record", TFRecordFramingError("f.tfrecord: ends inside record 3"), False),
        ("corrupt record (tf)", DataLossError("corrupted record at 12"), False),
        ("impossible header", IdxFormatError("x.gz: an impossible header"), False),
        ("config mismatch", ConfigError("ckpt-12: a checkpoint of another model"), False),
        ("lost worker", TrainingError("mpirun exited with code 137"), True),
        ("timeout", TimeoutError("timed out"), True),
        ("http 500", _http(500), True),
        ("http 503", _http(503), True),
        ("http 408", _http(408), True),
        ("http 429", _http(429), True),
        ("api 503", ApiException(503), True),
        ("api 408", ApiException(408), True),
        ("api 404", ApiException(404), False),
        ("no answer", urllib.error.URLError("Name or service not known"), True),
    ]


@pytest.mark.case("integrity/errors")
@pytest.mark.parametrize(
    "cause, exc, transient",
    _permanent_and_transient_causes(),
    ids=[c[0] for c in _permanent_and_transient_causes()],
)
def test_the_table_of_permanent_and_transient_causes(cause, exc, transient):
    failure = Failure.of("step", exc)
    assert failure.retryable is transient, cause
    assert failure.exit_code == (1 if transient else 2)


@pytest.mark.case("integrity/errors")
def test_a_parameter_server_records_its_error_for_the_launcher(tmp_path, monkeypatch):
    from distrain.cli import main
    from distrain.train.engine import server_args
    from distrain.train.launch import WorkerFailed, process_failure

    out = tmp_path / "run"
    bad = {"cluster": {"ps": ["localhost:1"]}, "task": {"type": "ps", "index": "first"}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(bad))
    monkeypatch.delenv("HOROVOD_RANK", raising=False)
    monkeypatch.delenv("OMPI_COMM_WORLD_RANK", raising=False)
    # The command the launchers give a parameter server, through the console script's parser.
    assert main(server_args(1, out)) == 2
    failed = process_failure(out, "[async:2] parameter server ps:0 exited with code 2")
    assert isinstance(failed, WorkerFailed) and not classify(failed)
    assert "ps:first failed: ValueError: invalid literal for int()" in str(failed)


def test_one_line_says_where_and_what():
    assert one_line(StepError("invalid pipeline parameters: a\n  b\n  c")) == (
        "invalid pipeline parameters: a; b; c"
    )
    # What distrain did not raise says what it is.
    assert one_line(KeyError("epochs")) == "KeyError: 'epochs'"
    assert one_line(RuntimeError()) == "RuntimeError"
    failure = Failure.of("preprocess (Beam)", IdxFormatError("/d/t.gz: truncated"))
    assert failure.line() == "distrain: preprocess (Beam) failed: /d/t.gz: truncated"
    assert failure.exit_code == 2 and not failure.retryable
    # A missed gate is permanent but not bad input: exit 1, as a failed run.
    assert Failure.of("quality gate", GateFailed("x")).exit_code == 1
    assert Failure.of("train", TrainingError("lost")).exit_code == 1
    again = Failure(**{**failure.__dict__, "attempts": 3})
    assert again.line().startswith("distrain: preprocess (Beam) failed after 3 attempts: ")


def test_a_step_writes_its_error_beside_its_executor_output(tmp_path, monkeypatch):
    output_file = tmp_path / "task" / "executor_output.json"
    argv = [
        "executor_main",
        "--executor_input",
        json.dumps({"outputs": {"outputFile": str(output_file)}}),
    ]
    assert executor_error_path(argv) == tmp_path / "task" / ERROR_FILE
    assert executor_error_path(["python"]) is None
    monkeypatch.setattr(sys, "argv", argv)
    log = tmp_path / "termination-log"
    monkeypatch.setenv("DISTRAIN_TERMINATION_LOG", str(log))
    with pytest.raises(SystemExit) as ended:
        with step_errors("check parameters"):
            raise StepError("invalid pipeline parameters: runs: unknown mode 'ring'")
    assert ended.value.code == 2
    data = json.loads((tmp_path / "task" / ERROR_FILE).read_text())
    line = (
        "distrain: check parameters failed: invalid pipeline parameters: runs: unknown mode 'ring'"
    )
    # Google Cloud pipeline components' field, then distrain's.
    assert data["errorMessage"] == line
    assert data["retryable"] is False and data["exception"] == "StepError"
    assert read_error(tmp_path / "task" / ERROR_FILE) == Failure.of(
        "check parameters", StepError("invalid pipeline parameters: runs: unknown mode 'ring'")
    )
    # The container's termination message, which Kubernetes keeps with the pod.
    assert log.read_text() == line
    with pytest.raises(SystemExit) as ended:
        with step_errors("train sync:2"):
            raise TrainingError("[sync:2] training failed: mpirun exited with code 1")
    assert ended.value.code == 1
    assert read_error(tmp_path / "task" / ERROR_FILE).retryable


def test_a_failed_process_says_why_to_its_launcher(tmp_path, monkeypatch):
    from distrain.train.launch import WorkerFailed, process_failure
    from distrain.train.worker import record_error

    out = tmp_path / "run"
    # Killed from outside: no record, a lost worker (transient).
    lost = process_failure(out, "[sync:2] training failed: mpirun exited with code 137")
    assert type(lost) is TrainingError and classify(lost)
    monkeypatch.setenv("HOROVOD_RANK", "1")
    record_error(out, DataError(f"{tmp_path}/metadata.json: missing key 'splits'"))
    time.sleep(0.01)
    monkeypatch.setenv("HOROVOD_RANK", "0")
    record_error(out, ConnectionResetError("peer rank 1 is gone"))
    failed = process_failure(out, "[sync:2] training failed: mpirun exited with code 2")
    # The first record is the cause; its peers failed after it.
    assert isinstance(failed, WorkerFailed) and not classify(failed)
    assert str(failed) == (
        "[sync:2] training failed: mpirun exited with code 2: rank 1 failed: "
        f"{tmp_path}/metadata.json: missing key 'splits'"
    )
    record = json.loads((out / "errors" / "rank-1.json").read_text())
    assert "Traceback" in record["traceback"] or "DataError" in record["traceback"]


# ---- kfp.local: a permanent error is not retried, a transient one is -----------------------


def _counting_pipeline(tmp_path, kind: str):
    from kfp import dsl

    from distrain.base.images import TRAINER_IMAGE

    @dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
    def flaky(counter: str, kind: str) -> str:
        import os

        from distrain.preprocess.failures import step_errors
        from distrain.steps import StepError

        with open(counter, "a") as f:
            f.write("x")
        attempt = os.path.getsize(counter)
        with step_errors("flaky step"):
            if kind == "permanent":
                raise StepError(f"{counter}: line {attempt}: expected a number")
            if attempt == 1:
                raise ConnectionResetError("the server went away")
        return f"attempt {attempt}"

    @dsl.pipeline(name=f"flaky-{kind}")
    def pipeline(counter: str, kind: str) -> str:
        task = flaky(counter=counter, kind=kind)
        task.set_retry(num_retries=2, backoff_duration="1s", backoff_factor=1.0)
        return task.output

    return pipeline


def test_local_runs_retry_transient_errors_and_stop_at_permanent_ones(tmp_path):
    from kfp import local

    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(tmp_path / "root"),
        raise_on_error=True,
    )
    counter = tmp_path / "transient"
    with local_retries_stop_on_permanent_errors() as failures:
        task = _counting_pipeline(tmp_path, "transient")(counter=str(counter), kind="transient")
    assert task.output == "attempt 2"  # retried after a second's backoff, then done
    assert [f.retryable for f in failures] == [True]
    assert failures[0].message == "ConnectionResetError: the server went away"

    counter = tmp_path / "permanent"
    start = time.monotonic()
    with local_retries_stop_on_permanent_errors() as failures:
        with pytest.raises((StepFailed, RuntimeError)):
            _counting_pipeline(tmp_path, "permanent")(counter=str(counter), kind="permanent")
    assert counter.read_text() == "x", "a permanent error was retried"
    assert time.monotonic() - start < 30
    assert failures[-1].line() == (
        f"distrain: flaky step failed: {counter}: line 1: expected a number"
    )
    # Without the hook, kfp.local retries every failure (as KFP 2.17 on a cluster does).
    counter = tmp_path / "unhooked"
    with pytest.raises(RuntimeError):
        _counting_pipeline(tmp_path, "permanent")(counter=str(counter), kind="permanent")
    assert counter.read_text() == "xxx"


# ---- the command line ------------------------------------------------------------------------


def _distrain(args, cli_env, **kwargs):
    return subprocess.run(
        [str(VENV_BIN / "distrain"), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=cli_env,
        **kwargs,
    )


def _last_line(proc) -> str:
    return proc.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize(
    "args, line",
    [
        (
            ["train", "--data", "DATA", "--output", "OUT", "--run", "async:2:ps=0"],
            "distrain: train async:2:ps=0 failed: run spec 'async:2:ps=0': async: ps must be "
            "at least 1, got 0",
        ),
        (
            ["train", "--data", "DATA", "--output", "OUT", "--run", "async:2:ps=1:ps=2"],
            "distrain: train async:2:ps=1:ps=2 failed: run spec 'async:2:ps=1:ps=2': option "
            "'ps' given twice",
        ),
        (
            ["run", "mnist", "--output", "OUT", "--runs", "single:1,ring:2"],
            "distrain: run mnist failed: run spec 'ring:2': unknown mode 'ring'; expected one "
            "of single, sync, async, syncreplicas",
        ),
        (
            ["train", "--data", "DATA", "--output", "OUT"],
            "distrain: train single:1 failed: DATA/metadata.json: not found",
        ),
        (
            ["data", "gutenberg", "--download", "--output", "OUT"],
            "distrain: data gutenberg failed: Gutenberg downloads need book ids "
            "(--ids 1342,11, or the source download:1342,11)",
        ),
    ],
)
def test_a_failed_command_ends_with_one_line_and_no_traceback(tmp_path, cli_env, args, line):
    args = [
        a.replace("DATA", str(tmp_path / "d")).replace("OUT", str(tmp_path / "o")) for a in args
    ]
    line = line.replace("DATA", str(tmp_path / "d"))
    proc = _distrain(args, cli_env)
    assert proc.returncode == 2, proc.stdout
    assert _last_line(proc).startswith(line), proc.stdout
    assert "Traceback" not in proc.stdout
    assert not (tmp_path / "o").exists()
    # --debug shows where it came from.
    debug = _distrain(["--debug", *args], cli_env)
    assert "Traceback (most recent call last)" in debug.stdout
    assert _last_line(debug) == _last_line(proc)


# ---- whole runs (kfp.local) ------------------------------------------------------------------


def _run(args, cli_env, timeout=600):
    start = time.monotonic()
    proc = _distrain(["run", *args], cli_env, timeout=timeout)
    return proc, time.monotonic() - start


def _attempts(proc, task: str) -> int:
    return proc.stdout.count(f"Executing task \x1b[96m'{task}'") or proc.stdout.count(
        f"Executing task '{task}'"
    )


@pytest.mark.slow
@pytest.mark.case("kfp/permanent", "mnist/truncated-gzip")
def test_a_run_on_a_truncated_mnist_file_fails_in_seconds_naming_it(tmp_path, cli_env):
    from distrain.steps import fetch

    raw = tmp_path / "raw"
    fetch("mnist", "sample", raw, sample_size=600, seed=1)
    images = raw / "train-images-idx3-ubyte.gz"
    images.write_bytes(images.read_bytes()[: images.stat().st_size // 2])
    proc, seconds = _run(["mnist", "--data", str(raw), "--output", str(tmp_path / "o")], cli_env)
    assert proc.returncode == 2, proc.stdout[-3000:]
    # Before: 94 s, retried twice, a KFP traceback at the end. Now the first step refuses
    # the file (a parameter check is never retried), well within 10 s.
    assert seconds < 10, seconds
    last = _last_line(proc)
    assert last.startswith("distrain: check parameters failed: "), last
    assert f"{images}: corrupt or truncated gzip stream" in last
    assert "Traceback" not in proc.stdout
    assert _attempts(proc, "check-parameters") == 1 and _attempts(proc, "preprocess") == 0
    (error_file,) = (tmp_path / "o" / "kfp").rglob(ERROR_FILE)
    assert read_error(error_file).line() == last and not read_error(error_file).retryable


@pytest.mark.slow
@pytest.mark.case("kfp/permanent", "dbpedia/classes-missing")
def test_a_run_on_dbpedia_without_classes_txt_fails_in_seconds_naming_it(tmp_path, cli_env):
    from distrain.steps import fetch

    raw = tmp_path / "raw"
    fetch("dbpedia", "sample", raw, sample_size=280)
    (raw / "classes.txt").unlink()
    proc, seconds = _run(["dbpedia", "--data", str(raw), "--output", str(tmp_path / "o")], cli_env)
    assert proc.returncode == 2, proc.stdout[-3000:]
    assert seconds < 10, seconds
    assert _last_line(proc) == (
        "distrain: check parameters failed: invalid pipeline parameters: source: "
        f"{raw}/classes.txt: file not found (the dbpedia_csv layout needs it)"
    )
    assert "Traceback" not in proc.stdout


@pytest.mark.slow
@pytest.mark.case("kfp/permanent", "dbpedia/dead-letter")
def test_bad_input_found_by_a_retried_step_is_not_retried(tmp_path, cli_env):
    # Too many bad rows: only the Beam job finds it, in a step that has a retry policy
    # (30 s, then 60 s). A permanent error ends the run at its first attempt.
    from distrain.steps import fetch

    raw = tmp_path / "raw"
    fetch("dbpedia", "sample", raw, sample_size=700)
    with open(raw / "train.csv", newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    for row in rows[::10]:
        row[0] = "99"  # a class index out of range: a dead letter
    with open(raw / "train.csv", "w", newline="", encoding="utf-8") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    args = ["dbpedia", "--data", str(raw), "--output", str(tmp_path / "o"), "--runs", "single:1"]
    proc, seconds = _run(args, cli_env)
    assert proc.returncode == 2, proc.stdout[-3000:]
    last = _last_line(proc)
    assert last.startswith("distrain: preprocess (Beam) failed: "), last
    assert "lines rejected" in last and "above the allowed 1.00%" in last
    assert _attempts(proc, "preprocess") == 1, "a permanent error was retried"
    assert "Retrying in" not in proc.stdout and seconds < 120
    assert "Traceback" not in proc.stdout


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.case("kfp/transient", "kfp/retries", "train/no-orphans")
def test_a_worker_killed_during_a_run_is_retried_and_the_run_succeeds(tmp_path, cli_env):
    import signal
    import threading

    import psutil

    out = tmp_path / "o"
    killed = []

    def rank_1():
        for proc in psutil.process_iter(["cmdline"]):
            try:
                env = proc.environ()
            except psutil.Error:
                continue
            rank = env.get("OMPI_COMM_WORLD_RANK", env.get("HOROVOD_RANK"))
            if env.get("DISTRAIN_RUN_DIR", "").startswith(str(out)) and rank == "1":
                if "worker" in (proc.info["cmdline"] or []):
                    return proc
        return None

    def kill_after_the_first_checkpoint():
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline and not killed:
            if any(out.rglob("checkpoints/checkpoint")):
                victim = rank_1()
                if victim is not None:
                    victim.send_signal(signal.SIGKILL)
                    killed.append(victim.pid)
                    return
            time.sleep(0.05)

    threading.Thread(target=kill_after_the_first_checkpoint, daemon=True).start()
    args = ["mnist", "--output", str(out), "--runs", "sync:2", "--epochs", "6"]
    proc, _ = _run([*args, "--sample-size", "8000"], cli_env, timeout=900)
    assert killed, "rank 1 was not killed"
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert "distrain: train sync:2 failed: " in proc.stdout
    assert "(transient: retried as the step's retry policy says)" in proc.stdout
    assert _attempts(proc, "train") == 2
    (history,) = [json.loads(p.read_text()) for p in out.rglob("history.json")]
    assert history["resumed_at_steps"], "the retry did not resume from the checkpoint"
    assert [e["epoch"] for e in history["epochs"]][-1] == 6
    rows = {row["name"]: row for row in json.loads((out / "comparison.json").read_text())["rows"]}
    assert rows["sync:2"]["accuracy"] > 0.5
