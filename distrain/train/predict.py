"""Running a trained model over a split of the preprocessed data."""

from __future__ import annotations

import os

import numpy as np

from distrain.train.inputs import DatasetInfo, make_dataset


def load_model(model_path: str | os.PathLike):
    """Loads a model written by the training loop (tf-keras ``.keras`` file)."""
    import tf_keras

    return tf_keras.models.load_model(str(model_path), compile=False)


def predict_split(
    model_path: str | os.PathLike, data_dir: str | os.PathLike, split: str = "test"
) -> tuple[np.ndarray, np.ndarray]:
    """Predicts the class of every example of a split.

    Args:
        model_path: The trained model file.
        data_dir: The preprocessed data directory.
        split: Which split to predict.

    Returns:
        ``(y_true, y_pred)`` as int arrays.
    """
    info = DatasetInfo.load(data_dir)
    model = load_model(model_path)
    y_true, y_pred = [], []
    for x, y in make_dataset(info, split, 1024):
        y_true.append(y.numpy())
        y_pred.append(np.argmax(model(x, training=False).numpy(), axis=-1))
    if not y_true:
        raise ValueError(f"{data_dir}: split {split!r} is empty")
    return np.concatenate(y_true), np.concatenate(y_pred)
