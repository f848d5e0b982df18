"""The Kubernetes launcher's create / stream / wait / clean-up logic against a fake cluster.

The fakes subclass the Kubernetes client's own API classes and override only the methods
the launcher calls (with the real signatures; a method the launcher calls but the fakes
lack would reach the real client and fail), returning the client's own model objects.
"""

import inspect
import io
import json
from pathlib import Path

import pytest
from kubernetes import client

from distrain.k8s.config import KubernetesConfig
from distrain.k8s.launcher import ClusterRun, KubeApi
from distrain.k8s.objects import ROLE_LABEL, RUN_LABEL, build_objects
from distrain.k8s.train import RUN_KEY_LABEL, run_key, train_on_cluster
from distrain.train.config import TrainConfig, TrainingError


class FakeCluster:
    """Objects by (kind, name) and a script of pod states, one step per poll."""

    def __init__(self, script, fail_create_at=None):
        self.objects = {}
        self.script = script  # callable(cluster, poll) -> None, mutates pods/status
        self.pods = {}
        self.logs = {}
        self.polls = 0
        self.fail_create_at = fail_create_at
        self.creates = 0
        self.job_status = {}  # job name -> V1JobStatus
        self.mpijob_conditions = []

    def add(self, kind, body):
        self.creates += 1
        if self.fail_create_at == self.creates:
            raise client.ApiException(status=403, reason="Forbidden")
        name = body["metadata"]["name"]
        assert (kind, name) not in self.objects, f"{kind}/{name} created twice"
        self.objects[(kind, name)] = body

    def remove(self, kind, name):
        if (kind, name) not in self.objects:
            raise client.ApiException(status=404, reason="NotFound")
        del self.objects[(kind, name)]
        # Deleting a job deletes its pods (background propagation).
        for pod_name in [p for p, pod in self.pods.items() if pod.metadata.name.startswith(name)]:
            del self.pods[pod_name]

    @staticmethod
    def matches(obj, selector):
        """Whether an object (a body, or a client model's metadata) has the label."""
        label, value = selector.split("=")
        meta = obj["metadata"] if isinstance(obj, dict) else obj.metadata
        labels = (meta.get("labels") if isinstance(meta, dict) else meta.labels) or {}
        return labels.get(label) == value

    def listed(self, kind, selector):
        """Names of the objects of a kind that carry the label ``selector``."""
        return [
            n for (k, n), body in self.objects.items() if k == kind and self.matches(body, selector)
        ]

    def pod(self, name, role, phase, terminated=None, waiting=None, labels=None):
        state = client.V1ContainerState(terminated=terminated, waiting=waiting)
        status = client.V1ContainerStatus(
            name="c", image="i", image_id="", ready=phase == "Running", restart_count=0, state=state
        )
        self.pods[name] = client.V1Pod(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={RUN_LABEL: self.run_name, ROLE_LABEL: role, **(labels or {})},
            ),
            status=client.V1PodStatus(phase=phase, container_statuses=[status]),
        )


class FakeCore(client.CoreV1Api):
    def __init__(self, cluster):  # no api_client: anything not faked fails loudly
        self.cluster = cluster

    def create_namespaced_service(self, namespace, body, **kwargs):
        self.cluster.add("Service", body)

    def delete_namespaced_service(self, name, namespace, **kwargs):
        self.cluster.remove("Service", name)

    def list_namespaced_pod(self, namespace, **kwargs):
        c = self.cluster
        selector = kwargs["label_selector"]
        if selector.startswith(f"{RUN_KEY_LABEL}="):  # an earlier attempt's pods
            return client.V1PodList(items=[p for p in c.pods.values() if c.matches(p, selector)])
        assert selector == f"{RUN_LABEL}={c.run_name}"
        c.polls += 1
        c.script(c, c.polls)
        return client.V1PodList(items=list(c.pods.values()))

    def list_namespaced_service(self, namespace, **kwargs):
        found = self.cluster.listed("Service", kwargs["label_selector"])
        return client.V1ServiceList(
            items=[client.V1Service(metadata=client.V1ObjectMeta(name=n)) for n in found]
        )

    def read_namespaced_pod_log(self, name, namespace, **kwargs):
        return self.cluster.logs.get(name, "")


