"""The compute precision of the models that allow bfloat16, chosen once per training process.

A model opts in by giving its layers ``dtype=compute_dtype()`` (Keras's ``mixed_bfloat16``
policy: variables, and so the optimizer's updates and the gradients exchanged between
workers, stay in float32; the layers' matrix products run in bfloat16) and its logits
``dtype="float32"``. Every other model computes in float32 whatever is chosen.

``auto`` takes bfloat16 only where the processor multiplies it natively (AVX-512 BF16 or
AMX, read from ``/proc/cpuinfo``) and TensorFlow sees no GPU: elsewhere bfloat16 is
emulated and slower than float32. Scores and samples are computed in float32 whatever the
training precision (:func:`distrain.learning.lm.recurrent_copy`).
"""

from __future__ import annotations

from pathlib import Path

PRECISIONS = ("auto", "float32", "bfloat16")
# The processor flags (Linux's names) of native bfloat16 products.
NATIVE_BFLOAT16_FLAGS = frozenset({"avx512_bf16", "amx_bf16"})

_chosen = "float32"  # this process's: set_precision() sets it before any model is built


def cpu_flags(cpuinfo: str | None = None) -> set[str]:
    """The first processor's flags in ``/proc/cpuinfo`` (empty where there is none)."""
    if cpuinfo is None:
        path = Path("/proc/cpuinfo")
        cpuinfo = path.read_text() if path.exists() else ""
    for line in cpuinfo.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def resolve(choice: str, flags: set[str], gpus: int) -> str:
    """``float32`` or ``bfloat16`` for a setting of ``choice`` on this hardware.

    Raises:
        ValueError: ``choice`` is not one of :data:`PRECISIONS`.
    """
    if choice not in PRECISIONS:
        raise ValueError(f"precision {choice!r}: expected one of {', '.join(PRECISIONS)}")
    if choice != "auto":
        return choice
    return "bfloat16" if flags & NATIVE_BFLOAT16_FLAGS and not gpus else "float32"


def set_precision(choice: str) -> str:
    """Sets this process's precision from a setting (resolving ``auto``); returns it."""
    import tensorflow as tf

    global _chosen
    _chosen = resolve(choice, cpu_flags(), len(tf.config.list_physical_devices("GPU")))
    return _chosen


def chosen() -> str:
    """This process's precision: ``float32`` until :func:`set_precision` sets it."""
    return _chosen


def compute_dtype() -> str:
    """The Keras dtype policy for the layers of a model that allows bfloat16."""
    return "mixed_bfloat16" if _chosen == "bfloat16" else "float32"


def of_model(model) -> str:
    """What a built model computes in: ``bfloat16`` if any of its layers does, else ``float32``.

    A run records this, not the setting: a model that does not opt in computes in float32
    whatever the process chose.
    """
    layers = getattr(model, "layers", ())
    bf16 = any(getattr(layer, "compute_dtype", "float32") == "bfloat16" for layer in layers)
    return "bfloat16" if bf16 else "float32"
