"""The Kubernetes objects a training run needs, built as plain dicts (what the API takes).

Which shape a run takes is its mode's choice (:meth:`distrain.train.modes.Mode.kubernetes_objects`):

* ``sync`` with N ranks: one MPI Operator ``MPIJob`` (kubeflow.org/v2beta1). Its workers
  run sshd; its launcher, created once every worker is ready, runs ``mpirun`` with one rank
  per worker slot (one per GPU), each rank ``distrain worker --config FILE``.
* ``async`` / ``syncreplicas``: one ``Job`` and one headless ``Service`` per parameter
  server, per worker and for the chief. The parameter servers run ``distrain server``;
  the chief and the workers run ``distrain worker`` (each worker drives its own steps,
  between-graph). Each gets its role in ``TF_CONFIG`` with the Services' DNS names,
  exactly as the local launcher does with localhost ports. The parameter servers never
  exit on their own: the launcher deletes them.

Pods run the images' entrypoint (``distrain``) with the same subcommands as local
processes (:func:`distrain.train.launch.worker_args` / ``server_args``).
"""

from __future__ import annotations

import re
import secrets

from distrain.k8s.config import KubernetesConfig
from distrain.train.config import ConfigError, TrainConfig
from distrain.train.launch import (
    MPI_ENV,
    MPIRUN_EXPORTS,
    MPIRUN_OPTIONS,
    mca_options,
    server_args,
    tf_config,
    worker_args,
)

MPIJOB_API = ("kubeflow.org", "v2beta1", "mpijobs")
RUN_LABEL = "distrain.dev/run"
ROLE_LABEL = "distrain.dev/role"
SSHD_COMMAND = ["/usr/sbin/sshd", "-De", "-f", "/home/distrain/.sshd_config"]
SSH_AUTH_MOUNT_PATH = "/home/distrain/.ssh"


