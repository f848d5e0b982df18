"""``async``: parameter-server SGD, Downpour-style: each gradient applied as soon as it arrives."""

from __future__ import annotations

from distrain.base.errors import ConfigError
from distrain.train.modes import register
from distrain.train.ps.graph import PSGraph
from distrain.train.ps.mode import ParameterServerMode
from distrain.train.ps.rules import PushRule
from distrain.train.ps.transport import arrived

# The rate rules of ``async:N:lr=RULE``.
RATES = ("constant", "staleness")


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

    With ``staleness_rate`` (``async:N:lr=staleness``) each update's step size is divided
    by its gradient's staleness, as Zhang et al.'s staleness-aware async SGD (2016):
    ``rate / tau`` with ``tau = 1 + delay``, the delay being the updates taken between
    the version the gradient's parameters were read at and its own (tau counts the
    update itself, 1 for a fresh gradient, as sequential SGD's).

    Args:
        staleness_rate: Divide each update's step size by its staleness.
    """

    staleness_rate = False  # (a subclass's rule, ssp's, keeps the constant rate)

    def __init__(self, staleness_rate: bool = False):
        self.staleness_rate = staleness_rate

    def push(self, g: PSGraph, grads, read_version, record):
        tf = g.tf
        with tf.compat.v1.device("/job:ps/task:0"), tf.control_dependencies(arrived(grads)):
            number = g.version.assign_add(1)  # the update this step would be
            ok = number <= g.limit.read_value()

        def apply():
            scaled = {}  # (a model file's optimizer is refused with lr=staleness: check_optimizer)
            if self.staleness_rate:  # [async] Zhang et al.: the rate over tau = 1 + delay
                delay = tf.maximum(number - 1 - read_version, 0)
                scaled["scale"] = 1.0 / tf.cast(1 + delay, tf.float32)
            pairs = zip(grads, g.variables, strict=True)
            update = g.optimizer.apply_gradients(pairs, **scaled)
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
    unbounded_staleness = True  # [async] no worker waits: staleness grows with the workers
    options = {
        **ParameterServerMode.options,
        "lr": "constant (default) or staleness: each update's rate divided by its "
        "gradient's staleness, 1 + its delay (Zhang et al. 2016)",
    }

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        lr = str(options.get("lr", "constant"))
        if lr not in RATES:
            raise ConfigError(f"async: lr must be {' or '.join(RATES)}, got {lr!r}")
        # The default is left out of the spec: a run's name, key and fingerprint stay what
        # they were before the option existed.
        checked.pop("lr", None)
        return checked if lr == "constant" else {**checked, "lr": lr}

    def short_name(self) -> str:
        lr = self.spec.option("lr", "constant")
        return f"{self.spec.mode}:{self.spec.workers}" + ("" if lr == "constant" else f":lr={lr}")

    def check_optimizer(self, cfg, optimizer) -> None:
        if self.spec.option("lr") == "staleness":  # the rule scales distrain's Adam's step
            raise ConfigError(
                f"{self.short_name()}: lr=staleness scales distrain's Adam's step; the model "
                f"file's optimizer ({type(optimizer).__name__}) has its own rate: drop lr=staleness"
            )

    def rule(self) -> PushRule:
        return AsyncRule(staleness_rate=self.spec.option("lr") == "staleness")
