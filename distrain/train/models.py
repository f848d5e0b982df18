"""Model builders shared by the data sets (tf-keras, Keras 2), and the lookups over them.

Each data set's module (:mod:`distrain.datasets`) names its models; the builders that
more than one model uses live here.
"""

from __future__ import annotations

from distrain import datasets
from distrain.train.inputs import DatasetInfo


def keras_module():
    """``tf_keras`` (Keras 2), imported when a model is built."""
    import tf_keras

    return tf_keras


def perceptron(info: DatasetInfo, seed: int, hidden: tuple[int, ...], name: str):
    """Flattened images through ReLU layers of ``hidden`` units; outputs logits."""
    keras = keras_module()
    init = keras.initializers.GlorotUniform
    shape = tuple(info.metadata.get("image_shape", [28, 28]))
    layers = [keras.layers.Input(shape=shape), keras.layers.Flatten()]
    for i, units in enumerate(hidden):
        layers.append(keras.layers.Dense(units, "relu", kernel_initializer=init(seed + i)))
    layers.append(keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + len(hidden))))
    return keras.Sequential(layers, name=name)


def bag_of_embeddings(info: DatasetInfo, seed: int, dim: int, hidden: tuple[int, ...], name: str):
    """Averaged token embeddings (padding left out), ReLU layers of ``hidden`` units, logits.

    The average is one :class:`~distrain.train.layers.MeanEmbedding` layer: what an
    ``Embedding`` and a masked ``GlobalAveragePooling1D`` compute, with a gradient of one
    row per distinct id of the batch.
    """
    from distrain.train.layers import MeanEmbedding

    keras = keras_module()
    init = keras.initializers.GlorotUniform
    layers = [
        keras.layers.Input(shape=(None,), dtype="int32"),
        MeanEmbedding(
            info.metadata["vocab_size"],
            dim,
            embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed),
        ),
    ]
    for i, units in enumerate(hidden):
        layers.append(keras.layers.Dense(units, "relu", kernel_initializer=init(seed + 1 + i)))
    layers.append(
        keras.layers.Dense(info.num_classes, kernel_initializer=init(seed + 1 + len(hidden)))
    )
    return keras.Sequential(layers, name=name)


def _spec(info: DatasetInfo, name: str):
    return datasets.model_spec(info.dataset, name)


def models_for(dataset: str) -> list[str]:
    """The names of the models for ``dataset`` (its default first)."""
    return list(datasets.get(dataset).models)


def model_names() -> list[str]:
    """Every model's name, over all data sets, in the data sets' order."""
    return list(dict.fromkeys(m for d in datasets.names() for m in datasets.get(d).models))


def build_model(info: DatasetInfo, name: str, seed: int = 0):
    """Builds the named model for the data set.

    Raises:
        ValueError: No such model for this data set.
    """
    return _spec(info, name).build(info, seed)


def task_of(info: DatasetInfo, name: str):
    """What the named model of the data set learns (:mod:`distrain.train.tasks`)."""
    return _spec(info, name).task
