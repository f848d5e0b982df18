"""The ``distrain`` command line.

distrain data NAME --sample --output DIR     write a learnable sample in the data set's format
distrain data NAME --download --output DIR   fetch the real files (pinned, sha256-checked)
distrain preprocess NAME --data RAW --output EXAMPLES [-- BEAM OPTIONS]   the Beam job alone
distrain compile NAME --output NAME.yaml     compile the KFP pipeline
distrain run NAME [--data DIR] --output OUT  run the pipeline locally (kfp.local)
distrain train --data DIR --output OUT --run sync:2   one training run, no pipeline
distrain experiment consistency --output OUT  a seed paper's study, ending in one report
distrain list                                the data sets, models and modes installed, and whence
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import sys
import time
from pathlib import Path

import distrain
from distrain import datasets, experiments
from distrain.cliflags import add_repeats, add_tune, tune_settings
from distrain.console import finished, tensorboard_command, train_summary
from distrain.flags import add_flags, field_types, given
from distrain.k8s.config import KubernetesConfig
from distrain.listing import installed
from distrain.preprocess.outputs import hold
from distrain.submit import WAIT_HELP, WAIT_SECONDS
from distrain.train.config import PIPELINE_SETTINGS, TrainConfig
from distrain.verdict import repeat_summary

PIPELINES = tuple(datasets.names())
EXPERIMENTS = tuple(experiments.names())
# The training settings `distrain run` passes to a pipeline (its parameters).
PIPELINE_FIELDS = tuple(f for f in TrainConfig.settings() if f.name in PIPELINE_SETTINGS)


def _defaults(name: str):
    return datasets.get(name).pipeline


def cmd_data(args: argparse.Namespace) -> int:
    """``distrain data``: write the sample or download the real data."""
    from distrain.steps import fetch

    source = "sample" if args.sample else "download"
    if args.download and args.ids:  # what to download, for the data sets that ask for ids
        source = f"download:{args.ids}"
    summary = fetch(args.dataset, source, args.output, sample_size=args.sample_size, seed=args.seed)
    print(f"{args.dataset} ({source}) in {args.output}: {', '.join(summary['files'])}")
    return 0


def cmd_preprocess(args: argparse.Namespace) -> int:
    """``distrain preprocess``: the data set's Beam job alone, with any Beam options."""
    from distrain.steps import preprocess

    if not Path(args.data).is_dir():
        print(f"distrain: data directory {args.data} does not exist", file=sys.stderr)
        return 2
    start = time.perf_counter()
    meta = preprocess(
        args.dataset,
        args.data,
        args.output,
        validation_fraction=args.validation_fraction,
        seed=args.seed,
        beam_args=args.beam_args,
        overwrite=args.overwrite,
    )
    splits = ", ".join(f"{split} {count:,}" for split, count in meta["splits"].items())
    print(
        f"{args.dataset} preprocessed in {time.perf_counter() - start:.1f} s: {splits} examples, "
        f"{meta['rejected']['count']:,} rejected (dead letters in {args.output}/dead_letter); "
        f"metadata in {args.output}/metadata.json"
    )
    return 0


class _BeamOptionsParser(argparse.ArgumentParser):
    """A subcommand's parser that hands everything after the first ``--`` to Beam unparsed.

    argparse alone cannot take a variable list of option-like strings after ``--`` beside
    a positional argument; here they never reach it and land in ``beam_args``.
    """

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        beam_args = []
        if "--" in args:
            cut = args.index("--")
            args, beam_args = args[:cut], args[cut + 1 :]
        namespace, extras = super().parse_known_args(args, namespace)
        namespace.beam_args = beam_args
        return namespace, extras


