"""``async``: parameter-server SGD, Downpour-style: each gradient applied as soon as it arrives."""

from __future__ import annotations

from distrain.train.modes import register
from distrain.train.ps.graph import PSGraph
from distrain.train.ps.mode import ParameterServerMode
from distrain.train.ps.rules import PushRule
from distrain.train.ps.transport import arrived


class AsyncRule(PushRule):
    """[async] Each gradient is applied as soon as it reaches the parameter servers.

    No lock: once the gradient is on the servers, the step takes the next update number
    with one atomic increment of the version, and is granted it if that is within the
    limit; a step refused at the limit gives its number back. The optimizer's update then
    runs concurrently with other workers' (Downpour SGD). Its staleness is the number of
    updates taken between the version its parameters were read at and its own.

    A refusal's increment, given back a moment later, can make a concurrent step near the
    limit be refused too (it goes again after the chief raises the limit): the count of
    granted updates never passes the limit, so checkpoints stay exact.

    Non-trainable state (batch norm's moving statistics) lives on the parameter servers
    with the weights: a granted step adds its forward pass's change to it with its
    gradient's update, computed, like the gradient, on the values the step read; a step
    refused at the limit changes nothing (it is computed again).
    """

    def push(self, g: PSGraph, grads, read_version, record):
        tf = g.tf
        with tf.compat.v1.device("/job:ps/task:0"), tf.control_dependencies(arrived(grads)):
            number = g.version.assign_add(1)  # the update this step would be
            ok = number <= g.limit.read_value()

        def apply():
            update = g.optimizer.apply_gradients(zip(grads, g.variables, strict=True))
            # [async] the step's forward pass moves batch norm's statistics with its update
            moved = g.apply_forward_state()
            with tf.control_dependencies([update, *moved]):
                return g.count_applied()

        def give_back():
            with tf.compat.v1.device("/job:ps/task:0"):
                return g.version.assign_sub(1)

        with tf.compat.v1.device("/job:ps/task:0"):
            done = tf.cond(ok, apply, give_back)
            granted = tf.cast(ok, tf.int64)
            stats = record(number - 1, granted, granted, number - 1 - read_version)
            done = tf.group(done, *stats)
        return ok, done, None


@register
class Async(ParameterServerMode):
    """N workers push their gradients to P parameter servers, never waiting for each other."""

    name = "async"
    example = "async:2"

    def rule(self) -> PushRule:
        return AsyncRule()
