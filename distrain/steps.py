"""The pipeline steps as plain functions: what each KFP component does, testable without KFP.

Components in ``components/`` are only interfaces: they call these and log metrics.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from pathlib import Path

from distrain.k8s.config import CLUSTER_LAUNCHERS, LAUNCHERS
from distrain.train.config import RunSpec, TrainConfig

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
        from distrain.memory import PeakTreeMemory

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


class StepError(ValueError):
    """A step's inputs are invalid; raised before any work starts."""


DATASETS = ("mnist", "dbpedia", "gutenberg")


def _check_dataset(dataset: str) -> None:
    if dataset not in DATASETS:
        raise StepError(f"unknown dataset {dataset!r}; expected one of {', '.join(DATASETS)}")


@_timed
def check_parameters(
    dataset: str,
    source: str,
    runs: list[str] | str,
    *,
    model: str = "mlp",
    epochs: int = 1,
    batch_size: int = 64,
    learning_rate: float = 1e-3,
    validation_fraction: float = 0.1,
    launcher: str = "local",
    controller: str = "auto",
    until_plateau: int = 0,
) -> dict:
    """A pipeline's parameters, all checked at once: the first step, before any work.

    Args:
        dataset: ``mnist``, ``dbpedia`` or ``gutenberg``.
        source: ``sample``, ``download`` / ``download:IDS`` or a directory of raw files
            (which get the file-level checks of :func:`check_raw_files`).
        runs: Run specs (``MODE:WORKERS[:ps=P][:aggregate=A]``).
        model: Model name.
        epochs: Passes over the training split.
        batch_size: Examples per step per worker.
        learning_rate: Base learning rate.
        validation_fraction: Share of the training files held out.
        launcher: ``local``, ``kubernetes`` or ``trainjob``.
        controller: Sync runs' Horovod controller (:attr:`TrainConfig.controller`).
        until_plateau: Patience of :attr:`TrainConfig.until_plateau` (0: off).

    Returns:
        The run names, in order.

    Raises:
        StepError: Every problem found, joined by ``; ``.
    """
    from distrain.train.config import ConfigError, parse_run_specs

    problems = []
    if dataset not in DATASETS:
        problems.append(f"dataset {dataset!r}: expected one of {', '.join(DATASETS)}")
    keyword = source in ("sample", "download") or source.startswith("download:")
    if not keyword and not Path(source).is_dir():
        problems.append(
            f"source {source!r}: no such data directory "
            "(expected 'sample', 'download' or a directory with the raw files)"
        )
    elif not keyword and dataset in DATASETS:
        try:
            check_raw_files(dataset, source)
        except (ValueError, OSError) as err:
            problems.append(f"source: {err}")
    from distrain.train.models import models_for

    if dataset in DATASETS and model not in models_for(dataset):
        problems.append(
            f"model {model!r}: no such model for {dataset} "
            f"(expected one of {', '.join(models_for(dataset))})"
        )
    specs = []
    try:
        specs = parse_run_specs(runs)
    except ConfigError as err:
        problems.append(f"runs: {err}")
    for spec in specs:
        try:
            cfg = TrainConfig(
                data_dir="-",
                output_dir="-",
                run=spec,
                model=model,
                epochs=epochs,
                batch_size=batch_size,
                learning_rate=learning_rate,
                controller=controller,
                until_plateau=until_plateau,
            )
        except ConfigError as err:
            problems.append(f"run {spec.name}: {err}")
            break  # the same settings for every run: once is enough
        if launcher in CLUSTER_LAUNCHERS:
            from distrain.k8s.objects import check_cluster_run
            from distrain.k8s.train import needs_cluster

            try:
                if needs_cluster(cfg):
                    check_cluster_run(cfg)
            except ConfigError as err:
                problems.append(f"run {err}")
    if not 0 < validation_fraction < 1:
        problems.append(f"validation_fraction must be between 0 and 1, got {validation_fraction}")
    if launcher not in LAUNCHERS:
        problems.append(f"launcher {launcher!r}: expected one of {', '.join(LAUNCHERS)}")
    if problems:
        raise StepError("invalid pipeline parameters: " + "; ".join(problems))
    return {"runs": [s.name for s in specs]}


