"""KFP component: train one run (mode x workers). Interface only; logic in distrain.steps."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from distrain.base.images import TRAINER_IMAGE

# What the task's settings pass through to the pods a cluster run launches. Each is also
# applied to this step's own pod (apply_to_task): it trains one-worker runs itself, stages
# the data on the volumes, and keeps the placement it had before passthrough existed.
PASSTHROUGHS = [
    dsl.TaskConfigPassthrough(field=field, apply_to_task=True)
    for field in (
        dsl.TaskConfigField.RESOURCES,
        dsl.TaskConfigField.KUBERNETES_NODE_SELECTOR,
        dsl.TaskConfigField.KUBERNETES_TOLERATIONS,
        dsl.TaskConfigField.KUBERNETES_AFFINITY,
        dsl.TaskConfigField.KUBERNETES_VOLUMES,
    )
]


@dsl.component(
    base_image=TRAINER_IMAGE, install_kfp_package=False, task_config_passthroughs=PASSTHROUGHS
)
def train(
    examples: Input[Dataset],
    trained: Output[Model],
    run_spec: str = "single:1",
    # TrainConfig's settings, field for field (tests/test_settings.py holds them to it).
    model: str = "mlp",
    epochs: int = 5,
    batch_size: int = 64,
    learning_rate: float = 0.001,
    scale_learning_rate: bool = True,
    warmup_epochs: float = 0.0,
    seed: int = 0,
    threads_per_worker: int = 0,
    precision: str = "auto",
    checkpoint_every_epochs: int = 1,
    checkpoint_every_steps: int = 500,
    restart: bool = False,
    validation_freq: int = 1,
    until_plateau: int = 0,
    min_exchanges: int = 0,
    on_nan: str = "stop",
    export: bool = False,
    dump_rank_weights: bool = False,
    start_timeout: int = 120,
    deadline: int = 259200,
    progress_seconds: int = 30,
    operation_timeout: int = 300,
    elastic_commit_steps: int = 10,
    controller: str = "auto",
    idle_horovod_threads: bool = False,
    # Where it trains. The cluster fields' defaults are KubernetesConfig's, as literals: KFP
    # runs this function's source alone (tests/units/test_kubernetes_defaults.py holds them).
    launcher: str = "local",
    worker_image: str = "",
    namespace: str = "",
    gpus_per_worker: int = 0,
    cpu_per_worker: str = "2",
    memory_per_worker: str = "4Gi",
    node_selector: dict = {},  # noqa: B006 (KFP parameter default, never mutated)
    tolerations: list = [],  # noqa: B006
    volume_claim: str = "distrain-data",
    mount_path: str = "/mnt/distrain",
    accelerator_type: str = "",
    accelerator_count: int = 0,
    workspace_path: str = "",
    schedule_timeout_seconds: int = 600,
    resume_from: str = "",
    task_config: dsl.TaskConfig = None,
    model_file: Input[Artifact] = None,
):
    """Trains ``run_spec`` (``MODE:WORKERS[:ps=P][:aggregate=A]``) on the examples.

    With ``launcher="kubernetes"``, runs of more than one worker run as an MPIJob (sync)
    or parameter-server Jobs (async, syncreplicas) of ``worker_image`` with the given
    resources, node selector and tolerations; the volume claim is shared with this step.
    With ``launcher="trainjob"``, sync and avg runs are a Kubeflow Trainer v2 TrainJob on
    distrain's Horovod ClusterTrainingRuntime (the parameter-server modes stay Jobs).

    What is set on the task the usual way (``set_cpu_limit``, ``set_accelerator_limit``,
    ``kubernetes.add_toleration``, ``add_node_selector``, ``mount_pvc`` ...) reaches the
    launched pods through ``task_config`` (KFP's TaskConfig passthrough), beside the
    shorthand parameters. ``workspace_path`` (``dsl.WORKSPACE_PATH_PLACEHOLDER``) puts the
    run's data and checkpoints on the pipeline's KFP workspace instead of
    ``volume_claim``; the workspace volume reaches the pods the same way. A pod that cannot
    be scheduled for ``schedule_timeout_seconds`` fails the step with the scheduler's
    message.
    ``accelerator_type`` / ``accelerator_count`` are this step's own GPUs (set on the
    task by the pipeline); they are recorded with the model. ``controller`` is sync runs'
    Horovod controller (``auto``, ``mpi`` or ``gloo``; the cluster's MPIJob is always mpi).
    ``trained`` is a directory: ``model.keras``, ``history.json``, checkpoints.
    ``model_file`` is the user's model file (as TFX's Trainer takes a ``module_file``) when
    ``model`` is ``FILE.py:FUNCTION``: it is copied into ``trained/user_model/`` and, on
    Kubernetes, shipped to every worker and parameter server through the shared volume.
    ``resume_from`` is a search's earlier rung of the same candidate (its output's path):
    the run resumes from its checkpoints (:func:`distrain.search.seed_from`).
    The training settings (``model`` ... ``idle_horovod_threads``) are
    :class:`distrain.train.config.TrainConfig`'s, with its types and defaults.

    On Kubernetes, the run's directory on the claim is keyed by ``trained``'s path, which
    KFP fixes once per task (a retry re-runs this pod with the same path; another pipeline
    run or run spec gets another): a retried step resumes from the checkpoints of the
    attempt before it. No run or task id placeholder is an input, so that the step's cache
    key stays its inputs.
    """
    import dataclasses

    from distrain.preprocess.failures import step_errors
    from distrain.steps import train as step

    passed = dataclasses.asdict(task_config) if task_config else {}
    passed.pop("env", None)  # not a passthrough of this component

    with step_errors(f"train {run_spec}"):
        history = step(
            examples.path,
            trained.path,
            run_spec,
            launcher=launcher,
            kubernetes={
                "namespace": namespace,
                "image": worker_image,
                "gpus_per_worker": gpus_per_worker,
                "cpu_per_worker": cpu_per_worker,
                "memory_per_worker": memory_per_worker,
                "node_selector": node_selector,
                "tolerations": tolerations,
                # A workspace replaces the hand-named claim: its volume comes with the task.
                "volume_claim": "" if workspace_path else volume_claim,
                "mount_path": workspace_path or mount_path,
                "schedule_timeout_seconds": schedule_timeout_seconds,
            },
            task_config=passed,
            model_file=model_file.path if model_file is not None else "",
            resume_from=resume_from,
            model=model,
            epochs=epochs,
            batch_size=batch_size,
            learning_rate=learning_rate,
            scale_learning_rate=scale_learning_rate,
            warmup_epochs=warmup_epochs,
            seed=seed,
            threads_per_worker=threads_per_worker,
            precision=precision,
            checkpoint_every_epochs=checkpoint_every_epochs,
            checkpoint_every_steps=checkpoint_every_steps,
            restart=restart,
            validation_freq=validation_freq,
            until_plateau=until_plateau,
            min_exchanges=min_exchanges,
            on_nan=on_nan,
            export=export,
            dump_rank_weights=dump_rank_weights,
            start_timeout=start_timeout,
            deadline=deadline,
            progress_seconds=progress_seconds,
            operation_timeout=operation_timeout,
            elastic_commit_steps=elastic_commit_steps,
            controller=controller,
            idle_horovod_threads=idle_horovod_threads,
        )
    trained.metadata.update(
        {
            "run": history["run"]["name"],
            "transport": history.get("controller", ""),
            "train_seconds": history["train_seconds"],
            "examples_per_second": history["examples_per_second"],
            "accelerator": f"{accelerator_count} x {accelerator_type}" if accelerator_count else "",
        }
    )
