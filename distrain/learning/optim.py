"""distrain's optimizers, Adam and fastText's SGD, on plain ``tf.Variable`` updates.

Why not the tf-keras optimizer: one optimizer, with the same arithmetic, must run eagerly
(single, sync), inside ``tf.function``, and in the graphs that parameter-server workers
build (between-graph replication), where its updates run on the parameter servers. Plain
variable updates do all three, and keep the modes comparable.

Sparse gradients (``tf.IndexedSlices``, from embedding lookups) stay sparse until they
reach the variables' device: only the looked-up rows travel. Their update is lazy Adam
(TensorFlow Addons' ``LazyAdam``, PyTorch's ``SparseAdam``): the rows of repeated indices
are summed, then only those rows' moments and values are updated, with the step's bias
correction; rows the batch does not touch keep their values and moments. A dense update
would decay every row's moments and move every row on every step, which for an embedding
table of 100,000 rows costs far more than the batch's few thousand rows (issue 41). Every
mode applies its updates with this class, so every mode follows the same rule. Indices
made unique by the embedding layer's lookup are not made unique again.

:class:`SGD` is fastText's rule (a model spec names it, as the bag-of-n-grams default does
on large data): a rate per example falling linearly to zero over the run, its only state
the step counter, sparse rows moved by one scatter that adds repeated rows itself.

A model file may give its own tf-keras optimizer (``optimizer(info)``,
:mod:`distrain.learning.choices`): :class:`KerasOptimizer` holds it behind the same three
calls (``build``, ``variables``, ``apply_gradients``), so every mode applies it where it
applies Adam, the parameter-server modes on the servers. A tf-keras optimizer chains its
updates only where TensorFlow adds control dependencies itself (eagerly, in a
``tf.function``); in a parameter-server graph its update is therefore built as a
``tf.function`` the servers run (each variable's update on its own server), and the
graph's session must see the cluster's devices (:attr:`KerasOptimizer.needs_cluster_devices`).
"""

from __future__ import annotations

import json
import math

import tensorflow as tf


def _made_unique(indices) -> bool:
    """Whether ``indices`` come straight out of a ``Unique`` op, so are distinct.

    Through reshapes and identities: the lookup of each distinct id once, as
    :class:`distrain.learning.layers.MeanEmbedding` does, in a traced step or a graph.
    Anything else (an allreduce's concatenation, two lookups' gradients added, an eager
    tensor, which has no op) is not known distinct.
    """
    try:
        op = indices.op
    except AttributeError:  # an eager tensor
        return False
    while op.type in ("Reshape", "Identity") and op.inputs:
        op = op.inputs[0].op
    return op.type in ("Unique", "UniqueV2")


def _dense_rows(grad: tf.IndexedSlices) -> tf.IndexedSlices:
    """Sums the rows of repeated indices, as a dense gradient would have them.

    Indices made unique already (:func:`_made_unique`: the embedding layer's lookup) are
    kept as they are, without a second ``tf.unique``. Indices that turn out distinct
    keep their rows too: the sum would copy every row to the same place.
    """
    if _made_unique(grad.indices):
        return grad
    unique, positions = tf.unique(grad.indices)
    count = tf.shape(unique)[0]
    values = tf.cond(
        tf.equal(count, tf.shape(grad.indices)[0]),
        lambda: grad.values,  # distinct: ``unique`` is ``indices``, in the same order
        lambda: tf.math.unsorted_segment_sum(grad.values, positions, count),
    )
    return tf.IndexedSlices(values, unique, grad.dense_shape)