def check_raw_files(dataset: str, directory: str | os.PathLike) -> None:
    """The file-level checks preprocessing makes first, on a directory of raw files.

    Cheap (headers, lengths, names): a pipeline's parameter check runs them so that a bad
    or missing file fails the run in its first step, which is never retried, rather than
    in a retried one. MNIST: the four IDX files, their headers and lengths (a truncated
    gzip stream is caught from its trailer); DBPedia: ``classes.txt`` and non-empty
    ``train.csv`` and ``test.csv``; Gutenberg: at least one ``*.txt`` book.

    Raises:
        ValueError: A file is missing or malformed (the message names it); the data
            sets' own errors (``IdxFormatError``, ``DbpediaFormatError``) are ValueErrors.
    """
    src = Path(directory)
    if dataset == "mnist":
        from distrain.data.idx import MNIST_FILES, inspect_mnist_split, mnist_paths

        for split in MNIST_FILES:
            inspect_mnist_split(*mnist_paths(src, split))
    elif dataset == "dbpedia":
        from distrain.preprocess.dbpedia import read_classes

        read_classes(src)
        for name in ("train.csv", "test.csv"):
            path = src / name
            if not path.exists():
                raise StepError(f"{path}: file not found (the dbpedia_csv layout needs it)")
            if path.stat().st_size == 0:
                raise StepError(f"{path}: empty file, expected CSV rows")
    elif not sorted(src.glob("*.txt")):
        raise StepError(f"{src}: no *.txt books")


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
        dataset: ``mnist``, ``dbpedia`` or ``gutenberg``.
        source: ``sample`` (generate the sample in the real format), ``download`` (pinned
            URLs, checked digests; for Gutenberg ``download:ID,ID,...``) or a directory
            holding the raw files.
        output_dir: Destination directory.
        sample_size: Size of a generated sample (0: the default): MNIST training images,
            DBPedia training rows, Gutenberg characters over all books. Test sets are a
            fifth of it.
        seed: Seed of a generated sample.

    Returns:
        A summary: source and file names.

    Raises:
        StepError: Unknown data set, or ``source`` is neither a keyword nor a directory
            with the data set's files.
    """
    _check_dataset(dataset)
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if source == "sample":
        _write_sample(dataset, out, sample_size, seed)
    elif source == "download" or source.startswith("download:"):
        from distrain.data import download

        if dataset == "mnist":
            download.download_mnist(out)
        elif dataset == "dbpedia":
            extracted = download.download_dbpedia(out / "archive")
            for name in ("classes.txt", "train.csv", "test.csv"):
                shutil.copyfile(extracted / name, out / name)
        else:
            ids = [int(i) for i in source.partition(":")[2].split(",") if i.strip()]
            if not ids:
                raise StepError("Gutenberg downloads need book ids: download:1342,11,84")
            download.fetch_gutenberg(ids, out)
    else:
        _copy_raw(dataset, Path(source), out)
    return {"dataset": dataset, "source": source, "files": sorted(p.name for p in out.iterdir())}


def _write_sample(dataset: str, out: Path, size: int, seed: int) -> None:
    if dataset == "mnist":
        from distrain.data.mnist_sample import MnistSampleConfig, write_mnist_sample

        size = size or 10000
        write_mnist_sample(
            out, MnistSampleConfig(train_size=size, test_size=max(1, size // 5), seed=seed)
        )
    elif dataset == "dbpedia":
        from distrain.data.dbpedia_sample import CLASSES, DbpediaSampleConfig, write_dbpedia_sample

        per_class = max(1, (size or 4200) // len(CLASSES))
        cfg = DbpediaSampleConfig(
            train_per_class=per_class, test_per_class=max(1, per_class // 5), seed=seed
        )
        write_dbpedia_sample(out, cfg)
    else:
        from distrain.data.gutenberg_sample import GutenbergSampleConfig, write_gutenberg_sample

        books = 3
        cfg = GutenbergSampleConfig(
            books=books, chars_per_book=max(1000, (size or 360_000) // books), seed=seed
        )
        write_gutenberg_sample(out, cfg)


def _copy_raw(dataset: str, src: Path, out: Path) -> None:
    if not src.is_dir():
        raise StepError(f"{dataset} source {str(src)!r} is not 'sample', 'download' or a directory")
    if dataset == "mnist":
        from distrain.data.idx import MNIST_FILES, mnist_paths

        files = [p for split in MNIST_FILES for p in mnist_paths(src, split)]
    elif dataset == "dbpedia":
        files = [src / n for n in ("classes.txt", "train.csv", "test.csv")]
    else:
        files = sorted(src.glob("*.txt"))
        if not files:
            raise StepError(f"{src}: no *.txt books")
    for path in files:
        if not path.exists():
            raise StepError(f"{src}: missing {dataset} file {path.name}")
        shutil.copyfile(path, out / path.name)


@_timed
def preprocess(
    dataset: str,
    raw_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    validation_fraction: float = 0.1,
    seed: int = 0,
    beam_args: list[str] | None = None,
) -> dict:
    """Runs the data set's Beam preprocessing; returns the metadata it wrote.

    While it runs, a progress line (a terminal) or a line every half minute (a log) says
    how long it has run and what it has written (:mod:`distrain.progress`).
    """
    from distrain.progress import Progress

    _check_dataset(dataset)
    args = beam_args or ["--runner=DirectRunner"]
    runner = next((a.split("=", 1)[1] for a in args if a.startswith("--runner=")), "DirectRunner")
    with Progress(f"preprocess {dataset} (Beam, {runner})", poll=lambda: _written(output_dir)):
        return _preprocess(dataset, str(raw_dir), str(output_dir), validation_fraction, seed, args)


def _written(directory: str | os.PathLike) -> str:
    """What a job has written under ``directory`` so far: files and their size."""
    files, size = 0, 0
    for root, dirs, names in os.walk(directory):
        dirs[:] = [d for d in dirs if not d.startswith(".")]  # the job's scratch space
        for name in names:
            with contextlib.suppress(OSError):
                size += os.path.getsize(os.path.join(root, name))
                files += 1
    return f"{files} files ({size / 1e6:.1f} MB) written" if files else ""


def _preprocess(
    dataset: str, raw: str, out: str, validation_fraction: float, seed: int, args: list[str]
) -> dict:
    if dataset == "mnist":
        from distrain.preprocess import mnist

        cfg = mnist.MnistPreprocessConfig(raw, out, validation_fraction, seed)
        return mnist.preprocess_mnist(cfg, args)
    if dataset == "dbpedia":
        from distrain.preprocess import dbpedia

        cfg = dbpedia.DbpediaPreprocessConfig(raw, out, validation_fraction, seed)
        return dbpedia.preprocess_dbpedia(cfg, args)
    from distrain.preprocess import gutenberg

    cfg = gutenberg.GutenbergPreprocessConfig(raw, out, validation_fraction=validation_fraction)
    return gutenberg.preprocess_gutenberg(cfg, args)


@_timed
def train(
    data_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    run_spec: str,
    *,
    launcher: str = "local",
    kubernetes: dict | None = None,
    task_config: dict | None = None,
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
        **settings: Any other :class:`TrainConfig` field (model, epochs, ...).

    Raises:
        StepError: Unknown launcher or invalid cluster settings, before any work starts.
    """
    from distrain.train.config import ConfigError

    if launcher not in LAUNCHERS:
        raise StepError(f"unknown launcher {launcher!r}; expected one of {', '.join(LAUNCHERS)}")
    cfg = TrainConfig(
        data_dir=str(data_dir), output_dir=str(output_dir), run=RunSpec.parse(run_spec), **settings
    )
    if launcher in CLUSTER_LAUNCHERS:
        from distrain.k8s.config import KubernetesConfig
        from distrain.k8s.train import needs_cluster, train_on_cluster

        try:
            k = KubernetesConfig.from_params(
                launcher=launcher, task_config=task_config, **(kubernetes or {})
            )
        except (ConfigError, TypeError) as err:
            raise StepError(f"kubernetes settings: {err}") from err
        if needs_cluster(cfg):
            return train_on_cluster(cfg, k)
    from distrain.train.launch import run_training

    return run_training(cfg)


