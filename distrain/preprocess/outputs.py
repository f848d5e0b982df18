"""One writer per output folder: the lock a job holds on it, and what dead jobs left there.

A job that writes an output folder (a preprocessing job, ``distrain train``, ``distrain
run``, ``distrain experiment``) holds an exclusive lock on a file beside it,
``.NAME.lock``, for its whole life (:func:`one_writer`, :func:`hold`). A second job for
the same folder fails at once with one line naming the first (its pid, host, start time
and command, which the lock file records): :class:`OutputBusyError`, a permanent error
(exit 2). The lock file is removed when its job ends.

The lock is a POSIX record lock (``fcntl.lockf``, ``F_SETLK``) on the whole file: the
kind NFS shares between hosts (v3 through ``lockd``, v4 in the protocol), as do CephFS,
Lustre and GPFS, and which the kernel drops when its process dies, SIGKILL included (on
NFS the server drops it when the dead client's lease runs out). A lock made of a file
that is created exclusively (``O_EXCL``, a rename that refuses to replace) would outlive a
killed job, and no other host can tell a dead owner's file from a live one's; a BSD
``flock`` is local to each host on some network file systems. Where no lock can be had
(a file system without locks, a parent folder that cannot be written) the job says so
in its log and goes on unguarded. A POSIX lock belongs to its process, and closing any
descriptor of the file drops it: so a process opens a lock file once, and a second lock
of the same output in one process is refused without opening it.

While a job holds its output's lock, no other job is writing that output, so every
``.NAME.tmp-*`` and ``.NAME.old-*`` folder beside it was left by a job that died (killed
before moving its output into place): :func:`remove_stale` removes them, one log line
each. A live job's temporary folder is never removed: its lock is held.
"""

from __future__ import annotations

import atexit
import contextlib
import errno
import fcntl
import glob
import json
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

LOCK_SUFFIX = ".lock"
# Seconds a refused job waits for the holder's record (written just after it takes the lock).
RECORD_WAIT = 2.0
# Errors of a file system that has no locks (an NFS mount without lockd, some FUSE ones).
_NO_LOCKS = (errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOSYS)
# Errors of a folder where the lock file cannot be made (a read-only mount's parent).
_READ_ONLY = (errno.EACCES, errno.EPERM, errno.EROFS)
_HELD: dict[Path, int | None] = {}  # lock file -> its descriptor (None: no locks there)
_HELD_GUARD = threading.Lock()


class OutputBusyError(ValueError):
    """Another job holds the output folder's lock: one writer per output.

    A ``ValueError``: permanent (exit 2, never retried); the folder is the first job's.
    """


def lock_path(output_dir: str | os.PathLike) -> Path:
    """The lock file of an output folder: ``.NAME.lock`` beside it (its parent resolved).

    Two spellings of one folder (relative, absolute, through a linked parent) get one lock.
    """
    out = Path(output_dir).absolute()
    parent, name = out.parent.resolve(), out.name or "root"
    return parent / f".{name}{LOCK_SUFFIX}"


def _describe(record: dict) -> str:
    """``pid 123 on host h since 2024-01-01 12:00:00 UTC: distrain train ...``."""
    if not record:
        return "a job that has not recorded itself yet"
    since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(record.get("started", 0)))
    text = f"pid {record.get('pid', '?')} on host {record.get('host', '?')} since {since}"
    return text + (f": {record['command']}" if record.get("command") else "")