def cmd_compile(args: argparse.Namespace) -> int:
    """``distrain compile``: write the pipeline's KFP IR YAML."""
    from kfp import compiler

    from distrain.pipelines.common import build_pipeline

    if args.pipeline in EXPERIMENTS:
        from distrain.pipelines.experiments.common import build_experiment_pipeline

        pipeline = build_experiment_pipeline(experiments.get(args.pipeline).config(args.scale))
    else:
        pipeline = build_pipeline(
            _defaults(args.pipeline),
            gpu=args.gpu,
            launcher=args.launcher,
            workspace_size=args.workspace_size,
            **tune_settings(args)[0],
        )
    compiler.Compiler().compile(pipeline, args.output)
    print(f"compiled {args.pipeline} pipeline to {args.output}")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    """``distrain run``: a pipeline locally (kfp.local), its failures told as in ``failures``."""
    from distrain.compare import render_text_table
    from distrain.train import usermodel
    from distrain.train.config import ConfigError, parse_run_specs

    # Refuse bad parameters before any work starts.
    specs = parse_run_specs(args.runs or ",".join(_defaults(args.pipeline).runs))
    _check_repeats(args.repeats)
    build, searched = tune_settings(args, local=True)  # the search's (distrain.cliflags)
    if args.plan:
        from distrain.plan import Plan

        Plan.parse(args.plan)
    if args.data is not None and not Path(args.data).is_dir():
        raise ConfigError(f"data directory {args.data} does not exist")
    if args.gate:
        from distrain.gate import parse_gate

        parse_gate(args.gate)

    from distrain.pipelines.common import build_pipeline

    defaults = _defaults(args.pipeline)
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
    task = _run_locally(
        build_pipeline(defaults, parallelism=1, cluster=False, **build), params, out
    )
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


def _run_locally(pipeline, params: dict, out: Path):
    """Runs ``pipeline(**params)`` with kfp.local, one step at a time, under ``out/kfp``.

    A step that fails permanently ends the run at once with its own line; a transient
    failure goes back to the step's retry policy.
    """
    from kfp import local

    from distrain.failures import StepFailed, local_retries_stop_on_permanent_errors

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


def _data_sources(given: list[str], names: list[str]) -> dict[str, str]:
    """``--data`` values (``DIR``, or ``DATASET=DIR`` per data set) as data set -> directory."""
    from distrain.train.config import ConfigError

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
    import dataclasses

    from distrain.experiments import DataSource, load_config
    from distrain.pipelines.experiments.common import (
        build_experiment_pipeline,
        pipeline_arguments,
    )
    from distrain.train.config import ConfigError

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
    task = _run_locally(pipeline, pipeline_arguments(cfg), out)
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


def _check_repeats(repeats: int) -> None:
    from distrain.steps import MAX_REPEATS
    from distrain.train.config import ConfigError

    if not 1 <= repeats <= MAX_REPEATS:
        raise ConfigError(f"--repeats must be between 1 and {MAX_REPEATS}, got {repeats}")


def cmd_train(args: argparse.Namespace) -> int:
    """``distrain train``: one training run with local processes, no pipeline.

    With ``--repeats K`` (K > 1) the run is trained K times, seeds ``--seed``, ``--seed``
    + 1, ..., each into ``OUTPUT/seed-N``, and a last line gives the medians and 95 %
    intervals of its time, throughput and final validation accuracy.
    """
    from distrain.datasets import default_model
    from distrain.steps import train
    from distrain.train.config import RunSpec

    RunSpec.parse(args.run)  # a bad spec is refused before anything starts
    _check_repeats(args.repeats)
    settings = given(args, TrainConfig.settings())  # every TrainConfig setting has a flag
    settings["model"] = args.model or default_model(args.data_dir)
    histories = []
    for i in range(args.repeats):
        settings["seed"] = seed = args.seed + i
        output = args.output_dir
        if args.repeats > 1:
            output = str(Path(output) / f"seed-{seed}")
        history = train(args.data_dir, output, args.run, **settings)
        print(train_summary(history, output))
        histories.append(history)
    if args.repeats > 1:
        print(json.dumps(repeat_summary(histories)))
    return 0


def cmd_worker(args: argparse.Namespace) -> int:
    """``distrain worker``: one training process (what launchers start; not for users)."""
    from distrain.train import worker

    return worker.main(["--config", args.config])


def cmd_server(args: argparse.Namespace) -> int:
    """``distrain server``: a TF server of a PS-mode cluster, its role from TF_CONFIG."""
    from distrain.train import server

    return server.main(["--threads", str(args.threads), "--output", args.output])


