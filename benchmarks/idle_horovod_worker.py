"""One rank of the Horovod-overhead measure: Horovod started, gradients never allreduced.

    mpirun -np 2 -H localhost:2 python benchmarks/idle_horovod_worker.py CONFIG OUT

(the suite starts the ranks as sync runs start theirs: under mpirun, or horovodrun --gloo).

Each rank binds to its cores as a sync rank does, starts Horovod as a sync rank does
(``start_horovod``: its background thread then runs a coordination round with the other
ranks every cycle, busy or not, at the priority sync runs give it) and trains ``CONFIG``
(a ``single:1`` run's ``train_config.json``) alone, into ``<output_dir>/rank-<r>``. Rank r
writes its examples/second to ``OUT.<r>``. Set next to two independent one-core runs and a
real sync run, it splits sync's loss of efficiency into the cost of Horovod running at all
and the cost of the allreduce rounds (with the waits for the slower rank).
"""

import dataclasses
import json
import sys
from pathlib import Path

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS first)
from distrain.train.config import TrainConfig
from distrain.train.worker import bind_rank_to_cores, start_horovod


def main() -> None:
    config, out = Path(sys.argv[1]), sys.argv[2]
    bind_rank_to_cores()  # as a sync rank, before TensorFlow starts its threads
    cfg = TrainConfig.from_json(config.read_text())
    hvd, _ = start_horovod(cfg.idle_horovod_threads)
    from distrain.train.loop import train

    if cfg.run.mode != "single":
        raise SystemExit(f"{config}: expected a single-mode run, got {cfg.run.name}")
    rank_dir = Path(cfg.output_dir) / f"rank-{hvd.rank()}"
    history = train(dataclasses.replace(cfg, output_dir=str(rank_dir)))
    Path(f"{out}.{hvd.rank()}").write_text(
        json.dumps({"examples_per_second": history["examples_per_second"]})
    )
    hvd.join()  # the first rank done keeps cycling until the other is done too


if __name__ == "__main__":
    main()
