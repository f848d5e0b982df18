"""The zoo: small user models holding every construct a model file can (issue 48, point 1).

Each is a ``FUNCTION(info, seed)`` of a model file, named as a user names one: ``--model
tests/zoo/models.py:FUNCTION``. They read the zoo's tfrecord folder (:mod:`tests.zoo.data`:
``x`` float32 [8], ``bucket`` int64, ``colour`` bytes; four classes) and are few, each
holding several constructs whose layers are named, so that a failure still says which
construct failed:

- ``functional_ops``: TF ops on Keras tensors (``x * 4.0 + 3.0``, a cast: tf-keras wraps
  each as a ``TFOpLambda`` layer), a ``Lambda`` layer, a custom layer class registered with
  ``get_config`` (``Scale``), a kernel regulariser, ``BatchNormalization`` and
  ``Dropout``. The model of acceptance 2 (the whole pipeline, from the wheel).
- ``several_inputs``: a float, an int through an ``Embedding`` and bytes through a
  ``StringLookup`` whose vocabulary the tfrecord job computed (``info.vocabulary``), so
  the saved model carries it.
- ``subclassed``: a custom ``keras.Model`` class of this file (registered, with
  ``get_config``) with its own ``call``: a TF op and ``Dropout`` inside.
- ``own_precision``: a model that sets its own mixed-precision policy (``mixed_bfloat16``
  layers, float32 logits).

:data:`ZOO` lists them: the contract test (tests/integration/test_zoo.py) reads it without
importing this file, and runs each in every registered mode.
"""

import tensorflow as tf
import tf_keras as keras

# The zoo's models, in the order the contract test runs them.
ZOO = ("functional_ops", "several_inputs", "subclassed", "own_precision")


def _init(seed):
    return keras.initializers.GlorotUniform(seed)


@keras.utils.register_keras_serializable(package="zoo")
class Scale(keras.layers.Layer):
    """Multiplies by a fixed factor: a custom layer, registered, with its config."""

    def __init__(self, factor=1.0, **kwargs):
        super().__init__(**kwargs)
        self.factor = factor

    def call(self, x):
        return x * self.factor

    def get_config(self):
        return {**super().get_config(), "factor": self.factor}


def functional_ops(info, seed):
    """TF ops, a Lambda, a custom layer, an L2 kernel, batch norm and dropout."""
    inputs = {name: info.features[name].keras_input(name, keras) for name in ("x", "bucket")}
    x = inputs["x"] * 4.0 + 3.0  # two TF ops: TFOpLambda layers
    x = Scale(0.25, name="scale")(x)
    x = keras.layers.Lambda(lambda t: tf.math.tanh(t - 1.0), name="tanh_lambda")(x)
    bucket = keras.layers.Reshape((1,), name="bucket_column")(tf.cast(inputs["bucket"], "float32"))
    x = keras.layers.Concatenate(name="join")([x, bucket])
    x = keras.layers.Dense(
        32,
        kernel_initializer=_init(seed),
        kernel_regularizer=keras.regularizers.L2(1e-3),
        name="hidden",
    )(x)
    x = keras.layers.BatchNormalization(name="bn")(x)
    x = keras.layers.Activation("relu", name="relu")(x)
    x = keras.layers.Dropout(0.2, name="dropout")(x)
    logits = keras.layers.Dense(info.num_classes, kernel_initializer=_init(seed + 1), name="logits")
    return keras.Model(inputs, logits(x), name="functional_ops")


def several_inputs(info, seed):
    """A float, an int embedded, and bytes looked up then embedded."""
    inputs = info.feature_spec.keras_inputs(keras)
    buckets = 8
    bucket = keras.layers.Embedding(
        buckets, 4, embeddings_initializer=_init(seed), name="bucket_embedding"
    )(inputs["bucket"])
    colours = info.vocabulary("colour")  # the tfrecord job's, over the training split
    colour = keras.layers.StringLookup(vocabulary=colours, name="colour_lookup")(inputs["colour"])
    colour = keras.layers.Embedding(
        len(colours) + 1, 4, embeddings_initializer=_init(seed + 1), name="colour_embedding"
    )(colour)
    x = keras.layers.Concatenate(name="join")([inputs["x"], bucket, colour])
    x = keras.layers.Dense(32, "relu", kernel_initializer=_init(seed + 2), name="hidden")(x)
    logits = keras.layers.Dense(info.num_classes, kernel_initializer=_init(seed + 3), name="logits")
    return keras.Model(inputs, logits(x), name="several_inputs")


@keras.utils.register_keras_serializable(package="zoo")
class ZooNet(keras.Model):
    """A subclassed model: its own ``call``, a TF op and dropout inside."""

    def __init__(self, classes, hidden=32, seed=0, **kwargs):
        super().__init__(**kwargs)
        self.classes, self.width, self.seed = classes, hidden, seed
        self.hidden = keras.layers.Dense(hidden, "relu", kernel_initializer=_init(seed))
        self.drop = keras.layers.Dropout(0.2)
        self.out = keras.layers.Dense(classes, kernel_initializer=_init(seed + 1))

    def call(self, inputs, training=None):
        x = tf.math.tanh(inputs["x"] * 0.5)  # a TF op inside call
        return self.out(self.drop(self.hidden(x), training=training))

    def get_config(self):
        return {"classes": self.classes, "hidden": self.width, "seed": self.seed}


def subclassed(info, seed):
    """The custom model class of this file."""
    return ZooNet(info.num_classes, seed=seed, name="subclassed")


def own_precision(info, seed):
    """Its layers in the ``mixed_bfloat16`` policy it sets itself, its logits in float32."""
    policy = keras.mixed_precision.Policy("mixed_bfloat16")
    inputs = {"x": info.features["x"].keras_input("x", keras)}
    x = keras.layers.Dense(32, "relu", kernel_initializer=_init(seed), dtype=policy, name="hidden")(
        inputs["x"]
    )
    x = keras.layers.Dense(
        info.num_classes, kernel_initializer=_init(seed + 1), dtype=policy, name="logits_bf16"
    )(x)
    logits = keras.layers.Activation("linear", dtype="float32", name="logits")(x)
    return keras.Model(inputs, logits, name="own_precision")
