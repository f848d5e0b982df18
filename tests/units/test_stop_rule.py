"""The until-plateau stop rule no mode can fool (issue 51): no TensorFlow, no cluster.

Patience counts only evaluations whose scored weights changed, a run is not stopped
before its scored weights have taken the mode's minimum of exchanges, and the history
says why it stopped. The driver runs with a fake replica whose validation loss is a
function of its weights, as a real model's is: weights that did not move score the same.
"""

from __future__ import annotations

import numpy as np
import pytest

from distrain.base.errors import ConfigError
from distrain.train.config import TrainConfig
from distrain.train.driver import EpochDriver, Plateau, epoch_list, weights_digest
from tests.units.test_driver import FakeReplica, FakeSteps


def test_evaluations_of_unchanged_weights_do_not_count_towards_patience():
    # The run: val_loss 0.2348 at epochs 4-7, the same centre scored four times.
    p = Plateau(3)
    centre = ["c1", "c2", "c3", "c3", "c3", "c3", "c4", "c5", "c6", "c7"]
    losses = [0.5, 0.3, 0.2348, 0.2348, 0.2348, 0.2348, 0.22, 0.23, 0.24, 0.25]
    stops = []
    for epoch, (digest, loss) in enumerate(zip(centre, losses, strict=True), start=1):
        p.update(epoch, loss, digest)
        stops.append(p.stop)
    # Counting bare epochs, epoch 6 would have stopped it (3 epochs after the best at 3).
    assert stops == [False] * 9 + [True]
    assert (p.best_epoch, p.best, p.unchanged) == (7, 0.22, [4, 5, 6])
    assert p.reason() == (
        "stopped: validation loss did not improve over 3 evaluations whose weights changed "
        "(epochs 8-10); best 0.2200 at epoch 7; epochs 4-6 not counted: their scored "
        "weights had not changed since the evaluation before"
    )
    # A resumed run replays the same state from the history's records.
    q = Plateau(3)
    q.replay(
        [
            {"epoch": e, "val_loss": v, "weights_digest": d}
            for e, (d, v) in enumerate(zip(centre, losses, strict=True), start=1)
        ]
    )
    assert q.to_dict() == p.to_dict()


def test_no_stop_before_the_minimum_of_exchanges():
    p = Plateau(2, min_exchanges=10)
    for epoch, (loss, exchanges) in enumerate([(1.0, 3), (1.1, 5), (1.2, 7), (1.3, 10)], 1):
        p.update(epoch, loss, f"w{epoch}", exchanges)
        assert p.stop == (epoch == 4), epoch  # patience ran out at 3, the exchanges at 4
    assert p.held_at == 3
    assert p.reason().endswith(
        "best 1.0000 at epoch 1; 10 exchanges of the scored weights (at least 10 before a stop)"
    )
    q = Plateau(2, min_exchanges=10)
    for epoch, loss in enumerate([1.0, 1.1, 1.2], 1):
        q.update(epoch, loss, f"w{epoch}", 7)
    assert not q.stop
    assert (
        "patience ran out at epoch 3, but the scored weights had taken fewer than the "
        "10 exchanges a stop needs (7 by epoch 3)" in q.reason()
    )


def test_epoch_lists_and_digests():
    assert epoch_list([9, 4, 5, 6, 11, 12]) == "4-6, 9, 11-12"
    a = [np.zeros((2, 2), np.float32), np.ones(3, np.float32)]
    b = [np.zeros((2, 2), np.float32), np.ones(3, np.float32)]
    assert weights_digest(a) == weights_digest(b)
    b[1][2] = np.nextafter(np.float32(1), np.float32(2))  # one unit in the last place
    assert weights_digest(a) != weights_digest(b)
    assert weights_digest([np.zeros(4)]) != weights_digest([np.zeros((2, 2))])


class CentreModel:
    """A model whose weights are one number, the centre an exchange moves."""

    trainable_variables = ()  # (the history counts the parameters)

    def __init__(self):
        self.value = 0.0

    def get_weights(self):
        return [np.array([self.value], np.float32)]

    def set_weights(self, weights):
        self.value = float(weights[0][0])


class CentreReplica(FakeReplica):
    """Validation loss is a function of the weights: the same centre scores the same."""

    def __init__(self, tmp_path):
        super().__init__(tmp_path, info_train=64)
        self.model = CentreModel()

    def evaluate(self):
        # Best at a centre of 10, worse on either side.
        return 0.2 + 0.01 * abs(self.model.value - 10.0), 0.9


class ExchangingEngine(FakeSteps):
    """Exchanges move the centre by 1, in the epochs of ``moves`` (1-based) only."""

    def __init__(self, replica, moves, per_epoch=8):
        super().__init__(replica, per_epoch)
        self.moves, self.count = moves, 0

    def run(self, epoch, position, stop):
        out = super().run(epoch, position, stop)
        if stop == self.per_epoch and epoch + 1 in self.moves:
            self.replica.model.value += 1.0
            self.count += 1
        return out

    def exchanges(self):
        return self.count


def test_a_centre_unchanged_for_several_epochs_is_not_stopped(tmp_path):
    # easgd:2:tau=adaptive as the issue saw it: the centre moves in epochs 1-3, then no
    # exchange for epochs 4-7 (the same validation numbers), then every epoch again.
    cfg = TrainConfig(
        data_dir=str(tmp_path),
        output_dir=str(tmp_path),
        run="easgd:2:tau=adaptive",
        epochs=20,
        batch_size=4,
        until_plateau=3,
        checkpoint_every_steps=0,
    )
    moves = {1, 2, 3, *range(8, 21)}
    replica = CentreReplica(tmp_path)
    history = EpochDriver(cfg, replica, ExchangingEngine(replica, moves)).run()
    plateau = history["until_plateau"]
    epochs = history["epochs"]
    assert [e["val_loss"] for e in epochs[3:7]] == [epochs[2]["val_loss"]] * 4
    # The centre reaches 10 at epoch 14: the best; epochs 15-17 are worse, and it stops.
    assert len(epochs) == 17 and plateau["stopped_early"]
    assert plateau["best_epoch"] == 14 and plateau["unchanged_epochs"] == [4, 5, 6, 7]
    # The mode's minimum: one epoch's worth at the adaptive period's start (4 steps).
    assert plateau["min_exchanges"] == 8 // 4 and plateau["exchanges"] == 13
    assert plateau["reason"].startswith(
        "stopped: validation loss did not improve over 3 evaluations whose weights "
        "changed (epochs 15-17); best 0.2000 at epoch 14; 13 exchanges"
    )
    assert "epochs 4-7 not counted" in plateau["reason"]
    assert replica.model.value == 10.0  # the best epoch's weights back


def test_min_exchanges_is_a_setting_with_the_modes_rule_by_default(tmp_path):
    from distrain.train.config import RunSpec

    assert RunSpec.parse("easgd:2:tau=4").impl.min_exchanges(40) == 10
    assert RunSpec.parse("easgd:2:tau=adaptive").impl.min_exchanges(140) == 35
    assert RunSpec.parse("avg:2:period=8").impl.min_exchanges(20) == 3  # 8, 16, 20
    assert RunSpec.parse("async:2").impl.min_exchanges(20) == 20  # every update
    cfg = TrainConfig(data_dir="d", output_dir="o", min_exchanges=7)
    assert cfg.min_exchanges == 7
    with pytest.raises(ConfigError, match="min_exchanges must be 0"):
        TrainConfig(data_dir="d", output_dir="o", min_exchanges=-1)
