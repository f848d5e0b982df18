"""Starting a training run's processes on this machine.

A mode's engine says which processes a run has and their commands
(:mod:`distrain.train.engine`); this module starts them, each made to die with the
launcher, watches them, and stops every one when the run's main process ends. It also
reads the errors they record.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING

from distrain.base.errors import TrainingError
from distrain.base.progress import Progress
from distrain.datasets.info import DatasetInfo
from distrain.train import heartbeat

if TYPE_CHECKING:
    from distrain.train.config import TrainConfig

# Where each failed training process records its error (``distrain.train.worker``), for
# the launcher to say why the run failed (:func:`process_failure`).
ERRORS_DIR = "errors"


def main_process(cfg: TrainConfig, config_path: str | os.PathLike):
    """The run's main process, as the mode starts it locally."""
    processes = cfg.run.impl.local_processes(cfg, Path(config_path), Path(cfg.output_dir) / "logs")
    return next(p for p in processes if p.main)


def launch_env(cfg: TrainConfig) -> dict[str, str]:
    """Environment the run's main process gets on top of the run's own."""
    return dict(main_process(cfg, "-").env)


def launch_command(cfg: TrainConfig, config_path: str | os.PathLike) -> list[str]:
    """The command of the run's main process (for parameter-server modes: the chief's)."""
    return main_process(cfg, config_path).command


def free_ports(count: int) -> list[int]:
    """Ports on 127.0.0.1 that were free a moment ago."""
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


# A separate tiny process runs die_with_parent before the command, rather than
# ``preexec_fn``, whose fork runs the parent's fork handlers (gRPC's abort in a process that
# has loaded it).
_GUARD = (
    "import os, sys\n"
    "from distrain.train.runtime import die_with_parent\n"
    "die_with_parent(int(sys.argv[1]))\n"
    "os.execvp(sys.argv[2], sys.argv[2:])\n"
)


def guarded(cmd: list[str]) -> list[str]:
    """``cmd`` made to die with this process (Linux; elsewhere unchanged).

    A launcher that is itself killed (``kill -9``, a pod evicted, a KFP step cancelled)
    would otherwise leave its workers and parameter servers running.
    """
    if sys.platform != "linux":
        return cmd
    return [sys.executable, "-c", _GUARD, str(os.getpid()), *cmd]


class _Processes:
    """Child processes of one run, each in its own session so its children go with it.

    They are started by the thread that waits for them, and each is killed by the kernel
    if that thread dies (``PR_SET_PDEATHSIG``, see :func:`guarded`): no run leaves orphans.
    """

    def __init__(self):
        self.procs: dict[str, subprocess.Popen] = {}

    def start(
        self, name: str, cmd: list[str], env: dict, log: Path | None = None, pipe: bool = False
    ):
        stdout = open(log, "wb") if log else None  # noqa: SIM115 (closed with the process)
        if pipe:
            stdout = subprocess.PIPE
        stderr = subprocess.STDOUT if log or pipe else None
        self.procs[name] = subprocess.Popen(
            guarded(cmd), env=env, start_new_session=True, stdout=stdout, stderr=stderr
        )
        if stdout and not pipe:
            stdout.close()
        return self.procs[name]

    def stop_all(self, grace: float = 10.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                _signal_group(proc, signal.SIGTERM)
                _signal_group(proc, signal.SIGCONT)  # a stopped process handles it too
        deadline = time.monotonic() + grace
        for proc in self.procs.values():
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait()


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)
    except ProcessLookupError:
        pass


# The driver's line at each epoch's end: ``[run] epoch 2/5  loss ...``.
EPOCH_LINE = re.compile(r"\] epoch (\d+)/(\d+)\b")


def _forward(stream, bar: Progress) -> None:
    """Prints the run's output above its progress line; epoch lines move the bar."""
    for raw in iter(stream.readline, b""):
        line = raw.decode(errors="replace").rstrip("\n")
        found = EPOCH_LINE.search(line)
        if found:
            bar.update(completed=int(found[1]), total=int(found[2]))
        bar.print(line)
    stream.close()