@_timed
def evaluate(data_dir: str | os.PathLike, model_dir: str | os.PathLike, split: str = "") -> dict:
    """Scores a trained run and returns its run report.

    Classifiers are scored on ``test`` (accuracy, precision/recall/F1, confusion matrix);
    language models on ``validation`` (nats and bits per character, perplexity,
    next-character accuracy, and a generated sample).

    Args:
        data_dir: Preprocessed data.
        model_dir: A training step's output (``model.keras`` and ``history.json``).
        split: The split to score (default: per task, as above).

    Returns:
        ``{"run", "history", "evaluation"}``, the input of the comparison.
    """
    from distrain.train.inputs import DatasetInfo

    model_dir = Path(model_dir)
    history = json.loads((model_dir / "history.json").read_text())
    info = DatasetInfo.load(data_dir)
    if info.metadata.get("task") == "language_model":
        from distrain.train.predict import evaluate_language_model

        evaluation = evaluate_language_model(
            model_dir / "model.keras", data_dir, split or "validation"
        )
    else:
        from distrain.evaluate import classification_metrics
        from distrain.train.predict import predict_split

        split = split or "test"
        y_true, y_pred = predict_split(model_dir / "model.keras", data_dir, split)
        names = info.class_names or [str(i) for i in range(info.num_classes)]
        evaluation = classification_metrics(y_true, y_pred, names)
        evaluation["split"] = split
    return {"run": history["run"], "history": history, "evaluation": evaluation}


