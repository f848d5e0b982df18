"""The Kubernetes objects a training run needs, built as plain dicts (what the API takes).

Which shape a run takes is its mode's choice (:meth:`distrain.train.modes.Mode.kubernetes_objects`):

* ``sync`` with N ranks: one MPI Operator ``MPIJob`` (kubeflow.org/v2beta1). Its workers
  run sshd; its launcher, created once every worker is ready, runs ``mpirun`` with one rank
  per worker slot (one per GPU), each rank ``distrain worker --config FILE``.
* the same sync run with ``launcher=trainjob``: one Kubeflow Trainer v2 ``TrainJob``
  (trainer.kubeflow.org/v1alpha1) on distrain's Horovod ClusterTrainingRuntime
  (:func:`trainjob`).
* ``async`` / ``syncreplicas`` (and the other parameter-server modes, with either
  launcher): one ``Job`` and one headless ``Service`` per parameter
  server, per worker and for the chief. The parameter servers run ``distrain server``;
  the chief and the workers run ``distrain worker`` (each worker drives its own steps,
  between-graph). Each gets its role in ``TF_CONFIG`` with the Services' DNS names,
  exactly as the local launcher does with localhost ports. The parameter servers never
  exit on their own: the launcher deletes them.

Pods run the images' entrypoint (``distrain``) with the same subcommands as local
processes (:func:`distrain.train.engine.worker_args` / ``server_args``).
"""

from __future__ import annotations

import json
import re
import secrets
from typing import TYPE_CHECKING

from distrain.base.errors import ConfigError
from distrain.k8s.config import KubernetesConfig
from distrain.train.engine import server_args, worker_args
from distrain.train.ps.roles import tf_config

if TYPE_CHECKING:
    from distrain.train.config import TrainConfig

MPIJOB_API = ("kubeflow.org", "v2beta1", "mpijobs")
TRAINJOB_API = ("trainer.kubeflow.org", "v1alpha1", "trainjobs")
# The JobSet's replicated jobs of distrain's Horovod runtimes (manifests/trainer/), and the
# name of their training container, as Trainer's MPI plugin requires.
TRAINJOB_LAUNCHER, TRAINJOB_NODE, TRAINJOB_CONTAINER = "launcher", "node", "node"
# Every pod distrain creates meets Pod Security's "restricted" profile
# (tests/integration/test_manifests.py checks each rule on the rendered objects): non-root, no
# privilege escalation, no capabilities, the runtime's default seccomp filter. sshd (the MPI
# workers') runs as the same non-root user on port 2222 and needs none of them.
POD_SECURITY = {
    "runAsNonRoot": True,
    "runAsUser": 1000,
    "fsGroup": 1000,
    "seccompProfile": {"type": "RuntimeDefault"},
}
CONTAINER_SECURITY = {
    "allowPrivilegeEscalation": False,
    "capabilities": {"drop": ["ALL"]},
    "runAsNonRoot": True,
    "seccompProfile": {"type": "RuntimeDefault"},
}
NETWORK_API = ("networking.k8s.io", "v1", "networkpolicies")
RUN_LABEL = "distrain.dev/run"
ROLE_LABEL = "distrain.dev/role"
# The cluster's DNS, the one peer outside the run its pods may reach: kube-dns (CoreDNS on
# EKS and most clusters, kube-dns on GKE) carries k8s-app=kube-dns in kube-system, and
# every namespace has the kubernetes.io/metadata.name label (Kubernetes >= 1.22).
DNS_PEER = {
    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
    "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
}
# Kubeflow Trainer's controller, whose status server (KEP-2779, Trainer >= 2.2) a TrainJob's
# trainer reports its progress to (distrain.train.status), on its status-server port. Its pods
# carry these labels in Trainer's manifests (name "trainer") and Helm chart (name
# "kubeflow-trainer"), in whichever namespace it is installed.
TRAINER_STATUS_PEER = {
    "namespaceSelector": {},
    "podSelector": {
        "matchLabels": {
            "app.kubernetes.io/component": "manager",
            "app.kubernetes.io/part-of": "kubeflow",
        },
        "matchExpressions": [
            {
                "key": "app.kubernetes.io/name",
                "operator": "In",
                "values": ["trainer", "kubeflow-trainer"],
            }
        ],
    },
}
TRAINER_STATUS_PORT = 10443
SSHD_COMMAND = ["/usr/sbin/sshd", "-De", "-f", "/home/distrain/.sshd_config"]
SSH_AUTH_MOUNT_PATH = "/home/distrain/.ssh"


