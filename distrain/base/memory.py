"""Peak resident memory of a process tree, sampled in a background thread."""

from __future__ import annotations

import os
import threading


class _Sampler:
    """A background thread that calls :meth:`sample` every ``interval`` seconds.

    Use as a context manager: sampling runs between ``__enter__`` and ``__exit__``.
    :meth:`sample` returns False to stop early.
    """

    def __init__(self, interval: float):
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name=type(self).__name__)

    def sample(self) -> bool:
        raise NotImplementedError

    def _run(self) -> None:
        while self.sample() and not self._stop.wait(self.interval):
            pass

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()


class PeakTreeMemory(_Sampler):
    """Samples the resident memory of a process and all its descendants; keeps the peak.

    A step's workers, parameter servers and Beam workers are its descendants, so the peak
    is what the whole step needed at once. Needs ``psutil`` (Horovod's dependency, so in
    every training environment); without it ``peak_bytes`` stays None.

    Args:
        pid: Root of the tree (default: this process).
        interval: Seconds between samples; a peak shorter than that can be missed.
    """

    def __init__(self, pid: int | None = None, interval: float = 0.1):
        super().__init__(interval)
        self.pid = os.getpid() if pid is None else pid
        self.peak_bytes: int | None = None
        self._root = None

    def sample(self) -> bool:
        try:
            import psutil
        except ImportError:
            return False
        try:
            self._root = self._root or psutil.Process(self.pid)
            procs = [self._root, *self._root.children(recursive=True)]
        except psutil.Error:  # the root has ended
            return False
        total = 0
        for p in procs:
            try:
                total += p.memory_info().rss
            except psutil.NoSuchProcess:  # ended between the listing and the read
                pass
        self.peak_bytes = max(self.peak_bytes or 0, total)
        return True


class PeakProcessMemory(_Sampler):
    """The peak resident memory of each descendant process whose command line matches.

    Args:
        matches: Whether a command line (a list of strings) is one to follow.
        interval: Seconds between samples.
    """

    def __init__(self, matches, interval: float = 0.05):
        super().__init__(interval)
        self.matches = matches
        self.peaks: dict[int, int] = {}

    def sample(self) -> bool:
        import psutil

        for child in psutil.Process().children(recursive=True):
            try:
                if self.matches(child.cmdline()):
                    rss = child.memory_info().rss
                    self.peaks[child.pid] = max(self.peaks.get(child.pid, 0), rss)
            except psutil.Error:
                continue
        return True

    def per_process(self) -> list[int]:
        """Each followed process's peak, in order of process id (of start, as a rule)."""
        return [self.peaks[pid] for pid in sorted(self.peaks)]
