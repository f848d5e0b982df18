"""The non-finite loss check: known losses in, the first bad step named (issue 49)."""

from __future__ import annotations

import math
from types import SimpleNamespace

import numpy as np
import pytest

from distrain.preprocess.failures import Failure, classify
from distrain.train.modes.single import LocalSteps
from distrain.train.nonfinite import (
    LossWatch,
    NonFiniteLoss,
    check_weights,
    describe,
    first_bad,
    is_finite,
)

NAN, INF = math.nan, math.inf


@pytest.mark.case("train/non-finite-loss")
@pytest.mark.parametrize(
    "losses, first",
    [
        ([0.5, 0.4, 0.3], None),
        ([0.5, NAN, 0.3], 1),
        ([INF, NAN], 0),
        ([0.5, 0.4, -INF], 2),
        ([], None),
    ],
)
def test_the_first_non_finite_loss_is_found(losses, first):
    assert first_bad(losses) == first
    assert is_finite(sum(losses)) is (first is None)


@pytest.mark.case("train/non-finite-loss")
def test_stop_raises_a_permanent_error_naming_run_rank_epoch_and_step():
    watch = LossWatch("stop", "sync:2", "rank 1")
    with pytest.raises(NonFiniteLoss) as caught:
        watch.bad(epoch=2, step=37, loss=NAN)
    line = str(caught.value)
    assert line == describe("sync:2", "rank 1", 2, 37, NAN)
    assert line.startswith("[sync:2] rank 1: the training loss is nan at epoch 2, step 37 (")
    # Permanent: not retried, exit 2, one line without the exception's type.
    assert classify(caught.value) is False
    failure = Failure.of("train", caught.value)
    assert failure.exit_code == 2 and failure.message == line


@pytest.mark.case("train/non-finite-loss")
def test_continue_trains_on_saying_so_once_and_counting():
    said = []
    watch = LossWatch("continue", "single:1", "rank 0", said.append)
    watch.bad(epoch=1, step=3, loss=INF)
    watch.bad(epoch=1, step=4, loss=NAN, steps=5)
    assert len(said) == 1 and "epoch 1, step 3" in said[0] and "on_nan=continue" in said[0]
    assert watch.history() == {
        "on_nan": "continue",
        "non_finite_losses": 6,
        "first_non_finite_loss": {"epoch": 1, "step": 3, "who": "rank 0"},
    }
    watch.epoch(1, NAN)  # the epoch's sum: no second line
    assert len(said) == 1


@pytest.mark.case("train/non-finite-loss")
def test_an_epoch_loss_the_steps_did_not_check_stops_the_run():
    LossWatch("stop", "async:2", "rank 0").epoch(1, 12.5)  # finite: nothing
    with pytest.raises(NonFiniteLoss, match=r"\[async:2\] rank 0: the training loss of epoch 3"):
        LossWatch("stop", "async:2", "rank 0").epoch(3, NAN)


@pytest.mark.case("train/non-finite-loss")
def test_weights_with_a_nan_or_inf_are_not_written():
    good = [np.ones((2, 3), np.float32), np.arange(4)]
    check_weights(good, "model.keras")
    bad = [np.array([1.0, NAN, INF], np.float32), np.zeros(7, np.float32)]
    with pytest.raises(NonFiniteLoss, match=r"model.keras: 2 of 10 weights are NaN or infinite"):
        check_weights(bad, "model.keras")


class _Replica:
    """Just what :class:`LocalSteps` asks of a replica, its steps' losses given."""

    def __init__(self, on_nan: str, per_epoch: int):
        import tensorflow as tf

        self.tf, self.step, self.rank = tf, 0, 0
        self.cfg = SimpleNamespace(seed=0)
        self.per_epoch = per_epoch
        self.lines: list[str] = []
        self.losses = LossWatch(on_nan, "single:1", "rank 0", self.lines.append)

    def batches_per_epoch(self) -> int:
        return self.per_epoch

    def train_shard(self, seed):
        return self.tf.data.Dataset.from_tensor_slices(self.feed).map(lambda x: (x, x))


def _engine(losses: list[float], on_nan: str, steps_per_call: int, per_epoch: int = 100):
    replica = _Replica(on_nan, per_epoch)
    replica.feed = np.asarray(losses, np.float32)
    tf = replica.tf

    @tf.function
    def step(x, y):  # the traced step: its loss is the batch's given loss
        return x, tf.constant(1.0)

    engine = LocalSteps(replica, step, steps_per_call)
    engine.start()
    return engine, replica


@pytest.mark.case("train/non-finite-loss")
@pytest.mark.parametrize("steps_per_call", [1, 4, 16])
def test_local_steps_name_the_first_bad_step_of_a_call(steps_per_call):
    losses = [0.5] * 12
    losses[6], losses[9] = INF, NAN  # the 7th step is the first bad one
    engine, _ = _engine(losses, "stop", steps_per_call, per_epoch=10)
    with pytest.raises(NonFiniteLoss, match=r"loss is inf at epoch 1, step 7 \("):
        engine.run(epoch=0, position=0, stop=10)


@pytest.mark.case("train/non-finite-loss")
def test_local_steps_name_the_step_of_the_run_in_a_later_epoch():
    losses = [0.5] * 8 + [NAN] * 4
    engine, _ = _engine(losses, "stop", 16, per_epoch=5)
    engine.run(epoch=0, position=0, stop=5)
    with pytest.raises(NonFiniteLoss, match=r"loss is nan at epoch 2, step 9 \("):
        engine.run(epoch=1, position=0, stop=5)


@pytest.mark.case("train/non-finite-loss")
def test_local_steps_with_continue_train_on_and_count_every_bad_step():
    losses = [0.5, 0.5, NAN, 0.5, INF, 0.5, 0.5, 0.5]
    engine, replica = _engine(losses, "continue", 16, per_epoch=8)
    loss_sum, correct, _ = engine.run(epoch=0, position=0, stop=8)
    assert math.isnan(loss_sum) and correct == 8
    assert replica.losses.count == 2
    assert replica.losses.first == {"epoch": 1, "step": 3, "who": "rank 0"}
    assert len(replica.lines) == 1
