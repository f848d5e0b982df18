"""Model builders shared by the data sets (tf-keras, Keras 2), and the lookups over them.

Each data set's module (:mod:`distrain.datasets`) names its models; the builders that
more than one model uses live here. So do the lookups of a model by the name a run's
settings give (:func:`model_spec`, :func:`find_model`, :func:`load_info`): a data set's
model, asked of the registry, or a model in the user's code (``FILE.py:FUNCTION``,
:mod:`distrain.learning.usermodel`), resolved here, above the registry, which imports no
training code.
"""

from __future__ import annotations

import os
from dataclasses import replace

from distrain import datasets
from distrain.datasets import DataSetError, ModelSpec, is_user_model
from distrain.datasets.info import DataError, DatasetInfo
from distrain.learning import usermodel


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

    The average is one :class:`~distrain.learning.layers.MeanEmbedding` layer: what an
    ``Embedding`` and a masked ``GlobalAveragePooling1D`` compute, with a gradient of one
    row per distinct id of the batch.
    """
    from distrain.learning.layers import MeanEmbedding

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


def model_spec(dataset: str, model: str) -> ModelSpec:
    """The spec of ``model`` on ``dataset`` (both checked); the user's code too.

    A model in the user's code reads the records as the data set's first own model of its
    task does (:func:`distrain.learning.usermodel.spec`).

    Raises:
        DataSetError: No such data set, or no such model for it.
        UserModelError: A malformed reference to the user's code (an unknown task).
    """
    plugin = datasets.get(dataset)
    if is_user_model(model):
        return usermodel.spec(model, plugin.models)
    return plugin.model(model)


def find_model(name: str) -> ModelSpec:
    """The spec of the model called ``name`` (model names are unique over the data sets).

    A model in the user's code is found too (read as the main records).

    Raises:
        DataSetError: No data set has such a model.
    """
    if is_user_model(name):
        return usermodel.spec(name, {})
    for dataset in map(datasets.get, datasets.names()):
        if name in dataset.models:
            return dataset.models[name]
    raise DataSetError(f"unknown model {name!r}")


def load_info(data_dir: str | os.PathLike, model: str = "") -> DatasetInfo:
    """The preprocessed data as ``model`` reads it (its view of the data set's records).

    ``model``: a model of the data set or of the user's code (default: the data set's
    default model). The feature spec is filled in when the data set gives one; a model
    in the user's code needs it.

    Raises:
        DataError: The model is the user's and the data set gives no feature spec.
    """
    info = DatasetInfo.load(data_dir)
    dataset = datasets.get(info.dataset)
    spec = model_spec(info.dataset, model or dataset.default_model)
    info = info.view(spec.view) if spec.view else info
    try:
        features = dataset.feature_spec(info)
    except DataError:
        if is_user_model(model):
            raise  # the user's model needs it; the data set's own models do not
        features = None
    return replace(info, feature_spec=features)


def _spec(info: DatasetInfo, name: str):
    return model_spec(info.dataset, name)


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
    """What the named model of the data set learns (:mod:`distrain.learning.tasks`)."""
    return _spec(info, name).task
