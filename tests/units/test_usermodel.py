"""A model from the user's code: references, the checks of its code, and how it is shipped."""

import sys
import time

import pytest

from distrain import datasets
from distrain.base.errors import ConfigError
from distrain.datasets.info import DataError, Feature, FeatureSpec
from distrain.k8s.config import KubernetesConfig
from distrain.k8s.objects import build_objects
from distrain.k8s.train import shipped_model
from distrain.k8s.validate import ManifestError, validate_all, validate_model_shipping
from distrain.learning import usermodel
from distrain.learning.models import find_model, load_info, model_spec
from distrain.learning.tasks import CLASSIFICATION, RECONSTRUCTION
from distrain.learning.usermodel import ModelReference, UserModelError
from distrain.preprocess.failures import Failure
from distrain.steps import StepError, check_parameters, check_user_model
from distrain.train.config import TrainConfig
from tests.conftest import ROOT

EXAMPLE = ROOT / "examples" / "my_model.py"


@pytest.mark.parametrize(
    "text, where, function, task",
    [
        ("my_model.py:build", "my_model.py", "build", "classification"),
        ("/abs/dir/m.py:net@reconstruction", "/abs/dir/m.py", "net", "reconstruction"),
        ("team.models.mnist:build", "team.models.mnist", "build", "classification"),
        ("my_model:build@language_model", "my_model", "build", "language_model"),
    ],
)
def test_references_name_a_file_or_a_module_a_function_and_a_task(text, where, function, task):
    ref = ModelReference.parse(text)
    assert (ref.where, ref.function, ref.task) == (where, function, task)
    assert ref.is_file == where.endswith(".py")
    assert str(ref) == text.replace("@classification", "")
    assert datasets.is_user_model(text)


@pytest.mark.parametrize("name", ["mlp", "fc-x2", "cnn-seed", "vgg11"])
def test_built_in_model_names_are_not_references(name):
    assert not datasets.is_user_model(name)
    assert find_model(name).summary  # still found as before


def test_an_unknown_task_is_refused_naming_the_tasks():
    with pytest.raises(
        UserModelError, match="unknown task 'ranking'; expected one of .*regression"
    ):
        ModelReference.parse("m.py:build@ranking")
    assert ModelReference.parse("m.py:build@regression").task == "regression"


def test_a_reference_is_a_valid_model_setting_and_takes_its_tasks_view():
    cfg = TrainConfig(data_dir="-", output_dir="-", model="m.py:build")
    assert cfg.model == "m.py:build"
    with pytest.raises(ConfigError, match="unknown model 'resnet'"):
        TrainConfig(data_dir="-", output_dir="-", model="resnet")
    assert model_spec("mnist", "m.py:build").task is CLASSIFICATION
    autoencoder = model_spec("mnist", "m.py:build@reconstruction")
    # It reads the records as the data set's own autoencoder does.
    assert autoencoder.task is RECONSTRUCTION and autoencoder.view == "reconstruction"


def test_feature_spec_reads_the_features_json_form_and_leaves_the_label_out():
    spec = FeatureSpec.from_json(
        {
            "features": {
                "x": {"dtype": "float32", "shape": [3]},
                "words": {"dtype": "bytes", "shape": []},
                "y": {"dtype": "int64", "shape": []},
            },
            "label": "y",
        }
    )
    assert spec.features == {"x": Feature("float32", (3,)), "words": Feature("bytes", ())}
    assert spec.label == "y" and spec.as_dict
    assert FeatureSpec.from_json(spec.to_json()) == spec
    with pytest.raises(DataError, match="f.json: feature 'x': expected dtype"):
        FeatureSpec.from_json({"features": {"x": {"dtype": "float64"}}, "label": "y"}, "f.json")


def test_the_user_model_gets_the_data_sets_feature_spec(mnist_examples):
    info = load_info(mnist_examples, "m.py:build")
    assert info.features == {"image": Feature("float32", (28, 28))}
    assert (info.label, info.num_classes, info.feature_spec.as_dict) == ("label", 10, False)