class FakeBatch(client.BatchV1Api):
    def __init__(self, cluster):
        self.cluster = cluster

    def create_namespaced_job(self, namespace, body, **kwargs):
        self.cluster.add("Job", body)

    def delete_namespaced_job(self, name, namespace, **kwargs):
        assert kwargs.get("propagation_policy") == "Background"
        self.cluster.remove("Job", name)

    def list_namespaced_job(self, namespace, **kwargs):
        found = self.cluster.listed("Job", kwargs["label_selector"])
        return client.V1JobList(
            items=[client.V1Job(metadata=client.V1ObjectMeta(name=n)) for n in found]
        )

    def read_namespaced_job_status(self, name, namespace, **kwargs):
        status = self.cluster.job_status.get(name, client.V1JobStatus())
        return client.V1Job(metadata=client.V1ObjectMeta(name=name), status=status)


class FakeCustom(client.CustomObjectsApi):
    def __init__(self, cluster):
        self.cluster = cluster

    def create_namespaced_custom_object(self, group, version, namespace, plural, body, **kw):
        assert (group, version, plural) == ("kubeflow.org", "v2beta1", "mpijobs")
        self.cluster.add("MPIJob", body)

    def get_namespaced_custom_object(self, group, version, namespace, plural, name, **kw):
        body = self.cluster.objects[("MPIJob", name)]
        return {**body, "status": {"conditions": self.cluster.mpijob_conditions}}

    def list_namespaced_custom_object(self, group, version, namespace, plural, **kw):
        assert (group, version, plural) == ("kubeflow.org", "v2beta1", "mpijobs")
        found = self.cluster.listed("MPIJob", kw["label_selector"])
        return {"items": [self.cluster.objects[("MPIJob", n)] for n in found]}

    def delete_namespaced_custom_object(self, group, version, namespace, plural, name, **kw):
        self.cluster.remove("MPIJob", name)


def _api(cluster):
    return KubeApi(FakeCore(cluster), FakeBatch(cluster), FakeCustom(cluster))


def test_fakes_match_the_real_client_signatures():
    for fake, real in (
        (FakeCore, client.CoreV1Api),
        (FakeBatch, client.BatchV1Api),
        (FakeCustom, client.CustomObjectsApi),
    ):
        for name, method in vars(fake).items():
            if name.startswith("_") or not callable(method):
                continue
            real_params = list(inspect.signature(getattr(real, name)).parameters)
            fake_params = list(inspect.signature(method).parameters)
            positional = [p for p in fake_params if p not in ("kwargs", "kw")]
            assert real_params[: len(positional)] == positional, name


def _run(cfg_run, script, **kwargs):
    cfg = TrainConfig(data_dir="/d", output_dir="/o", run=cfg_run)
    objects = build_objects(cfg, KubernetesConfig(namespace="ns"), "r1", "/o/c.json")
    cluster = FakeCluster(script, fail_create_at=kwargs.pop("fail_create_at", None))
    cluster.run_name = "r1"
    out = io.StringIO()
    run = ClusterRun(
        _api(cluster), objects, "r1", "ns", poll_seconds=0, out=out, sleep=lambda s: None, **kwargs
    )
    return run, cluster, out, objects


def _terminated(code, reason):
    return client.V1ContainerStateTerminated(exit_code=code, reason=reason)


def test_sync_success_streams_each_log_line_once_and_deletes_the_mpijob():
    def script(c, poll):
        if poll == 1:
            c.pod("r1-worker-0", "worker", "Pending")
        elif poll == 2:
            c.pod("r1-worker-0", "worker", "Running")
            c.pod("r1-launcher-x", "launcher", "Running")
            c.logs["r1-launcher-x"] = "epoch 1/2 loss 0.5\n"
        elif poll == 3:
            c.logs["r1-launcher-x"] += "epoch 2/2 loss 0.3\n"
        else:
            c.pod("r1-launcher-x", "launcher", "Succeeded", terminated=_terminated(0, "Completed"))
            c.mpijob_conditions = [{"type": "Succeeded", "status": "True"}]

    run, cluster, out, _ = _run("sync:2", script)
    run.run()
    text = out.getvalue()
    assert text.count("[r1-launcher-x] epoch 1/2 loss 0.5") == 1
    assert text.count("[r1-launcher-x] epoch 2/2 loss 0.3") == 1
    assert run.created == [("MPIJob", "r1")] and run.deleted == run.created
    assert cluster.objects == {}


