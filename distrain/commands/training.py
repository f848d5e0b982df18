"""The training commands: ``train``, ``manifests``, and the processes' ``worker`` and ``server``.

``train`` is one run here, no pipeline; ``manifests`` prints what a launcher creates on
Kubernetes; ``worker`` and ``server`` are the process roles the launchers start.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from distrain.base.flags import add_flags, field_types, given
from distrain.base.verdict import repeat_summary
from distrain.cliflags import add_repeats
from distrain.commands import AddParser, check_repeats, models_help
from distrain.console import train_summary
from distrain.k8s.config import KubernetesConfig
from distrain.train.config import TrainConfig


def add_train(add: AddParser) -> None:
    """``distrain train``'s flags: every TrainConfig setting."""
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
        defaults={
            "model": ("", "the data set's first"),
            # The rate and batch of the data set's recipe (its pipeline's): SGD's rate is
            # per example and Adam's is not, so TrainConfig's one default fits no recipe.
            "learning_rate": (None, "the data set's pipeline default"),
            "batch_size": (None, "the data set's pipeline default"),
        },
        notes={"model": models_help()},
    )
    add_repeats(tr)
    tr.set_defaults(func=cmd_train)


def cmd_train(args: argparse.Namespace) -> int:
    """``distrain train``: one training run with local processes, no pipeline.

    With ``--repeats K`` (K > 1) the run is trained K times, seeds ``--seed``, ``--seed``
    + 1, ..., each into ``OUTPUT/seed-N``, and a last line gives the medians and 95 %
    intervals of its time, throughput and final validation accuracy.
    """
    from distrain.datasets import dataset_of
    from distrain.steps import train
    from distrain.train.config import RunSpec

    RunSpec.parse(args.run)  # a bad spec is refused before anything starts
    check_repeats(args.repeats)
    settings = given(args, TrainConfig.settings())  # every TrainConfig setting has a flag
    settings["model"] = args.model
    if not (args.model and {"learning_rate", "batch_size"} <= settings.keys()):
        data_set = dataset_of(args.data_dir)  # its metadata.json, read once
        settings["model"] = args.model or data_set.default_model
        if data_set.pipeline is not None:  # else TrainConfig's rate and batch apply
            settings.setdefault("learning_rate", data_set.pipeline.learning_rate)
            settings.setdefault("batch_size", data_set.pipeline.batch_size)
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


def add_manifests(add: AddParser) -> None:
    """``distrain manifests``'s flags."""
    man = add("manifests", help="print the Kubernetes objects the launcher would create for a run")
    man.add_argument("--run", required=True, help="MODE:WORKERS[:ps=P][:aggregate=A]")
    man.add_argument("--name", default="", help="object name prefix (default: generated)")
    man.add_argument("--model", default="mlp")
    man.add_argument("--namespace", default="distrain")
    man.add_argument("--image", default="", help="default: from distrain.base.images")
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


def cmd_manifests(args: argparse.Namespace) -> int:
    """``distrain manifests``: print the Kubernetes objects the launcher creates for a run."""
    import yaml

    from distrain.k8s.objects import build_objects, run_name
    from distrain.k8s.validate import validate_all

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


def add_roles(add: AddParser) -> None:
    """The process roles' flags: ``worker`` and ``server``, what the launchers start."""
    wk = add("worker", help="(launchers) one training process from a config file")
    wk.add_argument("--config", required=True, help="train_config.json written by a launcher")
    wk.set_defaults(func=cmd_worker)
    sv = add("server", help="(launchers) a PS-mode TF server; role from TF_CONFIG")
    sv.add_argument("--threads", type=int, default=1, help="intra-op threads")
    sv.add_argument("--output", default="", help="the run's output folder (its errors/)")
    sv.set_defaults(func=cmd_server)


def cmd_worker(args: argparse.Namespace) -> int:
    """``distrain worker``: one training process (what launchers start; not for users)."""
    from distrain.train import worker

    return worker.main(["--config", args.config])


def cmd_server(args: argparse.Namespace) -> int:
    """``distrain server``: a TF server of a PS-mode cluster, its role from TF_CONFIG."""
    from distrain.train import server

    return server.main(["--threads", str(args.threads), "--output", args.output])
