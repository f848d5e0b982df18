"""[ps] Non-trainable state that a step's forward pass changes: batch norm's moving statistics.

A parameter-server worker builds its step in a ``tf.Graph``, not in a ``tf.function``:
the assign ops a layer makes in its forward pass (tf-keras's ``BatchNormalization`` moves
``moving_mean`` and ``moving_variance`` with ``AssignSubVariableOp``; a custom layer may
``assign`` a variable of its own) are built but nothing runs them, as ``layer.updates``
in TF1 had to be run beside the train op. This module finds them in the graph and turns
each into the change it makes, so that the mode's rule applies it to the variable on the
parameter servers together with the step's gradient (:mod:`distrain.train.ps.rules`):
a step whose gradient is applied moves the state, a step refused at the limit or dropped
as stale moves nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

# The resource ops that write a variable, and what each does with its value.
WRITES = {"AssignVariableOp": "assign", "AssignAddVariableOp": "add", "AssignSubVariableOp": "sub"}


@dataclass(frozen=True)
class StateUpdate:
    """One write of the forward pass to a non-trainable variable.

    Attributes:
        variable: The variable written.
        kind: ``assign``, ``add`` or ``sub``.
        value: The value the op writes (assign) or adds or subtracts (add, sub).
        op: The forward pass's own op (built, not run).
    """

    variable: object
    kind: str
    value: object
    op: object


def forward_updates(graph, variables, since: int) -> list[StateUpdate]:
    """The writes to ``variables`` among the ops built in ``graph`` after its first ``since``.

    Args:
        graph: The worker's graph.
        variables: The model's non-trainable variables.
        since: How many ops the graph held before the forward pass was built.
    """
    by_handle = {v.handle.name: v for v in variables}
    found = []
    for op in graph.get_operations()[since:]:
        kind = WRITES.get(op.type)
        if kind and op.inputs[0].name in by_handle:
            found.append(StateUpdate(by_handle[op.inputs[0].name], kind, op.inputs[1], op))
    return found


def staged(updates: list[StateUpdate]) -> list[StateUpdate]:
    """The updates with their values copied to their variables' devices.

    [ps] A rule's decision waits for no worker: like the gradients, the values are on the
    parameter servers before it runs.
    """
    import tensorflow as tf

    out = []
    for u in updates:
        with tf.compat.v1.device(u.variable.device):
            out.append(StateUpdate(u.variable, u.kind, tf.identity(u.value), u.op))
    return out


def changes(updates: list[StateUpdate]) -> list[tuple[object, object]]:
    """``(variable, change)``: what the updates add to each variable, summed per variable.

    Built on each variable's device; an ``assign`` adds its value minus the variable's
    value when the change is built (it then sets the variable, as the forward pass would).
    """
    import tensorflow as tf

    summed: dict = {}
    order = []
    for u in updates:
        with tf.compat.v1.device(u.variable.device):
            value = tf.cast(u.value, u.variable.dtype)
            if u.kind == "sub":
                change = -value
            elif u.kind == "add":
                change = value
            else:
                change = value - u.variable.read_value()
        key = u.variable.ref()
        if key not in summed:
            order.append(u.variable)
            summed[key] = change
        else:
            summed[key] = summed[key] + change
    return [(v, summed[v.ref()]) for v in order]


def apply(updates: list[StateUpdate]) -> list:
    """Ops adding the updates' changes to their variables (on the parameter servers)."""
    import tensorflow as tf

    ops = []
    for variable, change in changes(updates):
        with tf.compat.v1.device(variable.device):
            ops.append(variable.assign_add(change).op)
    return ops
