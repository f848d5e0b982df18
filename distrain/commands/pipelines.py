"""The KFP pipeline commands: ``compile``, ``run``, ``experiment`` and ``submit``.

``run`` and ``experiment`` run a pipeline here, through kfp.local (:func:`run_locally`);
``submit`` sends one to a KFP server.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import time
from pathlib import Path

from distrain import datasets
from distrain.analysis import experiments
from distrain.base.flags import add_flags, field_types, given
from distrain.cliflags import add_repeats, add_tune, tune_settings
from distrain.commands import (
    EXPERIMENTS,
    PIPELINES,
    SAMPLE_HELP,
    AddParser,
    check_repeats,
    models_help,
    pipeline_defaults,
)
from distrain.console import finished, tensorboard_command
from distrain.preprocess.outputs import hold
from distrain.submit import WAIT_HELP, WAIT_SECONDS
from distrain.train.config import PIPELINE_SETTINGS, TrainConfig

# The training settings `distrain run` passes to a pipeline (its parameters).
PIPELINE_FIELDS = tuple(f for f in TrainConfig.settings() if f.name in PIPELINE_SETTINGS)


def add_compile(add: AddParser) -> None:
    """``distrain compile``'s flags."""
    comp = add("compile", help="compile a pipeline (a data set's or an experiment's) to KFP YAML")
    comp.add_argument("pipeline", choices=PIPELINES + EXPERIMENTS)
    comp.add_argument("--output", required=True)
    comp.add_argument(
        "--gpu",
        action="store_true",
        help="default to the GPU trainer image and one GPU per training step and worker",
    )
    comp.add_argument(
        "--launcher",
        choices=("local", "kubernetes", "trainjob"),
        default="local",
        help="default of the pipeline's launcher parameter",
    )
    comp.add_argument(
        "--workspace-size",
        default="",
        help="give the pipeline a KFP workspace of this size (e.g. 100Gi) for the training "
        "data and checkpoints, instead of the volume_claim parameter's claim",
    )
    comp.add_argument(
        "--scale",
        choices=experiments.SCALES,
        default="small",
        help="an experiment's scale, which sets its parameters' defaults",
    )
    add_tune(comp)
    comp.set_defaults(func=cmd_compile)


def cmd_compile(args: argparse.Namespace) -> int:
    """``distrain compile``: write the pipeline's KFP IR YAML."""
    from kfp import compiler

    from distrain.pipelines.common import build_pipeline

    if args.pipeline in EXPERIMENTS:
        from distrain.pipelines.experiments.common import build_experiment_pipeline

        pipeline = build_experiment_pipeline(experiments.get(args.pipeline).config(args.scale))
    else:
        pipeline = build_pipeline(
            pipeline_defaults(args.pipeline),
            gpu=args.gpu,
            launcher=args.launcher,
            workspace_size=args.workspace_size,
            **tune_settings(args)[0],
        )
    compiler.Compiler().compile(pipeline, args.output)
    print(f"compiled {args.pipeline} pipeline to {args.output}")
    return 0


def add_run(add: AddParser) -> None:
    """``distrain run``'s flags: the pipeline's parameters, each setting's declared once."""
    run = add("run", help="run a pipeline locally (kfp.local)")
    run.add_argument("pipeline", choices=PIPELINES)
    run.add_argument("--data", help="raw data directory (default: generate the sample)")
    run.add_argument("--output", required=True)
    run.add_argument(
        "--runs",
        help="comma-separated run specs MODE:WORKERS[:ps=P][:aggregate=A] "
        f"(default: {','.join(datasets.DEFAULT_RUNS)})",
    )
    add_flags(
        run,
        PIPELINE_FIELDS,
        field_types(TrainConfig),
        defaults={name: (None, "the pipeline's") for name in PIPELINE_SETTINGS},
        notes={"model": models_help(), "seed": "also of the sample and the split"},
    )
    add_repeats(run)
    run.add_argument("--sample-size", type=int, default=0, help=SAMPLE_HELP)
    run.add_argument("--target-accuracy", type=float, help="for time to target")
    run.add_argument(
        "--plan",
        metavar="workers=N[,gpus_per_worker=G][,link_gbps=L][,latency_us=U][,parameter_servers=P]",
        help="also predict each mode's time to target at that scale (steps measured at its "
        "batch and staleness, step time from the cost model on that link); a winner only "
        "outside the model's error",
    )
    run.add_argument("--gate", help="quality gate, e.g. 'accuracy>=0.97' (the run fails below)")
    run.add_argument(
        "--tensorboard",
        action="store_true",
        help="print the command that shows every run's TensorBoard curves while they train",
    )
    run.add_argument(
        "--open", action="store_true", help="open the HTML comparison in a web browser at the end"
    )
    add_tune(run)
    run.set_defaults(func=cmd_run)