class Rule(tf.Module):
    """What every optimizer of distrain's shares: the step counter and the rate's schedule.

    Args:
        name: The module's name (its checkpoint's).
        learning_rate: Step size.
        decay: The step size is multiplied by this at every update (1: constant).
        anneal_updates: If set, the step size also follows a half cosine from its value
            down to zero over this many updates, and stays at zero after.
        warmup_updates: If set, the step size rises linearly from ``warmup_from`` to
            ``learning_rate`` over this many updates (Goyal et al. 2017's gradual warm-up
            of a linearly scaled rate): update ``t`` takes ``warmup_from + (learning_rate
            - warmup_from) * min(t, warmup_updates) / warmup_updates``.
        warmup_from: The warm-up's first rate (None: ``learning_rate``, no warm-up).
        linear_updates: If set, the step size also falls linearly to zero over this many
            updates (fastText's schedule): update ``t`` takes ``1 - (t - 1) / linear_updates``
            of it, and none after the last.
    """

    def __init__(
        self,
        name: str,
        learning_rate: float,
        decay=1.0,
        anneal_updates: int = 0,
        warmup_updates: int = 0,
        warmup_from: float | None = None,
        linear_updates: int = 0,
    ):
        super().__init__(name=name)
        self.learning_rate = float(learning_rate)
        self.warmup_updates = int(warmup_updates)
        self.warmup_from = float(learning_rate if warmup_from is None else warmup_from)
        self.decay = float(decay)
        self.anneal_updates = int(anneal_updates)
        self.linear_updates = int(linear_updates)
        self.iterations = None

    #: Variables whose initial value reads another variable (none: see KerasOptimizer).
    late_variables: tuple = ()
    #: Whether a parameter-server session must see the cluster's devices (KerasOptimizer).
    needs_cluster_devices = False
    #: Whether it is the user's (a model file's), whose rate no setting changes.
    is_users = False

    def build_counter(self) -> bool:
        """Creates the step counter; False if it was already built."""
        if self.iterations is not None:
            return False
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        return True

    def step_size(self, step):
        """The step size of update ``step`` (1 for the first), before bias correction.

        The learning rate, warmed up, decayed, annealed and linearly decayed as configured.
        """
        rate = self.learning_rate
        if self.warmup_updates:
            done = tf.minimum(step, float(self.warmup_updates)) / self.warmup_updates
            rate = self.warmup_from + (rate - self.warmup_from) * done
        if self.decay != 1.0:
            rate = rate * tf.pow(self.decay, step - 1.0)
        if self.anneal_updates:
            done = tf.minimum(step - 1.0, float(self.anneal_updates)) / self.anneal_updates
            rate = rate * 0.5 * (1.0 + tf.cos(math.pi * done))
        if self.linear_updates:
            rate = rate * tf.maximum(0.0, 1.0 - (step - 1.0) / self.linear_updates)
        return rate

    def update_rate(self, step, scale=None, per_update: float = 1.0):
        """Update ``step``'s rate, on the step counter's device.

        :meth:`step_size` times ``per_update`` (SGD's examples an update) and ``scale`` (a
        tensor; None: 1, as async's staleness-aware rate divides it by the staleness).
        """
        with tf.device(self.iterations.device):
            rate = self.step_size(step)
            if per_update != 1.0:
                rate = rate * per_update
            if scale is not None:
                rate = rate * tf.cast(scale, tf.float32)
            return rate

    def next_step(self):
        """Counts an update; returns its number (1 for the first), as a float32 tensor."""
        if self.iterations is None:
            raise RuntimeError(f"{type(self).__name__}.build(variables) must come first")
        with tf.device(self.iterations.device):
            return tf.cast(self.iterations.assign_add(1), tf.float32)


