"""Exact tests of sync's rule on two Horovod ranks: known gradients in, their mean out.

Each rank gives its own numbers; the reduced gradients must be the mean over the ranks,
dense and sparse alike, and sync's steps traced several to a call must make the same
updates as one step a call.
"""

from __future__ import annotations

import pytest

from distrain.train.config import TrainConfig
from tests.rules.ranks import run_on_ranks

_RULE = """
import json, sys
import distrain  # noqa: F401
import numpy as np
import tensorflow as tf
from distrain.train.replica import allreduce_gradients
from distrain.train.runtime import start_horovod

hvd, _ = start_horovod(False)
r = hvd.rank()
reduce = allreduce_gradients(hvd)

@tf.function
def reduced():
    dense = tf.constant([1.0, 2.0]) * (r + 1)  # rank 0: [1, 2], rank 1: [2, 4]
    rows = tf.constant([[10.0 * (r + 1)]])  # rank 0: row 0 is 10, rank 1: row 1 is 20
    sparse = tf.IndexedSlices(rows, tf.constant([r]), tf.constant([2, 1]))
    return reduce([dense, sparse])

dense, sparse = reduced()
out = {"rank": r, "dense": dense.numpy().tolist(),
       "sparse": tf.convert_to_tensor(sparse).numpy().tolist()}
open(f"{sys.argv[1]}/result-{r}.json", "w").write(json.dumps(out))
"""

_CALLS = """
import json, sys
import distrain  # noqa: F401
import numpy as np
from distrain.train.config import TrainConfig
from distrain.train.modes.sync import SyncSteps
from distrain.train.replica import Group, Replica
from distrain.train.runtime import configure_tensorflow, start_horovod

cfg = TrainConfig.from_json(open(sys.argv[2]).read())
configure_tensorflow(cfg)
hvd, _ = start_horovod(False)
weights = {}
for per_call in (1, 4):
    replica = Replica(cfg, Group(hvd.rank(), hvd.size(), hvd))
    steps = SyncSteps(replica)
    steps.steps_per_call = per_call
    steps.start()  # rank 0's initial weights to both
    loss_sum, correct, _ = steps.run(0, 0, 8)  # 8 steps: 8 calls of 1, or 2 of 4
    weights[per_call] = [v.numpy() for v in replica.model.weights]
    weights[f"loss{per_call}"] = loss_sum
same = all(np.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(weights[1], weights[4]))
result = {"rank": hvd.rank(), "same": bool(same), "steps": replica.step,
          "losses": [weights["loss1"], weights["loss4"]]}
open(f"{sys.argv[1]}/result-{hvd.rank()}.json", "w").write(json.dumps(result))
"""


@pytest.mark.horovod
def test_sync_reduces_each_gradient_to_the_ranks_mean(tmp_path):
    for result in run_on_ranks(tmp_path, _RULE):
        assert result["dense"] == [1.5, 3.0]  # ([1, 2] + [2, 4]) / 2
        # Rank 0's row 0 (10) and rank 1's row 1 (20), each divided by the 2 ranks.
        assert result["sparse"] == [[5.0], [10.0]]


@pytest.mark.slow
@pytest.mark.horovod
def test_sync_steps_traced_four_to_a_call_make_the_updates_of_one_a_call(mnist_examples, tmp_path):
    cfg = TrainConfig(data_dir=str(mnist_examples), output_dir=str(tmp_path / "out"), run="sync:2")
    config = cfg.save(tmp_path / "config.json")
    for result in run_on_ranks(tmp_path, _CALLS, str(config)):
        assert result["steps"] == 8
        assert result["same"], result
        one, four = result["losses"]
        assert one == pytest.approx(four, rel=1e-5)
