"""Starting a training run's processes on this machine.

``single`` runs one worker process; ``sync`` runs ``horovodrun --gloo`` with N local
ranks. On a cluster the same worker command runs under the MPI Operator instead.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from distrain.train.config import TrainConfig
from distrain.train.loop import TrainingError


def _horovodrun() -> str:
    local = Path(sys.executable).with_name("horovodrun")
    found = str(local) if local.exists() else shutil.which("horovodrun")
    if not found:
        raise TrainingError(
            "horovodrun not found: sync mode needs Horovod (run scripts/setup.sh, which builds it)"
        )
    return found


def worker_command(config_path: str | os.PathLike) -> list[str]:
    """The command of one training process (the same locally and in images)."""
    return [sys.executable, "-m", "distrain.train.worker", "--config", str(config_path)]


def launch_command(cfg: TrainConfig, config_path: str | os.PathLike) -> list[str]:
    """The full local command for the run's mode and scale."""
    cmd = worker_command(config_path)
    mode, n = cfg.run.mode, cfg.run.workers
    if mode == "single":
        return cmd
    if mode == "sync":
        return [
            _horovodrun(),
            "-np",
            str(n),
            "-H",
            f"localhost:{n}",
            "--gloo",
            "--start-timeout",
            str(cfg.start_timeout),
            *cmd,
        ]
    raise TrainingError(f"mode {mode!r} cannot be launched yet")


def run_training(cfg: TrainConfig, timeout: float | None = None) -> dict:
    """Runs a training run to completion with local processes.

    The processes' output goes to this process's stdout, so progress shows as it
    happens (one line per epoch).

    Args:
        cfg: The run's configuration.
        timeout: Seconds before the run is stopped (None: no limit).

    Returns:
        The run's history (``history.json``).

    Raises:
        TrainingError: A process failed or the run timed out; the message says which.
    """
    out = Path(cfg.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    config_path = cfg.save(out / "train_config.json")
    cmd = launch_command(cfg, config_path)
    env = dict(os.environ, PYTHONUNBUFFERED="1", TF_USE_LEGACY_KERAS="1")
    print(f"[{cfg.run.name}] $ {' '.join(cmd)}", flush=True)
    # A process group of its own, so a timeout stops every rank it started.
    proc = subprocess.Popen(cmd, env=env, start_new_session=True)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired as err:
        _kill_group(proc)
        raise TrainingError(f"[{cfg.run.name}] timed out after {timeout} s") from err
    except BaseException:
        _kill_group(proc)
        raise
    if code != 0:
        raise TrainingError(f"[{cfg.run.name}] training failed: {cmd[0]} exited with code {code}")
    history_path = out / "history.json"
    if not history_path.exists():
        raise TrainingError(f"[{cfg.run.name}] finished but wrote no {history_path}")
    return json.loads(history_path.read_text())


def _kill_group(proc: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=10)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