@_timed
def baseline(data_dir: str | os.PathLike) -> dict:
    """The count-based baseline of a data set, as a run report.

    Classifiers: always the most frequent training class, scored on ``test``. Language
    models: the best of character n-grams of orders 3 to 7 with interpolated Kneser-Ney
    smoothing, fitted on the training text and scored as the models are
    (:mod:`distrain.lm`: each validation character once); its order is in the row's name.
    """
    from distrain.train.inputs import DatasetInfo

    info = DatasetInfo.load(data_dir)
    if info.metadata.get("task") == "language_model":
        from distrain.lm import score_ngrams
        from distrain.preprocess.gutenberg import read_texts

        order, evaluation = score_ngrams(
            read_texts(data_dir, "train").values(),
            read_texts(data_dir, "validation").values(),
            info.metadata["vocabulary"],
        )
        evaluation["split"] = "validation"
        name = f"{order}-gram KN"
        run = {"name": name, "mode": "baseline", "workers": 0, "model": f"char {name}"}
    else:
        from distrain.evaluate import majority_baseline
        from distrain.train.predict import split_labels

        hist = info.metadata["class_histogram"]["train"]
        names = info.class_names or [str(i) for i in range(info.num_classes)]
        evaluation = majority_baseline(hist, split_labels(data_dir, "test"), names)
        evaluation["split"] = "test"
        run = {"name": "majority", "mode": "baseline", "workers": 0, "model": "majority class"}
    run["dataset"] = info.dataset
    return {"run": run, "history": None, "evaluation": evaluation}


@_timed
def compare(
    reports: list[dict], output_dir: str | os.PathLike, *, target_accuracy: float = 0.95
) -> dict:
    """Writes ``comparison.{json,md,html}`` for the runs; returns the comparison."""
    from distrain.compare import CompareConfig, write_comparison

    return write_comparison(output_dir, reports, CompareConfig(target_accuracy=target_accuracy))
