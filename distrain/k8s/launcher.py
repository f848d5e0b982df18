"""Runs a training run's cluster objects to completion through the Kubernetes API.

The launcher creates the objects of :mod:`distrain.k8s.objects`, streams the pods' logs
into its own output (the KFP step's log), polls the job's status, fails with the failing
pod's reason, and deletes everything it created when it is done, whether the run
succeeded, failed, timed out or was interrupted: parameter servers, which never exit by
themselves, included.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TextIO

from distrain.k8s.objects import MPIJOB_API, ROLE_LABEL, RUN_LABEL
from distrain.train.config import TrainingError

# Waiting reasons that will not resolve by themselves: fail at once instead of timing out.
STUCK_REASONS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
}


@dataclass
class KubeApi:
    """The three Kubernetes client APIs the launcher uses."""

    core: Any
    batch: Any
    custom: Any

    @classmethod
    def from_environment(cls) -> KubeApi:
        """Clients for the cluster this process runs in, else the local kubeconfig."""
        from kubernetes import client, config

        try:
            config.load_incluster_config()
        except config.ConfigException:
            config.load_kube_config()
        return cls(client.CoreV1Api(), client.BatchV1Api(), client.CustomObjectsApi())


def _not_found(err: Exception) -> bool:
    return getattr(err, "status", None) == 404


@dataclass
class ClusterRun:
    """One run's objects on the cluster, from creation to deletion.

    Attributes:
        api: The Kubernetes APIs.
        objects: What to create, in order (from :func:`distrain.k8s.objects.build_objects`).
        name: The run's name (the ``distrain.dev/run`` label of its pods).
        namespace: Where the objects live.
        poll_seconds: Seconds between polls.
        timeout_seconds: Give up after this long (0: never).
        out: Where pod logs and progress go.
    """

    api: KubeApi
    objects: list[dict]
    name: str
    namespace: str
    poll_seconds: float = 5.0
    timeout_seconds: float = 0
    out: TextIO = field(default_factory=lambda: sys.stdout)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    created: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    _log_offsets: dict[str, int] = field(default_factory=dict)

    def run(self) -> None:
        """Creates the objects, waits for the run to end, and always cleans up.

        Raises:
            TrainingError: The run failed (naming the pod and its reason) or timed out.
        """
        try:
            self.create()
            self.wait()
        except BaseException:
            # The run's own failure is the error to report; a failed deletion is logged.
            try:
                self.cleanup()
            except TrainingError as err:
                self._say(f"also: {err}")
            raise
        self.cleanup()

    # -- creation and deletion -------------------------------------------------------
    def create(self) -> None:
        """Creates every object, recording each one before the next."""
        for obj in self.objects:
            kind, obj_name = obj["kind"], obj["metadata"]["name"]
            if kind == "MPIJob":
                group, version, plural = MPIJOB_API
                self.api.custom.create_namespaced_custom_object(
                    group, version, self.namespace, plural, obj
                )
            elif kind == "Job":
                self.api.batch.create_namespaced_job(self.namespace, obj)
            elif kind == "Service":
                self.api.core.create_namespaced_service(self.namespace, obj)
            else:
                raise TrainingError(f"the launcher does not create {kind} objects")
            self.created.append((kind, obj_name))
            self._say(f"created {kind}/{obj_name}")

    def cleanup(self) -> None:
        """Deletes what was created, newest first; what is already gone is fine."""
        errors = []
        for kind, obj_name in reversed(self.created):
            try:
                if kind == "MPIJob":
                    group, version, plural = MPIJOB_API
                    self.api.custom.delete_namespaced_custom_object(
                        group,
                        version,
                        self.namespace,
                        plural,
                        obj_name,
                        propagation_policy="Background",
                    )
                elif kind == "Job":
                    # Background propagation deletes the Job's pods too.
                    self.api.batch.delete_namespaced_job(
                        obj_name, self.namespace, propagation_policy="Background"
                    )
                else:
                    self.api.core.delete_namespaced_service(obj_name, self.namespace)
            except Exception as err:  # noqa: BLE001 (report every failed deletion)
                if not _not_found(err):
                    errors.append(f"{kind}/{obj_name}: {err}")
                    continue
            self.deleted.append((kind, obj_name))
        if self.created:
            self._say(f"deleted {len(self.deleted)} of {len(self.created)} objects")
        if errors:
            raise TrainingError("could not delete: " + "; ".join(errors))

    # -- waiting -----------------------------------------------------------------------
    def wait(self) -> None:
        """Polls until the run succeeds, fails or times out, streaming logs meanwhile."""
        start = self.clock()
        while True:
            pods = self._pods()
            self.stream_logs(pods)
            state = self.state(pods)
            if state == "succeeded":
                self._say("succeeded")
                return
            if state != "running":
                raise TrainingError(f"[{self.name}] {state}")
            if self.timeout_seconds and self.clock() - start > self.timeout_seconds:
                raise TrainingError(f"[{self.name}] timed out after {self.timeout_seconds:.0f} s")
            self.sleep(self.poll_seconds)

    def state(self, pods: list) -> str:
        """``running``, ``succeeded``, or the failure's description."""
        stuck = self._stuck(pods)
        if stuck:
            return stuck
        if any(obj["kind"] == "MPIJob" for obj in self.objects):
            return self._mpijob_state(pods)
        return self._ps_state(pods)

    def _mpijob_state(self, pods: list) -> str:
        group, version, plural = MPIJOB_API
        job = self.api.custom.get_namespaced_custom_object(
            group, version, self.namespace, plural, self.name
        )
        for cond in (job.get("status") or {}).get("conditions") or []:
            if cond.get("status") != "True":
                continue
            if cond.get("type") == "Succeeded":
                return "succeeded"
            if cond.get("type") == "Failed":
                detail = self._failed_pod(pods) or cond.get("message") or cond.get("reason")
                return f"MPIJob {self.name} failed: {detail}"
        return "running"

    def _ps_state(self, pods: list) -> str:
        chief = f"{self.name}-chief"
        job = self.api.batch.read_namespaced_job_status(chief, self.namespace)
        status = job.status
        if status and status.succeeded:
            return "succeeded"
        if status and status.failed:
            return f"chief failed: {self._failed_pod(pods, role='chief') or 'see its log'}"
        for pod in pods:
            role = (pod.metadata.labels or {}).get(ROLE_LABEL)
            if role == "ps" and pod.status.phase == "Failed":
                return f"parameter server failed: {self._describe(pod)}"
        return "running"

    def _stuck(self, pods: list) -> str:
        for pod in pods:
            for cs in pod.status.container_statuses or []:
                waiting = cs.state.waiting if cs.state else None
                if waiting and waiting.reason in STUCK_REASONS:
                    return f"pod {pod.metadata.name} cannot start: {waiting.reason}" + (
                        f": {waiting.message}" if waiting.message else ""
                    )
        return ""

    def _failed_pod(self, pods: list, role: str | None = None) -> str:
        for pod in pods:
            if role and (pod.metadata.labels or {}).get(ROLE_LABEL) != role:
                continue
            if pod.status.phase == "Failed" or self._terminated_badly(pod):
                return self._describe(pod)
        return ""

    @staticmethod
    def _terminated_badly(pod) -> bool:
        for cs in pod.status.container_statuses or []:
            term = cs.state.terminated if cs.state else None
            if term and term.exit_code:
                return True
        return False

    @staticmethod
    def _describe(pod) -> str:
        parts = [f"pod {pod.metadata.name}"]
        for cs in pod.status.container_statuses or []:
            term = cs.state.terminated if cs.state else None
            if term:
                parts.append(f"{term.reason or 'Terminated'} (exit code {term.exit_code})")
                if term.message:
                    parts.append(term.message.strip())
        if len(parts) == 1 and pod.status.reason:
            parts.append(pod.status.reason)
        return ": ".join(parts)

    # -- logs --------------------------------------------------------------------------
    def _pods(self) -> list:
        found = self.api.core.list_namespaced_pod(
            self.namespace, label_selector=f"{RUN_LABEL}={self.name}"
        )
        return sorted(found.items, key=lambda p: p.metadata.name)

    def stream_logs(self, pods: list) -> None:
        """Prints what each started pod logged since the last poll, prefixed by its name."""
        for pod in pods:
            if pod.status.phase not in ("Running", "Succeeded", "Failed"):
                continue
            pod_name = pod.metadata.name
            try:
                text = self.api.core.read_namespaced_pod_log(pod_name, self.namespace)
            except Exception as err:  # noqa: BLE001 (a log not ready yet is not fatal)
                if _not_found(err):
                    continue
                raise
            seen = self._log_offsets.get(pod_name, 0)
            new = text[seen:]
            if new:
                for line in new.splitlines():
                    print(f"[{pod_name}] {line}", file=self.out, flush=True)
                self._log_offsets[pod_name] = len(text)

    def _say(self, message: str) -> None:
        print(f"[{self.name}] {message}", file=self.out, flush=True)
