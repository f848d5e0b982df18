"""A model for an installed data set: softmax regression over tfrecord's numeric features.

The entry point ``example-linear`` names :data:`LINEAR`, a ``PluginModel``: the data set
it reads and its spec (how to build it, what it learns).
"""

from __future__ import annotations

import math

from distrain.datasets import ModelSpec, PluginModel
from distrain.learning.tasks import CLASSIFICATION


def linear(info, seed: int):
    """One named Input per numeric feature (the parser's dict), concatenated, then logits."""
    import tf_keras as keras

    inputs, parts = {}, []
    for name, feature in info.metadata["features"].items():
        if feature["dtype"] == "bytes":
            continue  # no numbers in it
        inputs[name] = keras.Input(shape=tuple(feature["shape"]), dtype=feature["dtype"], name=name)
        as_float = keras.layers.Rescaling(1.0)(inputs[name])  # int64 features become floats
        parts.append(keras.layers.Reshape((math.prod(feature["shape"]),))(as_float))
    x = parts[0] if len(parts) == 1 else keras.layers.Concatenate()(parts)
    init = keras.initializers.GlorotUniform(seed)
    logits = keras.layers.Dense(info.num_classes, kernel_initializer=init)(x)
    return keras.Model(inputs=inputs, outputs=logits, name="example_linear")


LINEAR = PluginModel(
    dataset="tfrecord",
    spec=ModelSpec(linear, CLASSIFICATION, stages=False, summary="softmax regression (example)"),
)
