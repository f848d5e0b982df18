"""Adam on plain ``tf.Variable`` updates, the optimizer of every mode.

Why not the tf-keras optimizer: under ``ParameterServerStrategy`` its ``apply_gradients``
goes through the strategy's cross-replica machinery, and steps scheduled on different
workers were measured to never interleave (zero staleness over hundreds of concurrent
steps), which is not asynchronous SGD. The same model with these plain variable updates
interleaves as Downpour-style training does. Using one optimizer in every mode keeps the
modes comparable.
"""

from __future__ import annotations

import tensorflow as tf


class Adam(tf.Module):
    """Adam (Kingma & Ba) with bias correction; state is tracked for checkpoints.

    Args:
        learning_rate: Step size.
        beta_1: Decay of the first-moment estimate.
        beta_2: Decay of the second-moment estimate.
        epsilon: Added to the denominator.
    """

    def __init__(self, learning_rate: float, beta_1=0.9, beta_2=0.999, epsilon=1e-7):
        super().__init__(name="adam")
        self.learning_rate = float(learning_rate)
        self.beta_1, self.beta_2, self.epsilon = beta_1, beta_2, epsilon
        self.iterations = None
        self.m: list[tf.Variable] = []
        self.v: list[tf.Variable] = []

    def build(self, variables) -> None:
        """Creates the slots (under a strategy's scope they go where the variables are)."""
        if self.iterations is not None:
            return
        self.iterations = tf.Variable(0, dtype=tf.int64, trainable=False, name="iterations")
        self.m = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False) for v in variables]
        self.v = [tf.Variable(tf.zeros(v.shape, v.dtype), trainable=False) for v in variables]

    def apply_gradients(self, grads_and_vars):
        """Applies one update; returns an op that is done when every variable is updated."""
        grads_and_vars = list(grads_and_vars)
        if self.iterations is None:
            raise RuntimeError("Adam.build(variables) must be called before apply_gradients")
        step = tf.cast(self.iterations.assign_add(1), tf.float32)
        lr = self.learning_rate * tf.sqrt(1.0 - self.beta_2**step) / (1.0 - self.beta_1**step)
        updates = []
        for (grad, var), m, v in zip(grads_and_vars, self.m, self.v, strict=True):
            grad = tf.convert_to_tensor(grad)
            m_t = m.assign(self.beta_1 * m + (1.0 - self.beta_1) * grad)
            v_t = v.assign(self.beta_2 * v + (1.0 - self.beta_2) * tf.square(grad))
            updates.append(var.assign_sub(lr * m_t / (tf.sqrt(v_t) + self.epsilon)))
        return tf.group(updates)
