"""A retried training step on Kubernetes resumes from the attempt before it.

The attempts of one task share a run directory on the claim (its key comes from the
task's output directory, which KFP fixes before the first attempt), so the checkpoints
of a failed attempt are in the output directory of the next one. Uses the fake cluster
of ``test_k8s_launcher``: its "pods" are the script, writing what training would.
"""

import io
import json
import re
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from distrain.base.errors import TrainingError
from distrain.k8s.config import KubernetesConfig
from distrain.k8s.objects import RUN_LABEL
from distrain.k8s.train import RUN_KEY_LABEL, remove_earlier_attempts, run_key, train_on_cluster
from distrain.train.config import TrainConfig
from tests.fakes.k8s import FakeCluster, _api, _terminated

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def _setup(tmp_path, run="sync:2", output="trained"):
    data = tmp_path / "examples"
    data.mkdir(exist_ok=True)
    (data / "metadata.json").write_text("{}")
    cfg = TrainConfig(data_dir=str(data), output_dir=str(tmp_path / output), run=run)
    k = KubernetesConfig(namespace="ns", mount_path=str(tmp_path / "claim"), poll_seconds=0.01)
    return cfg, k


def _pod_config(c) -> dict:
    """The train config the pods of the run in the fake cluster were given."""
    (mpijob,) = [o for (kind, _), o in c.objects.items() if kind == "MPIJob"]
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
    return json.loads(Path(launcher["containers"][0]["args"][-1]).read_text())


def _attempt(cfg, k, cluster, name, script, **kwargs):
    cluster.script = script
    cluster.run_name = name
    out = io.StringIO()
    try:
        return train_on_cluster(cfg, k, _api(cluster), name=name, out=out, **kwargs), out
    finally:
        cluster.log = out.getvalue()


def test_a_retry_resumes_from_the_failed_attempts_checkpoints(tmp_path):
    cfg, k = _setup(tmp_path)
    cluster = FakeCluster(lambda c, p: None)
    seen = {}

    def first(c, poll):
        config = _pod_config(c)
        seen["first"] = config["output_dir"]
        ckpts = Path(config["output_dir"], "checkpoints")
        ckpts.mkdir(exist_ok=True)
        (ckpts / "ckpt-500.index").write_text("step 500")
        # ... and then a worker dies: the MPIJob fails, the step fails, KFP retries it.
        c.pod(f"{c.run_name}-worker-1", "worker", "Failed", terminated=_terminated(137, "OOM"))
        c.mpijob_conditions = [{"type": "Failed", "status": "True"}]

    with pytest.raises(TrainingError, match="failed"):
        _attempt(cfg, k, cluster, "attempt-1", first)
    run_dir = tmp_path / "claim" / "runs" / run_key(cfg)
    assert Path(seen["first"]) == run_dir / "output"
    assert not (run_dir / "data").exists() and cluster.objects == {}
    cluster.mpijob_conditions = []

    def second(c, poll):
        config = _pod_config(c)
        out = Path(config["output_dir"])
        seen["second"] = str(out)
        # The retry's ranks find the first attempt's checkpoint, and freshly staged data.
        assert (out / "checkpoints" / "ckpt-500.index").read_text() == "step 500"
        assert Path(config["data_dir"], "metadata.json").exists()
        (out / "checkpoints" / "ckpt-1000.index").write_text("step 1000")
        (out / "history.json").write_text(json.dumps({"resumed_at_steps": [500]}))
        c.mpijob_conditions = [{"type": "Succeeded", "status": "True"}]

    history, _ = _attempt(cfg, k, cluster, "attempt-2", second)
    assert seen["second"] == seen["first"]
    assert "resuming from an earlier attempt's checkpoints" in cluster.log
    assert history["resumed_at_steps"] == [500]
    assert history["kubernetes"]["run_key"] == run_key(cfg)
    trained = Path(cfg.output_dir)
    assert sorted(p.name for p in (trained / "checkpoints").iterdir()) == [
        "ckpt-1000.index",
        "ckpt-500.index",
    ]


def test_the_same_key_gives_the_same_directory_and_another_key_another(tmp_path):
    cfg, k = _setup(tmp_path)
    dirs = []

    def script(c, poll):
        out = Path(_pod_config(c)["output_dir"])
        dirs.append(out)
        (out / "history.json").write_text("{}")
        c.mpijob_conditions = [{"type": "Succeeded", "status": "True"}]

    for i, key in enumerate(["task-a", "task-a", "task-b"]):
        _attempt(cfg, k, FakeCluster(script), f"r{i}", script, key=key)
    claim = tmp_path / "claim" / "runs"
    assert dirs == [claim / "task-a" / "output"] * 2 + [claim / "task-b" / "output"]


