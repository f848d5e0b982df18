"""Runs a training run's cluster objects to completion through the Kubernetes API.

The launcher creates the objects of :mod:`distrain.k8s.objects` (an MPIJob, a Kubeflow
Trainer TrainJob, or parameter-server Jobs and Services), follows every pod's log as a
stream into its own output (the KFP step's log), polls the job's status and the events
of its pods and objects, and reports what keeps a pod from running (unschedulable, an
image that cannot be pulled, a container killed for memory). It never waits blind: a pod
the scheduler cannot place fails the run with the scheduler's message once
``schedule_timeout_seconds`` pass; API calls that fail transiently (429, 5xx, a reset
connection) are retried with backoff, and every API call carries a request timeout
(``api_timeout_seconds``), so a server that stops answering fails the run instead of
hanging it; a pod's log stream silent for ten minutes is opened again. It deletes
everything it created when it is done, whether the run succeeded, failed, timed out, was
interrupted or was cancelled (SIGTERM, what KFP sends a cancelled step): parameter
servers, which never exit by themselves, included. Objects also get an owner reference
to the launcher's own pod when it is known (``POD_NAME`` / ``POD_UID`` from the downward
API), so that Kubernetes deletes them with that pod even if the launcher is killed
outright.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from distrain.base.errors import TrainingError
from distrain.k8s.api import ApiCaller, KubeApi, not_found, transient
from distrain.k8s.config import KubernetesConfig, request_timeout
from distrain.k8s.objects import MPIJOB_API, ROLE_LABEL, RUN_LABEL, TRAINJOB_API

# Waiting reasons that will not resolve by themselves: fail at once instead of timing out.
STUCK_REASONS = {
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CreateContainerConfigError",
    "CreateContainerError",
}
# Custom resources: kind -> (group, version, plural).
CUSTOM_KINDS = {"MPIJob": MPIJOB_API, "TrainJob": TRAINJOB_API}
_SA_NAMESPACE = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace")


class Cancelled(TrainingError):
    """The launcher was told to stop (SIGTERM: KFP cancelled the run, or the pod is deleted)."""


def launcher_owner(namespace: str, environ: dict | None = None) -> dict | None:
    """An owner reference to the launcher's own pod, if it runs in ``namespace``.

    The pod is named by ``POD_NAME`` and ``POD_UID`` (the downward API; the pipelines set
    them on the training step). Owner references do not cross namespaces, so objects in
    another namespace get none.
    """
    env = os.environ if environ is None else environ
    name, uid = env.get("POD_NAME", ""), env.get("POD_UID", "")
    if not name or not uid:
        return None
    own_namespace = env.get("POD_NAMESPACE", "")
    if not own_namespace and _SA_NAMESPACE.exists():
        own_namespace = _SA_NAMESPACE.read_text().strip()
    if own_namespace != namespace:
        return None
    return {"apiVersion": "v1", "kind": "Pod", "name": name, "uid": uid}


def add_owner(objects: list[dict], owner: dict | None) -> None:
    """Adds ``owner`` to every object's owner references (nothing if None)."""
    if not owner:
        return
    for obj in objects:
        refs = obj["metadata"].setdefault("ownerReferences", [])
        if not any(ref.get("uid") == owner["uid"] for ref in refs):
            refs.append(dict(owner))


