"""The pipeline steps as plain functions: what each KFP component does, testable without KFP.

Components in ``components/`` are only interfaces: they call these and log metrics.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

import yaml

from distrain import datasets
from distrain.analysis.compare import CompareConfig, write_comparison
from distrain.analysis.experiments import ExperimentConfig
from distrain.analysis.experiments.report import build_report, write_report
from distrain.analysis.plan import Plan
from distrain.base.costmodel import profile
from distrain.base.errors import ConfigError, StepError
from distrain.base.machine import describe
from distrain.base.memory import PeakTreeMemory
from distrain.base.progress import Progress
from distrain.datasets import get, is_user_model
from distrain.k8s.config import CLUSTER_LAUNCHERS, LAUNCHERS, KubernetesConfig
from distrain.k8s.objects import check_cluster_run
from distrain.k8s.serving import inference_service, push_version, storage_uri
from distrain.k8s.validate import ManifestError, validate_object
from distrain.learning import choices, usermodel
from distrain.learning.models import build_model, load_info, model_spec
from distrain.learning.usermodel import relocate
from distrain.preprocess.outputs import one_writer
from distrain.search import seed_from
from distrain.train.config import RunSpec, TrainConfig, parse_run_specs
from distrain.train.export import EXPORT_DIR, export_saved_model, model_metadata, pick_run

STEP_TIMES_ENV = "DISTRAIN_STEP_TIMES"


def _timed(func):
    """Records the step's own compute time when ``$DISTRAIN_STEP_TIMES`` names a file.

    One JSON line per call, appended: the step, its seconds, its process, the run it
    trained or scored (train and evaluate) and the peak resident memory of its process
    tree (the workers it launched included). The benchmark suite sums the seconds to
    measure an orchestrator's overhead. Nothing is measured or written when the variable
    is unset.
    """
    import functools
    import time

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        path = os.environ.get(STEP_TIMES_ENV)
        if not path:
            return func(*args, **kwargs)

        result = None
        start = time.perf_counter()
        try:
            with PeakTreeMemory() as memory:
                result = func(*args, **kwargs)
            return result
        finally:
            line = {"step": func.__name__, "seconds": time.perf_counter() - start}
            line["pid"] = os.getpid()
            if isinstance(result, dict) and isinstance(result.get("run"), dict):
                line["run"] = result["run"].get("name")
            if memory.peak_bytes is not None:
                line["peak_rss_mb"] = memory.peak_bytes / 2**20
            with open(path, "a") as f:
                f.write(json.dumps(line) + "\n")

    return wrapper


def _dataset(name: str):
    """The named data set's plugin (:mod:`distrain.datasets`).

    Raises:
        StepError: No data set of that name.
    """
    try:
        return datasets.get(name)
    except datasets.DataSetError as err:
        raise StepError(str(err)) from None


@_timed
def check_parameters(
    dataset: str,
    source: str,
    runs: list[str] | str,
    *,
    validation_fraction: float = 0.1,
    launcher: str = "local",
    repeats: int = 1,
    plan: str = "",
    model_file: str | os.PathLike = "",
    **settings,
) -> dict:
    """A pipeline's parameters, all checked at once: the first step, before any work.

    Args:
        dataset: A registered data set (:func:`distrain.datasets.names`).
        source: ``sample``, ``download`` / ``download:IDS`` or a directory of raw files
            (which get the file-level checks of :func:`check_raw_files`).
        runs: Run specs (``MODE:WORKERS[:ps=P][:aggregate=A]``).
        validation_fraction: Share of the training files held out.
        launcher: ``local``, ``kubernetes`` or ``trainjob``.
        repeats: How many times each run spec is trained, with seeds ``seed``,
            ``seed + 1``, ... (initial weights and data order).
        plan: The scale of the comparison's recommendation (:class:`distrain.analysis.plan.Plan`;
            empty: none).
        model_file: The user's model file (a pipeline's model artifact) of a ``model`` of
            ``FILE.py:FUNCTION``: it must compile (a syntax error names its line).
        **settings: :class:`TrainConfig` settings (model, epochs, ...; the others keep its
            defaults), checked as every run would check them; ``seed`` is the first
            repeat's.

    Returns:
        ``{"runs": names in order, "trainings": [{"run_spec", "seed"}, ...]}``: every
        training the pipeline does, a run spec's repeats side by side.

    Raises:
        StepError: Every problem found, joined by ``; ``.
    """
    problems = []
    known = {f.name: f.default for f in TrainConfig.settings()}
    unknown = sorted(set(settings) - set(known))
    if unknown:
        problems.append(f"unknown training settings: {', '.join(unknown)}")
        settings = {k: v for k, v in settings.items() if k in known}
    model, seed = settings.get("model", known["model"]), settings.get("seed", known["seed"])
    plugin = None
    try:
        plugin = datasets.get(dataset)
    except datasets.DataSetError:
        problems.append(f"dataset {dataset!r}: expected one of {', '.join(datasets.names())}")
    problems += _source_problems(dataset, source, plugin)
    problems += _model_problems(plugin, model, model_file)
    specs, run_problems = _run_problems(runs, settings, launcher)
    problems += run_problems
    if not 0 < validation_fraction < 1:
        problems.append(f"validation_fraction must be between 0 and 1, got {validation_fraction}")
    if launcher not in LAUNCHERS:
        problems.append(f"launcher {launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    if plan:
        try:
            Plan.parse(plan)
        except ConfigError as err:
            problems.append(str(err))
    if not 1 <= repeats <= MAX_REPEATS:
        problems.append(f"repeats must be between 1 and {MAX_REPEATS}, got {repeats}")
    if problems:
        raise StepError("invalid pipeline parameters: " + "; ".join(problems))
    return {"runs": [s.name for s in specs], "trainings": trainings(specs, repeats, seed)}


def _source_problems(dataset: str, source: str, plugin) -> list[str]:
    """What is wrong with a pipeline's ``source`` (a raw directory gets the file checks)."""
    keyword = source in ("sample", "download") or source.startswith("download:")
    if not keyword and not Path(source).is_dir():
        return [
            f"source {source!r}: no such data directory "
            "(expected 'sample', 'download' or a directory with the raw files)"
        ]
    if not keyword and plugin is not None:
        try:
            check_raw_files(dataset, source)
        except (ValueError, OSError) as err:
            return [f"source: {err}"]
    return []


