"""Every wait on the Kubernetes API has a bound (issue 37, point 6).

The check is independent of the launcher's own code: a real ``kubernetes`` client talks
to a TCP server that accepts connections and never answers, as an API server behind a
stuck proxy would. Without request timeouts the launcher waits there for ever.
"""

import socket
import threading
import time

import pytest
from kubernetes import client

from distrain.k8s.config import KubernetesConfig
from distrain.k8s.launcher import ClusterRun, KubeApi


@pytest.fixture
def silent_server():
    """A server that accepts every connection and never sends a byte."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    held = []
    stop = threading.Event()

    def accept():
        sock.settimeout(0.2)
        while not stop.is_set():
            try:
                held.append(sock.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    stop.set()
    thread.join(2)
    for conn in held:
        conn.close()
    sock.close()


def _real_api(host: str) -> KubeApi:
    conf = client.Configuration()
    conf.host = host
    api_client = client.ApiClient(conf)
    return KubeApi(
        client.CoreV1Api(api_client),
        client.BatchV1Api(api_client),
        client.CustomObjectsApi(api_client),
        client.NetworkingV1Api(api_client),
    )


def _service(name: str) -> dict:
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name}, "spec": {}}


def test_an_api_server_that_never_answers_fails_the_run_within_the_bound(silent_server):
    run = ClusterRun(
        _real_api(silent_server),
        [_service("distrain-x")],
        "distrain-x",
        "default",
        api_timeout_seconds=0.5,
        api_retries=2,
        sleep=lambda s: None,
    )
    result = {}

    def go():
        try:
            run.run()
        except BaseException as err:  # noqa: BLE001 (the test reads it)
            result["err"] = err

    start = time.monotonic()
    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the launcher hung on an API server that does not answer"
    # create: 2 attempts; no cleanup call is needed (nothing was created).
    assert time.monotonic() - start < 15
    assert "timed out" in str(result["err"]).lower() or "timeout" in repr(result["err"]).lower()


def test_every_call_carries_a_request_timeout_unless_it_names_its_own():
    seen = []

    class Recorder:
        def list_namespaced_pod(self, namespace, **kwargs):
            seen.append(kwargs.get("_request_timeout"))

        def read_namespaced_pod_log(self, name, namespace, **kwargs):
            seen.append(kwargs.get("_request_timeout"))

    rec = Recorder()
    api = KubeApi(rec, rec, rec, rec).timed(7)
    api.core.list_namespaced_pod("ns")
    api.core.read_namespaced_pod_log("p", "ns", _request_timeout=(7, 600))
    # Timing twice does not nest the wrappers.
    api.timed(3).core.list_namespaced_pod("ns")
    assert seen == [(7, 7), (7, 600), (3, 3)]


def test_a_run_has_a_deadline_by_default():
    k = KubernetesConfig()
    assert 0 < k.timeout_seconds <= 7 * 24 * 3600
    assert k.api_timeout_seconds > 0
    with pytest.raises(ValueError, match="api_timeout_seconds"):
        KubernetesConfig(api_timeout_seconds=0)
