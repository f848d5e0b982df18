"""Exact tests of each parameter-server mode's rule for non-trainable state.

Batch norm's moving statistics are changed by the forward pass, not by a gradient. A
real cluster of TensorFlow servers in this process (one parameter server, the workers,
a chief), the workers' own step graphs (:class:`distrain.train.ps.worker_loop.Worker`) fed
known batches, and a model whose first layer is a ``BatchNormalization``: every moving
mean and variance on the parameter servers after a step is known (docs/modes.md,
"Non-trainable state").
"""

from __future__ import annotations

import numpy as np
import pytest

from distrain.train.config import TrainConfig
from distrain.train.launch import free_ports
from distrain.train.ps.chief import Chief
from distrain.train.ps.roles import Role, start_server
from distrain.train.ps.worker_loop import Worker
from tests.rules.test_ps_rules import tiny_info

MOMENTUM = 0.75

MODEL = f"""
import tf_keras as keras


def build(info, seed):
    inputs = keras.Input((2, 2))
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.BatchNormalization(momentum={MOMENTUM}, name="bn")(x)
    return keras.Model(inputs, keras.layers.Dense(info.num_classes)(x))
"""

# A perceptron over MNIST's images with batch norm after its hidden layer.
MNIST_MODEL = f"""
import tf_keras as keras


def build(info, seed):
    inputs = info.feature_spec.keras_inputs(keras)
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Dense(16, activation="relu")(x)
    x = keras.layers.BatchNormalization(momentum={MOMENTUM}, name="bn")(x)
    return keras.Model(inputs, keras.layers.Dense(info.num_classes)(x))
"""


def batch(seed: int) -> np.ndarray:
    """A known batch of 4 images of 2x2 pixels: its mean and variance differ per seed."""
    base = np.arange(16, dtype=np.float32).reshape(4, 2, 2)
    return (base * (seed + 1) + 3 * seed) / 8


def moved(mean, variance, x, momentum=MOMENTUM):
    """Keras's moving statistics after one training step on ``x`` (per flattened pixel)."""
    flat = x.reshape(len(x), -1).astype(np.float64)
    return (
        mean - (mean - flat.mean(0)) * (1 - momentum),
        variance - (variance - flat.var(0)) * (1 - momentum),
    )


class Cluster:
    """One parameter server, ``workers`` workers stepping on fed batches, and a chief."""

    def __init__(self, tmp_path, workers: int, rule_for, run: str):
        import tensorflow as tf

        self.tf = tf
        path = tmp_path / "bn_model.py"
        path.write_text(MODEL)
        ports = free_ports(2 + workers)
        cluster = {
            "ps": [f"localhost:{ports[0]}"],
            "worker": [f"localhost:{p}" for p in ports[1 : 1 + workers]],
            "chief": [f"localhost:{ports[-1]}"],
        }
        cfg = TrainConfig(
            data_dir=str(tmp_path), output_dir=str(tmp_path), run=run, model=f"{path}:build"
        )
        info = tiny_info(tmp_path, 2)
        servers = {}
        for job, addresses in cluster.items():
            for i in range(len(addresses)):
                servers[job, i] = start_server(Role(cluster, job, i), 1)
        self.workers = []
        for i in range(workers):
            fed = {}

            def inputs(fed=fed):
                fed["x"] = tf.compat.v1.placeholder(tf.float32, [None, 2, 2])
                fed["y"] = tf.compat.v1.placeholder(tf.int32, [None])
                return fed["x"], fed["y"]

            w = Worker(cfg, info, Role(cluster, "worker", i), rule_for(), inputs=inputs)
            assert w.mirror is None  # a model with non-trainable variables is not mirrored
            sess = w.g.session(servers["worker", i])
            self.workers.append((w, sess, fed))
        self.chief = Chief(cfg, info, Role(cluster, "chief", 0), rule_for())
        c = self.chief
        c.sess = c.g.session(servers["chief", 0])
        c.sess.run(c.init)
        c.sess.run(c.init_lock)
        c.sess.run(c.set_limit, {c.new_limit: 10})
        for w, sess, _ in self.workers:
            w.rule.worker_start(sess, w.g)
        bn = c.g.model.get_layer("bn")
        self.read = [bn.moving_mean, bn.moving_variance]

    def step(self, worker: int, x: np.ndarray) -> bool:
        """Worker ``worker`` makes one step on batch ``x``; whether it may go on."""
        w, sess, fed = self.workers[worker]
        y = np.zeros([len(x)], np.int32)
        return bool(sess.run(w.fetch_step, {fed["x"]: x, fed["y"]: y})[0])

    def statistics(self):
        """The moving mean and variance on the parameter servers."""
        return self.chief.sess.run(self.read)

    def limit(self, updates: int) -> None:
        c = self.chief
        c.sess.run(c.set_limit, {c.new_limit: updates})


