"""Exact tests of the parameter-server rules: known gradients in, the rule's values out.

A real cluster of TensorFlow servers in this process (one parameter server, three
workers, a chief), the graphs the workers build, and gradients fed by hand instead of
computed: each worker's gradient is its own number, so every value on the parameter
servers after a push is known (as TensorFlow tests its ``SyncReplicasOptimizer``).
"""

from __future__ import annotations

import numpy as np
import pytest

from distrain.datasets.info import DatasetInfo
from distrain.train.config import TrainConfig
from distrain.train.launch import free_ports
from distrain.train.ps import chief as chief_module
from distrain.train.ps.chief import Chief
from distrain.train.ps.graph import PSGraph
from distrain.train.ps.mirror import Mirror
from distrain.train.ps.roles import Role, start_server

LR = 0.01


def adam_steps(*grads: float, lr: float = LR, first: int = 1) -> float:
    """The change of a variable after Adam's updates with gradients ``grads``, in turn.

    ``first``: the optimizer's step of the first (a sparse row first touched at a later
    update: its moments start at zero, the bias correction is the step's).
    """
    b1, b2, eps = 0.9, 0.999, 1e-7
    m = v = change = 0.0
    for t, grad in enumerate(grads, first):
        m, v = b1 * m + (1 - b1) * grad, b2 * v + (1 - b2) * grad**2
        change -= lr * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
    return change


def tiny_info(tmp_path, classes: int) -> DatasetInfo:
    """An MNIST-like data set of 8 images of 2x2 pixels (only its metadata)."""
    return DatasetInfo(
        data_dir=str(tmp_path),
        dataset="mnist",
        num_classes=classes,
        class_names=[chr(ord("a") + i) for i in range(classes)],
        splits={"train": 8},
        files={},
        metadata={"image_shape": [2, 2]},
    )


class Cluster:
    """Servers of a whole cluster in this process, and one graph per role."""

    def __init__(self, tmp_path, rule_for, sparse: bool = False, model: str = ""):
        import tensorflow as tf

        ports = free_ports(5)
        self.cluster = {
            "ps": [f"localhost:{ports[0]}"],
            "worker": [f"localhost:{p}" for p in ports[1:4]],
            "chief": [f"localhost:{ports[4]}"],
        }
        info = tiny_info(tmp_path, 2)
        chosen = {"model": model} if model else {}  # a model file's (default: MNIST's)
        self.cfg = TrainConfig(
            data_dir=str(tmp_path),
            output_dir=str(tmp_path),
            run="async:3",
            learning_rate=LR,
            **chosen,
        )
        self.tf = tf
        self.servers = {}
        for job, addresses in self.cluster.items():
            for i in range(len(addresses)):
                role = Role(self.cluster, job, i)
                self.servers[job, i] = start_server(role, 1)
        self.workers = []
        for i in range(3):
            g = PSGraph(self.cfg, info, Role(self.cluster, "worker", i), rule_for())
            with g.graph.as_default(), tf.compat.v1.device(f"/job:worker/task:{i}"):
                _, variables = g.rule.trained(g)  # the shared variables, or a copy (easgd)
                grads = [tf.compat.v1.placeholder(v.dtype, v.shape) for v in variables]
                if sparse:  # the first variable's gradient in rows, as an embedding's
                    grads[0] = tf.IndexedSlices(
                        tf.compat.v1.placeholder(tf.float32, [None, *variables[0].shape[1:]]),
                        tf.compat.v1.placeholder(tf.int64, [None]),
                        tf.constant(variables[0].shape.as_list(), tf.int64),
                    )
                read = tf.compat.v1.placeholder(tf.int64, [])
                g.step_loss = tf.compat.v1.placeholder_with_default(1.0, [])

                def record(update, counted, recorded, delay, g=g, i=i):
                    # Each worker's loss its own (1.5, 3.0, 4.5), for the per-worker sums.
                    return g.record(i, update, counted, recorded, delay, 1.5 * (i + 1), 1.0)

                pushed = g.staged(grads) if variables is g.variables else grads
                go_on, done, wait = g.push(pushed, read, record)  # as a worker builds it
                if wait is None:
                    wait = tf.constant(False)
            sess = g.session(self.servers["worker", i])
            self.workers.append((g, sess, grads, read, go_on, done, wait))
        chief = Chief(self.cfg, info, Role(self.cluster, "chief", 0), rule_for())
        self.chief = chief
        chief.sess = chief.g.session(self.servers["chief", 0])
        chief.sess.run(chief.init)
        chief.sess.run(chief.init_lock)
        self.initial = chief.sess.run(chief.g.variables)
        for g, sess, *_ in self.workers:
            g.rule.worker_start(sess, g)
        chief.sess.run(chief.set_limit, {chief.new_limit: 10})

    def push(self, worker: int, value: float, read: int, loss=1.0) -> bool:
        """Worker ``worker`` pushes a gradient of ``value`` everywhere, computed on ``read``."""
        return self.pushed(worker, value, read, loss)[0]

    def pushed(self, worker: int, value: float, read: int, loss=1.0, rows=()) -> tuple[bool, bool]:
        """As :meth:`push`; also whether the worker is to wait before its next step.

        ``loss``: the step's mean loss the rule sees (easgd's adaptive period). ``rows``:
        the rows of a sparse first gradient (a cluster built with ``sparse``).
        """
        g, sess, grads, read_ph, go_on, done, wait = self.workers[worker]
        feed = {}
        for ph in grads:
            if isinstance(ph, self.tf.IndexedSlices):
                shape = [len(rows), *ph.values.shape[1:]]
                feed[ph.values] = np.full(shape, value, np.float32)
                feed[ph.indices] = np.array(rows, np.int64)
            else:
                feed[ph] = np.full(ph.shape, value, np.float32)
        feed[read_ph] = read
        feed[g.step_loss] = loss
        ok, _, must_wait = sess.run([go_on, done, wait], feed)
        return bool(ok), bool(must_wait)

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

    def make(rule_for):
        return Cluster(tmp_path, rule_for)

    yield make


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


