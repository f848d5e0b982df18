"""Exact tests of ``avg`` (periodic model averaging) on two Horovod ranks.

As PyTorch tests its ``PeriodicModelAverager``: each rank's parameters are set to its rank,
and after each exchange they must be exactly the (weighted) mean, untouched in between.
The learning rate is 0, so training steps move nothing and only the rule does.
"""

from __future__ import annotations

import numpy as np
import pytest

from distrain.train.config import TrainConfig
from distrain.train.launch import run_training
from tests.rules.ranks import run_on_ranks

_AVG = """
import json, sys
import distrain  # noqa: F401
import numpy as np
import tensorflow as tf
from distrain.train.config import TrainConfig
from distrain.train.modes.avg import AverageSteps
from distrain.train.modes.single import LocalSteps
from distrain.train.replica import Group, Replica
from distrain.train.horovod import start_horovod
from distrain.train.runtime import configure_tensorflow

cfg = TrainConfig.from_json(open(sys.argv[2]).read())
configure_tensorflow(cfg)
hvd, _ = start_horovod(False)
r = hvd.rank()
replica = Replica(cfg, Group(r, hvd.size(), hvd))
replica.optimizer.learning_rate = 0.0  # steps move nothing: only the rule does (before tracing)
steps = AverageSteps(replica, period=4)
steps.start()

def set_rank():
    for v in replica.model.variables:
        v.assign(tf.fill(v.shape, tf.cast(r, v.dtype)))

def values():
    return sorted({float(x) for v in replica.model.variables for x in np.unique(v.numpy())})

out = {"rank": r, "seen": []}
for step in range(1, 10):
    set_rank()
    if steps.due(step):
        out["distance"] = steps.exchange()
    out["seen"].append(values())
set_rank()
steps.average(1.0 + 2 * r)  # rank 0 weighs 1, rank 1 weighs 3
out["weighted"] = values()
set_rank()
LocalSteps.run(steps, 0, 0, 3)  # three local steps: no exchange, nothing moves
out["local"] = values()
set_rank()
rounds = steps.rounds
steps.run(0, 3, 8)  # the driver's segment: exchanges at update 4 and 8 only
out["segment"] = [values(), steps.rounds - rounds, replica.step]
out["size"] = int(sum(v.shape.num_elements() for v in replica.model.variables))
open(f"{sys.argv[1]}/result-{r}.json", "w").write(json.dumps(out))
"""


@pytest.mark.horovod
def test_avg_replaces_weights_by_their_mean_at_each_exchange_only(mnist_examples, tmp_path):
    cfg = TrainConfig(
        data_dir=str(mnist_examples),
        output_dir=str(tmp_path / "out"),
        run="avg:2:period=4",
    )
    config = cfg.save(tmp_path / "config.json")
    for result in run_on_ranks(tmp_path, _AVG, str(config)):
        rank = float(result["rank"])
        for step, seen in enumerate(result["seen"], 1):
            assert seen == ([0.5] if step % 4 == 0 else [rank]), step
        # Before the exchange each replica was 0.5 from the mean in every coordinate.
        assert result["distance"] == pytest.approx(0.5 * np.sqrt(result["size"]), rel=1e-5)
        assert result["weighted"] == [0.75]  # (0 * 1 + 1 * 3) / 4
        assert result["local"] == [rank]
        values, rounds, step = result["segment"]
        assert values == [0.5] and rounds == 2 and step == 8


@pytest.mark.slow
@pytest.mark.horovod
def test_avg_replicas_end_equal_and_independent_starts_diverge_more(mnist_examples, tmp_path):
    first = {}
    for init in ("shared", "independent"):
        out = tmp_path / init
        cfg = TrainConfig(
            data_dir=str(mnist_examples),
            output_dir=str(out),
            run=f"avg:2:period=8:init={init}",
            epochs=3,
            batch_size=32,
            dump_rank_weights=True,
        )
        history = run_training(cfg, timeout=300)
        per_epoch = 1339 // 2 // cfg.batch_size
        assert history["steps"] == 3 * per_epoch
        # An exchange every 8 updates, and one at each epoch's end that is not one.
        due = [s for s in range(1, 3 * per_epoch + 1) if s % 8 == 0 or s % per_epoch == 0]
        assert history["communication_rounds"] == len(due)
        assert history["bytes_per_worker"] > 0
        # The model evaluated and saved is the average: both ranks hold it.
        ranks = [np.load(out / "weights" / f"rank{r}.npz") for r in (0, 1)]
        for key in ranks[0].files:
            np.testing.assert_array_equal(ranks[0][key], ranks[1][key])
        if init == "shared":
            assert history["epochs"][-1]["val_accuracy"] > 0.8
        first[init] = history["divergence"][0][1]
    # Seed 002's point: replicas from one initialisation stay close; from their own,
    # they start far apart.
    assert first["independent"] > 3 * first["shared"]


def test_avg_spec_options_are_checked():
    from distrain.base.errors import ConfigError
    from distrain.train.config import RunSpec

    spec = RunSpec.parse("avg:4:period=8:init=independent:weights=accuracy:common=0.1")
    assert spec.name == "avg:4:period=8:init=independent:weights=accuracy:common=0.1"
    assert RunSpec.parse("avg:2:period=3").name == "avg:2:period=3"
    for bad, message in [
        ("avg:2", "period must be at least 1"),
        ("avg:2:period=0", "period must be at least 1"),
        ("avg:2:period=2:init=mine", "init must be shared or independent"),
        ("avg:2:period=2:weights=loss", "weights must be uniform or accuracy"),
        ("avg:2:period=2:common=1.5", "common must be at least 0 and below 1"),
        ("avg:2:period=2:min=1", "avg mode has no option 'min'"),
    ]:
        with pytest.raises(ConfigError, match=message):
            RunSpec.parse(bad)
    cfg = TrainConfig(data_dir="d", output_dir="o", run="avg:4:period=2")
    assert cfg.effective_learning_rate == cfg.learning_rate  # each replica its own steps
