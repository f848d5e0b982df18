"""The epoch driver's hooks: what watches a run from inside its loop, as Keras's callbacks.

A hook is called at the driver's points (:class:`Hook`); the driver's own are the
TensorBoard event files (:mod:`distrain.train.tensorboard`) and the progress lines and
Kubeflow Trainer status reports (:mod:`distrain.train.status`). A hook only reads: it
changes neither the weights nor the history, and it never fails the run.
"""

from __future__ import annotations


class Hook:
    """The points of the epoch driver's loop; each does nothing unless overridden."""

    def on_train_begin(self, driver) -> None:
        """After the replica is restored and the steps started, before the first update."""

    def on_segment_end(self, driver, step: int) -> None:
        """After a segment of updates (to a checkpoint or an epoch's end), ``step`` updates in."""

    def on_epoch_end(self, driver, record: dict, durations: list[float]) -> None:
        """After the epoch's record (``record``: its entry of the history's ``epochs``).

        ``durations``: this process's seconds of each step of the epoch (empty for the
        steps that time none).
        """

    def on_train_end(self, driver, history: dict) -> None:
        """After the model and the history are saved."""
