"""A local HTTP server answering the KFP v2beta1 REST calls ``distrain submit`` makes.

Responses are kfp-server-api model objects serialised by its own ApiClient, and request
bodies are parsed back into those models, so a call the real client could not make, or
a reply it could not read, fails here as it would against a real server. The server
"runs" a pipeline by applying the pipeline's own quality-gate logic (distrain.base.gate) to
a canned comparison: what the gate step would do on the cluster.
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlparse

import kfp_server_api as api
import yaml

from distrain.base.gate import GateError, GateFailed, check_gate


class FakeKfp:
    """State of the fake server; ``url`` once started."""

    def __init__(self, comparison: dict, crash: str = "", polls_until_done: int = 2):
        self.comparison = comparison
        self.crash = crash  # a task failure message: the run fails before the gate
        self.polls_until_done = polls_until_done
        self.requests: list[tuple[str, str]] = []
        self.pipelines: dict[str, api.V2beta1Pipeline] = {}
        self.versions: dict[str, dict] = {}
        self.experiments: dict[str, api.V2beta1Experiment] = {}
        self.runs: dict[str, dict] = {}
        self._client = api.ApiClient()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeKfp:
        threading.Thread(target=self._server.serve_forever, daemon=True).start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()

    # -- models in and out ------------------------------------------------------------
    def to_json(self, model) -> bytes:
        return json.dumps(self._client.sanitize_for_serialization(model)).encode()

    def parse(self, body: bytes, model: str):
        return self._client._ApiClient__deserialize(json.loads(body or b"{}"), model)

    # -- the REST calls ---------------------------------------------------------------
    def handle(self, method: str, path: str, query: dict, body: bytes, headers) -> tuple:
        self.requests.append((method, path))
        base = "/apis/v2beta1"
        if method == "GET" and path == f"{base}/healthz":
            return 200, api.V2beta1GetHealthzResponse(multi_user=False)
        if method == "GET" and path == f"{base}/pipelines":
            wanted = _display_name_filter(query)
            found = [p for p in self.pipelines.values() if wanted in (None, p.display_name)]
            return 200, api.V2beta1ListPipelinesResponse(pipelines=found, total_size=len(found))
        if method == "POST" and path == f"{base}/pipelines/upload":
            spec = _uploaded_spec(body, headers)
            name = query["name"][0]
            pipeline = api.V2beta1Pipeline(pipeline_id=str(uuid.uuid4()), display_name=name)
            self.pipelines[pipeline.pipeline_id] = pipeline
            self._add_version(pipeline.pipeline_id, name, spec)
            return 200, pipeline
        if method == "POST" and path == f"{base}/pipelines/upload_version":
            pipeline_id = query["pipelineid"][0]
            if pipeline_id not in self.pipelines:
                return 404, {"error": f"pipeline {pipeline_id} not found", "code": 5}
            version = self._add_version(
                pipeline_id, query["name"][0], _uploaded_spec(body, headers)
            )
            return 200, version["model"]
        if method == "GET" and path == f"{base}/experiments":
            wanted = _display_name_filter(query)
            found = [e for e in self.experiments.values() if wanted in (None, e.display_name)]
            return 200, api.V2beta1ListExperimentsResponse(experiments=found, total_size=len(found))
        if method == "POST" and path == f"{base}/experiments":
            exp = self.parse(body, "V2beta1Experiment")
            exp.experiment_id = str(uuid.uuid4())
            self.experiments[exp.experiment_id] = exp
            return 200, exp
        if method == "POST" and path == f"{base}/runs":
            return self._create_run(self.parse(body, "V2beta1Run"))
        m = re.fullmatch(rf"{base}/runs/([-0-9a-f]+)", path)
        if method == "GET" and m:
            return self._poll_run(m.group(1))
        return 404, {"error": f"fake KFP: no route for {method} {path}", "code": 5}

    def _add_version(self, pipeline_id: str, name: str, spec: dict) -> dict:
        model = api.V2beta1PipelineVersion(
            pipeline_id=pipeline_id, pipeline_version_id=str(uuid.uuid4()), display_name=name
        )
        self.versions[model.pipeline_version_id] = {"model": model, "spec": spec}
        return self.versions[model.pipeline_version_id]

    def _create_run(self, run: api.V2beta1Run) -> tuple:
        ref = run.pipeline_version_reference
        if not ref or ref.pipeline_version_id not in self.versions:
            return 400, {"error": "pipeline_version_reference names no uploaded version", "code": 3}
        if not run.experiment_id or run.experiment_id not in self.experiments:
            return 400, {"error": "unknown experiment", "code": 3}
        spec = self.versions[ref.pipeline_version_id]["spec"]
        declared = spec["root"]["inputDefinitions"]["parameters"]
        params = (run.runtime_config.parameters if run.runtime_config else None) or {}
        unknown = set(params) - set(declared)
        if unknown:
            return 400, {"error": f"unknown parameters {sorted(unknown)}", "code": 3}
        run.run_id = str(uuid.uuid4())
        run.state = "PENDING"
        self.runs[run.run_id] = {"model": run, "polls": 0, "params": params}
        return 200, run

    def _poll_run(self, run_id: str) -> tuple:
        if run_id not in self.runs:
            return 404, {"error": f"run {run_id} not found", "code": 5}
        entry = self.runs[run_id]
        entry["polls"] += 1
        run: api.V2beta1Run = entry["model"]
        if entry["polls"] < self.polls_until_done:
            run.state = "RUNNING"
            return 200, run
        if self.crash:
            run.state = "FAILED"
            run.error = api.GoogleRpcStatus(code=2, message=self.crash)
            run.run_details = _details(run_id, "train", self.crash)
            return 200, run
        try:  # what the pipeline's quality-gate step does with the comparison
            check_gate(self.comparison, entry["params"].get("gate", ""))
            run.state = "SUCCEEDED"
        except (GateFailed, GateError) as err:
            run.state = "FAILED"
            run.error = api.GoogleRpcStatus(code=2, message="task quality-gate failed")
            run.run_details = _details(run_id, "quality gate", str(err))
        return 200, run

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self):
                url = urlparse(self.path)
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                status, payload = fake.handle(
                    self.command, url.path, parse_qs(url.query), body, self.headers
                )
                data = (
                    json.dumps(payload).encode()
                    if isinstance(payload, dict)
                    else (fake.to_json(payload))
                )
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_DELETE = _serve

            def log_message(self, *args):
                pass

        return Handler


def _display_name_filter(query: dict) -> str | None:
    if "filter" not in query:
        return None
    for pred in json.loads(query["filter"][0]).get("predicates", []):
        if pred.get("key") in ("display_name", "name"):
            return pred.get("stringValue") or pred.get("string_value")
    return None


def _uploaded_spec(body: bytes, headers) -> dict:
    boundary = re.search(r"boundary=(\S+)", headers["Content-Type"]).group(1).encode()
    part = next(p for p in body.split(b"--" + boundary) if b'name="uploadfile"' in p)
    content = part.split(b"\r\n\r\n", 1)[1].rsplit(b"\r\n", 1)[0]
    docs = [d for d in yaml.safe_load_all(content.decode()) if d]
    return docs[0]


def _details(run_id: str, task: str, message: str) -> api.V2beta1RunDetails:
    return api.V2beta1RunDetails(
        task_details=[
            api.V2beta1PipelineTaskDetail(run_id=run_id, display_name="compare", state="SUCCEEDED"),
            api.V2beta1PipelineTaskDetail(
                run_id=run_id,
                display_name=task,
                state="FAILED",
                error=api.GoogleRpcStatus(code=2, message=message),
            ),
        ]
    )