def run_name(cfg: TrainConfig) -> str:
    """A fresh name for a run's objects: a DNS label with room for role suffixes."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"distrain-{cfg.run.mode}-{cfg.run.workers}").strip("-")
    return f"{base[:40]}-{secrets.token_hex(3)}"


def _labels(name: str, role: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "distrain",
        "app.kubernetes.io/component": "training",
        RUN_LABEL: name,
        ROLE_LABEL: role,
    }


def _resources(k: KubernetesConfig, gpus: int) -> dict:
    amounts = {"cpu": k.cpu_per_worker, "memory": k.memory_per_worker}
    limits = dict(amounts)
    if gpus:
        limits["nvidia.com/gpu"] = str(gpus)
    return {"requests": amounts, "limits": limits}


def _pod_spec(
    k: KubernetesConfig,
    container: dict,
    *,
    data_volume: bool = True,
    restart_policy: str = "Never",
    computes: bool = True,
) -> dict:
    spec: dict = {
        "restartPolicy": restart_policy,
        "serviceAccountName": k.service_account,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "fsGroup": 1000},
        "containers": [container],
    }
    # With GPUs, the node selector and tolerations (a GPU pool) apply to the pods that
    # compute; the MPI launcher, the chief and parameter servers stay on ordinary nodes.
    # Without GPUs they place every pod (a CPU pool of the user's choice).
    if computes or not k.gpus_per_worker:
        if k.node_selector:
            spec["nodeSelector"] = dict(k.node_selector)
        if k.tolerations:
            spec["tolerations"] = [dict(t) for t in k.tolerations]
    if data_volume:
        spec["volumes"] = [{"name": "data", "persistentVolumeClaim": {"claimName": k.volume_claim}}]
        container["volumeMounts"] = [{"name": "data", "mountPath": k.mount_path}]
    return spec


def _env(extra: dict[str, str] | None = None) -> list[dict]:
    env = {"TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1", **(extra or {})}
    return [{"name": k, "value": v} for k, v in env.items()]


def mpijob(cfg: TrainConfig, k: KubernetesConfig, name: str, config_path: str) -> dict:
    """The MPIJob of a Horovod run: ``cfg.run.processes`` ranks, one per worker slot."""
    ranks = cfg.run.processes
    slots = max(1, k.gpus_per_worker)
    if ranks % slots:
        raise ConfigError(
            f"sync:{ranks} with {slots} GPUs per worker pod: the ranks must fill whole pods"
        )
    image = k.resolved_image()
    # [sync, MPI] CPU ranks share their cores with TensorFlow's compute threads: their MPI
    # waits yield the core, as local runs' do (MPI_ENV). As options of mpirun, which hands
    # them to the ranks it starts over ssh in the worker pods. GPU ranks keep busy-polling.
    yield_idle = [] if k.gpus_per_worker else mca_options(MPI_ENV)
    launcher = {
        "name": "launcher",
        "image": image,
        "command": ["mpirun"],
        "args": [
            "-np",
            str(ranks),
            *MPIRUN_OPTIONS,
            *yield_idle,
            *[arg for name in MPIRUN_EXPORTS for arg in ("-x", name)],
            "distrain",
            *worker_args(config_path),
        ],
        "env": _env(),
        "resources": {
            "requests": {"cpu": "500m", "memory": "512Mi"},
            "limits": {"cpu": "1", "memory": "1Gi"},
        },
    }
    worker = {
        "name": "worker",
        "image": image,
        "command": list(SSHD_COMMAND),
        "env": _env(),
        "resources": _resources(k, k.gpus_per_worker),
    }
    run_policy: dict = {"cleanPodPolicy": "Running", "backoffLimit": 0}
    if k.timeout_seconds:
        run_policy["activeDeadlineSeconds"] = k.timeout_seconds
    return {
        "apiVersion": f"{MPIJOB_API[0]}/{MPIJOB_API[1]}",
        "kind": "MPIJob",
        "metadata": {
            "name": name,
            "namespace": k.resolved_namespace(),
            "labels": _labels(name, "mpijob"),
        },
        "spec": {
            "slotsPerWorker": slots,
            "runPolicy": run_policy,
            "sshAuthMountPath": SSH_AUTH_MOUNT_PATH,
            "launcherCreationPolicy": "WaitForWorkersReady",
            "mpiImplementation": "OpenMPI",
            "mpiReplicaSpecs": {
                "Launcher": {
                    "replicas": 1,
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"labels": _labels(name, "launcher")},
                        "spec": _pod_spec(k, launcher, data_volume=False, computes=False),
                    },
                },
                "Worker": {
                    "replicas": ranks // slots,
                    "restartPolicy": "Never",
                    "template": {
                        "metadata": {"labels": _labels(name, "worker")},
                        "spec": _pod_spec(k, worker),
                    },
                },
            },
        },
    }


def ps_cluster(cfg: TrainConfig, k: KubernetesConfig, name: str) -> dict[str, list[str]]:
    """TF's cluster spec of a PS-mode run: the Services' names (same namespace)."""

    def address(task: str) -> str:
        return f"{name}-{task}:{k.port}"

    return {
        "chief": [address("chief")],
        "worker": [address(f"worker-{i}") for i in range(cfg.run.workers)],
        "ps": [address(f"ps-{i}") for i in range(cfg.run.parameter_servers)],
    }


def ps_objects(cfg: TrainConfig, k: KubernetesConfig, name: str, config_path: str) -> list[dict]:
    """The Services and Jobs of an async or syncreplicas run (Services first)."""
    ns = k.resolved_namespace()
    cluster = ps_cluster(cfg, k, name)
    image = k.resolved_image()
    tasks = [("chief", 0)]
    tasks += [("worker", i) for i in range(cfg.run.workers)]
    tasks += [("ps", i) for i in range(cfg.run.parameter_servers)]
    services, jobs = [], []
    for job, index in tasks:
        task = "chief" if job == "chief" else f"{job}-{index}"
        obj_name = f"{name}-{task}"
        labels = _labels(name, job)
        labels["distrain.dev/task"] = task
        if job == "ps":
            args, gpus = server_args(k.cpu_threads()), 0  # holds the variables
        else:
            # The chief and the workers train (each worker its own steps, between-graph);
            # their role comes from TF_CONFIG.
            args = worker_args(config_path)
            gpus = k.gpus_per_worker if job == "worker" else 0
        container = {
            "name": "tensorflow",
            "image": image,
            "args": args,
            "env": _env({"TF_CONFIG": tf_config(cluster, job, index)}),
            "ports": [{"name": "grpc", "containerPort": k.port}],
            "resources": _resources(k, gpus),
        }
        services.append(
            {
                "apiVersion": "v1",
                "kind": "Service",
                "metadata": {"name": obj_name, "namespace": ns, "labels": labels},
                "spec": {
                    "clusterIP": "None",
                    "publishNotReadyAddresses": True,
                    "selector": {RUN_LABEL: name, "distrain.dev/task": task},
                    "ports": [{"name": "grpc", "port": k.port, "targetPort": k.port}],
                },
            }
        )
        job_spec: dict = {
            "backoffLimit": 0,
            "template": {
                "metadata": {"labels": labels},
                # The chief (validation) and the workers (training) read the data;
                # parameter servers do not.
                "spec": _pod_spec(k, container, data_volume=job != "ps", computes=job == "worker"),
            },
        }
        if k.timeout_seconds:
            job_spec["activeDeadlineSeconds"] = k.timeout_seconds
        jobs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": obj_name, "namespace": ns, "labels": labels},
                "spec": job_spec,
            }
        )
    return services + jobs


def check_cluster_run(cfg: TrainConfig) -> None:
    """Refuses the settings of a multi-worker run that a cluster job cannot honour.

    The mode decides (an elastic sync run, or a sync run asking for the gloo controller,
    for example: the MPI Operator starts a fixed set of ranks with ``mpirun``).

    Raises:
        ConfigError: A setting the run's mode cannot honour on Kubernetes.
    """
    cfg.run.impl.check_kubernetes(cfg)


def build_objects(cfg: TrainConfig, k: KubernetesConfig, name: str, config_path: str) -> list[dict]:
    """Every object the launcher creates for a run, in creation order (the mode's choice).

    Raises:
        ConfigError: The run does not need a cluster job (one worker) or does not fit the
            pods (sync ranks not a multiple of the GPUs per pod).
    """
    mode = cfg.run.impl
    if not mode.needs_cluster():
        raise ConfigError(f"{cfg.run.name} runs in the step's own pod, not as a cluster job")
    check_cluster_run(cfg)
    return mode.kubernetes_objects(cfg, k, name, config_path)
