"""A run's progress for people and for the cluster: log lines with an ETA, and Trainer's status.

**Progress lines.** Rank 0 (the parameter-server chief) prints, at the end of a segment
of updates (a checkpoint or an epoch's end), at most one line every ``progress_seconds``
(a setting; 0: none)::

    [sync:2] progress 37% (update 1,850 of 5,000, epoch 2/5): 41 s, ETA 1 min 10 s

A KFP step's log is shown live in KFP's UI, so a long training step says how far it is.
The ETA is the time per update so far (this process's, a resumed run's from its resume)
times the updates left; a run until plateau counts its most epochs.

**Kubeflow Trainer's status** (Trainer v2.2 and later, KEP-2779, its ``TrainJobStatus``
feature gate on): in a TrainJob, the controller's ``TrainJobStatus`` plugin injects into
every container of the trainer's pods (the replicated job labelled
``trainer.kubeflow.org/trainjob-ancestor-step: trainer``: distrain's runtimes' launcher,
whose pod runs mpirun and rank 0) three variables, :data:`URL_ENV`, :data:`CA_CERT_ENV`
and :data:`TOKEN_ENV`: the endpoint
``https://SERVICE.NAMESPACE.svc:10443/apis/trainer.kubeflow.org/v1alpha1/namespaces/NS/trainjobs/NAME/status``,
the file of the CA certificate that signed it, and the file of a projected service-account
token (rotated: read again at every report). Where they are set, rank 0 POSTs
``{"trainerStatus": {...}}`` (:func:`status_payload`) with the token as a bearer token at
the same moments as its lines, and at the start and the end of training; the controller
copies it into ``TrainJob.status.trainerStatus``. A report that fails is logged (the first
of a run of failures) and training goes on.
"""

from __future__ import annotations

import json
import math
import os
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping
from datetime import UTC, datetime

from distrain.train.hooks import Hook

# What Trainer's TrainJobStatus plugin injects (pkg/runtime/framework/plugins/trainjobstatus).
URL_ENV = "KUBEFLOW_TRAINER_SERVER_URL"
CA_CERT_ENV = "KUBEFLOW_TRAINER_SERVER_CA_CERT"
TOKEN_ENV = "KUBEFLOW_TRAINER_SERVER_TOKEN"
# The CRD's bounds of a metric's name and value (TrainerStatus.metrics) and their number.
METRIC_TEXT_MAX, METRICS_MAX = 64, 256
# Seconds a report may take before it is given up (the run does not wait longer).
REPORT_TIMEOUT = 5.0


def duration(seconds: float) -> str:
    """``42 s``, ``3 min 05 s`` or ``2 h 07 min``."""
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds} s"
    if seconds < 3600:
        return f"{seconds // 60} min {seconds % 60:02d} s"
    return f"{seconds // 3600} h {seconds % 3600 // 60:02d} min"


def remaining_seconds(done: int, left: int, elapsed: float) -> float | None:
    """Seconds for ``left`` updates at the pace of ``done`` in ``elapsed`` (None: no pace yet)."""
    if done <= 0:
        return None
    return elapsed / done * max(left, 0)


def status_payload(
    percent: float, remaining: float | None, metrics: Mapping[str, float], now: datetime
) -> dict:
    """The body of a status report: Trainer's ``UpdateTrainJobStatusRequest``.

    ``progressPercentage`` is an integer 0-100, ``estimatedRemainingSeconds`` a
    non-negative integer (left out when unknown), each metric a name and a value as
    strings of 1-64 characters (non-finite values left out), ``lastUpdatedTime`` RFC 3339
    in UTC: the bounds of the TrainJob CRD's ``status.trainerStatus``.
    """
    status: dict = {"progressPercentage": int(min(100, max(0, math.floor(percent))))}
    if remaining is not None:
        status["estimatedRemainingSeconds"] = int(min(2**31 - 1, max(0, round(remaining))))
    values = [
        {"name": name[:METRIC_TEXT_MAX], "value": f"{float(value):.6g}"}
        for name, value in metrics.items()
        if value is not None and math.isfinite(float(value))
    ]
    if values:
        status["metrics"] = values[:METRICS_MAX]
    status["lastUpdatedTime"] = now.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"trainerStatus": status}


