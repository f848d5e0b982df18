"""manifests/ (kustomize) and the launcher's objects: rendered, schema-valid, least privilege."""

import json
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from distrain.base.errors import ConfigError
from distrain.k8s.config import KubernetesConfig
from distrain.k8s.objects import RUN_LABEL, build_objects
from distrain.k8s.validate import ManifestError, validate_all, validate_object
from distrain.train.config import TrainConfig
from distrain.train.horovod import mca_options
from tests.conftest import ROOT

MANIFESTS = ROOT / "manifests"
KUSTOMIZATIONS = sorted(p.parent for p in MANIFESTS.rglob("kustomization.yaml"))
CLUSTER_SCOPED = {
    "Namespace",
    "ClusterRole",
    "ClusterRoleBinding",
    "PersistentVolume",
    "StorageClass",
    "CustomResourceDefinition",
    "Node",
}


def _workload(*args) -> list[dict]:
    """The run's objects but its NetworkPolicy (build_objects puts that first)."""
    policy, *objects = build_objects(*args)
    assert policy["kind"] == "NetworkPolicy"
    return objects


def _render(directory) -> list[dict]:
    kubectl = shutil.which("kubectl")
    assert kubectl, "kubectl (Debian's kubernetes-client) is needed to render the overlays"
    out = subprocess.run(
        [kubectl, "kustomize", str(directory)], check=True, capture_output=True, text=True
    ).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def test_every_kustomization_is_found():
    names = {str(p.relative_to(MANIFESTS)) for p in KUSTOMIZATIONS}
    assert {
        "base",
        "templates",
        "overlays/gke-gpu",
        "overlays/eks-gpu",
        "examples/gke-gpu",
        "trainer",
    } <= names


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_overlay_renders_and_validates(directory):
    objects = _render(directory)
    assert objects
    assert validate_all(objects) == len(objects)


@pytest.mark.parametrize("directory", KUSTOMIZATIONS, ids=lambda p: str(p.relative_to(MANIFESTS)))
def test_rbac_grants_nothing_cluster_wide(directory):
    objects = _render(directory)
    for obj in objects:
        kind = obj["kind"]
        assert kind not in ("ClusterRole", "ClusterRoleBinding"), obj["metadata"]["name"]
        if kind == "ClusterTrainingRuntime":
            # Cluster-scoped, applied by an admin after Trainer; it grants no rights.
            assert directory.name == "trainer", directory
            continue
        if kind in CLUSTER_SCOPED:
            assert kind == "Namespace", f"{kind} is cluster-scoped"
            continue
        assert (
            obj["metadata"].get("namespace")
            or directory.name in ("templates",)
            or (directory.parent.name == "examples")
        ), f"{kind}/{obj['metadata']['name']} has no namespace"
        if kind == "Role":
            for rule in obj["rules"]:
                assert "*" not in rule.get("apiGroups", []) + rule["resources"] + rule["verbs"]
        if kind == "RoleBinding":
            ns = obj["metadata"]["namespace"]
            assert obj["roleRef"]["kind"] == "Role"
            for subject in obj["subjects"]:
                # A binding without the subject's namespace is rejected by the API server;
                # one to another namespace would grant rights across namespaces.
                assert subject["kind"] == "ServiceAccount"
                assert subject.get("namespace") == ns, subject


