"""The constructs of a real model file (issue 48, point 1) trained in the modes, then evaluated.

``tests/fakes/constructs_model.py``: TF ops on a functional model's tensors, a ``Lambda``
layer, a registered and an unregistered custom layer, a layer in mixed precision, dropout,
and subclassed ``keras.Model``s (one whose constructor takes ``info``). Each trains in the
parameter-server modes (where a TF op's constant failed to be placed and a subclassed
model's variables were never shared) and in ``single``; the evaluation step then loads the
saved model from another folder, as another pod would, without the user's file beside it.
"""

from __future__ import annotations

import math
import shutil

import pytest

from distrain.steps import evaluate, train
from tests.conftest import ROOT

CONSTRUCTS = ROOT / "tests" / "fakes" / "constructs_model.py"

# The zoo (tests/integration/test_zoo.py) trains these constructs in every registered mode;
# here one data-parallel and one parameter-server mode take the evaluation from another
# folder, as another pod would.
MODES = ["single:1", "async:2"]


@pytest.mark.slow
@pytest.mark.parametrize("run", MODES)
@pytest.mark.parametrize("function", ["functional", "subclassed"])
def test_a_model_of_every_construct_trains_in_the_mode_and_is_evaluated_elsewhere(
    function, run, tmp_path, mnist_examples
):
    out = tmp_path / "run"
    history = train(mnist_examples, out, run, model=f"{CONSTRUCTS}:{function}", epochs=1)
    assert all(math.isfinite(e["loss"]) for e in history["epochs"])
    moved = tmp_path / "elsewhere"  # the evaluation step's view: another place, another pod
    shutil.move(out, moved)
    report = evaluate(mnist_examples, moved)
    accuracy = report["evaluation"]["accuracy"]
    assert 0.0 <= accuracy <= 1.0 and math.isfinite(report["evaluation"]["macro_f1"])
    # The same model the run trained: its profile counts its weights, the subclassed one's too.
    assert report["evaluation"]["model_profile"]["parameters"] == 50_890