def _model_problems(plugin, model: str, model_file) -> list[str]:
    """What is wrong with the model: unknown to the data set, or the user's not compiling."""
    if plugin is None:
        return []
    try:
        model_spec(plugin.name, model)
        if is_user_model(model):
            usermodel.check_source(model, model_file)  # the training step builds it
    except (datasets.DataSetError, usermodel.UserModelError) as err:
        return [str(err)]
    return []


def _run_problems(runs, settings: dict, launcher: str) -> tuple[list, list[str]]:
    """The run specs, and what is wrong with them and the settings every run checks.

    Returns:
        The parsed specs (none if they do not parse) and the problems found.
    """
    problems, specs = [], []
    try:
        specs = parse_run_specs(runs)
    except ConfigError as err:
        problems.append(f"runs: {err}")
    for spec in specs:
        try:
            cfg = TrainConfig(data_dir="-", output_dir="-", run=spec, **settings)
        except ConfigError as err:
            problems.append(f"run {spec.name}: {err}")
            break  # the same settings for every run: once is enough
        if launcher in CLUSTER_LAUNCHERS:
            from distrain.k8s.train import needs_cluster

            try:
                if needs_cluster(cfg):
                    check_cluster_run(cfg)
            except ConfigError as err:
                problems.append(f"run {err}")
    return specs, problems


# More repeats than this is a typo more often than a plan (each is a full training run).
MAX_REPEATS = 50


def trainings(specs: list, repeats: int, seed: int) -> list[dict]:
    """Each run spec ``repeats`` times, seeds ``seed``, ``seed + 1``, ...: what a pipeline trains.

    Args:
        specs: Run specs (:class:`RunSpec` or their strings).
        repeats: Trainings of each spec.
        seed: The first repeat's seed (of the initial weights and the data order).
    """
    return [{"run_spec": str(s), "seed": seed + i} for s in specs for i in range(repeats)]