def test_gpu_examples_place_only_compute_pods_on_the_gpu_pool():
    for cloud, label in (
        ("gke-gpu", "cloud.google.com/gke-accelerator"),
        ("eks-gpu", "eks.amazonaws.com/nodegroup"),
    ):
        objects = _render(MANIFESTS / "examples" / cloud)
        mpijob = next(o for o in objects if o["kind"] == "MPIJob")
        worker = mpijob["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]
        assert label in worker["nodeSelector"]
        assert worker["tolerations"][0]["key"] == "nvidia.com/gpu"
        assert worker["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] == "1"
        assert worker["containers"][0]["image"].split(":")[0].endswith("trainer-gpu")
        jobs = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Job"}
        for name, job in jobs.items():
            spec = job["spec"]["template"]["spec"]
            on_gpu = "-worker-" in name
            assert (label in spec.get("nodeSelector", {})) == on_gpu, name
            limits = spec["containers"][0]["resources"]["limits"]
            assert ("nvidia.com/gpu" in limits) == on_gpu, name


def test_templates_are_what_the_launcher_creates(tmp_path):
    # scripts/gen_manifests.sh regenerates them; a stale copy fails here.
    for run, name, file in (
        ("sync:2", "distrain-sync", "mpijob.yaml"),
        ("async:2:ps=1", "distrain-async", "ps.yaml"),
        ("sync:2 --launcher trainjob", "distrain-trainjob", "trainjob.yaml"),
    ):
        spec, *extra = run.split()
        out = subprocess.run(
            [sys.executable, "-m", "distrain", "manifests", "--run", spec, "--name", name, *extra],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        assert out == (MANIFESTS / "templates" / file).read_text(), (
            f"manifests/templates/{file} is stale: run scripts/gen_manifests.sh"
        )


# -- the launcher's objects, per mode --------------------------------------------------

GPU_POOL = KubernetesConfig.from_params(
    namespace="team-a",
    image="registry.example.com/distrain/trainer-gpu:0.1.0",
    gpus_per_worker=2,
    node_selector='{"cloud.google.com/gke-accelerator": "nvidia-l4"}',
    tolerations='[{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]',
)


def _cfg(run: str) -> TrainConfig:
    return TrainConfig(data_dir="/mnt/distrain/d", output_dir="/mnt/distrain/o", run=run)


def _containers(obj: dict) -> list[tuple[str, dict, dict]]:
    if obj["kind"] == "MPIJob":
        return [
            (role.lower(), spec["template"]["spec"], spec["template"]["spec"]["containers"][0])
            for role, spec in obj["spec"]["mpiReplicaSpecs"].items()
        ]
    if obj["kind"] == "Job":
        pod = obj["spec"]["template"]["spec"]
        role = obj["spec"]["template"]["metadata"]["labels"]["distrain.dev/role"]
        return [(role, pod, pod["containers"][0])]
    return []


def test_cpu_ranks_yield_their_cores_in_mpi_waits_and_gpu_ranks_do_not():
    # CPU ranks share their cores with TensorFlow's compute threads, as local ranks do.
    def mpirun_args(k: KubernetesConfig) -> list[str]:
        (mpijob,) = _workload(_cfg("sync:2"), k, "r1", "/mnt/distrain/o/c.json")
        spec = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        return spec["containers"][0]["args"]

    cpu = " ".join(mpirun_args(KubernetesConfig()))
    assert "-mca mpi_yield_when_idle 1" in cpu
    assert "mpi_yield_when_idle" not in " ".join(mpirun_args(GPU_POOL))
    assert mca_options({"OMPI_MCA_a_b": "2", "PATH": "/bin"}) == ["-mca", "a_b", "2"]


@pytest.mark.parametrize(
    "run", ["sync:2", "sync:4", "async:2:ps=1", "async:3:ps=2", "syncreplicas:3:aggregate=2"]
)
def test_launcher_objects_validate_and_carry_the_placement(run):
    objects = build_objects(_cfg(run), GPU_POOL, "r1", "/mnt/distrain/o/train_config.json")
    assert validate_all(objects) == len(objects)
    gpu_pods = 0
    for obj in objects:
        assert obj["metadata"]["namespace"] == "team-a"
        for role, pod, container in _containers(obj):
            assert container["image"] == GPU_POOL.image
            assert pod["securityContext"]["runAsNonRoot"] is True
            gpus = container["resources"]["limits"].get("nvidia.com/gpu")
            if role == "worker":
                gpu_pods += 1
                assert gpus == "2"
                assert pod["nodeSelector"] == GPU_POOL.node_selector
                assert pod["tolerations"] == GPU_POOL.tolerations
            else:
                assert gpus is None and "nodeSelector" not in pod, role
    assert gpu_pods >= 1


def test_sync_run_is_one_mpijob_with_a_rank_per_gpu():
    (job,) = _workload(_cfg("sync:4"), GPU_POOL, "r1", "/c.json")
    spec = job["spec"]
    assert spec["launcherCreationPolicy"] == "WaitForWorkersReady"
    assert spec["slotsPerWorker"] == 2 and spec["mpiReplicaSpecs"]["Worker"]["replicas"] == 2
    args = spec["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["-np", "4"]
    assert args[-4:] == ["distrain", "worker", "--config", "/c.json"]
    with pytest.raises(ConfigError, match="whole pods"):
        build_objects(_cfg("sync:3"), GPU_POOL, "r1", "/c.json")


def test_ps_run_addresses_are_its_services():
    objects = build_objects(_cfg("syncreplicas:3:aggregate=2"), GPU_POOL, "r1", "/c.json")
    services = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Service"}
    jobs = [o for o in objects if o["kind"] == "Job"]
    assert len(jobs) == len(services) == 1 + 3 + 1
    for job in jobs:
        container = job["spec"]["template"]["spec"]["containers"][0]
        env = {e["name"]: e["value"] for e in container["env"]}
        tf_config = json.loads(env["TF_CONFIG"])
        task = tf_config["task"]
        own = tf_config["cluster"][task["type"]][task["index"]]
        service = services[own.split(":")[0]]
        # The Service named in TF_CONFIG selects exactly this Job's pod.
        labels = job["spec"]["template"]["metadata"]["labels"]
        assert service["spec"]["selector"].items() <= labels.items()
        assert labels[RUN_LABEL] == "r1"
        addresses = [a for group in tf_config["cluster"].values() for a in group]
        assert {a.split(":")[0] for a in addresses} == set(services)


def test_one_worker_runs_need_no_cluster_job():
    with pytest.raises(ConfigError, match="step's own pod"):
        build_objects(_cfg("single:1"), GPU_POOL, "r1", "/c.json")


def test_validation_rejects_what_the_apis_would():
    (job,) = _workload(_cfg("sync:2"), KubernetesConfig(), "r1", "/c.json")
    bad = json.loads(json.dumps(job))
    bad["spec"]["launcherCreationPolicy"] = "Eventually"
    with pytest.raises(ManifestError, match="launcherCreationPolicy"):
        validate_object(bad)
    bad = json.loads(json.dumps(job))
    bad["spec"]["mpiReplicaSpecs"]["Worker"]["template"]["spec"]["containers"][0]["gpu"] = 1
    with pytest.raises(ManifestError, match="Worker template.*gpu"):
        validate_object(bad)
    bad = json.loads(json.dumps(job))
    bad["spec"]["mpiReplicaSpecs"]["Launcher"]["replicas"] = 2
    with pytest.raises(ManifestError, match="Launcher"):
        validate_object(bad)
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "s"},
        "spec": {"ports": [{"port": "grpc"}]},
    }
    with pytest.raises(ManifestError, match="Service/s"):
        validate_object(service)


def test_kubernetes_settings_are_checked():
    with pytest.raises(ConfigError, match="not valid JSON"):
        KubernetesConfig.from_params(node_selector="{pool: gpu}")
    with pytest.raises(ConfigError, match="quantity"):
        KubernetesConfig(memory_per_worker="lots")
    with pytest.raises(ConfigError, match="toleration"):
        KubernetesConfig(tolerations=[{"key": "a", "tainted": True}])
    with pytest.raises(ConfigError, match="CPU quantity"):
        KubernetesConfig(cpu_per_worker="2Gi")
    assert KubernetesConfig(cpu_per_worker="1500m").cpu_threads() == 1
    assert KubernetesConfig(cpu_per_worker="8").cpu_threads() == 8
    assert KubernetesConfig(cpu_per_worker="250m").cpu_threads() == 1


# -- Kubeflow Trainer v2.3: runtimes, TrainJobs, TaskConfig passthrough ------------------

TRAINER = MANIFESTS / "trainer"


def test_the_shipped_runtimes_validate_against_trainer_v2_3s_crds():
    runtimes = _render(TRAINER)
    assert {r["metadata"]["name"] for r in runtimes} == {"distrain-horovod", "distrain-horovod-gpu"}
    for runtime in runtimes:
        assert runtime["kind"] == "ClusterTrainingRuntime"
        validate_object(runtime)
        mpi = runtime["spec"]["mlPolicy"]["mpi"]
        # Horovod over Open MPI, where the trainer image's sshd expects the keys.
        assert mpi["mpiImplementation"] == "OpenMPI" and mpi["runLauncherAsNode"] is True
        assert mpi["sshAuthMountPath"] == "/home/distrain/.ssh"
        jobs = {j["name"]: j for j in runtime["spec"]["template"]["spec"]["replicatedJobs"]}
        assert set(jobs) == {"launcher", "node"}
        labels = jobs["launcher"]["template"]["metadata"]["labels"]
        assert labels["trainer.kubeflow.org/trainjob-ancestor-step"] == "trainer"
        for job in jobs.values():
            (container,) = job["template"]["spec"]["template"]["spec"]["containers"]
            assert container["name"] == "node"
            gpu = runtime["metadata"]["name"].endswith("-gpu")
            assert container["image"].split(":")[0].endswith("trainer-gpu" if gpu else "trainer")
    bad = json.loads(json.dumps(runtimes[0]))
    bad["spec"]["mlPolicy"]["mpi"]["mpiImplementation"] = "MPICH"
    with pytest.raises(ManifestError, match="mpiImplementation"):
        validate_object(bad)
    bad = json.loads(json.dumps(runtimes[0]))
    bad["spec"]["template"]["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]["spec"][
        "containers"
    ][0]["resources"] = {"limits": {"cpu": "two"}}
    with pytest.raises(ManifestError, match=r"replicatedJobs\.1\..*limits\.cpu"):
        validate_object(bad)


def test_trainjobs_refer_to_a_shipped_runtime_and_reject_what_the_api_would():
    names = {r["metadata"]["name"] for r in _render(TRAINER)}
    for k in (KubernetesConfig(launcher="trainjob"), GPU_POOL_TRAINJOB):
        (job,) = _workload(_cfg("sync:4"), k, "r1", "/c.json")
        validate_object(job)
        assert job["spec"]["runtimeRef"]["name"] in names
    bad = json.loads(json.dumps(job))
    bad["spec"]["trainer"]["gpus"] = 1
    with pytest.raises(ManifestError, match="gpus"):
        validate_object(bad)
    bad = json.loads(json.dumps(job))
    bad["metadata"]["name"] = "9-starts-with-a-digit"
    with pytest.raises(ManifestError, match="RFC 1035"):
        validate_object(bad)
    with pytest.raises(ConfigError, match="fits one pod"):
        build_objects(_cfg("sync:2"), GPU_POOL_TRAINJOB, "r1", "/c.json")


def test_a_trainjob_gives_trainers_status_plugin_what_it_needs():
    """Trainer's TrainJobStatus plugin (its feature gate on) injects the status endpoint's
    variables, CA and token into the containers of the job labelled as the trainer
    ancestor: it must be the launcher, whose pod runs mpirun and rank 0 (the first host of
    the hostfile with runLauncherAsNode, launcher first), who reports; and the run's
    NetworkPolicy must let it reach the controller."""
    from distrain.k8s.objects import TRAINER_STATUS_PORT
    from distrain.train.status import CA_CERT_ENV, TOKEN_ENV, URL_ENV

    ancestor = "trainer.kubeflow.org/trainjob-ancestor-step"
    for runtime in _render(TRAINER):
        jobs = runtime["spec"]["template"]["spec"]["replicatedJobs"]
        labelled = [
            j["name"]
            for j in jobs
            if j["template"].get("metadata", {}).get("labels", {}).get(ancestor) == "trainer"
        ]
        assert labelled == ["launcher"] and jobs[0]["name"] == "launcher"
    policy, job = build_objects(
        _cfg("sync:4"), KubernetesConfig(launcher="trainjob"), "r1", "/c.json"
    )
    # The TrainJob leaves the ancestor label and the injected variables to the runtime and
    # the plugin (a patch or an env entry of its own would override them).
    patch = job["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
    for replicated in patch["replicatedJobs"]:
        assert ancestor not in json.dumps(replicated)
        assert replicated["template"]["spec"]["template"]["spec"]["serviceAccountName"]
    env = {e["name"] for e in job["spec"]["trainer"]["env"]}
    assert not env & {URL_ENV, CA_CERT_ENV, TOKEN_ENV}
    ports = [p["port"] for rule in policy["spec"]["egress"] for p in rule.get("ports", [])]
    assert TRAINER_STATUS_PORT in ports
    validate_all([policy, job])


GPU_POOL_TRAINJOB = KubernetesConfig.from_params(
    namespace="team-a",
    gpus_per_worker=2,
    launcher="trainjob",
    node_selector='{"cloud.google.com/gke-accelerator": "nvidia-l4"}',
)

# What KFP's driver hands the training step when the task was given resources, an
# accelerator, a toleration, a node selector, an affinity and a KFP workspace.
TASK_CONFIG = {
    "resources": {
        "requests": {"cpu": "6", "memory": "24Gi"},
        "limits": {"cpu": "8", "memory": "32Gi", "nvidia.com/gpu": "1"},
    },
    "node_selector": {"cloud.google.com/gke-accelerator": "nvidia-l4"},
    "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]}
                ]
            }
        }
    },
    "volumes": [{"name": "kfp-workspace", "persistentVolumeClaim": {"claimName": "run-ws"}}],
    "volume_mounts": [{"name": "kfp-workspace", "mountPath": "/kfp-workspace"}],
}


