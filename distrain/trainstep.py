"""The pipeline's training step on KFP's artifacts: what ``components/train.py`` runs.

A KFP component runs its function's source alone, so the component declares its parameters
and hands them here; the training itself is :func:`distrain.steps.train`'s.
"""

from __future__ import annotations

import dataclasses

from distrain import steps
from distrain.preprocess.failures import step_errors


def train_task(
    examples,
    trained,
    run_spec: str,
    *,
    launcher: str,
    task_config,
    model_file,
    resume_from: str,
    worker_image: str,
    workspace_path: str,
    volume_claim: str,
    mount_path: str,
    accelerator_type: str,
    accelerator_count: int,
    **given,
) -> None:
    """The training component's work (``components/train.py``): :func:`train` on its artifacts.

    Args:
        examples: The preprocessed data (a KFP ``Dataset``).
        trained: Where the run goes (a KFP ``Model``); its metadata get the run's name,
            transport, time, throughput and ``accelerator``.
        run_spec: ``MODE:WORKERS[:ps=P][:aggregate=A]``.
        launcher: As :func:`train`'s.
        task_config: The task's ``dsl.TaskConfig`` (what is set on the task the usual way:
            ``set_cpu_limit``, ``kubernetes.add_toleration``, ``mount_pvc`` ...), or None.
        model_file: The user's model file (a KFP ``Artifact``, as TFX's Trainer takes a
            ``module_file``) when ``model`` is ``FILE.py:FUNCTION``: copied into
            ``trained/user_model/`` and, on Kubernetes, shipped to every worker and
            parameter server through the shared volume; or None.
        resume_from: A search's earlier rung of the same candidate (its output's path):
            the run resumes from its checkpoints (:func:`distrain.search.seed_from`).
        worker_image: The launched pods' image.
        workspace_path: The pipeline's KFP workspace (``dsl.WORKSPACE_PATH_PLACEHOLDER``),
            which then holds the run's data and checkpoints instead of ``volume_claim``
            (its volume reaches the pods through ``task_config``); empty: none.
        volume_claim: The claim shared with the launched pods.
        mount_path: Where the claim is mounted.
        accelerator_type: This step's own GPUs (set on the task by the pipeline), recorded
            with the model, with ``accelerator_count``.
        accelerator_count: Their number.
        **given: The other cluster fields (namespace, gpus_per_worker, cpu_per_worker,
            memory_per_worker, node_selector, tolerations, schedule_timeout_seconds: a pod
            that cannot be scheduled for so long fails the step with the scheduler's
            message) and the :class:`TrainConfig` settings.

    On Kubernetes, the run's directory on the claim is keyed by ``trained``'s path, which
    KFP fixes once per task (a retry re-runs this pod with the same path; another pipeline
    run or run spec gets another): a retried step resumes from the checkpoints of the
    attempt before it. No run or task id placeholder is an input, so that the step's cache
    key stays its inputs.
    """
    passed = dataclasses.asdict(task_config) if task_config else {}
    passed.pop("env", None)  # not a passthrough of the component
    cluster = {name: given.pop(name) for name in KUBERNETES_ARGUMENTS}
    # A workspace replaces the hand-named claim: its volume comes with the task.
    cluster.update(volume_claim="" if workspace_path else volume_claim, image=worker_image)
    cluster["mount_path"] = workspace_path or mount_path
    with step_errors(f"train {run_spec}"):
        history = steps.train(
            examples.path,
            trained.path,
            run_spec,
            launcher=launcher,
            kubernetes=cluster,
            task_config=passed,
            model_file=model_file.path if model_file is not None else "",
            resume_from=resume_from,
            **given,
        )
    trained.metadata.update(
        run=history["run"]["name"],
        transport=history.get("controller", ""),
        train_seconds=history["train_seconds"],
        examples_per_second=history["examples_per_second"],
        accelerator=f"{accelerator_count} x {accelerator_type}" if accelerator_count else "",
    )


# The training component's cluster parameters passed on as KubernetesConfig fields as named.
KUBERNETES_ARGUMENTS = (
    "namespace",
    "gpus_per_worker",
    "cpu_per_worker",
    "memory_per_worker",
    "node_selector",
    "tolerations",
    "schedule_timeout_seconds",
)
