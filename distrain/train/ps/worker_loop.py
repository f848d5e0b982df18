"""[ps] A worker's loop: its own steps against the parameter servers, until the chief stops it."""

from __future__ import annotations

import time

from distrain.base.errors import TrainingError
from distrain.learning.inputs import make_dataset
from distrain.train.config import TrainConfig
from distrain.train.nonfinite import LossWatch, NonFiniteLoss, is_finite
from distrain.train.ps import state
from distrain.train.ps.graph import PSGraph
from distrain.train.ps.mirror import Mirror
from distrain.train.ps.roles import Role, start_server
from distrain.train.ps.rules import PushRule
from distrain.train.replica import batch_gradients

# Seconds between a waiting worker's looks at the limit.
WAIT_SECONDS = 0.005


class Worker:
    """A worker's loop: its own steps against the parameter servers, until the chief stops it.

    Args:
        cfg: The run's configuration.
        info: The data set.
        role: This worker's role.
        rule: The mode's rule.
        inputs: Builds ``(x, y)`` in the worker's graph instead of its training split
            (the exact tests feed known batches); None: the split.
    """

    def __init__(self, cfg: TrainConfig, info, role: Role, rule: PushRule, inputs=None):
        import tensorflow as tf

        self.cfg, self.role, self.rule = cfg, role, rule
        self.g = g = PSGraph(cfg, info, role, rule)
        with g.graph.as_default(), tf.compat.v1.device(f"/job:worker/task:{role.index}"):
            if inputs is not None:
                x, y = inputs()
            else:
                # [ps] every worker reads the whole split in its own order; an epoch is a
                # number of updates in total, made by whichever workers are there.
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
            built = len(g.graph.get_operations())
            with tf.control_dependencies([read]):  # [ps] parameters read after the version
                loss_sum, correct, grads = batch_gradients(model, variables, x, y, g.task, clip)
            # [ps] the forward pass's writes to batch norm's moving statistics (and any
            # non-trainable variable): nothing in a graph runs them; the rule applies them.
            forward = state.forward_updates(g.graph, model.non_trainable_variables, built)
            self.mirror = None
            if shared and Mirror.fits(model, grads):
                # [ps] the step differentiates a copy, filled by one read per server (the
                # graph built above for the shared variables is left unused).
                self.mirror = Mirror(g, read)
                model, variables = self.mirror.model, self.mirror.variables
                with tf.control_dependencies([self.mirror.refresh]):
                    loss_sum, correct, grads = batch_gradients(model, variables, x, y, g.task, clip)
            g.step_loss = loss_sum / tf.cast(tf.size(y), tf.float32)  # per label, for the rule
            g.forward = forward
            if shared:
                # [ps] onto the parameter servers before the push, the state's changes first
                g.forward = state.staged(forward)
                with tf.control_dependencies([u.value for u in g.forward]):
                    grads = g.staged(grads)

            def record(update, counted, recorded, delay):
                return g.record(role.index, update, counted, recorded, delay, loss_sum, correct)

            go_on, done, wait = g.push(grads, read, record)
            # The step's loss and the version it read come back with the step's outcome:
            # the non-finite check costs no call of its own.
            self.fetch_step = [go_on, loss_sum, read, done, begin.op]
            self.wait = None
            if wait is not None:
                self.fetch_step.append(wait)
                self.wait = rule.waiter(g)
            with tf.compat.v1.device("/job:ps/task:0"):
                self.line = tf.compat.v1.placeholder(tf.string, [])
                self.tell_chief = g.non_finite.assign(self.line)
            self.losses = LossWatch(
                cfg.on_nan, cfg.run.name, f"worker:{role.index}", lambda m: print(m, flush=True)
            )
            self.fetch_wait = [g.version.read_value(), g.limit.read_value(), g.stop.read_value()]
            with tf.compat.v1.device("/job:ps/task:0"):
                self.join = g.joined.assign_add(1)
            # [ps] The model's lookup tables (StringLookup, IntegerLookup, TextVectorization)
            # live on this worker, outside the variables the chief initialises: each worker
            # fills its own before its first step (every copy's, built above).
            self.init_tables = tf.compat.v1.tables_initializer()

    def run(self) -> None:
        """Steps until the chief sets ``stop``."""
        server = start_server(self.role, self.cfg.threads)
        sess = self.g.session(server)
        wait_until_ready(sess, self.g, self.cfg.start_timeout, f"worker {self.role.index}")
        sess.run(self.init_tables)
        self.rule.worker_start(sess, self.g)
        if self.mirror is not None:
            sess.run(self.mirror.init)
        sess.run(self.join)
        step = sess.make_callable(self.fetch_step)
        status = sess.make_callable(self.fetch_wait)
        while True:
            go_on, loss, version, _, _, *wait = step()
            if not is_finite(loss):
                self.non_finite(sess, loss, int(version))
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

    def non_finite(self, sess, loss: float, version: int) -> None:
        """A step's loss was not finite: on_nan=stop tells the chief, then stops this worker.

        ``version``: the update the step's parameters were read at (the step is the
        next one).

        Raises:
            NonFiniteLoss: ``on_nan`` is ``stop``.
        """
        per_epoch = self.g.per_epoch
        try:
            self.losses.bad(version // per_epoch + 1, version + 1, loss)
        except NonFiniteLoss as err:
            if not sess.run(self.g.non_finite):  # the first worker's line is the run's
                sess.run(self.tell_chief, {self.line: str(err)})
            raise


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
