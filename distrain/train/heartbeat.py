"""Heartbeats: how the local launcher tells a process that stopped running from a slow one.

Every ``distrain worker`` process beats: a daemon thread touches
``<output>/heartbeats/<host>-<pid>.json`` every :data:`BEAT_SECONDS` (the host, a pod's name
on Kubernetes, keeps ranks of different pods apart on a shared volume, where their pids can
be the same); a process that exits normally removes its file. The thread runs whenever
the process is scheduled at all, also while its main thread waits in a collective (which
releases the GIL), so a beat that stops means the process itself stopped: SIGSTOP, a
frozen container, a machine swapping itself to death. A rank that merely waits on a
stopped peer keeps beating, so the launcher names the right one.

What the launcher does with a process that stopped beating is its engine's choice
(:attr:`distrain.train.engine.Engine.when_stalled`): a synchronous run cannot go on
without any rank and fails within the bound, naming it; an elastic one drops it; in the
parameter-server modes the others go on by design and their own timeouts hold.

This module writes and reads the files (:func:`beats`); the local launcher judges a process
by its pid (:func:`stalled`), the Kubernetes launcher, whose ranks run in other pods, by its
pod and by whether the file still advances (:mod:`distrain.k8s.watchdog`).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path

import psutil

HEARTBEATS_DIR = "heartbeats"
BEAT_SECONDS = 2.0


def write_record(output_dir: str | os.PathLike, who: str, host: str = "", pid: int = 0) -> Path:
    """Writes a process's heartbeat file (its pid, role and host); returns it.

    ``host`` and ``pid`` default to this machine's hostname (in a pod: the pod's) and
    this process's.
    """
    host, pid = host or socket.gethostname(), pid or os.getpid()
    folder = Path(output_dir) / HEARTBEATS_DIR
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{host}-{pid}.json"
    path.write_text(json.dumps({"pid": pid, "who": who, "host": host}))
    return path


def start(output_dir: str | os.PathLike, who: str, every: float = BEAT_SECONDS) -> Path:
    """Starts this process's heartbeat thread; returns its file (removed at a normal exit)."""
    path = write_record(output_dir, who)

    def beat():
        while True:
            with contextlib.suppress(OSError):
                os.utime(path)
            time.sleep(every)

    threading.Thread(target=beat, name="heartbeat", daemon=True).start()
    # A process that ended is no stalled one: its silent file would say otherwise to a
    # launcher that cannot see its pid (another pod's).
    atexit.register(lambda: path.unlink(missing_ok=True))
    return path


@dataclass(frozen=True)
class Beat:
    """A heartbeat file as last written.

    Attributes:
        path: The file.
        pid: The process's id (on its host).
        who: Its role (``rank 1``, ``worker:0``).
        host: The host it runs on (a pod's name, on Kubernetes).
        mtime: The file's modification time: its last beat, by the file system's clock.
    """

    path: Path
    pid: int
    who: str
    host: str
    mtime: float


def beats(output_dir: str | os.PathLike) -> list[Beat]:
    """The run's heartbeat files (one that cannot be read right now is skipped)."""
    found = []
    for path in sorted((Path(output_dir) / HEARTBEATS_DIR).glob("*.json")):
        try:
            mtime = path.stat().st_mtime
            info = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        pid = int(info.get("pid", 0))
        who = str(info.get("who", f"pid {pid}"))
        found.append(Beat(path, pid, who, str(info.get("host", "")), mtime))
    return found


@dataclass(frozen=True)
class Stalled:
    """A process whose heartbeat stopped while it still exists.

    Attributes:
        pid: Its process id.
        who: Its role (``rank 1``, ``worker:0``).
        silent: Seconds since its last beat.
        state: What the kernel says of it (``stopped``, ``sleeping``, ...).
    """

    pid: int
    who: str
    silent: float
    state: str

    def describe(self) -> str:
        """``rank 1 (pid 123, stopped) has not run for 31 s``."""
        return f"{self.who} (pid {self.pid}, {self.state}) has not run for {self.silent:.0f} s"


def process_state(pid: int) -> str:
    """The kernel's word for a process's state (``stopped``, ``sleeping``, ...), or ``gone``."""
    try:
        return psutil.Process(pid).status()
    except psutil.Error:
        return "gone"


def _alive(pid: int) -> bool:
    return process_state(pid) not in ("gone", psutil.STATUS_ZOMBIE)


def stalled(output_dir: str | os.PathLike, limit: float, now: float | None = None) -> list[Stalled]:
    """The run's processes that exist but have not beaten for more than ``limit`` seconds.

    A process that ended is not stalled (its exit is the launcher's other business).
    """
    now = time.time() if now is None else now
    found = []
    for beat in beats(output_dir):
        silent = now - beat.mtime
        if silent > limit and beat.pid and _alive(beat.pid):
            found.append(Stalled(beat.pid, beat.who, silent, process_state(beat.pid)))
    return found