def test_run_keys_follow_the_output_directory_and_the_run_spec(tmp_path):
    keys = {
        (run, output): run_key(_setup(tmp_path, run, output)[0])
        for run in ("sync:2", "sync:4", "async:2:ps=1", "async:2:ps=2", "syncreplicas:3")
        for output in ("run-1/train/aaa/trained", "run-1/train/bbb/trained", "run-2/t")
    }
    # Another task (another output directory) or another run spec: another directory.
    assert len(set(keys.values())) == len(keys)
    # The same task again (a retry): the same one.
    assert (
        run_key(_setup(tmp_path, "async:2:ps=1", "run-2/t")[0]) == keys["async:2:ps=1", "run-2/t"]
    )
    for key in keys.values():
        assert DNS_LABEL.match(key) and len(key) <= 63, key
    assert keys["async:2:ps=1", "run-2/t"].startswith("async-2-ps-1-")


def test_leftovers_of_a_killed_attempt_are_deleted_before_the_retry_starts(tmp_path):
    cfg, k = _setup(tmp_path, run="async:2")
    key = run_key(cfg)
    cluster = FakeCluster(lambda c, p: None)
    cluster.run_name = "old"
    # The first attempt's step pod was killed: its chief still runs, its objects remain.
    labels = {RUN_LABEL: "old", RUN_KEY_LABEL: key}
    cluster.objects[("Service", "old-chief")] = {
        "metadata": {"name": "old-chief", "labels": labels}
    }
    cluster.objects[("Job", "old-chief")] = {"metadata": {"name": "old-chief", "labels": labels}}
    cluster.objects[("Job", "other")] = {
        "metadata": {"name": "other", "labels": {RUN_KEY_LABEL: "x"}}
    }
    cluster.pod("old-chief-abc", "chief", "Running", labels={RUN_KEY_LABEL: key})

    def retry(c, poll):
        # The old chief is gone (its Job, Service and pod); another task's job is not.
        assert not any(name.startswith("old-") for _, name in c.objects)
        assert ("Job", "other") in c.objects
        assert "old-chief-abc" not in c.pods
        # Every object and pod template of the retry carries the key.
        for (_, name), body in c.objects.items():
            if name.startswith("new-"):
                assert body["metadata"]["labels"][RUN_KEY_LABEL] == key
                if body["kind"] == "Job":
                    template = body["spec"]["template"]["metadata"]["labels"]
                    assert template[RUN_KEY_LABEL] == key and template[RUN_LABEL] == "new"
        Path(_chief_output(c), "history.json").write_text("{}")
        c.job_status["new-chief"] = client.V1JobStatus(succeeded=1)

    _attempt(cfg, k, cluster, "new", retry)
    assert "an earlier attempt left 2 objects" in cluster.log
    assert set(cluster.objects) == {("Job", "other")}


def _chief_output(c) -> str:
    job = c.objects[("Job", f"{c.run_name}-chief")]
    args = job["spec"]["template"]["spec"]["containers"][0]["args"]
    return json.loads(Path(args[-1]).read_text())["output_dir"]


def test_a_retry_fails_while_pods_of_an_earlier_attempt_do_not_go(tmp_path):
    cluster = FakeCluster(lambda c, p: None)
    cluster.run_name = "old"
    cluster.pod("stuck-0", "worker", "Running", labels={RUN_KEY_LABEL: "k1"})
    ticks = iter(range(0, 10_000, 60))
    with pytest.raises(TrainingError, match="still there after 300 s: stuck-0"):
        remove_earlier_attempts(
            _api(cluster),
            "ns",
            "k1",
            {"MPIJob"},
            wait_seconds=300,
            out=io.StringIO(),
            clock=lambda: next(ticks),
            sleep=lambda s: None,
        )


def test_the_training_steps_cache_key_holds_no_per_run_value(tmp_path):
    """The key comes from the step's output artifact, which KFP leaves out of the cache key.

    KFP's run and task id placeholders, as inputs of the step, would be part of its cache
    key, so a later pipeline run could never reuse a finished training step.
    """
    from kfp import compiler

    from distrain.pipelines.dataset_pipelines import mnist_pipeline

    path = tmp_path / "p.yaml"
    compiler.Compiler().compile(mnist_pipeline, str(path))
    text = path.read_text()
    spec = next(yaml.safe_load_all(text))
    loop = next(c for name, c in spec["components"].items() if name.startswith("comp-for-loop"))
    train = loop["dag"]["tasks"]["train"]
    for value in train["inputs"]["parameters"].values():
        assert "{{$.pipeline_" not in json.dumps(value), value
    assert "trained" in spec["components"]["comp-train"]["outputDefinitions"]["artifacts"]
    for placeholder in ("pipeline_job_uuid", "pipeline_task_uuid", "pipeline_job_name"):
        assert placeholder not in text


def test_a_cluster_without_the_mpi_operator_has_no_earlier_mpijobs():
    cluster = FakeCluster(lambda c, p: None)
    api = _api(cluster)

    def no_crd(*args, **kwargs):
        raise client.ApiException(status=404, reason="NotFound")

    api.custom.list_namespaced_custom_object = no_crd
    assert remove_earlier_attempts(api, "ns", "k1", {"MPIJob"}, out=io.StringIO()) == []
