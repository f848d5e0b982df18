"""Serving does not trust the trainer: the export, scored by plain TensorFlow in a fresh process.

A Python process that imports TensorFlow alone loads the SavedModel (``tf.saved_model.load``),
feeds it every raw test record as bytes (the records of ``EXAMPLES/test/`` the evaluate step
reads) through ``serving_default``, and its classes must be the evaluate step's predictions,
one for one, and their confusion matrix the one the evaluate step reported
(docs/production.md). A user's model with custom classes, a ``Lambda``, TF ops and dropout
(``tests/fakes/constructs_model.py``) too, its module not importable where it is served.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from distrain.k8s.validate import validate_object
from distrain.learning import usermodel
from distrain.learning.models import load_info
from distrain.learning.predict import predict_split
from distrain.steps import evaluate, fetch, preprocess, train
from distrain.train.export import PARSED_SIGNATURE
from tests.conftest import ROOT

# Run by a fresh interpreter: TensorFlow and the standard library only.
SERVE = r"""
import importlib.util, json, sys
import tensorflow as tf

args = json.loads(sys.argv[1])
serve = tf.saved_model.load(args["model"]).signatures["serving_default"]
records = [r.numpy() for r in tf.data.TFRecordDataset(args["files"])]


def without_label(record):
    example = tf.train.Example.FromString(record)
    del example.features.feature[args["label"]]
    return example.SerializeToString()


ids, unlabelled, totals = [], [], []
for start in range(0, len(records), 128):
    batch = records[start : start + 128]
    out = serve(examples=tf.constant(batch))
    ids += out["class_ids"].numpy().tolist()
    totals += out["probabilities"].numpy().sum(axis=1).tolist()
    bare = serve(examples=tf.constant([without_label(r) for r in batch]))
    unlabelled += bare["class_ids"].numpy().tolist()
loaded = sorted({m.split(".")[0] for m in sys.modules} & {"distrain", "tf_keras", *args["user"]})
importable = [m for m in args["user"] if importlib.util.find_spec(m) is not None]
print(json.dumps({"ids": ids, "unlabelled": unlabelled, "totals": totals, "loaded": loaded,
                  "importable": importable}))
"""


def served(model_dir: Path, files: list[str], label: str, cwd: Path, user=()) -> dict:
    """What plain TensorFlow in a fresh process serves for ``files``' records.

    ``user``: the names of the user's module, neither loaded nor importable there.
    """
    # Nor distrain's settings: TF_USE_LEGACY_KERAS (set by ``import distrain``) has
    # TensorFlow load tf-keras as its Keras.
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "TF_USE_LEGACY_KERAS")}
    env["TF_CPP_MIN_LOG_LEVEL"] = "0"  # a model server's log: TensorFlow's warnings shown
    args = json.dumps({"model": str(model_dir), "files": files, "label": label, "user": user})
    proc = subprocess.run(
        [sys.executable, "-c", SERVE, args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    # A record that carries its label is parsed as it is, not merged with a default one
    # (TensorFlow logs "Data loss! Feature ... is present in multiple concatenated" for that).
    assert "multiple concatenated" not in proc.stderr, proc.stderr[-3000:]
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["loaded"] == [], "the serving process loaded distrain, tf-keras or user code"
    assert result["importable"] == [], "the user's module is importable where it is served"
    return result


def check_serving(
    saved_model: Path, model_file: Path, data_dir, model: str, report: dict, cwd, user=()
):
    """The export serves the evaluate step's predictions, all of them, one for one."""
    info = load_info(data_dir, model)
    files = info.split_files("test")
    result = served(saved_model, files, info.label, cwd, list(user))
    with usermodel.loading(model, info, report["history"]["config"]["seed"]):
        y_true, y_pred = predict_split(model_file, info, "test")  # what the evaluate step scores
    assert len(result["ids"]) == len(y_pred) == info.splits["test"] > 0
    assert result["ids"] == y_pred.tolist()
    assert result["unlabelled"] == result["ids"]  # a request need not carry the label
    np.testing.assert_allclose(result["totals"], 1.0, atol=1e-4)
    evaluation = report["evaluation"]
    n = len(evaluation["class_names"])
    confusion = np.zeros((n, n), dtype=int)
    np.add.at(confusion, (y_true, np.array(result["ids"])), 1)
    assert confusion.tolist() == evaluation["confusion_matrix"]
    assert evaluation["accuracy"] == pytest.approx(float(np.mean(y_true == result["ids"])))
    _check_parsed_signature(saved_model, info, result["ids"])


def _check_parsed_signature(saved_model: Path, info, ids: list[int]) -> None:
    """``serving_parsed`` on the parser's features gives the same classes."""
    import tensorflow as tf

    from distrain import datasets

    parse = datasets.get(info.dataset).parser(info)
    signature = tf.saved_model.load(str(saved_model)).signatures[PARSED_SIGNATURE]
    names = sorted(signature.structured_input_signature[1])
    got = []
    for records in tf.data.TFRecordDataset(info.split_files("test")).batch(128):
        features, _ = parse(records)
        flat = tf.nest.flatten(features)
        feed = dict(features) if isinstance(features, dict) else dict(zip(names, flat, strict=True))
        got += signature(**feed)["class_ids"].numpy().tolist()
    assert got == ids


def _one(out: Path, pattern: str) -> Path:
    found = sorted(out.rglob(pattern))
    assert len(found) == 1, f"{pattern}: {found}"
    return found[0]


