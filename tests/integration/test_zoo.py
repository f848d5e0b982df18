"""The zoo of user models as a contract test: each model in every registered mode (issue 48).

The models (tests/zoo/models.py, listed by its ``ZOO``) hold every construct a model file
can: TF ops on Keras tensors, a ``Lambda``, a custom layer and a custom model class,
batch norm, dropout, a regulariser, several inputs (float, int, bytes) and a model's own
mixed-precision policy. Each trains for one epoch on the zoo's tiny tfrecord folder
(written with ``tf.io.TFRecordWriter``, preprocessed once by the tfrecord job) in every
mode of the modes' registry (:func:`distrain.train.modes.mode_names`, the plugin modes
too): a mode added later joins the zoo by registering. Each run is checked for:

- finite weights in the saved model;
- batch norm's moving statistics moved by training (not the 0 and 1 Keras starts from);
- the saved model, reloaded through distrain's one loader of saved models
  (:func:`distrain.learning.usermodel.load_saved`, what the evaluate step uses), scoring the
  validation split as the model in memory did at the end of training (the history's last
  ``val_loss`` and ``val_accuracy``, computed in the training process before it saved).

A mode that splits the model (one with its own :meth:`~distrain.train.modes.Mode.check_model`:
tensor, pipeline, hybrid) either trains a model, and is checked as above, or refuses it
before any process starts: a permanent error (exit 2) of one line naming a layer.
"""

from __future__ import annotations

import ast
import math
import re

import numpy as np
import pytest

from distrain.base.errors import ConfigError
from distrain.learning import usermodel
from distrain.learning.models import load_info, model_spec
from distrain.preprocess.failures import Failure
from distrain.steps import train
from distrain.train.modes import Mode, mode_class, mode_names
from tests.conftest import ROOT

ZOO_FILE = ROOT / "tests" / "zoo" / "models.py"
# One epoch of batches of 16: a few steps per worker, enough to move batch norm's statistics.
SETTINGS = {"epochs": 1, "batch_size": 16}


def _zoo() -> tuple[str, ...]:
    """The file's ``ZOO``, read without importing it (TensorFlow stays out of collection)."""
    for node in ast.parse(ZOO_FILE.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", "") for t in node.targets] == ["ZOO"]:
            return tuple(ast.literal_eval(node.value))
    raise AssertionError(f"{ZOO_FILE}: no ZOO = (...) listing its models")


MODELS = _zoo()
MODES = mode_names()


def _example(mode: str) -> str:
    """The mode's own example spec (:attr:`Mode.example`), else ``NAME:N``."""
    cls = mode_class(mode)
    return cls.example or f"{mode}:{cls.fixed_workers or 2}"


def _may_refuse(mode: str) -> bool:
    """Whether the mode checks models before training (it splits them): its own check_model."""
    return mode_class(mode).check_model is not Mode.check_model


def _reference(model: str) -> str:
    return f"{ZOO_FILE}:{model}"


def _validation_scores(model, info, task) -> tuple[float, float]:
    """Loss and accuracy per label on the validation split, as the training loop counts them."""
    from distrain.learning.inputs import make_dataset

    loss = hits = count = 0.0
    for x, y in make_dataset(info, "validation", 64):
        batch_loss, batch_hits = task.sums(y, model(x, training=False))
        loss, hits = loss + float(batch_loss), hits + float(batch_hits)
        count += int(np.prod(y.shape))
    return loss / count, hits / count


def _layer_names(model) -> set[str]:
    import tf_keras as keras

    layers = [*model.layers, *model.submodules]
    if not model._is_graph_network:  # noqa: SLF001 (subclassed: the model is the layer a split sees)
        layers.append(model)
    return {layer.name for layer in layers if isinstance(layer, keras.layers.Layer)}


def _refused(err: ConfigError, run: str, reference: str, examples, out) -> None:
    """Checks a split mode's refusal: exit 2, one line, a layer of the model named."""
    import tf_keras as keras

    failure = Failure.of(f"train {run}", err)
    assert failure.exit_code == 2 and not failure.retryable, failure
    assert "\n" not in failure.line(), failure.line()
    info = load_info(examples, reference)
    built = usermodel.build(usermodel.ModelReference.parse(reference), info, 0)
    names = _layer_names(built)
    keras.backend.clear_session()
    said = failure.message.replace(reference, "")  # the path holds words of its own
    named = [n for n in names if re.search(rf"(?<![\w.]){re.escape(n)}(?![\w])", said)]
    assert "layer" in said and named, f"no layer of {sorted(names)} named: {failure.line()}"
    assert not (out / "logs").exists(), "refused after processes started"


@pytest.mark.slow
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model", MODELS)
def test_a_zoo_model_trains_in_the_mode_and_its_saved_model_scores_as_in_memory(
    model, mode, zoo_examples, tmp_path
):
    import tf_keras as keras

    run, reference, out = _example(mode), _reference(model), tmp_path / "run"
    try:
        history = train(zoo_examples, out, run, model=reference, **SETTINGS)
    except ConfigError as err:
        if "horovodrun not found" in str(err):  # as the horovod marker does
            pytest.skip(f"[horovod] {err}")
        if not _may_refuse(mode):
            raise
        _refused(err, run, reference, zoo_examples, out)
        return
    last = history["epochs"][-1]
    assert all(math.isfinite(e["loss"]) for e in history["epochs"]), history["epochs"]

    info = load_info(zoo_examples, reference)
    saved = usermodel.load_saved(out / "model.keras", reference, info)  # the one loader
    weights = saved.get_weights()
    assert weights, "the saved model has no weights"
    for variable, value in zip(saved.weights, weights, strict=True):
        assert np.isfinite(value).all(), f"{variable.name} is not finite"
    for layer in saved.submodules:
        if isinstance(layer, keras.layers.BatchNormalization):
            mean, variance = layer.moving_mean.numpy(), layer.moving_variance.numpy()
            # Never moved, they would be exactly 0 and 1 (as Keras initialises them).
            assert (mean != 0).any() and (variance != 1).any(), f"{layer.name}: never updated"

    task = model_spec(info.dataset, reference).task
    loss, accuracy = _validation_scores(saved, info, task)
    assert accuracy == pytest.approx(last["val_accuracy"], abs=1e-9), (accuracy, last)
    # In bfloat16 (8 bits of mantissa), a split model's partial sums round otherwise.
    bfloat16 = any(layer.compute_dtype == "bfloat16" for layer in saved.submodules)
    assert loss == pytest.approx(last["val_loss"], rel=1e-2 if bfloat16 else 1e-5), (loss, last)


def test_the_zoo_lists_every_model_of_its_file():
    # A model added to the file but not to ZOO would never run in the modes.
    functions = {
        node.name
        for node in ast.parse(ZOO_FILE.read_text()).body
        if isinstance(node, ast.FunctionDef) and not node.name.startswith("_")
    }
    assert set(MODELS) == functions and len(MODELS) == len(set(MODELS))
