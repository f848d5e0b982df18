"""A shared cluster: what the launcher's objects and the images give away, checked rule by rule.

TensorFlow's gRPC servers and Horovod's transport have no authentication, so each run's pods
take connections from that run's pods only; every pod meets Pod Security's "restricted"
profile; the task's volumes are allowlisted; parameter servers cannot outlive a deadline; and
no pod without a GPU is handed every GPU of its node by the image.
"""

from __future__ import annotations

import re

import pytest
import yaml

from distrain.base.errors import ConfigError
from distrain.k8s.config import KubernetesConfig
from distrain.k8s.objects import RUN_LABEL, build_objects
from distrain.train.config import TrainConfig
from distrain.train.modes import mode_names
from tests.conftest import ROOT

EXAMPLES = {
    "single": None,
    "ssp": "ssp:2:staleness=2",
    "easgd": "easgd:2:tau=4",
    "avg": "avg:2:period=4",
    "hybrid": "hybrid:1:2",
}
CPU = KubernetesConfig(namespace="ns")
GPU = KubernetesConfig(namespace="ns", gpus_per_worker=2)
TRAINJOB = KubernetesConfig(namespace="ns", launcher="trainjob")


def _runs() -> list[str]:
    runs = []
    for mode in mode_names():
        run = EXAMPLES.get(mode, f"{mode}:2")
        if run and TrainConfig(data_dir="/d", output_dir="/o", run=run).run.impl.needs_cluster():
            runs.append(run)
    return runs


def _objects(run: str, k: KubernetesConfig) -> list[dict]:
    cfg = TrainConfig(data_dir="/mnt/distrain/d", output_dir="/mnt/distrain/o", run=run)
    return build_objects(cfg, k, "r1", "/mnt/distrain/o/c.json")


def _pod_templates(obj: dict) -> list[tuple[dict, dict]]:
    """(labels, pod spec) of each pod an object makes (a TrainJob's come from its runtime)."""
    if obj["kind"] == "MPIJob":
        return [
            (spec["template"]["metadata"]["labels"], spec["template"]["spec"])
            for spec in obj["spec"]["mpiReplicaSpecs"].values()
        ]
    if obj["kind"] == "Job":
        template = obj["spec"]["template"]
        return [(template["metadata"]["labels"], template["spec"])]
    if obj["kind"] == "TrainJob":
        jobs = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
        return [
            (job["template"]["spec"]["template"]["metadata"]["labels"], None)
            for job in jobs["replicatedJobs"]
        ]
    return []


def _runtime_pods() -> list[dict]:
    """The pod specs of the ClusterTrainingRuntimes that TrainJobs run on."""
    pods = []
    for path in sorted((ROOT / "manifests" / "trainer").glob("*runtime*.yaml")):
        runtime = yaml.safe_load(path.read_text())
        for job in runtime["spec"]["template"]["spec"]["replicatedJobs"]:
            pods.append(job["template"]["spec"]["template"]["spec"])
    assert len(pods) == 4  # CPU and GPU runtimes, a launcher and a node each
    return pods


# Pod Security Standards, "restricted" (v1.30): the rules that a pod spec can break.
RESTRICTED_VOLUMES = {
    "configMap",
    "csi",
    "downwardAPI",
    "emptyDir",
    "ephemeral",
    "persistentVolumeClaim",
    "projected",
    "secret",
}


def _restricted_violations(pod: dict) -> list[str]:
    bad = []
    for field in ("hostNetwork", "hostPID", "hostIPC"):
        if pod.get(field):
            bad.append(field)
    pod_sc = pod.get("securityContext") or {}
    for volume in pod.get("volumes") or []:
        if set(volume) - {"name"} - RESTRICTED_VOLUMES:
            bad.append(f"volume {volume['name']}")
    for c in pod.get("initContainers", []) + pod["containers"]:
        sc = c.get("securityContext") or {}
        if sc.get("privileged"):
            bad.append(f"{c['name']}: privileged")
        if sc.get("allowPrivilegeEscalation") is not False:
            bad.append(f"{c['name']}: allowPrivilegeEscalation")
        if "ALL" not in (sc.get("capabilities") or {}).get("drop", []):
            bad.append(f"{c['name']}: capabilities not dropped")
        if set((sc.get("capabilities") or {}).get("add", [])) - {"NET_BIND_SERVICE"}:
            bad.append(f"{c['name']}: capabilities added")
        if not (sc.get("runAsNonRoot") or pod_sc.get("runAsNonRoot")):
            bad.append(f"{c['name']}: runAsNonRoot")
        if (sc.get("runAsUser", pod_sc.get("runAsUser")) or 0) == 0:
            bad.append(f"{c['name']}: runs as uid 0")
        seccomp = (sc.get("seccompProfile") or pod_sc.get("seccompProfile") or {}).get("type")
        if seccomp not in ("RuntimeDefault", "Localhost"):
            bad.append(f"{c['name']}: seccomp {seccomp}")
        if any(p.get("hostPort") for p in c.get("ports") or []):
            bad.append(f"{c['name']}: hostPort")
    return bad


def test_the_restricted_check_catches_what_it_must():
    pod = {"containers": [{"name": "c"}], "volumes": [{"name": "h", "hostPath": {"path": "/"}}]}
    found = " ".join(_restricted_violations(pod))
    for rule in ("hostPath", "allowPrivilegeEscalation", "capabilities", "runAsNonRoot", "seccomp"):
        assert rule in found or (rule == "hostPath" and "volume h" in found), rule


