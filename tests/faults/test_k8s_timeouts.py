"""Every wait on the Kubernetes API has a bound (issue 37, point 6; issue 49).

The check is independent of the launcher's own code: a real ``kubernetes`` client talks
to a TCP server that accepts connections and never answers, as an API server behind a
stuck proxy would. Without request timeouts the launcher waits there for ever. Every call
site of the Kubernetes client in ``distrain/k8s/`` (and ``submit``) is read from the source
and must name its ``_request_timeout``; ``distrain submit``'s KFP client is bounded the
same way, and its ``--wait`` waits a finite time unless told otherwise.
"""

import ast
import io
import socket
import threading
import time

import pytest
from kubernetes import client

from distrain.k8s.api import KubeApi, TimedClient
from distrain.k8s.config import KubernetesConfig
from distrain.k8s.launcher import ClusterRun
from distrain.k8s.train import remove_earlier_attempts
from distrain.submit import WAIT_SECONDS, SubmitConfig, submit, timed_client
from tests.conftest import ROOT


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


# -- every call site, read from the source -------------------------------------------------
# The modules that talk to the Kubernetes API (and submit, which talks to KFP's).
CALLERS = [*sorted((ROOT / "distrain" / "k8s").glob("*.py")), ROOT / "distrain" / "submit.py"]


def _api_methods() -> set[str]:
    """The methods of every API class of the Kubernetes client (``CoreV1Api`` ...)."""
    names = set()
    for cls_name in dir(client):
        cls = getattr(client, cls_name)
        if isinstance(cls, type) and cls_name.endswith("Api"):
            names |= {n for n, v in vars(cls).items() if callable(v) and not n.startswith("_")}
    return names


def _unbounded_calls(source: str, methods: set[str]) -> tuple[list[str], int]:
    """The Kubernetes API call sites in ``source`` without ``_request_timeout``, and how many.

    A method is used either called (``api.core.list_namespaced_pod(..., _request_timeout=t)``)
    or handed to a call that calls it with that call's keywords (``self.call("list pods",
    api.core.list_namespaced_pod, ns, _request_timeout=t)``, a watch's ``stream``, which
    also needs ``timeout_seconds``). Anything else is a use this test cannot follow.
    """
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    bad, sites = [], 0
    used = [n for n in ast.walk(tree) if isinstance(n, ast.Attribute) and n.attr in methods]
    for node in sorted(used, key=lambda n: (n.lineno, n.col_offset)):
        sites += 1
        call = parents.get(node)
        where = f"line {node.lineno}: {ast.unparse(node)}"
        if not isinstance(call, ast.Call) or not (call.func is node or node in call.args):
            bad.append(f"{where} (used in a way the test cannot follow)")
            continue
        given = {kw.arg for kw in call.keywords}
        needed = {"_request_timeout"}
        if call.func is not node and isinstance(call.func, ast.Attribute):
            if call.func.attr == "stream":  # kubernetes.watch.Watch().stream(fn, ...)
                needed.add("timeout_seconds")
        if needed - given:
            bad.append(f"{where} (no {', '.join(sorted(needed - given))})")
    return bad, sites


@pytest.mark.case("k8s/request-timeouts")
def test_every_kubernetes_api_call_site_names_its_request_timeout():
    methods = _api_methods()
    assert {"list_namespaced_pod", "create_namespaced_custom_object"} <= methods
    found, sites = [], {}
    for path in CALLERS:
        bad, sites[path.name] = _unbounded_calls(path.read_text(), methods)
        found += [f"{path.relative_to(ROOT)} {b}" for b in bad]
    # The launcher's 13 call sites and the retry's 5 (remove_earlier_attempts) at least.
    assert sites["launcher.py"] >= 13 and sites["train.py"] >= 5, sites
    assert not found, "Kubernetes API calls without a request timeout:\n" + "\n".join(found)


def test_the_scan_sees_calls_without_a_timeout_and_calls_handed_to_a_caller():
    methods = _api_methods()
    source = (
        "api.core.list_namespaced_pod(ns, label_selector=s)\n"
        "api.core.list_namespaced_pod(ns, _request_timeout=t)\n"
        "call('x', api.batch.read_namespaced_job_status, n, ns)\n"
        "call('x', api.batch.read_namespaced_job_status, n, ns, _request_timeout=t)\n"
        "w.stream(api.core.list_namespaced_pod, ns, _request_timeout=t)\n"
        "f = api.core.delete_namespaced_service\n"
        "other.list_things(ns)\n"
    )
    bad, sites = _unbounded_calls(source, methods)
    assert sites == 6
    assert [b.split(":")[0] for b in bad] == ["line 1", "line 3", "line 5", "line 6"]
    assert "timeout_seconds" in bad[2] and "cannot follow" in bad[3]


@pytest.mark.case("k8s/request-timeouts")
def test_removing_an_earlier_attempt_is_bounded_on_a_silent_server(silent_server):
    result = {}

    def go():
        try:
            remove_earlier_attempts(
                _real_api(silent_server),
                "default",
                "key",
                {"NetworkPolicy", "Service", "Job", "MPIJob"},
                api_timeout_seconds=0.5,
                sleep=lambda s: None,
            )
        except BaseException as err:  # noqa: BLE001 (the test reads it)
            result["err"] = err

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(30)
    assert not thread.is_alive(), "the retry hung listing an earlier attempt's objects"
    assert "timed out" in str(result["err"]).lower()


@pytest.mark.case("k8s/request-timeouts")
def test_submit_is_bounded_on_a_kfp_server_that_never_answers(silent_server):
    cfg = SubmitConfig(pipeline="mnist", host=silent_server, request_timeout=0.5, wait=True)
    result = {}

    def go():
        try:
            submit(cfg, out=io.StringIO())
        except BaseException as err:  # noqa: BLE001 (the test reads it)
            result["err"] = err

    thread = threading.Thread(target=go, daemon=True)
    thread.start()
    thread.join(120)  # compiling the pipeline takes seconds
    assert not thread.is_alive(), "submit hung on a KFP server that does not answer"
    assert "timed out" in str(result["err"]).lower()


def test_submit_builds_its_kfp_client_bounded_only():
    tree = ast.parse((ROOT / "distrain" / "submit.py").read_text())
    direct = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and (getattr(node.func, "attr", None) or getattr(node.func, "id", None)) == "Client"
    ]
    assert direct == [], f"submit.py builds a kfp.Client without timed_client: lines {direct}"


@pytest.mark.case("k8s/request-timeouts")
def test_every_generated_api_of_the_submit_client_is_bounded():
    import kfp_server_api

    client = timed_client(3, host="http://127.0.0.1:1", namespace="ns")
    apis = {n: v for n, v in vars(client).items() if n.endswith("_api")}
    assert {"_run_api", "_upload_api", "_pipelines_api", "_experiment_api"} <= set(apis)
    for name, api in apis.items():
        assert isinstance(api, TimedClient), name
        assert api._timeout == (3, 3)
    assert isinstance(apis["_run_api"]._client, kfp_server_api.RunServiceApi)


def test_submit_waits_a_finite_time_by_default():
    from distrain.cli import build_parser

    assert 0 < SubmitConfig(pipeline="mnist", host="h").timeout <= 24 * 3600
    args = build_parser().parse_args(["submit", "mnist", "--host", "h"])
    assert args.timeout == SubmitConfig.timeout == WAIT_SECONDS
    assert SubmitConfig.request_timeout > 0
