"""What a comparison ran on: CPU model and cores, GPUs, and the versions that shape a time.

A time is a measurement of a machine and a software stack; a comparison records both so
that a reader (or KFP's run-compare page) can tell two results apart. Reads only: no
TensorFlow or Horovod import (their installed versions come from package metadata), no
network.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys
from importlib import metadata

# Distributions whose versions a comparison records, by the name a reader knows.
PACKAGES = {
    "tensorflow": ("tensorflow", "tensorflow-cpu", "tensorflow-gpu"),
    "horovod": ("horovod",),
    "kfp": ("kfp",),
    "apache_beam": ("apache-beam",),
    "distrain": ("distrain",),
}


def _version(names: tuple[str, ...]) -> str | None:
    for name in names:
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _first_line(command: list[str]) -> str | None:
    """The first non-empty output line of a command (None: not installed or failed)."""
    # Beside this Python first: a virtual environment's MPI is not always on PATH.
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    found = shutil.which(command[0], path=path)
    if not found:
        return None
    try:
        done = subprocess.run(
            [found, *command[1:]], capture_output=True, text=True, timeout=10, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    lines = [line.strip() for line in (done.stdout + done.stderr).splitlines() if line.strip()]
    return lines[0] if done.returncode == 0 and lines else None


def _gpus() -> list[str]:
    """``nvidia-smi -L``'s lines (one per GPU); none without the tool."""
    found = shutil.which("nvidia-smi")
    if not found:
        return []
    try:
        done = subprocess.run([found, "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip().startswith("GPU")]


def describe() -> dict:
    """This machine and software: CPU model, cores, GPUs, Python, TF, Horovod, MPI, ..."""
    env = {
        "cpu_model": _cpu_model(),
        "cpu_cores": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "gpus": _gpus(),
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "mpi": _first_line(["mpirun", "--version"]),
    }
    env.update({key: _version(names) for key, names in PACKAGES.items()})
    return env


def text(env: dict) -> str:
    """The environment in one line, for a report's footer."""
    gpus = ", ".join(env.get("gpus") or []) or "no GPU"
    versions = ", ".join(
        f"{key.replace('_', ' ')} {env[key]}" for key in ("python", *PACKAGES) if env.get(key)
    )
    mpi = f"; MPI: {env['mpi']}" if env.get("mpi") else "; no MPI"
    return (
        f"Measured on {env.get('cpu_model')} ({env.get('usable_cores') or env.get('cpu_cores')} "
        f"of {env.get('cpu_cores')} cores usable), {gpus}, {env.get('os')}; {versions}{mpi}."
    )
