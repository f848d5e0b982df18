"""The split modes refuse, before any process, a model they cannot cut, naming its layer.

A subclassed ``keras.Model`` (its own ``call`` orders its layers) crashed pipeline's check
and reached tensor's and hybrid's ranks, which failed cloning it; a functional model fed a
dict of features (the tfrecord data set's) passed pipeline's check and failed in its ranks.
"""

from __future__ import annotations

import pytest

from distrain.base.errors import ConfigError
from distrain.preprocess.failures import Failure
from distrain.train.config import TrainConfig


def _subclassed():
    import tf_keras as keras

    class Net(keras.Model):
        def __init__(self):
            super().__init__(name="net")
            self.dense = keras.layers.Dense(4)

        def call(self, x):
            return self.dense(x * 2.0)

    return Net()


def _dict_input():
    import tf_keras as keras

    x = keras.Input((8,), name="x")
    return keras.Model({"x": x}, keras.layers.Dense(4, name="logits")(x))


@pytest.mark.case("usermodel/split-refused")
@pytest.mark.parametrize(
    ("run", "model", "says"),
    [
        ("pipeline:2", _subclassed, "layer 'net' of model 'm.py:build' is a subclassed Net"),
        ("tensor:2", _subclassed, "(net (Net): a subclassed model, whose own call a column"),
        ("hybrid:2:2", _subclassed, "(net (Net): a subclassed model, whose own call a column"),
        ("pipeline:2", _dict_input, "layer 'x' of model 'm.py:build' is an input of a dict"),
    ],
)
def test_a_split_mode_refuses_a_model_it_cannot_cut_naming_its_layer(run, model, says):
    cfg = TrainConfig(data_dir="/d", output_dir="/o", run=run, model="m.py:build")
    with pytest.raises(ConfigError) as err:
        cfg.run.impl.check_model(cfg, model())
    assert says in str(err.value) and "\n" not in str(err.value), str(err.value)
    assert Failure.of("train", err.value).exit_code == 2
