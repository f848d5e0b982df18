"""[ps] The rule of a gradient's push: what a mode does with a worker's step (its one concern).

Each parameter-server mode gives one :class:`PushRule` (async, syncreplicas, ssp, easgd:
their modules); the shared graph and the worker's loop call it.
"""

from __future__ import annotations

from collections.abc import Callable

from distrain.train.ps.graph import PSGraph

# Seconds a worker waits for the update its gradient is part of (syncreplicas).
WAIT_PATIENCE = 1.0


class PushRule:
    """What a worker's step does with its gradient: a parameter-server mode's rule.

    :meth:`push` builds the ops that decide and apply once the gradient is on the
    parameter servers, and returns ``(go_on, done, wait)``: whether the worker may go on
    stepping (False: the limit is reached, wait for the chief), the op that ends the push,
    and whether the worker should wait (on :meth:`waiter`) before its next step (None:
    never). It calls ``record(update, counted, recorded, delay)`` once with the outcome.
    """

    #: Batches whose gradients make one update.
    gradients_per_update = 1

    def create_variables(self, graph: PSGraph) -> list:
        """The rule's own shared variables, created on the parameter servers."""
        return []

    def trained(self, graph: PSGraph):
        """(model, variables) a worker's step differentiates: the shared ones by default.

        Called in the worker's graph under its own device, before its step is built; a
        rule whose workers train copies of their own (easgd) builds them here.
        """
        return graph.model, graph.variables

    def worker_start(self, sess, graph: PSGraph) -> None:
        """On a worker, once the parameter servers are initialised, before its first step."""

    def sample(self, sess, graph: PSGraph, seconds: float) -> None:
        """On the chief, whenever it looks at the counters (for the rule's plots over time)."""

    def push(self, graph: PSGraph, grads, read_version, record: Callable):
        raise NotImplementedError

    def waiter(self, graph: PSGraph):
        """The op a worker blocks on when its push says to wait (None: never)."""
        return None

    def block(self, sess, graph: PSGraph, wait_op) -> None:
        """Waits, when a push said to, before the worker's next step.

        By default runs :meth:`waiter`'s op, giving up after ``WAIT_PATIENCE``: the update
        it waits for may never come (the other workers gone); the next step then adds
        to it itself.
        """
        tf = graph.tf
        patience = tf.compat.v1.RunOptions(timeout_in_ms=int(WAIT_PATIENCE * 1000))
        try:
            sess.run(wait_op, options=patience)
        except tf.errors.DeadlineExceededError:
            pass

    def history(self, sess, graph: PSGraph) -> dict:
        """The rule's fields of ``history.json``, read by the chief at the end."""
        return {}

    def dropped(self, staleness: list[int]) -> int:
        """Gradients dropped, from the recorded delays (none unless the rule drops)."""
        return 0
