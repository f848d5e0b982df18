"""Push and the InferenceService (docs/production.md): versions, names, the schema; the pick."""

from __future__ import annotations

import copy
import json

import pytest
import yaml

from distrain.base.errors import ConfigError
from distrain.k8s.serving import inference_service, push_version, storage_uri, versions
from distrain.k8s.validate import ManifestError, trainer_schema, validate_object
from distrain.steps import push
from distrain.train.export import ExportError, pick_run
from tests.conftest import ROOT


def _service() -> dict:
    uri = "pvc://distrain-data/serving/distrain-mnist"
    return inference_service("distrain-mnist", "team", uri, annotations={"a": 1})


def test_the_inference_service_is_kserves_tensorflow_predictor_and_validates():
    obj = _service()
    validate_object(obj)
    assert obj["apiVersion"] == "serving.kserve.io/v1beta1"
    assert obj["spec"]["predictor"]["model"] == {
        "modelFormat": {"name": "tensorflow"},
        "storageUri": "pvc://distrain-data/serving/distrain-mnist",
    }
    assert obj["metadata"]["namespace"] == "team"
    assert "namespace" not in inference_service("m", "", "s3://b/m")["metadata"]


@pytest.mark.case("serving/refused")
@pytest.mark.parametrize(
    "change, message",
    [
        (lambda o: o["spec"]["predictor"]["model"].update(storageURI="x"), "storageURI"),
        (lambda o: o["spec"]["predictor"].update(minReplicas="two"), "is not of type 'integer'"),
        (lambda o: o["spec"]["predictor"]["model"].pop("modelFormat") and None, ""),
        (lambda o: o["spec"].update(router={}), "'router' was unexpected"),
        (lambda o: o.update(apiVersion="serving.kserve.io/v1alpha1"), "apiVersion must be"),
        (lambda o: o["metadata"].update(name="Distrain_MNIST"), "metadata.name must be"),
    ],
)
def test_kserves_schema_refuses_what_the_api_server_would(change, message):
    obj = copy.deepcopy(_service())
    change(obj)
    if not message:  # modelFormat is optional in KServe's schema: still valid
        validate_object(obj)
        return
    with pytest.raises(ManifestError, match=message):
        validate_object(obj)


def test_the_vendored_schema_says_where_it_came_from_and_what_was_trimmed():
    schema = trainer_schema("InferenceService")
    comment = schema["$comment"]
    assert "KServe v0.20.0" in comment and "serving.kserve.io_inferenceservices.yaml" in comment
    assert "transformer" in comment and "status" in comment
    spec = schema["properties"]["spec"]
    assert spec["required"] == ["predictor"] and spec["additionalProperties"] is False
    assert "tensorflow" in spec["properties"]["predictor"]["properties"]


@pytest.mark.case("serving/refused")
def test_names_and_uris_kserve_refuses_are_refused_before_rendering():
    with pytest.raises(ConfigError, match="model name 'MNIST'"):
        inference_service("MNIST", "", "pvc://c/m")
    with pytest.raises(ConfigError, match="storage URI 'ftp://h/m'"):
        inference_service("mnist", "", "ftp://h/m")
    assert storage_uri("/mnt/distrain/serving/m", "/mnt/distrain", "data") == "pvc://data/serving/m"
    assert storage_uri("/srv/models/m", "/mnt/distrain", "data") == "file:///srv/models/m"


def _saved_model(path):
    path.mkdir(parents=True)
    (path / "saved_model.pb").write_bytes(b"graph")
    (path / "variables").mkdir()
    (path / "variables" / "variables.index").write_bytes(b"weights")
    return path


@pytest.mark.case("serving/versions")
def test_push_adds_the_next_version_whole_and_renders_the_service(tmp_path):
    model = _saved_model(tmp_path / "export")
    serving = tmp_path / "serving"
    first = push(model, serving, "distrain-mnist", namespace="team")
    second = push(model, serving, "distrain-mnist", uri="gs://bucket/distrain-mnist")
    assert (first["version"], second["version"]) == (1, 2)
    assert versions(serving / "distrain-mnist") == [1, 2]
    assert (serving / "distrain-mnist" / "2" / "variables" / "variables.index").read_bytes() == (
        b"weights"
    )
    assert [p.name for p in (serving / "distrain-mnist").iterdir() if p.name.startswith(".")] == []
    assert first["storage_uri"] == f"file://{serving}/distrain-mnist"
    written = yaml.safe_load((serving / "distrain-mnist.yaml").read_text())
    assert written == second["inference_service"]
    assert written["spec"]["predictor"]["model"]["storageUri"] == "gs://bucket/distrain-mnist"
    validate_object(written)


