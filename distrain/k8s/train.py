"""A training run on Kubernetes: stage the data on the shared volume, run, collect."""

from __future__ import annotations

import json
import shutil
import sys
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from distrain.k8s.config import KubernetesConfig
from distrain.k8s.launcher import ClusterRun, KubeApi
from distrain.k8s.objects import build_objects, run_name
from distrain.k8s.validate import validate_all
from distrain.train.config import TrainConfig, TrainingError


def needs_cluster(cfg: TrainConfig) -> bool:
    """Whether the run needs pods of its own (else it runs in the step's pod)."""
    return cfg.run.mode != "single" and cfg.run.workers > 1


def train_on_cluster(
    cfg: TrainConfig,
    k: KubernetesConfig,
    api: KubeApi | None = None,
    *,
    name: str = "",
    out: TextIO | None = None,
) -> dict:
    """Runs ``cfg`` as an MPIJob or PS jobs and puts its outputs in ``cfg.output_dir``.

    The data are copied to ``<mount_path>/runs/<name>/data`` on the shared claim (mounted
    in this step's pod at the same path), the pods write to ``.../output``, and what they
    wrote is copied into ``cfg.output_dir``. The staged data are removed afterwards; the
    output (checkpoints included) stays on the claim for a rerun to resume from.

    Returns:
        The run's history.

    Raises:
        TrainingError: The run failed, timed out, or wrote no history.
    """
    out = out or sys.stdout
    name = name or run_name(cfg)
    run_dir = Path(k.mount_path) / "runs" / name
    data, output = run_dir / "data", run_dir / "output"
    shutil.copytree(cfg.data_dir, data, dirs_exist_ok=True)
    output.mkdir(parents=True, exist_ok=True)
    # Pods see the node's cores, not their CPU limit: threads follow the limit, shared by
    # the ranks of a sync pod (one per GPU).
    threads = cfg.threads_per_worker or max(1, k.cpu_threads() // max(1, k.gpus_per_worker))
    pod_cfg = replace(cfg, data_dir=str(data), output_dir=str(output), threads_per_worker=threads)
    config_path = pod_cfg.save(output / "train_config.json")
    objects = build_objects(pod_cfg, k, name, str(config_path))
    validate_all(objects)
    print(
        f"[{name}] {cfg.run.name} on Kubernetes: {len(objects)} objects in namespace "
        f"{k.resolved_namespace()}, image {k.resolved_image()}",
        file=out,
        flush=True,
    )
    try:
        ClusterRun(
            api or KubeApi.from_environment(),
            objects,
            name,
            k.resolved_namespace(),
            poll_seconds=k.poll_seconds,
            timeout_seconds=k.timeout_seconds,
            out=out,
        ).run()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    history_path = output / "history.json"
    if not history_path.exists():
        raise TrainingError(f"[{name}] the job succeeded but wrote no {history_path}")
    shutil.copytree(output, cfg.output_dir, dirs_exist_ok=True)
    history = json.loads(history_path.read_text())
    history["kubernetes"] = {"name": name, **k.to_dict()}
    Path(cfg.output_dir, "history.json").write_text(json.dumps(history, indent=2))
    return history