def test_the_example_builds_on_mnist_and_on_a_dict_of_features(mnist_examples):
    import dataclasses

    import numpy as np

    info = load_info(mnist_examples, f"{EXAMPLE}:build")
    for function in ("build", "cnn"):
        model = usermodel.build(ModelReference.parse(f"{EXAMPLE}:{function}"), info, 0)
        assert model(np.zeros((2, 28, 28), "float32")).shape == (2, 10)
    spec = FeatureSpec.from_json(
        {
            "features": {
                "pixels": {"dtype": "float32", "shape": [4, 2]},
                "count": {"dtype": "int64", "shape": []},
            },
            "label": "y",
        }
    )
    tabular = dataclasses.replace(info, num_classes=3, feature_spec=spec)
    model = usermodel.build(ModelReference.parse(f"{EXAMPLE}:build"), tabular, 0)
    out = model({"pixels": np.zeros((5, 4, 2), "float32"), "count": np.ones((5,), "int64")})
    assert out.shape == (5, 3)


BAD_CODE = {
    # name: (source, the line the message names, what it says)
    "syntax": ("import math\ndef build(info, seed)\n    return 1\n", 2, "SyntaxError"),
    "import": ("import no_such_module_xyz\n", 1, "ModuleNotFoundError: No module named"),
    "raises": ("def build(info, seed):\n    x = 1\n    return info.nope\n", 3, "AttributeError"),
    "not-a-model": ("\n\ndef build(info, seed):\n    return 'model'\n", 3, "not a tf-keras model"),
    "keras3": (
        "import keras\n\ndef build(info, seed):\n"
        "    return keras.Sequential([keras.Input((28, 28)), keras.layers.Dense(10)])\n",
        3,
        "Keras 3 model: build it with tf_keras",
    ),
    "width": (
        "import tf_keras as keras\n\n\ndef build(info, seed):\n    return keras.Sequential(\n"
        "        [keras.Input((28, 28)), keras.layers.Flatten(), keras.layers.Dense(7)]\n    )\n",
        4,
        "outputs 7 logits, the data set has 10 classes",
    ),
    "inside-keras": (
        "import tf_keras as keras\n\n\ndef build(info, seed):\n    return keras.layers.Dense(-3)\n",
        5,
        "ValueError",
    ),
    "no-function": ("def other(info, seed):\n    pass\n", None, "no function 'build'"),
}


@pytest.mark.parametrize("case", sorted(BAD_CODE))
def test_bad_user_code_is_one_permanent_line_naming_its_file_and_line(
    case, tmp_path, mnist_examples
):
    source, line, says = BAD_CODE[case]
    path = tmp_path / f"{case.replace('-', '_')}.py"
    path.write_text(source)
    cfg = TrainConfig(
        data_dir=str(mnist_examples), output_dir=str(tmp_path / "o"), model=f"{path}:build"
    )
    start = time.perf_counter()
    with pytest.raises(UserModelError) as err:
        check_user_model(cfg)
    assert time.perf_counter() - start < 20
    message = str(err.value)
    assert "\n" not in message and says in message
    assert message.startswith(f"{path}:{line}: " if line else f"{path}: ")
    failure = Failure.of("train single:1", err.value)
    assert (failure.retryable, failure.exit_code) == (False, 2)


def test_a_missing_model_file_is_named():
    with pytest.raises(UserModelError, match="^nowhere/m.py: model file not found$"):
        usermodel.check("nowhere/m.py:build")


# The user's code ending the process: (source, the line named, what the line says).
EXITS = {
    "sys-exit-at-import": ("import sys\n\nsys.exit(0)\n", 3, "sys.exit(0) called"),
    "systemexit-message": ('x = 1\nraise SystemExit("bye")\n', 2, "SystemExit: bye"),
    "interrupt-in-build": (
        "def build(info, seed):\n    raise KeyboardInterrupt\n",
        2,
        "KeyboardInterrupt raised",
    ),
    "os-exit-in-build": (
        "import os\n\n\ndef build(info, seed):\n    os._exit(0)\n",
        5,
        "os._exit(0) called: it would end the process with no result (in build)",
    ),
}