def check_raw_files(dataset: str, directory: str | os.PathLike) -> None:
    """The file-level checks preprocessing makes first, on a directory of raw files.

    Cheap (headers, lengths, names): a pipeline's parameter check runs them so that a bad
    or missing file fails the run in its first step, which is never retried, rather than
    in a retried one. Each data set says what they are
    (:meth:`distrain.datasets.DataSet.check_raw_files`).

    Raises:
        ValueError: A file is missing or malformed (the message names it); the data
            sets' own format errors are ValueErrors.
    """
    _dataset(dataset).check_raw_files(Path(directory))


@_timed
def fetch(
    dataset: str,
    source: str,
    output_dir: str | os.PathLike,
    *,
    sample_size: int = 0,
    seed: int = 0,
) -> dict:
    """Puts a data set's raw files into ``output_dir``.

    Args:
        dataset: A registered data set's name (:func:`distrain.datasets.names`).
        source: ``sample`` (generate the sample in the real format), ``download`` (pinned
            URLs, checked digests; ``download:ID,ID,...`` for a data set downloaded by id)
            or a directory holding the raw files.
        output_dir: Destination directory.
        sample_size: Size of a generated sample (0: the default), in the data set's unit
            (:attr:`distrain.datasets.DataSet.sample_unit`).
        seed: Seed of a generated sample.

    Returns:
        A summary: source and file names.

    Raises:
        StepError: Unknown data set, or ``source`` is neither a keyword nor a directory
            with the data set's files.
    """
    plugin = _dataset(dataset)
    out = Path(output_dir)
    try:
        if source.startswith("download"):
            plugin.check_source(source)
        out.mkdir(parents=True, exist_ok=True)
        if source == "sample":
            plugin.write_sample(out, sample_size, seed)
        elif source == "download" or source.startswith("download:"):
            plugin.download(out, source)
        else:
            if not Path(source).is_dir():
                raise StepError(
                    f"{dataset} source {source!r} is not 'sample', 'download' or a directory"
                )
            plugin.copy_raw(Path(source), out)
    except datasets.DataSetError as err:
        raise StepError(str(err)) from None
    return {"dataset": dataset, "source": source, "files": sorted(p.name for p in out.iterdir())}


@_timed
def preprocess(
    dataset: str,
    raw_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    validation_fraction: float = 0.1,
    seed: int = 0,
    beam_args: list[str] | None = None,
    overwrite: bool = False,
) -> dict:
    """Runs the data set's Beam preprocessing; returns the metadata it wrote.

    ``output_dir`` must be empty or missing unless ``overwrite``; it is then replaced
    whole, and only when the job and its checks succeed. One job writes it at a time: a
    second fails naming the first (:mod:`distrain.preprocess.outputs`).

    While it runs, a progress line (a terminal) or a line every half minute (a log) says
    how long it has run and what it has written (:mod:`distrain.base.progress`).
    """
    plugin = _dataset(dataset)
    from distrain.preprocess.runners import runner_name

    args = list(beam_args or [])  # none: the local runner (preprocess.runners)
    runner = runner_name(args)
    with Progress(f"preprocess {dataset} (Beam, {runner})", poll=lambda: _written(output_dir)):
        return plugin.preprocess(
            str(raw_dir), str(output_dir), validation_fraction, seed, args, overwrite=overwrite
        )


def _written(directory: str | os.PathLike) -> str:
    """What a job has written for ``directory`` so far: files and their size.

    A job writes into a temporary sibling (``.NAME.tmp-*``) until it succeeds.
    """
    out = Path(directory)
    staged = sorted(out.parent.glob(f".{out.name}.tmp-*")) if out.name else []
    files, size = 0, 0
    for root, dirs, names in (w for d in staged or [out] for w in os.walk(d)):
        dirs[:] = [d for d in dirs if not d.startswith(".")]  # the job's scratch space
        for name in names:
            with contextlib.suppress(OSError):
                size += os.path.getsize(os.path.join(root, name))
                files += 1
    return f"{files} files ({size / 1e6:.1f} MB) written" if files else ""


