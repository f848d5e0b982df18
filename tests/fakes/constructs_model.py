"""A user's model file with the constructs real models hold (issue 48, point 1).

``functional``: TF ops on a functional model's tensors (tf-keras wraps them as layers), a
``Lambda`` layer, a custom layer registered with ``get_config``, an unregistered one, a
layer in mixed precision, and dropout. ``subclassed``: a ``keras.Model`` with its own
``call``, a TF op, dropout and the registered layer inside. ``with_info``: a subclassed
model whose constructor takes ``info``, so its saved config cannot be revived (it is loaded
as weights into a model built again). It reads any data set whose features are numbers.
"""

import tensorflow as tf
import tf_keras as keras


@keras.utils.register_keras_serializable(package="constructs")
class Scale(keras.layers.Layer):
    """Multiplies by a factor (registered, with its config)."""

    def __init__(self, factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


class Centre(keras.layers.Layer):
    """Subtracts a half (not registered: found by its module or its name)."""

    def call(self, x):
        return x - 0.5


def _numbers(info):
    """The inputs, and their numeric features flattened and joined (floats)."""
    inputs = info.feature_spec.keras_inputs(keras)
    named = inputs if isinstance(inputs, dict) else {"input": inputs}
    parts = [
        keras.layers.Flatten()(tf.cast(t, tf.float32))
        for t in named.values()
        if t.dtype != tf.string
    ]
    return inputs, parts[0] if len(parts) == 1 else keras.layers.Concatenate()(parts)


def functional(info, seed):
    inputs, x = _numbers(info)
    x = Centre()(x) * 2.0 + 0.1  # TF ops on Keras tensors
    x = keras.layers.Lambda(lambda t: tf.clip_by_value(t, -4.0, 4.0))(x)
    x = Scale(0.5)(x)
    init = keras.initializers.GlorotUniform
    x = keras.layers.Dense(
        64, activation="relu", kernel_initializer=init(seed), dtype="mixed_bfloat16"
    )(x)
    x = keras.layers.Dropout(0.1)(tf.cast(x, tf.float32))
    logits = keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 1))(x)
    return keras.Model(inputs, logits)


class Net(keras.Model):
    """Its own ``call``: the features joined, a TF op, a hidden layer, dropout."""

    def __init__(self, classes, hidden=64, seed=0):
        super().__init__()
        init = keras.initializers.GlorotUniform
        self.flat = keras.layers.Flatten()
        self.scale = Scale(2.0)
        self.hidden = keras.layers.Dense(hidden, activation="relu", kernel_initializer=init(seed))
        self.drop = keras.layers.Dropout(0.1)
        self.out = keras.layers.Dense(classes, kernel_initializer=init(seed + 1))

    def call(self, inputs, training=False):
        named = inputs if isinstance(inputs, dict) else {"input": inputs}
        parts = [self.flat(tf.cast(t, tf.float32)) for t in named.values() if t.dtype != tf.string]
        x = tf.concat(parts, axis=-1) if len(parts) > 1 else parts[0]
        x = tf.math.tanh(self.scale(x) - 1.0)
        return self.out(self.drop(self.hidden(x), training=training))


def subclassed(info, seed):
    return Net(info.num_classes, seed=seed)


class InfoNet(Net):
    """Built from ``info`` itself: tf-keras cannot write its constructor's argument."""

    def __init__(self, info):
        super().__init__(info.num_classes, hidden=32)


def with_info(info, seed):
    return InfoNet(info)
