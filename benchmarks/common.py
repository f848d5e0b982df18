"""What the sections of the benchmark suite share: its sizes, progress lines, samples,
training runs, Horovod ranks, number formats and the machine they ran on."""

from __future__ import annotations

import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS first)

ROOT = Path(__file__).resolve().parents[1]
PY = sys.executable


@dataclass(frozen=True)
class SuiteConfig:
    """Sizes of the suite's workloads (``quick`` shrinks every one for a smoke run).

    Attributes:
        quick: Tiny workloads: checks the suite runs, measures nothing meaningful.
        mnist_records: MNIST training images of the generated preprocessing sample.
        dbpedia_rows: DBPedia training rows of the generated preprocessing sample.
        gutenberg_chars: Gutenberg characters of the generated preprocessing sample.
        preprocess_tiles: Copies of each data set's sample in its timed preprocessing
            input (large enough for the work to stand out of the start-up noise, without
            generating that much data; MNIST's plain loop is the fastest per record, so
            it gets the most); a run on a tiny input of the same format gives the start-up.
        train_size: MNIST training images for the throughput runs (the preprocessing
            sample's, reused, when the sizes are equal).
        train_batch: Per-worker batch of the throughput runs.
        train_epochs: Epochs of the throughput runs (the first is excluded as warm-up).
        preprocess_repeats: Repeats of each preprocessing measure (medians are reported).
        dask_repeats: Repeats of each Dask-runner measure and its local one (section 1b).
        efficiency_repeats: Whole sync:2 runs, each between two one-worker, one-core
            runs (the median is reported, with the range): the run-by-run measure beside
            the paired phases.
        paired_groups: Groups of phases (sync, alone, each rank solo) of the phase-paired
            measure of sync efficiency (:mod:`benchmarks.paired_worker`); the median
            group's is the target's.
        paired_steps: Training steps per phase.
        peer_size: MNIST images (train and validation) of the peer comparison's data.
        peer_setups: (model, batch per worker, epochs) of the peer comparison: the
            MNIST defaults, where per-step overhead shows most, and the suite's CNN.
            The first epoch is warm-up; the others are timed, and enough of them that a
            run's timed part lasts several seconds (an epoch of the sample takes well
            under one), or one stall of the host moves a ratio by percents.
        peer_repeats: Repeats of each mode-and-peer pair (ranges are over them).
        link_gbps: Link bandwidth of the scaling plan (Gbit/s).
        link_latency_us: Link latency of the scaling plan (microseconds).
        model_setups: (data set, model) of section 9, the models under each split.
        model_size: Records of each data set's sample in section 9.
        model_sizes: ``(data set, size)`` where a data set's sample needs another size.
        model_batch: Batch (per data-parallel rank) of section 9.
        model_epochs: Epochs of section 9's runs (the first is warm-up).
        model_micro: Micro-batches of section 9's pipeline runs.
        full_size_repeats: Repeats of each preprocessing and one-epoch measure of
            section 11 (DBPedia up to 560,000 rows).
    """

    quick: bool = False
    mnist_records: int = 30000
    dbpedia_rows: int = 7000
    gutenberg_chars: int = 1_000_000
    preprocess_tiles: dict = field(
        default_factory=lambda: {"mnist": 8, "dbpedia": 6, "gutenberg": 12}
    )
    train_size: int = 30000
    train_batch: int = 1024
    train_epochs: int = 3
    preprocess_repeats: int = 3
    dask_repeats: int = 1
    efficiency_repeats: int = 1
    paired_groups: int = 12
    paired_steps: int = 8
    peer_size: int = 20000
    peer_setups: tuple = (("mlp", 64, 10), ("cnn", 1024, 20))
    peer_repeats: int = 3
    link_gbps: float = 10.0
    link_latency_us: float = 20.0
    model_setups: tuple = (
        ("mnist", "mlp"),
        ("mnist", "cnn"),
        ("mnist", "fc"),
        ("mnist", "cnn-seed"),
        ("mnist", "vgg11"),
        ("mnist", "convae"),
        ("dbpedia", "nbow"),
        ("gutenberg", "seq2seq"),
    )
    model_size: int = 6000
    # Gutenberg's sample is sized in characters: 400,000 make about 4,000 line pairs.
    model_sizes: tuple = (("gutenberg", 400_000),)
    model_batch: int = 256
    model_epochs: int = 3
    model_micro: int = 4
    full_size_repeats: int = 2

    @classmethod
    def small(cls, **kw) -> SuiteConfig:
        """The ``--quick`` sizes."""
        return cls(
            quick=True,
            mnist_records=1500,
            dbpedia_rows=1400,
            gutenberg_chars=60000,
            preprocess_tiles={"mnist": 1, "dbpedia": 1, "gutenberg": 1},
            train_size=3000,
            train_batch=256,
            train_epochs=2,
            preprocess_repeats=1,
            efficiency_repeats=1,
            paired_groups=2,
            paired_steps=3,
            peer_size=2000,
            peer_setups=(("mlp", 64, 2),),
            peer_repeats=1,
            model_setups=(("mnist", "mlp"),),
            model_size=1500,
            model_batch=64,
            model_epochs=2,
            **kw,
        )


