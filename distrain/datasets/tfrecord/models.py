"""The tfrecord data set's default model: an MLP over the concatenated numeric features."""

from __future__ import annotations

import math

from distrain.datasets import DataSetError
from distrain.learning.models import keras_module


def mlp(info, seed: int, hidden: tuple[int, ...] = (64, 64)):
    """Each numeric feature flattened and cast to float32, concatenated, ReLU layers, logits.

    A functional model with one named ``Input`` per feature, so it takes the parser's
    dict. Bytes features have no numbers to learn from: the model refuses them (a model
    of your own, ``--model FILE.py:FUNCTION``, can embed them).

    Raises:
        DataSetError: A feature is bytes, or the label is a float (no classes to output).
    """
    if info.metadata.get("label_dtype") == "float32":
        raise DataSetError(
            f"the tfrecord default model (feature-mlp) is a classifier; the label "
            f"{info.metadata.get('label')!r} is float32, a regression target: give a model "
            "of your own with one output, --model FILE.py:FUNCTION@regression"
        )
    keras = keras_module()
    init = keras.initializers.GlorotUniform
    features = info.metadata["features"]
    text = sorted(name for name, f in features.items() if f["dtype"] == "bytes")
    if text:
        raise DataSetError(
            f"the tfrecord default model (feature-mlp) reads numeric features only; "
            f"{', '.join(text)} is bytes: give a model of your own (--model FILE.py:FUNCTION)"
        )
    inputs, parts = {}, []
    for name, f in features.items():
        dtype = "float32" if f["dtype"] == "float32" else "int64"
        inputs[name] = keras.Input(shape=tuple(f["shape"]), dtype=dtype, name=name)
        as_float = keras.layers.Rescaling(1.0, name=f"{name}_float")(inputs[name])  # a cast
        parts.append(keras.layers.Reshape((math.prod(f["shape"]),), name=f"{name}_flat")(as_float))
    x = parts[0] if len(parts) == 1 else keras.layers.Concatenate(name="features")(parts)
    for i, units in enumerate(hidden):
        x = keras.layers.Dense(units, "relu", kernel_initializer=init(seed + i))(x)
    logits = keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + len(hidden)))(x)
    return keras.Model(inputs=inputs, outputs=logits, name="tfrecord_mlp")