def cmd_manifests(args: argparse.Namespace) -> int:
    """``distrain manifests``: print the Kubernetes objects the launcher creates for a run."""
    import yaml

    from distrain.k8s.objects import build_objects, run_name
    from distrain.k8s.validate import validate_all
    from distrain.train.config import TrainConfig

    k = KubernetesConfig.from_params(
        namespace=args.namespace,
        image=args.image,
        gpus_per_worker=args.gpus_per_worker,
        node_selector=args.node_selector,
        tolerations=args.tolerations,
        volume_claim=args.volume_claim,
        launcher=args.launcher,
    )
    base = f"{k.mount_path}/runs/{args.name or 'RUN'}"
    cfg = TrainConfig(
        data_dir=f"{base}/data", output_dir=f"{base}/output", run=args.run, model=args.model
    )
    name = args.name or run_name(cfg)
    objects = build_objects(cfg, k, name, f"{base}/output/train_config.json")
    validate_all(objects)
    header = (
        f"# Generated by: distrain {' '.join(args.argv)}\n"
        f"# What the {k.launcher} launcher creates for {cfg.run.name}; it expects\n"
        f"# {base}/output/train_config.json and the data on the claim {k.volume_claim}.\n"
    )
    sys.stdout.write(header + yaml.safe_dump_all(objects, sort_keys=False))
    return 0


def cmd_faults(args: argparse.Namespace) -> int:
    """``distrain faults``: run the reliability matrix's tests and print the matrix."""
    from pathlib import Path

    from distrain.faults import run_matrix

    root = Path(args.root).resolve() if args.root else Path(__file__).resolve().parents[1]
    return run_matrix(root, quick=args.quick)


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


def cmd_list(args: argparse.Namespace) -> int:
    """``distrain list``: the data sets (with their models) and modes, and where each came from."""
    print("\n".join(installed()))
    return 0


def _models_help() -> str:
    """Each data set's models, its default first."""
    return "; ".join(f"{name}: {', '.join(datasets.get(name).models)}" for name in PIPELINES)