@_timed
def train(
    data_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    run_spec: str,
    *,
    launcher: str = "local",
    kubernetes: dict | None = None,
    task_config: dict | None = None,
    model_file: str | os.PathLike = "",
    resume_from: str | os.PathLike = "",
    **settings,
) -> dict:
    """Trains one run; returns its history.

    Args:
        data_dir: Preprocessed data.
        output_dir: Where the model, checkpoints and history go.
        run_spec: ``MODE:WORKERS[:ps=P][:aggregate=A]``.
        launcher: ``local`` (processes in this container or machine), ``kubernetes``
            (runs of more than one worker become an MPIJob or PS jobs on the cluster;
            one-worker runs still train here) or ``trainjob`` (sync runs become a Kubeflow
            Trainer v2 TrainJob; PS modes stay Jobs).
        kubernetes: :class:`distrain.k8s.config.KubernetesConfig` fields, with
            ``node_selector`` and ``tolerations`` as JSON strings or objects.
        task_config: The KFP task's passed-through settings (``dsl.TaskConfig``'s fields:
            resources, node_selector, tolerations, affinity, volumes, volume_mounts); they
            reach the launched pods (:meth:`KubernetesConfig.with_task_config`).
        model_file: The user's model file (a pipeline's model artifact) for a ``model`` of
            ``FILE.py:FUNCTION``: copied into ``output_dir/user_model/``, which travels
            with the trained model, and trained from there. Without it, a model file is
            copied there too (the evaluation step rebuilds the model from that copy).
        resume_from: An earlier training's output of the same run, rate and seed (a
            search's rung before, :mod:`distrain.search`): its checkpoints and history
            are copied into ``output_dir`` first, and the run resumes from them.
        **settings: Any other :class:`TrainConfig` field (model, epochs, ...).

    Raises:
        StepError: Unknown launcher or invalid cluster settings, before any work starts.
        UserModelError: The user's model code fails (:func:`check_user_model`).
        OutputBusyError: Another job is writing ``output_dir`` (one writer per output:
            the run holds its lock, :mod:`distrain.preprocess.outputs`, to its end).
    """
    with one_writer(output_dir):
        if resume_from:
            seed_from(resume_from, output_dir)
        return _train(
            data_dir, output_dir, run_spec, launcher, kubernetes, task_config, model_file, settings
        )


def _train(
    data_dir, output_dir, run_spec, launcher, kubernetes, task_config, model_file, settings
) -> dict:
    """:func:`train` once the output's lock is held."""
    model = settings.get("model", "")
    if model_file:  # the pipeline's artifact: the run trains from the copy in its output
        settings["model"] = usermodel.stage(model, Path(output_dir, USER_MODEL_DIR), model_file)
    elif is_user_model(model) and usermodel.ModelReference.parse(model).is_file:
        # A copy travels with the trained model: the evaluation step rebuilds it from there.
        usermodel.stage(model, Path(output_dir, USER_MODEL_DIR))

    if launcher not in LAUNCHERS:
        raise StepError(f"unknown launcher {launcher!r}; expected one of {', '.join(LAUNCHERS)}")
    cfg = TrainConfig(
        data_dir=str(data_dir), output_dir=str(output_dir), run=RunSpec.parse(run_spec), **settings
    )
    check_user_model(cfg)
    if launcher in CLUSTER_LAUNCHERS:
        from distrain.k8s.train import needs_cluster, train_on_cluster

        try:
            k = KubernetesConfig.from_params(
                launcher=launcher, task_config=task_config, **(kubernetes or {})
            )
        except (ConfigError, TypeError) as err:
            raise StepError(f"kubernetes settings: {err}") from err
        if needs_cluster(cfg):
            return _exported(cfg, train_on_cluster(cfg, k))
    from distrain.train.launch import run_training

    return _exported(cfg, run_training(cfg))


def _exported(cfg: TrainConfig, history: dict) -> dict:
    """The run's history, after its SavedModel is exported when ``cfg.export`` says so."""
    if cfg.export:
        info = load_info(cfg.data_dir, cfg.model)
        out = Path(cfg.output_dir, EXPORT_DIR)
        if out.exists():  # a resumed or retried run exports its final weights again
            shutil.rmtree(out)
        task = model_spec(info.dataset, cfg.model).task.name
        model = Path(cfg.output_dir, "model.keras")  # a user's model loads with its module
        history["export"] = export_saved_model(model, info, task, out, cfg.model, cfg.seed)
    return history


# Where a training step keeps the user's model file, in its output (beside model.keras).
USER_MODEL_DIR = "user_model"


