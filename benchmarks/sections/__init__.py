"""The sections of the benchmark suite, one module each: its measure, targets and report lines.

1 ``preprocessing``, 1b ``dask``, 2 ``training``, 3/5/6 ``pipelines`` (one kfp.local run per
data set gives all three), 4 ``allreduce``, 7 ``scaling``, 8 ``peers``; sections 9-12 are
``benchmarks/model_parallel.py``, ``benchmarks/prose.py``, ``benchmarks/full_size.py`` and
``benchmarks/beam_memory.py``
(the last two also run as scripts, ``python -m benchmarks.prose`` and
``python -m benchmarks.full_size``). :func:`targets` gathers every section's targets in
the order of the report's table.
"""

from __future__ import annotations

from benchmarks.beam_memory import beam_memory_targets
from benchmarks.full_others import full_others_targets
from benchmarks.full_size import full_size_targets
from benchmarks.sections import peers, pipelines, preprocessing, training


def targets(results: dict) -> list[dict]:
    """Every target of the suite: measured value, whether it is met, and by how much not."""
    out = preprocessing.targets(results) + peers.targets(results)
    if results.get("full_size"):
        out += full_size_targets(results["full_size"])
    if results.get("beam_memory"):
        out += beam_memory_targets(results["beam_memory"])
    if results.get("full_others"):
        out += full_others_targets(results["full_others"])
    return out + training.targets(results) + pipelines.targets(results)
