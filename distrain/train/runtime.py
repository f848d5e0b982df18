"""A training process's set-up: TensorFlow's threads, core binding, Horovod, dying with its parent.

Everything a process of any mode does before it trains, in one place (the modes call
what they need: a sync rank starts Horovod, every process configures TensorFlow).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from pathlib import Path

import numpy as np


def configure_tensorflow(cfg) -> None:
    """Thread pools and seeds of a training process, before TensorFlow starts its runtime."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.random.set_seed(cfg.seed)
    np.random.seed(cfg.seed)


def keep_collectives_in_order() -> None:
    """Keeps the control edges that order a process's Horovod collectives.

    Grappler's dependency optimizer drops control edges between ops it takes to be free
    of side effects, and Horovod's ops are not marked stateful: with it on, a pipeline
    stage started a backward receive before its forward sends, and both stages waited for
    ever. Off for the whole process, before any function is traced.
    """
    import tensorflow as tf

    tf.config.optimizer.set_experimental_options({"dependency_optimization": False})


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


def start_horovod(idle_threads: bool = False, process_sets=(), ranks: int | None = None):
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
        process_sets: ``hvd.ProcessSet``s to register at the start (model-parallel
            groups); each is ready for collectives once this returns.
        ranks: The ranks the run asks for (None: any number).

    Returns:
        The ``horovod.tensorflow`` module, initialised, and the ids of the threads lowered
        (empty when nothing was changed).

    Raises:
        TrainingError: Horovod started with another number of ranks than ``ranks``.
    """
    import horovod.tensorflow as hvd
    import tensorflow as tf

    tasks = Path("/proc/self/task")
    lower = idle_threads and hasattr(os, "SCHED_IDLE") and tasks.is_dir()
    lower = lower and not tf.config.list_physical_devices("GPU")
    before = set(os.listdir(tasks)) if lower else set()
    hvd.init(process_sets=list(process_sets) or None)
    if ranks is not None and hvd.size() != ranks:
        from distrain.train.config import TrainingError

        raise TrainingError(f"started with {hvd.size()} ranks, the run asks {ranks}")
    lowered = []
    if lower:
        for tid in sorted(set(os.listdir(tasks)) - before, key=int):
            try:
                os.sched_setscheduler(int(tid), os.SCHED_IDLE, os.sched_param(0))
            except (ProcessLookupError, PermissionError):
                continue  # a thread that has ended already, or a kernel that refuses
            lowered.append(int(tid))
    return hvd, lowered


# Sizes of the link probe's allreduces, in bytes (float32), and repeats of each.
PROBE_SIZES = (4, 64 * 2**10, 2**20, 4 * 2**20)
PROBE_REPEATS = 5


def probe_link(hvd) -> dict | None:
    """[sync] Times allreduces of a few sizes over all ranks: the link this run trains on.

    A few tens of milliseconds at the start; a report fits a latency and a bandwidth to
    them (:func:`distrain.costmodel.fit_link`) to predict what the run's messages cost.
    A collective: every rank calls it, in the same order.

    Returns:
        ``{"ranks", "rows": [{"bytes", "seconds"}]}``, or None with one rank.
    """
    import time

    import tensorflow as tf

    if hvd.size() < 2:
        return None
    rows = []
    for size in PROBE_SIZES:
        x = tf.ones([size // 4], tf.float32)
        name = f"link_probe_{size}"
        hvd.allreduce(x, op=hvd.Sum, name=name).numpy()  # warm-up: the name's negotiation
        start = time.perf_counter()
        for _ in range(PROBE_REPEATS):
            hvd.allreduce(x, op=hvd.Sum, name=name).numpy()
        rows.append({"bytes": size, "seconds": (time.perf_counter() - start) / PROBE_REPEATS})
    return {"ranks": hvd.size(), "rows": rows}


def die_with_launcher() -> None:
    """[sync] Makes this rank end when the process that started it does (Linux).

    Under ``mpirun`` the ranks are mpirun's children. A launcher killed outright takes
    mpirun with it (``SIGKILL``, see :func:`distrain.train.launch.guarded`), and its ranks
    would go on training alone; with this the kernel kills them too. Not a rank: nothing.
    """
    env = os.environ
    if sys.platform == "linux" and ("HOROVOD_RANK" in env or "OMPI_COMM_WORLD_RANK" in env):
        die_with_parent(os.getppid())


# Run in a child before its command: the kernel kills it (SIGKILL) when the launcher dies
# (PR_SET_PDEATHSIG survives exec), and it gives up if the launcher is already gone.
def die_with_parent(parent: int) -> None:
    """Makes the kernel kill this process (``SIGKILL``) when its parent ends (Linux).

    Survives ``exec``. Exits at once if ``parent`` is already gone (this process was
    re-parented before the call).
    """
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        sys.exit("launcher gone before start")
