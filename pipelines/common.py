"""One pipeline shape for every data set.

fetch data -> preprocess (Beam) -> for each run spec, in parallel: train -> evaluate;
the data set's baseline -> compare (fan-in with ``dsl.Collected``) -> quality gate ->
export the run the verdict picks -> push it (:mod:`distrain.pipelines.serving`). A
pipeline compiled with a learning-rate search (``tune``) searches each run spec's rate
first (:mod:`distrain.pipelines.tuning`) and trains it at the rate chosen.
"""

import dataclasses
import functools
import inspect
from types import SimpleNamespace

from kfp import dsl, kubernetes

from distrain.analysis.tuning import DEFAULT_ETA, DEFAULT_GRID
from distrain.base.images import image
from distrain.components.baseline import baseline
from distrain.components.compare import compare
from distrain.components.data import check_parameters, fetch_data, preprocess
from distrain.components.evaluate import evaluate
from distrain.components.gate import quality_gate
from distrain.components.train import train
from distrain.datasets import PipelineDefaults
from distrain.k8s.config import KubernetesConfig
from distrain.pipelines.serving import SERVING_SUBDIR, export_and_push
from distrain.pipelines.tuning import search

# Where the shared volume claim is mounted in training steps and in the pods they launch.
# The cluster parameters' defaults are KubernetesConfig's, declared there once
# (tests/units/test_kubernetes_defaults.py holds every place that repeats them).
MOUNT_PATH = KubernetesConfig.mount_path
# The display name of the gate step, which `distrain submit` looks for in a failed run.
GATE_TASK = "quality gate"


@dataclasses.dataclass(frozen=True)
class _Shape:
    """What a pipeline's compile-time arguments decide (:func:`build_pipeline`'s)."""

    defaults: PipelineDefaults
    parallelism: int
    cluster: bool
    workspace_size: str
    search_rates: bool
    tune_grid: int
    tune_eta: int
    tune_parallelism: int


def build_pipeline(
    defaults: PipelineDefaults,
    parallelism: int = 0,
    gpu: bool = False,
    cluster: bool = True,
    launcher: str = "local",
    workspace_size: str = "",
    tune: str = "",
    tune_grid: int = DEFAULT_GRID,
    tune_eta: int = DEFAULT_ETA,
    tune_parallelism: int = 0,
):
    """Builds the ``@dsl.pipeline`` function of a data set.

    Images default to :mod:`distrain.base.images` (registry from ``DISTRAIN_IMAGE_REGISTRY`` at
    compile time) and can be changed per run; the cluster placement of training steps comes
    from parameters (:func:`_place_training`).

    Args:
        defaults: The data set and its parameter defaults.
        parallelism: How many training runs may execute at once (0: no limit). Local runs
            use 1 so that runs do not compete for the same cores and their times compare.
        gpu: Default to the GPU trainer image and one GPU per training step and worker.
        cluster: Set the cluster placement of training steps (accelerators, node selector,
            tolerations, volume). ``kfp.local`` runs leave it out: its runner cannot
            resolve an accelerator count given as a parameter inside a ParallelFor.
        launcher: The default of the ``launcher`` parameter (``local``, ``kubernetes`` or
            ``trainjob``).
        workspace_size: With a size (``100Gi``), the pipeline gets a KFP workspace
            (``dsl.PipelineConfig(workspace=...)``, a PVC for the run's steps) and training
            keeps its data and checkpoints there instead of on ``volume_claim``.
        tune: With a range (``learning_rate=1e-4..1e-1``), the pipeline searches each run
            spec's learning rate first (:mod:`distrain.pipelines.tuning`); the range is
            the default of its ``tune`` parameter, beside ``tune_epochs`` (the last rung's
            epochs, 0: ``epochs``). Empty: no search, and no such parameters.
        tune_grid: Rates in the search's grid (log-spaced over the range).
        tune_eta: The search's halving factor.
        tune_parallelism: How many of a rung's candidates may train at once (0: no limit).
    """
    shape = _Shape(
        defaults,
        parallelism,
        cluster,
        workspace_size,
        bool(tune),
        tune_grid,
        tune_eta,
        tune_parallelism,
    )
    pipeline = _pipeline_function(shape, gpu=gpu, launcher=launcher, tune=tune)
    pipeline.__doc__ = f"{defaults.description} Returns the comparison directory."
    config = None
    if workspace_size:
        config = dsl.PipelineConfig(workspace=dsl.WorkspaceConfig(size=workspace_size))
    return dsl.pipeline(
        name=f"distrain-{defaults.dataset}",
        description=defaults.description,
        pipeline_config=config,
    )(_drop_parameters(pipeline, shape))