@pytest.mark.case("usermodel/exit")
@pytest.mark.parametrize("case", sorted(EXITS))
def test_the_users_code_cannot_end_the_process_it_is_one_permanent_line(
    case, tmp_path, monkeypatch
):
    import os

    source, line, says = EXITS[case]
    path = tmp_path / f"{case.replace('-', '_')}.py"
    path.write_text(source)

    def real_exit(code):  # were it called, pytest itself would end, with code 0
        raise AssertionError(f"the user's code reached os._exit({code})")

    monkeypatch.setattr(os, "_exit", real_exit)
    try:
        usermodel.check(f"{path}:build", info=object())
    except UserModelError as err:
        message = str(err)
        failure = Failure.of("train single:1", err)
    except BaseException as err:  # noqa: BLE001 (an exit or interrupt that escaped)
        pytest.fail(f"escaped the guard: {err!r}")
    else:
        pytest.fail("no error")
    assert os._exit is real_exit  # put back once the user's code has returned
    assert message.startswith(f"{path}:{line}: ") and says in message, message
    assert "\n" not in message
    assert (failure.retryable, failure.exit_code) == (False, 2)


@pytest.mark.case("usermodel/error-permanent", "integrity/errors")
def test_an_error_raised_through_the_users_code_is_permanent_and_names_it(tmp_path):
    from distrain.preprocess.failures import classify

    path = tmp_path / "custom_layer.py"
    path.write_text(
        "def build(info, seed):\n    return info\n\n\n"
        "def call(x):\n    return x + 'oops'\n\n\n"
        "def fetch(x):\n    raise ConnectionResetError('the server went away')\n"
    )
    usermodel.load_function(ModelReference.parse(f"{path}:build"))  # what registers the file
    module = next(m for m in sys.modules.values() if getattr(m, "__file__", "") == str(path))
    with pytest.raises(TypeError) as err:
        module.call(1)  # as a layer's call runs later, while training: not under the guard
    assert classify(err.value) is False  # the same code raises it again: never retried
    failure = Failure.of("train single:1", err.value)
    assert (failure.retryable, failure.exit_code) == (False, 2)
    assert failure.line() == (
        f"distrain: train single:1 failed: {path}:6: TypeError: unsupported operand type(s) "
        "for +: 'int' and 'str'"
    )
    # The same error outside the user's code is what it was (unknown: transient) ...
    assert classify(TypeError("unsupported operand")) is True
    # ... and a network error stays transient, even on its way through the user's code.
    with pytest.raises(ConnectionResetError) as err:
        module.fetch(1)
    assert classify(err.value) is True


@pytest.mark.case("usermodel/exit")
def test_a_step_fails_when_the_users_code_exits_later_and_passes_other_exits_on(
    tmp_path, monkeypatch, capsys
):
    import json

    from distrain.preprocess.failures import ERROR_FILE_ENV, step_errors

    path = tmp_path / "later.py"
    path.write_text(
        "import sys\n\n\ndef build(info, seed):\n    pass\n\n\ndef call(x):\n    sys.exit(0)\n"
    )
    usermodel.load_function(ModelReference.parse(f"{path}:build"))
    module = next(m for m in sys.modules.values() if getattr(m, "__file__", "") == str(path))
    monkeypatch.setenv(ERROR_FILE_ENV, str(tmp_path / "error.json"))
    with pytest.raises(SystemExit) as ended, step_errors("evaluate"):
        module.call(1)  # as a layer's call, outside the loader's guard
    assert ended.value.code == 2
    line = (
        f"distrain: evaluate failed: {path}:9: SystemExit: the code ended the process "
        "(exit code 0) and produced no result"
    )
    assert capsys.readouterr().err.strip().splitlines()[-1] == line
    assert json.loads((tmp_path / "error.json").read_text())["retryable"] is False
    with pytest.raises(SystemExit) as ended, step_errors("evaluate"):
        sys.exit(0)  # distrain's own exit (not the user's code): as it was
    assert ended.value.code == 0


