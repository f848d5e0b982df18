"""[ps] The chief: initialises the servers, lets the workers go segment by segment, checkpoints.

Its :class:`ChiefSteps` is the epoch driver's steps on the chief: evaluation,
checkpoints and the saved model are the same code as every other mode's.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from distrain.base.errors import TrainingError
from distrain.learning.staleness import summarize
from distrain.train.config import TrainConfig
from distrain.train.driver import next_checkpoint
from distrain.train.nonfinite import NonFiniteLoss
from distrain.train.ps.graph import PSGraph
from distrain.train.ps.roles import Role, start_server
from distrain.train.ps.rules import PushRule

# Seconds the chief sleeps on the wake-up queue before it looks at the counters itself
# (for the progress plots, and to notice that every worker has stopped).
WAKE_SECONDS = 0.25

# The chief's scheduling priority (nice): below the workers' and the servers'.
CHIEF_NICENESS = 19

# Seconds the chief waits at the start for every worker to begin (then it goes without).
JOIN_SECONDS = 20.0


@dataclass(frozen=True)
class EpochSums:
    """An epoch's counters on the parameter servers, one entry per worker.

    Attributes:
        loss: Summed loss of the worker's counted steps.
        correct: Their correct predictions.
        steps: How many of its steps were counted.
    """

    loss: list[float]
    correct: list[float]
    steps: list[int]

    def shares(self) -> list[float]:
        """Each worker's share of the epoch's counted steps (all 0 if none was counted)."""
        total = sum(self.steps)
        return [n / total if total else 0.0 for n in self.steps]


class Chief:
    """The chief of a parameter-server run: initialises, sets the limits, checkpoints, evaluates.

    It pairs with an eager copy of the model and optimizer (:meth:`attach`):
    checkpoints, evaluation and the saved model are the same files and code as in every
    other mode, filled from the parameter servers between segments.

    Args:
        cfg: The run's configuration.
        info: The data set.
        role: The chief's role.
        rule: The mode's rule.
    """

    def __init__(self, cfg: TrainConfig, info, role: Role, rule: PushRule):
        import tensorflow as tf

        from distrain.learning.optim import initializer

        self.cfg, self.role, self.rule = cfg, role, rule
        self.g = g = PSGraph(cfg, info, role, rule)
        with g.graph.as_default(), tf.compat.v1.device("/job:chief/task:0"):
            # (A user's schedule's current rate is initialised after the step it reads.)
            self.init = initializer(tf.compat.v1.global_variables(), g.optimizer)
            with tf.compat.v1.device("/job:ps/task:0"):
                self.init_lock = g.lock.enqueue(tf.constant(0))
            remote = [*g.state, g.version, g.epoch_var]
            self.remote = remote
            self.feeds = [tf.compat.v1.placeholder(v.dtype, v.shape) for v in remote]
            version = self.feeds[-2]
            self.load = tf.group(
                [v.assign(p) for v, p in zip(remote, self.feeds, strict=True)]
                + [g.applied.assign(version), g.limit.assign(version)]
            )
            self.new_limit = tf.compat.v1.placeholder(tf.int64, [])
            self.set_limit = g.limit.assign(self.new_limit)
            self.set_ready = g.ready.assign(1)
            self.set_wake_at = g.wake_at.assign(self.new_limit)
            self.wait = g.wakeup.dequeue()
            self.set_stop = g.stop.assign(1)
            self.read_counts = [g.applied.read_value(), g.steps, g.non_finite.read_value()]
            self.read_epoch = g.stats.read_value()
            self.slot = tf.compat.v1.placeholder(tf.int32, [])
            zero = tf.zeros([role.workers], tf.float64)
            self.reset_epoch = tf.group(
                g.stats[:, 2 + self.slot].assign(zero),
                g.stats[:, 4 + self.slot].assign(zero),
                g.stats[:, 6 + self.slot].assign(zero),
            )
            self.read_delays = g.delays.read_value()
            self.read_ends = [g.ended, g.begun.read_value()]
        self.local: list = []
        self.logs = ""
        self.sess = None
        self.limit = None
        self.progress_start = 0.0
        self.worker_progress: dict[str, list[list[float]]] = {}
        self.stall_seconds = 60.0

    def attach(self, trainer) -> None:
        """Pairs the parameter servers' variables with the eager copy's.

        The copy is built after this graph: tf-keras refuses models made before a model
        in a ``tf.Graph``.
        """
        local = [*trainer.model.variables, *trainer.optimizer.variables]
        self.local = [*local, trainer.version, trainer.epoch_var]
        for a, b in zip(self.remote, self.local, strict=True):
            if a.shape != b.shape:
                raise TrainingError(f"parameter-server copy mismatch: {a.name} vs {b.name}")
        self.logs = str(trainer.out / "logs")

    def start(self) -> None:
        """Starts the server, initialises the parameter servers from the eager copy."""
        server = start_server(self.role, self.cfg.threads)
        self.sess = self.g.session(server)
        self.sess.run(self.init)
        self.sess.run(self.init_lock)
        self.push_to_servers()
        self.sess.run(self.set_ready)
        self.wait_for_workers()
        self.progress_start = time.time()

    def wait_for_workers(self) -> None:
        """Waits until every worker has started, or ``JOIN_SECONDS`` have passed.

        [ps] The first updates are let go together: a worker whose process started late
        would otherwise find a short run's updates made by the others. A worker that
        never comes is not waited for any longer: the others make its updates.
        """
        deadline = time.monotonic() + JOIN_SECONDS
        while self.sess.run(self.g.joined) < self.role.workers and time.monotonic() < deadline:
            time.sleep(0.05)

    def push_to_servers(self) -> None:
        """The eager copy's values (fresh, or restored) into the parameter servers."""
        values = [v.numpy() for v in self.local]
        self.sess.run(self.load, dict(zip(self.feeds, values, strict=True)))

    def check_workers(self) -> None:
        """Stops the run if a worker stopped on a non-finite loss, with that worker's line.

        Raises:
            NonFiniteLoss: A worker said so (on_nan=stop).
        """
        line = self.sess.run(self.g.non_finite)
        if line:
            raise NonFiniteLoss(line.decode())

    def pull_from_servers(self) -> None:
        """The parameter servers' values into the eager copy (the workers are at the limit)."""
        # The epoch counter is the chief's own: it is not read back.
        values = self.sess.run(self.remote[:-1])
        for local, value in zip(self.local[:-1], values, strict=True):
            local.assign(value)

    def run_to(self, target: int, limit: int) -> None:
        """Lets the workers make updates up to ``limit``; waits until ``target`` are applied.

        ``limit`` is the next checkpoint: there the workers stop, so that the chief copies
        a consistent state. Up to other points (an epoch's end without a checkpoint) they
        go on while the chief reads its counters and evaluates.

        Raises:
            TrainingError: No update came for the stall limit: every worker is stopped or gone.
        """
        if limit != self.limit:
            self.sess.run(self.set_limit, {self.new_limit: limit})
            self.limit = limit
        self.sess.run(self.set_wake_at, {self.new_limit: target})
        tf = self.g.tf
        wait = tf.compat.v1.RunOptions(timeout_in_ms=int(WAKE_SECONDS * 1000))
        last_applied, last_change = None, time.monotonic()
        while True:
            # Whatever the wake-up said (it may be an older segment's, or lost with a wait
            # that timed out), the counters decide.
            applied, steps, non_finite = self.sess.run(self.read_counts)
            if non_finite:  # a worker stopped on a non-finite loss: the run stops with it
                raise NonFiniteLoss(non_finite.decode())
            now = time.monotonic()
            self._sample(steps)
            if applied >= target:
                return
            if applied != last_applied:
                last_applied, last_change = applied, now
            allowed = self.stall_seconds if last_applied else self.cfg.start_timeout
            if now - last_change > allowed:
                raise TrainingError(
                    f"[{self.cfg.run.name}] no worker has finished a step in "
                    f"{now - last_change:.0f} s: every worker is stalled or gone "
                    f"(their logs: {self.logs})"
                )
            try:
                self.sess.run(self.wait, options=wait)
            except tf.errors.DeadlineExceededError:
                pass

    def _sample(self, steps) -> None:
        t = round(time.time() - self.progress_start, 4)
        self.rule.sample(self.sess, self.g, t)
        for w, count in enumerate(steps):
            if not count:
                continue  # a worker appears once it has made a step (plots need a point)
            points = self.worker_progress.setdefault(str(w), [])
            if not points or points[-1][1] != int(count):
                points.append([t, int(count)])

    def epoch_sums(self, epoch: int) -> EpochSums:
        """Epoch ``epoch``'s summed loss and correct counts, per worker, then zeroed.

        Every step of the epoch is recorded once its updates are granted (the counters
        are written inside the lock); the next epoch's go to the other slot.
        """
        stats = self.sess.run(self.read_epoch)
        slot = epoch % 2
        self.sess.run(self.reset_epoch, {self.slot: slot})
        return EpochSums(
            [float(v) for v in stats[:, 2 + slot]],
            [float(v) for v in stats[:, 4 + slot]],
            [int(v) for v in stats[:, 6 + slot]],
        )

    def staleness(self) -> dict:
        """Per worker: the delays of its counted gradients (from the histograms)."""
        delays = self.sess.run(self.read_delays)
        return {
            str(w): [d for d, n in enumerate(row) for _ in range(int(n))]
            for w, row in enumerate(delays)
        }

    def unfinished_steps(self) -> int:
        """Steps begun and not finished when the run ended (a stopped worker's)."""
        ended, begun = self.sess.run(self.read_ends)
        return int(sum(max(0, int(b) - int(e)) for b, e in zip(begun, ended, strict=True)))

    def finish(self) -> None:
        """Tells the workers to end."""
        self.sess.run(self.set_stop)


