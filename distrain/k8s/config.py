"""Where and how a training run's pods run on Kubernetes: one typed config."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from distrain.base.errors import ConfigError
from distrain.base.images import image

LAUNCHERS = ("local", "kubernetes", "trainjob")
# The cluster launchers: MPIJob + Jobs (MPI Operator), or Kubeflow Trainer v2 TrainJobs.
CLUSTER_LAUNCHERS = ("kubernetes", "trainjob")
# Extended resources that count as accelerators of a worker pod (a sync rank per unit).
GPU_RESOURCES = ("nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915")
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$")
_CPU = re.compile(r"^\d+(\.\d+)?m?$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}
# The volume sources a task may pass through to the training pods: those Pod Security's
# "restricted" profile admits. hostPath (a node's files), and the rest, are refused.
VOLUME_SOURCES = (
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
)


def request_timeout(seconds: float) -> tuple[float, float] | None:
    """The ``_request_timeout`` of a Kubernetes API call bounded by ``seconds`` (0: None).

    A ``(connect, read)`` pair: the client silently ignores a plain number that is not an
    int (kubernetes 30's rest.py), so 0.5 would mean no timeout at all.
    """
    return (seconds, seconds) if seconds else None


@dataclass(frozen=True)
class KubernetesConfig:
    """The cluster side of a training run with ``launcher=kubernetes`` or ``trainjob``.

    Placement comes from two places: the fields below (the pipeline's shorthand
    parameters) and the training task's own settings, passed through by KFP as a
    ``dsl.TaskConfig`` (:meth:`with_task_config`): its resources, node selector,
    tolerations, affinity and volumes reach the pods that compute.

    Attributes:
        namespace: Namespace of the pods (default: the step's own, else ``distrain``).
        image: Trainer image (default: ``trainer-gpu`` when GPUs are asked for, else
            ``trainer``, both from :mod:`distrain.base.images`).
        gpus_per_worker: ``nvidia.com/gpu`` limit of each worker pod (0: CPU only). A sync
            run puts one Horovod rank on each GPU.
        cpu_per_worker: CPU request and limit of each training pod (Kubernetes quantity).
        memory_per_worker: Memory request and limit of each training pod.
        node_selector: Node labels the training pods must match (a GPU node pool).
        tolerations: Tolerations of the training pods (for tainted GPU nodes).
        volume_claim: PersistentVolumeClaim (ReadWriteMany) shared by the step and the pods
            for the data, checkpoints and the trained model.
        mount_path: Where the claim is mounted in every pod.
        service_account: Service account of the training pods.
        port: Port of the TensorFlow servers (PS modes).
        timeout_seconds: Deadline of the whole run: the launcher gives up and deletes it,
            and its jobs carry it as ``activeDeadlineSeconds``. Three days by default, so
            that a run nobody watches cannot hold its nodes for ever (0: none, but
            ``job_deadline_seconds`` on a parameter-server run's Jobs).
        job_deadline_seconds: ``activeDeadlineSeconds`` of a parameter-server run's Jobs when
            ``timeout_seconds`` is 0 (parameter servers never exit on their own: a leaked one
            would hold its node's drain behind the PodDisruptionBudget). Three days.
        poll_seconds: Seconds between status polls.
        launcher: ``kubernetes`` (MPIJob, Jobs) or ``trainjob`` (Kubeflow Trainer v2).
        trainjob_runtime: The ClusterTrainingRuntime of sync TrainJobs (default:
            ``distrain-horovod-gpu`` when the workers have GPUs, else ``distrain-horovod``,
            both in ``manifests/trainer/``).
        schedule_timeout_seconds: A pod that cannot be scheduled (or no pod at all) for this
            long fails the run with the scheduler's message (0: wait for ever).
        api_timeout_seconds: Request timeout of every Kubernetes API call: an API server
            that accepts a connection and never answers fails the call (a transient error,
            retried ``api_retries`` times) instead of hanging the step.
        api_retries: Attempts of a Kubernetes API call that failed transiently (429, 5xx,
            a reset connection), with exponential backoff.
        resources: Container resources of each computing pod from the task
            (``TaskConfig.resources``); the keys it names replace the shorthand's.
        affinity: Pod affinity of the computing pods (``TaskConfig.affinity``).
        volumes: Extra pod volumes (``TaskConfig.volumes``: the task's PVCs, a KFP workspace).
        volume_mounts: Their mounts in the training containers (``TaskConfig.volume_mounts``).
    """

    namespace: str = ""
    image: str = ""
    gpus_per_worker: int = 0
    cpu_per_worker: str = "2"
    memory_per_worker: str = "4Gi"
    node_selector: dict[str, str] = field(default_factory=dict)
    tolerations: list[dict] = field(default_factory=list)
    volume_claim: str = "distrain-data"
    mount_path: str = "/mnt/distrain"
    service_account: str = "distrain"
    port: int = 2222
    timeout_seconds: int = 3 * 24 * 3600
    job_deadline_seconds: int = 3 * 24 * 3600
    poll_seconds: float = 5.0
    launcher: str = "kubernetes"
    trainjob_runtime: str = ""
    schedule_timeout_seconds: int = 600
    api_timeout_seconds: int = 60
    api_retries: int = 5
    resources: dict = field(default_factory=dict)
    affinity: dict = field(default_factory=dict)
    volumes: list[dict] = field(default_factory=list)
    volume_mounts: list[dict] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.gpus_per_worker < 0:
            raise ConfigError(f"gpus_per_worker must be >= 0, got {self.gpus_per_worker}")
        for name in ("cpu_per_worker", "memory_per_worker"):
            if not _QUANTITY.match(str(getattr(self, name))):
                raise ConfigError(f"{name}: {getattr(self, name)!r} is not a Kubernetes quantity")
        if not isinstance(self.node_selector, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in self.node_selector.items()
        ):
            raise ConfigError(f"node_selector must map strings to strings: {self.node_selector!r}")
        for tol in self.tolerations:
            if not isinstance(tol, dict) or set(tol) - _TOLERATION_KEYS:
                raise ConfigError(
                    f"toleration {tol!r}: expected keys among {', '.join(sorted(_TOLERATION_KEYS))}"
                )
        if not _CPU.match(str(self.cpu_per_worker)):
            raise ConfigError(f"cpu_per_worker: {self.cpu_per_worker!r} is not a CPU quantity")
        if not self.mount_path.startswith("/"):
            raise ConfigError(f"mount_path must be absolute: {self.mount_path!r}")
        if self.timeout_seconds < 0 or self.poll_seconds <= 0:
            raise ConfigError("timeout_seconds must be >= 0 and poll_seconds > 0")
        if self.api_timeout_seconds <= 0:
            raise ConfigError(f"api_timeout_seconds must be > 0, got {self.api_timeout_seconds}")
        if self.schedule_timeout_seconds < 0 or self.api_retries < 1:
            raise ConfigError("schedule_timeout_seconds must be >= 0 and api_retries >= 1")
        if self.launcher not in CLUSTER_LAUNCHERS:
            raise ConfigError(
                f"launcher {self.launcher!r}: expected one of {', '.join(CLUSTER_LAUNCHERS)}"
            )
        if not isinstance(self.resources, dict) or set(self.resources) - {"requests", "limits"}:
            raise ConfigError(f"resources: expected requests and/or limits: {self.resources!r}")
        for part in ("requests", "limits"):
            for name, amount in (self.resources.get(part) or {}).items():
                if not _QUANTITY.match(str(amount)):
                    raise ConfigError(f"resources.{part}.{name}: {amount!r} is not a quantity")
        if not isinstance(self.affinity, dict):
            raise ConfigError(f"affinity must be an object: {self.affinity!r}")
        for name, items in (("volumes", self.volumes), ("volume_mounts", self.volume_mounts)):
            if not isinstance(items, list) or not all(
                isinstance(v, dict) and v.get("name") for v in items
            ):
                raise ConfigError(f"{name} must be a list of objects with a name: {items!r}")
        for volume in self.volumes:
            sources = set(volume) - {"name"}
            if not sources or sources - set(VOLUME_SOURCES):
                raise ConfigError(
                    f"volume {volume['name']!r}: {', '.join(sorted(sources)) or 'no source'} is "
                    f"not passed to training pods (allowed: {', '.join(VOLUME_SOURCES)})"
                )
        if self.job_deadline_seconds <= 0:
            raise ConfigError("job_deadline_seconds must be > 0")
        mounted = {m["name"] for m in self.volume_mounts}
        missing = mounted - {v["name"] for v in self.volumes}
        if missing:
            raise ConfigError(f"volume_mounts name volumes that are not given: {sorted(missing)}")
        if not self.volume_claim and not self.data_mount():
            raise ConfigError(
                f"no volume for {self.mount_path}: name a volume_claim, or pass the task's "
                "volumes (a KFP workspace) with a mount that holds mount_path"
            )
        gpus = self.worker_gpus()
        if gpus < 0:
            raise ConfigError(f"GPUs per worker must be >= 0, got {gpus}")

    @classmethod
    def from_params(
        cls,
        *,
        node_selector: str | dict = "",
        tolerations: str | list = "",
        task_config: dict | None = None,
        **fields,
    ) -> KubernetesConfig:
        """Builds the config from pipeline parameters and the task's passed-through settings.

        ``node_selector`` and ``tolerations`` may be JSON; ``task_config`` is merged in as
        :meth:`with_task_config` does.
        """

        def parse(value, name, empty):
            if isinstance(value, str):
                if not value.strip():
                    return empty
                try:
                    return json.loads(value)
                except json.JSONDecodeError as err:
                    raise ConfigError(f"{name} is not valid JSON: {value!r} ({err})") from err
            return value

        fields["node_selector"] = parse(node_selector, "node_selector", {})
        fields["tolerations"] = parse(tolerations, "tolerations", [])
        return cls(**_merge_task_config(fields, task_config))

    def with_task_config(self, task_config: dict | None) -> KubernetesConfig:
        """This config with a KFP ``TaskConfig``'s settings (a dict of its fields) added.

        The task's resources replace the shorthand's for the resources they name, its node
        selector labels override the shorthand's, its tolerations are added to them, its
        affinity and volumes are taken as they are (KFP's ``TaskConfig`` fields are
        Kubernetes JSON: ``node_selector``, ``tolerations``, ``affinity``, ``resources``,
        ``volumes``, ``volume_mounts``).

        Raises:
            ConfigError: A field is not what Kubernetes takes.
        """
        return replace(self, **_merge_task_config(asdict(self), task_config))

    def data_mount(self) -> dict | None:
        """The passed-through volume mount that holds ``mount_path`` (a KFP workspace)."""
        best = None
        for mount in self.volume_mounts:
            path = str(mount.get("mountPath", "")).rstrip("/") or "/"
            inside = self.mount_path == path or self.mount_path.startswith(path.rstrip("/") + "/")
            if inside and (best is None or len(path) > len(best["mountPath"])):
                best = mount
        return best

    def worker_resources(self) -> dict:
        """Requests and limits of a computing pod's container (shorthand, then the task's)."""
        requests = {"cpu": str(self.cpu_per_worker), "memory": str(self.memory_per_worker)}
        limits = dict(requests)
        if self.gpus_per_worker:
            limits["nvidia.com/gpu"] = str(self.gpus_per_worker)
        given = {
            part: {k: str(v) for k, v in (self.resources.get(part) or {}).items()}
            for part in ("requests", "limits")
        }
        named = set(given["requests"]) | set(given["limits"])
        for key in named:
            requests.pop(key, None)
            limits.pop(key, None)
        requests.update(given["requests"])
        limits.update(given["limits"])
        out = {"requests": requests, "limits": limits}
        return {part: amounts for part, amounts in out.items() if amounts}

    def worker_gpus(self) -> int:
        """Accelerators of each computing pod (the task's resources, else the shorthand)."""
        limits = (self.resources or {}).get("limits") or {}
        for name in GPU_RESOURCES:
            if name in limits:
                try:
                    count = float(str(limits[name]))
                except ValueError:
                    count = -1.0
                if count < 0 or count != int(count):
                    raise ConfigError(
                        f"resources.limits.{name}: {limits[name]!r} is not a whole number"
                    )
                return int(count)
        return self.gpus_per_worker

    def resolved_trainjob_runtime(self) -> str:
        """The ClusterTrainingRuntime a sync TrainJob refers to."""
        if self.trainjob_runtime:
            return self.trainjob_runtime
        return "distrain-horovod-gpu" if self.worker_gpus() else "distrain-horovod"

    def resolved_namespace(self) -> str:
        """The namespace to use: the configured one, the pod's own, or ``distrain``."""
        if self.namespace:
            return self.namespace
        if _SA_NAMESPACE.exists():
            return _SA_NAMESPACE.read_text().strip()
        return "distrain"

    def resolved_image(self) -> str:
        """The trainer image to run."""
        return self.image or image("trainer-gpu" if self.worker_gpus() else "trainer")

    def cpu_threads(self) -> int:
        """Whole CPUs of each training pod (``cpu_per_worker``), at least 1.

        Pods see the node's cores, not their limit, so thread counts come from here.
        """
        resources = self.worker_resources()
        cpu = (resources.get("limits") or {}).get("cpu") or (resources.get("requests") or {}).get(
            "cpu", str(self.cpu_per_worker)
        )
        if not _CPU.match(cpu):
            raise ConfigError(f"worker cpu: {cpu!r} is not a CPU quantity")
        cores = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
        return max(1, int(cores))

    def to_dict(self) -> dict:
        """A JSON-able form (for logs and the run's history)."""
        return asdict(self)


_TASK_CONFIG_FIELDS = (
    "resources",
    "node_selector",
    "tolerations",
    "affinity",
    "volumes",
    "volume_mounts",
)


def _merge_task_config(fields: dict, task_config: dict | None) -> dict:
    """``fields`` (of a :class:`KubernetesConfig`) with a task config's settings merged in."""
    tc = {k: v for k, v in (task_config or {}).items() if v}
    unknown = set(tc) - set(_TASK_CONFIG_FIELDS)
    if unknown:
        raise ConfigError(
            f"task config: fields {sorted(unknown)} are not passed to the pods "
            f"(expected among {', '.join(_TASK_CONFIG_FIELDS)})"
        )
    out = dict(fields)
    tolerations = list(out.get("tolerations") or [])
    for tol in tc.get("tolerations") or []:
        if tol not in tolerations:
            tolerations.append(tol)
    out["tolerations"] = tolerations
    out["node_selector"] = {**(out.get("node_selector") or {}), **(tc.get("node_selector") or {})}
    for name in ("resources", "affinity"):
        if tc.get(name):
            out[name] = tc[name]
    for name in ("volumes", "volume_mounts"):
        out[name] = [*(out.get(name) or []), *(tc.get(name) or [])]
    return out