def test_syncreplicas_applies_sparse_gradients_lazily_on_the_rows_they_touched(tmp_path):
    # Lazy Adam, as a single worker's sparse step: the mean of the accumulated rows updates
    # those rows only; a row no gradient of the update touched keeps its value and moments.
    from distrain.train.modes.syncreplicas import SyncReplicasRule

    c = Cluster(tmp_path, lambda: SyncReplicasRule(2), sparse=True)
    c.push_rows = lambda w, value, read, rows: c.pushed(w, value, read, rows=rows)[0]
    assert c.push_rows(0, 1.0, read=0, rows=[0])
    assert c.push_rows(1, 3.0, read=0, rows=[0, 2, 2])  # repeated rows add up
    first = c.values()
    # Row 0: (1 + 3) / 2; row 2: (3 + 3) / 2; rows 1 and 3 untouched.
    np.testing.assert_allclose(first[0][0], c.initial[0][0] + adam_steps(2.0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(first[0][2], c.initial[0][2] + adam_steps(3.0), rtol=1e-5, atol=1e-7)
    for row in (1, 3):
        np.testing.assert_array_equal(first[0][row], c.initial[0][row])
    # The dense variables: the mean of the dense gradients, (1 + 3) / 2.
    np.testing.assert_allclose(first[1], c.initial[1] + adam_steps(2.0), rtol=1e-5, atol=1e-7)
    # Second update, row 2 only: row 0 keeps its value (its moments did not decay into a
    # step), row 2 takes Adam's second step from its own moments (float32's 1 - beta_2 ** 2
    # is good to about 1e-5 of the step).
    assert c.push_rows(2, 2.0, read=1, rows=[2])
    assert c.push_rows(0, 4.0, read=1, rows=[2])
    second = c.values()
    np.testing.assert_array_equal(second[0][0], first[0][0])
    np.testing.assert_allclose(
        second[0][2], c.initial[0][2] + adam_steps(3.0, 3.0), rtol=1e-5, atol=1e-6
    )
    assert c.counters()["version"] == 2


def test_async_applies_sparse_gradients_lazily(tmp_path):
    # [async] each gradient is one update, lazy Adam on its rows alone.
    from distrain.train.modes.asynchronous import AsyncRule

    c = Cluster(tmp_path, AsyncRule, sparse=True)
    assert c.pushed(0, 1.0, read=0, rows=[1])[0]
    assert c.pushed(1, -2.0, read=1, rows=[3])[0]
    now = c.values()[0]
    np.testing.assert_allclose(now[1], c.initial[0][1] + adam_steps(1.0), rtol=1e-5, atol=1e-7)
    np.testing.assert_allclose(
        now[3], c.initial[0][3] + adam_steps(-2.0, first=2), rtol=1e-5, atol=1e-7
    )
    for row in (0, 2):
        np.testing.assert_array_equal(now[row], c.initial[0][row])


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
    # Each update is an epoch here (8 examples, batch 64): worker 0's update 0 is epoch
    # 0's, worker 1's update 1 epoch 1's; worker 2's refused step counts nowhere.
    first, second = chief.epoch_sums(0), chief.epoch_sums(1)
    assert first.loss == [1.5, 0.0, 0.0] and first.steps == [1, 0, 0]
    assert second.loss == [0.0, 3.0, 0.0] and second.correct == [0.0, 1.0, 0.0]
    assert second.shares() == [0.0, 1.0, 0.0]
    assert chief.epoch_sums(0).steps == [0, 0, 0]  # read once, then zeroed
    # The push decides inline (Switch and Merge), with no functional If on the servers.
    kinds = {op.type for op in c.workers[0][0].graph.get_operations()}
    assert {"Switch", "Merge"} <= kinds and not kinds & {"If", "StatelessIf"}


# ---- ssp ------------------------------------------------------------------------------------


def test_ssp_applies_as_async_and_holds_a_worker_past_the_bound(graph_rule):
    import threading
    import time

    from distrain.train.modes.ssp import SSPRule

    c = graph_rule(lambda: SSPRule(1))
    rule = c.workers[0][0].rule
    # Worker 0 runs ahead: one clock ahead of the others is within the bound...
    assert c.pushed(0, 2.0, read=0) == (True, False)
    # ...two is not: it is told to wait.
    assert c.pushed(0, 2.0, read=1) == (True, True)
    for before, now in zip(c.initial, c.values(), strict=True):
        np.testing.assert_allclose(now, before + adam_steps(2.0, 2.0), rtol=1e-5, atol=1e-6)
    g0, sess0 = c.workers[0][0], c.workers[0][1]
    clocks, retired = sess0.run(rule.read_all)
    assert list(clocks) == [2, 0, 0] and not retired.any()
    # Its wait ends only once the slowest worker is one clock behind it.
    waited = threading.Event()

    def block():
        rule.block(sess0, g0, None)
        waited.set()

    thread = threading.Thread(target=block)
    thread.start()
    time.sleep(0.3)
    assert not waited.is_set()
    assert c.pushed(1, 2.0, read=2) == (True, False)
    time.sleep(0.3)
    assert not waited.is_set()  # worker 2 is still at clock 0
    assert c.pushed(2, 2.0, read=3) == (True, False)
    thread.join(timeout=10)
    assert waited.is_set()
    history = rule.history(sess0, g0)
    assert history["clocks"] == [2, 1, 1] and history["retired_workers"] == []
    assert history["blocked_seconds_by_worker"]["0"] >= 0.5
    # The widest lead any worker started a step with never passed the bound.
    assert max(history["clock_gap_by_worker"].values()) == 1


def test_ssp_with_bound_zero_is_lockstep(graph_rule):
    from distrain.train.modes.ssp import SSPRule

    c = graph_rule(lambda: SSPRule(0))
    # Each worker that finishes clock 1 before the others waits for them...
    assert c.pushed(0, 1.0, read=0) == (True, True)
    assert c.pushed(1, 1.0, read=0) == (True, True)
    # ...and the last one of the clock goes on at once: every update of the clock is in.
    assert c.pushed(2, 1.0, read=0) == (True, False)
    rule, sess = c.workers[0][0].rule, c.workers[0][1]
    clocks, _ = sess.run(rule.read_all)
    assert list(clocks) == [1, 1, 1]
    assert c.counters()["applied"] == 3
    assert rule.gap(clocks, [False] * 3, 0) == (0, 0)


def test_ssp_leaves_a_worker_that_never_moves_out_of_the_bound(graph_rule):
    from distrain.train.modes import ssp

    c = graph_rule(lambda: ssp.SSPRule(0, patience=0.2))
    assert c.pushed(0, 1.0, read=0) == (True, True)
    assert c.pushed(1, 1.0, read=0) == (True, True)
    g0, sess0 = c.workers[0][0], c.workers[0][1]
    g0.rule.block(sess0, g0, None)  # worker 2 never pushes: retired, then worker 0 goes
    assert g0.rule.history(sess0, g0)["retired_workers"] == [2]
    # Worker 1 is at clock 1 as worker 0: within the bound now.
    assert c.pushed(1, 1.0, read=2) == (True, True)  # clock 2, ahead of worker 0's 1


def test_ssp_needs_its_bound():
    from distrain.base.errors import ConfigError
    from distrain.train.config import RunSpec

    assert RunSpec.parse("ssp:2:staleness=3").option("staleness") == 3
    assert RunSpec.parse("ssp:2:staleness=3").option("patience") == 20
    assert RunSpec.parse("ssp:2:staleness=0:ps=2").parameter_servers == 2
    with pytest.raises(ConfigError, match="staleness bound is required"):
        RunSpec.parse("ssp:2")
    with pytest.raises(ConfigError, match="staleness must be 0 or more"):
        RunSpec.parse("ssp:2:staleness=-1")


# ---- easgd ------------------------------------------------------------------------------------


def test_easgd_trains_a_copy_and_exchanges_the_elastic_difference_every_tau(graph_rule):
    from distrain.train.modes.easgd import EASGDRule

    c = graph_rule(lambda: EASGDRule(alpha=0.5, tau=2))
    g0, sess0 = c.workers[0][0], c.workers[0][1]
    rule = g0.rule

    def copy():
        return sess0.run(rule.model.trainable_variables)

    # Every copy starts at the centre.
    for start, centre in zip(copy(), c.initial, strict=True):
        np.testing.assert_array_equal(start, centre)
    # One step: the copy moves by Adam's step, the centre does not (no exchange yet).
    assert c.push(0, 2.0, read=0)
    for mine, centre, now in zip(copy(), c.initial, c.values(), strict=True):
        np.testing.assert_allclose(mine, centre + adam_steps(2.0), rtol=1e-5, atol=1e-7)
        np.testing.assert_array_equal(now, centre)
    # The second step ends the period: copy and centre meet halfway (alpha 0.5).
    assert c.push(0, 2.0, read=1)
    moved = adam_steps(2.0, 2.0)
    for mine, centre, now in zip(copy(), c.initial, c.values(), strict=True):
        np.testing.assert_allclose(now, centre + 0.5 * moved, rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(mine, centre + 0.5 * moved, rtol=1e-5, atol=1e-7)
    rounds, distance = sess0.run(rule.read)
    assert list(rounds) == [1, 0, 0]
    size = sum(v.size for v in c.initial)
    assert distance[0] == pytest.approx(abs(moved) * np.sqrt(size), rel=1e-4)
    # The other workers' copies are their own: still at the (old) centre.
    g1, sess1 = c.workers[1][0], c.workers[1][1]
    for theirs, centre in zip(sess1.run(g1.rule.model.trainable_variables), c.initial, strict=True):
        np.testing.assert_array_equal(theirs, centre)
    counters = c.counters()
    assert counters["version"] == counters["applied"] == 2
    assert counters["delays"].sum() == 2 and counters["delays"][0][0] == 2  # never stale


def test_easgd_adaptive_period_grows_as_the_loss_falls(graph_rule):
    from distrain.train.modes.easgd import EASGDRule

    # (A bound of 100 steps: the period's loss alone decides here.)
    c = graph_rule(lambda: EASGDRule(alpha=0.5, tau=None, threshold=2.5, bound=100))
    rule, sess = c.workers[0][0].rule, c.workers[0][1]

    def rounds():
        return int(sess.run(rule.read)[0][0])

    # A loss of 1 a step: the summed loss reaches 2.5 at the third step.
    for step in range(1, 4):
        assert c.push(0, 1.0, read=step - 1, loss=1.0)
        assert rounds() == (1 if step == 3 else 0)
    # At 0.5 a step the period is five steps.
    for step in range(4, 9):
        assert c.push(0, 1.0, read=step - 1, loss=0.5)
        assert rounds() == (2 if step == 8 else 1)


def test_easgd_adaptive_period_is_bounded_so_the_centre_moves_every_epoch(graph_rule):
    # [easgd] issue 51: a loss too small to reach the threshold still exchanges every
    # `bound` steps, and a loss that reaches it first restarts the count.
    from distrain.train.modes.easgd import EASGDRule, adaptive_bound

    c = graph_rule(lambda: EASGDRule(alpha=0.5, tau=None, threshold=2.5, bound=3))
    rule, sess = c.workers[0][0].rule, c.workers[0][1]

    def rounds():
        return int(sess.run(rule.read)[0][0])

    chief = c.chief
    chief.sess.run(chief.set_limit, {chief.new_limit: 20})
    seen = []
    for step, loss in enumerate([0.01] * 7 + [3.0, 0.01, 0.01, 0.01], start=1):
        assert c.push(0, 1.0, read=step - 1, loss=loss)
        seen.append(rounds())
    # Bound at steps 3 and 6, the threshold at 8 (a count of 2 since 6), bound again at 11.
    assert seen == [0, 0, 1, 1, 1, 2, 2, 3, 3, 3, 4]
    assert c.chief.rule.exchanges(c.chief.sess) == 4
    # The default bound: an epoch's updates over the workers; this cluster's epoch is one
    # update (8 examples, batch 64), so every step exchanges.
    assert adaptive_bound(41, 2) == 20 and adaptive_bound(1, 3) == 1
    d = graph_rule(lambda: EASGDRule(alpha=0.5, tau=None, threshold=1e9))
    assert d.workers[1][0].rule.bound == 1
    assert d.push(1, 1.0, read=0, loss=0.01)
    assert int(d.workers[1][1].run(d.workers[1][0].rule.read)[0][1]) == 1


def test_easgd_spec():
    from distrain.base.errors import ConfigError
    from distrain.train.config import RunSpec

    spec = RunSpec.parse("easgd:3:tau=4")
    assert spec.option("alpha") == pytest.approx(0.3) and spec.name == "easgd:3:tau=4"
    adaptive = RunSpec.parse("easgd:2:tau=adaptive:threshold=5")
    assert adaptive.option("tau") == "adaptive" and adaptive.option("threshold") == 5.0
    for bad, message in [
        ("easgd:2", "tau is required"),
        ("easgd:2:tau=0", "tau must be at least 1"),
        ("easgd:2:tau=4:threshold=3", "threshold goes with tau=adaptive"),
        ("easgd:2:tau=adaptive:threshold=-1", "threshold must be positive"),
        ("easgd:2:tau=4:alpha=1.5", "alpha must be between 0 and 1"),
    ]:
        with pytest.raises(ConfigError, match=message):
            RunSpec.parse(bad)


def test_the_chief_lets_the_workers_go_together_but_waits_for_no_absent_one(monkeypatch):
    import time
    import types

    chief = object.__new__(Chief)
    joined = iter([0, 1, 2])
    chief.sess = types.SimpleNamespace(run=lambda _: next(joined))
    chief.g, chief.role = types.SimpleNamespace(joined=None), types.SimpleNamespace(workers=2)
    chief.wait_for_workers()  # returns once both have joined
    with pytest.raises(StopIteration):
        next(joined)
    # A worker that never comes: the chief goes on without it after JOIN_SECONDS.
    monkeypatch.setattr(chief_module, "JOIN_SECONDS", 0.2)
    chief.sess = types.SimpleNamespace(run=lambda _: 1)
    start = time.monotonic()
    chief.wait_for_workers()
    assert 0.2 <= time.monotonic() - start < 2.0


@pytest.mark.parametrize("model", ["mlp", "softmax-l2"])
def test_a_workers_mirror_differentiates_the_shared_values_and_packs_the_push(tmp_path, model):
    """One read per server fills the worker's copy before its step; one tensor goes back.

    The shared variables are moved away from the values the copy starts with, so a step
    that read its copy before the refresh would give other gradients (the L2 penalty's
    too: it reads the copy's weights).
    """
    import tensorflow as tf

    from distrain.train.modes.asynchronous import AsyncRule
    from distrain.train.replica import batch_gradients

    ports = free_ports(3)
    cluster = {
        "ps": [f"localhost:{ports[0]}"],
        "worker": [f"localhost:{ports[1]}"],
        "chief": [f"localhost:{ports[2]}"],
    }
    info = tiny_info(tmp_path, 3)
    cfg = TrainConfig(data_dir=str(tmp_path), output_dir=str(tmp_path), run="async:1", model=model)
    servers = {job: start_server(Role(cluster, job, 0), 1) for job in ("ps", "worker", "chief")}
    chief = Chief(cfg, info, Role(cluster, "chief", 0), AsyncRule())
    g = chief.g
    with g.graph.as_default():
        moved = [v.assign_add(0.1 * tf.ones_like(v) + 0.05 * tf.sign(v)) for v in g.variables]
    chief.sess = g.session(servers["chief"])
    chief.sess.run(chief.init)
    initial = chief.sess.run(g.variables)
    chief.sess.run(moved)
    shared = chief.sess.run(g.variables)

    w = PSGraph(cfg, info, Role(cluster, "worker", 0), AsyncRule())
    with w.graph.as_default(), tf.compat.v1.device("/job:worker/task:0"):
        x = tf.compat.v1.placeholder(tf.float32, [4, 2, 2])
        y = tf.compat.v1.placeholder(tf.int32, [4])
        with tf.compat.v1.device("/job:ps/task:0"):
            read = w.version.read_value()
        mirror = Mirror(w, read)
        with tf.control_dependencies([mirror.refresh]):
            _, _, grads = batch_gradients(mirror.model, mirror.variables, x, y, w.task)
        assert Mirror.fits(mirror.model, grads)
        pushed = w.staged(grads)
    assert {t.device for t in pushed} == {w.variables[0].device}  # on the parameter server
    sess = w.session(servers["worker"])
    sess.run(mirror.init)
    rng = np.random.default_rng(3)
    feed = {x: rng.normal(size=(4, 2, 2)).astype(np.float32), y: np.array([0, 1, 2, 1], np.int32)}
    got = sess.run(pushed, feed)

    def gradients_at(values):
        model = w.spec.build(info, cfg.seed)
        for var, value in zip(model.trainable_variables, values, strict=True):
            var.assign(value)
        with tf.GradientTape() as tape:
            loss = tf.reduce_mean(w.task.losses(feed[y], model(feed[x], training=True)))
            loss += tf.add_n(model.losses) if model.losses else 0.0
        return [g.numpy() for g in tape.gradient(loss, model.trainable_variables)]

    expected, before = gradients_at(shared), gradients_at(initial)
    for a, b in zip(got, expected, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-7)
    assert any(not np.allclose(a, b) for a, b in zip(got, before, strict=True))
