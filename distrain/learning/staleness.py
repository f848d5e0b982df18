"""Staleness statistics: how many updates lay between a gradient's parameters and its own.

The rules that produce the delays (async, syncreplicas) run on the parameter servers:
:mod:`distrain.train.ps.chief`.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
