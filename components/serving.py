"""KFP components: export the picked run as a SavedModel, and push it. Interface only.

Logic in :func:`distrain.steps.export` and :func:`distrain.steps.push`.
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from distrain.base.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def export_model(
    examples: Input[Dataset],
    trained: Input[list[Model]],
    reports: Input[list[Artifact]],
    comparison: Input[Artifact],
    model: Output[Model],
    gate: str = "",
    export: bool = True,
):
    """Exports the run the comparison's verdict picks as a SavedModel (``model``).

    With ``export`` off, nothing: ``model`` is an empty folder whose metadata says so
    (the pipeline's push step does not run then).

    ``serving_default`` takes serialized ``tf.train.Example``s as the preprocessing job
    wrote them; ``serving_parsed`` the parsed features (docs/production.md). ``model``'s
    metadata: framework and version, data set, run and mode, why it was picked, the
    verdict, its accuracy with the 95 % interval, the input spec.
    """
    import json
    import os

    from distrain.preprocess.failures import step_errors
    from distrain.steps import export as step

    if not export:
        os.makedirs(model.path, exist_ok=True)
        model.metadata["exported"] = False
        print("export is off: nothing exported", flush=True)
        return
    runs = []
    for artifact in reports:
        with open(artifact.path) as f:
            runs.append(json.load(f))
    with step_errors("export"):
        with open(f"{comparison.path}/comparison.json") as f:
            compared = json.load(f)
        metadata = step(
            examples.path, [t.path for t in trained], runs, compared, model.path, gate=gate
        )
    model.metadata.update(metadata)
    print(f"exported {metadata['run']} ({metadata['picked_by']}) to {model.path}", flush=True)


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def push(
    model: Input[Model],
    pushed: Output[Model],
    inference_service: Output[Artifact],
    serving_dir: str = "",
    model_name: str = "",
    namespace: str = "",
    storage_uri: str = "",
    mount_path: str = "",
    volume_claim: str = "",
):
    """Copies the blessed model to ``serving_dir/MODEL_NAME/VERSION`` (as TFX's Pusher).

    Empty ``serving_dir``: into ``pushed`` itself. ``inference_service`` is KServe's
    ``InferenceService`` (TensorFlow runtime) serving it from ``storage_uri`` (default:
    ``pvc://VOLUME_CLAIM/...`` for a folder under ``mount_path``, else ``file://...``),
    checked against KServe's CRD schema; ``pushed`` says where and which version.
    """
    import os

    import yaml

    from distrain.preprocess.failures import step_errors
    from distrain.steps import push as step

    where = serving_dir or pushed.path
    os.makedirs(where, exist_ok=True)
    with step_errors("push"):
        result = step(
            model.path,
            where,
            model_name or model.metadata.get("dataset", "model"),
            namespace=namespace,
            uri=storage_uri,
            mount_path=mount_path,
            claim=volume_claim,
            annotations={
                "distrain.io/run": model.metadata.get("run", ""),
                "distrain.io/picked-by": model.metadata.get("picked_by", ""),
            },
        )
    with open(inference_service.path, "w") as f:
        yaml.safe_dump(result["inference_service"], f, sort_keys=False)
    inference_service.metadata["storage_uri"] = result["storage_uri"]
    pushed.metadata.update({k: result[k] for k in ("version", "path", "storage_uri")})
    pushed.metadata.update({k: model.metadata.get(k) for k in ("run", "dataset", "accuracy")})
    print(f"pushed version {result['version']} to {result['path']}", flush=True)