class LogFollower(threading.Thread):
    """Follows one pod's log as a stream (``follow=True``), printing each line once.

    A stream that ends while the pod still runs (the API server closed it, a connection
    reset) is opened again and the lines already printed are skipped. :meth:`finish`
    asks for one last read once the pod is done, then the thread ends.
    """

    def __init__(
        self, run: ClusterRun, pod: str, reconnect_seconds: float, idle_seconds: float = 600.0
    ):
        super().__init__(name=f"log-{pod}", daemon=True)
        self.run_, self.pod, self.reconnect_seconds = run, pod, reconnect_seconds
        self.idle_seconds = idle_seconds
        self.printed = 0
        self.partial = ""
        self.done = threading.Event()
        self.reconnects = 0

    def finish(self) -> None:
        """Reads what is left, then stops."""
        self.done.set()

    def run(self) -> None:
        last = False
        while True:
            last = self.done.is_set()
            try:
                self._read_once()
            except Exception as err:  # noqa: BLE001 (a log not ready yet, a reset stream)
                if not_found(err):
                    return  # the pod is gone
                if not transient(err) and getattr(err, "status", None) != 400:
                    self.run_._say(f"log of {self.pod}: {err}")
                    return
            if last:
                return
            self.reconnects += 1
            self.done.wait(self.reconnect_seconds)

    def _read_once(self) -> None:
        api = self.run_.api.core
        resp = api.read_namespaced_pod_log(
            self.pod,
            self.run_.namespace,
            follow=True,
            _preload_content=False,
            # A stream silent for this long is opened again (lines already printed skipped).
            _request_timeout=(self.run_.api_timeout_seconds, self.idle_seconds),
        )
        seen, self.partial = 0, ""
        try:
            for chunk in resp.stream(4096):
                text = self.partial + (
                    chunk.decode("utf-8", "replace") if isinstance(chunk, bytes) else chunk
                )
                *lines, self.partial = text.split("\n")
                for line in lines:
                    seen += 1
                    if seen > self.printed:
                        self.printed = seen
                        self.run_._emit(f"[{self.pod}] {line}")
        finally:
            resp.release_conn()
        if self.partial and self.done.is_set():
            seen += 1
            if seen > self.printed:
                self.printed = seen
                self.run_._emit(f"[{self.pod}] {self.partial}")


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
        schedule_timeout_seconds: Fail when a pod cannot be scheduled, or no pod exists,
            for this long (0: never).
        api_retries: Attempts of an API call that fails transiently.
        api_timeout_seconds: Request timeout of every API call (0: none); a call that
            times out is a transient failure, retried ``api_retries`` times.
        log_reconnect_seconds: Pause before a pod's log stream that ended is opened again.
        out: Where pod logs and progress go.
        clock: Monotonic seconds (tests replace it).
        sleep: Sleeps between polls and retries (tests replace it).
        watch: Called with the run's pods at each poll; what it answers (a stopped rank,
            :mod:`distrain.k8s.watchdog`) fails the run.
    """

    api: KubeApi
    objects: list[dict]
    name: str
    namespace: str
    poll_seconds: float = KubernetesConfig.poll_seconds
    timeout_seconds: float = 0
    schedule_timeout_seconds: float = KubernetesConfig.schedule_timeout_seconds
    api_retries: int = KubernetesConfig.api_retries
    api_timeout_seconds: float = KubernetesConfig.api_timeout_seconds
    log_reconnect_seconds: float = 2.0
    out: TextIO = field(default_factory=lambda: sys.stdout)
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] = time.sleep
    watch: Callable[[list], str] | None = None
    created: list[tuple[str, str]] = field(default_factory=list)
    deleted: list[tuple[str, str]] = field(default_factory=list)
    events_seen: set = field(default_factory=set)
    _followers: dict[str, LogFollower] = field(default_factory=dict)
    _unschedulable_since: dict[str, float] = field(default_factory=dict)
    _reported: set = field(default_factory=set)
    _latest_events: list = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def __post_init__(self) -> None:
        if self.api_timeout_seconds:
            self.api = self.api.timed(self.api_timeout_seconds)
        self.call = ApiCaller(self.api_retries, sleep=self.sleep, say=self._say)
        self._timeout = request_timeout(self.api_timeout_seconds)

    def run(self) -> None:
        """Creates the objects, waits for the run to end, and always cleans up.

        SIGTERM (KFP cancelling the run) stops the wait with :class:`Cancelled`; the
        objects are deleted all the same.

        Raises:
            TrainingError: The run failed (naming the pod and its reason), timed out or
                was cancelled.
        """
        with self._sigterm_cancels():
            try:
                self.create()
                self.wait()
            except BaseException as err:
                # The run's own failure is the error to report; a failed deletion is logged.
                self._say(f"stopping: {type(err).__name__}: {err}".rstrip(": "))
                try:
                    self.cleanup()
                except TrainingError as cleanup_err:
                    self._say(f"also: {cleanup_err}")
                raise
            self.cleanup()

    def _sigterm_cancels(self):
        run = self

        class Handler:
            def __enter__(self):
                self.previous = None
                if threading.current_thread() is threading.main_thread():
                    self.previous = signal.signal(signal.SIGTERM, self.handle)
                self.fired = False
                return self

            def handle(self, signum, frame):
                if self.fired:  # already stopping: let the clean-up finish
                    run._say("SIGTERM again: still deleting the run's objects")
                    return
                self.fired = True
                raise Cancelled(f"[{run.name}] cancelled (SIGTERM)")

            def __exit__(self, *exc):
                if self.previous is not None:
                    signal.signal(signal.SIGTERM, self.previous)
                return False

        return Handler()

    # -- creation and deletion -------------------------------------------------------
    def create(self) -> None:
        """Creates every object, recording each one before the next."""
        for obj in self.objects:
            kind, obj_name = obj["kind"], obj["metadata"]["name"]
            if kind not in (*CUSTOM_KINDS, "Job", "Service", "NetworkPolicy"):
                raise TrainingError(f"the launcher does not create {kind} objects")
            tries = {"n": 0}

            def create_once(obj=obj, kind=kind, tries=tries):
                tries["n"] += 1
                try:
                    self._create(kind, obj)
                except Exception as err:
                    # A create that timed out may have been done: on a retry, "already
                    # exists" is this launcher's own object.
                    if tries["n"] > 1 and getattr(err, "status", None) == 409:
                        return
                    raise

            self.call(f"create {kind}/{obj_name}", create_once)
            self.created.append((kind, obj_name))
            self._say(f"created {kind}/{obj_name}")

    def _create(self, kind: str, obj: dict) -> None:
        ns, t = self.namespace, self._timeout  # every API call names its timeout
        if kind in CUSTOM_KINDS:
            group, version, plural = CUSTOM_KINDS[kind]
            self.api.custom.create_namespaced_custom_object(
                group, version, ns, plural, obj, _request_timeout=t
            )
        elif kind == "Job":
            self.api.batch.create_namespaced_job(ns, obj, _request_timeout=t)
        elif kind == "NetworkPolicy":
            self.api.networking.create_namespaced_network_policy(ns, obj, _request_timeout=t)
        else:
            self.api.core.create_namespaced_service(ns, obj, _request_timeout=t)

    def cleanup(self) -> None:
        """Deletes what was created, newest first; what is already gone is fine."""
        for follower in self._followers.values():
            follower.finish()
        errors = []
        for kind, obj_name in reversed(self.created):
            if (kind, obj_name) in self.deleted:
                continue
            try:
                self.call(f"delete {kind}/{obj_name}", self._delete, kind, obj_name)
            except Exception as err:  # noqa: BLE001 (report every failed deletion)
                if not not_found(err):
                    errors.append(f"{kind}/{obj_name}: {err}")
                    continue
            self.deleted.append((kind, obj_name))
        if self.created:
            self._say(f"deleted {len(self.deleted)} of {len(self.created)} objects")
        if errors:
            raise TrainingError("could not delete: " + "; ".join(errors))

    def _delete(self, kind: str, obj_name: str) -> None:
        # Background propagation deletes the objects' pods (and a TrainJob's JobSet) too.
        ns, t, bg = self.namespace, self._timeout, "Background"
        if kind in CUSTOM_KINDS:
            group, version, plural = CUSTOM_KINDS[kind]
            self.api.custom.delete_namespaced_custom_object(
                group, version, ns, plural, obj_name, propagation_policy=bg, _request_timeout=t
            )
        elif kind == "Job":
            self.api.batch.delete_namespaced_job(
                obj_name, ns, propagation_policy=bg, _request_timeout=t
            )
        elif kind == "NetworkPolicy":
            self.api.networking.delete_namespaced_network_policy(obj_name, ns, _request_timeout=t)
        else:
            self.api.core.delete_namespaced_service(obj_name, ns, _request_timeout=t)

    # -- waiting -----------------------------------------------------------------------
    def wait(self) -> None:
        """Polls until the run succeeds, fails or times out, following logs meanwhile.

        Raises:
            TrainingError: The run failed, a pod could not be scheduled in time, or the
                run timed out.
        """
        start = self.clock()
        while True:
            pods = self._pods()
            self.follow_logs(pods)
            self.report(pods)
            state = self.state(pods)
            if state == "succeeded":
                self._finish_logs()
                self._say("succeeded")
                return
            if state != "running":
                self._finish_logs()
                raise TrainingError(f"[{self.name}] {state}")
            now = self.clock()
            unschedulable = self._unschedulable(pods, start, now)
            if unschedulable:
                raise TrainingError(f"[{self.name}] {unschedulable}")
            if self.timeout_seconds and now - start > self.timeout_seconds:
                raise TrainingError(f"[{self.name}] timed out after {self.timeout_seconds:.0f} s")
            self.sleep(self.poll_seconds)

    def state(self, pods: list) -> str:
        """``running``, ``succeeded``, or the failure's description."""
        stuck = self._stuck(pods) or (self.watch(pods) if self.watch else "")
        if stuck:
            return stuck
        kinds = {obj["kind"] for obj in self.objects}
        for kind, success in (("MPIJob", "Succeeded"), ("TrainJob", "Complete")):
            if kind in kinds:
                return self._custom_state(kind, success, pods)
        return self._ps_state(pods)

    def _custom_state(self, kind: str, success: str, pods: list) -> str:
        group, version, plural = CUSTOM_KINDS[kind]
        job = self.call(
            f"get {kind}/{self.name}",
            self.api.custom.get_namespaced_custom_object,
            group,
            version,
            self.namespace,
            plural,
            self.name,
            _request_timeout=self._timeout,
        )
        for cond in (job.get("status") or {}).get("conditions") or []:
            if cond.get("status") != "True":
                continue
            if cond.get("type") == success:
                return "succeeded"
            if cond.get("type") == "Failed":
                detail = self._failed_pod(pods) or cond.get("message") or cond.get("reason")
                return f"{kind} {self.name} failed: {detail}"
        return "running"

    def _ps_state(self, pods: list) -> str:
        chief = f"{self.name}-chief"
        job = self.call(
            f"get Job/{chief}",
            self.api.batch.read_namespaced_job_status,
            chief,
            self.namespace,
            _request_timeout=self._timeout,
        )
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

    def _unschedulable(self, pods: list, start: float, now: float) -> str:
        """Why the run cannot get its pods, once that has lasted the scheduling deadline."""
        deadline = self.schedule_timeout_seconds
        if not deadline:
            return ""
        if not pods:
            if now - start <= deadline:
                return ""
            warning = self._last_warning(self._object_names())
            return f"no pod of the run after {deadline:.0f} s" + (
                f": {warning}" if warning else " (is the operator or runtime installed?)"
            )
        current = set()
        for pod in pods:
            cond = self._unscheduled_condition(pod)
            if cond is None:
                continue
            pod_name = pod.metadata.name
            current.add(pod_name)
            since = self._unschedulable_since.setdefault(pod_name, now)
            if now - since > deadline:
                message = self._last_warning({pod_name}, reason="FailedScheduling") or (
                    cond.message or cond.reason or "Unschedulable"
                )
                return f"pod {pod_name} could not be scheduled for {deadline:.0f} s: {message}"
        for pod_name in set(self._unschedulable_since) - current:
            del self._unschedulable_since[pod_name]
        return ""

    @staticmethod
    def _unscheduled_condition(pod):
        if pod.status.phase != "Pending":
            return None
        for cond in pod.status.conditions or []:
            if cond.type == "PodScheduled" and cond.status == "False":
                return cond
        return None

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

    # -- events --------------------------------------------------------------------------
    def _object_names(self) -> set[str]:
        return {obj_name for _, obj_name in self.created}

    def _events(self) -> list:
        """The namespace's warning events, oldest first.

        Filtered by the API server (a field selector): a busy namespace's normal events,
        most of all of them, are not sent at every poll.
        """
        found = self.call(
            "list events",
            self.api.core.list_namespaced_event,
            self.namespace,
            field_selector="type=Warning",
            _request_timeout=self._timeout,
        ).items
        return sorted(
            found,
            key=lambda e: str(e.last_timestamp or e.event_time or e.first_timestamp or ""),
        )

    def _ours(self, event, names: set[str]) -> bool:
        involved = event.involved_object.name if event.involved_object else ""
        # A TrainJob's JobSet, Jobs and pods, and a Job's pods, carry the run's name.
        return involved in names or involved.startswith(f"{self.name}-") or involved == self.name

    def report(self, pods: list) -> None:
        """Prints warning events of the run's objects and pods and bad container ends, once each.

        Bad container ends are those other than ``Completed`` (an ``OOMKilled`` one, say).
        """
        names = self._object_names() | {p.metadata.name for p in pods}
        try:
            events = self._events()
        except Exception as err:  # noqa: BLE001 (events only inform; the run goes on)
            key = ("events-error", str(getattr(err, "status", type(err).__name__)))
            if key not in self._reported:
                self._reported.add(key)
                self._say(f"cannot list events: {err}")
            events = []
        self._latest_events = events
        for event in events:
            if event.type != "Warning" or not self._ours(event, names):
                continue
            involved = event.involved_object
            key = (involved.kind, involved.name, event.reason, event.message)
            if key in self.events_seen:
                continue
            self.events_seen.add(key)
            self._say(f"event: {involved.kind}/{involved.name}: {event.reason}: {event.message}")
        for pod in pods:
            for cs in pod.status.container_statuses or []:
                term = cs.state.terminated if cs.state else None
                if term and term.reason and term.reason != "Completed":
                    key = ("terminated", pod.metadata.name, cs.name, term.reason)
                    if key not in self._reported:
                        self._reported.add(key)
                        self._say(
                            f"pod {pod.metadata.name}: container {cs.name} {term.reason} "
                            f"(exit code {term.exit_code})"
                        )

    def _last_warning(self, names: set[str], reason: str = "") -> str:
        """The message of the newest warning event about one of ``names``."""
        for event in reversed(self._latest_events):
            involved = event.involved_object.name if event.involved_object else ""
            if event.type != "Warning" or (reason and event.reason != reason):
                continue
            if involved in names or (not reason and self._ours(event, names)):
                return f"{event.reason}: {event.message}"
        return ""

    # -- logs --------------------------------------------------------------------------
    def _pods(self) -> list:
        found = self.call(
            "list pods",
            self.api.core.list_namespaced_pod,
            self.namespace,
            label_selector=f"{RUN_LABEL}={self.name}",
            _request_timeout=self._timeout,
        )
        return sorted(found.items, key=lambda p: p.metadata.name)

    def follow_logs(self, pods: list) -> None:
        """Starts a log stream for each pod that has started, and ends those of pods done."""
        for pod in pods:
            pod_name = pod.metadata.name
            phase = pod.status.phase
            if phase not in ("Running", "Succeeded", "Failed"):
                continue
            follower = self._followers.get(pod_name)
            if follower is None:
                follower = LogFollower(self, pod_name, self.log_reconnect_seconds)
                self._followers[pod_name] = follower
                follower.start()
            if phase in ("Succeeded", "Failed"):
                follower.finish()

    def _finish_logs(self, timeout: float = 30.0) -> None:
        """Lets every log stream print what is left, for up to ``timeout`` seconds."""
        for follower in self._followers.values():
            follower.finish()
        for follower in self._followers.values():
            follower.join(timeout)

    def _emit(self, line: str) -> None:
        with self._lock:
            print(line, file=self.out, flush=True)

    def _say(self, message: str) -> None:
        self._emit(f"[{self.name}] {message}")