def run_name(cfg: TrainConfig) -> str:
    """A fresh name for a run's objects: a DNS label with room for role suffixes."""
    base = re.sub(r"[^a-z0-9-]+", "-", f"distrain-{cfg.run.mode}-{cfg.run.workers}").strip("-")
    return f"{base[:40]}-{secrets.token_hex(3)}"


def _metadata(name: str, k: KubernetesConfig, role: str) -> dict:
    """An object's name, namespace and labels."""
    return {"name": name, "namespace": k.resolved_namespace(), "labels": _labels(name, role)}


def _labels(name: str, role: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "distrain",
        "app.kubernetes.io/component": "training",
        RUN_LABEL: name,
        ROLE_LABEL: role,
    }


def _resources(k: KubernetesConfig, computes: bool) -> dict:
    """A container's resources: a computing pod's (shorthand and task), else CPU and memory."""
    if computes:
        return k.worker_resources()
    amounts = {"cpu": k.cpu_per_worker, "memory": k.memory_per_worker}
    return {"requests": amounts, "limits": dict(amounts)}


def placement(k: KubernetesConfig, computes: bool) -> dict:
    """Node selector, tolerations and affinity of a pod (the fields it sets).

    With GPUs, the placement (a GPU pool) applies to the pods that compute; the MPI
    launcher, the chief and parameter servers stay on ordinary nodes. Without GPUs it
    places every pod (a CPU pool of the user's choice).
    """
    spec: dict = {}
    if computes or not k.worker_gpus():
        if k.node_selector:
            spec["nodeSelector"] = dict(k.node_selector)
        if k.tolerations:
            spec["tolerations"] = [dict(t) for t in k.tolerations]
        if k.affinity:
            spec["affinity"] = json.loads(json.dumps(k.affinity))
    return spec


def data_volumes(k: KubernetesConfig) -> tuple[list[dict], list[dict]]:
    """The volumes and mounts of a pod that reads the data: the claim and the task's volumes."""
    volumes, mounts = [], []
    # The claim, unless a volume of the task's holds the mount path already (the pipeline
    # mounts the same claim on the task, or a KFP workspace replaces it).
    if k.volume_claim and not k.data_mount():
        volumes.append({"name": "data", "persistentVolumeClaim": {"claimName": k.volume_claim}})
        mounts.append({"name": "data", "mountPath": k.mount_path})
    names = {v["name"] for v in volumes}
    for volume in k.volumes:
        if volume["name"] in names:
            if volume in volumes:
                continue  # the same volume, passed twice
            raise ConfigError(f"the task's volume {volume['name']!r} clashes with another")
        names.add(volume["name"])
        volumes.append(json.loads(json.dumps(volume)))
    paths = set()
    for mount in k.volume_mounts:
        if mount["mountPath"] not in paths:
            paths.add(mount["mountPath"])
            mounts.append(json.loads(json.dumps(mount)))
    return volumes, mounts


def _pod_spec(
    k: KubernetesConfig,
    container: dict,
    *,
    data_volume: bool = True,
    restart_policy: str = "Never",
    computes: bool = True,
) -> dict:
    container["securityContext"] = json.loads(json.dumps(CONTAINER_SECURITY))
    spec: dict = {
        "restartPolicy": restart_policy,
        "serviceAccountName": k.service_account,
        "securityContext": json.loads(json.dumps(POD_SECURITY)),
        "containers": [container],
        **placement(k, computes),
    }
    if data_volume:
        spec["volumes"], container["volumeMounts"] = data_volumes(k)
    return spec


def _env(extra: dict[str, str] | None = None) -> list[dict]:
    env = {"TF_USE_LEGACY_KERAS": "1", "PYTHONUNBUFFERED": "1", **(extra or {})}
    return [{"name": k, "value": v} for k, v in env.items()]


def _ranks_and_slots(cfg: TrainConfig, k: KubernetesConfig) -> tuple[int, int]:
    ranks = cfg.run.processes  # hybrid:D:M has D x M
    slots = max(1, k.worker_gpus())
    if ranks % slots:
        raise ConfigError(
            f"sync:{ranks} with {slots} GPUs per worker pod: the ranks must fill whole pods"
        )
    return ranks, slots