def test_sync_failure_names_the_pod_and_its_reason_and_cleans_up():
    def script(c, poll):
        c.pod("r1-worker-1", "worker", "Running")
        if poll >= 2:
            c.pod("r1-worker-1", "worker", "Failed", terminated=_terminated(137, "OOMKilled"))
            c.mpijob_conditions = [
                {"type": "Running", "status": "False"},
                {"type": "Failed", "status": "True", "reason": "MPIJobFailed"},
            ]

    run, cluster, _, _ = _run("sync:2", script)
    with pytest.raises(TrainingError, match=r"pod r1-worker-1: OOMKilled \(exit code 137\)"):
        run.run()
    assert cluster.objects == {}


def test_ps_success_deletes_parameter_servers_that_never_exit():
    def script(c, poll):
        for i in range(2):
            c.pod(f"r1-worker-{i}-abc", "worker", "Running")
        c.pod("r1-ps-0-abc", "ps", "Running")  # servers run until deleted
        c.pod("r1-chief-abc", "chief", "Running")
        c.logs["r1-chief-abc"] = "".join(f"step {i}\n" for i in range(poll))
        if poll == 3:
            c.job_status["r1-chief"] = client.V1JobStatus(succeeded=1)

    run, cluster, out, objects = _run("async:2:ps=1", script)
    run.run()
    assert len(run.created) == len(objects) == 8
    assert sorted(run.deleted) == sorted(run.created)
    assert cluster.objects == {} and cluster.pods == {}
    assert out.getvalue().count("[r1-chief-abc] step 1") == 1


def test_a_dead_parameter_server_fails_the_run():
    def script(c, poll):
        c.pod("r1-chief-abc", "chief", "Running")
        c.pod(
            "r1-ps-0-abc",
            "ps",
            "Running" if poll < 2 else "Failed",
            terminated=_terminated(1, "Error") if poll >= 2 else None,
        )

    run, cluster, _, _ = _run("syncreplicas:3:aggregate=2", script)
    with pytest.raises(TrainingError, match=r"parameter server failed: pod r1-ps-0-abc: Error"):
        run.run()
    assert cluster.objects == {}


def test_a_failed_chief_fails_the_run():
    def script(c, poll):
        c.pod("r1-chief-abc", "chief", "Failed", terminated=_terminated(2, "Error"))
        c.job_status["r1-chief"] = client.V1JobStatus(failed=1)

    run, cluster, _, _ = _run("async:2", script)
    with pytest.raises(TrainingError, match=r"chief failed: pod r1-chief-abc: Error \(exit code 2"):
        run.run()
    assert cluster.objects == {}


def test_an_image_that_cannot_be_pulled_fails_at_once():
    def script(c, poll):
        waiting = client.V1ContainerStateWaiting(reason="ImagePullBackOff", message="no such tag")
        c.pod("r1-worker-0", "worker", "Pending", waiting=waiting)

    run, cluster, _, _ = _run("sync:2", script)
    with pytest.raises(TrainingError, match="r1-worker-0 cannot start: ImagePullBackOff"):
        run.run()
    assert cluster.polls == 1 and cluster.objects == {}


def test_timeout_and_interrupt_still_clean_up():
    ticks = iter(range(0, 10_000, 60))

    def script(c, poll):
        c.pod("r1-chief-abc", "chief", "Running")

    run, cluster, _, _ = _run("async:2", script, timeout_seconds=300, clock=lambda: next(ticks))
    with pytest.raises(TrainingError, match="timed out after 300 s"):
        run.run()
    assert cluster.objects == {}

    def interrupt(c, poll):
        raise KeyboardInterrupt

    run, cluster, _, _ = _run("async:2", interrupt)
    with pytest.raises(KeyboardInterrupt):
        run.run()
    assert cluster.objects == {} and len(run.deleted) == 8  # 2 workers, 1 ps, chief


def test_a_failed_create_deletes_what_was_created_before():
    run, cluster, _, _ = _run("async:2:ps=1", lambda c, p: None, fail_create_at=3)
    with pytest.raises(client.ApiException):
        run.run()
    assert len(run.created) == 2 and run.deleted == run.created[::-1]
    assert cluster.objects == {}


