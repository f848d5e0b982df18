"""``syncreplicas``: N of M gradients per update, stale ones dropped (backup workers)."""

from __future__ import annotations

from distrain.base.errors import ConfigError
from distrain.train.modes import register
from distrain.train.ps import state
from distrain.train.ps.graph import PSGraph
from distrain.train.ps.mode import ParameterServerMode
from distrain.train.ps.rules import PushRule


class SyncReplicasRule(PushRule):
    """[syncreplicas] N of M gradients per update, accumulated on the parameter servers.

    As TensorFlow's ``SyncReplicasOptimizer``: a gradient computed on the current version
    is added to the accumulators (one per variable, on its parameter server); the one
    that makes ``aggregate`` applies their mean as one update, zeroes them and advances
    the version. A gradient computed on an older version is stale and dropped; the
    backup workers' late gradients are dropped that way. A worker whose gradient waits in
    the accumulators waits for the update (a token, as ``SyncReplicasOptimizer``'s workers
    do) before its next step, rather than compute one that would be stale. Sparse
    gradients are added row by row, and their rows are marked: the update is the sparse
    (lazy Adam) one on the rows some gradient touched, as when a single worker's sparse
    gradient is applied, so every mode follows the same rule. All of it runs inside the
    lock, so no gradient can land between the mean and the version's advance.

    Non-trainable state (batch norm's moving statistics) follows the gradients: each
    accepted step's change is accumulated, and the update adds their mean, so one update
    moves the statistics once, by the mean of its ``aggregate`` steps' changes; a stale
    step's change is dropped with its gradient.

    Args:
        aggregate: Gradients averaged into one update.
    """

    def __init__(self, aggregate: int):
        self.aggregate = self.gradients_per_update = aggregate

    def create_variables(self, g: PSGraph) -> list:
        tf = g.tf
        self.sums, self.touched = [], []
        for var in g.variables:
            with tf.compat.v1.device(var.device):
                self.sums.append(
                    tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False, name="grad_sum")
                )
                # The rows a sparse gradient added to (a variable of rank 0 has none).
                rows = var.shape[:1] if var.shape.rank else [0]
                self.touched.append(
                    tf.Variable(tf.zeros(rows, tf.int32), trainable=False, name="grad_rows")
                )
        # [syncreplicas] the non-trainable state's changes, accumulated as the gradients
        self.state_sums = {}
        for var in g.model.non_trainable_variables:
            with tf.compat.v1.device(var.device):
                self.state_sums[var.ref()] = tf.Variable(
                    tf.zeros(var.shape, var.dtype), trainable=False, name="state_sum"
                )
        with tf.compat.v1.device("/job:ps/task:0"):
            self.count = tf.Variable(tf.zeros([], tf.int64), trainable=False, name="grad_count")
            # One token per gradient that waits in the accumulators for the update it
            # will be part of (as SyncReplicasOptimizer's token queue).
            self.tokens = tf.queue.FIFOQueue(
                2**30, [tf.int64], shapes=[[]], shared_name="distrain_tokens", name="tokens"
            )
        return [*self.sums, *self.touched, *self.state_sums.values(), self.count]

    def waiter(self, g: PSGraph):
        with g.tf.compat.v1.device("/job:ps/task:0"):
            return self.tokens.dequeue()

    def push(self, g: PSGraph, grads, read_version, record):
        tf, agg = g.tf, self.aggregate

        def decide():
            version = g.version.read_value()
            fresh = tf.equal(read_version, version)
            open_ = version < g.limit.read_value()
            accept = tf.logical_and(fresh, open_)
            weight = tf.cast(accept, tf.float32)
            adds = []
            sparse = [isinstance(grad, tf.IndexedSlices) for grad in grads]
            for grad, total, touched in zip(grads, self.sums, self.touched, strict=True):
                with tf.compat.v1.device(total.device):
                    if isinstance(grad, tf.IndexedSlices):
                        rows = tf.IndexedSlices(grad.values * weight, grad.indices)
                        adds.append(total.scatter_add(rows))
                        mark = tf.fill(tf.shape(grad.indices), tf.cast(accept, tf.int32))
                        adds.append(touched.scatter_max(tf.IndexedSlices(mark, grad.indices)))
                    else:
                        adds.append(total.assign_add(grad * weight))
            moved = state.changes(g.forward)  # [syncreplicas] dropped with a stale gradient
            for var, change in moved:
                total = self.state_sums[var.ref()]
                with tf.compat.v1.device(total.device):
                    adds.append(total.assign_add(change * tf.cast(accept, change.dtype)))
            count = self.count.read_value() + tf.cast(accept, tf.int64)

            def mean_of(total, touched, is_sparse):
                if not is_sparse:
                    return total.read_value() / agg
                rows = tf.cast(tf.reshape(tf.where(touched.read_value() > 0), [-1]), tf.int32)
                values = tf.gather(total, rows) / agg
                return tf.IndexedSlices(values, rows, tf.shape(total, out_type=tf.int32))

            def apply_mean():
                mean = [
                    mean_of(*args) for args in zip(self.sums, self.touched, sparse, strict=True)
                ]
                update = g.optimizer.apply_gradients(zip(mean, g.variables, strict=True))
                # [syncreplicas] the state moves by the mean of the aggregated steps' changes
                sums = [(var, self.state_sums[var.ref()]) for var, _ in moved]
                for var, total in sums:
                    with tf.compat.v1.device(var.device):
                        share = tf.cast(total.read_value() / agg, var.dtype)
                        update = tf.group(update, var.assign_add(share))
                with tf.control_dependencies([update]):
                    zero = [total.assign(tf.zeros_like(total)) for total in self.sums]
                    zero += [total.assign(tf.zeros_like(total)) for _, total in sums]
                    zero += [
                        touched.assign(tf.zeros_like(touched))
                        for touched, is_sparse in zip(self.touched, sparse, strict=True)
                        if is_sparse
                    ]
                with tf.control_dependencies(zero):
                    new = g.version.assign_add(1)
                    wake = [self.tokens.enqueue_many([tf.fill([agg - 1], new)])] if agg > 1 else []
                    return tf.group(new, self.count.assign(0), g.count_applied(), *wake)

            with tf.control_dependencies(adds):
                outcome = tf.cond(
                    count >= agg, apply_mean, lambda: tf.group(self.count.assign(count))
                )
            delay = version - read_version
            recorded = tf.cast(tf.logical_or(accept, tf.logical_not(fresh)), tf.int64)
            stats = record(version, tf.cast(accept, tf.int64), recorded, delay)
            # An accepted gradient that did not complete the update waits for it.
            wait = tf.logical_and(accept, count < agg)
            return (open_, wait), [outcome, *stats]

        (open_, wait), release = g.critical(decide, grads)
        return open_, release, wait

    def dropped(self, staleness: list[int]) -> int:
        return sum(1 for d in staleness if d > 0)


