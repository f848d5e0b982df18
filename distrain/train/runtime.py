"""A training process's set-up of any engine: TensorFlow's threads and seeds, dying with its parent.

It also imports TensorFlow there without the notices its C++ libraries print on loading
(:func:`import_tensorflow`), which every process of every run would otherwise repeat.

A Horovod rank's own set-up (its cores, ``hvd.init()``) is the Horovod engine's
(:mod:`distrain.train.horovod`).
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
import tempfile

import numpy as np

from distrain.learning import precision
from distrain.preprocess.failures import debug

# What TensorFlow's C++ prints while its libraries load, before its logging is set up (so
# TF_CPP_MIN_LOG_LEVEL, which distrain sets to 2, cannot silence it): absl's note that it
# writes to stderr until then, and oneDNN's that its kernels are on (distrain/__init__.py
# turns them on). Each comes once per library, on every process of every run.
START_NOTICES = (
    "All log messages before absl::InitializeLog() is called are written to STDERR",
    "oneDNN custom operations are on",
)


def import_tensorflow():
    """Imports TensorFlow in a training process, without its :data:`START_NOTICES`.

    What its libraries print to the process's stderr while they load is held back and
    written after, all but those notices: a warning or an error of the import is kept.
    With ``--debug`` (or TensorFlow already loaded) it is the plain import.
    """
    if "tensorflow" in sys.modules or debug():
        import tensorflow as tf

        return tf
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as caught:
        os.dup2(caught.fileno(), 2)  # the C++ libraries write to the descriptor itself
        try:
            import tensorflow as tf
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            caught.seek(0)
            lines = caught.read().decode(errors="replace").splitlines(keepends=True)
            kept = [line for line in lines if not any(n in line for n in START_NOTICES)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()
    return tf


def configure_tensorflow(cfg) -> None:
    """Thread pools, seeds and precision of a training process, before TensorFlow starts."""
    tf = import_tensorflow()

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
