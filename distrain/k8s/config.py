"""Where and how a training run's pods run on Kubernetes: one typed config."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

from distrain.train.config import ConfigError

LAUNCHERS = ("local", "kubernetes")
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")
_QUANTITY = re.compile(r"^\d+(\.\d+)?(m|k|Ki|Mi|Gi|Ti|M|G|T)?$")
_CPU = re.compile(r"^\d+(\.\d+)?m?$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


@dataclass(frozen=True)
class KubernetesConfig:
    """The cluster side of a training run with ``launcher=kubernetes``.

    Attributes:
        namespace: Namespace of the pods (default: the step's own, else ``distrain``).
        image: Trainer image (default: ``trainer-gpu`` when GPUs are asked for, else
            ``trainer``, both from :mod:`distrain.images`).
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
        timeout_seconds: Deadline of the whole job (0: none).
        poll_seconds: Seconds between status polls.
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
    timeout_seconds: int = 0
    poll_seconds: float = 5.0

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

    @classmethod
    def from_params(
        cls,
        *,
        node_selector: str | dict = "",
        tolerations: str | list = "",
        **fields,
    ) -> KubernetesConfig:
        """Builds the config from pipeline parameters (selector and tolerations as JSON)."""

        def parse(value, name, empty):
            if isinstance(value, str):
                if not value.strip():
                    return empty
                try:
                    return json.loads(value)
                except json.JSONDecodeError as err:
                    raise ConfigError(f"{name} is not valid JSON: {value!r} ({err})") from err
            return value

        return cls(
            node_selector=parse(node_selector, "node_selector", {}),
            tolerations=parse(tolerations, "tolerations", []),
            **fields,
        )

    def resolved_namespace(self) -> str:
        """The namespace to use: the configured one, the pod's own, or ``distrain``."""
        if self.namespace:
            return self.namespace
        if _SA_NAMESPACE.exists():
            return _SA_NAMESPACE.read_text().strip()
        return "distrain"

    def resolved_image(self) -> str:
        """The trainer image to run."""
        from distrain.images import image

        return self.image or image("trainer-gpu" if self.gpus_per_worker else "trainer")

    def cpu_threads(self) -> int:
        """Whole CPUs of each training pod (``cpu_per_worker``), at least 1.

        Pods see the node's cores, not their limit, so thread counts come from here.
        """
        cpu = str(self.cpu_per_worker)
        cores = float(cpu[:-1]) / 1000 if cpu.endswith("m") else float(cpu)
        return max(1, int(cores))

    def to_dict(self) -> dict:
        """A JSON-able form (for logs and the run's history)."""
        return asdict(self)
