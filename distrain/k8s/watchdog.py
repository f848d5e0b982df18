"""The heartbeat watch of a run on Kubernetes: a rank that stopped running ends the run.

Every rank beats into the run's output directory on the shared volume
(:mod:`distrain.train.heartbeat`: ``<output>/heartbeats/<host>-<pid>.json``, the host being
the rank's pod). A stopped rank (SIGSTOP, a frozen container, a node that stopped
answering) holds every other rank of a synchronous run in its allreduce, and with them
every GPU of the run, until the job's deadline (three days by default). The local launcher
reads the same files and asks the kernel about the pid; the Kubernetes launcher cannot see
another pod's processes, so this watch asks two other questions: is the file still
advancing, and is its pod still running?

A file's modification time is set by the volume's server (an NFS server's clock, not this
pod's), so it is never compared with this pod's clock: the watch notes, by the launcher's
own monotonic clock, when it last saw each file change, and a rank whose file has not
changed for ``operation_timeout`` seconds while its pod runs ends the run, naming the rank
and the pod. The bound is ``operation_timeout`` plus a poll (and NFS's attribute cache,
up to a minute by default, can add to it). A rank that exits normally removes its file; a
pod that ended is the launcher's other business (its exit code fails the job). Only
engines that fail a run on a stalled process are watched (``Engine.when_stalled ==
"fail"``: sync, avg, the split modes); in the parameter-server modes the others go on by
design and their session timeouts hold.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from distrain.train import heartbeat
from distrain.train.config import TrainConfig


def pod_of(host: str, pods: list[str]) -> str:
    """The pod a heartbeat's host names, or ``""``.

    A pod's hostname is its name (MPIJob workers), or its name without the random suffix
    the Job controller adds (a JobSet's pods, as a TrainJob's: ``<job>-node-0-0`` for pod
    ``<job>-node-0-0-x7k2p``).
    """
    if host in pods:
        return host
    found = [p for p in pods if p.startswith(f"{host}-") and "-" not in p[len(host) + 1 :]]
    return found[0] if len(found) == 1 else ""


@dataclass
class StallWatch:
    """Watches a cluster run's heartbeats; called by the launcher with its pods at each poll.

    Attributes:
        output_dir: The run's output directory on the shared volume.
        limit: Seconds a running pod's rank may go without a beat (``operation_timeout``).
        clock: The launcher's monotonic clock (tests replace it).
    """

    output_dir: Path
    limit: float
    clock: Callable[[], float] = time.monotonic
    _seen: dict[Path, tuple[float, float]] = field(default_factory=dict)

    def __call__(self, pods: list) -> str:
        """Why the run must end (a rank stopped running), or ``""``.

        Args:
            pods: The run's pods (Kubernetes client ``V1Pod`` objects).
        """
        now = self.clock()
        running = [p.metadata.name for p in pods if p.status.phase == "Running"]
        for beat in heartbeat.beats(self.output_dir):
            mtime, since = self._seen.get(beat.path, (None, now))
            if beat.mtime != mtime:
                self._seen[beat.path] = (beat.mtime, now)
                continue
            pod = pod_of(beat.host, running)
            silent = now - since
            if pod and silent > self.limit:
                return (
                    f"{beat.who} in pod {pod} (pid {beat.pid}) has not run for {silent:.0f} s "
                    f"(operation_timeout {self.limit:.0f} s: its heartbeat stopped while the "
                    "pod runs); the run cannot go on without it, so it was stopped (a retry "
                    "resumes from the last checkpoint)"
                )
        return ""


def stall_watch(
    cfg: TrainConfig, output_dir: Path, clock: Callable[[], float] = time.monotonic
) -> StallWatch | None:
    """The watch of a run whose engine fails on a stalled process, else None.

    The run's earlier heartbeats (an earlier attempt's, in the same output directory) are
    removed: the watch starts from this attempt's.
    """
    if cfg.run.impl.engine.when_stalled != "fail":
        return None
    for beat in heartbeat.beats(output_dir):
        beat.path.unlink(missing_ok=True)
    return StallWatch(output_dir, float(cfg.operation_timeout), clock)
