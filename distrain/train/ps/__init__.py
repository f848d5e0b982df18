"""The parameter-server engine: every worker drives its own steps, as between-graph replication.

Each process of a parameter-server run (chief, workers, parameter servers) runs a
``tf.compat.v1.train.Server`` named by ``TF_CONFIG``. The chief and every worker build the
same graph: the model's and the optimizer's variables are placed on the parameter servers
by ``replica_device_setter``, so they are shared by name, and each worker adds its own
input pipeline and training step. A worker runs its steps in its own session against the
parameter servers; nothing on a step's path goes through the chief.

What a step does with its gradient is the mode's rule (:class:`PushRule`): async applies
it at once, syncreplicas accumulates it on the parameter servers and drops it if stale.
Either way the step is granted an update number only once its gradient is on the
servers, and only up to a limit, which makes the count of updates exact:

* ``version`` counts the updates granted so far, ``applied`` those whose variables are
  written; ``limit`` is the update the workers may go up to. The chief raises ``limit``
  to the next checkpoint and waits until ``applied`` reaches it: then no worker is
  writing, and the chief writes a consistent checkpoint numbered by applied updates. At
  an epoch end without a checkpoint the workers go on while the chief reads the epoch's
  counters and evaluates. The chief sleeps on a wake-up queue that the awaited update
  fills (:meth:`PSGraph.count_applied`), with a look at the counters every quarter second.
* Per worker, the parameter servers keep the steps it finished, the loss and correct
  counts per epoch (by the update each step was granted), and a histogram of its
  gradients' staleness; the chief reads them and samples the step counts for the
  progress plots.

The chief never waits on one worker: a dead or stopped worker simply stops adding steps,
the others reach the limit. Only when no update at all comes for a minute does the run
fail, saying so.
"""

from __future__ import annotations

import json
import os
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass

from distrain.train.config import ConfigError, TrainConfig, TrainingError
from distrain.train.driver import next_checkpoint
from distrain.train.modes import Mode, Process
from distrain.train.staleness import summarize

# Staleness is counted per worker in a histogram of this many buckets (the last one holds
# every larger delay).
DELAY_BUCKETS = 64
# Seconds the chief sleeps on the wake-up queue before it looks at the counters itself
# (for the progress plots, and to notice that every worker has stopped).
WAKE_SECONDS = 0.25
# Wake-ups the queue holds (one per segment is sent; the chief takes them as they come).
WAKEUPS = 1024
# Seconds a worker waits for the update its gradient is part of (syncreplicas).
WAIT_PATIENCE = 1.0
# The chief's scheduling priority (nice): below the workers' and the servers'.
CHIEF_NICENESS = 19
# Seconds between a waiting worker's looks at the limit.
WAIT_SECONDS = 0.005
# Seconds the chief waits at the start for every worker to begin (then it goes without).
JOIN_SECONDS = 20.0


@dataclass(frozen=True)
class Role:
    """This process's place in the cluster, from ``TF_CONFIG``."""

    cluster: dict
    job: str
    index: int

    @classmethod
    def from_environment(cls) -> Role:
        """Reads ``TF_CONFIG``.

        Raises:
            TrainingError: It is missing or names no task.
        """
        text = os.environ.get("TF_CONFIG")
        if not text:
            raise TrainingError("a parameter-server process needs TF_CONFIG (cluster and task)")
        data = json.loads(text)
        task = data.get("task") or {}
        return cls(data["cluster"], str(task.get("type")), int(task.get("index", 0)))

    @property
    def workers(self) -> int:
        return len(self.cluster.get("worker", []))

    @property
    def parameter_servers(self) -> int:
        return len(self.cluster.get("ps", []))


