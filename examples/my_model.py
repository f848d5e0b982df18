"""Your model for distrain: ``distrain run mnist --model examples/my_model.py:build``.

distrain calls ``build(info, seed)`` in every training process and trains what it
returns in each mode it compares. Return an *uncompiled* tf-keras model whose output is
the logits, one per class (``info.num_classes`` wide); distrain owns the distribution, and
the loss and the optimizer unless the file gives its own (``my_training.py``).

``info`` says what the model reads:

* ``info.features``: the input features by name, each with ``.dtype`` (``float32``,
  ``int64``, ``int32`` or ``bytes``) and ``.shape`` (without the batch axis);
* ``info.label``: the label's name (not among the features);
* ``info.num_classes``: how many classes;
* ``info.feature_spec.keras_inputs(keras)``: ``Input`` layers for the features, a dict
  keyed by name when the data set gives the model a dict (a ``tfrecord`` data set), or the
  one feature's ``Input`` (MNIST's image).

This file's ``build`` fits any data set whose features are numbers: it flattens each
numeric feature, joins them, and puts two dense layers on top. ``cnn`` is for images.
"""

import tf_keras as keras


def build(info, seed):
    """A two-layer perceptron over all the numeric features, whatever their names."""
    inputs = info.feature_spec.keras_inputs(keras)
    named = inputs if isinstance(inputs, dict) else {"input": inputs}
    parts = []
    for name, tensor in named.items():
        if tensor.dtype == "string":
            continue  # bytes features need a model of their own (e.g. a text vectorizer)
        x = keras.layers.Flatten(name=f"{name}_flat")(tensor)
        if tensor.dtype != "float32":
            x = keras.layers.Rescaling(1.0, name=f"{name}_float")(x)  # numbers as floats
        parts.append(x)
    x = parts[0] if len(parts) == 1 else keras.layers.Concatenate()(parts)
    init = keras.initializers.GlorotUniform
    x = keras.layers.Dense(128, activation="relu", kernel_initializer=init(seed))(x)
    logits = keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 1))(x)
    return keras.Model(inputs, logits, name="my_model")


def cnn(info, seed):
    """A small convolutional network for one image feature (MNIST's)."""
    ((name, feature),) = info.features.items()
    image = keras.Input(shape=feature.shape, name=name)
    x = keras.layers.Reshape((*feature.shape, 1))(image)
    init = keras.initializers.GlorotUniform
    x = keras.layers.Conv2D(16, 3, activation="relu", kernel_initializer=init(seed))(x)
    x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.Flatten()(x)
    logits = keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 1))(x)
    return keras.Model(image, logits, name="my_cnn")
