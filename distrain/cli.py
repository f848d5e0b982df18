"""The ``distrain`` command line.

distrain data mnist --sample --output DIR     write a learnable sample in MNIST's format
distrain data mnist --download --output DIR   fetch the real files (pinned, sha256-checked)
distrain compile mnist --output mnist.yaml    compile the KFP pipeline
distrain run mnist [--data DIR] --output OUT  run the pipeline locally (kfp.local)
distrain train --data DIR --output OUT --run sync:2   one training run, no pipeline
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from pathlib import Path

import distrain
from distrain.train.config import DEFAULT_RUNS

PIPELINES = ("mnist",)


def _pipeline_module(name: str):
    if name == "mnist":
        from distrain.pipelines import mnist

        return mnist
    raise SystemExit(f"distrain: unknown pipeline {name!r}; expected one of {', '.join(PIPELINES)}")


def cmd_data(args: argparse.Namespace) -> int:
    """``distrain data``: write the sample or download the real data."""
    from distrain.steps import fetch_mnist

    source = "sample" if args.sample else "download"
    summary = fetch_mnist(
        source,
        args.output,
        sample_train_size=args.train_size,
        sample_test_size=args.test_size,
        seed=args.seed,
    )
    print(f"{args.dataset} ({source}) in {args.output}: {', '.join(summary['files'])}")
    return 0


def cmd_compile(args: argparse.Namespace) -> int:
    """``distrain compile``: write the pipeline's KFP IR YAML."""
    from kfp import compiler

    module = _pipeline_module(args.pipeline)
    compiler.Compiler().compile(module.build_pipeline(), args.output)
    print(f"compiled {args.pipeline} pipeline to {args.output}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """``distrain run``: run a whole pipeline locally with kfp.local."""
    from kfp import local

    from distrain.compare import render_text_table
    from distrain.train.config import ConfigError, parse_run_specs

    # Refuse bad parameters before any work starts.
    try:
        specs = parse_run_specs(args.runs)
    except ConfigError as err:
        print(f"distrain: {err}", file=sys.stderr)
        return 2
    if args.data is not None and not Path(args.data).is_dir():
        print(f"distrain: data directory {args.data} does not exist", file=sys.stderr)
        return 2

    out = Path(args.output).resolve()
    out.mkdir(parents=True, exist_ok=True)
    module = _pipeline_module(args.pipeline)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(out / "kfp"),
        raise_on_error=True,
    )
    params = {
        "source": str(Path(args.data).resolve()) if args.data else "sample",
        "runs": [str(s) for s in specs],
        "model": args.model,
        "epochs": args.epochs,
        "seed": args.seed,
        "sample_train_size": args.train_size,
        "sample_test_size": args.test_size,
        "target_accuracy": args.target_accuracy,
    }
    print(f"distrain: running the {args.pipeline} pipeline locally: {json.dumps(params)}")
    start = time.perf_counter()
    task = module.build_pipeline(parallelism=1)(**params)
    comparison_dir = Path(task.output.path)
    for name in ("comparison.json", "comparison.md", "comparison.html"):
        shutil.copyfile(comparison_dir / name, out / name)
    comparison = json.loads((out / "comparison.json").read_text())
    print()
    print(render_text_table(comparison))
    print(f"\npipeline finished in {time.perf_counter() - start:.0f} s; ", end="")
    print(f"wrote {out}/comparison.json, comparison.md, comparison.html")
    return 0


def cmd_train(args: argparse.Namespace) -> int:
    """``distrain train``: one training run with local processes, no pipeline."""
    from distrain.steps import train

    history = train(
        args.data, args.output, args.run, model=args.model, epochs=args.epochs, seed=args.seed
    )
    print(json.dumps({k: v for k, v in history.items() if k not in ("epochs", "config")}))
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="distrain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=distrain.__version__)
    sub = parser.add_subparsers(dest="command", required=True)

    data = sub.add_parser("data", help="write sample data or download a data set")
    data.add_argument("dataset", choices=["mnist"])
    how = data.add_mutually_exclusive_group(required=True)
    how.add_argument("--sample", action="store_true", help="generate the sample")
    how.add_argument("--download", action="store_true", help="download the real data")
    data.add_argument("--output", required=True)
    data.add_argument("--train-size", type=int, default=10000)
    data.add_argument("--test-size", type=int, default=2000)
    data.add_argument("--seed", type=int, default=0)
    data.set_defaults(func=cmd_data)

    comp = sub.add_parser("compile", help="compile a pipeline to KFP YAML")
    comp.add_argument("pipeline", choices=PIPELINES)
    comp.add_argument("--output", required=True)
    comp.set_defaults(func=cmd_compile)

    run = sub.add_parser("run", help="run a pipeline locally (kfp.local)")
    run.add_argument("pipeline", choices=PIPELINES)
    run.add_argument("--data", help="raw data directory (default: generate the sample)")
    run.add_argument("--output", required=True)
    run.add_argument(
        "--runs",
        default=",".join(DEFAULT_RUNS),
        help="comma-separated run specs MODE:WORKERS[:ps=P][:aggregate=A]",
    )
    run.add_argument("--model", default="mlp")
    run.add_argument("--epochs", type=int, default=5)
    run.add_argument("--seed", type=int, default=0)
    run.add_argument("--train-size", type=int, default=10000, help="sample size (train)")
    run.add_argument("--test-size", type=int, default=2000, help="sample size (test)")
    run.add_argument("--target-accuracy", type=float, default=0.95)
    run.set_defaults(func=cmd_run)

    tr = sub.add_parser("train", help="one training run on preprocessed data")
    tr.add_argument("--data", required=True, help="preprocessed data directory")
    tr.add_argument("--output", required=True)
    tr.add_argument("--run", default="single:1", help="MODE:WORKERS[:ps=P][:aggregate=A]")
    tr.add_argument("--model", default="mlp")
    tr.add_argument("--epochs", type=int, default=5)
    tr.add_argument("--seed", type=int, default=0)
    tr.set_defaults(func=cmd_train)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``distrain`` console script."""
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
