"""The cluster's doors: which connections the namespace's and each run's NetworkPolicies admit.

Issue 49: parameter-server modes served gRPC (no authentication, every interface) from the
pipeline's own step pod, which no policy selected, and a run's pods, which run the user's
model code, could reach the API server, metadata endpoints and the internet. The policies
are evaluated connection by connection (``tests/fakes/netpol.py``, Kubernetes' rules), on
the rendered base manifests together with the launcher's own objects.
"""

from __future__ import annotations

import pytest

from distrain.k8s.config import KubernetesConfig
from distrain.k8s.objects import RUN_LABEL, build_objects
from distrain.k8s.validate import validate_all
from distrain.train.config import TrainConfig
from tests.fakes.netpol import Address, Pod, admitted
from tests.integration.test_hardening import _pod_templates
from tests.integration.test_manifests import MANIFESTS, _render

NS = "distrain"
# A KFP v2 step's pod (driver or executor): Argo's workflow label and KFP's podMetadata.
STEP_POD = Pod(
    NS,
    {
        "workflows.argoproj.io/workflow": "distrain-mnist-x7k2p",
        "pipelines.kubeflow.org/v2_component": "true",
    },
)
OTHER_STEP = Pod(NS, dict(STEP_POD.labels, **{"workflows.argoproj.io/workflow": "other-run"}))
KFP_API = Pod("kubeflow", {"app": "ml-pipeline", "application-crd-id": "kubeflow-pipelines"})
KFP_UI = Pod("kubeflow", {"app": "ml-pipeline-ui", "application-crd-id": "kubeflow-pipelines"})
UI_ARTIFACT = Pod(NS, {"app": "ml-pipeline-ui-artifact"})
ELSEWHERE = Pod("default", {"app": "anything"})
KUBE_DNS = Pod("kube-system", {"k8s-app": "kube-dns"})
API_SERVER = Address("10.96.0.1")
METADATA = Address("169.254.169.254")
INTERNET = Address("142.250.74.46")
GRPC = 2222  # the TensorFlow servers' port (KubernetesConfig.port), also sshd's


def _base_policies() -> list[dict]:
    policies = [o for o in _render(MANIFESTS / "base") if o["kind"] == "NetworkPolicy"]
    assert policies, "manifests/base has no NetworkPolicy"
    assert validate_all(policies) == len(policies)
    return policies


def _run(run: str, name: str, launcher: str = "kubernetes") -> tuple[dict, list[Pod]]:
    """A run's NetworkPolicy and its pods (from its objects' pod templates)."""
    cfg = TrainConfig(data_dir="/mnt/distrain/d", output_dir="/mnt/distrain/o", run=run)
    k = KubernetesConfig(namespace=NS, launcher=launcher)
    policy, *objects = build_objects(cfg, k, name, "/mnt/distrain/o/c.json")
    assert validate_all([policy]) == 1
    pods = [Pod(NS, labels) for obj in objects for labels, _ in _pod_templates(obj)]
    assert len(pods) >= 2
    return policy, pods


@pytest.mark.case("k8s/network-policy")
@pytest.mark.parametrize(
    "source",
    [KFP_API, OTHER_STEP, ELSEWHERE, UI_ARTIFACT],
    ids=["kfp-api", "another-step", "another-namespace", "kfp-ui-artifact"],
)
@pytest.mark.parametrize("port", [GRPC, 8080, 22])
def test_no_pod_reaches_a_step_pod_serving_a_local_parameter_server_run(source, port):
    # launcher=local: async:2:ps=1's chief, workers and servers are processes of the step's
    # own pod, talking over loopback (no policy filters it); from the network, nothing.
    assert not admitted(_base_policies(), source, STEP_POD, port)


@pytest.mark.case("k8s/network-policy")
def test_the_namespace_admits_only_what_kfp_itself_needs():
    policies = _base_policies()
    # Multi-user Kubeflow: the KFP UI reads artifacts through the profile's artifact server.
    assert admitted(policies, KFP_UI, UI_ARTIFACT, 3000)
    assert not admitted(policies, KFP_UI, UI_ARTIFACT, 22)
    assert not admitted(policies, ELSEWHERE, UI_ARTIFACT, 3000)
    assert not admitted(policies, STEP_POD, UI_ARTIFACT, 3000)
    # Standalone KFP applied into this namespace: its own servers stay reachable by the
    # steps that call them (the policy leaves KFP's install alone).
    kfp_here = Pod(NS, {"app": "ml-pipeline", "application-crd-id": "kubeflow-pipelines"})
    assert admitted(policies, STEP_POD, kfp_here, 8887)
    # Step pods still dial out (the launcher step calls the API server and KFP).
    assert admitted(policies, STEP_POD, API_SERVER, 443)
    assert admitted(policies, STEP_POD, KFP_API, 8887)


RUNS = [("sync:2", "kubernetes"), ("sync:2", "trainjob"), ("async:2:ps=1", "kubernetes")]