def test_the_parameter_check_compiles_the_model_file_without_importing_it(tmp_path):
    bad = tmp_path / "m.py"
    bad.write_text("import tensorflow_not_in_this_image\n\ndef build(info, seed)\n    pass\n")
    with pytest.raises(StepError, match=rf"{bad}:3: SyntaxError"):
        check_parameters("mnist", "sample", "single:1", model="m.py:build", model_file=bad)
    bad.write_text("import tensorflow_not_in_this_image\n\ndef build(info, seed):\n    pass\n")
    # Its imports are the training image's business: the check step runs the Beam image.
    check_parameters("mnist", "sample", "single:1", model="m.py:build", model_file=bad)
    with pytest.raises(StepError, match="gone.py: model file not found"):
        check_parameters("mnist", "sample", "single:1", model=f"{tmp_path}/gone.py:build")


def test_staging_copies_the_file_and_points_the_reference_at_the_copy(tmp_path):
    artifact = tmp_path / "artifact"  # a KFP artifact's path has no .py suffix
    artifact.write_text("def build(info, seed):\n    pass\n")
    staged = usermodel.stage("my_model.py:build@reconstruction", tmp_path / "run", artifact)
    assert staged == f"{tmp_path}/run/my_model.py:build@reconstruction"
    assert (tmp_path / "run" / "my_model.py").read_text() == artifact.read_text()
    with pytest.raises(UserModelError, match="names a module"):
        usermodel.stage("pkg.mod:build", tmp_path)


K8S = KubernetesConfig.from_params(namespace="team-a", image="registry.example.com/me/trainer:1")


@pytest.mark.parametrize(
    "run", ["sync:2", "async:2:ps=1", "avg:2:period=8", "ssp:2:staleness=2", "easgd:2:tau=4"]
)
def test_cluster_objects_validate_with_the_model_shipped_to_the_claim(run, tmp_path):
    model = shipped_model(f"{tmp_path}/my_model.py:build", tmp_path / "runs" / "key")
    assert model == f"{tmp_path}/runs/key/model/my_model.py:build"
    mount = str(tmp_path)
    k = KubernetesConfig.from_params(namespace="team-a", mount_path=mount)
    cfg = TrainConfig(
        data_dir=f"{mount}/runs/key/data",
        output_dir=f"{mount}/runs/key/output",
        run=run,
        model=model,
    )
    objects = build_objects(cfg, k, "r1", f"{mount}/runs/key/output/train_config.json")
    assert validate_all(objects) == len(objects)
    validate_model_shipping(objects, model)  # every container mounts the claim it is on
    with pytest.raises(ManifestError, match="mounts no volume holding the model file /elsewhere"):
        validate_model_shipping(objects, "/elsewhere/my_model.py:build")


@pytest.mark.parametrize("run", ["sync:2", "async:2:ps=1"])
def test_cluster_objects_validate_with_the_model_in_the_image(run):
    model = "team_models.mnist:build"
    assert shipped_model(model, ROOT) == model  # in the image: nothing to ship
    cfg = TrainConfig(
        data_dir="/mnt/distrain/d", output_dir="/mnt/distrain/o", run=run, model=model
    )
    objects = build_objects(cfg, K8S, "r1", "/mnt/distrain/o/train_config.json")
    assert validate_all(objects) == len(objects)
    validate_model_shipping(objects, model)
    for obj in objects:
        for container in _all_containers(obj):
            assert container["image"] == K8S.image
    next(_all_containers(objects[-1]))["image"] = "other:1"
    with pytest.raises(ManifestError, match="run different images"):
        validate_model_shipping(objects, model)


def _all_containers(node):
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "containers":
                yield from value
            else:
                yield from _all_containers(value)
    elif isinstance(node, list):
        for value in node:
            yield from _all_containers(value)


