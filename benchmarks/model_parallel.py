"""Section 9 of the suite: the models under single, data-parallel and model-parallel runs.

For each model: time per epoch and peak memory per rank of ``single:1``, ``sync:2``,
``tensor:2`` and ``pipeline:2:micro=M`` (where the model can be split that way), and the
cost model's predicted step time of each split beside the measured one
(:mod:`distrain.base.costmodel`: tensor and pipeline steps, and seed 000's own count of one
epoch's example-at-a-time messages, eqs. 4-9), on the link the suite fitted in section 4.
The step time of one process on one core (``single:1`` pinned to a core) is the compute
both predictions start from.
"""

from __future__ import annotations

import os
from pathlib import Path


def _is_rank(command: list[str]) -> bool:
    """Whether a command line is a rank's or a worker's: ``python -m distrain worker``.

    Not mpirun, nor a child caught between fork and exec.
    """
    return command[1:4] == ["-m", "distrain", "worker"]


def bench_models(cfg, tmp: Path, link: tuple[float, float], log) -> dict:
    """Runs every model of :data:`cfg.model_setups` in single, sync, tensor and pipeline."""
    from benchmarks.common import raw_sample
    from distrain.base.costmodel import pipeline_step, profile, seed000_epoch, tensor_step
    from distrain.base.errors import ConfigError
    from distrain.base.memory import PeakProcessMemory
    from distrain.learning.models import build_model, load_info
    from distrain.steps import preprocess
    from distrain.train.config import TrainConfig
    from distrain.train.driver import steady
    from distrain.train.launch import run_training

    bandwidth, latency = link
    rows = []
    micro = cfg.model_micro
    for dataset, model_name in cfg.model_setups:
        size = dict(cfg.model_sizes).get(dataset, cfg.model_size)
        data = tmp / f"models-{dataset}-{size}"
        if not data.exists():
            preprocess(dataset, raw_sample(tmp, dataset, size), data)
        info = load_info(str(data), model_name)
        model = build_model(info, model_name, 0)
        prof = profile(model)
        runs = {}
        for run, cores in (
            ("single:1", "1 core"),
            ("single:1", "all cores"),
            ("sync:2", "all cores"),
            ("tensor:2", "all cores"),
            (f"pipeline:2:micro={micro}", "all cores"),
        ):
            key = f"{run} ({cores})" if run == "single:1" else run
            try:
                tc = TrainConfig(
                    data_dir=str(data),
                    output_dir=str(tmp / f"m-{dataset}-{model_name}-{len(runs)}"),
                    run=run,
                    model=model_name,
                    epochs=cfg.model_epochs,
                    batch_size=cfg.model_batch,
                    checkpoint_every_steps=0,
                    validation_freq=cfg.model_epochs,
                    threads_per_worker=1 if cores == "1 core" else 0,
                )
            except ConfigError as err:
                runs[key] = {"refused": str(err)}
                continue
            allowed = os.sched_getaffinity(0)
            if cores == "1 core":
                os.sched_setaffinity(0, {min(allowed)})
            try:
                with PeakProcessMemory(_is_rank) as memory:
                    history = run_training(tc)
            finally:
                os.sched_setaffinity(0, allowed)
            epochs = steady(history["epochs"])
            per_epoch = sum(e["step_seconds"] for e in epochs) / len(epochs)
            steps = history["steps"] / len(history["epochs"])
            runs[key] = {
                "epoch_seconds": per_epoch,
                "step_seconds": per_epoch / steps,
                "val_accuracy": history["epochs"][-1]["val_accuracy"],
                "peak_memory_per_rank": memory.per_process(),
                "parameters_per_rank": history.get("parameters_per_rank"),
            }
            log(f"  {dataset}/{model_name} {key}: {per_epoch:.2f} s/epoch")
        t1 = runs["single:1 (1 core)"]["step_seconds"]
        pipe = f"pipeline:2:micro={micro}"
        predictions = {  # a split the model refuses gets no prediction
            "tensor:2": tensor_step(t1, prof, cfg.model_batch, 2, bandwidth, latency)
            if "refused" not in runs["tensor:2"]
            else None,
            pipe: pipeline_step(t1, prof, cfg.model_batch, 2, micro, bandwidth, latency)
            if "refused" not in runs[pipe]
            else None,
        }
        examples = info.splits["train"]
        rows.append(
            {
                "dataset": dataset,
                "model": model_name,
                "size": size,
                "examples": examples,
                "parameters": prof["parameters"],
                "runs": runs,
                "predicted": predictions,
                "seed000": seed000_epoch(prof, examples, 2, bandwidth, latency),
            }
        )
    return {
        "rows": rows,
        "batch": cfg.model_batch,
        "micro": micro,
        "epochs": cfg.model_epochs,
        "size": cfg.model_size,
        "link": {"bytes_per_second": bandwidth, "latency_seconds": latency},
    }