class Adam(Rule):
    """Adam (Kingma & Ba) with bias correction; state is tracked for checkpoints.

    Args:
        learning_rate: Step size.
        beta_1: Decay of the first-moment estimate.
        beta_2: Decay of the second-moment estimate.
        epsilon: Added to the denominator.
        schedule: The rate's schedule (:class:`Rule`'s ``decay``, ``anneal_updates``,
            ``warmup_updates``, ``warmup_from``, ``linear_updates``).
    """

    def __init__(self, learning_rate: float, beta_1=0.9, beta_2=0.999, epsilon=1e-7, **schedule):
        super().__init__("adam", learning_rate, **schedule)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.m: list[tf.Variable] = []
        self.v: list[tf.Variable] = []

    def build(self, variables) -> None:
        """Creates the slots, each on its variable's device (a parameter server's)."""
        if not self.build_counter():
            return
        for var in variables:
            with tf.device(var.device):
                self.m.append(tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False))
                self.v.append(tf.Variable(tf.zeros(var.shape, var.dtype), trainable=False))

    def describe(self) -> str:
        """The optimizer and its constants, for a checkpoint's fingerprint."""
        return f"adam(beta_1={self.beta_1:g}, beta_2={self.beta_2:g}, epsilon={self.epsilon:g})"

    def apply_gradients(self, grads_and_vars, scale=None):
        """Applies one update; returns an op that is done when every variable is updated.

        ``scale``: a factor of this update's step size (a tensor; None: 1), as async's
        staleness-aware rate divides it by the gradient's staleness.
        """
        grads_and_vars = list(grads_and_vars)
        step = self.next_step()
        rate = self.update_rate(step, scale)
        with tf.device(self.iterations.device):
            b1_power, b2_power = self.beta_1**step, self.beta_2**step
            lr = rate * tf.sqrt(1.0 - b2_power) / (1.0 - b1_power)
        updates = []
        b1, b2 = self.beta_1, self.beta_2
        for (grad, var), m, v in zip(grads_and_vars, self.m, self.v, strict=True):
            with tf.device(var.device):
                if isinstance(grad, tf.IndexedSlices):
                    # Lazy Adam: only the touched rows' moments and values change.
                    updates.append(self._sparse_update(grad, var, m, v, lr))
                    continue
                # TensorFlow's fused kernel: the same update in one op per variable,
                # which matters on a parameter server, where every op is queued.
                updates.append(
                    tf.raw_ops.ResourceApplyAdam(
                        var=var.handle,
                        m=m.handle,
                        v=v.handle,
                        beta1_power=tf.cast(b1_power, var.dtype),
                        beta2_power=tf.cast(b2_power, var.dtype),
                        lr=tf.cast(rate, var.dtype),
                        beta1=tf.cast(b1, var.dtype),
                        beta2=tf.cast(b2, var.dtype),
                        epsilon=tf.cast(self.epsilon, var.dtype),
                        grad=grad,
                    )
                )
        return tf.group(updates)

    def _sparse_update(self, grad, var, m, v, lr):
        """Lazy Adam on the rows of ``grad``: the rows' moments and values, nothing else."""
        grad = _dense_rows(grad)
        rows, g = grad.indices, tf.cast(grad.values, var.dtype)
        lr = tf.cast(lr, var.dtype)
        m_rows = self.beta_1 * tf.gather(m, rows) + (1.0 - self.beta_1) * g
        v_rows = self.beta_2 * tf.gather(v, rows) + (1.0 - self.beta_2) * tf.square(g)
        step = lr * m_rows / (tf.sqrt(v_rows) + self.epsilon)
        return tf.group(
            m.scatter_update(tf.IndexedSlices(m_rows, rows)),
            v.scatter_update(tf.IndexedSlices(v_rows, rows)),
            var.scatter_sub(tf.IndexedSlices(step, rows)),
        )


class SGD(Rule):
    """Plain SGD at a rate per example, fastText's rule; its only state is the step counter.

    An update moves each variable by the rate times the sum of the per-example gradients
    of the update's examples: ``examples`` times the mean gradient a step computes (the
    mean of the batch's losses; [sync] the ranks' mean, at a rate scaled by their number).
    fastText's rate is per example, and so is this one: the same rate serves any batch
    size. With ``linear_updates`` the rate falls linearly to zero over the run's updates,
    as fastText's does over its epochs.

    A sparse gradient (``tf.IndexedSlices``) moves only its rows, in one scatter: repeated
    indices add up in the scatter itself, so nothing is summed, sorted or made unique
    first, whatever produced the rows (one lookup of distinct ids, an allreduce's
    concatenation, a parameter server's aggregate).

    Args:
        learning_rate: Step size per example.
        examples: Examples whose mean gradient an update applies (the batch size).
        schedule: The rate's schedule (:class:`Rule`'s ``linear_updates`` and the others).
    """

    def __init__(self, learning_rate: float, examples: int = 1, **schedule):
        super().__init__("sgd", learning_rate, **schedule)
        self.examples = int(examples)

    def build(self, variables) -> None:
        """Creates the step counter (plain SGD keeps no slots)."""
        self.build_counter()

    def describe(self) -> str:
        """The optimizer and its constants, for a checkpoint's fingerprint."""
        decay = ", linear decay to 0" if self.linear_updates else ""
        return f"sgd(per example, {self.examples} examples an update{decay})"

    def apply_gradients(self, grads_and_vars, scale=None):
        """Applies one update; returns an op that is done when every variable is updated.

        ``scale``: a factor of this update's step size (a tensor; None: 1), as async's
        staleness-aware rate divides it by the gradient's staleness.
        """
        grads_and_vars = list(grads_and_vars)
        step = self.next_step()
        rate = self.update_rate(step, scale, per_update=float(self.examples))
        updates = []
        for grad, var in grads_and_vars:
            with tf.device(var.device):
                alpha = tf.cast(rate, var.dtype)
                if isinstance(grad, tf.IndexedSlices):
                    values = alpha * tf.cast(grad.values, var.dtype)
                    updates.append(var.scatter_sub(tf.IndexedSlices(values, grad.indices)))
                else:
                    updates.append(
                        tf.raw_ops.ResourceApplyGradientDescent(
                            var=var.handle, alpha=alpha, delta=tf.cast(grad, var.dtype)
                        )
                    )
        return tf.group(updates)


