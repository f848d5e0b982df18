"""``single``: one process, the reference every other mode's speedup is measured against."""

from __future__ import annotations

import time

from distrain.train import nonfinite
from distrain.train.driver import EpochDriver
from distrain.train.engine import ONE_PROCESS
from distrain.train.modes import Mode, register
from distrain.train.replica import Replica

# Training steps per traced call (fewer at an epoch's end or a checkpoint).
STEPS_PER_CALL = 16


def share_state(replica) -> None:
    """[sync] [hybrid] Every rank of the data-parallel group takes its rank 0's non-trainable state.

    Each rank's forward passes move its own copy of batch norm's moving statistics on its
    own shard, as Horovod leaves them (its examples save rank 0's model; its
    ``SyncBatchNormalization`` is a layer of the user's choosing). At the end of each
    segment, before the driver evaluates, checkpoints or saves, rank 0's are made every
    rank's: the ranks' validation shares score one model, the one saved. Sent as a sum
    of rank 0's values and zeros, exact.
    """
    group = replica.group
    tf = replica.tf
    variables = [v for v in replica.model.non_trainable_variables if v.dtype.is_numeric]
    if group.hvd is None or group.size < 2 or not variables:
        return
    hvd = group.hvd
    keep = 1 if group.rank == 0 else 0
    for v in variables:
        kept = v * tf.cast(keep, v.dtype)
        v.assign(hvd.allreduce(kept, op=hvd.Sum, **group.collectives))


class LocalSteps:
    """The epoch driver's engine for one process: steps on this process's shard.

    Several steps per call, the loop inside the traced function: the Python between steps
    (a call, a read of the loss) otherwise costs a one-process run about a fifth of its
    speed at small batches. Shared with sync, whose ranks make the same calls.

    Args:
        replica: This process's :class:`distrain.train.replica.Replica`.
        step: The traced training step (``replica.train_step(...)``).
        steps_per_call: Steps in one traced call.
    """

    gradients_per_update = 1

    def __init__(self, replica, step, steps_per_call: int = STEPS_PER_CALL):
        self.replica, self.step, self.steps_per_call = replica, step, steps_per_call
        self.cfg = replica.cfg
        self.iterator = None

    def updates_per_epoch(self) -> int:
        return self.replica.batches_per_epoch()

    def dataset(self):
        """This process's training batches, from the first (before a resumed run's skip)."""
        r = self.replica
        return r.train_shard(self.cfg.seed + r.rank)

    def start(self) -> None:
        r = self.replica
        data = self.dataset()
        if r.step:
            # A resumed run reads on from where the checkpoint was: the same batches, in
            # the same order, as a run that was never stopped.
            data = data.skip(r.step)
        self.iterator = iter(data)
        if self.steps_per_call > 1:
            tf, step, iterator = r.tf, self.step, self.iterator

            @tf.function
            def calls(count):
                loss_sum = tf.constant(0.0)
                correct = tf.constant(0.0)
                bad = nonfinite.start(tf)  # the call's first step with a non-finite loss
                for i in tf.range(count):
                    batch_loss, batch_correct = step(*next(iterator))
                    loss_sum += batch_loss
                    correct += batch_correct
                    bad = nonfinite.note(tf, bad, i, batch_loss)
                return loss_sum, correct, bad

            self.calls = calls

    def run(self, epoch: int, position: int, stop: int):
        loss_sum = correct = 0.0
        durations: list[float] = []
        while position < stop:
            t = time.perf_counter()
            count = min(self.steps_per_call, stop - position)
            bad = None
            if self.steps_per_call > 1:
                batch_loss, batch_correct, bad = self.calls(self.replica.tf.constant(count))
            else:
                batch_loss, batch_correct = self.step(*next(self.iterator))
            batch_loss = float(batch_loss)  # waits for the steps (and their allreduce)
            if not nonfinite.is_finite(batch_loss):
                self.non_finite(epoch, position, count, batch_loss, bad)
            loss_sum += batch_loss
            correct += float(batch_correct)
            durations.extend([(time.perf_counter() - t) / count] * count)
            position += count
        return loss_sum, correct, durations

    def non_finite(self, epoch: int, position: int, count: int, loss: float, bad) -> None:
        """A call's summed loss was not finite: its first bad step goes to the loss watch.

        Only now is what the call kept on the device read (``bad``, :func:`nonfinite.note`'s
        state; None: the call was one step, ``loss`` its own). A sum that overflowed with
        every loss finite names the call's last step.
        """
        index, steps = 0, 1
        if bad is not None:
            first, value, steps = int(bad[0]), float(bad[1]), int(bad[2])
            if first >= 0:
                index, loss = first, value
            else:
                index, steps = count - 1, 1
        step = epoch * self.updates_per_epoch() + position + index + 1
        self.replica.losses.bad(epoch + 1, step, loss, steps=steps)

    def epoch_seconds(self, measured: float) -> float:
        return measured

    def epoch_totals(self, loss_sum, correct, seen):
        # [sync] every rank's sums; ``seen`` counts every rank's examples already.
        group = self.replica.group
        if group.size > 1:
            self.rank_loss_sums = group.gather(loss_sum)  # [sync] each shard's own loss
        loss_sum, correct = group.sums(loss_sum, correct)
        return loss_sum, correct, seen

    def refresh(self) -> None:
        pass

    def epoch_note(self) -> str:
        return ""

    def history(self) -> dict:
        return {}

    def finish(self) -> None:
        pass


@register
class Single(Mode):
    """One worker process: the baseline of speedup and efficiency."""

    name = "single"
    example = "single:1"
    engine = ONE_PROCESS  # one `distrain worker`, in the step's own pod on Kubernetes
    fixed_workers = 1
    carries_state = True

    def needs_cluster(self) -> bool:
        return False

    def predicted_step(self, t1, prof, batch, link):
        return t1  # the compute alone: no messages

    def train(self, cfg) -> dict:
        replica = Replica(cfg)
        return EpochDriver(cfg, replica, LocalSteps(replica, replica.train_step())).run()
