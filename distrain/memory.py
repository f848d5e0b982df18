"""Peak resident memory of a process tree, sampled in a background thread."""

from __future__ import annotations

import os
import threading


class PeakTreeMemory:
    """Samples the resident memory of a process and all its descendants; keeps the peak.

    A step's workers, parameter servers and Beam workers are its descendants, so the peak
    is what the whole step needed at once. Needs ``psutil`` (Horovod's dependency, so in
    every training environment); without it ``peak_bytes`` stays None.

    Args:
        pid: Root of the tree (default: this process).
        interval: Seconds between samples; a peak shorter than that can be missed.
    """

    def __init__(self, pid: int | None = None, interval: float = 0.1):
        self.pid = os.getpid() if pid is None else pid
        self.interval = interval
        self.peak_bytes: int | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="peak-memory")

    def _sample(self, root) -> int | None:
        import psutil

        try:
            procs = [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            return None
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:  # ended between the listing and the read
                pass
        return total

    def _run(self) -> None:
        try:
            import psutil

            root = psutil.Process(self.pid)
        except (ImportError, OSError):
            return
        while True:
            total = self._sample(root)
            if total is None:
                return
            self.peak_bytes = max(self.peak_bytes or 0, total)
            if self._stop.wait(self.interval):
                return

    def __enter__(self) -> PeakTreeMemory:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