class KerasOptimizer(tf.Module):
    """A tf-keras optimizer of the user's, applied where every mode applies :class:`Adam`.

    Its update is the optimizer's own (its slots, weight decay, clipping and learning-rate
    schedule, stepped by its ``iterations``: one per update the mode applies), as
    ``model.fit`` applies it.

    Args:
        optimizer: A ``tf_keras.optimizers.Optimizer`` (checked by
            :mod:`distrain.learning.choices`).
    """

    needs_cluster_devices = True
    is_users = True

    def __init__(self, optimizer):
        super().__init__(name="user_optimizer")
        self.optimizer = optimizer

    @property
    def learning_rate(self):
        """The optimizer's learning rate (a schedule's current value)."""
        return self.optimizer.learning_rate

    def build(self, variables) -> None:
        """Creates the slots and the step counter (each slot on its variable's device)."""
        self.optimizer.build(list(variables))

    @property
    def variables(self) -> list:
        """Every variable of the optimizer: its step, slots and learning rate.

        What a checkpoint, a broadcast or the parameter servers hold of it, in one order in
        every process.
        """
        o = self.optimizer
        rates = [getattr(o, "_learning_rate", None), getattr(o, "_current_learning_rate", None)]
        return [*o.variables, *(v for v in rates if isinstance(v, tf.Variable))]

    @property
    def late_variables(self) -> tuple:
        """A schedule's current rate: its initial value reads the step counter.

        Initialised after the others (:func:`initializer`); every update sets it first.
        """
        rate = getattr(self.optimizer, "_current_learning_rate", None)
        return (rate,) if isinstance(rate, tf.Variable) else ()

    def describe(self) -> str:
        """The optimizer's class and configuration (its schedule's too), as JSON."""
        import tf_keras

        config = tf_keras.optimizers.serialize(self.optimizer)
        return json.dumps(config, sort_keys=True, default=str)

    def apply_gradients(self, grads_and_vars):
        """Applies one update; returns a tensor that is ready once every variable is updated.

        In a ``tf.Graph`` (a parameter-server worker's) the update runs as one function
        call: inside it TensorFlow orders the optimizer's reads and writes (the weight
        decay before the step, the schedule's rate before its use), which the graph would
        not.
        """
        grads_and_vars = list(grads_and_vars)
        if tf.executing_eagerly() or tf.inside_function():
            return self.optimizer.apply_gradients(grads_and_vars)
        variables = [var for _, var in grads_and_vars]

        @tf.function
        def update(grads):
            self.optimizer.apply_gradients(zip(grads, variables, strict=True))
            return self.optimizer.iterations.read_value()

        return update([grad for grad, _ in grads_and_vars])


def initializer(variables, optimizer):
    """An op initialising ``variables`` in a graph, ``optimizer``'s late ones by zeros.

    A schedule's current rate (:attr:`KerasOptimizer.late_variables`) is initialised from
    the step counter, which may not be yet; its value is set before every use.
    """
    late = {id(v) for v in optimizer.late_variables}
    early = [v for v in variables if id(v) not in late]
    zeros = [v.assign(tf.zeros(v.shape, v.dtype)) for v in variables if id(v) in late]
    return tf.group(tf.compat.v1.variables_initializer(early), *zeros)
