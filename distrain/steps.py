"""The pipeline steps as plain functions: what each KFP component does, testable without KFP.

Components in ``components/`` are only interfaces: they call these and log metrics.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from distrain.train.config import RunSpec, TrainConfig


class StepError(ValueError):
    """A step's inputs are invalid; raised before any work starts."""


def fetch_mnist(
    source: str,
    output_dir: str | os.PathLike,
    *,
    sample_train_size: int = 10000,
    sample_test_size: int = 2000,
    seed: int = 0,
) -> dict:
    """Puts the four MNIST IDX files into ``output_dir``.

    Args:
        source: ``sample`` (generate the learnable procedural sample), ``download``
            (the pinned mirror, sha256-checked) or a directory holding the four files.
        output_dir: Destination directory.
        sample_train_size: Training images in a generated sample.
        sample_test_size: Test images in a generated sample.
        seed: Seed of a generated sample.

    Returns:
        A summary: source and file names.

    Raises:
        StepError: ``source`` is a directory that does not exist or lacks a file.
    """
    from distrain.data.idx import MNIST_FILES, mnist_paths

    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    if source == "sample":
        from distrain.data.mnist_sample import MnistSampleConfig, write_mnist_sample

        write_mnist_sample(
            out,
            MnistSampleConfig(train_size=sample_train_size, test_size=sample_test_size, seed=seed),
        )
    elif source == "download":
        from distrain.data.download import download_mnist

        download_mnist(out)
    else:
        src = Path(source)
        if not src.is_dir():
            raise StepError(f"MNIST source {source!r} is not 'sample', 'download' or a directory")
        for split in MNIST_FILES:
            for path in mnist_paths(src, split):
                if not path.exists():
                    raise StepError(f"{src}: missing MNIST file {path.name}")
                shutil.copyfile(path, out / path.name)
    files = sorted(p.name for p in out.iterdir())
    return {"source": source, "files": files}


def preprocess_mnist(
    raw_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    *,
    validation_fraction: float = 0.1,
    seed: int = 0,
    num_shards: int = 2,
    beam_args: list[str] | None = None,
) -> dict:
    """Runs the Beam preprocessing; returns the metadata it wrote."""
    from distrain.preprocess.mnist import MnistPreprocessConfig
    from distrain.preprocess.mnist import preprocess_mnist as run_beam

    cfg = MnistPreprocessConfig(
        input_dir=str(raw_dir),
        output_dir=str(output_dir),
        validation_fraction=validation_fraction,
        seed=seed,
        num_shards=num_shards,
    )
    return run_beam(cfg, beam_args or ["--runner=DirectRunner"])


def train(
    data_dir: str | os.PathLike,
    output_dir: str | os.PathLike,
    run_spec: str,
    **settings,
) -> dict:
    """Trains one run with local processes; returns its history.

    Args:
        data_dir: Preprocessed data.
        output_dir: Where the model, checkpoints and history go.
        run_spec: ``MODE:WORKERS[:ps=P][:aggregate=A]``.
        **settings: Any other :class:`TrainConfig` field (model, epochs, ...).
    """
    from distrain.train.launch import run_training

    cfg = TrainConfig(
        data_dir=str(data_dir), output_dir=str(output_dir), run=RunSpec.parse(run_spec), **settings
    )
    return run_training(cfg)


def evaluate(
    data_dir: str | os.PathLike, model_dir: str | os.PathLike, split: str = "test"
) -> dict:
    """Scores a trained run on a split and returns its run report.

    Args:
        data_dir: Preprocessed data.
        model_dir: A training step's output (``model.keras`` and ``history.json``).
        split: The split to score.

    Returns:
        ``{"run", "history", "evaluation"}``, the input of the comparison.
    """
    from distrain.evaluate import classification_metrics
    from distrain.train.inputs import DatasetInfo
    from distrain.train.predict import predict_split

    model_dir = Path(model_dir)
    history = json.loads((model_dir / "history.json").read_text())
    info = DatasetInfo.load(data_dir)
    y_true, y_pred = predict_split(model_dir / "model.keras", data_dir, split)
    names = info.class_names or [str(i) for i in range(info.num_classes)]
    evaluation = classification_metrics(y_true, y_pred, names)
    evaluation["split"] = split
    return {"run": history["run"], "history": history, "evaluation": evaluation}


def compare(
    reports: list[dict], output_dir: str | os.PathLike, *, target_accuracy: float = 0.95
) -> dict:
    """Writes ``comparison.{json,md,html}`` for the runs; returns the comparison."""
    from distrain.compare import CompareConfig, write_comparison

    return write_comparison(output_dir, reports, CompareConfig(target_accuracy=target_accuracy))