@pytest.mark.parametrize("k", [CPU, GPU, TRAINJOB], ids=["cpu", "gpu", "trainjob"])
def test_every_pod_the_launcher_creates_meets_pod_security_restricted(k):
    runs = _runs()
    assert {"sync:2", "async:2", "syncreplicas:2"} <= set(runs)
    checked = 0
    for run in runs:
        if k is GPU and run.startswith("hybrid"):
            continue  # its ranks do not fill 2-GPU pods; another test refuses that
        for obj in _objects(run, k):
            for _, pod in _pod_templates(obj):
                if pod is not None:
                    assert _restricted_violations(pod) == [], f"{run} {obj['kind']}"
                    checked += 1
    if k is TRAINJOB:
        for pod in _runtime_pods():
            assert _restricted_violations(pod) == [], pod["containers"][0]["image"]
            checked += 1
    assert checked >= 10


@pytest.mark.parametrize("k", [CPU, TRAINJOB], ids=["kubernetes", "trainjob"])
@pytest.mark.parametrize("run", ["sync:2", "async:2:ps=1", "syncreplicas:3:aggregate=2"])
def test_each_run_admits_connections_from_its_own_pods_only(run, k):
    objects = _objects(run, k)
    policy = objects[0]  # in force before any pod of the run exists
    assert policy["kind"] == "NetworkPolicy"
    selector = policy["spec"]["podSelector"]["matchLabels"]
    assert selector == {RUN_LABEL: "r1"}
    assert policy["spec"]["policyTypes"] == ["Ingress", "Egress"]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [{"podSelector": {"matchLabels": {RUN_LABEL: "r1"}}}]
    pods = [labels for obj in objects[1:] for labels, _ in _pod_templates(obj)]
    assert pods and all(labels.items() >= selector.items() for labels in pods)
    services = [o for o in objects if o["kind"] == "Service"]
    if services:
        # Parameter-server runs: only the TensorFlow servers' port.
        assert rule["ports"] == [{"protocol": "TCP", "port": k.port}]
    else:
        # MPI: ssh and the TCP transport on ports chosen at run time, to the run's pods.
        assert "ports" not in rule


def test_another_runs_pods_are_not_admitted():
    ours = _objects("async:2:ps=1", CPU)
    theirs = KubernetesConfig(namespace="ns")
    cfg = TrainConfig(data_dir="/d", output_dir="/o", run="async:2:ps=1")
    other = build_objects(cfg, theirs, "r2", "/o/c.json")
    admitted = ours[0]["spec"]["ingress"][0]["from"][0]["podSelector"]["matchLabels"]
    for obj in other[1:]:
        for labels, _ in _pod_templates(obj):
            assert not labels.items() >= admitted.items()


@pytest.mark.parametrize(
    "volume",
    [
        {"name": "node", "hostPath": {"path": "/var/run/docker.sock"}},
        {"name": "nfs", "nfs": {"server": "10.0.0.1", "path": "/"}},
        {"name": "empty"},
    ],
)
def test_a_task_volume_outside_the_allowlist_is_refused_by_name(volume):
    with pytest.raises(ConfigError, match=rf"volume '{volume['name']}'"):
        KubernetesConfig(volumes=[volume], volume_mounts=[])


def test_allowed_task_volumes_reach_the_pods():
    volumes = [
        {"name": "ws", "persistentVolumeClaim": {"claimName": "kfp-ws"}},
        {"name": "scratch", "emptyDir": {}},
    ]
    k = KubernetesConfig(
        namespace="ns",
        volumes=volumes,
        volume_mounts=[{"name": "ws", "mountPath": "/mnt/distrain"}],
    )
    pods = [pod for obj in _objects("sync:2", k) for _, pod in _pod_templates(obj) if pod]
    worker = [p for p in pods if p.get("volumes")][0]
    assert {v["name"] for v in worker["volumes"]} == {"ws", "scratch"}


def test_parameter_server_jobs_have_a_deadline_by_default_and_the_runs_own_when_set():
    jobs = [o for o in _objects("async:2:ps=1", CPU) if o["kind"] == "Job"]
    assert len(jobs) == 4
    assert {j["spec"]["activeDeadlineSeconds"] for j in jobs} == {CPU.job_deadline_seconds}
    assert CPU.job_deadline_seconds == 3 * 24 * 3600
    timed = KubernetesConfig(namespace="ns", timeout_seconds=600)
    jobs = [o for o in _objects("async:2:ps=1", timed) if o["kind"] == "Job"]
    assert {j["spec"]["activeDeadlineSeconds"] for j in jobs} == {600}
    with pytest.raises(ConfigError, match="job_deadline_seconds"):
        KubernetesConfig(job_deadline_seconds=0)


def test_no_image_hands_every_gpu_to_pods_that_hold_none():
    # The device plugin sets NVIDIA_VISIBLE_DEVICES for the containers that ask for GPUs; an
    # image that sets it to "all" gives the GPU image's launcher, chief and parameter
    # servers every GPU of their node.
    for dockerfile in (ROOT / "images").glob("*.Dockerfile"):
        env = " ".join(re.findall(r"^ENV .*(?:\n\s+.*)*", dockerfile.read_text(), flags=re.M))
        assert "NVIDIA_VISIBLE_DEVICES" not in env, dockerfile.name
    for obj in _objects("async:2:ps=1", GPU) + _objects("sync:2", GPU):
        for _, pod in _pod_templates(obj):
            for c in pod["containers"]:
                names = {e["name"]: e["value"] for e in c.get("env") or []}
                assert names.get("NVIDIA_VISIBLE_DEVICES") in (None, "void", "none")
