"""The SavedModel a model server loads: a trained run exported with its serving signatures.

A run's ``model.keras`` needs distrain (and a user's code) to load; the export does not.
It loads the model as the evaluate step does (a model of the user's code through
:func:`distrain.learning.usermodel.load_saved`: the user's module imported, its custom layers,
``Lambda`` layers and subclassed models revived), traces the data set's own example parser
(:meth:`distrain.datasets.DataSet.parser`) and the model into TensorFlow graphs and saves
them with the weights, so plain TensorFlow (``tf.saved_model.load``), TF Serving and KServe's
TensorFlow runtime serve it without any of distrain's code or the user's file. What cannot
be traced into the graph, an op that calls back into Python (``tf.py_function``,
``tf.numpy_function``), is refused (:data:`PYTHON_OPS`): no server could run it. Two
signatures:

* ``serving_default``: ``examples``, a batch of serialized ``tf.train.Example``s in the
  form the preprocessing job wrote them (the records of ``EXAMPLES/test/`` that the
  evaluate step reads); their label may be left out.
* ``serving_parsed``: the parsed features, as the model reads them (what the parser gives).

Both return what the model's task predicts (:data:`OUTPUTS`): a classifier's
``probabilities``, ``class_ids`` and ``classes``; a regression's ``value``; a language
model's ``probabilities`` of the next character after the window, its id and the
character; any other task's raw ``outputs``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import distrain
from distrain import datasets
from distrain.base.verdict import accuracy_interval
from distrain.datasets import is_user_model
from distrain.datasets.info import DataError
from distrain.learning.lm import is_recurrent, recurrent_copy
from distrain.learning.predict import load_model
from distrain.learning.tasks import quality_of
from distrain.learning.usermodel import ModelReference, load_saved

SERVING_SIGNATURE = "serving_default"
PARSED_SIGNATURE = "serving_parsed"
# The input of the serving signature: serialized tf.train.Example protos, one per row.
EXAMPLES_INPUT = "examples"
# What each task's signatures return (the others: ``outputs``, the model's own).
OUTPUTS = {
    "classification": ("probabilities", "class_ids", "classes"),
    "regression": ("value",),
    "language_model": ("probabilities", "next_character_ids", "next_characters"),
}
# Where ``distrain train --export`` puts a run's export, in its output folder.
EXPORT_DIR = "saved_model"
# The ops that call the exporting process's Python (tf.py_function, tf.numpy_function): the
# function they call is not in the SavedModel, and a model server runs no Python.
PYTHON_OPS = ("PyFunc", "PyFuncStateless", "EagerPyFunc")


class ExportError(ValueError):
    """A trained model cannot be exported (its records or outputs are not servable)."""


def example_features(record: bytes) -> dict:
    """A serialized ``tf.train.Example``'s features: name -> ``{"kind", "length"}``.

    ``kind`` is the Example's list type (``int64_list``, ``float_list``, ``bytes_list``),
    ``length`` the number of values this record holds.
    """
    import tensorflow as tf

    example = tf.train.Example.FromString(record)
    found = {}
    for name, feature in sorted(example.features.feature.items()):
        kind = feature.WhichOneof("kind")
        found[name] = {"kind": kind, "length": len(getattr(feature, kind).value) if kind else 0}
    return found


def _default_label(record: bytes, label: str) -> bytes:
    """A serialized Example holding only ``label``, of its kind in ``record``, valued 0.

    Serialized protos concatenate as a merge: this one put before a request's record fills
    in the label when the request leaves it out, and a request's own label (parsed last)
    wins. The label is ignored: only the features reach the model.
    """
    import tensorflow as tf

    example = tf.train.Example.FromString(record)
    if not label or label not in example.features.feature:
        return b""
    kind = example.features.feature[label].WhichOneof("kind")
    value = {"int64_list": [0], "float_list": [0.0], "bytes_list": [b""]}[kind]
    feature = tf.train.Feature(**{kind: type(getattr(tf.train.Feature(), kind))(value=value)})
    return tf.train.Example(
        features=tf.train.Features(feature={label: feature})
    ).SerializeToString()


def _outputs(task: str, info, outputs) -> dict:
    """The signature's outputs from the model's, as :data:`OUTPUTS` names them."""
    import tensorflow as tf

    if task == "classification":
        names = info.class_names or [str(i) for i in range(info.num_classes)]
        probabilities = tf.nn.softmax(tf.cast(outputs, tf.float32), axis=-1)
        ids = tf.argmax(outputs, axis=-1)
        return {
            "probabilities": probabilities,
            "class_ids": ids,
            "classes": tf.gather(tf.constant(names), ids),
        }
    if task == "regression":
        value = tf.cast(outputs, tf.float32)
        if value.shape.rank == 2 and value.shape[-1] == 1:
            value = tf.squeeze(value, -1)
        return {"value": value}
    if task == "language_model":
        vocabulary = [str(c) for c in info.metadata["vocabulary"]]
        last = tf.cast(outputs[:, -1], tf.float32)  # after the window's last character
        ids = tf.argmax(last, axis=-1)
        return {
            "probabilities": tf.nn.softmax(last, axis=-1),
            "next_character_ids": ids,
            "next_characters": tf.gather(tf.constant(vocabulary), ids),
        }
    flat = tf.nest.flatten(outputs)
    return (
        {"outputs": flat[0]} if len(flat) == 1 else {f"outputs_{i}": t for i, t in enumerate(flat)}
    )


def _input_names(info, features) -> list[str]:
    """The parsed signature's input names: the feature spec's, else ``inputs[_i]``."""
    import tensorflow as tf

    flat = tf.nest.flatten(features)
    if isinstance(features, dict):
        return sorted(features)  # tf.nest flattens a dict in sorted key order
    try:
        names = list(info.features)
    except DataError:
        names = []
    if len(names) == len(flat):
        return names
    return ["inputs"] if len(flat) == 1 else [f"inputs_{i}" for i in range(len(flat))]


def python_ops(functions) -> list[str]:
    """The ops of traced functions (and of every function they call) that call Python.

    Returns:
        ``"NAME (TYPE)"`` of each op of :data:`PYTHON_OPS`, its name scoped by the layer.
    """
    found = set()
    for function in functions:
        graph = function.graph.as_graph_def()
        nodes = [*graph.node, *(n for f in graph.library.function for n in f.node_def)]
        found.update(f"{n.name} ({n.op})" for n in nodes if n.op in PYTHON_OPS)
    return sorted(found)


def export_saved_model(
    model_path: str | os.PathLike,
    info,
    task: str,
    out: str | os.PathLike,
    reference: str = "",
    seed: int = 0,
) -> dict:
    """Exports a trained model as a SavedModel with the two serving signatures.

    Args:
        model_path: The run's ``model.keras``.
        info: The data it was trained on, as the model reads it
            (:func:`distrain.learning.models.load_info`).
        task: The model's task name (:data:`distrain.learning.tasks.TASKS`).
        out: The SavedModel's directory (must not exist).
        reference: The run's model (its name or reference): a model of the user's code is loaded
            with its module imported (:func:`distrain.learning.usermodel.load_saved`; empty:
            :func:`distrain.learning.predict.load_model`).
        seed: The run's seed (a user's model that is built again to load its weights).

    Returns:
        The input spec: ``{"signatures", "examples", "parsed", "outputs"}``: the signature
        names, the Example features a test record holds (name -> kind and length; the
        label optional), the parsed inputs (name -> dtype and shape) and the output names.

    Raises:
        ExportError: The test split has no record to learn the Example's form from, or
            the model calls Python at serving time (:data:`PYTHON_OPS`; nothing written).
        UserModelError: The user's model does not load (its file named).
    """
    import tensorflow as tf

    out = Path(out)
    if out.exists():
        raise ExportError(f"{out}: already exists; an export goes into a new folder")
    record = _first_record(info)
    dataset = datasets.get(info.dataset)
    parse = dataset.serving_parser(info)
    label = info.label if info.feature_spec is not None else ""
    default = None
    if parse is None:  # a plugin's parser needs the label: merge a default one before each
        parse = dataset.parser(info)
        default = tf.constant(_default_label(record, label))
    model, where = _serving_model(model_path, reference, info, seed)

    holder, signatures, specs = _signatures(model, parse, default, task, info)
    calls_python = python_ops(signatures.values())
    if calls_python:
        raise ExportError(
            f"{where}: the model calls Python at serving time ({', '.join(calls_python)}: "
            "tf.py_function or tf.numpy_function), which a SavedModel cannot hold and no "
            "model server runs; write that part with TensorFlow ops to export it"
        )
    outputs = sorted(signatures[SERVING_SIGNATURE].structured_outputs)
    tf.saved_model.save(holder, str(out), signatures=signatures)
    spec = {
        "signatures": {
            SERVING_SIGNATURE: f"{EXAMPLES_INPUT}: serialized tf.train.Example, string [batch]",
            PARSED_SIGNATURE: "the parsed features",
        },
        "examples": example_features(record),
        "label": label,
        "parsed": {s.name: {"dtype": s.dtype.name, "shape": s.shape.as_list()} for s in specs},
        "outputs": outputs,
    }
    (out / "assets.extra").mkdir(exist_ok=True)  # TF Serving's folder for extra files
    (out / "assets.extra" / "input_spec.json").write_text(json.dumps(spec, indent=2) + "\n")
    return spec


def _signatures(model, parse, default, task: str, info):
    """The two serving functions, on a module that holds the weights they read.

    Returns:
        The module to save, the signatures by name, and the parsed inputs' specs.
    """
    import tensorflow as tf

    def predict(features):
        return _outputs(task, info, model(features, training=False))

    # No AutoGraph: the functions have no Python control flow on tensors to convert.
    @tf.function(
        input_signature=[tf.TensorSpec([None], tf.string, name=EXAMPLES_INPUT)], autograph=False
    )
    def serve_examples(examples):
        features, _ = parse(examples if default is None else tf.strings.join([default, examples]))
        return predict(features)

    traced = tf.function(parse, autograph=False).get_concrete_function(
        tf.TensorSpec([None], tf.string)
    )
    features = traced.structured_outputs[0]
    names = _input_names(info, features)
    specs = [
        tf.TensorSpec([None, *t.shape[1:]], t.dtype, name=n)
        for n, t in zip(names, tf.nest.flatten(features), strict=True)
    ]

    def from_parsed(*tensors):
        return predict(tf.nest.pack_sequence_as(features, list(tensors)))

    serve_parsed = tf.function(from_parsed, input_signature=specs, autograph=False)
    holder = tf.Module()
    holder.weights = list(model.variables)  # what the signatures read, saved with them
    holder.serve_examples, holder.serve_parsed = serve_examples, serve_parsed
    signatures = {
        SERVING_SIGNATURE: serve_examples.get_concrete_function(),
        PARSED_SIGNATURE: serve_parsed.get_concrete_function(),
    }
    return holder, signatures, specs


def _first_record(info) -> bytes:
    """The first record of the test split (else validation): the form every request takes."""
    import tensorflow as tf

    split = "test" if "test" in info.files else "validation"
    first = next(iter(tf.data.TFRecordDataset(info.split_files(split)).take(1)), None)
    if first is None:
        raise ExportError(f"{info.data_dir}: split {split!r} has no record to export with")
    return first.numpy()


def _serving_model(model_path, reference: str, info, seed: int):
    """The trained model as it serves (a recurrent one stateless, in float32).

    Returns:
        The model, and where its code is (the run's model file, or the user's file or
        module) for a message.
    """
    where = str(model_path)
    if is_user_model(reference):
        where = ModelReference.parse(reference).where  # the user's file, or module
        model = load_saved(model_path, reference, info, seed)
    else:
        model = load_model(model_path)
    if is_recurrent(model):  # stateless, in float32: each request read from a zero state
        model = recurrent_copy(model, None, stateful=False, float32=True)
    return model, where


def pick_run(comparison: dict, reports: list[dict]) -> tuple[dict, str]:
    """The report of the run a pipeline exports, and why that one.

    The verdict's winner (:func:`distrain.base.verdict.decide`); with none, the cheapest of the
    runs it could not tell apart; with neither, the best point estimate (``best``, what a
    gate's ``best.`` scope reads). Of that run's repeats, the one of the best quality its
    task declares (the lowest seed on a tie).

    Raises:
        ExportError: No report of the picked run.
    """
    verdict = comparison.get("verdict") or {}
    if verdict.get("winner"):
        name, why = verdict["winner"], "the verdict's winner"
    elif verdict.get("cheapest"):
        name, why = verdict["cheapest"], "the cheapest of the runs the verdict could not separate"
    else:
        name, why = comparison.get("best"), "the best point estimate (the verdict named no run)"
    mine = [r for r in reports if r.get("history") and r["run"].get("name") == name]
    if not mine:
        raise ExportError(f"no trained run {name!r} among the {len(reports)} reports to export")
    key, lower = quality_of(mine[0]["evaluation"])

    def rank(report):
        value = report["evaluation"].get(key)
        value = float("inf") if value is None else (value if lower else -value)
        return value, int((report["history"].get("config") or {}).get("seed", 0))

    best = min(mine, key=rank)
    if len(mine) > 1:
        why += f", its repeat of the best {key} of {len(mine)}"
    return best, why


def model_metadata(report: dict, comparison: dict, why: str, spec: dict, gate: str = "") -> dict:
    """What a deployment step reads of an export: framework, run, verdict, scores, inputs."""
    import tensorflow as tf

    run, evaluation, history = report["run"], report["evaluation"], report["history"]
    config = history.get("config") or {}
    row = next((r for r in comparison.get("rows", []) if r.get("name") == run["name"]), {})
    key, _ = quality_of(evaluation)
    accuracy, n = evaluation.get("accuracy"), evaluation.get("num_examples")
    interval = accuracy_interval(accuracy, n)
    return {
        "framework": "tensorflow",
        "framework_version": tf.__version__,
        "format": "saved_model",
        "distrain_version": distrain.__version__,
        "dataset": run.get("dataset") or config.get("dataset", ""),
        "model": run.get("model", ""),
        "task": evaluation.get("task", ""),
        "run": run["name"],
        "run_spec": run.get("spec", ""),
        "mode": run.get("mode", ""),
        "workers": run.get("workers"),
        "seed": config.get("seed"),
        "picked_by": why,
        "verdict": (comparison.get("verdict") or {}).get("reason", ""),
        "gate": gate,
        "accuracy": accuracy,
        "accuracy_interval": list(interval) if interval else None,
        "test_examples": n,
        "quality": key,
        "quality_value": evaluation.get(key),
        "run_median": {key: row.get(key), "interval": row.get(f"{key}_interval")},
        "input_spec": spec,
    }