def _pod_templates(obj: dict) -> list[tuple[str, dict, dict]]:
    """``(role, pod spec, container resources)`` of each pod an object makes."""
    if obj["kind"] == "TrainJob":
        patch = obj["spec"]["runtimePatches"][0]["trainingRuntimeSpec"]["template"]["spec"]
        return [
            (
                j["template"]["spec"]["template"]["metadata"]["labels"]["distrain.dev/role"],
                j["template"]["spec"]["template"]["spec"],
                obj["spec"]["trainer"]["resourcesPerNode"],
            )
            for j in patch["replicatedJobs"]
        ]
    return [(role, pod, c["resources"]) for role, pod, c in _containers(obj)]


@pytest.mark.parametrize(
    "run, launcher",
    [
        ("sync:4", "kubernetes"),
        ("sync:4", "trainjob"),
        ("avg:2:period=4", "trainjob"),
        ("async:2:ps=1", "kubernetes"),
        ("syncreplicas:3:aggregate=2", "trainjob"),
    ],
)
def test_task_config_passthrough_reaches_the_pod_templates(run, launcher, tmp_path):
    from distrain import steps
    from distrain.k8s import train as k8s_train

    captured = {}

    def fake_train_on_cluster(cfg, k):
        captured["objects"] = build_objects(cfg, k, "r1", "/kfp-workspace/runs/x/c.json")
        return {}

    # Through the training step, as the component calls it: the pods of a workspace run.
    import pytest as _pytest

    with _pytest.MonkeyPatch.context() as mp:
        mp.setattr(k8s_train, "train_on_cluster", fake_train_on_cluster)
        steps.train(
            tmp_path,
            tmp_path / "o",
            run,
            launcher=launcher,
            kubernetes={"namespace": "ns", "volume_claim": "", "mount_path": "/kfp-workspace"},
            task_config=TASK_CONFIG,
        )
    objects = captured["objects"]
    assert validate_all(objects) == len(objects)
    computing = 0
    for obj in objects:
        for role, pod, resources in _pod_templates(obj):
            if role not in ("worker", "launcher") or obj["kind"] == "Job" and role != "worker":
                continue
            if obj["kind"] == "MPIJob" and role == "launcher":
                continue  # mpirun only: no GPU, ordinary nodes
            computing += 1
            assert resources["limits"]["nvidia.com/gpu"] == "1"
            assert resources["limits"]["cpu"] == "8" and resources["requests"]["memory"] == "24Gi"
            assert pod["nodeSelector"] == TASK_CONFIG["node_selector"]
            assert pod["tolerations"] == TASK_CONFIG["tolerations"]
            assert pod["affinity"] == TASK_CONFIG["affinity"]
            assert pod["volumes"] == TASK_CONFIG["volumes"]  # the workspace, no claim
            (container,) = pod["containers"]
            assert container["volumeMounts"] == TASK_CONFIG["volume_mounts"]
    assert computing >= 1  # one template per role: the MPIJob's workers share one