def cmd_run(args: argparse.Namespace) -> int:
    """``distrain run``: a pipeline locally (kfp.local), its failures told as in ``failures``."""
    from distrain.analysis.compare import render_text_table
    from distrain.base.errors import ConfigError
    from distrain.learning import usermodel
    from distrain.train.config import parse_run_specs

    # Refuse bad parameters before any work starts.
    specs = parse_run_specs(args.runs or ",".join(pipeline_defaults(args.pipeline).runs))
    check_repeats(args.repeats)
    build, searched = tune_settings(args, local=True)  # the search's (distrain.cliflags)
    if args.plan:
        from distrain.analysis.plan import Plan

        Plan.parse(args.plan)
    if args.data is not None and not Path(args.data).is_dir():
        raise ConfigError(f"data directory {args.data} does not exist")
    if args.gate:
        from distrain.base.gate import parse_gate

        parse_gate(args.gate)

    from distrain.pipelines.common import build_pipeline

    defaults = pipeline_defaults(args.pipeline)
    out = Path(args.output).resolve()
    params = {
        "source": str(Path(args.data).resolve()) if args.data else "sample",
        "runs": [str(s) for s in specs],
        "repeats": args.repeats,
        "sample_size": args.sample_size,
        "serving_dir": str(out / "serving"),  # the export of the picked run, pushed
        **given(args, PIPELINE_FIELDS),  # the others: the pipeline's defaults
        **searched,
    }
    if params.get("model"):  # the user's model imported now, its file's path made absolute
        params["model"] = usermodel.resolve(params["model"])
    if args.target_accuracy is not None:
        params["target_accuracy"] = args.target_accuracy
    params.update({key: getattr(args, key) for key in ("gate", "plan") if getattr(args, key)})
    print(f"distrain: running the {args.pipeline} pipeline locally: {json.dumps(params)}")
    if args.tensorboard:  # each train step's event files, under its output in out/kfp
        print(f"distrain: watch the runs in TensorBoard: {tensorboard_command(out / 'kfp')}")
    start = time.perf_counter()
    task = run_locally(build_pipeline(defaults, parallelism=1, cluster=False, **build), params, out)
    comparison_dir = Path(task.output.path)
    for name in ("comparison.json", "comparison.md", "comparison.html"):
        shutil.copyfile(comparison_dir / name, out / name)
    comparison = json.loads((out / "comparison.json").read_text())
    if (out / "serving").is_dir():  # docs/production.md (before the table the tests read)
        print(f"\nthe picked run, exported for serving (with its InferenceService): {out}/serving")
    print()
    print(render_text_table(comparison))
    finished(out, "pipeline", "comparison", "table and plots", start, args.open)
    return 0


def run_locally(pipeline, params: dict, out: Path):
    """Runs ``pipeline(**params)`` with kfp.local, one step at a time, under ``out/kfp``.

    A step that fails permanently ends the run at once with its own line; a transient
    failure goes back to the step's retry policy.
    """
    from kfp import local

    from distrain.preprocess.failures import StepFailed, local_retries_stop_on_permanent_errors

    hold(out)  # one writer per output, till this process ends (distrain.preprocess.outputs)
    local.init(
        runner=local.SubprocessRunner(use_venv=False),
        pipeline_root=str(out / "kfp"),
        raise_on_error=True,
    )
    with local_retries_stop_on_permanent_errors() as failures:
        try:
            return pipeline(**params)
        except (RuntimeError, StepFailed) as err:
            if failures:  # the step's own words, not kfp.local's "inner task failed"
                raise StepFailed(failures[-1]) from err
            raise


def add_experiment(add: AddParser) -> None:
    """``distrain experiment``'s flags."""
    ex = add(
        "experiment",
        help="rerun a seed paper's study locally (kfp.local), ending in one report",
        description="Run an experiment: its training runs through kfp.local, then one report "
        "(report.json, .md, .html) of tables, plots and findings computed from the numbers. "
        f"Experiments: {', '.join(EXPERIMENTS)}.",
    )
    ex.add_argument("name", nargs="?", choices=EXPERIMENTS)
    ex.add_argument(
        "--from",
        dest="from_file",
        metavar="EXPERIMENT_JSON",
        help="run the configuration an earlier run wrote (same runs, seeds and splits)",
    )
    ex.add_argument(
        "--data",
        action="append",
        metavar="[DATASET=]DIR",
        help="raw data directory (default: the generated sample); DATASET=DIR per data set",
    )
    ex.add_argument("--output", help="default: out/experiments/NAME")
    ex.add_argument(
        "--scale",
        choices=experiments.SCALES,
        help="small (default: minutes on 2 cores), full, or tiny (tests)",
    )
    ex.add_argument("--seed", type=int, help="seed of the samples, splits and weights (default 0)")
    ex.add_argument("--open", action="store_true", help="open report.html at the end")
    ex.set_defaults(func=cmd_experiment)