def close(actual, expected) -> None:
    for a, e in zip(actual, expected, strict=True):
        np.testing.assert_allclose(a, e, rtol=1e-6, atol=1e-6)


START = (np.zeros(4), np.ones(4))


def test_async_moves_the_servers_statistics_by_each_granted_step_only(tmp_path):
    from distrain.train.modes.asynchronous import AsyncRule

    c = Cluster(tmp_path, 2, AsyncRule, "async:2")
    close(c.statistics(), START)
    assert c.step(0, batch(0))
    first = moved(*START, batch(0))
    close(c.statistics(), first)
    assert c.step(1, batch(1))
    second = moved(*first, batch(1))
    close(c.statistics(), second)
    # At the chief's limit a step is refused: its gradient and its statistics both wait.
    c.limit(2)
    assert not c.step(0, batch(2))
    close(c.statistics(), second)


def test_ssp_moves_them_as_async(tmp_path):
    from distrain.train.modes.ssp import SSPRule

    c = Cluster(tmp_path, 2, lambda: SSPRule(staleness=3), "ssp:2:staleness=3")
    c.step(1, batch(3))
    c.step(0, batch(1))
    close(c.statistics(), moved(*moved(*START, batch(3)), batch(1)))


def test_syncreplicas_moves_them_once_per_update_and_drops_a_stale_steps(tmp_path):
    from distrain.train.modes.syncreplicas import SyncReplicasRule

    c = Cluster(tmp_path, 3, lambda: SyncReplicasRule(2), "syncreplicas:3:aggregate=2")
    c.step(0, batch(0))
    close(c.statistics(), START)  # waiting in the accumulators, with its gradient
    c.step(1, batch(1))
    # One update: the mean of the two steps' changes, both computed on the start values.
    mean0, var0 = moved(*START, batch(0))
    mean1, var1 = moved(*START, batch(1))
    update = ((mean0 + mean1) / 2, (var0 + var1) / 2)
    close(c.statistics(), update)
    # Worker 2 read the parameters before that update: stale, dropped, nothing moves.
    assert _stale_step(c, 2, batch(2))
    close(c.statistics(), update)
    # The next two fresh steps make the second update, from the first's values.
    c.step(0, batch(3))
    c.step(1, batch(4))
    mean3, var3 = moved(*update, batch(3))
    mean4, var4 = moved(*update, batch(4))
    close(c.statistics(), ((mean3 + mean4) / 2, (var3 + var4) / 2))


def _stale_step(c: Cluster, worker: int, x: np.ndarray) -> bool:
    """A step of ``worker`` whose parameters were read at version 0 (a straggler's)."""
    w, sess, fed = c.workers[worker]
    read = w.fetch_step[2]  # the version the step read, fed as a straggler's
    y = np.zeros([len(x)], np.int32)
    return bool(sess.run(w.fetch_step, {fed["x"]: x, fed["y"]: y, read: 0})[0])


def test_easgd_pulls_the_centres_statistics_toward_the_copies_at_each_exchange(tmp_path):
    from distrain.train.modes.easgd import EASGDRule

    alpha = 0.5
    c = Cluster(tmp_path, 2, lambda: EASGDRule(alpha, tau=2), "easgd:2:tau=2")
    # Worker 0's first step moves its own copy only: the centre keeps the start values.
    c.step(0, batch(0))
    close(c.statistics(), START)
    c.step(0, batch(1))  # its second: an exchange, c += alpha (x - c)
    copy = moved(*moved(*START, batch(0)), batch(1))
    centre = tuple(s + alpha * (x - s) for s, x in zip(START, copy, strict=True))
    close(c.statistics(), centre)
    # Worker 1's copy started at the centre's start values; its exchange pulls again.
    c.step(1, batch(2))
    c.step(1, batch(3))
    other = moved(*moved(*START, batch(2)), batch(3))
    centre = tuple(s + alpha * (x - s) for s, x in zip(centre, other, strict=True))
    close(c.statistics(), centre)