SAMPLE_HELP = "size of a generated sample (0: default): " + ", ".join(
    f"{name}: {datasets.get(name).sample_unit}" for name in PIPELINES
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="distrain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=distrain.__version__)
    # --debug before or after the subcommand: a failure prints its traceback too.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the traceback of a failure (steps and training processes too)",
    )
    parser.add_argument("--debug", action="store_true", help=debug._actions[0].help)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[debug], **kwargs)

    data = add("data", help="write sample data or download a data set")
    data.add_argument("dataset", choices=PIPELINES)
    how = data.add_mutually_exclusive_group(required=True)
    how.add_argument("--sample", action="store_true", help="generate the sample")
    how.add_argument("--download", action="store_true", help="download the real data")
    data.add_argument("--output", required=True)
    data.add_argument("--sample-size", type=int, default=0, help=SAMPLE_HELP)
    data.add_argument(
        "--ids", help="ids to download, comma-separated (data sets downloaded by id, e.g. books)"
    )
    data.add_argument("--seed", type=int, default=0)
    data.set_defaults(func=cmd_data)

    pre = add(
        "preprocess",
        help="run a data set's Beam preprocessing alone, on any Beam runner",
        usage=f"distrain preprocess {{{','.join(PIPELINES)}}} --data RAW --output EXAMPLES "
        "[--overwrite] "
        "[--validation-fraction F] [--seed S] [-- BEAM OPTIONS ...]",
        description="Run the Beam preprocessing job of a data set. Everything after -- "
        "goes to Beam as pipeline options, e.g. -- --runner=DataflowRunner --project P "
        "--region R --temp_location gs://B/tmp, -- --runner=FlinkRunner --flink_master "
        "HOST:PORT, -- --runner=DaskRunner --dask_client_address HOST:PORT or -- "
        "--direct_num_workers=2 (default: the local runner, in memory).",
    )
    pre.__class__ = _BeamOptionsParser  # add_parser makes a plain ArgumentParser
    pre.add_argument("dataset", choices=PIPELINES)
    pre.add_argument("--data", required=True, help="raw data directory")
    pre.add_argument("--output", required=True, help="where examples and metadata go")
    pre.add_argument("--validation-fraction", type=float, default=0.1)
    pre.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")
    pre.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an --output folder that holds files (whole, once the job succeeds); "
        "without it such a folder is refused, never mixed with the new output",
    )
    pre.set_defaults(func=cmd_preprocess)

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
        notes={"model": _models_help(), "seed": "also of the sample and the split"},
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

    tr = add(
        "train",
        help="one training run on preprocessed data",
        description="Train one run with local processes. Every flag is a TrainConfig setting "
        "(distrain.train.config), its default and help declared there.",
    )
    add_flags(
        tr,
        dataclasses.fields(TrainConfig),
        field_types(TrainConfig),
        defaults={"model": ("", "the data set's first")},
        notes={"model": _models_help()},
    )
    add_repeats(tr)
    tr.set_defaults(func=cmd_train)

    man = add("manifests", help="print the Kubernetes objects the launcher would create for a run")
    man.add_argument("--run", required=True, help="MODE:WORKERS[:ps=P][:aggregate=A]")
    man.add_argument("--name", default="", help="object name prefix (default: generated)")
    man.add_argument("--model", default="mlp")
    man.add_argument("--namespace", default="distrain")
    man.add_argument("--image", default="", help="default: from distrain.images")
    man.add_argument("--gpus-per-worker", type=int, default=KubernetesConfig.gpus_per_worker)
    man.add_argument("--node-selector", default="", help='JSON, e.g. {"pool": "gpu"}')
    man.add_argument("--tolerations", default="", help="JSON list of tolerations")
    man.add_argument("--volume-claim", default=KubernetesConfig.volume_claim)
    man.add_argument(
        "--launcher",
        choices=("kubernetes", "trainjob"),
        default="kubernetes",
        help="kubernetes: MPIJob / Jobs; trainjob: a Kubeflow Trainer v2 TrainJob for sync runs",
    )
    man.set_defaults(func=cmd_manifests)

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

    # Process roles: the launchers start these, locally and in the images' pods.
    wk = add("worker", help="(launchers) one training process from a config file")
    wk.add_argument("--config", required=True, help="train_config.json written by a launcher")
    wk.set_defaults(func=cmd_worker)
    sv = add("server", help="(launchers) a PS-mode TF server; role from TF_CONFIG")
    sv.add_argument("--threads", type=int, default=1, help="intra-op threads")
    sv.add_argument("--output", default="", help="the run's output folder (its errors/)")
    sv.set_defaults(func=cmd_server)

    ls = add(
        "list", help="list the data sets, models and modes installed, and where each came from"
    )
    ls.set_defaults(func=cmd_list)

    fl = add(
        "faults",
        help="run the bad-input and fault tests; print the reliability matrix, a line per case",
    )
    fl.add_argument("--root", help="repository checkout (default: this package's)")
    fl.add_argument("--quick", action="store_true", help="leave out the slow (minutes) cases")
    fl.set_defaults(func=cmd_faults)
    return parser


def _step_name(args: argparse.Namespace) -> str:
    """What a failure of the command is called in its one line."""
    if args.command == "train":
        return f"train {args.run}"
    if args.command == "experiment":
        return f"experiment {args.name or args.from_file}"
    if args.command in ("data", "run", "compile", "submit"):
        return f"{args.command} {getattr(args, 'dataset', None) or args.pipeline}"
    return args.command


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``distrain`` console script.

    A failure ends with one line, ``distrain: STEP failed: MESSAGE`` (the traceback
    before it with ``--debug``), and exit code 2 for bad input or parameters, 1 otherwise
    (:mod:`distrain.failures`).
    """
    import os

    from distrain.failures import DEBUG_ENV, Failure, StepFailed, report

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if getattr(args, "debug", False):
        os.environ[DEBUG_ENV] = "1"  # the steps and training processes inherit it
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("distrain: interrupted", file=sys.stderr)
        return 130
    except StepFailed as err:
        report(err.failure, err)
        return err.failure.exit_code
    except Exception as err:  # noqa: BLE001 (every failure ends with its one line)
        failure = Failure.of(_step_name(args), err)
        report(failure, err)
        return failure.exit_code


if __name__ == "__main__":
    sys.exit(main())