def check_user_model(cfg: TrainConfig) -> None:
    """Builds a model from the user's code once, before any process starts.

    An error in it (import, syntax, what it returns, its logits' width) then fails the step
    in seconds, naming the user's file and line, not in every worker
    (:mod:`distrain.learning.usermodel`); so does a layer a split mode cannot split
    (:meth:`distrain.train.modes.Mode.check_model`). Built-in models are not built here.

    Raises:
        UserModelError: The user's code failed.
        ConfigError: The run's mode cannot train the model.
    """
    if not is_user_model(cfg.model):
        return
    import tf_keras

    ref = usermodel.ModelReference.parse(cfg.model)
    info = load_info(cfg.data_dir, cfg.model)
    model = usermodel.build(ref, info, cfg.seed)
    cfg.run.impl.check_model(cfg, model)  # a split mode: a layer it cannot split
    # The file's loss, optimizer and class weights, each made once and checked.
    choices.check(model_spec(info.dataset, cfg.model), info, cfg.run.impl, cfg)
    tf_keras.backend.clear_session()


@_timed
def evaluate(data_dir: str | os.PathLike, model_dir: str | os.PathLike, split: str = "") -> dict:
    """Scores a trained run and returns its run report.

    The model's task says how (:mod:`distrain.learning.tasks`): classifiers on ``test``
    (accuracy, precision/recall/F1, confusion matrix); language models on ``validation``
    (nats and bits per character, perplexity, next-character accuracy, and a generated
    sample); the encoder-decoder per target character; the autoencoder by reconstruction
    error on ``test``; a regression by MSE, MAE and R² with their intervals on ``test``.

    Args:
        data_dir: Preprocessed data.
        model_dir: A training step's output (``model.keras`` and ``history.json``).
        split: The split to score (default: the task's).

    Returns:
        ``{"run", "history", "evaluation"}``, the input of the comparison.
    """
    model_dir = Path(model_dir)
    history = json.loads((model_dir / "history.json").read_text())
    # The user's model file: where the training step put a copy, in its output.
    model = relocate(history["run"]["model"], model_dir / USER_MODEL_DIR)
    info = load_info(data_dir, model)
    task = model_spec(info.dataset, model).task
    seed = history["config"]["seed"]
    # A model of the user's code loads with its module imported (usermodel.load_saved).
    with usermodel.loading(model, info, seed):
        evaluation = task.evaluate(model_dir / "model.keras", info, split or task.split)
    evaluation["task"] = task.name
    # What the cost model needs of the model (distrain.base.costmodel), for reports that
    # predict step times from what the run measured.
    evaluation["model_profile"] = profile(build_model(info, model, seed))
    return {"run": history["run"], "history": history, "evaluation": evaluation}


@_timed
def export(
    data_dir: str | os.PathLike,
    trained: list[str | os.PathLike],
    reports: list[dict],
    comparison: dict,
    output_dir: str | os.PathLike,
    gate: str = "",
) -> dict:
    """Exports the run the comparison's verdict picks as a SavedModel; returns its metadata.

    The run is :func:`distrain.train.export.pick_run`'s; its training step's output (among
    ``trained``, found by its run name and seed) is exported to ``output_dir`` with the
    serving signatures (:mod:`distrain.train.export`). The metadata (framework, run,
    verdict, accuracy with its interval, input spec) is also written into the export, as
    ``assets.extra/distrain.json``.

    Raises:
        StepError: No training output of the picked run.
    """
    report, why = pick_run(comparison, reports)
    seed = (report["history"].get("config") or {}).get("seed")
    for model_dir in map(Path, trained):
        history = json.loads((model_dir / "history.json").read_text())
        if history["run"]["name"] == report["run"]["name"] and history["config"]["seed"] == seed:
            break
    else:
        raise StepError(f"no training output of {report['run']['name']} (seed {seed}) to export")
    model = relocate(history["run"]["model"], model_dir / USER_MODEL_DIR)
    info = load_info(data_dir, model)
    task = model_spec(info.dataset, model).task.name
    spec = export_saved_model(
        model_dir / "model.keras", info, task, output_dir, model, history["config"]["seed"]
    )
    metadata = model_metadata(report, comparison, why, spec, gate)
    Path(output_dir, "assets.extra", "distrain.json").write_text(json.dumps(metadata, indent=2))
    return metadata