@register
class SyncReplicas(ParameterServerMode):
    """N of M gradients per update; the M - A backup workers' late ones are dropped.

    Each update averages the first ``aggregate`` gradients computed on the current
    parameters, so a straggler does not hold the update up.
    """

    name = "syncreplicas"
    example = "syncreplicas:2"
    options = {**ParameterServerMode.options, "aggregate": "gradients per update (default: all)"}

    @classmethod
    def check(cls, workers: int, options: dict) -> dict:
        checked = super().check(workers, options)
        aggregate = cls.integer(options, "aggregate", workers)
        if not 1 <= aggregate <= workers:
            raise ConfigError(
                f"syncreplicas: replicas_to_aggregate must be between 1 and workers "
                f"({workers}), got {aggregate}"
            )
        return {**checked, "aggregate": aggregate}

    def gradients_per_update(self) -> int:
        return int(self.spec.option("aggregate"))

    def rule(self) -> PushRule:
        return SyncReplicasRule(self.gradients_per_update())

    @classmethod
    def columns(cls, run: dict, history: dict) -> dict:
        options = run.get("options") or {}
        aggregate = options.get("aggregate", run.get("replicas_to_aggregate"))
        return {
            **super().columns(run, history),
            "aggregation": f"{aggregate}/{run['workers']}",
        }