def _read(fd: int) -> dict:
    """The record in an open lock file ({} when empty or garbled)."""
    try:
        record = json.loads(os.pread(fd, 4096, 0).decode("utf-8", "replace") or "{}")
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _holders_record(fd: int, wait: float = RECORD_WAIT) -> dict:
    """The record of the job holding the lock on ``fd``, waiting up to ``wait`` seconds for it.

    A job writes its record just after it takes the lock; one that started at the same
    moment can find the file still empty. It waits for the record rather than name "a job
    that has not recorded itself yet" ({} if none comes).
    """
    deadline = time.monotonic() + wait
    while not (record := _read(fd)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return record


def _record() -> dict:
    command = " ".join(["distrain" if "distrain" in sys.argv[0] else sys.argv[0], *sys.argv[1:]])
    return {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": time.time(),
        "command": command[:400],
    }


def _busy(output_dir, record: dict) -> OutputBusyError:
    return OutputBusyError(
        f"{output_dir}: another job is writing this output ({_describe(record)}); one "
        f"writer per output: wait until it ends, or choose another output folder "
        f"(lock: {lock_path(output_dir)})"
    )


def acquire(output_dir: str | os.PathLike) -> dict:
    """Takes the output folder's lock for this process (see :func:`release`).

    Args:
        output_dir: The output folder (it may be missing; its parent is made).

    Returns:
        The record the lock file held before (the last job's, if it died holding it;
        {} if none).

    Raises:
        OutputBusyError: Another job, or this process already, holds the lock.
    """
    path = lock_path(output_dir)
    with _HELD_GUARD:
        if path in _HELD:  # opening the file again would drop this process's lock
            raise _busy(output_dir, _record() | {"command": "this same process"})
        while True:
            try:
                path.parent.mkdir(parents=True, exist_ok=True)
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as err:
                if err.errno not in _READ_ONLY:
                    raise
                return _unguarded(path, output_dir, f"cannot write it: {err.strerror}")
            try:
                fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as err:
                if err.errno in (errno.EACCES, errno.EAGAIN):
                    record = _holders_record(fd)
                    os.close(fd)
                    raise _busy(output_dir, record) from None
                os.close(fd)
                if err.errno not in _NO_LOCKS:
                    raise
                return _unguarded(path, output_dir, f"no locks there: {err.strerror}")
            # Its last holder may have removed the file (and another job made it again)
            # between the open and the lock: then this lock is on a name no one else sees.
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(fd), os.stat(path)):
                    break
            os.close(fd)
        before = _read(fd)
        data = json.dumps(_record()).encode()
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        _HELD[path] = fd
        return before


def _unguarded(path: Path, output_dir, why: str) -> dict:
    """No lock to be had (the caller holds ``_HELD_GUARD``): says so, and goes on."""
    print(
        f"distrain: {path}: {why}; nothing stops a second job from writing {output_dir} at once",
        file=sys.stderr,
    )
    _HELD[path] = None
    return {}


def release(output_dir: str | os.PathLike) -> None:
    """Drops the output folder's lock this process holds and removes its file (if held)."""
    path = lock_path(output_dir)
    with _HELD_GUARD:
        if path not in _HELD:
            return
        fd = _HELD.pop(path)
        if fd is None:
            return
        with contextlib.suppress(OSError):
            if os.path.samestat(os.fstat(fd), os.stat(path)):
                path.unlink()  # while locked: the next job makes a new file
        os.close(fd)  # drops the lock


@contextlib.contextmanager
def one_writer(output_dir: str | os.PathLike):
    """Holds the output folder's lock while the block runs: one writer per output.

    Yields:
        The record the lock file held before (a dead holder's, or {}).

    Raises:
        OutputBusyError: Another job holds it (the message names it).
    """
    before = acquire(output_dir)
    try:
        yield before
    finally:
        release(output_dir)


def hold(output_dir: str | os.PathLike) -> Path:
    """Makes the output folder and holds its lock until this process ends.

    For a command that writes one output for its whole life (``distrain run``,
    ``distrain experiment``). Holding it again in the same process (the same command run
    twice in one process, as tests do) keeps the lock it has.

    Returns:
        The output folder.

    Raises:
        OutputBusyError: Another job holds it.
    """
    out = Path(output_dir)
    if lock_path(out) not in _HELD:
        acquire(out)
        atexit.register(release, out)
    out.mkdir(parents=True, exist_ok=True)
    return out


def _size(path: Path) -> int:
    total = 0
    for root, _, names in os.walk(path):
        for name in names:
            with contextlib.suppress(OSError):
                total += os.path.getsize(os.path.join(root, name))
    return total


def remove_stale(output_dir: str | os.PathLike, before: dict | None = None) -> list[Path]:
    """Removes what dead jobs left beside the output folder, one log line each.

    Call it only while holding the folder's lock (:func:`one_writer`): then no other job
    writes it, and every ``.NAME.tmp-*`` (a job's output not yet in place) and
    ``.NAME.old-*`` (an output being replaced) beside it is a dead job's.

    Args:
        output_dir: The output folder.
        before: What the lock file recorded before this job took it (the dead job, if it
            died holding the lock), to name it in the log.

    Returns:
        The folders removed.
    """
    out = Path(output_dir)
    if not out.parent.is_dir():
        return []
    name = glob.escape(out.name)
    left = sorted(out.parent.glob(f".{name}.tmp-*")) + sorted(out.parent.glob(f".{name}.old-*"))
    who = f" ({_describe(before)})" if before else ""
    for path in left:
        size = _size(path)
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        print(
            f"distrain: removed {path} ({size / 1e6:.1f} MB), left by a job for {out} that "
            f"ended before moving it into place{who}; no job holds that output's lock",
            file=sys.stderr,
        )
    return left