def test_a_cluster_run_ships_the_model_file_to_the_claim_for_every_pod(tmp_path):
    import io
    import json
    from pathlib import Path

    from distrain.k8s.train import train_on_cluster
    from tests.fakes.k8s import FakeCluster, _api

    data = tmp_path / "examples"
    data.mkdir()
    (data / "metadata.json").write_text("{}")
    mine = tmp_path / "home" / "my_model.py"
    mine.parent.mkdir()
    mine.write_text("def build(info, seed):\n    pass\n")
    cfg = TrainConfig(
        data_dir=str(data), output_dir=str(tmp_path / "t"), run="sync:2", model=f"{mine}:build"
    )
    k = KubernetesConfig(namespace="ns", mount_path=str(tmp_path / "claim"), poll_seconds=0.01)
    seen = {}

    def script(c, poll):
        (mpijob,) = [o for (kind, _), o in c.objects.items() if kind == "MPIJob"]
        launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        config = json.loads(Path(launcher["containers"][0]["args"][-1]).read_text())
        seen["model"] = config["model"]
        seen["text"] = Path(config["model"].rsplit(":", 1)[0]).read_text()
        (Path(config["output_dir"]) / "history.json").write_text("{}")
        c.mpijob_conditions = [{"type": "Succeeded", "status": "True"}]

    cluster = FakeCluster(script)
    cluster.run_name = "r7"
    train_on_cluster(cfg, k, _api(cluster), name="r7", out=io.StringIO())
    # The pods read the copy on the claim, not the user's home directory.
    assert seen["model"].startswith(str(tmp_path / "claim" / "runs")) and seen["model"].endswith(
        "/model/my_model.py:build"
    )
    assert seen["text"] == mine.read_text()


SPLIT_REFUSALS = {
    # run: (the model's layers after Flatten, what the one line says)
    "pipeline:2": (
        "h = keras.layers.Dense(784, name='hidden')(x)\n"
        "    x = keras.layers.Add(name='skip')([x, h])",
        "layer 'skip' of model",
    ),
    "tensor:2": (
        "x = keras.layers.Reshape((28, 28))(x)\n    x = keras.layers.GRU(8, name='gru')(x)",
        "gru: ",
    ),
}


@pytest.mark.parametrize("run", sorted(SPLIT_REFUSALS))
def test_a_split_mode_refuses_a_layer_it_cannot_split_before_any_process(
    run, tmp_path, mnist_examples
):
    body, says = SPLIT_REFUSALS[run]
    path = tmp_path / "net.py"
    path.write_text(
        "import tf_keras as keras\n\n\ndef build(info, seed):\n"
        "    image = keras.Input((28, 28))\n    x = keras.layers.Flatten()(image)\n"
        f"    {body}\n    return keras.Model(image, keras.layers.Dense(10)(x))\n"
    )
    cfg = TrainConfig(
        data_dir=str(mnist_examples), output_dir=str(tmp_path / "o"), run=run, model=f"{path}:build"
    )
    with pytest.raises(ConfigError) as err:
        check_user_model(cfg)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert Failure.of("train", err.value).exit_code == 2


def test_a_chain_of_layers_is_cut_into_stages_whatever_its_form(mnist_examples):
    from distrain.train.modes.pipeline import chain_breaker

    info = load_info(mnist_examples, f"{EXAMPLE}:build")
    for function in ("build", "cnn"):  # functional models of one chain
        model = usermodel.build(ModelReference.parse(f"{EXAMPLE}:{function}"), info, 0)
        assert chain_breaker(model) == ""


def test_a_later_step_finds_the_copy_that_travels_with_the_trained_model(tmp_path):
    copy = tmp_path / "trained" / "user_model" / "my_model.py"
    copy.parent.mkdir(parents=True)
    copy.write_text("def build(info, seed):\n    pass\n")
    gone = "/pod/of/the/training/step/my_model.py:build@reconstruction"
    assert usermodel.relocate(gone, copy.parent) == f"{copy}:build@reconstruction"
    here = f"{EXAMPLE}:build"  # still where the run read it: kept
    assert usermodel.relocate(here, copy.parent) == here
    assert usermodel.relocate("pkg.mod:build", copy.parent) == "pkg.mod:build"
    assert usermodel.relocate("mlp", copy.parent) == "mlp"
