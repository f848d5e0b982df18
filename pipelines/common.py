"""One pipeline shape for every data set.

fetch data -> preprocess (Beam) -> for each run spec, in parallel: train -> evaluate;
the data set's baseline -> compare (fan-in with ``dsl.Collected``) -> quality gate ->
export the run the verdict picks -> push it (:mod:`distrain.pipelines.serving`). A
pipeline compiled with a learning-rate search (``tune``) searches each run spec's rate
first (:mod:`distrain.pipelines.tuning`) and trains it at the rate chosen.
"""

import functools
import inspect

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

    ``beam_args`` are the preprocessing step's Beam pipeline options, passed through
    (``["--runner=DataflowRunner", "--project=P", ...]``; none: the local runner in the
    step's container).

    Images default to :mod:`distrain.base.images` (registry from ``DISTRAIN_IMAGE_REGISTRY`` at
    compile time) and can be changed per run. Cluster placement comes from parameters:
    ``accelerator_type`` / ``accelerator_count``, ``node_selector`` and ``tolerations`` go
    on every training step (kfp-kubernetes), and with ``launcher="kubernetes"`` the pods a
    training step launches get ``gpus_per_worker``, the same selector and tolerations.

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

    What a user sets on the training task (resources, accelerators, tolerations, node
    selector, affinity, volumes) reaches the pods it launches through the component's
    TaskConfig passthrough; the parameters above are the shorthand for the same.

    ``model_file`` is the user's model file (an optional input artifact, as TFX's Trainer
    takes a ``module_file``) for a ``model`` of ``FILE.py:FUNCTION``: the parameter check
    compiles it, each training step trains from its copy (docs/your-model.md). The local
    form (``cluster=False``) has no such input: kfp.local takes no input artifacts.
    """
    d = defaults
    search_rates = bool(tune)
    trainer_image_default = image("trainer-gpu" if gpu else "trainer")
    gpus_default = 1 if gpu else KubernetesConfig.gpus_per_worker

    config = None
    if workspace_size:
        config = dsl.PipelineConfig(workspace=dsl.WorkspaceConfig(size=workspace_size))

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
        serving_dir: str = f"{MOUNT_PATH}/{SERVING_SUBDIR}" if cluster else "",
        model_name: str = f"distrain-{d.dataset}",
        tune: str = tune,
        tune_epochs: int = 0,
        model_file: dsl.Input[dsl.Artifact] = None,
    ) -> dsl.Artifact:
        shipped = {} if model_file is None else {"model_file": model_file}
        checked = check_parameters(
            dataset=d.dataset,
            source=source,
            runs=runs,
            model=model,
            epochs=epochs,
            until_plateau=until_plateau,
            batch_size=batch_size,
            learning_rate=learning_rate,
            validation_fraction=validation_fraction,
            launcher=launcher,
            controller=controller,
            repeats=repeats,
            seed=seed,
            plan=plan,
            export=export,
            **shipped,
        ).set_display_name("check parameters")
        checked.set_container_image(beam_image)
        data = fetch_data(
            dataset=d.dataset, source=source, sample_size=sample_size, seed=seed
        ).set_display_name("fetch data")
        data.set_container_image(beam_image).after(checked)
        _retry(data)
        prep = preprocess(
            raw=data.outputs["raw"],
            dataset=d.dataset,
            validation_fraction=validation_fraction,
            seed=seed,
            beam_args=beam_args,
        ).set_display_name("preprocess (Beam)")
        prep.set_container_image(beam_image)
        _retry(prep)
        base = baseline(examples=prep.outputs["examples"], model=model).set_display_name("baseline")
        shared = dict(  # the training step's arguments, the same for every run
            model=model,
            batch_size=batch_size,
            launcher=launcher,
            controller=controller,
            worker_image=trainer_image,
            namespace=namespace,
            gpus_per_worker=gpus_per_worker,
            cpu_per_worker=cpu_per_worker,
            memory_per_worker=memory_per_worker,
            node_selector=node_selector,
            tolerations=tolerations,
            volume_claim=volume_claim,
            mount_path=MOUNT_PATH,
            # Also passed as arguments: KFP 2.17 does not route channels that only
            # set_accelerator_* uses into a ParallelFor's inputs.
            accelerator_type=accelerator_type,
            accelerator_count=accelerator_count,
            workspace_path=dsl.WORKSPACE_PATH_PLACEHOLDER if workspace_size else "",
            schedule_timeout_seconds=schedule_timeout_seconds,
            **shipped,
        )

        def prepare(task):
            _retry(task)
            # A cached time is not a measurement: training always runs.
            task.set_caching_options(enable_caching=False)
            if cluster:
                _place_training(
                    task,
                    trainer_image,
                    accelerator_type,
                    accelerator_count,
                    node_selector,
                    tolerations,
                    "" if workspace_size else volume_claim,
                )

        runs_to_train, searched = checked.output, {}
        if search_rates:
            runs_to_train, record, start = search(
                examples=prep.outputs["examples"],
                runs=runs,
                tune=tune,
                tune_epochs=tune_epochs,
                epochs=epochs,
                seed=seed,
                learning_rate=learning_rate,
                repeats=repeats,
                grid=tune_grid,
                eta=tune_eta,
                parallelism=tune_parallelism,
                train_args=shared,
                prepare=prepare,
            )
            start.after(checked)
            searched = {"tuning": record}
        # Each run spec `repeats` times, with seeds seed, seed + 1, ...: the comparison
        # gives medians and intervals over them (distrain.base.verdict); with a search, each at
        # its chosen rate.
        with dsl.ParallelFor(runs_to_train, parallelism=parallelism, name="runs") as training:
            trained = train(
                examples=prep.outputs["examples"],
                run_spec=training.run_spec,
                epochs=epochs,
                until_plateau=until_plateau,
                learning_rate=training.learning_rate if search_rates else learning_rate,
                seed=training.seed,
                **shared,
            ).set_display_name("train")
            prepare(trained)
            scored = evaluate(
                examples=prep.outputs["examples"], trained=trained.outputs["trained"]
            ).set_display_name("evaluate")
            if cluster:  # it rebuilds the model: a user's module is in the trainer image
                scored.set_container_image(trainer_image)
        result = compare(
            reports=dsl.Collected(scored.outputs["report"]),
            baseline=base.outputs["report"],
            target_accuracy=target_accuracy,
            plan=plan,
            **searched,
        ).set_display_name("compare")
        gated = quality_gate(comparison=result.outputs["comparison"], gate=gate)
        export_and_push(
            export=export,
            examples=prep.outputs["examples"],
            trained=trained.outputs["trained"],
            reports=scored.outputs["report"],
            comparison=result.outputs["comparison"],
            gate_task=gated.set_display_name(GATE_TASK),
            gate=gate,
            serving_dir=serving_dir,
            model_name=model_name,
            namespace=namespace,
            volume_claim=volume_claim,
            mount_path=MOUNT_PATH,
            cluster=cluster,
        )
        return result.outputs["comparison"]

    pipeline.__doc__ = f"{d.description} Returns the comparison directory."
    # kfp.local takes no input artifact, not even an optional one left out: a local
    # run's steps read the user's model file where it is (its path in ``model``). A
    # pipeline without a search has no search parameters.
    dropped = ({"model_file"} if not cluster else set()) | (
        set() if search_rates else {"tune", "tune_epochs"}
    )
    if dropped:
        sig = inspect.signature(pipeline)
        kept = [p for p in sig.parameters.values() if p.name not in dropped]
        pipeline = _by_name(pipeline, sig.replace(parameters=kept))
    return dsl.pipeline(
        name=f"distrain-{d.dataset}", description=d.description, pipeline_config=config
    )(pipeline)


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
