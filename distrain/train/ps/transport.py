"""[ps] How tensors travel between a worker and the parameter servers: packed, one per server.

TensorFlow's runtime sends every tensor between processes as its own request; the
helpers here group a step's tensors by server and move each group as one.
"""

from __future__ import annotations

import contextlib


def arrived(grads) -> list:
    """The tensors of staged gradients (:meth:`PSGraph.staged`).

    Ops that depend on them run only once every gradient is on the parameter servers.
    """
    return [t for g in grads for t in ([g.values, g.indices] if hasattr(g, "indices") else [g])]


def by_server(variables, indices=None) -> list[tuple[str, list[int]]]:
    """``(device, indices)`` of ``variables`` (or of those in ``indices``) by device and dtype.

    Each group can travel as one tensor (:func:`moved_as_one`).
    """
    groups: dict[tuple, list[int]] = {}
    for i in range(len(variables)) if indices is None else indices:
        groups.setdefault((variables[i].device, variables[i].dtype), []).append(i)
    return [(device, group) for (device, _), group in groups.items()]


def moved_as_one(tensors, shapes, to_device: str | None = None, from_device: str | None = None):
    """``tensors`` sent between two processes as one tensor, back in their ``shapes``.

    [ps] TensorFlow's runtime sends every tensor between processes as its own request;
    on a shared machine a step's many small requests cost more than one copy of the
    whole. They are concatenated on ``from_device`` and split on ``to_device`` (None:
    the caller's device).
    """
    import tensorflow as tf

    def on(device):
        return tf.compat.v1.device(device) if device else contextlib.nullcontext()

    with on(from_device):
        packed = tf.concat([tf.reshape(t, [-1]) for t in tensors], 0)
    with on(to_device):
        parts = tf.split(packed, [shape.num_elements() for shape in shapes])
        return [tf.reshape(part, shape) for part, shape in zip(parts, shapes, strict=True)]
