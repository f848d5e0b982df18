"""The Beam transforms every preprocessing job shares, beside its own.

The split assignment (a hash of seed and record index), the counts' sum, the separation of
a multi-output step's tagged elements, and a global combine that runs alike on every runner.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np

_MASK = np.uint64(0xFFFFFFFFFFFFFFFF)


def _splitmix64(x: np.ndarray) -> np.ndarray:
    x = x.astype(np.uint64)
    with np.errstate(over="ignore"):
        x = (x + np.uint64(0x9E3779B97F4A7C15)) & _MASK
        x = ((x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)) & _MASK
        x = ((x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)) & _MASK
        return x ^ (x >> np.uint64(31))


def validation_mask(indices: np.ndarray, seed: int, fraction: float) -> np.ndarray:
    """Which records go to validation: a hash of (seed, record index), vectorised.

    The assignment depends only on the seed and each record's index in its source, never
    on the runner, the batch size or the order in which records arrive.

    Args:
        indices: Record indices (any integer array).
        seed: Split seed.
        fraction: Expected share of validation records, in [0, 1).

    Returns:
        A boolean array, True for validation.
    """
    mixed = _splitmix64(np.asarray(indices, dtype=np.uint64) ^ _splitmix64(np.array([seed]))[0])
    uniform = (mixed >> np.uint64(11)).astype(np.float64) / float(1 << 53)
    return uniform < fraction


class SumStatsFn(beam.CombineFn):
    """Adds up nested dicts of counts (ints or equal-length lists of ints)."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, acc: dict, stats: dict) -> dict:
        return _merge(acc, stats)

    def merge_accumulators(self, accumulators: Iterable[dict]) -> dict:
        out: dict = {}
        for acc in accumulators:
            out = _merge(out, acc)
        return out

    def extract_output(self, acc: dict) -> dict:
        return acc


def _merge(a: dict, b: dict) -> dict:
    out = dict(a)
    for key, value in b.items():
        if isinstance(value, dict):
            out[key] = _merge(out.get(key, {}), value)
        elif isinstance(value, list):
            old = out.get(key)
            out[key] = value if old is None else [x + y for x, y in zip(old, value, strict=True)]
        else:
            out[key] = out.get(key, 0) + value
    return out


# Runners differ in what they support; the jobs keep to what all of them run alike.
# Beam 2.77's Dask runner hands every output of a multi-output ParDo (``with_outputs``)
# to every consumer, computes only the graph of the pipeline's last transform, and
# evaluates side inputs inside a task by computing their whole graph again. So a DoFn
# yields ``(tag, value)`` pairs that :class:`ByTag` separates, a job ends with
# :class:`AllWritten` over every sink, combines run through :class:`CombineAll` (no side
# input), and the only side inputs are the vocabularies.


class ByTag(beam.PTransform):
    """Separates ``(tag, value)`` pairs into one PCollection of values per tag.

    Used instead of a multi-output ParDo: the DoFn yields ``(tag, value)`` and each tag's
    consumer reads its own filter of them, which every runner runs alike.
    """

    def __init__(self, *tags: str):
        super().__init__()
        self.tags = tags

    def expand(self, pairs):
        return {tag: pairs | f"Only_{tag}" >> beam.FlatMap(_values_of, tag) for tag in self.tags}


def _values_of(pair, tag):
    if pair[0] == tag:
        yield pair[1]


class _Nothing:
    """Stands in for 'no input' in :class:`CombineAll` (never an element of a job)."""


class _OrNothing(beam.CombineFn):
    """A CombineFn that skips :class:`_Nothing` inputs."""

    def __init__(self, fn: beam.CombineFn):
        self.fn = fn

    def create_accumulator(self):
        return self.fn.create_accumulator()

    def add_input(self, acc, value):
        return acc if isinstance(value, _Nothing) else self.fn.add_input(acc, value)

    def merge_accumulators(self, accumulators):
        return self.fn.merge_accumulators(accumulators)

    def extract_output(self, acc):
        return self.fn.extract_output(acc)


class CombineAll(beam.PTransform):
    """Combines a whole PCollection into exactly one element, also when it is empty.

    What ``CombineGlobally(fn)`` does, without its side input (it injects the default
    for an empty input through one): a single ``_Nothing`` element joins the input and
    the CombineFn skips it.
    """

    def __init__(self, fn: beam.CombineFn):
        super().__init__()
        self.fn = fn

    def expand(self, pcoll):
        keyed = pcoll | "Key" >> beam.Map(lambda value: (None, value))
        nothing = pcoll.pipeline | "Nothing" >> beam.Create([(None, _Nothing())])
        return (
            (keyed, nothing)
            | "WithNothing" >> beam.Flatten()
            | "Combine" >> beam.CombinePerKey(_OrNothing(self.fn))
            | "Value" >> beam.Map(lambda kv: kv[1])
        )