def _pipeline_function(shape: _Shape, gpu: bool, launcher: str, tune: str):
    """The pipeline's function: its parameters, with the data set's defaults, and its steps.

    ``beam_args`` are the preprocessing step's Beam pipeline options, passed through
    (``["--runner=DataflowRunner", "--project=P", ...]``; none: the local runner in the
    step's container).

    ``model_file`` is the user's model file (an optional input artifact, as TFX's Trainer
    takes a ``module_file``) for a ``model`` of ``FILE.py:FUNCTION``: the parameter check
    compiles it, each training step trains from its copy (docs/your-model.md). The local
    form (``cluster=False``) has no such input: kfp.local takes no input artifacts.
    """
    d = shape.defaults
    trainer_image_default = image("trainer-gpu" if gpu else "trainer")
    gpus_default = 1 if gpu else KubernetesConfig.gpus_per_worker

    def pipeline(
        source: str = "sample",
        runs: list[str] = d.runs,
        model: str = d.model,
        epochs: int = d.epochs,
        until_plateau: int = d.until_plateau,
        batch_size: int = d.batch_size,
        learning_rate: float = d.learning_rate,
        seed: int = 0,
        repeats: int = 1,
        plan: str = "",
        sample_size: int = d.sample_size,
        validation_fraction: float = 0.1,
        target_accuracy: float = d.target_accuracy,
        beam_args: list[str] = [],  # noqa: B006 (pipeline parameter default)
        beam_image: str = image("beam"),
        trainer_image: str = trainer_image_default,
        launcher: str = launcher,
        controller: str = "auto",
        namespace: str = KubernetesConfig.namespace,
        schedule_timeout_seconds: int = KubernetesConfig.schedule_timeout_seconds,
        accelerator_type: str = "nvidia.com/gpu",
        accelerator_count: int = gpus_default,
        gpus_per_worker: int = gpus_default,
        cpu_per_worker: str = KubernetesConfig.cpu_per_worker,
        memory_per_worker: str = KubernetesConfig.memory_per_worker,
        node_selector: dict = {},  # noqa: B006 (pipeline parameter default)
        tolerations: list = [],  # noqa: B006
        volume_claim: str = KubernetesConfig.volume_claim,
        gate: str = "",
        export: bool = d.export,
        serving_dir: str = f"{MOUNT_PATH}/{SERVING_SUBDIR}" if shape.cluster else "",
        model_name: str = f"distrain-{d.dataset}",
        tune: str = tune,
        tune_epochs: int = 0,
        model_file: dsl.Input[dsl.Artifact] = None,
    ) -> dsl.Artifact:
        # The parameters (KFP's channels) by name; `shape` comes along, as the body names it.
        return _steps(shape, SimpleNamespace(**locals()))

    return pipeline


def _steps(shape: _Shape, p: SimpleNamespace):
    """The pipeline's steps, given its parameters ``p``; returns the comparison."""
    shipped = {} if p.model_file is None else {"model_file": p.model_file}
    checked, examples, base = _data_steps(shape.defaults.dataset, p, shipped)
    shared = _training_arguments(shape, p, shipped)
    prepare = functools.partial(_prepare_training, shape, p)
    runs_to_train, searched = checked.output, {}
    if shape.search_rates:
        runs_to_train, record, start = search(
            examples=examples,
            runs=p.runs,
            tune=p.tune,
            tune_epochs=p.tune_epochs,
            epochs=p.epochs,
            seed=p.seed,
            learning_rate=p.learning_rate,
            repeats=p.repeats,
            grid=shape.tune_grid,
            eta=shape.tune_eta,
            parallelism=shape.tune_parallelism,
            train_args=shared,
            prepare=prepare,
        )
        start.after(checked)
        searched = {"tuning": record}
    # Each run spec `repeats` times, with seeds seed, seed + 1, ...: the comparison
    # gives medians and intervals over them (distrain.base.verdict); with a search, each at
    # its chosen rate.
    with dsl.ParallelFor(runs_to_train, parallelism=shape.parallelism, name="runs") as training:
        trained = train(
            examples=examples,
            run_spec=training.run_spec,
            epochs=p.epochs,
            until_plateau=p.until_plateau,
            learning_rate=training.learning_rate if shape.search_rates else p.learning_rate,
            seed=training.seed,
            **shared,
        ).set_display_name("train")
        prepare(trained)
        scored = evaluate(examples=examples, trained=trained.outputs["trained"]).set_display_name(
            "evaluate"
        )
        if shape.cluster:  # it rebuilds the model: a user's module is in the trainer image
            scored.set_container_image(p.trainer_image)
    return _compare_and_publish(shape, p, base, examples, trained, scored, searched)


