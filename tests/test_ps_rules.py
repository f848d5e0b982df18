"""Exact tests of the parameter-server rules: known gradients in, the rule's values out.

A real cluster of TensorFlow servers in this process (one parameter server, three
workers, a chief), the graphs the workers build, and gradients fed by hand instead of
computed: each worker's gradient is its own number, so every value on the parameter
servers after a push is known (as TensorFlow tests its ``SyncReplicasOptimizer``).
"""

from __future__ import annotations

import numpy as np
import pytest

from distrain.train.config import TrainConfig
from distrain.train.inputs import DatasetInfo
from distrain.train.launch import free_ports

LR = 0.01


def adam_steps(*grads: float, lr: float = LR) -> float:
    """The change of a variable after Adam's updates with gradients ``grads``, in turn."""
    b1, b2, eps = 0.9, 0.999, 1e-7
    m = v = change = 0.0
    for t, grad in enumerate(grads, 1):
        m, v = b1 * m + (1 - b1) * grad, b2 * v + (1 - b2) * grad**2
        change -= lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
    return change


class Cluster:
    """Servers of a whole cluster in this process, and one graph per role."""

    def __init__(self, tmp_path, rule_for):
        import tensorflow as tf

        from distrain.train import ps

        ports = free_ports(5)
        self.cluster = {
            "ps": [f"localhost:{ports[0]}"],
            "worker": [f"localhost:{p}" for p in ports[1:4]],
            "chief": [f"localhost:{ports[4]}"],
        }
        info = DatasetInfo(
            data_dir=str(tmp_path),
            dataset="mnist",
            num_classes=2,
            class_names=["a", "b"],
            splits={"train": 8},
            files={},
            metadata={"image_shape": [2, 2]},
        )
        self.cfg = TrainConfig(
            data_dir=str(tmp_path), output_dir=str(tmp_path), run="async:3", learning_rate=LR
        )
        self.tf, self.ps = tf, ps
        self.servers = {}
        for job, addresses in self.cluster.items():
            for i in range(len(addresses)):
                role = ps.Role(self.cluster, job, i)
                self.servers[job, i] = ps.start_server(role, 1)
        self.workers = []
        for i in range(3):
            g = ps.PSGraph(self.cfg, info, ps.Role(self.cluster, "worker", i), rule_for())
            with g.graph.as_default():
                grads = [tf.compat.v1.placeholder(v.dtype, v.shape) for v in g.variables]
                read = tf.compat.v1.placeholder(tf.int64, [])

                def record(update, counted, recorded, delay, g=g, i=i):
                    return g.record(i, update, counted, recorded, delay, 1.5, 1.0)

                go_on, done, _ = g.rule.push(g, g.staged(grads), read, record)
            sess = g.session(self.servers["worker", i])
            self.workers.append((g, sess, grads, read, go_on, done))
        chief = ps.Chief(self.cfg, info, ps.Role(self.cluster, "chief", 0), rule_for())
        self.chief = chief
        chief.sess = chief.g.session(self.servers["chief", 0])
        chief.sess.run(chief.init)
        chief.sess.run(chief.init_lock)
        self.initial = chief.sess.run(chief.g.variables)
        chief.sess.run(chief.set_limit, {chief.new_limit: 10})

    def push(self, worker: int, value: float, read: int) -> bool:
        """Worker ``worker`` pushes a gradient of ``value`` everywhere, computed on ``read``."""
        g, sess, grads, read_ph, go_on, done = self.workers[worker]
        feed = {ph: np.full(ph.shape, value, np.float32) for ph in grads}
        feed[read_ph] = read
        ok, _ = sess.run([go_on, done], feed)
        return bool(ok)

    def values(self):
        c = self.chief
        return c.sess.run(c.g.variables)

    def counters(self):
        g = self.chief.g
        return self.chief.sess.run(
            {"version": g.version, "applied": g.applied, "steps": g.steps, "delays": g.delays}
        )


@pytest.fixture
def graph_rule(tmp_path):
    from distrain.train import ps

    def make(rule_for):
        return Cluster(tmp_path, rule_for)

    yield make
    ps  # noqa: B018 (imported for the fixture's users)


def test_syncreplicas_averages_two_fresh_gradients_and_drops_the_stale_one(graph_rule):
    from distrain.train.modes.syncreplicas import SyncReplicasRule

    c = graph_rule(lambda: SyncReplicasRule(2))
    # Worker 0's gradient waits in the accumulators: nothing is applied yet.
    assert c.push(0, 1.0, read=0)
    for before, now in zip(c.initial, c.values(), strict=True):
        np.testing.assert_array_equal(before, now)
    assert c.counters()["version"] == 0
    # Worker 1's makes two: their mean (2.0) is applied once and the version advances.
    assert c.push(1, 3.0, read=0)
    for before, now in zip(c.initial, c.values(), strict=True):
        np.testing.assert_allclose(now, before + adam_steps(2.0), rtol=1e-5, atol=1e-7)
    after_first = c.values()
    # Worker 2 computed on version 0 too: stale now, dropped, its delay 1.
    assert c.push(2, 100.0, read=0)
    for before, now in zip(after_first, c.values(), strict=True):
        np.testing.assert_array_equal(before, now)
    counters = c.counters()
    assert counters["version"] == counters["applied"] == 1
    assert list(counters["steps"]) == [1, 1, 1]
    assert counters["delays"][0][0] == counters["delays"][1][0] == 1
    assert counters["delays"][2][1] == 1 and counters["delays"][2].sum() == 1


def test_syncreplicas_makes_no_update_past_the_limit(graph_rule):
    from distrain.train.modes.syncreplicas import SyncReplicasRule

    c = graph_rule(lambda: SyncReplicasRule(1))
    chief = c.chief
    chief.sess.run(chief.set_limit, {chief.new_limit: 1})
    assert c.push(0, 1.0, read=0)
    # At the limit: refused (the worker waits for the chief), nothing changes or counts.
    assert not c.push(1, 1.0, read=1)
    counters = c.counters()
    assert counters["version"] == 1 and list(counters["steps"]) == [1, 0, 0]


def test_async_applies_each_gradient_and_counts_its_delay(graph_rule):
    from distrain.train.modes.asynchronous import AsyncRule

    c = graph_rule(AsyncRule)
    assert c.push(0, 2.0, read=0)
    for before, now in zip(c.initial, c.values(), strict=True):
        np.testing.assert_allclose(now, before + adam_steps(2.0), rtol=1e-5, atol=1e-7)
    # Worker 1 read version 0 before worker 0's update: applied all the same, delay 1.
    assert c.push(1, 2.0, read=0)
    counters = c.counters()
    assert counters["version"] == counters["applied"] == 2
    assert counters["delays"][0][0] == 1 and counters["delays"][1][1] == 1
    # Both applied in turn (float32 on the servers: to a few units in the last place).
    for before, now in zip(c.initial, c.values(), strict=True):
        np.testing.assert_allclose(now, before + adam_steps(2.0, 2.0), rtol=1e-5, atol=1e-6)
    chief = c.chief
    chief.sess.run(chief.set_limit, {chief.new_limit: 2})
    assert not c.push(2, 2.0, read=2)  # at the limit: not applied
    assert c.counters()["applied"] == 2