@pytest.mark.case("k8s/network-policy")
@pytest.mark.parametrize("run,launcher", RUNS, ids=[f"{r}-{la}" for r, la in RUNS])
def test_a_runs_pods_reach_their_own_run_and_dns_only(run, launcher):
    ours, pods = _run(run, "r1", launcher)
    theirs, other_pods = _run(run, "r2", launcher)
    policies = [*_base_policies(), ours, theirs]
    src, dst = pods[0], pods[-1]
    assert src.labels[RUN_LABEL] == dst.labels[RUN_LABEL] == "r1"
    # The run's own pods: its TensorFlow servers or ssh (and MPI's ports of the moment).
    assert admitted(policies, src, dst, GRPC) and admitted(policies, dst, src, GRPC)
    # DNS, over UDP and TCP, and nothing else of kube-system.
    assert admitted(policies, src, KUBE_DNS, 53, "UDP") and admitted(policies, src, KUBE_DNS, 53)
    assert not admitted(policies, src, KUBE_DNS, 443)
    # The user's model code runs in these pods: no API server, metadata, internet, KFP.
    for address in (API_SERVER, METADATA, INTERNET):
        assert not admitted(policies, src, address, 443), address
        assert not admitted(policies, src, address, 80), address
    assert not admitted(policies, src, KFP_API, 8887)
    assert not admitted(policies, src, STEP_POD, GRPC)
    # Another run's pods, either way; the step pods and other namespaces, inwards.
    for other in other_pods:
        assert not admitted(policies, src, other, GRPC)
        assert not admitted(policies, other, src, GRPC)
    for outsider in (STEP_POD, ELSEWHERE, KFP_API):
        assert not admitted(policies, outsider, dst, GRPC)


def test_the_evaluator_follows_kubernetes_rules():
    # No policy: everything open; a policy with no rules for a direction closes it.
    assert admitted([], ELSEWHERE, STEP_POD, 1)
    deny = {
        "metadata": {"namespace": NS},
        "spec": {"podSelector": {}, "policyTypes": ["Egress"]},
    }
    assert not admitted([deny], STEP_POD, ELSEWHERE, 1)
    assert admitted([deny], ELSEWHERE, STEP_POD, 1)  # egress only: ingress still open
    # A podSelector-only peer is the policy's own namespace; ipBlock matches addresses.
    allow = {
        "metadata": {"namespace": NS},
        "spec": {
            "podSelector": {},
            "egress": [
                {"to": [{"podSelector": {}}]},
                {"to": [{"ipBlock": {"cidr": "10.0.0.0/8", "except": ["10.96.0.0/12"]}}]},
            ],
        },
    }
    # Without policyTypes a policy is Ingress (+ Egress, having egress rules): with no
    # ingress rule it closes its pods to every source.
    assert not admitted([allow], STEP_POD, OTHER_STEP, 1)
    allow["spec"]["policyTypes"] = ["Egress"]
    assert admitted([allow], STEP_POD, OTHER_STEP, 1)
    assert not admitted([allow], STEP_POD, ELSEWHERE, 1)
    assert admitted([allow], STEP_POD, Address("10.1.2.3"), 1)
    assert not admitted([allow], STEP_POD, API_SERVER, 1)
    # Ports and protocols: a rule's ports limit it; UDP is not TCP.
    dns_only = {
        "metadata": {"namespace": NS},
        "spec": {
            "podSelector": {},
            "policyTypes": ["Egress"],
            "egress": [{"ports": [{"protocol": "UDP", "port": 53}]}],
        },
    }
    assert admitted([dns_only], STEP_POD, KUBE_DNS, 53, "UDP")
    assert not admitted([dns_only], STEP_POD, KUBE_DNS, 53, "TCP")
    assert not admitted([dns_only], STEP_POD, KUBE_DNS, 54, "UDP")


# Kubeflow Trainer's controller, by its manifests' labels and its Helm chart's.
TRAINER = Pod(
    "kubeflow-system",
    {"app.kubernetes.io/name": "trainer", "app.kubernetes.io/component": "manager",
     "app.kubernetes.io/part-of": "kubeflow"},
)  # fmt: skip
TRAINER_CHART = Pod(
    "kubeflow", dict(TRAINER.labels, **{"app.kubernetes.io/name": "kubeflow-trainer"})
)
TRAINER_WEBHOOK = 9443


@pytest.mark.case("k8s/network-policy")
@pytest.mark.parametrize("run,launcher", RUNS, ids=[f"{r}-{la}" for r, la in RUNS])
def test_only_a_trainjobs_pods_reach_trainers_status_server_and_only_it(run, launcher):
    from distrain.k8s.objects import TRAINER_STATUS_PORT

    ours, pods = _run(run, "r1", launcher)
    policies = [*_base_policies(), ours]
    for pod in pods:
        for trainer in (TRAINER, TRAINER_CHART):
            # Rank 0 reports its progress (distrain.train.status): a TrainJob's pods only.
            assert admitted(policies, pod, trainer, TRAINER_STATUS_PORT) == (launcher == "trainjob")
            assert not admitted(policies, pod, trainer, TRAINER_WEBHOOK)
        # Another manager-labelled pod (not Trainer's) and the API server stay out of reach.
        other = Pod("kubeflow", dict(TRAINER.labels, **{"app.kubernetes.io/name": "katib"}))
        assert not admitted(policies, pod, other, TRAINER_STATUS_PORT)
        assert not admitted(policies, pod, API_SERVER, TRAINER_STATUS_PORT)