def test_the_training_component_hands_its_task_config_to_the_step(tmp_path, monkeypatch):
    from kfp import dsl

    from distrain import steps
    from distrain.components.train import train

    calls = []

    def fake_step(*args, **kwargs):
        calls.append(kwargs)
        return {"run": {"name": "sync:2"}, "train_seconds": 1, "examples_per_second": 1}

    monkeypatch.setattr(steps, "train", fake_step)
    examples, trained = dsl.Dataset(uri="x"), dsl.Model(uri="y")
    examples.path, trained.path = str(tmp_path / "e"), str(tmp_path / "m")
    train.python_func(
        examples=examples,
        trained=trained,
        run_spec="sync:2",
        launcher="trainjob",
        workspace_path="/kfp-workspace",
        task_config=dsl.TaskConfig(
            resources=TASK_CONFIG["resources"], volumes=TASK_CONFIG["volumes"]
        ),
    )
    (kwargs,) = calls
    assert kwargs["task_config"]["resources"] == TASK_CONFIG["resources"]
    assert kwargs["task_config"]["volumes"] == TASK_CONFIG["volumes"]
    assert kwargs["kubernetes"]["volume_claim"] == ""  # the workspace replaces the claim
    assert kwargs["kubernetes"]["mount_path"] == "/kfp-workspace"