_SYNC = """
import json, sys
from types import SimpleNamespace
import distrain  # noqa: F401
import numpy as np
import tensorflow as tf
import tf_keras as keras
from distrain.train.config import TrainConfig
from distrain.train.horovod import start_horovod
from distrain.train.modes.single import share_state
from distrain.train.modes.sync import SyncSteps
from distrain.train.replica import Group, Replica
from distrain.train.runtime import configure_tensorflow

cfg = TrainConfig.from_json(open(sys.argv[2]).read())
configure_tensorflow(cfg)
hvd, _ = start_horovod(False)
r = hvd.rank()
group = Group(r, hvd.size(), hvd)
out = {"rank": r}

# Known values: each rank's BN layer steps on its own batch, then the rule.
bn = keras.layers.BatchNormalization(momentum=%(momentum)s)
x = np.arange(8, dtype=np.float32).reshape(4, 2) * (r + 1) + r
bn(x, training=True)
out["own"] = [bn.moving_mean.numpy().tolist(), bn.moving_variance.numpy().tolist()]
model = keras.Sequential([keras.Input((2,)), bn])
share_state(SimpleNamespace(group=group, tf=tf, model=model))
out["shared"] = [bn.moving_mean.numpy().tolist(), bn.moving_variance.numpy().tolist()]

# The mode's steps: each rank on its shard, rank 0's statistics every rank's at the end.
replica = Replica(cfg, group)
steps = SyncSteps(replica)
steps.start()
steps.run(0, 0, 4)
layer = replica.model.get_layer("bn")
out["run"] = [layer.moving_mean.numpy().tolist(), layer.moving_variance.numpy().tolist()]
open(f"{sys.argv[1]}/result-{r}.json", "w").write(json.dumps(out))
"""


@pytest.mark.horovod
def test_sync_ranks_take_rank_0s_moving_statistics_at_each_segment_end(mnist_examples, tmp_path):
    from tests.rules.ranks import run_on_ranks

    path = tmp_path / "bn_model.py"
    path.write_text(MNIST_MODEL)
    cfg = TrainConfig(
        data_dir=str(mnist_examples),
        output_dir=str(tmp_path / "out"),
        run="sync:2",
        model=f"{path}:build",
    )
    config = cfg.save(tmp_path / "config.json")
    results = run_on_ranks(tmp_path, _SYNC % {"momentum": MOMENTUM}, str(config))
    x0 = np.arange(8, dtype=np.float32).reshape(4, 2)
    rank0 = moved(np.zeros(2), np.ones(2), x0)
    for result in results:
        close(result["shared"], rank0)  # rank 0's own, exactly, on every rank
    assert results[1]["own"] != results[0]["own"]  # the ranks' own differed before
    run0, run1 = results[0]["run"], results[1]["run"]
    assert run0 == run1  # the same statistics on both ranks after the segment
    assert run0[0] != [0.0] * len(run0[0]) and run0[1] != [1.0] * len(run0[1])  # and moved


@pytest.mark.case("usermodel/batch-norm-pipeline")
def test_pipeline_refuses_batch_norm_naming_the_layer_and_tensor_and_hybrid_take_it(
    mnist_examples, tmp_path
):
    from distrain.base.errors import ConfigError
    from distrain.preprocess.failures import Failure
    from distrain.steps import check_user_model

    path = tmp_path / "bn_model.py"
    path.write_text(MNIST_MODEL)

    def cfg(run):
        out = str(tmp_path / "o")
        return TrainConfig(
            data_dir=str(mnist_examples), output_dir=out, run=run, model=f"{path}:build"
        )

    with pytest.raises(ConfigError) as err:
        check_user_model(cfg("pipeline:2"))
    line = str(err.value)
    assert "layer bn (BatchNormalization) of model" in line and "micro-batches" in line
    assert "\n" not in line and Failure.of("train", err.value).exit_code == 2
    for run in ("tensor:2", "hybrid:2:2"):
        check_user_model(cfg(run))  # taken: no refusal