def mpijob(cfg: TrainConfig, k: KubernetesConfig, name: str, mpirun_args: list[str]) -> dict:
    """The MPIJob of a Horovod run: ``cfg.run.processes`` ranks, one per worker slot.

    ``mpirun_args``: the launcher's mpirun arguments (the Horovod engine's,
    :func:`distrain.train.horovod.cluster_mpirun_args`).
    """
    ranks, slots = _ranks_and_slots(cfg, k)
    image = k.resolved_image()
    launcher = {
        "name": "launcher",
        "image": image,
        "command": ["mpirun"],
        "args": mpirun_args,
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
        "resources": _resources(k, computes=True),
    }
    run_policy: dict = {"cleanPodPolicy": "Running", "backoffLimit": 0}
    if k.timeout_seconds:
        run_policy["activeDeadlineSeconds"] = k.timeout_seconds
    return {
        "apiVersion": f"{MPIJOB_API[0]}/{MPIJOB_API[1]}",
        "kind": "MPIJob",
        "metadata": _metadata(name, k, "mpijob"),
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


def trainjob(cfg: TrainConfig, k: KubernetesConfig, name: str, mpirun_args: list[str]) -> dict:
    """The Kubeflow Trainer v2 TrainJob of a sync run (``launcher=trainjob``).

    It refers to distrain's Horovod ClusterTrainingRuntime (``manifests/trainer/``):
    ``mlPolicy.mpi`` with Open MPI and ``runLauncherAsNode``, as Trainer's own DeepSpeed
    runtime. Trainer makes one pod per node, ``numProcPerNode`` ranks each (one per GPU):
    the ``launcher`` pod runs ``mpirun`` and ranks of its own, the ``node`` pods run sshd,
    and Trainer's MPI plugin writes the hostfile and the SSH keys. The TrainJob gives the
    trainer's command, node count, slots and resources; everything else a pod needs
    (labels, volumes, service account, placement) goes in a ``runtimePatches`` entry,
    which Trainer v2.3 limits to those fields. The image is the runtime's: Trainer sets a
    TrainJob's image on the launcher only, and a launcher and nodes of different images
    would not run one job.
    """
    ranks, slots = _ranks_and_slots(cfg, k)
    nodes = ranks // slots
    if nodes < 2:
        # With runLauncherAsNode, Trainer v2.3 starts max(numNodes - 1, 1) node pods: a
        # one-pod run would hold a second pod's accelerators and never use them.
        raise ConfigError(
            f"{cfg.run.name} with {slots} ranks per pod fits one pod: a TrainJob on the MPI "
            "runtime needs at least 2 (use launcher=kubernetes, or fewer GPUs per worker)"
        )
    volumes, mounts = data_volumes(k)
    patches = []
    for job, role in ((TRAINJOB_LAUNCHER, "launcher"), (TRAINJOB_NODE, "worker")):
        pod: dict = {
            "serviceAccountName": k.service_account,
            # Every pod of this runtime computes (the launcher is a node too).
            **placement(k, computes=True),
            "volumes": volumes,
            "containers": [{"name": TRAINJOB_CONTAINER, "volumeMounts": mounts}],
        }
        patches.append(
            {
                "name": job,
                "template": {
                    "spec": {"template": {"metadata": {"labels": _labels(name, role)}, "spec": pod}}
                },
            }
        )
    spec: dict = {
        "runtimeRef": {
            "apiGroup": TRAINJOB_API[0],
            "kind": "ClusterTrainingRuntime",
            "name": k.resolved_trainjob_runtime(),
        },
        "trainer": {
            "command": ["mpirun"],
            "args": mpirun_args,
            "env": _env(),
            "numNodes": nodes,
            "numProcPerNode": slots,
            "resourcesPerNode": k.worker_resources(),
        },
        "runtimePatches": [
            {
                "manager": "distrain.dev/launcher",
                "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": patches}}},
            }
        ],
    }
    if k.timeout_seconds:
        spec["activeDeadlineSeconds"] = k.timeout_seconds
    return {
        "apiVersion": f"{TRAINJOB_API[0]}/{TRAINJOB_API[1]}",
        "kind": "TrainJob",
        "metadata": _metadata(name, k, "trainjob"),
        "spec": spec,
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
            args = server_args(k.cpu_threads(), cfg.output_dir)  # holds the variables
        else:
            # The chief and the workers train (each worker its own steps, between-graph);
            # their role comes from TF_CONFIG.
            args = worker_args(config_path)
        container = {
            "name": "tensorflow",
            "image": image,
            "args": args,
            "env": _env({"TF_CONFIG": tf_config(cluster, job, index)}),
            "ports": [{"name": "grpc", "containerPort": k.port}],
            "resources": _resources(k, computes=job == "worker"),
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
        # A deadline even when the run has none: parameter servers never exit on their own,
        # and a leaked one would hold its node's drain behind the PodDisruptionBudget.
        job_spec["activeDeadlineSeconds"] = k.timeout_seconds or k.job_deadline_seconds
        jobs.append(
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "metadata": {"name": obj_name, "namespace": ns, "labels": labels},
                "spec": job_spec,
            }
        )
    return services + jobs


def network_policy(name: str, k: KubernetesConfig, objects: list[dict]) -> dict:
    """The run's NetworkPolicy: its pods talk to the run's own pods and to DNS, nothing else.

    TensorFlow's gRPC servers and Horovod's MPI transport listen on every interface with no
    authentication, so nothing else in the cluster may reach them. Where the run has
    Services (the parameter-server modes), only their ports are open; an MPI run's ssh and
    TCP transport use ports chosen at run time, so all of them are open, to the run's pods.

    Egress is as narrow: the run's own pods and the cluster's DNS (:data:`DNS_PEER`, port
    53 over UDP and TCP), so the user's model code, which every pod runs, reaches neither
    the API server, nor a cloud metadata endpoint, nor the internet. A run names no
    object store: its data, checkpoints and model are on the shared volume, which the node
    mounts (a claim needs no network of the pod's own). A TrainJob's pods may also reach
    Kubeflow Trainer's controller on its status server's port (:data:`TRAINER_STATUS_PEER`),
    and only that: rank 0 reports the run's progress there (:mod:`distrain.train.status`).
    """
    services = [obj for obj in objects if obj["kind"] == "Service"]
    ports = sorted({port["targetPort"] for obj in services for port in obj["spec"]["ports"]})
    own_pods = {"podSelector": {"matchLabels": {RUN_LABEL: name}}}
    rule: dict = {"from": [own_pods]}
    if ports:
        rule["ports"] = [{"protocol": "TCP", "port": port} for port in ports]
    dns = {
        "to": [json.loads(json.dumps(DNS_PEER))],
        "ports": [{"protocol": proto, "port": 53} for proto in ("UDP", "TCP")],
    }
    status = []
    if any(obj["kind"] == "TrainJob" for obj in objects):
        status.append(
            {
                "to": [json.loads(json.dumps(TRAINER_STATUS_PEER))],
                "ports": [{"protocol": "TCP", "port": TRAINER_STATUS_PORT}],
            }
        )
    return {
        "apiVersion": f"{NETWORK_API[0]}/{NETWORK_API[1]}",
        "kind": "NetworkPolicy",
        "metadata": _metadata(name, k, "network"),
        "spec": {
            "podSelector": {"matchLabels": {RUN_LABEL: name}},
            "policyTypes": ["Ingress", "Egress"],
            "ingress": [rule],
            # Every port of the run's own pods: ranks and servers dial each other (mpirun's
            # daemons call back on ports chosen at run time).
            "egress": [{"to": [json.loads(json.dumps(own_pods))]}, dns, *status],
        },
    }


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

    The run's :func:`network_policy` comes first, then the mode's objects.

    With ``k.launcher == "trainjob"`` the mode's :meth:`~distrain.train.modes.Mode.trainjob_objects`
    (a TrainJob for sync and avg; the parameter-server modes keep their Jobs), else its
    :meth:`~distrain.train.modes.Mode.kubernetes_objects` (an MPIJob, or Jobs).

    Raises:
        ConfigError: The run does not need a cluster job (one worker) or does not fit the
            pods (sync ranks not a multiple of the GPUs per pod).
    """
    mode = cfg.run.impl
    if not mode.needs_cluster():
        raise ConfigError(f"{cfg.run.name} runs in the step's own pod, not as a cluster job")
    check_cluster_run(cfg)
    if k.launcher == "trainjob":
        objects = mode.trainjob_objects(cfg, k, name, config_path)
    else:
        objects = mode.kubernetes_objects(cfg, k, name, config_path)
    # The policy first: no pod of the run exists before it is in force.
    return [network_policy(name, k, objects), *objects]