def _data_steps(dataset: str, p: SimpleNamespace, shipped: dict):
    """Checks the parameters, fetches and preprocesses the data, scores the baseline.

    Returns:
        The check's task (its output: the trainings to run), the examples, the baseline.
    """
    checked = check_parameters(
        dataset=dataset,
        source=p.source,
        runs=p.runs,
        model=p.model,
        epochs=p.epochs,
        until_plateau=p.until_plateau,
        batch_size=p.batch_size,
        learning_rate=p.learning_rate,
        validation_fraction=p.validation_fraction,
        launcher=p.launcher,
        controller=p.controller,
        repeats=p.repeats,
        seed=p.seed,
        plan=p.plan,
        export=p.export,
        **shipped,
    ).set_display_name("check parameters")
    checked.set_container_image(p.beam_image)
    data = fetch_data(
        dataset=dataset, source=p.source, sample_size=p.sample_size, seed=p.seed
    ).set_display_name("fetch data")
    data.set_container_image(p.beam_image).after(checked)
    _retry(data)
    prep = preprocess(
        raw=data.outputs["raw"],
        dataset=dataset,
        validation_fraction=p.validation_fraction,
        seed=p.seed,
        beam_args=p.beam_args,
    ).set_display_name("preprocess (Beam)")
    prep.set_container_image(p.beam_image)
    _retry(prep)
    examples = prep.outputs["examples"]
    base = baseline(examples=examples, model=p.model).set_display_name("baseline")
    return checked, examples, base


def _training_arguments(shape: _Shape, p: SimpleNamespace, shipped: dict) -> dict:
    """The training step's arguments that are the same for every run."""
    return dict(
        model=p.model,
        batch_size=p.batch_size,
        launcher=p.launcher,
        controller=p.controller,
        worker_image=p.trainer_image,
        namespace=p.namespace,
        gpus_per_worker=p.gpus_per_worker,
        cpu_per_worker=p.cpu_per_worker,
        memory_per_worker=p.memory_per_worker,
        node_selector=p.node_selector,
        tolerations=p.tolerations,
        volume_claim=p.volume_claim,
        mount_path=MOUNT_PATH,
        # Also passed as arguments: KFP 2.17 does not route channels that only
        # set_accelerator_* uses into a ParallelFor's inputs.
        accelerator_type=p.accelerator_type,
        accelerator_count=p.accelerator_count,
        workspace_path=dsl.WORKSPACE_PATH_PLACEHOLDER if shape.workspace_size else "",
        schedule_timeout_seconds=p.schedule_timeout_seconds,
        **shipped,
    )


def _prepare_training(shape: _Shape, p: SimpleNamespace, task) -> None:
    """Retries, no cache, and (on a cluster) the placement of a training step."""
    _retry(task)
    # A cached time is not a measurement: training always runs.
    task.set_caching_options(enable_caching=False)
    if shape.cluster:
        _place_training(
            task,
            p.trainer_image,
            p.accelerator_type,
            p.accelerator_count,
            p.node_selector,
            p.tolerations,
            "" if shape.workspace_size else p.volume_claim,
        )


