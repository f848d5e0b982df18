"""A training process's set-up of any engine: TensorFlow's threads and seeds, dying with its parent.

A Horovod rank's own set-up (its cores, ``hvd.init()``) is the Horovod engine's
(:mod:`distrain.train.horovod`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

import numpy as np

from distrain.train import precision


def configure_tensorflow(cfg) -> None:
    """Thread pools, seeds and precision of a training process, before TensorFlow starts."""
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(cfg.threads)
    tf.config.threading.set_inter_op_parallelism_threads(2)
    tf.random.set_seed(cfg.seed)
    np.random.seed(cfg.seed)
    resolved = precision.set_precision(cfg.precision)
    if cfg.precision == "auto" and resolved != "float32":
        print(f"precision auto: {resolved} for the models that opt in (native here)", flush=True)


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