@pytest.mark.case("serving/refused")
def test_push_refuses_a_folder_without_a_saved_model_and_a_bad_name(tmp_path):
    with pytest.raises(ConfigError, match="no saved_model.pb"):
        push_version(tmp_path, tmp_path / "serving", "m")
    model = _saved_model(tmp_path / "export")
    with pytest.raises(ConfigError, match="model name 'my_model'"):
        push(model, tmp_path / "serving", "my_model")
    assert not (tmp_path / "serving").exists()  # refused before anything was copied


def _report(name, seed, accuracy):
    return {
        "run": {"name": name, "mode": name.split(":")[0], "workers": 1},
        "history": {"config": {"seed": seed}},
        "evaluation": {"task": "classification", "accuracy": accuracy, "num_examples": 300},
    }


REPORTS = [
    _report("single:1", 0, 0.90),
    _report("sync:2", 0, 0.93),
    _report("sync:2", 1, 0.95),
    _report("async:2", 0, 0.91),
    {"run": {"name": "majority"}, "history": None, "evaluation": {"accuracy": 0.1}},
]


@pytest.mark.parametrize(
    "verdict, best, run, seed, why",
    [
        ({"winner": "sync:2"}, "async:2", "sync:2", 1, "the verdict's winner, its repeat of"),
        ({"winner": None, "cheapest": "single:1"}, "sync:2", "single:1", 0, "the cheapest"),
        ({"winner": None, "cheapest": None}, "async:2", "async:2", 0, "the best point estimate"),
    ],
)
def test_the_export_picks_the_verdicts_run_and_its_best_repeat(verdict, best, run, seed, why):
    report, reason = pick_run({"verdict": verdict, "best": best}, REPORTS)
    assert (report["run"]["name"], report["history"]["config"]["seed"]) == (run, seed)
    assert reason.startswith(why)


def test_the_export_refuses_a_pick_without_a_trained_run():
    with pytest.raises(ExportError, match="no trained run 'majority'"):
        pick_run({"verdict": {}, "best": "majority"}, json.loads(json.dumps(REPORTS)))


PYTHON_MODEL = """
import numpy as np
import tensorflow as tf
import tf_keras as keras


def _tanh(t):
    y = tf.numpy_function(np.tanh, [t], tf.float32)
    y.set_shape(t.shape)
    return y


def build(info, seed):
    inputs = info.feature_spec.keras_inputs(keras)
    x = keras.layers.Flatten()(inputs)
    x = keras.layers.Lambda(_tanh, name="numpy_tanh")(x)
    return keras.Model(inputs, keras.layers.Dense(info.num_classes)(x))
"""


@pytest.mark.parametrize(
    "function", ["functional", pytest.param("build", marks=pytest.mark.case("serving/python-op"))]
)
def test_the_export_loads_a_users_classes_and_refuses_a_model_that_calls_python(
    tmp_path, mnist_examples, function
):
    """A custom-class model exports through the user's loader; a Python op is refused."""
    from distrain.learning import usermodel
    from distrain.learning.models import load_info
    from distrain.train.export import export_saved_model

    source = tmp_path / "user.py"
    if function == "build":
        source.write_text(PYTHON_MODEL)
    else:
        source.write_text((ROOT / "tests" / "fakes" / "constructs_model.py").read_text())
    reference = f"{source}:{function}"
    info = load_info(mnist_examples, reference)
    usermodel.build(usermodel.ModelReference.parse(reference), info, 0).save(tmp_path / "m.keras")
    out = tmp_path / "saved_model"
    if function == "functional":  # a Lambda and custom layers: loaded as the user's code
        spec = export_saved_model(tmp_path / "m.keras", info, "classification", out, reference)
        assert spec["outputs"] == ["class_ids", "classes", "probabilities"]
        assert (out / "saved_model.pb").is_file()
        return
    # tf.numpy_function's Python is not in the SavedModel: no server could run it.
    with pytest.raises(ExportError, match=rf"^{source}: the model calls Python at serving time "
                       r"\(.*numpy_tanh/PyFunc \(PyFunc\)"):  # fmt: skip
        export_saved_model(tmp_path / "m.keras", info, "classification", out, reference)
    assert not out.exists()