def run_pipeline(cmd: list[str], work: Path) -> tuple[tuple, float, dict]:
    """Runs ``distrain run``; returns the load before it, its wall time and its comparison.

    Raises:
        RuntimeError: The command failed (its output's tail in the message).
    """
    load_before = os.getloadavg()
    start = time.perf_counter()
    done = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if done.returncode:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{tail}")
    return load_before, wall, json.loads((work / "comparison.json").read_text())


def json_lines(path: Path) -> list:
    """The records of a JSON-lines file (blank lines skipped)."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def log(message: str) -> None:
    """Progress on stderr, with the time, so a person can follow a long run."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def time_call(fn, *args) -> tuple[float, object]:
    start = time.perf_counter()
    value = fn(*args)
    return time.perf_counter() - start, value


def tile_sample(dataset: str, sample: Path, out: Path, tiles: int) -> Path:
    """``tiles`` copies of a raw sample, in the data set's own format (a larger input
    to time, without generating more data; every record is parsed and written again).

    MNIST: each IDX file holds its rows ``tiles`` times; DBPedia: each CSV file its rows;
    Gutenberg: every book is there ``tiles`` times under new names.
    """
    import numpy as np

    from distrain.datasets.mnist.idx import MNIST_FILES, read_idx, write_idx

    out.mkdir(parents=True, exist_ok=True)
    if dataset == "mnist":
        for names in MNIST_FILES.values():
            for name in names:
                write_idx(out / name, np.concatenate([read_idx(sample / name)] * tiles))
    elif dataset == "dbpedia":
        shutil.copy(sample / "classes.txt", out / "classes.txt")
        for name in ("train.csv", "test.csv"):
            data = (sample / name).read_bytes()
            if not data.endswith(b"\n"):
                data += b"\n"
            (out / name).write_bytes(data * tiles)
    else:
        for book in sorted(sample.glob("*.txt")):
            for i in range(tiles):
                shutil.copy(book, out / f"{book.stem}-copy{i}{book.suffix}")
    return out


def raw_sample(tmp: Path, dataset: str, size: int) -> Path:
    """A generated raw sample of ``size`` records (seed 1), made once per run."""
    from distrain.steps import fetch

    raw = tmp / f"{dataset}-sample-{size}"
    if not raw.exists():
        fetch(dataset, "sample", raw, sample_size=size, seed=1)
    return raw


def mnist_data(tmp: Path, size: int) -> Path:
    from distrain.steps import preprocess

    data = tmp / f"mnist-train-{size}"
    if not data.exists():
        preprocess("mnist", raw_sample(tmp, "mnist", size), data)
    return data


def train_config(
    data: Path,
    out: Path,
    run: str,
    cfg: SuiteConfig,
    threads=0,
    batch=0,
    controller="auto",
):
    from distrain.train.config import TrainConfig

    return TrainConfig(
        data_dir=str(data),
        output_dir=str(out),
        run=run,
        model="cnn",
        epochs=cfg.train_epochs,
        batch_size=batch or cfg.train_batch,
        threads_per_worker=threads,
        controller=controller,
    )


