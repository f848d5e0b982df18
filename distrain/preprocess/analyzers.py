"""Analyzers: what a model needs from the training data, computed in Beam.

As TFX Transform's analyzers (``tft.mean``, ``tft.var``, ``tft.min``, ``tft.max``,
``tft.vocabulary``), these are full passes over the data, written as combiners so that
any runner computes them in parallel and merges the parts:

* :class:`MomentsFn` gives a numeric feature's count, mean, variance (population, as
  tf-keras ``Normalization.adapt`` computes it), min and max, **per element** of the
  feature (a feature of shape ``[8]`` has eight means). Parts merge by Chan, Golub and
  LeVeque's pairwise update (``M2 = M2a + M2b + delta**2 * na * nb / n``), which never
  subtracts two large sums of squares, so a feature of mean 1e9 and variance 1 keeps its
  variance.
* :class:`TopKFn` keeps the ``k`` most frequent tokens of exact per-token counts, ties
  broken by the token's bytes in ascending order, so the vocabulary is the same on every
  runner whatever the order the counts arrive in.
* :func:`distrain.preprocess.tokens.tokens` splits a ``bytes`` value into tokens.

The transforms do no I/O: the job that uses them writes what they give.
"""

from __future__ import annotations

from collections.abc import Iterable

import apache_beam as beam
import numpy as np

# ---- moments -----------------------------------------------------------------------------


def batch_moments(values: np.ndarray) -> tuple:
    """The moments of a batch ``[n, size]``: ``(n, mean, M2, min, max)`` per element."""
    values = np.asarray(values)
    if values.ndim == 1:
        values = values[:, None]
    wide = values.astype(np.float64)
    mean = wide.mean(axis=0)
    return (
        len(values),
        mean,
        ((wide - mean) ** 2).sum(axis=0),
        values.min(axis=0),
        values.max(axis=0),
    )


def merge_moments(a: tuple | None, b: tuple | None) -> tuple | None:
    """Two parts' moments as one (Chan et al.'s pairwise update); None is no part."""
    if a is None or not a[0]:
        return b
    if b is None or not b[0]:
        return a
    na, mean_a, m2_a, low_a, high_a = a
    nb, mean_b, m2_b, low_b, high_b = b
    if len(mean_a) != len(mean_b):
        raise ValueError(f"moments of {len(mean_a)} and {len(mean_b)} elements cannot merge")
    n = na + nb
    delta = mean_b - mean_a
    return (
        n,
        mean_a + delta * (nb / n),
        m2_a + m2_b + delta**2 * (na * nb / n),
        np.minimum(low_a, low_b),
        np.maximum(high_a, high_b),
    )


def _plain(values: np.ndarray) -> list:
    """JSON's numbers: Python ints for integer arrays, floats otherwise."""
    return [int(v) for v in values] if values.dtype.kind in "iu" else [float(v) for v in values]


class MomentsFn(beam.CombineFn):
    """Batches of a numeric feature's values (``[n, size]`` arrays) to their statistics.

    Output: ``{"count", "mean", "variance", "min", "max"}``, each but ``count`` a list
    of ``size`` numbers (element-wise; variance is the population's, divided by
    ``count``); ``{"count": 0}`` for no values.
    """

    def create_accumulator(self):
        return None

    def add_input(self, acc, values):
        return merge_moments(acc, batch_moments(values))

    def merge_accumulators(self, accumulators: Iterable):
        out = None
        for acc in accumulators:
            out = merge_moments(out, acc)
        return out

    def extract_output(self, acc) -> dict:
        if acc is None:
            return {"count": 0}
        n, mean, m2, low, high = acc
        return {
            "count": int(n),
            "mean": _plain(mean),
            "variance": _plain(m2 / n),
            "min": _plain(low),
            "max": _plain(high),
        }


# ---- vocabularies ------------------------------------------------------------------------


def _rank(entry: tuple) -> tuple:
    """The order of a vocabulary: more frequent first, then the token ascending.

    A token is bytes (ordered by its bytes) or str (by code point: the order of its
    UTF-8 bytes).
    """
    return -entry[1], entry[0]


class TopKFn(beam.CombineFn):
    """``(token, count)`` pairs, one per distinct token with its whole count, to the top ``k``.

    Output: ``{"tokens": [...], "counts": [...], "distinct": n}``: at most ``k`` tokens,
    most frequent first, ties broken by the token in ascending order (:func:`_rank`);
    ``distinct`` counts every token seen. The accumulator never holds more than ``k``
    entries, whatever the number of distinct tokens.
    """

    def __init__(self, k: int):
        if k < 1:
            raise ValueError(f"a vocabulary's size must be positive, got {k}")
        self.k = k

    def create_accumulator(self):
        return [], 0

    def add_input(self, acc, entry):
        kept, distinct = acc
        kept.append((entry[0], int(entry[1])))
        if len(kept) > 2 * self.k:  # trimmed now and then: amortised, bounded
            kept.sort(key=_rank)
            del kept[self.k :]
        return kept, distinct + 1

    def merge_accumulators(self, accumulators):
        kept, distinct = [], 0
        for part, seen in accumulators:
            kept = sorted([*kept, *part], key=_rank)[: self.k]
            distinct += seen
        return kept, distinct

    def extract_output(self, acc) -> dict:
        kept, distinct = acc
        top = sorted(kept, key=_rank)[: self.k]
        return {
            "tokens": [token for token, _ in top],
            "counts": [count for _, count in top],
            "distinct": distinct,
        }


class TopTokens(beam.PTransform):
    """``((feature, token), count)`` partial counts to each feature's top-``k`` vocabulary.

    Counts are summed per token first (exact, as ``tft.vocabulary`` does), then each
    feature's top ``k`` are kept (:class:`TopKFn`). Output: ``(feature, {"tokens",
    "counts", "distinct"})``.
    """

    def __init__(self, k: int):
        super().__init__()
        self.k = k

    def expand(self, counts):
        return (
            counts
            | "SumPerToken" >> beam.CombinePerKey(sum)
            | "ByFeature" >> beam.Map(lambda kv: (kv[0][0], (kv[0][1], kv[1])))
            | "TopK" >> beam.CombinePerKey(TopKFn(self.k))
        )
