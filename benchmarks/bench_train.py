"""Training throughput: examples/second per mode and worker count on this machine.

Each configuration gets the same cores (threads per worker = cores / workers), so the
numbers compare modes, not thread counts. A script, not a test: it prints a table.

    .venv/bin/python benchmarks/bench_train.py [--runs single:1,sync:2] [--epochs 3]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import distrain  # noqa: F401
from distrain.steps import fetch, preprocess
from distrain.train.config import DEFAULT_RUNS, TrainConfig, parse_run_specs
from distrain.train.launch import run_training


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=",".join(DEFAULT_RUNS))
    parser.add_argument("--train-size", type=int, default=10000)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--model", default="mlp")
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    specs = parse_run_specs(args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        raw, data = Path(tmp, "raw"), Path(tmp, "data")
        fetch("mnist", "sample", raw, sample_size=args.train_size)
        preprocess("mnist", raw, data)
        results = []
        for spec in specs:
            cfg = TrainConfig(
                data_dir=str(data),
                output_dir=str(Path(tmp, spec.name.replace(":", "_"))),
                run=spec,
                model=args.model,
                epochs=args.epochs,
                batch_size=args.batch_size,
            )
            start = time.perf_counter()
            history = run_training(cfg)
            results.append(
                {
                    "run": spec.name,
                    "workers": spec.workers,
                    "threads_per_worker": cfg.threads,
                    "examples_per_second": history["examples_per_second"],
                    "train_seconds": history["train_seconds"],
                    "process_seconds": time.perf_counter() - start,
                    "val_accuracy": history["epochs"][-1]["val_accuracy"],
                }
            )
    base = next((r for r in results if r["run"] == "single:1"), None)
    header = (
        f"{'run':<14}{'workers':>8}{'threads/w':>10}{'examples/s':>12}"
        f"{'vs single':>10}{'train s':>9}{'wall s':>8}{'val acc':>9}"
    )
    print(
        f"\nTraining throughput, MNIST sample ({args.train_size} examples, {args.model}, "
        f"batch {args.batch_size}/worker, {os.cpu_count()} cores; first epoch excluded)"
    )
    print(header)
    print("-" * len(header))
    for r in results:
        ratio = r["examples_per_second"] / base["examples_per_second"] if base else float("nan")
        r["throughput_vs_single"] = ratio
        print(
            f"{r['run']:<14}{r['workers']:>8}{r['threads_per_worker']:>10}"
            f"{r['examples_per_second']:>12,.0f}{ratio:>10.2f}{r['train_seconds']:>9.1f}"
            f"{r['process_seconds']:>8.1f}{r['val_accuracy']:>9.4f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