@pytest.mark.parametrize("workspace", ["", "50Gi"])
def test_compiled_trainjob_pipeline_validates_for_every_run_mode(tmp_path, workspace):
    """``distrain compile --launcher trainjob``: the training step passes its task config
    through, and what it creates for a run of every mode validates."""
    from kfp import compiler

    from distrain.datasets.mnist.defaults import DEFAULTS
    from distrain.pipelines.common import build_pipeline
    from distrain.train.modes import mode_names

    out = tmp_path / "mnist.yaml"
    compiler.Compiler().compile(
        build_pipeline(DEFAULTS, gpu=True, launcher="trainjob", workspace_size=workspace), str(out)
    )
    spec, platform = list(yaml.safe_load_all(out.read_text()))
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["launcher"]["defaultValue"] == "trainjob"
    comp = spec["components"]["comp-train"]
    assert {p["field"] for p in comp["taskConfigPassthroughs"]} == {
        "RESOURCES",
        "KUBERNETES_NODE_SELECTOR",
        "KUBERNETES_TOLERATIONS",
        "KUBERNETES_AFFINITY",
        "KUBERNETES_VOLUMES",
    }
    assert comp["inputDefinitions"]["parameters"]["task_config"]["parameterType"] == "TASK_CONFIG"
    kube = platform["platforms"]["kubernetes"]
    executor = kube["deploymentSpec"]["executors"]["exec-train"]
    assert {e["name"] for e in executor["fieldPathAsEnv"]} == {
        "POD_NAME",
        "POD_UID",
        "POD_NAMESPACE",
    }
    if workspace:
        assert kube["pipelineConfig"]["workspace"]["size"] == workspace
        assert "pvcMount" not in executor  # no hand-named claim
        volume_claim, mount_path = "", "/kfp-workspace"
        task_config = {k: TASK_CONFIG[k] for k in ("volumes", "volume_mounts")}
    else:
        assert executor["pvcMount"][0]["mountPath"] == "/mnt/distrain"
        volume_claim, mount_path, task_config = (
            params["volume_claim"]["defaultValue"],
            "/mnt/distrain",
            {},
        )
    # What the driver would pass from the compiled defaults: one GPU per worker.
    task_config["resources"] = {
        "limits": {"nvidia.com/gpu": str(params["accelerator_count"]["defaultValue"])}
    }
    k = KubernetesConfig.from_params(
        launcher=params["launcher"]["defaultValue"],
        namespace="ns",
        volume_claim=volume_claim,
        mount_path=mount_path,
        task_config=task_config,
    )
    examples = {
        "single": "single:1",
        "ssp": "ssp:2:staleness=2",
        "easgd": "easgd:2:tau=4",
        "avg": "avg:2:period=4",
        "hybrid": "hybrid:1:2",
    }
    kinds = set()
    for mode in mode_names():
        run = examples.get(mode, f"{mode}:2")
        cfg = _cfg(run)
        if not cfg.run.impl.needs_cluster():
            continue
        objects = build_objects(cfg, k, "r1", f"{mount_path}/runs/x/c.json")
        assert validate_all(objects) == len(objects), run
        kinds |= {o["kind"] for o in objects}
    assert kinds == {"NetworkPolicy", "TrainJob", "Job", "Service"}


