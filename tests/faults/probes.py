"""Probes of a local run's processes, for the fault tests: find, signal, wait, check."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import psutil

from distrain.train.config import TrainConfig


def run_processes(out: Path) -> list[psutil.Process]:
    """Live processes of the run writing to ``out`` (marked by DISTRAIN_RUN_DIR)."""
    found = []
    for proc in psutil.process_iter(["pid", "environ", "status"]):
        try:
            env = proc.info.get("environ") or {}
        except (psutil.Error, OSError):
            continue
        if env.get("DISTRAIN_RUN_DIR") == str(out) and proc.info["status"] != "zombie":
            found.append(proc)
    return found


def assert_no_orphans(out: Path, wait: float = 10.0) -> None:
    deadline = time.monotonic() + wait
    while run_processes(out) and time.monotonic() < deadline:
        time.sleep(0.2)
    left = [" ".join(p.cmdline()) for p in run_processes(out)]
    assert not left, f"processes outlived the run: {left}"


def sync_rank(out: Path, r: int) -> psutil.Process | None:
    """The ``distrain worker`` process of Horovod rank ``r`` in the run writing to ``out``."""
    for proc in run_processes(out):
        try:
            env = proc.environ()
            rank = env.get("HOROVOD_RANK", env.get("OMPI_COMM_WORLD_RANK"))
            if rank == str(r) and "worker" in proc.cmdline():
                return proc
        except psutil.Error:
            continue
    return None


def server_of(out: Path, job: str, index: int) -> psutil.Process | None:
    """The PS-mode process (a server, or a worker) with role ``job:index`` of the run in ``out``."""
    for proc in run_processes(out):
        try:
            tf_config = json.loads(proc.environ().get("TF_CONFIG", "{}"))
        except (psutil.Error, ValueError):
            continue
        if tf_config.get("task") == {"type": job, "index": index}:
            if {"server", "worker"} & set(proc.cmdline()):
                return proc
    return None


def checkpoint_steps(out: Path) -> list[int]:
    """Global steps of the checkpoints the state file lists."""
    state = out / "checkpoints" / "checkpoint"
    if not state.exists():
        return []
    lines = state.read_text().splitlines()
    paths = [ln.split('"')[1] for ln in lines if ln.startswith("all_model_checkpoint_paths")]
    return [int(p.rsplit("-", 1)[1]) for p in paths]


def when(condition, action, timeout: float = 180.0) -> threading.Thread:
    """Runs ``action()`` in a thread as soon as ``condition()`` holds."""

    def watch():
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if condition():
                action()
                return
            time.sleep(0.05)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def signal_after_first_checkpoint(out: Path, job: str, index: int, sig: int) -> list[int]:
    """Sends ``sig`` to server ``job:index`` once the run has a checkpoint.

    Returns:
        The pids signalled (filled in from a watcher thread).
    """
    hit: list[int] = []

    def strike():
        proc = server_of(out, job, index)
        os.kill(proc.pid, sig)
        hit.append(proc.pid)

    when(lambda: checkpoint_steps(out) and server_of(out, job, index), strike)
    return hit


def config(data, out, run, **settings) -> TrainConfig:
    settings = {"epochs": 4, "batch_size": 32, "checkpoint_every_steps": 10, **settings}
    return TrainConfig(data_dir=str(data), output_dir=str(out), run=run, **settings)
