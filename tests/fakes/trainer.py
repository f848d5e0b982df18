"""Kubeflow Trainer's status server, played locally: what a TrainJob's trainers report to.

As the controller's (``pkg/statusserver`` of kubeflow/trainer): ``POST
/apis/trainer.kubeflow.org/v1alpha1/namespaces/NS/trainjobs/NAME/status`` over HTTPS
with a bearer token, a JSON ``UpdateTrainJobStatusRequest`` body; 200 and the body back,
or a ``metav1.Status`` with the error. Each report is checked here against the TrainJob
CRD's schema of ``status.trainerStatus`` (vendored in ``distrain/k8s/schemas/``, strict)
and its CEL rule, and kept with what was wrong with it.
"""

from __future__ import annotations

import json
import re
import shutil
import ssl
import subprocess
import threading
from datetime import datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

PATH = re.compile(
    r"^/apis/trainer\.kubeflow\.org/v1alpha1/namespaces/([^/]+)/trainjobs/([^/]+)/status$"
)


def status_schema() -> dict:
    """The strict schema of a TrainJob's ``status`` (Trainer's CRD, as distrain vendors it)."""
    from distrain.k8s.validate import trainer_schema

    return trainer_schema("TrainJob")["properties"]["status"]


def problems(body: object) -> list[str]:
    """What is wrong with a report's body, by the CRD (empty: nothing)."""
    import jsonschema

    if not isinstance(body, dict) or set(body) != {"trainerStatus"}:
        return [f"the body is not {{'trainerStatus': ...}}: {body!r}"]
    status = {"trainerStatus": body["trainerStatus"]}
    found = [e.message for e in jsonschema.Draft7Validator(status_schema()).iter_errors(status)]
    trainer = body["trainerStatus"]
    if isinstance(trainer, dict):
        if "lastUpdatedTime" not in trainer:  # the CRD's CEL rule, has(self.lastUpdatedTime)
            found.append("lastUpdatedTime is required when trainerStatus is present")
        else:  # format: date-time, as Kubernetes' metav1.Time parses it (RFC 3339)
            try:
                datetime.strptime(trainer["lastUpdatedTime"], "%Y-%m-%dT%H:%M:%SZ")
            except (TypeError, ValueError):
                found.append(f"lastUpdatedTime {trainer['lastUpdatedTime']!r} is not RFC 3339")
    return found


class Controller:
    """The status endpoint of one TrainJob, over HTTPS with its own CA (a self-signed cert).

    Attributes:
        reports: Every request: ``{"path", "token", "body", "problems"}``.
        answer: The HTTP status the next requests get (200, or an error with a message).
    """

    def __init__(self, folder: Path, namespace="team-a", name="mnist-sync-2", token="tok-1"):
        if not shutil.which("openssl"):
            pytest.skip("openssl is needed to make the fake controller's certificate")
        self.ca_file, key = folder / "ca.crt", folder / "tls.key"
        subprocess.run(
            ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
             "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
             "-keyout", str(key), "-out", str(self.ca_file)],
            check=True, capture_output=True,
        )  # fmt: skip
        self.token_file = folder / "token"
        self.token_file.write_text(token + "\n")
        self.reports: list[dict] = []
        self.answer = 200
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_POST(self):
                body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
                try:
                    parsed = json.loads(body)
                except ValueError:
                    parsed = None
                found = PATH.match(self.path)
                report = {
                    "path": self.path,
                    "token": self.headers.get("Authorization", ""),
                    "content_type": self.headers.get("Content-Type", ""),
                    "body": parsed,
                    "problems": problems(parsed) if found else [f"not the status path {self.path}"],
                }
                outer.reports.append(report)
                if outer.answer != 200:
                    status = {"kind": "Status", "status": "Failure", "code": outer.answer,
                              "message": "Train job not found", "reason": "NotFound"}  # fmt: skip
                    self._send(outer.answer, status)
                elif report["problems"]:
                    self._send(422, {"status": "Failure", "message": report["problems"][0]})
                else:
                    self._send(200, parsed)

            def _send(self, code: int, data: object) -> None:
                out = json.dumps(data).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(out)))
                self.end_headers()
                self.wfile.write(out)

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(self.ca_file, key)
        self.httpd.socket = context.wrap_socket(self.httpd.socket, server_side=True)
        self.url = (
            f"https://127.0.0.1:{self.httpd.server_address[1]}"
            f"/apis/trainer.kubeflow.org/v1alpha1/namespaces/{namespace}/trainjobs/{name}/status"
        )
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def env(self) -> dict[str, str]:
        """The variables Trainer's TrainJobStatus plugin injects, pointing here."""
        from distrain.train.status import CA_CERT_ENV, TOKEN_ENV, URL_ENV

        return {URL_ENV: self.url, CA_CERT_ENV: str(self.ca_file), TOKEN_ENV: str(self.token_file)}

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
