"""Exact tests of the rate rules (issue 51): known gradients and staleness in, the updates out.

Linear scaling with Goyal et al.'s gradual warm-up (``scale_learning_rate`` and
``warmup_epochs``, the ``lr_scaling=linear`` rule of ``sync:N``), and async's
staleness-aware rate (``async:N:lr=staleness``, Zhang et al. 2016: each update's rate
over its staleness, 1 + its delay).
"""

from __future__ import annotations

import numpy as np
import pytest

from distrain.base.errors import ConfigError
from distrain.train.config import RunSpec, TrainConfig
from tests.rules.test_ps_rules import Cluster

LR = 0.01


def adam_changes(grads, rates) -> float:
    """A variable's change after Adam's updates with ``grads``, update ``t`` at ``rates[t]``."""
    b1, b2, eps = 0.9, 0.999, 1e-7
    m = v = change = 0.0
    for t, (grad, rate) in enumerate(zip(grads, rates, strict=True), 1):
        m, v = b1 * m + (1 - b1) * grad, b2 * v + (1 - b2) * grad**2
        change -= rate * np.sqrt(1 - b2**t) / (1 - b1**t) * m / (np.sqrt(v) + eps)
    return change


def test_warm_up_rises_linearly_to_the_scaled_rate_then_stays():
    import tensorflow as tf

    from distrain.learning.optim import Adam

    # Base 0.01 scaled to 0.04 (sync:4), warmed up over 3 updates: 0.02, 0.03, 0.04, 0.04.
    adam = Adam(0.04, warmup_updates=3, warmup_from=0.01)
    var = tf.Variable([1.0, -2.0])
    adam.build([var])
    grads = [1.0, 2.0, -1.0, 0.5]
    for grad in grads:
        adam.apply_gradients([(tf.constant([grad, grad]), var)])
    expected = adam_changes(grads, [0.02, 0.03, 0.04, 0.04])
    np.testing.assert_allclose(var.numpy(), [1.0 + expected, -2.0 + expected], rtol=1e-5)
    assert [float(adam.step_size(float(t))) for t in (1, 2, 3, 9)] == pytest.approx(
        [0.02, 0.03, 0.04, 0.04]
    )
    # Without a warm-up, the constant rate (the step size is the learning rate).
    assert float(Adam(0.04).step_size(1.0)) == pytest.approx(0.04)


def test_linear_scaling_with_warm_up_is_two_settings_of_sync():
    cfg = TrainConfig(
        data_dir="d", output_dir="o", run="sync:4", learning_rate=LR, warmup_epochs=2.5
    )
    assert cfg.effective_learning_rate == pytest.approx(4 * LR)  # scale_learning_rate
    assert cfg.rate_schedule(updates_per_epoch=10) == {"warmup_updates": 25, "warmup_from": LR}
    off = TrainConfig(data_dir="d", output_dir="o", run="sync:4", learning_rate=LR)
    assert off.rate_schedule(10) == {}
    with pytest.raises(ConfigError, match="warmup_epochs must be 0"):
        TrainConfig(data_dir="d", output_dir="o", warmup_epochs=-1)


def test_a_replica_warms_its_optimizer_up_over_the_epochs(tmp_path, mnist_examples):
    from distrain.train.replica import Replica

    cfg = TrainConfig(
        data_dir=str(mnist_examples),
        output_dir=str(tmp_path),
        learning_rate=LR,
        warmup_epochs=2,
        batch_size=16,
    )
    replica = Replica(cfg)
    opt = replica.optimizer
    assert opt.warmup_updates == 2 * replica.batches_per_epoch() and opt.warmup_from == LR


def test_async_divides_each_update_by_its_staleness(tmp_path):
    from distrain.train.modes.asynchronous import AsyncRule

    c = Cluster(tmp_path, lambda: AsyncRule(staleness_rate=True))
    # All three read version 0: delays 0, 1 and 2, so staleness 1, 2 and 3.
    assert c.push(0, 2.0, read=0)
    for before, now in zip(c.initial, c.values(), strict=True):
        np.testing.assert_allclose(now, before + adam_changes([2.0], [LR]), rtol=1e-5, atol=1e-7)
    assert c.push(1, 2.0, read=0)
    assert c.push(2, -1.0, read=0)
    # Then a fresh one (read at 3): the full rate again.
    assert c.push(0, 0.5, read=3)
    expected = adam_changes([2.0, 2.0, -1.0, 0.5], [LR, LR / 2, LR / 3, LR])
    for before, now in zip(c.initial, c.values(), strict=True):
        np.testing.assert_allclose(now, before + expected, rtol=1e-5, atol=1e-7)
    delays = c.counters()["delays"]
    assert [int(np.argmax(row)) for row in delays] == [0, 1, 2]


def test_async_rate_option():
    # The default stays out of the spec, so a run's key and fingerprint are as before.
    assert RunSpec.parse("async:2").options == RunSpec.parse("async:2:lr=constant").options
    assert RunSpec.parse("async:2").option("lr") is None
    spec = RunSpec.parse("async:2:lr=staleness")
    assert spec.name == "async:2:lr=staleness" and spec.impl.rule().staleness_rate
    assert RunSpec.parse("async:2").name == "async:2"
    assert not RunSpec.parse("async:2").impl.rule().staleness_rate
    with pytest.raises(ConfigError, match="lr must be constant or staleness"):
        RunSpec.parse("async:2:lr=sqrt")
