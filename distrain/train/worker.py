"""Entry point of one training process: ``distrain worker --config FILE``.

``horovodrun`` starts one of these per rank (sync); ``single`` starts one.
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
from distrain.train.launch import die_with_parent


def bind_rank_to_cores() -> set[int] | None:
    """[sync] Binds this rank to its own slice of the cores it may use.

    As ``mpirun --bind-to core`` does: with ``HOROVOD_LOCAL_RANK`` / ``HOROVOD_LOCAL_SIZE``
    (horovodrun) or Open MPI's local rank and size in the environment, local rank r of s
    gets the r-th of s equal slices. Called before TensorFlow starts its threads, so they
    all inherit it; it keeps ranks from competing for the same core. Off with
    ``DISTRAIN_BIND_CORES=0`` or when there are fewer cores than ranks.

    Returns:
        The cores bound to, or None when nothing was changed.
    """
    env = os.environ
    if env.get("DISTRAIN_BIND_CORES", "1") == "0":
        return None
    rank = env.get("HOROVOD_LOCAL_RANK", env.get("OMPI_COMM_WORLD_LOCAL_RANK"))
    size = env.get("HOROVOD_LOCAL_SIZE", env.get("OMPI_COMM_WORLD_LOCAL_SIZE"))
    if rank is None or size is None or int(size) < 2:
        return None
    cores = sorted(os.sched_getaffinity(0))
    per_rank = len(cores) // int(size)
    if per_rank < 1:
        return None
    mine = set(cores[int(rank) * per_rank : (int(rank) + 1) * per_rank])
    os.sched_setaffinity(0, mine)
    return mine


def start_horovod(idle_threads: bool = False):
    """[sync] ``hvd.init()``, with Horovod's own threads at idle priority if asked.

    ``hvd.init()`` starts Horovod's background thread (and, under MPI, Open MPI's progress
    threads). The background thread wakes every cycle (1 ms) for a coordination round
    with the other ranks, busy or not, and on a CPU rank it shares the rank's cores with
    TensorFlow's compute threads: each wake-up preempts them. At ``SCHED_IDLE`` (Linux)
    these threads take a core only when TensorFlow leaves it, as it does while a step
    waits for its allreduce, so the rounds that matter still run at once. This is a
    per-thread setting of the kernel's scheduler: Horovod itself is unchanged. A rank that
    sees a GPU keeps the default priority: its cores are mostly free, and its background
    thread feeds NCCL.

    Args:
        idle_threads: Lower the new threads to ``SCHED_IDLE`` on a rank without a GPU
            (:attr:`TrainConfig.idle_horovod_threads`).

    Returns:
        The ``horovod.tensorflow`` module, initialised, and the ids of the threads lowered
        (empty when nothing was changed).
    """
    import horovod.tensorflow as hvd
    import tensorflow as tf

    tasks = Path("/proc/self/task")
    lower = idle_threads and hasattr(os, "SCHED_IDLE") and tasks.is_dir()
    lower = lower and not tf.config.list_physical_devices("GPU")
    before = set(os.listdir(tasks)) if lower else set()
    hvd.init()
    lowered = []
    if lower:
        for tid in sorted(set(os.listdir(tasks)) - before, key=int):
            try:
                os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
            except (ProcessLookupError, PermissionError):
                continue  # a thread that has ended already, or a kernel that refuses
            lowered.append(int(tid))
    return hvd, lowered


def die_with_launcher() -> None:
    """[sync] Makes this rank end when the process that started it does (Linux).

    Under ``mpirun`` the ranks are mpirun's children. A launcher killed outright takes
    mpirun with it (``SIGKILL``, see :func:`distrain.train.launch.guarded`), and its ranks
    would go on training alone; with this the kernel kills them too. Not a rank: nothing.
    """
    env = os.environ
    if sys.platform == "linux" and ("HOROVOD_RANK" in env or "OMPI_COMM_WORLD_RANK" in env):
        die_with_parent(os.getppid())


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
    from distrain.train.loop import train

    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())
