"""A model file's constructs (issue 48, point 1): where the parameter-server graph puts them,
and how a saved model of the user's code loads in another process, from a copy of its file.

The model file is ``tests/fakes/constructs_model.py`` (TF ops, a ``Lambda``, registered and
unregistered custom layers, mixed precision, dropout, subclassed ``keras.Model``s).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from dataclasses import replace
from types import SimpleNamespace

import numpy as np
import pytest

from distrain import datasets
from distrain.datasets.info import DatasetInfo
from distrain.learning import usermodel
from distrain.train.ps.graph import PSGraph
from tests.conftest import ROOT

CONSTRUCTS = ROOT / "tests" / "fakes" / "constructs_model.py"


def _info(data_dir):
    info = DatasetInfo.load(data_dir)
    return replace(info, feature_spec=datasets.get(info.dataset).feature_spec(info))


@pytest.mark.parametrize("function", ["functional", "subclassed"])
def test_the_parameter_server_graph_places_every_op_and_variable_a_model_makes(
    function, mnist_examples
):
    import tensorflow as tf

    info = _info(mnist_examples)
    graph = SimpleNamespace(
        spec=usermodel.spec(f"{CONSTRUCTS}:{function}", {}), info=info, cfg=SimpleNamespace(seed=0)
    )
    g = tf.Graph()
    with g.as_default():
        setter = tf.compat.v1.train.replica_device_setter(
            ps_tasks=1,
            worker_device="/job:worker/task:1",
            cluster=tf.train.ClusterSpec({"ps": ["h:1"], "worker": ["h:2", "h:3"]}),
        )
        with tf.compat.v1.device(setter):
            # A TF op's constant was evaluated in tf-keras's own local session, which could
            # not place the graph's ops on /job:worker: the build failed.
            model = PSGraph.build_model(graph)
            logits = model(tf.zeros([2, 28, 28]), training=True)
    assert logits.shape == (2, 10)
    # A subclassed model's variables too: made where it was built, on the parameter server.
    assert len(model.trainable_variables) == 4
    assert {v.device for v in model.variables} == {"/job:ps/task:0"}
    placed = {op.device.split("/device:")[0] for op in g.get_operations() if op.device}
    assert placed == {"/job:ps/task:0", "/job:worker/task:1"}


def test_the_users_module_has_one_name_for_one_content_wherever_its_file_is(tmp_path):
    copies = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        copies.append(shutil.copy(CONSTRUCTS, tmp_path / folder / "constructs_model.py"))
    first, second = (usermodel.load_function(usermodel.ModelReference.parse(f"{c}:functional"))
                     for c in copies)  # fmt: skip
    assert first is second  # the same module: what a saved model's config names is found
    assert first.__module__.startswith("distrain_user_model_")
    edited = tmp_path / "a" / "constructs_model.py"
    edited.write_text(edited.read_text() + "\n# edited\n")
    third = usermodel.load_function(usermodel.ModelReference.parse(f"{edited}:functional"))
    assert third.__module__ != first.__module__


LOAD_ELSEWHERE = """
import json, sys
import numpy as np
from distrain import datasets
from distrain.learning import usermodel
from distrain.datasets.info import DatasetInfo
from dataclasses import replace

data, copy, folder = sys.argv[1:]
info = DatasetInfo.load(data)
info = replace(info, feature_spec=datasets.get(info.dataset).feature_spec(info))
batch = np.linspace(0, 1, 2 * 28 * 28, dtype="float32").reshape(2, 28, 28)
out = {}
for function in ("functional", "subclassed", "with_info"):
    model = usermodel.load_saved(f"{folder}/{function}.keras", f"{copy}:{function}", info, 0)
    out[function] = [type(model).__name__, model(batch, training=False).numpy().tolist()]
print(json.dumps(out))
"""


def test_a_saved_model_of_the_users_code_loads_in_another_process_from_a_copy(
    tmp_path, mnist_examples, cli_env
):
    info = _info(mnist_examples)
    batch = np.linspace(0, 1, 2 * 28 * 28, dtype="float32").reshape(2, 28, 28)
    expected = {}
    for function in ("functional", "subclassed", "with_info"):
        ref = usermodel.ModelReference.parse(f"{CONSTRUCTS}:{function}")
        model = usermodel.build(ref, info, 0)
        model.save(tmp_path / f"{function}.keras")
        expected[function] = model(batch, training=False).numpy()
    (tmp_path / "copy").mkdir()
    copy = shutil.copy(CONSTRUCTS, tmp_path / "copy" / "constructs_model.py")
    script = tmp_path / "load.py"
    script.write_text(LOAD_ELSEWHERE)
    done = subprocess.run(
        [sys.executable, str(script), str(mnist_examples), str(copy), str(tmp_path)],
        capture_output=True, text=True, env=cli_env, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    loaded = json.loads(done.stdout.splitlines()[-1])
    # The functional and the revivable subclassed models from their configs; the one whose
    # constructor takes info is built again by the user's function, the weights loaded in.
    assert {f: kind for f, (kind, _) in loaded.items()} == {
        "functional": "Functional", "subclassed": "Net", "with_info": "InfoNet"
    }  # fmt: skip
    for function, (_, outputs) in loaded.items():
        np.testing.assert_allclose(outputs, expected[function], rtol=1e-5, atol=1e-5)


def test_a_saved_model_that_cannot_be_loaded_is_one_line_naming_the_users_file(
    tmp_path, mnist_examples
):
    ref = f"{CONSTRUCTS}:with_info"
    model = usermodel.build(usermodel.ModelReference.parse(ref), _info(mnist_examples), 0)
    model.save(tmp_path / "m.keras")
    with pytest.raises(usermodel.UserModelError, match=rf"^{CONSTRUCTS}: its model in .*m.keras"):
        usermodel.load_saved(tmp_path / "m.keras", ref)  # no info: it cannot be built again