class WorkerFailed(TrainingError):
    """A training process failed and said why (its record in ``<output>/errors/``).

    Attributes:
        retryable: Whether the process's error was transient (:mod:`distrain.preprocess.failures`):
            a process that failed on bad data or settings fails every attempt.
    """

    def __init__(self, message: str, retryable: bool):
        super().__init__(message)
        self.retryable = retryable


def process_failure(out: Path, message: str) -> TrainingError:
    """The error of a failed run: ``message``, with the first process's own words if any.

    Each ``distrain worker`` that fails records its error (``worker.record_error``); the
    earliest record is the cause (its peers fail after it, on the lost connection), and
    it says whether the failure is transient. A process killed from outside records
    nothing: that is a lost worker, transient.
    """
    records = []
    for path in sorted((out / ERRORS_DIR).glob("*.json"), key=lambda p: p.stat().st_mtime):
        with contextlib.suppress(OSError, ValueError):
            records.append(json.loads(path.read_text()))
    if not records:
        return TrainingError(message)
    first = records[0]
    return WorkerFailed(
        f"{message}: {first.get('step', 'a process')} failed: {first.get('message', '')}",
        retryable=bool(first.get("retryable", True)),
    )


def _act_on_stalled(cfg: TrainConfig, out: Path, policy: str, dropped: set[int]) -> None:
    """Fails the run, or drops the process, when a process of it stopped running.

    Raises:
        TrainingError: A process the run cannot do without has not run for
            ``cfg.operation_timeout`` seconds (transient: a retry resumes).
    """
    for found in heartbeat.stalled(out, cfg.operation_timeout):
        if policy == "drop":  # [elastic] the others go on without it
            if found.pid not in dropped:
                dropped.add(found.pid)
                print(f"[{cfg.run.name}] {found.describe()}: dropped it (SIGKILL)", flush=True)
                with contextlib.suppress(ProcessLookupError):
                    os.kill(found.pid, signal.SIGKILL)
            continue
        raise TrainingError(
            f"[{cfg.run.name}] {found.describe()} (operation_timeout {cfg.operation_timeout} s); "
            "the run cannot go on without it, so it was stopped (a retry resumes from the last "
            "checkpoint)"
        )


def run_training(cfg: TrainConfig, timeout: float | None = None) -> dict:
    """Runs a training run to completion with local processes.

    The training output goes to this process's stdout, so progress shows as it happens
    (one line per epoch); PS-mode servers log to ``<output>/logs/``.

    Args:
        cfg: The run's configuration.
        timeout: Seconds before the run is stopped (None: the config's ``deadline``).

    Returns:
        The run's history (``history.json``).

    Raises:
        TrainingError: A process failed or the run timed out; the message says which.
        WorkerFailed: The main process exited 0 without its result (:func:`check_result`).
    """
    DatasetInfo.load(cfg.data_dir)  # a missing or bad data directory fails before any start
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = cfg.save(out / "train_config.json")
    env = _run_environment(out)
    scratch = env["TMPDIR"]
    procs = _Processes()
    timeout = timeout if timeout is not None else (cfg.deadline or None)
    deadline = time.monotonic() + timeout if timeout else None
    # In a terminal, one updating line shows the run's epochs and time (distrain.base.progress).
    bar = Progress(f"train {cfg.run.name}", cfg.epochs, "epochs", stream=sys.stdout)
    bar = bar if bar.live else None
    launched = time.time()
    forward = None
    logs = out / "logs"
    shutil.rmtree(out / ERRORS_DIR, ignore_errors=True)  # an earlier attempt's
    shutil.rmtree(out / heartbeat.HEARTBEATS_DIR, ignore_errors=True)
    if bar is not None:
        bar.__enter__()
    try:
        processes = cfg.run.impl.local_processes(cfg, config_path, logs)
        if any(p.log for p in processes):
            logs.mkdir(exist_ok=True)
        main_spec = next(p for p in processes if p.main)
        for p in processes:
            if p.main:
                print(f"[{cfg.run.name}] $ {' '.join(p.command)}", flush=True)
            live = p.main and bar is not None and not p.log
            procs.start(p.name, p.command, dict(env, **p.env), p.log, pipe=live)
        main = procs.procs[main_spec.name]
        if main.stdout is not None:  # a terminal: the run's lines above its progress line
            forward = threading.Thread(target=_forward, args=(main.stdout, bar), daemon=True)
            forward.start()
        _watch(cfg, procs, processes, main_spec, deadline, timeout)
    finally:
        procs.stop_all()
        if forward is not None:
            forward.join(timeout=5)
        if bar is not None:
            bar.__exit__(*sys.exc_info())
        shutil.rmtree(scratch, ignore_errors=True)
    check_result(out, launched, f"[{cfg.run.name}] {main_spec.what or main_spec.name}")
    return json.loads((out / "history.json").read_text())