@pytest.mark.slow
def test_a_gated_mnist_run_exports_what_plain_tensorflow_serves(tmp_path, mnist_raw):
    """``distrain run mnist --gate ...``: the blessed run pushed, served, its service valid."""
    from distrain.cli import main

    out = tmp_path / "out"
    argv = ["run", "mnist", "--data", str(mnist_raw), "--output", str(out), "--runs", "single:1"]
    assert main([*argv, "--epochs", "2", "--gate", "accuracy>=0.5"]) == 0
    version = out / "serving" / "distrain-mnist" / "1"
    assert (version / "saved_model.pb").is_file()
    service = __import__("yaml").safe_load((out / "serving" / "distrain-mnist.yaml").read_text())
    validate_object(service)
    assert service["spec"]["predictor"]["model"]["storageUri"] == (
        f"file://{out / 'serving' / 'distrain-mnist'}"
    )
    metadata = json.loads((version / "assets.extra" / "distrain.json").read_text())
    assert (metadata["framework"], metadata["run"], metadata["dataset"]) == (
        "tensorflow",
        "single:1",
        "mnist",
    )
    low, high = metadata["accuracy_interval"]
    assert 0.5 <= low < metadata["accuracy"] < high
    report = json.loads(_one(out / "kfp", "evaluate/report").read_text())
    assert metadata["accuracy"] == report["evaluation"]["accuracy"]
    trained = _one(out / "kfp", "train/trained/model.keras")
    examples = _one(out / "kfp", "preprocess/examples/metadata.json").parent
    check_serving(version, trained, examples, "mlp", report, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize(
    "dataset, size, model",
    [
        ("dbpedia", 1400, "fasttext"),
        ("tfrecord", 600, str(ROOT / "examples" / "my_model.py") + ":build"),
    ],
    ids=["dbpedia", "tfrecord-user-model"],
)
def test_distrain_train_export_serves_the_evaluate_steps_predictions(
    tmp_path, dataset, size, model
):
    """``distrain train --export``: DBPedia, and a user's model on a ``tfrecord`` data set."""
    fetch(dataset, "sample", tmp_path / "raw", sample_size=size, seed=3)
    preprocess(dataset, tmp_path / "raw", tmp_path / "examples", validation_fraction=0.1)
    trained = tmp_path / "trained"
    history = train(tmp_path / "examples", trained, "single:1", model=model, epochs=2, export=True)
    assert history["export"]["outputs"] == ["class_ids", "classes", "probabilities"]
    report = evaluate(tmp_path / "examples", trained)
    check_serving(
        trained / "saved_model",
        trained / "model.keras",
        tmp_path / "examples",
        model,
        report,
        tmp_path,
    )


CONSTRUCTS = ROOT / "tests" / "fakes" / "constructs_model.py"


@pytest.mark.slow
@pytest.mark.parametrize("function", ["functional", "subclassed", "with_info"])
def test_a_user_model_of_custom_classes_serves_without_the_users_file(tmp_path, function):
    """A user's model of custom classes is exported through its loader, served without it.

    Custom layers (registered or not), a ``Lambda``, TF ops, mixed precision and dropout in
    a functional model; a subclassed ``keras.Model`` (revived from its config, or built again
    by the user's function and its weights loaded).
    """
    fetch("tfrecord", "sample", tmp_path / "raw", sample_size=300, seed=5)
    preprocess("tfrecord", tmp_path / "raw", tmp_path / "examples", validation_fraction=0.1)
    # The user's file in a folder of its own: not on the serving process's path (its cwd).
    (tmp_path / "user").mkdir()
    model = f"{shutil.copy(CONSTRUCTS, tmp_path / 'user')}:{function}"
    module = usermodel.load_function(usermodel.ModelReference.parse(model)).__module__
    trained = tmp_path / "trained"
    train(tmp_path / "examples", trained, "single:1", model=model, epochs=1, export=True)
    report = evaluate(tmp_path / "examples", trained)
    user = [module, "constructs_model"]  # its name in distrain, and its file's
    check_serving(
        trained / "saved_model", trained / "model.keras", tmp_path / "examples", model, report,
        tmp_path, user,
    )  # fmt: skip


@pytest.mark.slow
def test_a_pipelines_export_step_revives_a_subclassed_user_model_in_its_own_process(tmp_path):
    """``distrain run tfrecord --model FILE.py:subclassed --gate``: served as evaluated.

    Each step is a process of its own (kfp.local): the export step's, which never built the
    model, loads the user's class from the copy of the file in the training step's output.
    """
    from distrain.cli import main

    fetch("tfrecord", "sample", tmp_path / "raw", sample_size=300, seed=5)
    (tmp_path / "user").mkdir()
    model = f"{shutil.copy(CONSTRUCTS, tmp_path / 'user')}:subclassed"
    out = tmp_path / "out"
    argv = ["run", "tfrecord", "--data", str(tmp_path / "raw"), "--output", str(out)]
    argv += ["--model", model, "--runs", "single:1", "--epochs", "1", "--gate", "accuracy>=0"]
    assert main(argv) == 0
    version = out / "serving" / "distrain-tfrecord" / "1"
    metadata = json.loads((version / "assets.extra" / "distrain.json").read_text())
    assert (metadata["run"], metadata["model"]) == ("single:1", model)
    report = json.loads(_one(out / "kfp", "evaluate/report").read_text())
    trained = _one(out / "kfp", "train/trained/model.keras")
    examples = _one(out / "kfp", "preprocess/examples/metadata.json").parent
    module = usermodel.load_function(usermodel.ModelReference.parse(model)).__module__
    check_serving(version, trained, examples, model, report, tmp_path, [module, "constructs_model"])