@_timed
def push(
    model_dir: str | os.PathLike,
    serving_dir: str | os.PathLike,
    name: str,
    *,
    namespace: str = "",
    uri: str = "",
    mount_path: str = "",
    claim: str = "",
    annotations: dict | None = None,
) -> dict:
    """Copies an exported model to ``serving_dir/name/VERSION`` and renders its InferenceService.

    As TFX's Pusher: the next version folder TF Serving serves (:mod:`distrain.k8s.serving`),
    and KServe's ``InferenceService`` reading the model base path ``serving_dir/name``
    (``uri``, or ``pvc://CLAIM/...`` under ``mount_path``, else ``file://...``), checked
    against KServe's CRD schema. Also writes it beside, as ``serving_dir/name.yaml``.

    Returns:
        ``{"version", "path", "storage_uri", "inference_service"}``.

    Raises:
        ConfigError: The name, the URI or the object is one KServe refuses.
    """
    base = Path(serving_dir, name)
    uri = uri or storage_uri(base, mount_path, claim)
    isvc = inference_service(name, namespace, uri, annotations=annotations)
    try:
        validate_object(isvc)
    except ManifestError as err:
        raise ConfigError(str(err)) from None
    path = push_version(model_dir, serving_dir, name)
    Path(serving_dir, f"{name}.yaml").write_text(yaml.safe_dump(isvc, sort_keys=False))
    return {
        "version": int(path.name),
        "path": str(path),
        "storage_uri": uri,
        "inference_service": isvc,
    }


@_timed
def baseline(data_dir: str | os.PathLike, model: str = "") -> dict:
    """The count-based baseline for a model's task on a data set, as a run report.

    Classifiers: always the most frequent training class, scored on ``test``. Language
    models: the best of character n-grams of orders 3 to 7 with interpolated Kneser-Ney
    smoothing, fitted on the training text and scored as the models are
    (:mod:`distrain.learning.lm`: each validation character once); its order is in the row's name.
    The encoder-decoder: the same over the target lines alone. The autoencoder: the
    training images' mean image. A regression: the training labels' mean.

    Args:
        data_dir: Preprocessed data.
        model: The model the runs train (default: the data set's default model).
    """
    info = load_info(data_dir, model)
    plugin = get(info.dataset)
    task = model_spec(info.dataset, model or plugin.default_model).task
    run, evaluation = task.baseline(info)
    evaluation["task"] = task.name
    run.update(mode="baseline", workers=0, dataset=info.dataset)
    return {"run": run, "history": None, "evaluation": evaluation}


@_timed
def compare(
    reports: list[dict],
    output_dir: str | os.PathLike,
    *,
    target_accuracy: float = 0.95,
    plan: str = "",
    tuning: dict | None = None,
) -> dict:
    """Writes ``comparison.{json,md,html}`` for the runs; returns the comparison.

    The comparison records the machine and software it ran on (:mod:`distrain.base.machine`);
    with ``plan`` (``workers=16,gpus_per_worker=1,link_gbps=25``) it adds the cost
    model's recommendation at that scale (:mod:`distrain.analysis.plan`). ``tuning`` is a
    learning-rate search's records by run name (:func:`distrain.search.records`).
    """
    return write_comparison(
        output_dir,
        reports,
        CompareConfig(target_accuracy=target_accuracy),
        describe(),
        plan,
        tuning=tuning,
    )


def gather_results(paths: list[str], earlier: str | None = None) -> list[dict]:
    """The evaluate steps' reports at ``paths`` after the list in ``earlier``, as one list."""
    runs = json.loads(Path(earlier).read_text()) if earlier else []
    return runs + [json.loads(Path(p).read_text()) for p in paths]


@_timed
def experiment_report(config: str, reports: list[dict], output_dir: str | os.PathLike) -> dict:
    """Writes an experiment's report (``report.{json,md,html}``, ``experiment.json``, figures).

    Args:
        config: The experiment's configuration, JSON (:class:`ExperimentConfig`).
        reports: The evaluate steps' reports, one per point of the configuration.
        output_dir: Where the report goes.

    Returns:
        The report (what ``report.json`` holds).
    """
    cfg = ExperimentConfig.from_dict(json.loads(config))
    report = build_report(cfg, reports)
    write_report(output_dir, report)
    return report