def _compare_and_publish(shape, p, base, examples, trained, scored, searched):
    """Compares the runs, applies the gate, exports and pushes the pick; the comparison."""
    result = compare(
        reports=dsl.Collected(scored.outputs["report"]),
        baseline=base.outputs["report"],
        target_accuracy=p.target_accuracy,
        plan=p.plan,
        **searched,
    ).set_display_name("compare")
    gated = quality_gate(comparison=result.outputs["comparison"], gate=p.gate)
    export_and_push(
        export=p.export,
        examples=examples,
        trained=trained.outputs["trained"],
        reports=scored.outputs["report"],
        comparison=result.outputs["comparison"],
        gate_task=gated.set_display_name(GATE_TASK),
        gate=p.gate,
        serving_dir=p.serving_dir,
        model_name=p.model_name,
        namespace=p.namespace,
        volume_claim=p.volume_claim,
        mount_path=MOUNT_PATH,
        cluster=shape.cluster,
    )
    return result.outputs["comparison"]


def _drop_parameters(pipeline, shape: _Shape):
    """The pipeline's function without the parameters its shape leaves out.

    kfp.local takes no input artifact, not even an optional one left out: a local run's
    steps read the user's model file where it is (its path in ``model``). A pipeline
    without a search has no search parameters.
    """
    dropped = ({"model_file"} if not shape.cluster else set()) | (
        set() if shape.search_rates else {"tune", "tune_epochs"}
    )
    if not dropped:
        return pipeline
    sig = inspect.signature(pipeline)
    kept = [p for p in sig.parameters.values() if p.name not in dropped]
    return _by_name(pipeline, sig.replace(parameters=kept))


def _by_name(function, signature: inspect.Signature):
    """``function`` as KFP sees it with ``signature``, its arguments passed on by name.

    KFP calls a pipeline's function with its inputs in the signature's order: with
    parameters dropped from the middle, a positional call would hand each later input to
    the parameter before it.
    """
    names = list(signature.parameters)

    @functools.wraps(function)
    def called(*args, **kwargs):
        return function(**dict(zip(names, args, strict=False)), **kwargs)

    called.__signature__ = signature
    return called


# Steps that read data or train retry on failure (a preempted node, a lost pod), waiting
# 30 s, then 60 s, ... up to 10 minutes. Caching stays on for the data steps: with the
# same inputs, a rerun after a failure reuses them. Training steps turn it off (a cached
# time is not a measurement).
RETRIES = 2
RETRY_BACKOFF = "30s"
RETRY_BACKOFF_FACTOR = 2.0
RETRY_BACKOFF_MAX = "600s"


def _retry(task):
    task.set_retry(
        num_retries=RETRIES,
        backoff_duration=RETRY_BACKOFF,
        backoff_factor=RETRY_BACKOFF_FACTOR,
        backoff_max_duration=RETRY_BACKOFF_MAX,
    )
    task.set_caching_options(enable_caching=True)
    return task


def _place_training(
    task, trainer_image, accelerator_type, accelerator_count, node_selector, tolerations, claim
):
    """Image, GPUs, node pool and shared volume of a training step (ignored by kfp.local).

    They come from the pipeline's parameters: ``accelerator_type`` / ``accelerator_count``,
    ``node_selector`` and ``tolerations`` go on every training step (kfp-kubernetes), and
    with ``launcher="kubernetes"`` the pods a training step launches get
    ``gpus_per_worker``, the same selector and tolerations. What a user sets on the
    training task (resources, accelerators, tolerations, node selector, affinity,
    volumes) reaches those pods too, through the component's TaskConfig passthrough; the
    parameters are the shorthand for the same.

    Set the usual way, they pass through to the pods the step launches (TaskConfig). The
    step also learns its own pod (downward API), which owns the objects it creates. No
    claim when a KFP workspace holds the data.
    """
    task.set_container_image(trainer_image)
    task.set_accelerator_type(accelerator_type)
    task.set_accelerator_limit(accelerator_count)
    kubernetes.add_node_selector_json(task, node_selector)
    kubernetes.add_toleration_json(task, tolerations)
    if claim:
        kubernetes.mount_pvc(task, pvc_name=claim, mount_path=MOUNT_PATH)
    for env, path in (
        ("POD_NAME", "metadata.name"),
        ("POD_UID", "metadata.uid"),
        ("POD_NAMESPACE", "metadata.namespace"),
    ):
        kubernetes.use_field_path_as_env(task, env_name=env, field_path=path)
