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
    schedule_epochs: int = 0,
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
    distrain's Horovod ClusterTrainingRuntime (the parameter-server modes stay Jobs). What
    is set on the task the usual way reaches the launched pods through ``task_config``
    (KFP's TaskConfig passthrough). ``trained`` is a directory: ``model.keras``,
    ``history.json``, checkpoints. The training settings (``model`` ...
    ``idle_horovod_threads``) are :class:`distrain.train.config.TrainConfig`'s; the other
    parameters are told in :func:`distrain.trainstep.train_task`, which does the work.
    """
    arguments = dict(locals())  # every parameter, by name (this function's source runs alone)
    from distrain.trainstep import train_task

    train_task(**arguments)
