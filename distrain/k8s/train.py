"""A training run on Kubernetes: stage the data on the shared volume, run, collect."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import TextIO

from distrain.base.errors import TrainingError
from distrain.datasets import is_user_model
from distrain.k8s.api import KubeApi, not_found
from distrain.k8s.config import KubernetesConfig, request_timeout
from distrain.k8s.launcher import CUSTOM_KINDS, ClusterRun, add_owner, launcher_owner
from distrain.k8s.objects import build_objects, run_name
from distrain.k8s.validate import validate_all, validate_model_shipping
from distrain.k8s.watchdog import stall_watch
from distrain.learning import usermodel
from distrain.train.config import TrainConfig

# Every object and pod of a run carries its run key: what ties the attempts of one training
# task together (the ``distrain.dev/run`` label, by contrast, names one attempt's objects).
RUN_KEY_LABEL = "distrain.dev/run-key"
# How long a retry waits for the pods of an earlier attempt to be gone before it fails.
EARLIER_PODS_WAIT_SECONDS = 600.0


def needs_cluster(cfg: TrainConfig) -> bool:
    """Whether the run needs pods of its own (else it runs in the step's pod)."""
    return cfg.run.impl.needs_cluster()


# Where a run's directory on the claim holds the user's model file (beside data/, output/).
MODEL_DIR = "model"


def shipped_model(model: str, run_dir: Path) -> str:
    """The model reference the run's pods use: a user's file is shipped to the claim.

    A ``FILE.py:FUNCTION`` model is copied to ``<run_dir>/model/`` (by
    :func:`train_on_cluster`, with the data), which every pod mounts; a
    ``package.module:FUNCTION`` one is in the image and a built-in model in distrain:
    their reference is unchanged.
    """
    if not is_user_model(model):
        return model
    ref = usermodel.ModelReference.parse(model)
    if not ref.is_file:
        return model
    return ref.with_file(run_dir / MODEL_DIR / Path(ref.where).name)


def run_key(cfg: TrainConfig) -> str:
    """The key of a training task: its run directory on the claim and its label value.

    It is derived from the absolute output directory and the run spec, so that the
    attempts of one task share it and resume from each other's checkpoints. In KFP the
    output directory is the ``trained`` artifact's path, which the task's driver fixes
    once, before the executor pod runs (under the run's pipeline root, with the task's
    name and, in recent releases, a random salt per task); ``set_retry`` re-runs only that
    pod, with the same executor input, so a retry gets the same path, while another
    pipeline run or another task gets another one. The run spec is in the key too: the
    iterations of a ParallelFor share a task name. Outside KFP, a rerun into the same
    output directory resumes, as a local run does.

    The key is not taken from KFP's run and task id placeholders
    (``dsl.PIPELINE_JOB_ID_PLACEHOLDER`` ...): as component inputs they would enter the
    step's cache key, which holds its input values but not its output URIs, and the
    training step would then never be reused from the cache by a later run.

    Returns:
        ``<run spec, sanitized>-<16 hex digits>``: a DNS label of at most 47 characters,
        valid as a directory name and a label value.
    """
    spec = str(cfg.run)
    slug = re.sub(r"[^a-z0-9]+", "-", spec.lower()).strip("-")[:30].strip("-")
    digest = hashlib.sha256(f"{Path(cfg.output_dir).resolve()}\n{spec}".encode()).hexdigest()
    return f"{slug or 'run'}-{digest[:16]}"


def _label(objects: list[dict], key: str) -> None:
    """Adds the run key label to every object and to every pod template in it."""

    def add(metadata: dict) -> None:
        metadata["labels"] = {**(metadata.get("labels") or {}), RUN_KEY_LABEL: key}

    def walk(node) -> None:
        if isinstance(node, dict):
            template = node.get("template")
            if isinstance(template, dict) and isinstance(template.get("metadata"), dict):
                add(template["metadata"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    for obj in objects:
        add(obj.setdefault("metadata", {}))
        walk(obj.get("spec"))


def remove_earlier_attempts(
    api: KubeApi,
    namespace: str,
    key: str,
    kinds: set[str],
    *,
    poll_seconds: float = KubernetesConfig.poll_seconds,
    wait_seconds: float = EARLIER_PODS_WAIT_SECONDS,
    api_timeout_seconds: float = KubernetesConfig.api_timeout_seconds,
    out: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> list[tuple[str, str]]:
    """Deletes the objects an earlier attempt of the same task left, and waits for its pods.

    An attempt deletes its objects when it fails, but not when its own pod dies (evicted,
    OOM-killed, its node lost): then its MPIJob or chief may still be training, into the
    output directory the retry resumes from. Two writers of the same checkpoints would
    corrupt them, so the retry removes them first.

    Args:
        api: The Kubernetes APIs.
        namespace: Where the objects live.
        key: The run key (:func:`run_key`).
        kinds: The kinds of objects the run creates (``NetworkPolicy``, ``MPIJob``,
            ``TrainJob``, ``Job``, ``Service``).
        poll_seconds: Seconds between checks for remaining pods.
        wait_seconds: How long to wait for them.
        api_timeout_seconds: Request timeout of each API call (a server that accepts the
            connection and never answers fails the attempt instead of hanging it).
        out: Where progress goes.
        clock: Monotonic seconds (tests replace it).
        sleep: Sleeps (tests replace it).

    Returns:
        The ``(kind, name)`` of the objects deleted.

    Raises:
        TrainingError: An object could not be deleted, or pods were still there after
            ``wait_seconds``.
    """
    out = out or sys.stdout
    selector = f"{RUN_KEY_LABEL}={key}"
    timeout = request_timeout(api_timeout_seconds)
    found = _objects_of(api, namespace, selector, kinds, timeout)
    if found:
        print(
            f"[{key}] an earlier attempt left {len(found)} objects: deleting them",
            file=out,
            flush=True,
        )
        ClusterRun(
            api,
            [],
            key,
            namespace,
            api_timeout_seconds=api_timeout_seconds,
            out=out,
            created=list(found),
        ).cleanup()
    start = clock()
    while True:
        pods = api.core.list_namespaced_pod(
            namespace, label_selector=selector, _request_timeout=timeout
        ).items
        if not pods:
            return found
        if clock() - start > wait_seconds:
            names = ", ".join(sorted(p.metadata.name for p in pods))
            raise TrainingError(
                f"[{key}] pods of an earlier attempt are still there after "
                f"{wait_seconds:.0f} s: {names}"
            )
        print(f"[{key}] waiting for {len(pods)} pods of an earlier attempt", file=out, flush=True)
        sleep(poll_seconds)


def _objects_of(
    api: KubeApi, namespace: str, selector: str, kinds: set[str], timeout
) -> list[tuple[str, str]]:
    """The ``(kind, name)`` of the objects of ``kinds`` the label ``selector`` picks.

    In creation order (Services before Jobs): the deletion goes newest first. A custom
    kind whose operator is not installed has none.
    """
    found: list[tuple[str, str]] = []
    if "NetworkPolicy" in kinds:
        policies = api.networking.list_namespaced_network_policy(
            namespace, label_selector=selector, _request_timeout=timeout
        )
        found += [("NetworkPolicy", p.metadata.name) for p in policies.items]
    if "Service" in kinds:
        services = api.core.list_namespaced_service(
            namespace, label_selector=selector, _request_timeout=timeout
        )
        found += [("Service", s.metadata.name) for s in services.items]
    if "Job" in kinds:
        jobs = api.batch.list_namespaced_job(
            namespace, label_selector=selector, _request_timeout=timeout
        )
        found += [("Job", j.metadata.name) for j in jobs.items]
    for kind in sorted(kinds & set(CUSTOM_KINDS)):
        group, version, plural = CUSTOM_KINDS[kind]
        try:
            listed = api.custom.list_namespaced_custom_object(
                group, version, namespace, plural, label_selector=selector, _request_timeout=timeout
            )
        except Exception as err:  # noqa: BLE001 (no operator installed: nothing to delete)
            if not not_found(err):
                raise
            listed = {}
        found += [(kind, m["metadata"]["name"]) for m in listed.get("items") or []]
    return found


def train_on_cluster(
    cfg: TrainConfig,
    k: KubernetesConfig,
    api: KubeApi | None = None,
    *,
    name: str = "",
    key: str = "",
    out: TextIO | None = None,
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> dict:
    """Runs ``cfg`` as an MPIJob, a TrainJob or PS jobs; puts its outputs in ``cfg.output_dir``.

    The data are copied to ``<mount_path>/runs/<key>/data`` on the shared claim (mounted
    in this step's pod at the same path), the pods write to ``.../output``, and what they
    wrote is copied into ``cfg.output_dir``. The staged data are removed afterwards; the
    output (checkpoints included) stays on the claim. ``key`` (default:
    :func:`run_key`) is the same for every attempt of a task, a KFP retry included, so
    a retry finds the checkpoints of the attempt before it and resumes from them.

    Objects get a fresh name per attempt (``name``, default: :func:`run_name`), labelled
    with the key. Reusing one name would mix attempts: the launcher finds its pods by
    the name's label, and would see the previous attempt's failed or terminating pods
    as its own, and a create would collide with an object still being deleted. Instead,
    whatever an earlier attempt left (its pod killed before it could clean up) is deleted
    first (:func:`remove_earlier_attempts`).

    Returns:
        The run's history.

    Raises:
        TrainingError: The run failed, timed out, or wrote no history.
    """
    out = out or sys.stdout
    key = key or run_key(cfg)
    name = name or run_name(cfg)
    run_dir = Path(k.mount_path) / "runs" / key
    data, output = run_dir / "data", run_dir / "output"
    pod_cfg = _pod_config(cfg, k, run_dir)
    config_path = output / "train_config.json"
    objects, namespace = _checked_objects(pod_cfg, k, name, key, config_path)
    api = api or KubeApi.from_environment()
    # Nothing of an earlier attempt may still run when this one touches the directory.
    remove_earlier_attempts(
        api,
        namespace,
        key,
        {obj["kind"] for obj in objects},
        poll_seconds=k.poll_seconds,
        api_timeout_seconds=k.api_timeout_seconds,
        out=out,
        clock=clock,
        sleep=sleep,
    )
    resumes = (output / "checkpoints").is_dir()
    _stage(cfg, pod_cfg, run_dir, config_path)
    print(
        f"[{name}] {cfg.run.name} on Kubernetes: {len(objects)} objects in namespace "
        f"{namespace}, image {k.resolved_image()}, directory {run_dir}"
        + (" (resuming from an earlier attempt's checkpoints)" if resumes else ""),
        file=out,
        flush=True,
    )
    try:
        _cluster_run(api, objects, name, namespace, k, pod_cfg, out, clock, sleep).run()
    finally:
        shutil.rmtree(data, ignore_errors=True)
    return _collected(cfg, k, output, name, key, run_dir)


def _cluster_run(api, objects, name, namespace, k, pod_cfg, out, clock, sleep) -> ClusterRun:
    """What creates the run's objects, follows them to their end and cleans them up."""
    return ClusterRun(
        api,
        objects,
        name,
        namespace,
        poll_seconds=k.poll_seconds,
        timeout_seconds=k.timeout_seconds,
        schedule_timeout_seconds=k.schedule_timeout_seconds,
        api_timeout_seconds=k.api_timeout_seconds,
        api_retries=k.api_retries,
        log_reconnect_seconds=min(2.0, k.poll_seconds),
        out=out,
        clock=clock,
        sleep=sleep,
        # A rank that stops running ends the run, as locally (not the three-day deadline).
        watch=stall_watch(pod_cfg, Path(pod_cfg.output_dir), clock),
    )


def _pod_config(cfg: TrainConfig, k: KubernetesConfig, run_dir: Path) -> TrainConfig:
    """``cfg`` as the pods run it: the claim's directories, their threads, the shipped model."""
    # Pods see the node's cores, not their CPU limit: threads follow the limit, shared by
    # the ranks of a sync pod (one per GPU).
    threads = cfg.threads_per_worker or max(1, k.cpu_threads() // max(1, k.worker_gpus()))
    return replace(
        cfg,
        data_dir=str(run_dir / "data"),
        output_dir=str(run_dir / "output"),
        threads_per_worker=threads,
        model=shipped_model(cfg.model, run_dir),
    )


def _checked_objects(
    pod_cfg: TrainConfig, k: KubernetesConfig, name: str, key: str, config_path: Path
) -> tuple[list[dict], str]:
    """The run's objects, labelled with its key, owned by this step's pod, validated.

    Returns:
        The objects and their namespace.
    """
    objects = build_objects(pod_cfg, k, name, str(config_path))
    _label(objects, key)
    namespace = k.resolved_namespace()
    # Kubernetes deletes the objects with this step's pod, should it die before its clean-up.
    add_owner(objects, launcher_owner(namespace))
    validate_all(objects)
    validate_model_shipping(objects, pod_cfg.model)
    return objects, namespace


def _stage(cfg: TrainConfig, pod_cfg: TrainConfig, run_dir: Path, config_path: Path) -> None:
    """Puts the data, the user's model file and the pods' config on the claim.

    The data are staged afresh (a killed attempt may have left a partial copy); the
    output is kept: the checkpoints in it are what this attempt resumes from.
    """
    data = Path(pod_cfg.data_dir)
    shutil.rmtree(data, ignore_errors=True)
    shutil.copytree(cfg.data_dir, data)
    if pod_cfg.model != cfg.model:  # the user's model file, beside the data, for every pod
        usermodel.stage(cfg.model, run_dir / MODEL_DIR)
    Path(pod_cfg.output_dir).mkdir(parents=True, exist_ok=True)
    pod_cfg.save(config_path)


def _collected(
    cfg: TrainConfig, k: KubernetesConfig, output: Path, name: str, key: str, run_dir: Path
) -> dict:
    """Copies what the pods wrote into ``cfg.output_dir``; the history, with where it ran."""
    history_path = output / "history.json"
    if not history_path.exists():
        raise TrainingError(f"[{name}] the job succeeded but wrote no {history_path}")
    shutil.copytree(output, cfg.output_dir, dirs_exist_ok=True)
    history = json.loads(history_path.read_text())
    history["kubernetes"] = {"name": name, "run_key": key, "run_dir": str(run_dir), **k.to_dict()}
    Path(cfg.output_dir, "history.json").write_text(json.dumps(history, indent=2))
    return history
