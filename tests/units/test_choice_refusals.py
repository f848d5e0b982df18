"""What a model file's loss, optimizer or class weights cannot be is refused before any process.

Each is one line naming the user's file and line, or the mode and the setting it cannot
honour: a permanent error (exit 2), raised by the training step's check of the user's
model (:func:`distrain.steps.check_user_model`).
"""

from __future__ import annotations

import pytest

from distrain.base.errors import ConfigError
from distrain.learning.optim import Adam, KerasOptimizer
from distrain.preprocess.failures import Failure
from distrain.steps import check_user_model
from distrain.train.config import TrainConfig
from distrain.train.fingerprint import settings

MODEL = (
    "import tf_keras as keras\n\n\n"
    "def build(info, seed):\n"
    "    image = keras.Input((28, 28))\n"
    "    x = keras.layers.Dense(8)(keras.layers.Flatten()(image))\n"
    "    return keras.Model(image, keras.layers.Dense(info.num_classes)(x))\n"
)
ADAMW = "keras.optimizers.AdamW(1e-3, weight_decay=0.01{})"

REFUSED = {
    "legacy": (
        "single:1",
        "def optimizer(info):\n    return keras.optimizers.legacy.Adam()\n",
        "optimizer(info) returned a tf_keras.src.optimizers.legacy.adam.Adam, not a "
        "tf_keras.optimizers.Optimizer (a legacy optimizer",
    ),
    "not-an-optimizer": (
        "async:2",
        "def optimizer(info):\n    return 0.01\n",
        "optimizer(info) returned a builtins.float, not a tf_keras.optimizers.Optimizer",
    ),
    "same-twice": (
        "async:2",
        f"ONE = {ADAMW.format('')}\n\n\ndef optimizer(info):\n    return ONE\n",
        "returned the same optimizer twice; it must make a new one on each call",
    ),
    "scalar-loss": (
        "single:1",
        "def loss(info):\n    return lambda y, z: keras.backend.mean(z)\n",
        "the loss returns shape [] for a batch of 3; distrain needs one loss per example",
    ),
    "loss-fails": (
        "sync:2",
        "def loss(info):\n    return keras.losses.BinaryCrossentropy(from_logits=True)\n",
        "the loss fails on labels of class ids and 10 logits per example",
    ),
    "loss-not-a-function": (
        "single:1",
        "loss = keras.losses.Huber()\n",
        "loss is a Huber; define a function loss(info) that returns it",
    ),
    "bad-weights": (
        "avg:2:period=8",
        "def class_weights(info):\n    return {11: 2.0}\n",
        "class_weights(info): class 11 is not one of the 10 classes",
    ),
    "global-norm-split": (
        "tensor:2",
        f"def optimizer(info):\n    return {ADAMW.format(', global_clipnorm=1.0')}\n",
        "tensor:2: the model file's optimizer sets global_clipnorm=1, a norm over the whole "
        "model; each rank holds its columns of each variable only",
    ),
    "norm-columns": (
        "hybrid:2:2",
        f"def optimizer(info):\n    return {ADAMW.format(', clipnorm=2.0')}\n",
        "hybrid:2:2: the model file's optimizer sets clipnorm=2",
    ),
    "global-norm-stages": (
        "pipeline:2",
        f"def optimizer(info):\n    return {ADAMW.format(', global_clipnorm=1.0')}\n",
        "pipeline:2:micro=4: the model file's optimizer sets global_clipnorm=1, a norm over the "
        "whole model; each rank holds its stage's variables only",
    ),
    "staleness-rate": (
        "async:2:lr=staleness",
        f"def optimizer(info):\n    return {ADAMW.format('')}\n",
        "async:2:lr=staleness: lr=staleness scales distrain's Adam's step",
    ),
    "factored": (
        "tensor:2",
        "def optimizer(info):\n    return keras.optimizers.Adafactor()\n",
        "tensor:2: the model file's optimizer Adafactor is not one whose update is value by value",
    ),
}


def _cfg(tmp_path, data, run: str, text: str, task: str = "") -> TrainConfig:
    path = tmp_path / "net.py"
    path.write_text(text)
    return TrainConfig(
        data_dir=str(data), output_dir=str(tmp_path / "o"), run=run, model=f"{path}:build{task}"
    )


@pytest.mark.case("usermodel/choices-refused")
@pytest.mark.parametrize("case", sorted(REFUSED))
def test_what_a_mode_cannot_honour_is_one_line_before_any_process(case, tmp_path, mnist_examples):
    run, body, says = REFUSED[case]
    cfg = _cfg(tmp_path, mnist_examples, run, MODEL + "\n\n" + body)
    with pytest.raises(ValueError) as err:
        check_user_model(cfg)
    line = str(err.value)
    assert says in line and "\n" not in line
    if isinstance(err.value, ConfigError):  # a mode's refusal names the mode
        assert line.startswith(run)
    else:  # the user's file and line
        assert line.startswith(f"{tmp_path / 'net.py'}:")
    assert Failure.of(f"train {run}", err.value).exit_code == 2


@pytest.mark.case("usermodel/choices-refused")
def test_a_loss_for_another_task_is_refused(tmp_path, mnist_examples):
    body = "def loss(info):\n    return keras.losses.MeanSquaredError()\n"
    cfg = _cfg(tmp_path, mnist_examples, "single:1", MODEL + "\n\n" + body, "@reconstruction")
    with pytest.raises(ValueError, match=r"net.py:\d+: loss\(info\) applies to a classifier"):
        check_user_model(cfg)


@pytest.mark.parametrize(
    "run, extra",
    [("pipeline:2", ", clipnorm=1.0"), ("tensor:2", ", clipvalue=0.5"), ("async:2", "")],
)
def test_what_a_mode_can_honour_passes(run, extra, tmp_path, mnist_examples):
    body = (
        f"def optimizer(info):\n    return {ADAMW.format(extra)}\n\n\n"
        "def loss(info):\n    return keras.losses.CategoricalCrossentropy(from_logits=True, "
        "label_smoothing=0.1)\n\n\n"
        "def class_weights(info):\n    return [1.0] * info.num_classes\n"
    )
    check_user_model(_cfg(tmp_path, mnist_examples, run, MODEL + "\n\n" + body))


def test_the_fingerprint_records_the_users_optimizer_loss_and_weights(tmp_path):
    import tf_keras as keras

    cfg = TrainConfig(data_dir=str(tmp_path), output_dir=str(tmp_path), run="single:1")

    def of(optimizer, choices=None):
        return settings(cfg, optimizer, "float32", {}, None, choices)

    # distrain's own Adam: the string every earlier checkpoint recorded.
    assert of(Adam(1e-3))["optimizer"] == "adam(beta_1=0.9, beta_2=0.999, epsilon=1e-07)"
    decayed = keras.optimizers.schedules.ExponentialDecay(0.01, 10, 0.5)
    a = of(KerasOptimizer(keras.optimizers.AdamW(decayed, weight_decay=0.01)))
    b = of(KerasOptimizer(keras.optimizers.AdamW(decayed, weight_decay=0.02)))
    assert "AdamW" in a["optimizer"] and "ExponentialDecay" in a["optimizer"]
    assert a["optimizer"] != b["optimizer"]
    chosen = of(Adam(1e-3), {"loss": "x", "class_weights": [1.0, 2.0], "optimizer": {}})
    assert chosen["loss"] == "x" and chosen["class_weights"] == [1.0, 2.0]
    assert "loss" not in of(Adam(1e-3))  # nothing chosen: no entry (old checkpoints match)
