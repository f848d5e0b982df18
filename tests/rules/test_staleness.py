"""Staleness statistics. The rules that produce the delays are tested exactly in
test_ps_rules.py, on a cluster of TensorFlow servers."""

import pytest

from distrain.learning.staleness import summarize


def test_summarize():
    assert summarize([]) == {"count": 0, "mean": 0.0, "p95": 0.0, "max": 0}
    stats = summarize([0] * 95 + [1] * 4 + [7])
    assert stats["count"] == 100 and stats["max"] == 7
    assert stats["mean"] == pytest.approx(0.11)
    assert 0 <= stats["p95"] <= 1