def test_train_on_cluster_stages_data_and_collects_the_output(tmp_path):
    data = tmp_path / "examples"
    data.mkdir()
    (data / "metadata.json").write_text("{}")
    cfg = TrainConfig(data_dir=str(data), output_dir=str(tmp_path / "trained"), run="sync:2")
    k = KubernetesConfig(namespace="ns", mount_path=str(tmp_path / "claim"), poll_seconds=0.01)

    def script(c, poll):
        (mpijob,) = [o for (kind, _), o in c.objects.items() if kind == "MPIJob"]
        launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
        config = json.loads(Path(launcher["containers"][0]["args"][-1]).read_text())
        # What the ranks see: the staged copy of the data, an output dir on the claim.
        assert Path(config["data_dir"], "metadata.json").exists()
        # Threads follow the pod's CPU limit (2 by default), not the node's cores.
        assert config["threads_per_worker"] == 2
        out = Path(config["output_dir"])
        (out / "history.json").write_text(json.dumps({"run": {"name": "sync:2"}}))
        (out / "model.keras").write_text("weights")
        c.mpijob_conditions = [{"type": "Succeeded", "status": "True"}]

    cluster = FakeCluster(script)
    cluster.run_name = "r9"
    history = train_on_cluster(cfg, k, _api(cluster), name="r9", out=io.StringIO())
    assert history["kubernetes"]["name"] == "r9"
    assert (tmp_path / "trained" / "model.keras").read_text() == "weights"
    assert json.loads((tmp_path / "trained" / "history.json").read_text())["kubernetes"]
    run_dir = tmp_path / "claim" / "runs" / run_key(cfg)
    assert history["kubernetes"]["run_dir"] == str(run_dir)
    assert not (run_dir / "data").exists() and (run_dir / "output" / "model.keras").exists()
    assert cluster.objects == {}


def test_train_on_cluster_without_history_is_an_error(tmp_path):
    data = tmp_path / "examples"
    data.mkdir()
    cfg = TrainConfig(data_dir=str(data), output_dir=str(tmp_path / "t"), run="async:2")
    k = KubernetesConfig(namespace="ns", mount_path=str(tmp_path / "claim"), poll_seconds=0.01)

    def script(c, poll):
        c.job_status["r8-chief"] = client.V1JobStatus(succeeded=1)

    cluster = FakeCluster(script)
    cluster.run_name = "r8"
    with pytest.raises(TrainingError, match="wrote no"):
        train_on_cluster(cfg, k, _api(cluster), name="r8", out=io.StringIO())


def test_train_step_checks_the_launcher_before_any_work(tmp_path, monkeypatch):
    from distrain import steps
    from distrain.train import launch

    with pytest.raises(steps.StepError, match="unknown launcher 'slurm'"):
        steps.train(tmp_path, tmp_path / "o", "sync:2", launcher="slurm")
    with pytest.raises(steps.StepError, match="kubernetes settings: .*quantity"):
        steps.train(
            tmp_path,
            tmp_path / "o",
            "sync:2",
            launcher="kubernetes",
            kubernetes={"memory_per_worker": "plenty"},
        )
    # One-worker runs train in the step's own pod even with the kubernetes launcher.
    ran = []
    monkeypatch.setattr(launch, "run_training", lambda cfg: ran.append(cfg.run.name) or {})
    steps.train(tmp_path, tmp_path / "o", "single:1", launcher="kubernetes")
    assert ran == ["single:1"]


def test_a_failed_deletion_does_not_hide_the_runs_own_error():
    def script(c, poll):
        c.pod("r1-chief-abc", "chief", "Failed", terminated=_terminated(3, "Error"))
        c.job_status["r1-chief"] = client.V1JobStatus(failed=1)

    run, cluster, out, _ = _run("async:2", script)

    def forbidden(name, namespace, **kwargs):
        raise client.ApiException(status=403, reason="Forbidden")

    run.api.core.delete_namespaced_service = forbidden
    with pytest.raises(TrainingError, match="chief failed"):
        run.run()
    assert "also: could not delete: Service/" in out.getvalue()
    assert not any(kind == "Job" for kind, _ in cluster.objects)  # the jobs did go