class ChiefSteps:
    """The epoch driver's steps on a parameter-server chief: segments of updates.

    The workers drive their own steps; the chief lets them go up to the driver's next
    stop (a checkpoint or the epoch's end), waits until every granted update is applied,
    and only then does the driver copy, evaluate and checkpoint: a consistent snapshot
    numbered by applied updates.
    """

    def __init__(self, chief: Chief, replica):
        self.chief, self.replica = chief, replica
        self.gradients_per_update = chief.rule.gradients_per_update
        self.staleness: dict[str, list[int]] = {}
        self.delays: list[int] = []  # every worker's, flattened
        self.abandoned = 0
        self.target: int | None = None  # the update the current segment ends at
        self.pulled: int | None = None  # the segment's end the copy was last refreshed at
        self.reached: float | None = None  # when it was reached
        self.stopped = True  # whether the workers stopped there (a checkpoint)
        self.seconds = 0.0  # the epoch's training seconds so far
        self.progress_seen: dict[str, tuple[float, int]] = {}  # worker_step_seconds' last

    def updates_per_epoch(self) -> int:
        cfg = self.replica.cfg
        # An epoch is as many updates as make one pass over the data.
        per_update = cfg.batch_size * self.gradients_per_update
        return max(1, self.replica.info.splits["train"] // per_update)

    def start(self) -> None:
        self.chief.start()  # the parameter servers get the replica's (restored) values

    def run(self, epoch: int, position: int, stop: int):
        cfg = self.replica.cfg
        per_epoch = self.updates_per_epoch()
        self.target = epoch * per_epoch + stop
        limit = next_checkpoint(
            self.target,
            per_epoch,
            cfg.epochs,
            cfg.checkpoint_every_steps,
            cfg.checkpoint_every_epochs,
        )
        # The workers' time: from the limit's raise if they were stopped at the last
        # target (a checkpoint), else from when it was reached (they went on meanwhile,
        # while the chief evaluated).
        start = time.perf_counter() if self.stopped or self.reached is None else self.reached
        self.chief.run_to(self.target, limit)
        self.reached = time.perf_counter()
        self.seconds += self.reached - start
        self.stopped = limit == self.target
        self.replica.version.assign(self.target)  # the weights are copied only when read
        return 0.0, 0.0, []  # the workers' sums are on the parameter servers

    def epoch_seconds(self, measured: float) -> float:
        seconds, self.seconds = self.seconds, 0.0
        return seconds

    def epoch_totals(self, loss_sum, correct, seen):
        epoch = self.target // self.updates_per_epoch() - 1
        sums = self.chief.epoch_sums(epoch)
        # [ps] each worker's own loss, weighted by the steps it had counted (not equal shares)
        self.rank_loss_sums, self.rank_shares = sums.loss, sums.shares()
        self.staleness = self.chief.staleness()
        self.delays = [d for w in sorted(self.staleness) for d in self.staleness[w]]
        return sum(sums.loss), sum(sums.correct), seen

    def refresh(self) -> None:
        if self.pulled == self.target:
            return  # once per segment's end (its evaluation, checkpoint and saved model)
        self.chief.pull_from_servers()
        self.chief.check_workers()  # a worker's line rather than the weights' (on_nan=stop)
        self.pulled = self.target
        # Between checkpoints the workers go on: the copy may hold a few updates more than
        # the segment's, which are counted in the next one.
        if self.target is not None and self.replica.step > self.target:
            self.replica.version.assign(self.target)

    def exchanges(self) -> int:
        """Exchanges of the scored weights: the rule's count (easgd's), else every update."""
        count = getattr(self.chief.rule, "exchanges", None)
        return count(self.chief.sess) if count is not None else int(self.replica.step)

    def worker_step_seconds(self) -> dict[str, float]:
        """Each worker's seconds per step since the last call, from its progress points.

        A worker with no step since then is left out.
        """
        found = {}
        for worker, points in self.chief.worker_progress.items():
            t, count = points[-1]
            t0, count0 = self.progress_seen.get(worker, (0.0, 0))
            if count > count0:
                found[worker] = (t - t0) / (count - count0)
            self.progress_seen[worker] = (t, count)
        return found

    def epoch_note(self) -> str:
        stats = summarize(self.delays)
        note = f"  staleness mean {stats['mean']:.2f} max {stats['max']}"
        dropped = self.chief.rule.dropped(self.delays)
        return note + (f"  dropped {dropped}" if dropped else "")

    def history(self) -> dict:
        delays = self.delays
        return {
            **self.chief.rule.history(self.chief.sess, self.chief.g),
            "staleness": delays,
            "staleness_summary": summarize(delays),
            "staleness_by_worker": {w: summarize(d) for w, d in sorted(self.staleness.items())},
            "dropped_gradients": self.chief.rule.dropped(delays),
            # Steps begun and never finished when the run ended: a stopped worker's.
            "abandoned_steps": self.abandoned,
            "worker_progress": self.chief.worker_progress,
        }

    def finish(self) -> None:
        self.chief.finish()
        self.abandoned = self.chief.unfinished_steps()
