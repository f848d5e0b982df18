"""``async``: parameter-server SGD, Downpour-style: each gradient applied as soon as it arrives."""

from __future__ import annotations

from distrain.train.modes import register
from distrain.train.ps import ParameterServerMode, PSGraph, PushRule


class AsyncRule(PushRule):
    """[async] Each gradient is applied as soon as it reaches the parameter servers.

    Inside the lock a step only takes the next update number (if below the limit); the
    optimizer's update runs after the lock is released, concurrently with other workers'
    (Downpour SGD). Its staleness is the number of updates taken between the version its
    parameters were read at and its own.
    """

    def push(self, g: PSGraph, grads, read_version, record):
        tf = g.tf

        def decide():
            version = g.version.read_value()
            ok = version < g.limit.read_value()
            take = g.version.assign(tf.where(ok, version + 1, version))
            granted = tf.cast(ok, tf.int64)
            stats = record(version, granted, granted, version - read_version)
            return (ok, version), [take, *stats]

        (ok, version), release = g.critical(decide, grads)

        def apply():
            with tf.control_dependencies([release]):
                update = g.optimizer.apply_gradients(zip(grads, g.variables, strict=True))
            with tf.control_dependencies([update]), tf.compat.v1.device("/job:ps/task:0"):
                return g.applied.assign_add(1)

        with tf.compat.v1.device("/job:ps/task:0"):
            done = tf.cond(ok, apply, lambda: g.applied.read_value())
        return ok, done


@register
class Async(ParameterServerMode):
    """N workers push their gradients to P parameter servers, never waiting for each other."""

    name = "async"

    def rule(self) -> PushRule:
        return AsyncRule()