# The client's method names: VERB_namespaced_RESOURCE (the REST verb, then what it acts on).
_CLIENT_VERBS = {"create": "create", "delete": "delete", "list": "list", "read": "get"}
_CLIENT_VERBS["get"] = "get"
_CLIENT_RESOURCES = {
    "job": ("batch", "jobs"),
    "job_status": ("batch", "jobs/status"),
    "service": ("", "services"),
    "pod": ("", "pods"),
    "pod_log": ("", "pods/log"),
    "event": ("", "events"),
    "network_policy": ("networking.k8s.io", "networkpolicies"),
}


def _permissions_the_launcher_uses() -> set[tuple[str, str, str]]:
    """(API group, resource, verb) of every Kubernetes API call in distrain/k8s/, from its code."""
    from distrain.k8s.launcher import CUSTOM_KINDS

    needed = set()
    for path in (ROOT / "distrain" / "k8s").glob("*.py"):
        for verb, what in re.findall(r"\.(\w+?)_namespaced_(\w+)\b", path.read_text()):
            assert verb in _CLIENT_VERBS, f"{path.name}: {verb}_namespaced_{what}"
            if what == "custom_object":
                targets = [(group, plural) for group, _, plural in CUSTOM_KINDS.values()]
            else:
                assert what in _CLIENT_RESOURCES, f"{path.name}: {verb}_namespaced_{what}"
                targets = [_CLIENT_RESOURCES[what]]
            needed |= {(group, res, _CLIENT_VERBS[verb]) for group, res in targets}
    return needed


def test_the_role_grants_exactly_what_the_launcher_calls():
    (role,) = [o for o in _render(MANIFESTS / "base") if o["kind"] == "Role"]
    granted = {
        (group, resource, verb)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    needed = _permissions_the_launcher_uses()
    # Sanity: the scan sees the calls it must (a broken pattern would find nothing).
    assert ("batch", "jobs", "create") in needed and ("", "pods/log", "get") in needed
    assert granted - needed == set(), "granted but never called"
    assert needed - granted == set(), "called but not granted"
