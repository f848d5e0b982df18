"""A non-finite training loss: the check every mode's step makes, and what follows it.

Every engine reads its step's loss already (a traced call's summed loss, a
parameter-server worker's fetch); the check rides on that read. A traced call of several
steps keeps, on the device, the index of its first step whose loss is not finite
(:func:`note`), and the host reads it only when the call's summed loss is itself not
finite (:func:`is_finite`), so a healthy step costs no read more than before.

What follows is the run's ``on_nan`` setting (:class:`LossWatch`):

* ``stop`` (the default): the first non-finite loss ends the process with
  :class:`NonFiniteLoss`, one line naming the run, the rank, the epoch and the step. It is
  a permanent error (:mod:`distrain.preprocess.failures`): not retried, exit 2. Nothing is written
  after it: no checkpoint and no ``model.keras`` holds non-finite weights
  (:func:`check_weights`, which also catches a rank whose weights a peer's gradient made
  non-finite before that peer's line arrived).
* ``continue``: training goes on, as Keras's ``fit`` without ``TerminateOnNaN``; the
  first non-finite loss is logged and the history counts them (:meth:`LossWatch.history`).

The check itself (which step of a call is the first bad one) is plain Python, tested
without TensorFlow (``tests/rules/test_nonfinite.py``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from distrain.train.config import ON_NAN  # noqa: F401 (the setting's values, declared there)


class NonFiniteLoss(ValueError):
    """The training loss (or the weights) became NaN or infinite and ``on_nan`` is ``stop``.

    A permanent error: the same data and settings diverge the same way on a retry.
    """


def is_finite(value: float) -> bool:
    """Whether a loss read from a step (or a sum of several steps' losses) is finite."""
    return math.isfinite(float(value))


def first_bad(losses: Sequence[float]) -> int | None:
    """The index of the first non-finite loss in ``losses`` (None: all are finite)."""
    for i, loss in enumerate(losses):
        if not is_finite(loss):
            return i
    return None


def start(tf):
    """[device] The state :func:`note` carries through a traced call: no bad step yet.

    ``(first, loss, count)``: the index of the call's first step whose loss is not
    finite (-1: none), that loss, and how many of the call's losses were not finite.
    """
    return tf.constant(-1), tf.constant(0.0), tf.constant(0)


def note(tf, state, index, loss):
    """[device] ``state`` (:func:`start`'s) after step ``index`` of a call had ``loss``.

    Built inside a traced call's loop: a comparison per step, nothing read by the host.
    """
    first, value, count = state
    bad = tf.logical_not(tf.math.is_finite(loss))
    new = tf.logical_and(first < 0, bad)
    return (
        tf.where(new, tf.cast(index, first.dtype), first),
        tf.where(new, tf.cast(loss, value.dtype), value),
        count + tf.cast(bad, count.dtype),
    )


def describe(run: str, who: str, epoch: int, step: int, loss: float) -> str:
    """The one line that names a non-finite loss: the run, the process, the epoch, the step.

    Args:
        run: The run's name (``single:1``).
        who: The process (``rank 0``, ``worker:1``).
        epoch: The epoch, 1-based.
        step: The run's update the loss was computed for, 1-based.
        loss: The loss (NaN or infinite).
    """
    return (
        f"[{run}] {who}: the training loss is {float(loss)} at epoch {epoch}, step {step} "
        "(NaN or inf in the data, or a learning rate that diverges): training stopped and "
        "nothing was saved after that step (on_nan=stop; --on-nan continue trains on)"
    )


class LossWatch:
    """What one process does with the losses its steps read: stop, or go on and count.

    Args:
        on_nan: ``stop`` or ``continue`` (the run's setting).
        run: The run's name.
        who: This process (``rank 0``, ``worker:1``).
        log: Where ``continue`` says so (the replica's log line; default: nothing).
    """

    def __init__(self, on_nan: str, run: str, who: str, log: Callable[[str], None] | None = None):
        self.on_nan, self.run, self.who = on_nan, run, who
        self.log = log or (lambda _message: None)
        self.count = 0
        self.first: dict | None = None

    @property
    def stops(self) -> bool:
        """Whether a non-finite loss ends the run (``on_nan=stop``)."""
        return self.on_nan == "stop"

    def bad(self, epoch: int, step: int, loss: float, steps: int = 1) -> None:
        """Step ``step`` of epoch ``epoch`` (both 1-based) had the non-finite ``loss``.

        ``steps``: non-finite losses counted with it (a call's).

        Raises:
            NonFiniteLoss: ``on_nan`` is ``stop``.
        """
        line = describe(self.run, self.who, epoch, step, loss)
        if self.stops:
            raise NonFiniteLoss(line)
        self.count += steps
        if self.first is None:
            self.first = {"epoch": epoch, "step": step, "who": self.who}
            self.log(
                f"{self.who}: the training loss is {float(loss)} at epoch {epoch}, step {step}; "
                "training goes on (on_nan=continue), and so may NaN or inf in the weights"
            )

    def epoch(self, epoch: int, loss: float) -> None:
        """The driver's look at epoch ``epoch``'s loss over every process (1-based).

        A backstop: a loss the steps' checks did not see (a mode whose steps run in
        other processes, as a parameter-server chief's workers) is caught at the epoch's
        end, before its checkpoint.

        Raises:
            NonFiniteLoss: The loss is not finite and ``on_nan`` is ``stop``.
        """
        if is_finite(loss):
            return
        if self.stops:
            raise NonFiniteLoss(
                f"[{self.run}] {self.who}: the training loss of epoch {epoch} is {float(loss)} "
                "over the run's processes: training stopped and nothing was saved after it "
                "(on_nan=stop; --on-nan continue trains on)"
            )
        if self.first is None:
            self.first = {"epoch": epoch, "step": None, "who": self.who}
            self.log(
                f"the training loss of epoch {epoch} is {float(loss)}; training goes on "
                "(on_nan=continue), and so may NaN or inf in the weights"
            )

    def history(self) -> dict:
        """The history's fields: the setting, and what ``continue`` trained through."""
        return {
            "on_nan": self.on_nan,
            "non_finite_losses": self.count,
            "first_non_finite_loss": self.first,
        }


def check_weights(values, what: str) -> None:
    """Refuses to write ``values`` (arrays) when any is not finite.

    Args:
        values: The weights about to be saved.
        what: What would have been written, and where (the error's words).

    Raises:
        NonFiniteLoss: Some value is NaN or infinite.
    """
    bad = total = 0
    for value in values:
        array = np.asarray(value)
        if array.dtype.kind != "f":
            continue
        total += array.size
        bad += int(array.size - np.count_nonzero(np.isfinite(array)))
    if bad:
        raise NonFiniteLoss(
            f"{what}: {bad:,} of {total:,} weights are NaN or infinite, so it was not written "
            "(the training diverged; on_nan=stop)"
        )
