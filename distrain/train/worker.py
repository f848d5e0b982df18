"""Entry point of one training process: ``distrain worker --config FILE``.

The launcher (or ``mpirun``, or a pod) starts one per rank, worker or chief; the run's
mode says what the process does (:meth:`distrain.train.modes.Mode.train`).
"""

from __future__ import annotations

import argparse
import faulthandler
import os
import signal
import sys
from pathlib import Path

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from distrain.train.config import TrainConfig
from distrain.train.runtime import bind_rank_to_cores, configure_tensorflow, die_with_launcher


def main(argv: list[str] | None = None) -> int:
    """Runs one training process from a config file written by the launcher."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="train_config.json")
    args = parser.parse_args(argv)
    # SIGUSR1 prints every thread's Python stack to stderr: the launcher sends it to a run
    # that timed out, so a hang says where it was.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    die_with_launcher()  # [sync]
    bound = bind_rank_to_cores()  # [sync] before TensorFlow creates its thread pools
    if bound:
        rank = os.environ.get("HOROVOD_LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"))
        print(f"local rank {rank}: cores {sorted(bound)}")
    cfg = TrainConfig.from_json(Path(args.config).read_text())
    configure_tensorflow(cfg)
    cfg.run.impl.train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