class TrainerStatus:
    """Reports to Kubeflow Trainer's status endpoint (the variables its plugin injects).

    Args:
        url: The endpoint (:data:`URL_ENV`).
        ca_file: The CA certificate's file (:data:`CA_CERT_ENV`).
        token_file: The bearer token's file (:data:`TOKEN_ENV`), read at every report.
        log: Where a failed report is told.
    """

    def __init__(self, url: str, ca_file: str, token_file: str, log: Callable[[str], None]):
        self.url, self.ca_file, self.token_file, self.log = url, ca_file, token_file, log
        self.failing = False
        self.sent = 0

    @classmethod
    def from_environment(
        cls, log: Callable[[str], None], env: Mapping[str, str] | None = None
    ) -> TrainerStatus | None:
        """The reporter of this process's TrainJob, or None outside one (no endpoint)."""
        env = os.environ if env is None else env
        url = env.get(URL_ENV, "")
        if not url:
            return None
        return cls(url, env.get(CA_CERT_ENV, ""), env.get(TOKEN_ENV, ""), log)

    def report(self, percent: float, remaining: float | None, metrics: Mapping[str, float]) -> bool:
        """POSTs one status; False (and a line, the first of a streak) if it failed."""
        body = json.dumps(status_payload(percent, remaining, metrics, datetime.now(UTC)))
        try:
            headers = {"Content-Type": "application/json"}
            if self.token_file:
                with open(self.token_file) as f:
                    headers["Authorization"] = f"Bearer {f.read().strip()}"
            context = None
            if self.url.startswith("https:"):
                context = ssl.create_default_context(cafile=self.ca_file or None)
            request = urllib.request.Request(
                self.url, data=body.encode(), headers=headers, method="POST"
            )
            with urllib.request.urlopen(request, timeout=REPORT_TIMEOUT, context=context) as resp:
                resp.read()
        except (OSError, ValueError, ssl.SSLError) as err:  # URLError and HTTPError are OSErrors
            if not self.failing:
                self.log(
                    f"trainer status: report to {self.url} failed ({_why(err)}); training goes on"
                )
            self.failing = True
            return False
        if self.failing:
            self.log("trainer status: reports go through again")
        self.failing = False
        self.sent += 1
        return True


def _why(err: BaseException) -> str:
    """A failed report's reason: the controller's message (a ``metav1.Status``) if it sent one."""
    if isinstance(err, urllib.error.HTTPError):
        try:
            message = json.loads(err.read() or b"{}").get("message", "")
        except (ValueError, OSError):
            message = ""
        return f"HTTP {err.code}" + (f": {message}" if message else "")
    return f"{type(err).__name__}: {err}"


class ProgressHook(Hook):
    """Rank 0's progress lines and Trainer status reports, at most one per ``progress_seconds``.

    Args:
        cfg: The run's configuration (``progress_seconds``, ``epochs``).
        replica: This process's replica (its rank, step and log).
        env: The environment to find Trainer's endpoint in (default: this process's).
        clock: Seconds, monotonic (tests give their own).
    """

    def __init__(self, cfg, replica, env: Mapping[str, str] | None = None, clock=time.monotonic):
        self.cfg, self.replica, self.clock = cfg, replica, clock
        self.interval = cfg.progress_seconds
        self.active = replica.rank == 0 and self.interval > 0
        self.status = TrainerStatus.from_environment(replica.log, env) if self.active else None
        self.metrics: dict[str, float] = {}
        self.total = self.per_epoch = self.first_step = 0
        self.start = self.last = 0.0

    def on_train_begin(self, driver) -> None:
        if not self.active:
            return
        self.per_epoch = driver.steps.updates_per_epoch()
        self.total = self.cfg.epochs * self.per_epoch
        self.first_step = int(self.replica.step)
        self.start = self.last = self.clock()
        if self.status is not None:
            self.status.report(self.percent(self.first_step), None, {})

    def percent(self, step: int) -> float:
        """How far the run is, in per cent of its (most) updates."""
        return 100.0 * step / self.total if self.total else 0.0

    def on_segment_end(self, driver, step: int) -> None:
        self.tell(step)

    def on_epoch_end(self, driver, record: dict, durations: list[float]) -> None:
        if not self.active:
            return
        self.metrics["epoch"] = record["epoch"]
        for name in ("loss", "accuracy", "val_loss", "val_accuracy"):
            if record.get(name) is not None:
                self.metrics[name] = record[name]
        if record["step_seconds"] > 0:
            before = driver.epochs[-2]["examples"] if len(driver.epochs) > 1 else 0
            seen = record["examples"] - before
            self.metrics["examples_per_second"] = seen / record["step_seconds"]
        self.tell(int(self.replica.step))

    def tell(self, step: int) -> None:
        """A line and a report, if ``progress_seconds`` have passed since the last."""
        if not self.active:
            return
        now = self.clock()
        if now - self.last < self.interval:
            return
        self.last = now
        elapsed = now - self.start
        left = remaining_seconds(step - self.first_step, self.total - step, elapsed)
        epoch = min(step // max(self.per_epoch, 1) + 1, self.cfg.epochs)
        eta = f", ETA {duration(left)}" if left is not None else ""
        self.replica.log(
            f"progress {self.percent(step):.0f}% (update {step:,} of {self.total:,}, "
            f"epoch {epoch}/{self.cfg.epochs}): {duration(elapsed)}{eta}"
        )
        if self.status is not None:
            self.status.report(self.percent(step), left, self.metrics)

    def on_train_end(self, driver, history: dict) -> None:
        if self.status is not None:
            metrics = dict(self.metrics, examples_per_second=history["examples_per_second"])
            self.status.report(100.0, 0.0, metrics)
