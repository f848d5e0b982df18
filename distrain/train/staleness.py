"""Stale work: the SyncReplicas rule, staleness statistics, and calls given up on as stalled.

The rule is the one of TensorFlow's ``SyncReplicasOptimizer``: every gradient carries the
parameter version (global step) it was computed on. A gradient computed on an older
version than the current one is stale and dropped; fresh gradients accumulate until
``replicas_to_aggregate`` of them are there, then their mean is applied once and the
version advances. With more workers than ``replicas_to_aggregate``, the extra ones are
backup workers: the slowest gradients of each step arrive late and are dropped, so a
straggler does not hold the step up.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Outcome:
    """What happened to one submitted gradient.

    Attributes:
        accepted: Whether it counts towards an update (False: dropped as stale).
        applied: Whether its submission completed an update.
        delay: Versions between the one it was computed on and the one it was applied
            to (0) or dropped at (> 0).
    """

    accepted: bool
    applied: bool
    delay: int


class SyncReplicasAggregator:
    """Aggregates N of M replicas' gradients per step and drops stale ones.

    Args:
        replicas_to_aggregate: Gradients averaged into one update.
        apply_fn: Called with the list of mean gradients (one array per variable).
        version: The parameter version to start from (e.g. after a restore).
    """

    def __init__(
        self,
        replicas_to_aggregate: int,
        apply_fn: Callable[[list[np.ndarray]], object],
        version: int = 0,
    ):
        if replicas_to_aggregate < 1:
            raise ValueError(f"replicas_to_aggregate must be >= 1, got {replicas_to_aggregate}")
        self.replicas_to_aggregate = replicas_to_aggregate
        self.apply_fn = apply_fn
        self.version = version
        self.applied = 0
        self.dropped = 0
        self._pending: list[Sequence[np.ndarray]] = []

    def submit(self, grads: Sequence[np.ndarray], computed_on: int) -> Outcome:
        """Offers one replica's gradients computed on parameter version ``computed_on``."""
        if computed_on > self.version:
            raise ValueError(f"gradient from version {computed_on} is ahead of {self.version}")
        if computed_on < self.version:
            self.dropped += 1
            return Outcome(accepted=False, applied=False, delay=self.version - computed_on)
        self._pending.append(grads)
        if len(self._pending) < self.replicas_to_aggregate:
            return Outcome(accepted=True, applied=False, delay=0)
        mean = [
            np.mean(np.stack([np.asarray(g[i]) for g in self._pending]), axis=0)
            for i in range(len(self._pending[0]))
        ]
        self._pending = []
        self.apply_fn(mean)
        self.version += 1
        self.applied += 1
        return Outcome(accepted=True, applied=True, delay=0)


def summarize(delays: Sequence[int]) -> dict:
    """Mean, 95th percentile and maximum of staleness values (zeros when there are none)."""
    if len(delays) == 0:
        return {"count": 0, "mean": 0.0, "p95": 0.0, "max": 0}
    values = np.asarray(delays, dtype=np.float64)
    return {
        "count": int(values.size),
        "mean": float(values.mean()),
        "p95": float(np.percentile(values, 95)),
        "max": int(values.max()),
    }


class StallWatch:
    """[async] When a scheduled call has taken so long that its worker counts as stalled.

    A call's time runs from its scheduling to its results reaching the chief. The limit is
    ``factor`` times the median of the recent calls' times, and never under ``floor``
    seconds: a worker that is merely slower stays far inside it, one that is stopped,
    swapped out or hung soon passes it. Async training then schedules the call's steps
    again for the other workers instead of waiting (Downpour: no worker waits for another).
    Until a first call has finished there is no limit: the first calls also pay for
    tracing and for the workers' start, and nothing yet says how long a call takes.

    Args:
        factor: Multiple of the median call time.
        floor: Seconds: the least limit.
        window: Recent calls whose times make the median.
    """

    def __init__(self, factor: float = 20.0, floor: float = 5.0, window: int = 64):
        if factor <= 1 or floor <= 0:
            raise ValueError(f"StallWatch needs factor > 1 and floor > 0, got {factor}, {floor}")
        self.factor, self.floor = factor, floor
        self._times: deque[float] = deque(maxlen=window)

    def finished(self, seconds: float) -> None:
        """Records the time a call took."""
        self._times.append(seconds)

    def limit(self) -> float:
        """Seconds after which a call still running counts as stalled (inf: none yet)."""
        if not self._times:
            return math.inf
        return max(self.floor, self.factor * float(np.median(self._times)))

    def stalled(self, seconds: float) -> bool:
        """Whether a call running for ``seconds`` counts as stalled."""
        return seconds > self.limit()
