"""Progress of downloads, Beam jobs and training runs: a bar in a terminal, plain lines elsewhere.

In a terminal (the stream is a TTY and ``$TERM`` is not ``dumb``) a :class:`Progress` is
one updating line drawn by `rich <https://rich.readthedocs.io>`_ (a bar when the total is
known, a spinner and the elapsed time when not). When the output is a file or a pipe (a
KFP step's log, CI) it prints plain lines instead: at the start, at every tenth of the
total, at most every ``interval`` seconds otherwise, and at the end.
``DISTRAIN_PROGRESS=plain`` forces the plain lines, ``=off`` silences both.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from typing import TextIO

PROGRESS_ENV = "DISTRAIN_PROGRESS"


def interactive(stream: TextIO | None = None) -> bool:
    """Whether ``stream`` (default: stderr) is a terminal to draw an updating line on."""
    stream = stream or sys.stderr
    if os.environ.get(PROGRESS_ENV) in ("plain", "off"):
        return False
    isatty = getattr(stream, "isatty", None)
    return bool(isatty and isatty()) and os.environ.get("TERM", "") != "dumb"


def _size(n: float) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


class Progress:
    """One task's progress: ``with Progress("download x", total=n, unit="bytes") as p:``.

    Args:
        description: What is going on (the line's start).
        total: The amount when done (None: unknown; the line shows the elapsed time).
        unit: ``bytes`` (sizes and speed) or a word for the counted things (``epochs``).
        completed: Where it starts (a resumed download's bytes).
        stream: Where it goes (default: stderr).
        interval: Seconds between plain lines while the tenths of the total do not move.
        poll: Called every second (from a thread) for a note to show, e.g. what a Beam job
            has written so far; may return ``(completed, note)`` to move the count too.
    """

    def __init__(
        self,
        description: str,
        total: float | None = None,
        unit: str = "",
        *,
        completed: float = 0,
        stream: TextIO | None = None,
        interval: float = 30.0,
        poll: Callable[[], str | tuple[float, str]] | None = None,
    ):
        self.description = description
        self.total = total
        self.unit = unit
        self.completed = completed
        self.note = ""
        self.stream = stream or sys.stderr
        self.interval = interval
        self.poll = poll
        self.live = interactive(self.stream)
        self.silent = os.environ.get(PROGRESS_ENV) == "off"
        self._start = time.monotonic()
        self._last_line = 0.0
        self._last_tenth = -1
        self._bar = None
        self._task = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    # ---- the two forms -----------------------------------------------------------------------

    def __enter__(self) -> Progress:
        if self.silent:
            return self
        if self.live:
            from rich.console import Console
            from rich.progress import (
                BarColumn,
                DownloadColumn,
                MofNCompleteColumn,
                SpinnerColumn,
                TaskProgressColumn,
                TextColumn,
                TimeElapsedColumn,
                TimeRemainingColumn,
                TransferSpeedColumn,
            )
            from rich.progress import (
                Progress as RichProgress,
            )

            columns = [SpinnerColumn(), TextColumn("{task.description}")]
            if self.total is not None:
                columns += [BarColumn(), TaskProgressColumn()]
                if self.unit == "bytes":
                    columns += [DownloadColumn(), TransferSpeedColumn()]
                else:
                    columns += [MofNCompleteColumn(), TextColumn(self.unit)]
                columns += [TimeRemainingColumn()]
            columns += [TimeElapsedColumn(), TextColumn("{task.fields[note]}")]
            self._bar = RichProgress(*columns, console=Console(file=self.stream), transient=False)
            self._bar.start()
            self._task = self._bar.add_task(
                self.description, total=self.total, completed=self.completed, note=""
            )
        else:
            self._plain(force=True)
        if self.poll is not None:
            self._thread = threading.Thread(target=self._polling, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.silent:
            return
        if exc_type is None and self.total is not None:
            self.completed = max(self.completed, self.total)
        if self._bar is not None:
            self._refresh()
            self._bar.stop()
        else:
            self._plain(force=True, end="done" if exc_type is None else "stopped")

    def print(self, line: str) -> None:
        """Prints a line above the updating one (as is, when there is none)."""
        if self._bar is not None:
            self._bar.console.print(line, markup=False, highlight=False, soft_wrap=True)
        elif not self.silent:
            print(line, file=self.stream, flush=True)

    def update(
        self, advance: float = 0, *, completed: float | None = None, total=None, note=None
    ) -> None:
        """Moves the count (by ``advance``, or to ``completed``) and sets the note."""
        with self._lock:
            if completed is not None:
                self.completed = completed
            self.completed += advance
            if total is not None:
                self.total = total
            if note is not None:
                self.note = note
        if self.silent:
            return
        if self._bar is not None:
            self._refresh()
        else:
            self._plain()

    # ---- internals ---------------------------------------------------------------------------

    def _refresh(self) -> None:
        self._bar.update(
            self._task, completed=self.completed, total=self.total, note=self.note or ""
        )

    def _polling(self) -> None:
        while not self._stop.wait(1.0):
            try:
                said = self.poll()
            except Exception:  # noqa: BLE001 (a progress note must never fail the work)
                continue
            if isinstance(said, tuple):
                self.update(completed=said[0], note=said[1])
            else:
                self.update(note=said)

    def _amount(self) -> str:
        if self.unit == "bytes":
            done = _size(self.completed)
            return f"{done} of {_size(self.total)}" if self.total else done
        unit = f" {self.unit}" if self.unit else ""
        if self.total:
            return f"{self.completed:.0f} of {self.total:.0f}{unit}"
        return f"{self.completed:.0f}{unit}" if self.completed else ""

    def _plain(self, force: bool = False, end: str = "") -> None:
        now = time.monotonic()
        tenth = int(10 * self.completed / self.total) if self.total else -1
        due = now - self._last_line >= self.interval
        if not (force or due or (self.total and tenth != self._last_tenth)):
            return
        self._last_line, self._last_tenth = now, tenth
        parts = [self.description + ":"]
        if self.total:
            parts.append(f"{100 * self.completed / self.total:.0f}%")
        if amount := self._amount():
            parts.append(f"({amount})" if self.total else amount)
        parts.append(f"{now - self._start:.0f} s")
        if self.note:
            parts.append(self.note)
        if end:
            parts.append(end)
        print(" ".join(parts), file=self.stream, flush=True)