def train_run(
    data: Path,
    out: Path,
    run: str,
    cfg: SuiteConfig,
    cores=None,
    threads=0,
    batch=0,
    controller="auto",
) -> dict:
    from distrain.train.launch import run_training

    tc = train_config(data, out, run, cfg, threads, batch, controller)
    allowed = os.sched_getaffinity(0)
    if cores is not None:
        os.sched_setaffinity(0, cores)  # the launched processes inherit it
    try:
        return run_training(tc)
    finally:
        os.sched_setaffinity(0, allowed)


def speed(history: dict, workers: int = 1) -> tuple[float, float | None]:
    """A run's examples/second, and the same from its median step (None if not recorded).

    Examples/second is the mean over the run's steady steps; the median step is the
    typical one, which bursts of another load on the host (seconds long, one core at a
    time here) leave alone. ``workers``: batches per step (a sync run's ranks).
    """
    step = history.get("step_ms")
    batch = history["config"]["batch_size"] * workers
    typical = batch / (step["median"] / 1e3) if step else None
    return history["examples_per_second"], typical


def horovod_controller(controller: str = "auto") -> str:
    """The Horovod controller (``mpi`` or ``gloo``) sync:2 runs get here from ``controller``."""
    from distrain.train.horovod import sync_controller

    return sync_controller(sync_settings(controller))


def sync_settings(controller: str):
    """A sync:2 config with only its controller set: what the launcher decides from."""
    from distrain.train.config import TrainConfig

    return TrainConfig(data_dir="", output_dir="", run="sync:2", controller=controller)


def run_ranks(args: list[str], controller: str = "auto", env: dict | None = None) -> None:
    """Runs ARGS as two local Horovod ranks, started as sync runs start theirs.

    ``controller`` as :attr:`TrainConfig.controller`, with the launcher's environment for
    it; a failure raises with the end of the output.
    """
    from distrain.train.horovod import horovod_env, sync_command

    settings = sync_settings(controller)
    env = {**(env or os.environ), **horovod_env(settings)}
    cmd = sync_command(settings, args)
    done = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if done.returncode:
        tail = (done.stdout + done.stderr)[-3000:]
        raise RuntimeError(f"{' '.join(cmd)} exited {done.returncode}:\n{tail}")


def fmt(v, spec: str = ".2f", none: str = "—") -> str:
    """``v`` formatted by ``spec``, or ``none`` for a missing value."""
    return none if v is None else format(v, spec)


def span(values: list[float], pattern: str = "{:.2f}") -> str:
    """'min-max' of the values, or the one value."""
    if len(values) == 1:
        return pattern.format(values[0])
    return f"{pattern.format(min(values))}-{pattern.format(max(values))}"


def spread(values: list[float]) -> str:
    """'median (min-max)', or the one value."""
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def machine(cfg: SuiteConfig) -> dict:
    """What the numbers were measured on."""
    import apache_beam
    import horovod
    import kfp
    import tensorflow as tf

    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": time.strftime("%Y-%m-%d"),
        "cores": len(os.sched_getaffinity(0)),
        "cpu": cpu,
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "beam": apache_beam.__version__,
        "horovod": horovod.__version__,
        "kfp": kfp.__version__,
        "mpi": mpi_version(),
        "quick": cfg.quick,
    }


def mpi_version() -> str | None:
    """``Open MPI 4.1.8`` (what sync's MPI controller runs on), or None without MPI."""
    from distrain.train.horovod import venv_tool

    if horovod_controller() != "mpi":
        return None
    done = subprocess.run([venv_tool("mpirun"), "--version"], capture_output=True, text=True)
    first = done.stdout.splitlines()[0] if done.stdout else ""  # mpirun (Open MPI) 4.1.8
    return " ".join(first.replace("(", "").replace(")", "").split()[1:]) or None
