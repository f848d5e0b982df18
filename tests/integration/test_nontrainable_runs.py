"""A run of a model with batch norm saves moving statistics that its steps moved."""

import numpy as np
import pytest

from distrain.steps import train
from tests.rules.test_nontrainable import MNIST_MODEL


@pytest.mark.slow
def test_an_async_run_saves_the_moving_statistics_its_workers_moved(mnist_examples, tmp_path):
    import tf_keras as keras

    path = tmp_path / "bn_model.py"
    path.write_text(MNIST_MODEL)
    out = tmp_path / "async"
    train(mnist_examples, out, "async:2", model=f"{path}:build", epochs=1)
    saved = keras.models.load_model(out / "model.keras", compile=False)
    bn = saved.get_layer("bn")
    mean, variance = bn.moving_mean.numpy(), bn.moving_variance.numpy()
    assert np.isfinite(mean).all() and np.isfinite(variance).all()
    # Never moved, they would be exactly 0 and 1 (as keras initialises them).
    assert (mean != 0).all() and (variance != 1).all()