def _run_environment(out: Path) -> dict:
    """The environment of the run's processes, with their own temporary directory."""
    # DISTRAIN_RUN_DIR marks every process of the run (to find them, e.g. leftovers).
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_USE_LEGACY_KERAS="1", DISTRAIN_RUN_DIR=str(out))
    env.pop("TF_CONFIG", None)
    # The cores the run's processes share on this host (its history records them).
    env["DISTRAIN_HOST_CORES"] = str(len(os.sched_getaffinity(0)))
    # One temporary directory for all the run's processes, removed with the run: what they
    # leave in it (autograph's generated modules, which a process removes only at a normal
    # exit, and parameter-server processes end with os._exit or are stopped) goes too.
    env["TMPDIR"] = tempfile.mkdtemp(prefix="distrain-")
    return env


def _watch(cfg: TrainConfig, procs, processes, main_spec, deadline, timeout) -> None:
    """Waits for the main process to end, acting on stalled processes meanwhile.

    Raises:
        TrainingError: A critical process ended first, the main process failed, or the
            deadline passed.
    """
    out = Path(cfg.output_dir)
    logs = out / "logs"
    main = procs.procs[main_spec.name]
    when_stalled = cfg.run.impl.engine.when_stalled
    dropped: set[int] = set()
    critical = [p for p in processes if p.critical]

    def check_critical() -> None:
        for p in critical:
            code = procs.procs[p.name].poll()
            if code is not None:
                raise process_failure(
                    out,
                    f"[{cfg.run.name}] {p.what or p.name} exited with code {code}; see {logs}",
                )

    next_look = time.monotonic() + heartbeat.BEAT_SECONDS
    while main.poll() is None:
        check_critical()
        if when_stalled and time.monotonic() >= next_look:
            next_look = time.monotonic() + heartbeat.BEAT_SECONDS
            _act_on_stalled(cfg, out, when_stalled, dropped)
        if deadline and time.monotonic() > deadline:
            if main_spec.stacks_on_timeout:  # `distrain worker` itself
                main.send_signal(signal.SIGUSR1)  # its threads' stacks, to stderr
                time.sleep(2.0)
            raise TrainingError(f"[{cfg.run.name}] timed out after {timeout} s")
        time.sleep(0.2)
    if main.returncode != 0:
        # A critical process (a parameter server) that died is the cause of the main
        # process's failure that followed it, even when both ended between two looks.
        time.sleep(0.2)
        check_critical()
        raise process_failure(
            out,
            f"[{cfg.run.name}] training failed: {main_spec.command[0]} exited with code "
            f"{main.returncode}",
        )


# What a finished run has written, last: its trained model, then its history.
RESULT_FILES = ("model.keras", "history.json")


def check_result(out: Path, since: float, who: str) -> None:
    """Fails a run whose main process exited 0 without writing its result in this launch.

    A process ended early and quietly (``os._exit(0)`` in the user's code, which no
    ``except`` catches) leaves no model, or only an earlier checkpoint's history: that is
    no result, and the same code ends the same way again (permanent).

    Args:
        out: The run's output folder.
        since: When the launch started (``time.time()``).
        who: The main process, as the failure names it.

    Raises:
        WorkerFailed: A result file is missing, or older than the launch.
    """
    missing = []
    for name in RESULT_FILES:
        try:
            fresh = (out / name).stat().st_mtime >= since - 2.0  # coarse file-system clocks
        except OSError:
            fresh = False
        if not fresh:
            missing.append(name)
    if missing:
        raise WorkerFailed(
            f"{who} exited with code 0 but produced no result: {', '.join(missing)} not "
            f"written in {out} by this run (the process was ended early, as os._exit in the "
            "model's code does)",
            retryable=False,
        )
