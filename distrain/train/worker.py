"""Entry point of one training process: ``distrain worker --config FILE``.

The launcher (or ``mpirun``, or a pod) starts one per rank, worker or chief; the run's
mode says what the process does (:meth:`distrain.train.modes.Mode.train`).
"""

from __future__ import annotations

import argparse
import contextlib
import faulthandler
import json
import os
import signal
import sys
import traceback
from pathlib import Path

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from distrain.preprocess.failures import Failure, report, user_frame
from distrain.train import heartbeat
from distrain.train.config import TrainConfig
from distrain.train.horovod import bind_rank_to_cores, die_with_launcher
from distrain.train.launch import ERRORS_DIR
from distrain.train.runtime import configure_tensorflow


def role() -> str:
    """This process's role in its run: ``rank 1`` (sync), ``worker:0``, ``chief`` or ``worker``."""
    rank = os.environ.get("HOROVOD_RANK", os.environ.get("OMPI_COMM_WORLD_RANK"))
    if rank is not None:
        return f"rank {rank}"
    try:
        task = json.loads(os.environ.get("TF_CONFIG", "{}")).get("task") or {}
    except ValueError:
        task = {}
    if task.get("type"):
        return task["type"] if task["type"] == "chief" else f"{task['type']}:{task.get('index', 0)}"
    return "worker"


def record_error(output_dir: str | os.PathLike, exc: BaseException) -> dict:
    """Writes this process's failure to ``<output>/errors/<role>.json`` for its launcher.

    The record has the one-line message, whether the error is transient, and the
    traceback (which the console shows only with ``--debug``).
    """
    who = role()
    record = Failure.of(who, exc).to_json()
    record["traceback"] = "".join(traceback.format_exception(exc))
    errors = Path(output_dir) / ERRORS_DIR
    with contextlib.suppress(OSError):
        errors.mkdir(parents=True, exist_ok=True)
        (errors / f"{who.replace(' ', '-').replace(':', '-')}.json").write_text(
            json.dumps(record, indent=2)
        )
    return record


def main(argv: list[str] | None = None) -> int:
    """Runs one training process from a config file written by the launcher.

    A failure is recorded for the launcher (:func:`record_error`) and printed as one
    line; the exit code is 2 for bad input or settings, 1 otherwise. ``sys.exit`` or
    ``KeyboardInterrupt`` from the user's code (a layer's ``call`` while training) is such
    a failure too, permanent, naming its file and line
    (:func:`distrain.preprocess.failures.user_frame`).
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--config", required=True, help="train_config.json")
    args = parser.parse_args(argv)
    cfg = TrainConfig.from_json(Path(args.config).read_text())
    try:
        return _train(cfg)
    except (SystemExit, KeyboardInterrupt) as exc:
        if not user_frame(exc):  # not the user's code's (a layer's call): distrain's own
            raise
        return _failed(cfg, exc)  # the user's code may not end a run quietly
    except Exception as exc:  # noqa: BLE001 (recorded for the launcher, then one line)
        return _failed(cfg, exc)


def _failed(cfg: TrainConfig, exc: BaseException) -> int:
    """Records and reports the process's failure; returns its exit code."""
    record_error(cfg.output_dir, exc)
    failure = Failure.of(f"[{cfg.run.name}] {role()}", exc)
    report(failure, exc)
    return failure.exit_code


def _train(cfg: TrainConfig) -> int:
    # SIGUSR1 prints every thread's Python stack to stderr: the launcher sends it to a run
    # that timed out, so a hang says where it was.
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    heartbeat.start(cfg.output_dir, role())  # the launcher tells a stopped process by it
    die_with_launcher()  # [sync]
    bound = bind_rank_to_cores()  # [sync] before TensorFlow creates its thread pools
    if bound:
        rank = os.environ.get("HOROVOD_LOCAL_RANK", os.environ.get("OMPI_COMM_WORLD_LOCAL_RANK"))
        print(f"local rank {rank}: cores {sorted(bound)}")
    configure_tensorflow(cfg)
    cfg.run.impl.train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