def _data_sources(given: list[str], names: list[str]) -> dict[str, str]:
    """``--data`` values (``DIR``, or ``DATASET=DIR`` per data set) as data set -> directory."""
    from distrain.base.errors import ConfigError

    sources = {}
    for value in given:
        name, sep, directory = value.partition("=")
        if not sep:
            if len(names) != 1:
                raise ConfigError(f"--data {value}: say which data set, one of {', '.join(names)}")
            name, directory = names[0], value
        if name not in names:
            raise ConfigError(f"--data {value}: the experiment has no data set {name!r}")
        if not Path(directory).is_dir():
            raise ConfigError(f"data directory {directory} does not exist")
        sources[name] = str(Path(directory).resolve())
    return sources


def cmd_experiment(args: argparse.Namespace) -> int:
    """``distrain experiment``: a study of a seed paper, run locally, ending in one report.

    The configuration (``experiment.json``, written first) holds every run and seed;
    ``--from`` runs one again exactly.
    """
    from distrain.analysis.experiments import DataSource, load_config
    from distrain.base.errors import ConfigError
    from distrain.pipelines.experiments.common import (
        build_experiment_pipeline,
        pipeline_arguments,
    )

    if args.from_file:
        if args.name or args.scale or args.seed is not None:
            raise ConfigError("--from runs a configuration as it is: no NAME, --scale or --seed")
        cfg = load_config(args.from_file)
    elif args.name:
        seed = args.seed if args.seed is not None else 0
        cfg = experiments.get(args.name).config(args.scale or "small", seed=seed)
    else:
        raise ConfigError(f"name an experiment ({', '.join(EXPERIMENTS)}) or give --from")
    sources = _data_sources(args.data or [], cfg.datasets())
    if sources:
        cfg = dataclasses.replace(
            cfg,
            data=tuple(
                DataSource(d.dataset, sources[d.dataset], 0) if d.dataset in sources else d
                for d in cfg.data
            ),
        )
    out = hold(Path(args.output or f"out/experiments/{cfg.experiment}").resolve())
    (out / "experiment.json").write_text(cfg.to_json())
    print(
        f"distrain: experiment {cfg.experiment} ({cfg.scale}): {len(cfg.points)} runs on "
        f"{', '.join(cfg.datasets())}; configuration in {out}/experiment.json"
    )
    start = time.perf_counter()
    pipeline = build_experiment_pipeline(cfg, parallelism=1)
    task = run_locally(pipeline, pipeline_arguments(cfg), out)
    report_dir = Path(task.output.path)
    for item in report_dir.iterdir():
        target = out / item.name
        if item.is_dir():
            shutil.copytree(item, target, dirs_exist_ok=True)
        else:
            shutil.copyfile(item, target)
    report = json.loads((out / "report.json").read_text())
    print()
    for sentence in report["sentences"]:
        print(f"- {sentence}")
    finished(out, "experiment", "report", "tables, plots, findings", start, args.open)
    return 0


def add_submit(add: AddParser) -> None:
    """``distrain submit``'s flags."""
    sb = add("submit", help="compile, upload and run a pipeline on a KFP server (CI); wait; gate")
    sb.add_argument("pipeline", choices=PIPELINES)
    sb.add_argument("--host", required=True, help="KFP API endpoint, e.g. http://localhost:8080")
    sb.add_argument("--experiment", default="distrain")
    sb.add_argument(
        "--param",
        "--params",
        action="append",
        metavar="KEY=VALUE",
        help="pipeline parameter (repeatable); JSON values, e.g. runs='[\"sync:4\"]'",
    )
    sb.add_argument("--wait", action="store_true", help="wait for the run to finish")
    sb.add_argument(
        "--gate",
        help="quality gate, e.g. 'accuracy>=0.98' (implies --wait; exit 1 when it fails)",
    )
    sb.add_argument("--timeout", type=float, default=WAIT_SECONDS, help=WAIT_HELP)
    sb.add_argument("--poll-seconds", type=float, default=10.0)
    sb.add_argument("--namespace", help="KFP namespace (multi-user deployments)")
    sb.add_argument("--service-account", help="service account of the run's pods")
    sb.add_argument("--gpu", action="store_true", help="compile with the GPU defaults")
    sb.add_argument("--run-name")
    sb.set_defaults(func=cmd_submit)


def cmd_submit(args: argparse.Namespace) -> int:
    """``distrain submit``: compile, upload, run on a KFP server; wait; apply the gate."""
    from distrain.submit import SubmitConfig, parse_params, submit

    cfg = SubmitConfig(
        pipeline=args.pipeline,
        host=args.host,
        experiment=args.experiment,
        params=parse_params(args.param or []),
        gate=args.gate or "",
        wait=args.wait,
        timeout=args.timeout,
        poll_seconds=args.poll_seconds,
        namespace=args.namespace,
        service_account=args.service_account,
        gpu=args.gpu,
        run_name=args.run_name or "",
    )
    return submit(cfg)
