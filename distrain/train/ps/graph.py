"""[ps] The shared graph of a parameter-server run: variables, counters, critical section.

The chief and every worker build the same graph; ``replica_device_setter`` places the
model's and the optimizer's variables on the parameter servers, so they are shared by
name. The counters (``version``, ``applied``, ``limit``, per-worker stats) make the
count of updates exact (see :mod:`distrain.train.ps`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable

from distrain.learning.choices import make_optimizer, training_task
from distrain.learning.models import model_spec
from distrain.train.config import TrainConfig
from distrain.train.ps import state
from distrain.train.ps.roles import Role
from distrain.train.ps.transport import arrived, by_server, moved_as_one

# Staleness is counted per worker in a histogram of this many buckets (the last one holds
# every larger delay).
DELAY_BUCKETS = 64

# Wake-ups the queue holds (one per segment is sent; the chief takes them as they come).
WAKEUPS = 1024


@contextlib.contextmanager
def _graph_constants():
    """tf-keras keeps a TF op's constant inputs as graph tensors (not evaluated in a session).

    The switch is tf-keras's own (``_UNSAFE_GRAPH_OP_LAYER_CREATION``, the path it takes in
    a distribution strategy's graph); "unsafe" only for saving the model's config, which a
    parameter-server graph's model never is.
    """
    from tf_keras.src.engine import base_layer_utils

    was = base_layer_utils._UNSAFE_GRAPH_OP_LAYER_CREATION
    base_layer_utils._UNSAFE_GRAPH_OP_LAYER_CREATION = True
    try:
        yield
    finally:
        base_layer_utils._UNSAFE_GRAPH_OP_LAYER_CREATION = was


class PSGraph:
    """The shared graph of a parameter-server run: variables, counters and critical section.

    Args:
        cfg: The run's configuration.
        info: The data set.
        role: This process's role.
        rule: The mode's rule (it may add shared variables).
    """

    def __init__(self, cfg: TrainConfig, info, role: Role, rule):
        import tensorflow as tf

        self.tf, self.cfg, self.info, self.role, self.rule = tf, cfg, info, role, rule
        self.spec = model_spec(info.dataset, cfg.model)
        # The model's task, with the user's loss and class weights when the file has them.
        self.task = training_task(self.spec, info)
        # Updates per epoch, as the chief counts them: a step's loss goes to its epoch's.
        self.per_epoch = max(
            1, info.splits["train"] // (cfg.batch_size * rule.gradients_per_update)
        )
        self.graph = tf.Graph()
        with self.graph.as_default():
            setter = tf.compat.v1.train.replica_device_setter(
                ps_tasks=role.parameter_servers,
                worker_device=f"/job:{role.job}/task:{role.index}",
                cluster=tf.train.ClusterSpec(role.cluster),
            )
            # [ps] tf.device() refuses the setter's function in TF 2.21; the v1 scope takes it.
            with tf.compat.v1.device(setter):
                self.model = self.build_model()
                self.variables = self.model.trainable_variables
                # A language model's decay or anneal, over the updates the chief counts.
                stream = self.spec.stream
                schedule = stream.schedule(self.per_epoch, cfg.schedule_span) if stream else {}
                # [ps] distrain's Adam, or the model file's own optimizer: either way its
                # slots and step live on the parameter servers, which apply its updates.
                self.optimizer = make_optimizer(
                    self.spec,
                    info,
                    cfg.effective_learning_rate,
                    examples=cfg.batch_size,
                    run_updates=self.per_epoch * cfg.schedule_span,
                    **schedule,
                    **cfg.rate_schedule(self.per_epoch),
                )
                self.optimizer.build(self.variables)
            with tf.compat.v1.device("/job:ps/task:0"):
                self._shared_counters(role.workers)
                # The mode's own shared variables (syncreplicas' accumulators).
                rule.create_variables(self)
            self.state = [*self.model.variables, *self.optimizer.variables]
        # A worker's step's mean loss per label (set by the worker before its push).
        self.step_loss = None
        # The writes of the worker's forward pass to the model's non-trainable variables
        # (batch norm's moving statistics; set by the worker before its push,
        # :mod:`distrain.train.ps.state`): the shared model's staged to the parameter
        # servers, an easgd worker's to its own copy.
        self.forward: list = []

    def _shared_counters(self, workers: int) -> None:
        """[ps] The run's counters, queues and flags, on the first parameter server."""
        tf = self.tf

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
        # The line of the first worker that stopped on a non-finite loss ("":
        # none): the chief reads it with its counters and stops the run with it.
        self.non_finite = tf.Variable("", trainable=False, name="non_finite_loss")

    def apply_forward_state(self) -> list:
        """Ops moving the shared non-trainable state by the step's forward pass.

        [ps] A rule builds them where it applies the step's gradient: the state moves
        with the update, and not for a step refused at the limit or dropped as stale.
        """
        return state.apply(self.forward)

    def build_model(self):
        """The run's model, built in this graph under the caller's device scope.

        Every model of a parameter-server process is built here (the shared one, a
        worker's mirror, easgd's copy), in a TF1 graph, where tf-keras takes its legacy
        graph path: a TF op on a functional model's tensors (``x * 4.0 + 3.0``: a
        ``TensorFlowOpLayer``) has its constant inputs (the ``4.0``) evaluated at once in
        a session of tf-keras's own. That session is a local one, which cannot place the
        graph's ops on ``/job:worker`` or ``/job:ps``: the build failed. [ps] The constants
        are kept as tensors of this graph instead (:func:`_graph_constants`), as tf-keras
        itself does under a distribution strategy in a session; the ops stay where their
        scope puts them. (Only the chief's eager copy is saved: this graph's model never is.)
        """
        with _graph_constants():
            return self.spec.build(self.info, self.cfg.seed)

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
        # [ps] A user's tf-keras optimizer updates as one function call whose ops run on
        # the parameter servers that hold its variables (:class:`KerasOptimizer`).
        config.experimental.share_cluster_devices_in_session = self.optimizer.needs_cluster_devices
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
