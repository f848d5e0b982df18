"""Your model with your own training: ``--model examples/my_training.py:build``.

Beside ``build``, a model file may define ``loss(info)``, ``optimizer(info)`` and
``class_weights(info)``; every mode applies them (the parameter-server modes on the
servers), and a mode that cannot is refused before any process starts
(docs/your-model.md, section 2). This one trains a perceptron on one image (MNIST's) with
AdamW, its weight decay and a cosine schedule, a label-smoothed cross-entropy, and class
weights that balance the training classes. (The file travels alone to every process: it
imports nothing of its own folder.)
"""

import tf_keras as keras


def build(info, seed):
    """A two-layer perceptron on the one image feature."""
    ((name, feature),) = info.features.items()
    image = keras.Input(shape=feature.shape, name=name)
    x = keras.layers.Flatten()(image)
    init = keras.initializers.GlorotUniform
    x = keras.layers.Dense(64, activation="relu", kernel_initializer=init(seed))(x)
    logits = keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 1))(x)
    return keras.Model(image, logits, name="my_training")


def loss(info):
    """Cross-entropy on the logits, its one-hot targets smoothed by 0.1."""
    return keras.losses.CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)


def optimizer(info):
    """AdamW with weight decay, its rate on a cosine from 3e-3 over 2,000 updates."""
    schedule = keras.optimizers.schedules.CosineDecay(3e-3, decay_steps=2000, alpha=0.1)
    return keras.optimizers.AdamW(learning_rate=schedule, weight_decay=1e-3)


def class_weights(info):
    """Each class weighted by the inverse of its share of the training examples."""
    counts = info.metadata["class_histogram"]["train"]
    total = sum(counts)
    return [total / (len(counts) * max(n, 1)) for n in counts]