def start_server(role: Role, threads: int):
    """This process's TensorFlow server (gRPC), started."""
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(
        # On few cores a server with fewer inter-op threads can deadlock.
        inter_op_parallelism_threads=max(4, threads) if role.job == "ps" else 2,
        intra_op_parallelism_threads=threads,
    )
    return tf.compat.v1.train.Server(
        tf.train.ClusterSpec(role.cluster),
        job_name=role.job,
        task_index=role.index,
        protocol="grpc",
        config=config,
        start=True,
    )


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
    import contextlib

    import tensorflow as tf

    def on(device):
        return tf.compat.v1.device(device) if device else contextlib.nullcontext()

    with on(from_device):
        packed = tf.concat([tf.reshape(t, [-1]) for t in tensors], 0)
    with on(to_device):
        parts = tf.split(packed, [shape.num_elements() for shape in shapes])
        return [tf.reshape(part, shape) for part, shape in zip(parts, shapes, strict=True)]


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


class PSGraph:
    """The shared graph of a parameter-server run: variables, counters and critical section.

    Args:
        cfg: The run's configuration.
        info: The data set.
        role: This process's role.
        rule: The mode's rule (it may add shared variables).
    """

    def __init__(self, cfg: TrainConfig, info, role: Role, rule: PushRule):
        import tensorflow as tf

        from distrain.datasets import model_spec
        from distrain.train.optim import Adam

        self.tf, self.cfg, self.info, self.role, self.rule = tf, cfg, info, role, rule
        self.spec = model_spec(info.dataset, cfg.model)
        self.task = self.spec.task
        # Updates per epoch, as the chief counts them: a step's loss goes to its epoch's.
        self.per_epoch = max(
            1, info.splits["train"] // (cfg.batch_size * rule.gradients_per_update)
        )
        self.graph = tf.Graph()
        workers = role.workers
        with self.graph.as_default():
            setter = tf.compat.v1.train.replica_device_setter(
                ps_tasks=role.parameter_servers,
                worker_device=f"/job:{role.job}/task:{role.index}",
                cluster=tf.train.ClusterSpec(role.cluster),
            )
            # [ps] tf.device() refuses the setter's function in TF 2.21; the v1 scope takes it.
            with tf.compat.v1.device(setter):
                self.model = self.spec.build(info, cfg.seed)
                self.variables = self.model.trainable_variables
                # A language model's decay or anneal, over the updates the chief counts.
                stream = self.spec.stream
                schedule = stream.schedule(self.per_epoch, cfg.epochs) if stream else {}
                self.optimizer = Adam(cfg.effective_learning_rate, **schedule)
                self.optimizer.build(self.variables)
            with tf.compat.v1.device("/job:ps/task:0"):

                def counter(name, shape=(), dtype=tf.int64):
                    return tf.Variable(tf.zeros(shape, dtype), trainable=False, name=name)

                self.version = counter("version")
                self.epoch_var = counter("epoch")
                self.applied = counter("applied")
                self.limit = counter("limit")
                self.stop = counter("stop")
                self.ready = counter("ready")
                # Workers that have started their loop (the chief waits for them at the start).
                self.joined = counter("joined")
                self.begun = counter("worker_begun", [workers])
                # Per worker, one row written by one op a step: the steps recorded, the
                # pushes ended, and the loss sums, correct counts and counted steps per
                # epoch parity (the chief reads an epoch's while the next runs).
                self.stats = counter("worker_stats", [workers, 8], tf.float64)
                self.steps = tf.cast(self.stats[:, 0], tf.int64)
                self.ended = tf.cast(self.stats[:, 1], tf.int64)
                self.delays = counter("worker_delays", [workers, DELAY_BUCKETS])
                # The chief sleeps on this queue until the update it waits for is applied
                # (wake_at), instead of asking the servers over and over.
                self.wake_at = counter("wake_at")
                self.wakeup = tf.queue.FIFOQueue(
                    WAKEUPS, [tf.int64], shapes=[[]], shared_name="distrain_wakeup", name="wakeup"
                )
                self.lock = tf.queue.FIFOQueue(
                    1, [tf.int32], shapes=[[]], shared_name="distrain_lock", name="lock"
                )
                # The mode's own shared variables (syncreplicas' accumulators).
                rule.create_variables(self)
            self.state = [*self.model.variables, *self.optimizer.variables]
        # A worker's step's mean loss per label (set by the worker before its push).
        self.step_loss = None

    def push(self, grads, read_version, record):
        """The mode's push of ``grads`` (:meth:`PushRule.push`), its conds built inline.

        [ps] A TF2 cond is a functional ``If``: each run calls its branch as a function
        with its own executor, on the critical path of every step (decide, apply, count)
        on the parameter server. The push's conds are built as TF1's Switch and Merge,
        which run inline in the server's part of the step. The model's own loops (an
        LSTM's) were built before, as TF2 control flow.
        """
        tf = self.tf
        was = tf.compat.v1.control_flow_v2_enabled()
        tf.compat.v1.disable_control_flow_v2()
        try:
            return self.rule.push(self, grads, read_version, record)
        finally:
            if was:
                tf.compat.v1.enable_control_flow_v2()

    def session(self, server):
        """A session on this process's server that sees only the parameter servers and itself.

        The device filter keeps a dead worker from holding other processes' sessions.
        """
        tf = self.tf
        config = tf.compat.v1.ConfigProto(
            device_filters=["/job:ps", f"/job:{self.role.job}/task:{self.role.index}"],
            intra_op_parallelism_threads=self.cfg.threads,
            inter_op_parallelism_threads=2,
            # Gated gradients of a recurrent layer colocate a constant of the worker's with
            # a variable's shape on a parameter server; the placer puts the two together
            # (as TF1's Estimator and MonitoredTrainingSession users set it).
            allow_soft_placement=True,
            # A stopped parameter server or peer fails the call instead of hanging it
            # (calls that wait on purpose pass their own, shorter, RunOptions timeout).
            operation_timeout_in_ms=self.cfg.operation_timeout * 1000,
        )
        return tf.compat.v1.Session(server.target, graph=self.graph, config=config)

    # ---- inside a critical section -----------------------------------------------------------

    def critical(self, decide: Callable, after: list):
        """Runs ``decide()`` holding the lock; returns its outputs and the release op.

        The lock is taken only once ``after`` (the staged gradients) are on the parameter
        servers, so the section never waits for a worker: a worker that dies or stops
        mid-step cannot hold it.
        """
        tf = self.tf
        with tf.compat.v1.device("/job:ps/task:0"), tf.control_dependencies(arrived(after)):
            token = self.lock.dequeue()
            with tf.control_dependencies([token]):
                outputs, writes = decide()
            with tf.control_dependencies([*writes, *tf.nest.flatten(outputs)]):
                release = self.lock.enqueue(token)
        return outputs, release

    def count_applied(self):
        """Op: one more update applied; wakes the chief if it is the one it waits for."""
        tf = self.tf
        with tf.compat.v1.device("/job:ps/task:0"):
            applied = self.applied.assign_add(1)

            def wake():
                with tf.control_dependencies([self.wakeup.enqueue(applied)]):
                    return tf.identity(applied)

            return tf.cond(tf.equal(applied, self.wake_at.read_value()), wake, lambda: applied)

    def staged(self, grads):
        """The gradients copied to their variables' devices: the section waits for no worker.

        [ps] The dense gradients bound for one parameter server travel as one tensor
        (:func:`moved_as_one`; TensorFlow's between-graph replication sends one per
        variable). Sparse gradients travel as they are, only their rows.
        """
        tf = self.tf
        out = list(grads)
        dense = []
        for i, (grad, var) in enumerate(zip(grads, self.variables, strict=True)):
            if isinstance(grad, tf.IndexedSlices):
                with tf.compat.v1.device(var.device):
                    out[i] = tf.IndexedSlices(
                        tf.identity(grad.values), tf.identity(grad.indices), grad.dense_shape
                    )
            else:
                dense.append(i)
        for device, group in by_server(self.variables, dense):
            shapes = [self.variables[i].shape for i in group]
            moved = moved_as_one([grads[i] for i in group], shapes, to_device=device)
            for i, grad in zip(group, moved, strict=True):
                out[i] = grad
        return out

    def record(self, worker: int, update, counted, recorded, delay, loss_sum, correct):
        """Ops adding one push's outcome to worker ``worker``'s counters (inside the lock).

        Args:
            worker: The worker's index.
            update: The update the step counts towards (its epoch gets its loss).
            counted: 1 if the step's loss and accuracy count towards the epoch, else 0.
            recorded: 1 if the gradient goes into the staleness histogram and the
                worker's step count (applied, or dropped as stale), else 0 (refused at
                the limit: it is computed again).
            delay: Its staleness, in updates.
            loss_sum: The step's summed loss.
            correct: The step's correct predictions.
        """
        tf = self.tf
        with tf.compat.v1.device("/job:ps/task:0"):
            weight = tf.cast(counted, tf.float64)
            # (A version read while a refused step's increment was not yet given back can
            # make a delay look negative: it counts as 0.)
            bucket = tf.cast(tf.clip_by_value(delay, 0, DELAY_BUCKETS - 1), tf.int32)
            slot = tf.cast((update // self.per_epoch) % 2, tf.int32)

            columns = tf.stack([0, 1, 2 + slot, 4 + slot, 6 + slot])
            values = tf.stack(
                [
                    tf.cast(recorded, tf.float64),
                    tf.constant(1.0, tf.float64),
                    weight * tf.cast(loss_sum, tf.float64),
                    weight * tf.cast(correct, tf.float64),
                    weight,
                ]
            )
            rows = tf.fill([5], worker)
            return [
                tf.compat.v1.scatter_nd_add(self.stats, tf.stack([rows, columns], 1), values),
                tf.compat.v1.scatter_nd_add(self.delays, [[worker, bucket]], recorded[None]),
            ]


class Mirror:
    """[ps] A worker's copy of a dense model, refreshed at the start of every step.

    The worker's step reads the shared variables of each parameter server as one tensor
    (:func:`moved_as_one`, after the version is read) and writes them into its copy,
    whose variables the step then differentiates: one request per server instead of one
    per variable. The values are those a step reading
    the shared variables directly would see; only a model whose every variable is
    trainable and gets a dense gradient is mirrored (an embedding's rows are read on
    the server, only those looked up).

    Built in the worker's graph, under its device.

    Args:
        g: The shared graph.
        read_version: The version read before the parameters.
    """

    def __init__(self, g: PSGraph, read_version):
        tf = g.tf
        self.model = g.spec.build(g.info, g.cfg.seed)
        self.variables = self.model.trainable_variables
        if len(self.variables) != len(g.variables):
            raise TrainingError("a worker's copy of the model differs from the shared one")
        writes = []
        for device, group in by_server(g.variables):
            shared = [g.variables[i] for i in group]
            with tf.control_dependencies([read_version]):
                values = moved_as_one(shared, [v.shape for v in shared], from_device=device)
            writes += [self.variables[i].assign(v) for i, v in zip(group, values, strict=True)]
        #: Op: the copy holds the shared values (run before every step's reads).
        self.refresh = tf.group(writes)
        self.init = tf.group([v.initializer for v in self.model.variables])

    @staticmethod
    def fits(model, grads) -> bool:
        """Whether a model whose step computes ``grads`` can be mirrored."""
        from tensorflow import IndexedSlices

        dense = not any(isinstance(grad, IndexedSlices) for grad in grads)
        return dense and len(model.variables) == len(model.trainable_variables)


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


class Worker:
    """A worker's loop: its own steps against the parameter servers, until the chief stops it."""

    def __init__(self, cfg: TrainConfig, info, role: Role, rule: PushRule):
        import tensorflow as tf

        from distrain.train.inputs import make_dataset
        from distrain.train.replica import batch_gradients

        self.cfg, self.role, self.rule = cfg, role, rule
        self.g = g = PSGraph(cfg, info, role, rule)
        with g.graph.as_default(), tf.compat.v1.device(f"/job:worker/task:{role.index}"):
            # [ps] every worker reads the whole split in its own order; an epoch is a number
            # of updates in total, made by whichever workers are there.
            ds = make_dataset(
                info,
                "train",
                cfg.batch_size,
                shuffle=True,
                seed=cfg.seed + 1009 * (role.index + 1),
                repeat=True,
                drop_remainder=True,
            )
            x, y = tf.compat.v1.data.make_one_shot_iterator(ds).get_next()
            with tf.compat.v1.device("/job:ps/task:0"):
                one = tf.IndexedSlices(tf.ones([1], tf.int64), [role.index])
                begin = g.begun.scatter_add(one)  # beside the step, not before it
                read = g.version.read_value()
            model, variables = rule.trained(g)
            shared = variables is g.variables
            stream = g.spec.stream  # a language model's clipping, as in every mode
            clip = stream.clip_norm if stream else 0.0
            with tf.control_dependencies([read]):  # [ps] parameters read after the version
                loss_sum, correct, grads = batch_gradients(model, variables, x, y, g.task, clip)
            self.mirror = None
            if shared and Mirror.fits(model, grads):
                # [ps] the step differentiates a copy, filled by one read per server (the
                # graph built above for the shared variables is left unused).
                self.mirror = Mirror(g, read)
                model, variables = self.mirror.model, self.mirror.variables
                with tf.control_dependencies([self.mirror.refresh]):
                    loss_sum, correct, grads = batch_gradients(model, variables, x, y, g.task, clip)
            g.step_loss = loss_sum / tf.cast(tf.size(y), tf.float32)  # per label, for the rule
            if shared:
                grads = g.staged(grads)  # [ps] onto the parameter servers before the push

            def record(update, counted, recorded, delay):
                return g.record(role.index, update, counted, recorded, delay, loss_sum, correct)

            go_on, done, wait = g.push(grads, read, record)
            self.fetch_step = [go_on, done, begin.op]
            self.wait = None
            if wait is not None:
                self.fetch_step.append(wait)
                self.wait = rule.waiter(g)
            self.fetch_wait = [g.version.read_value(), g.limit.read_value(), g.stop.read_value()]
            with tf.compat.v1.device("/job:ps/task:0"):
                self.join = g.joined.assign_add(1)

    def run(self) -> None:
        """Steps until the chief sets ``stop``."""
        server = start_server(self.role, self.cfg.threads)
        sess = self.g.session(server)
        wait_until_ready(sess, self.g, self.cfg.start_timeout, f"worker {self.role.index}")
        self.rule.worker_start(sess, self.g)
        if self.mirror is not None:
            sess.run(self.mirror.init)
        sess.run(self.join)
        step = sess.make_callable(self.fetch_step)
        status = sess.make_callable(self.fetch_wait)
        while True:
            go_on, _, _, *wait = step()
            if wait and wait[0]:
                self.rule.block(sess, self.g, self.wait)
            if go_on:
                continue
            # [ps] at the chief's limit: wait for the next segment, or the end.
            while True:
                version, limit, stop = status()
                if stop:
                    return
                if version < limit:
                    break
                time.sleep(WAIT_SECONDS)


def wait_until_ready(sess, g: PSGraph, timeout: float, who: str) -> None:
    """Waits until the chief has initialised (or restored) the parameter servers."""
    tf = g.tf
    deadline = time.monotonic() + timeout
    while True:
        try:
            if sess.run(g.ready):
                return
        except (tf.errors.FailedPreconditionError, tf.errors.UnavailableError):
            pass  # not initialised yet, or a server not up yet
        if time.monotonic() > deadline:
            raise TrainingError(
                f"{who}: the parameter servers were not initialised within {timeout} s"
            )
        time.sleep(0.1)


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

        self.cfg, self.role, self.rule = cfg, role, rule
        self.g = g = PSGraph(cfg, info, role, rule)
        with g.graph.as_default(), tf.compat.v1.device("/job:chief/task:0"):
            self.init = tf.compat.v1.global_variables_initializer()
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
            self.read_counts = [g.applied.read_value(), g.steps]
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
            applied, steps = self.sess.run(self.read_counts)
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


class ChiefEngine:
    """The epoch driver's engine on a parameter-server chief: segments of updates.

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
        self.pulled = self.target
        # Between checkpoints the workers go on: the copy may hold a few updates more than
        # the segment's, which are counted in the next one.
        if self.target is not None and self.replica.step > self.target:
            self.replica.version.assign(self.target)

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


class ParameterServerMode(Mode):
    """What the parameter-server modes share: their processes, Kubernetes objects and roles.

    A subclass gives its name, its options and its :meth:`rule`.
    """

    options = {"ps": "parameter servers (default 1)"}

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        ps = cls.integer(options, "ps", 1)
        if ps < 1:
            raise ConfigError(f"{cls.name}: ps must be at least 1, got {ps}")
        return {**checked, "ps": ps}

    @property
    def parameter_servers(self) -> int:
        return int(self.spec.option("ps"))

    def rule(self) -> PushRule:
        """The mode's rule for a gradient's push."""
        raise NotImplementedError

    def local_processes(self, cfg, config_path, logs) -> list[Process]:
        from distrain.train.launch import cluster_spec, server_command, tf_config, worker_command

        cluster = cluster_spec(cfg.run.workers, self.parameter_servers)
        print(f"[{cfg.run.name}] cluster: {json.dumps(cluster)}", flush=True)
        processes = [
            Process(
                f"ps:{i}",
                server_command(1, cfg.output_dir),
                env={"TF_CONFIG": tf_config(cluster, "ps", i)},
                log=logs / f"ps-{i}.log",
                critical=True,
                what=f"parameter server ps:{i}",
            )
            for i in range(len(cluster["ps"]))
        ]
        # Each worker trains against the parameter servers: its own steps, the same
        # command as the chief, its role from TF_CONFIG. A worker that ends or dies does
        # not end the run: the others make its updates.
        processes += [
            Process(
                f"worker:{i}",
                worker_command(config_path),
                env={"TF_CONFIG": tf_config(cluster, "worker", i)},
                log=logs / f"worker-{i}.log",
            )
            for i in range(len(cluster["worker"]))
        ]
        chief_env = {"TF_CONFIG": tf_config(cluster, "chief", 0)}
        command = worker_command(config_path)
        processes.append(Process("chief", command, chief_env, main=True, stacks_on_timeout=True))
        return processes

    def kubernetes_objects(self, cfg, k, name, config_path) -> list[dict]:
        from distrain.k8s.objects import ps_objects

        return ps_objects(cfg, k, name, config_path)

    def train(self, cfg) -> dict:
        """Runs this process's role of the cluster (chief, or worker), from ``TF_CONFIG``.

        Does not return: the process ends once its part is done, without waiting for the
        TensorFlow server's teardown, which can wait for peers that are gone or stopped.
        After an error its traceback is printed and the error recorded for the launcher
        (``<output>/errors/``, as every training process records its own), and the exit
        code is 2 for bad input or settings, 1 otherwise.
        """
        from distrain.failures import Failure
        from distrain.train.worker import record_error

        code = 0
        try:
            self._train_role(cfg, Role.from_environment())
        except BaseException as exc:  # noqa: BLE001 (reported, then the process ends at once)
            traceback.print_exc()
            record_error(cfg.output_dir, exc)
            code = Failure.of(cfg.run.name, exc).exit_code
            # Held until the exit: freeing the exception's frames would close their
            # sessions, and closing one to a stopped server waits forever.
            self.failed = exc
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)

    def _train_role(self, cfg, role: Role) -> None:
        from distrain.datasets import load_info
        from distrain.train.driver import EpochDriver
        from distrain.train.replica import Replica

        info = load_info(cfg.data_dir, cfg.model)
        if role.job == "worker":
            Worker(cfg, info, role, self.rule()).run()
            return
        # The chief's evaluation and bookkeeping yield the cores to the workers and the
        # parameter servers when they share a machine (locally; a pod has its own).
        os.nice(CHIEF_NICENESS)
        # The chief's graph first: tf-keras refuses models made before one in a tf.Graph.
        chief = Chief(cfg, info, role, self.rule())
        replica = Replica(cfg)
        chief.attach(replica)
        EpochDriver(cfg, replica, ChiefEngine(chief, replica)).run()

    @classmethod
    def columns(cls, run: dict, history: dict) -> dict:
        return {
            "parameter_servers": int(run.get("parameter_servers") or 0),
            "aggregation": None,
            "transport": "grpc",  # TensorFlow's gRPC runtime
        }
