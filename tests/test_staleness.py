"""The SyncReplicas rule, checked like TensorFlow's own SyncReplicasOptimizer tests:
3 replicas, 2 aggregated, known gradients give a known variable value, stale ones are dropped."""

import numpy as np
import pytest

from distrain.train.staleness import StallWatch, SyncReplicasAggregator, summarize


class SGD:
    """var -= lr * grad, on two variables, recording every update."""

    def __init__(self, lr=1.0):
        self.lr = lr
        self.var0 = np.array([1.0, 2.0])
        self.var1 = np.array([3.0])
        self.updates = []

    def __call__(self, mean):
        self.updates.append([m.copy() for m in mean])
        self.var0 = self.var0 - self.lr * mean[0]
        self.var1 = self.var1 - self.lr * mean[1]


def grads(a, b):
    return [np.array([a, a]), np.array([b])]


def test_three_replicas_aggregate_two_known_values():
    sgd = SGD(lr=2.0)
    agg = SyncReplicasAggregator(2, sgd)
    # Step 0: replicas 0 and 1 arrive first, computed on version 0.
    assert agg.submit(grads(0.1, 1.0), 0).applied is False
    out = agg.submit(grads(0.3, 3.0), 0)
    assert out.accepted and out.applied and out.delay == 0
    np.testing.assert_allclose(sgd.var0, [1.0 - 2 * 0.2, 2.0 - 2 * 0.2])
    np.testing.assert_allclose(sgd.var1, [3.0 - 2 * 2.0])
    # Replica 2 (the backup) arrives late with a gradient of version 0: dropped.
    late = agg.submit(grads(100.0, 100.0), 0)
    assert late == type(late)(accepted=False, applied=False, delay=1)
    np.testing.assert_allclose(sgd.var0, [0.6, 1.6])
    # Step 1: two fresh gradients on version 1 make the second update.
    agg.submit(grads(0.5, -1.0), 1)
    agg.submit(grads(0.7, -3.0), 1)
    np.testing.assert_allclose(sgd.var0, [0.6 - 2 * 0.6, 1.6 - 2 * 0.6])
    np.testing.assert_allclose(sgd.var1, [-1.0 - 2 * -2.0])
    assert (agg.version, agg.applied, agg.dropped) == (2, 2, 1)
    assert len(sgd.updates) == 2


def test_gradient_two_versions_old_has_delay_two():
    agg = SyncReplicasAggregator(1, lambda mean: None)
    for _ in range(3):
        agg.submit(grads(1, 1), agg.version)
    assert agg.submit(grads(1, 1), 1).delay == 2
    with pytest.raises(ValueError, match="ahead"):
        agg.submit(grads(1, 1), 99)


def test_aggregating_all_replicas_is_fully_synchronous():
    sgd = SGD()
    agg = SyncReplicasAggregator(3, sgd)
    for g in (0.3, 0.6, 0.9):
        agg.submit(grads(g, g), 0)
    assert sgd.updates and np.allclose(sgd.updates[0][0], [0.6, 0.6])
    assert agg.dropped == 0


def test_summarize():
    assert summarize([]) == {"count": 0, "mean": 0.0, "p95": 0.0, "max": 0}
    stats = summarize([0] * 95 + [1] * 4 + [7])
    assert stats["count"] == 100 and stats["max"] == 7
    assert stats["mean"] == pytest.approx(0.11)
    assert 0 <= stats["p95"] <= 1


def test_bad_aggregate():
    with pytest.raises(ValueError):
        SyncReplicasAggregator(0, lambda m: None)


def test_stall_watch_limit_follows_the_recent_calls():
    watch = StallWatch(factor=20, floor=5.0, window=4)
    assert watch.limit() == float("inf")  # no call has finished: nothing to judge by
    assert not watch.stalled(3600)
    for seconds in (0.05, 0.04, 0.06):
        watch.finished(seconds)
    assert watch.limit() == 5.0  # 20 x 0.05 s is under the floor
    assert not watch.stalled(4.9) and watch.stalled(5.1)
    for seconds in (0.5, 0.5, 0.6, 0.5):  # slower calls: only the last 4 count
        watch.finished(seconds)
    assert watch.limit() == pytest.approx(10.0)
    assert not watch.stalled(9.0) and watch.stalled(10.5)
    with pytest.raises(ValueError, match="factor > 1"):
        StallWatch(factor=1.0)
