"""The end of every data set's pipeline: the picked run exported and pushed (TFX's Pusher).

After the quality gate passes, ``export`` writes the run the verdict picks as a SavedModel,
a KFP ``Model`` artifact of its own with its metadata; ``push`` copies it to
``serving_dir/MODEL_NAME/VERSION`` and renders KServe's ``InferenceService`` for it
(docs/production.md). Both only when the ``export`` parameter is on (its default): the
push step under a ``dsl.If``; the export step, which fans in the runs' outputs, takes the
parameter itself (KFP 2.17 compiles no ``dsl.Collected`` input inside a condition) and
exports nothing when it is off.
"""

from kfp import dsl, kubernetes

from distrain.components.serving import export_model, push

# Where pushed models go on the shared volume when serving_dir is not given (cluster form).
SERVING_SUBDIR = "serving"


def export_and_push(
    *,
    export,
    examples,
    trained,
    reports,
    comparison,
    gate_task,
    gate,
    serving_dir,
    model_name,
    namespace,
    volume_claim,
    mount_path: str,
    cluster: bool,
):
    """Adds the export and push steps after ``gate_task``; returns the push task.

    Args:
        export: The pipeline's ``export`` parameter: nothing is exported or pushed when off.
        examples: The preprocessing step's examples.
        trained: The training steps' ``Model`` outputs (inside the runs' loop).
        reports: The evaluate steps' reports (inside the loop).
        comparison: The comparison step's output.
        gate_task: The quality gate: nothing is exported before it passes.
        gate: The gate's expression (recorded in the model's metadata).
        serving_dir: Where to push (empty: into the push step's own output).
        model_name: The served model's name (TF Serving's folder, the InferenceService).
        namespace: The InferenceService's namespace.
        volume_claim: The shared volume: the push step mounts it at ``mount_path`` in the
            cluster form, and a ``serving_dir`` on it becomes a ``pvc://`` storage URI.
        mount_path: Where the claim is mounted.
        cluster: Whether the steps run on a cluster (the volume is mounted).
    """
    exported = export_model(
        examples=examples,
        trained=dsl.Collected(trained),
        reports=dsl.Collected(reports),
        comparison=comparison,
        gate=gate,
        export=export,
    ).set_display_name("export")
    exported.after(gate_task)
    with dsl.If(export == True, name="export on"):  # noqa: E712 (a pipeline channel)
        pushed = push(
            model=exported.outputs["model"],
            serving_dir=serving_dir,
            model_name=model_name,
            namespace=namespace,
            mount_path=mount_path,
            volume_claim=volume_claim,
        ).set_display_name("push")
        # A push writes outside the pipeline's artifacts (serving_dir): a rerun pushes again,
        # never trusts a cached answer about a folder it does not own.
        pushed.set_caching_options(False)
        if cluster:
            kubernetes.mount_pvc(pushed, pvc_name=volume_claim, mount_path=mount_path)
    return pushed
