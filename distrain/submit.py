"""``distrain submit``: compile, upload and run a pipeline on a KFP server, wait, and gate.

It talks to the server through ``kfp.Client`` (KFP's v2beta1 REST API). The quality gate
runs inside the pipeline (its last step, :mod:`distrain.base.gate`), so the UI shows the
verdict too; a gate that fails fails that step and the run, and ``submit`` says why.

Every wait is bounded: ``--wait`` gives up after :data:`WAIT_SECONDS` unless told
otherwise (``--timeout 0`` waits for ever), and every call to the KFP API carries a request
timeout (:data:`REQUEST_SECONDS`), so a server that accepts the connection and never
answers fails the submit with one line instead of holding a CI job for ever.

Exit codes: 0 the run succeeded (and met the gate); 1 the run failed, or met its gate
not, or the server did not answer in time; 2 bad arguments (nothing was submitted); 3 the
wait timed out (the run goes on).
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from distrain import __version__, datasets
from distrain.base.errors import ConfigError
from distrain.base.gate import GateError, parse_gate
from distrain.k8s.api import TimedClient
from distrain.train.config import parse_run_specs

FINAL_STATES = {"SUCCEEDED", "FAILED", "SKIPPED", "CANCELED", "CANCELING"}
# How long ``--wait`` waits by default: six hours, a GitHub-hosted CI job's own limit. A
# pipeline that takes longer goes on after the wait ends (exit 3); ``--timeout 0`` waits for
# ever.
WAIT_SECONDS = 6 * 3600
WAIT_HELP = (
    f"seconds to wait for the run (default {WAIT_SECONDS}, six hours; then exit 3, the run "
    "goes on; 0: wait for ever)"
)
# Request timeout of every call to the KFP API (connect and read, each).
REQUEST_SECONDS = 60.0


class SubmitError(ValueError):
    """Bad submit arguments; nothing was sent to the server."""


@dataclass(frozen=True)
class SubmitConfig:
    """One ``distrain submit``.

    Attributes:
        pipeline: A registered data set's name (:func:`distrain.datasets.names`).
        host: The KFP API endpoint (``http://localhost:8080`` with a port-forward to
            ``ml-pipeline-ui``, or the cluster's ingress).
        experiment: Experiment to file the run under (created when missing).
        params: Pipeline parameters (values parsed as JSON where they parse).
        gate: Quality gate (see :mod:`distrain.base.gate`); implies waiting.
        wait: Wait for the run to finish.
        timeout: Seconds to wait (default :data:`WAIT_SECONDS`; 0: no limit).
        request_timeout: Seconds each call to the KFP API may take (:data:`REQUEST_SECONDS`).
        poll_seconds: Seconds between status polls.
        namespace: KFP namespace (multi-user deployments).
        service_account: Service account of the run's pods.
        gpu: Compile with the GPU defaults (trainer-gpu image, one GPU per step and worker).
        run_name: Name of the run (default: pipeline, version and time).
        token: Bearer token for the KFP endpoint (default: ``$KFP_TOKEN``, else none).
    """

    pipeline: str
    host: str
    experiment: str = "distrain"
    params: dict = field(default_factory=dict)
    gate: str = ""
    wait: bool = False
    timeout: float = WAIT_SECONDS
    request_timeout: float = REQUEST_SECONDS
    poll_seconds: float = 10.0
    namespace: str | None = None
    service_account: str | None = None
    gpu: bool = False
    run_name: str = ""
    token: str | None = None


def parse_params(items: list[str]) -> dict:
    """``KEY=VALUE`` pairs into a dict; values that parse as JSON are taken as such."""
    params = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise SubmitError(f"--param {item!r}: expected KEY=VALUE")
        try:
            params[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            params[key.strip()] = value
    return params


def _check(cfg: SubmitConfig, pipeline_fn) -> None:
    try:
        parse_gate(cfg.gate)
    except GateError as err:
        raise SubmitError(str(err)) from err
    known = set(pipeline_fn.component_spec.inputs or {})
    unknown = sorted(set(cfg.params) - known)
    if unknown:
        raise SubmitError(
            f"unknown pipeline parameters: {', '.join(unknown)} (known: {', '.join(sorted(known))})"
        )
    if "gate" in cfg.params:
        raise SubmitError("give the gate as --gate, not as a parameter")
    if "runs" in cfg.params:
        runs = cfg.params["runs"]
        try:
            parse_run_specs(",".join(runs) if isinstance(runs, list) else str(runs))
        except ConfigError as err:
            raise SubmitError(f"runs: {err}") from err


def _state(run) -> str:
    state = run.state
    return str(state.value if hasattr(state, "value") else state or "PENDING")


def _gate_failure(run) -> str:
    from distrain.pipelines.common import GATE_TASK

    details = getattr(run, "run_details", None)
    for task in getattr(details, "task_details", None) or []:
        # The server names tasks by display name or by the task's key in the DAG.
        if task.display_name in (GATE_TASK, "quality-gate") and _state(task) == "FAILED":
            return (task.error.message if task.error else "") or "the quality gate failed"
    return ""


def _failed_step(run) -> tuple[str, str]:
    """The display name and error message of the run's first failed step, if any.

    A failed step's message is what the step wrote as its termination message, its one
    line (:mod:`distrain.preprocess.failures`), when the server passes it on.
    """
    details = getattr(run, "run_details", None)
    for task in getattr(details, "task_details", None) or []:
        name = task.display_name or ""
        if _state(task) != "FAILED" or name in ("root", "") or name.startswith("for-loop"):
            continue
        return name, (task.error.message if task.error else "") or ""
    return "", ""


def _bound(client, seconds: float) -> None:
    """Gives every generated API object of a ``kfp.Client`` a request timeout."""
    for name, api in list(vars(client).items()):
        if name.endswith("_api") and not isinstance(api, TimedClient):
            setattr(client, name, TimedClient(api, seconds))


def timed_client(seconds: float, **kwargs):
    """A ``kfp.Client`` whose every call to the server carries a request timeout.

    ``kfp.Client``'s methods take no timeout, and its generated API objects
    (``_run_api``, ``_upload_api`` ...) wait for ever on a server that does not answer;
    each of them takes ``_request_timeout``, which :class:`~distrain.k8s.api.TimedClient`
    adds. The client asks the server's health once while it is built (to learn whether
    the deployment is multi-user): that call is bounded too.

    Args:
        seconds: Request timeout of each call (connect and read).
        **kwargs: ``kfp.Client``'s arguments.
    """
    import kfp

    class Timed(kfp.Client):
        def get_kfp_healthz(self, sleep_duration: int = 5):
            _bound(self, seconds)
            return super().get_kfp_healthz(sleep_duration)

    client = Timed(**kwargs)
    _bound(client, seconds)
    return client


def submit(cfg: SubmitConfig, client=None, out: TextIO | None = None) -> int:
    """Runs one submission; returns the exit code (see the module's docstring).

    Args:
        cfg: What to submit.
        client: A ``kfp.Client`` (default: one for ``cfg.host``).
        out: Where progress goes (default: stdout).
    """
    from distrain.pipelines.common import build_pipeline

    out = out or sys.stdout
    say = lambda msg: print(f"distrain submit: {msg}", file=out, flush=True)  # noqa: E731

    if cfg.pipeline not in datasets.names():
        raise SubmitError(f"unknown pipeline {cfg.pipeline!r}")
    defaults = datasets.get(cfg.pipeline).pipeline
    pipeline_fn = build_pipeline(defaults, gpu=cfg.gpu)
    _check(cfg, pipeline_fn)

    if client is None:
        client = timed_client(
            cfg.request_timeout,
            host=cfg.host,
            namespace=cfg.namespace or "kubeflow",
            existing_token=cfg.token or os.environ.get("KFP_TOKEN") or None,
        )
    pipeline_id, version_name, version = _upload(cfg, client, pipeline_fn, say)
    experiment = client.create_experiment(cfg.experiment, namespace=cfg.namespace)
    params = dict(cfg.params)
    if cfg.gate:
        params["gate"] = cfg.gate
    run = client.run_pipeline(
        experiment.experiment_id,
        cfg.run_name or f"{cfg.pipeline}-{version_name}",
        params=params,
        pipeline_id=pipeline_id,
        version_id=version.pipeline_version_id,
        service_account=cfg.service_account,
    )
    link = f"{cfg.host.rstrip('/')}/#/runs/details/{run.run_id}"
    say(f"run {run.run_id} started: {link}")
    if not (cfg.wait or cfg.gate):
        return 0

    run, state = _wait(cfg, client, run, link, say)
    if state is None:
        return 3
    if state == "SUCCEEDED":
        say(f"run succeeded{' and met the gate ' + repr(cfg.gate) if cfg.gate else ''}: {link}")
        return 0
    say(f"see {link}")
    gate = _gate_failure(run)
    if gate:
        say(f"GATE FAILED ({cfg.gate}): {gate}")
        return 1
    step, message = _failed_step(run)
    if step:  # the last line: which step, and its own words
        message = message.removeprefix(f"distrain: {step} failed: ")
        say(f"run {state.lower()}: step {step!r} failed{': ' + message if message else ''}")
    else:
        message = run.error.message if getattr(run, "error", None) else ""
        say(f"run {state.lower()}{': ' + message if message else ''}")
    return 1


def _upload(cfg: SubmitConfig, client, pipeline_fn, say):
    """Compiles the pipeline and uploads it as a new version (the pipeline too, if new).

    Returns:
        The pipeline's id, the version's name and the version.
    """
    from kfp import compiler

    stamp = time.strftime("%Y%m%d-%H%M%S")
    with tempfile.TemporaryDirectory() as tmp:
        package = str(Path(tmp) / f"{cfg.pipeline}.yaml")
        compiler.Compiler().compile(pipeline_fn, package)
        name = f"distrain-{cfg.pipeline}"
        pipeline_id = client.get_pipeline_id(name)
        version_name = f"{__version__}-{stamp}"
        if pipeline_id is None:
            pipeline = client.upload_pipeline(package, pipeline_name=name)
            pipeline_id = pipeline.pipeline_id
            say(f"uploaded pipeline {name} ({pipeline_id})")
        version = client.upload_pipeline_version(
            package, pipeline_version_name=version_name, pipeline_id=pipeline_id
        )
        say(f"uploaded version {version_name} ({version.pipeline_version_id})")
    return pipeline_id, version_name, version


def _wait(cfg: SubmitConfig, client, run, link: str, say):
    """Follows the run to a final state, saying each change.

    Returns:
        The run as last read and its final state (None: ``cfg.timeout`` passed first).
    """
    start = time.monotonic()
    last = None
    while True:
        run = client.get_run(run.run_id)
        state = _state(run)
        if state != last:
            say(f"run {run.run_id}: {state}")
            last = state
        if state in FINAL_STATES:
            break
        if cfg.timeout and time.monotonic() - start > cfg.timeout:  # 0: wait for ever
            say(f"gave up waiting after {cfg.timeout:.0f} s; the run goes on: {link}")
            return run, None
        time.sleep(cfg.poll_seconds)
    return run, state