def render_models(section: dict) -> list[str]:
    """Section 9 of BENCHMARKS.md."""

    def mb(values):
        return "/".join(f"{v / 2**20:,.0f}" for v in values) if values else "—"

    micro = section["micro"]
    pipe = f"pipeline:2:micro={micro}"
    lines = [
        "## 9. Models under data and model parallelism",
        "",
        "Each model on a generated sample (its training examples in the first column), batch "
        f"{section['batch']}, {section['epochs']} epochs (the first left out as warm-up): "
        "seconds per epoch and each rank's peak resident memory (MB, rank by rank). "
        "`single:1 (1 core)` is pinned to one core: the compute the predictions start "
        "from. Predicted step times use the link fitted in section 4 "
        f"({section['link']['bytes_per_second'] / 1e9:.2f} GB/s, "
        f"{section['link']['latency_seconds'] * 1e6:.0f} µs a message).",
        "",
        "| model | params | single:1 s/epoch | sync:2 | tensor:2 | "
        f"{pipe} | MB/rank single | sync:2 | tensor:2 | pipeline |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in section["rows"]:
        runs = row["runs"]

        def cell(key, runs=runs):
            r = runs.get(key) or {}
            return f"{r['epoch_seconds']:.2f}" if "epoch_seconds" in r else "refused"

        def memory(key, runs=runs):
            return mb((runs.get(key) or {}).get("peak_memory_per_rank"))

        lines.append(
            f"| {row['dataset']}/{row['model']} ({row.get('examples', section['size']):,}) | "
            f"{row['parameters']:,} | {cell('single:1 (all cores)')} | {cell('sync:2')} | "
            f"{cell('tensor:2')} | "
            f"{cell(pipe)} | {memory('single:1 (all cores)')} | {memory('sync:2')} | "
            f"{memory('tensor:2')} | {memory(pipe)} |"
        )
    lines += [
        "",
        "Step time, predicted by the cost model and measured (ms), and seed 000's own "
        "count of one epoch's messages (eqs. 4-9, example at a time) on the same link:",
        "",
        "| model | 1 core | tensor:2 predicted | measured | error | "
        f"{pipe} predicted | measured | error | seed 000: K | N (bytes) | s/epoch |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in section["rows"]:
        runs, pred, seed = row["runs"], row["predicted"], row["seed000"]
        t1 = runs["single:1 (1 core)"]["step_seconds"]

        def pair(key, runs=runs, pred=pred):
            measured = (runs.get(key) or {}).get("step_seconds")
            if pred.get(key) is None or measured is None:
                return "— | refused | —"
            p = pred[key]["step"]
            return f"{p * 1e3:.1f} | {measured * 1e3:.1f} | {p / measured - 1:+.0%}"

        counted = (
            f"{seed['K']:,.0f} | {seed['N']:,.0f} | {seed['seconds']:.2f}" if seed else "— | — | —"
        )
        lines.append(
            f"| {row['dataset']}/{row['model']} | {t1 * 1e3:.1f} | {pair('tensor:2')} | "
            f"{pair(pipe)} | {counted} |"
        )
    lines.append("")
    return lines
