"""The Kubernetes launcher's create / stream / wait / clean-up logic against a fake cluster.

The fakes subclass the Kubernetes client's own API classes and override only the methods
the launcher calls (with the real signatures; a method the launcher calls but the fakes
lack would reach the real client and fail), returning the client's own model objects.
"""

import inspect
import io
import json
import os
import signal
from pathlib import Path

import pytest
from kubernetes import client

from distrain.base.errors import TrainingError
from distrain.k8s.config import KubernetesConfig
from distrain.k8s.launcher import Cancelled, ClusterRun, add_owner, launcher_owner
from distrain.k8s.objects import build_objects
from distrain.k8s.train import run_key, train_on_cluster
from distrain.k8s.validate import validate_all
from distrain.train.config import TrainConfig
from tests.fakes.k8s import (
    FakeBatch,
    FakeCluster,
    FakeCore,
    FakeCustom,
    FakeNetworking,
    _api,
    _terminated,
)


def test_fakes_match_the_real_client_signatures():
    for fake, real in (
        (FakeCore, client.CoreV1Api),
        (FakeBatch, client.BatchV1Api),
        (FakeCustom, client.CustomObjectsApi),
        (FakeNetworking, client.NetworkingV1Api),
    ):
        for name, method in vars(fake).items():
            if name.startswith("_") or not callable(method):
                continue
            real_params = list(inspect.signature(getattr(real, name)).parameters)
            fake_params = list(inspect.signature(method).parameters)
            positional = [p for p in fake_params if p not in ("kwargs", "kw")]
            assert real_params[: len(positional)] == positional, name


def _run(cfg_run, script, launcher="kubernetes", **kwargs):
    cfg = TrainConfig(data_dir="/d", output_dir="/o", run=cfg_run)
    k = KubernetesConfig(namespace="ns", launcher=launcher)
    objects = build_objects(cfg, k, "r1", "/o/c.json")
    cluster = FakeCluster(script, fail_create_at=kwargs.pop("fail_create_at", None))
    cluster.run_name = "r1"
    out = io.StringIO()
    run = ClusterRun(
        _api(cluster),
        objects,
        "r1",
        "ns",
        poll_seconds=0,
        out=out,
        sleep=lambda s: None,
        log_reconnect_seconds=0.01,
        **kwargs,
    )
    return run, cluster, out, objects


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
    assert run.created == [("NetworkPolicy", "r1"), ("MPIJob", "r1")]
    assert run.deleted == run.created[::-1]
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
    assert len(run.created) == len(objects) == 9  # the policy, 4 Services, 4 Jobs
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
    # The policy, and a Service and a Job each for 2 workers, 1 ps and the chief.
    assert cluster.objects == {} and len(run.deleted) == 9


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


# -- Kubeflow Trainer TrainJobs, events, deadlines, retries and every ending -------------


def _unschedulable(c, name):
    cond = client.V1PodCondition(
        type="PodScheduled",
        status="False",
        reason="Unschedulable",
        message="0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
    )
    c.pod(name, "worker", "Pending", conditions=[cond])


def test_trainjob_success_streams_logs_and_deletes_the_trainjob():
    def script(c, poll):
        c.pod("r1-launcher-0-0-x", "launcher", "Running")
        c.logs["r1-launcher-0-0-x"] = "epoch 1/2 loss 0.5\nepoch 2/2"
        if poll >= 3:
            c.logs["r1-launcher-0-0-x"] += " loss 0.3\n"
            c.mpijob_conditions = [{"type": "Complete", "status": "True"}]

    run, cluster, out, objects = _run("sync:2", script, launcher="trainjob")
    assert [o["kind"] for o in objects] == ["NetworkPolicy", "TrainJob"]
    run.run()
    text = out.getvalue()
    # Lines split across stream chunks and re-opened streams come out whole, once each.
    assert text.count("[r1-launcher-0-0-x] epoch 1/2 loss 0.5") == 1
    assert text.count("[r1-launcher-0-0-x] epoch 2/2 loss 0.3") == 1
    assert run.created == [("NetworkPolicy", "r1"), ("TrainJob", "r1")]
    assert run.deleted == run.created[::-1]
    assert cluster.objects == {}


def test_a_failed_trainjob_names_the_pod_and_cleans_up():
    def script(c, poll):
        c.pod("r1-node-0-0-x", "worker", "Failed", terminated=_terminated(137, "OOMKilled"))
        c.mpijob_conditions = [{"type": "Failed", "status": "True", "message": "JobSet failed"}]

    run, cluster, out, _ = _run("avg:2:period=4", script, launcher="trainjob")
    with pytest.raises(TrainingError, match=r"TrainJob r1 failed: pod r1-node-0-0-x: OOMKilled"):
        run.run()
    # The OOM kill is reported in the step's log as it is seen.
    assert "pod r1-node-0-0-x: container c OOMKilled (exit code 137)" in out.getvalue()
    assert cluster.objects == {}


@pytest.mark.parametrize("launcher", ["kubernetes", "trainjob"])
def test_an_unschedulable_pod_fails_the_step_after_the_deadline_with_the_events_message(
    launcher,
):
    ticks = iter(range(0, 10_000, 60))

    def script(c, poll):
        _unschedulable(c, "r1-worker-0")
        if poll == 1:
            c.event(
                "Pod",
                "r1-worker-0",
                "FailedScheduling",
                "0/3 nodes are available: 3 Insufficient nvidia.com/gpu. preemption: 0/3 nodes",
            )
            c.event("Pod", "someone-elses-pod", "FailedScheduling", "not ours")

    run, cluster, out, _ = _run(
        "sync:2", script, launcher, schedule_timeout_seconds=300, clock=lambda: next(ticks)
    )
    with pytest.raises(
        TrainingError,
        match=r"pod r1-worker-0 could not be scheduled for 300 s: FailedScheduling: "
        r"0/3 nodes are available: 3 Insufficient nvidia.com/gpu",
    ):
        run.run()
    assert cluster.polls > 3  # it waited for the deadline, not failing at once
    text = out.getvalue()
    assert text.count("event: Pod/r1-worker-0: FailedScheduling: 0/3 nodes") == 1
    assert "not ours" not in text
    assert cluster.objects == {}


def test_no_pod_at_all_fails_after_the_deadline_with_the_objects_event():
    ticks = iter(range(0, 10_000, 60))

    def script(c, poll):
        if poll == 1:
            c.event("TrainJob", "r1", "TrainJobResumed", "runtime distrain-horovod not found")

    run, cluster, _, _ = _run(
        "sync:2", script, "trainjob", schedule_timeout_seconds=120, clock=lambda: next(ticks)
    )
    with pytest.raises(TrainingError, match=r"no pod of the run after 120 s: .*not found"):
        run.run()
    assert cluster.objects == {}


def _sigterm(c, poll):
    c.pod("r1-chief-abc", "chief", "Running")
    c.pod("r1-launcher-0-0-x", "launcher", "Running")
    if poll == 2:
        os.kill(os.getpid(), signal.SIGTERM)  # what KFP sends a cancelled step


def _succeed(c, poll):
    c.pod("r1-chief-abc", "chief", "Running")
    if poll == 2:
        c.job_status["r1-chief"] = client.V1JobStatus(succeeded=1)
        c.mpijob_conditions = [
            {"type": "Succeeded", "status": "True"},
            {"type": "Complete", "status": "True"},
        ]


def _fail(c, poll):
    c.pod("r1-chief-abc", "chief", "Failed", terminated=_terminated(1, "Error"))
    c.pod("r1-worker-0", "worker", "Failed", terminated=_terminated(1, "Error"))
    c.job_status["r1-chief"] = client.V1JobStatus(failed=1)
    c.mpijob_conditions = [{"type": "Failed", "status": "True"}]


def _run_forever(c, poll):
    c.pod("r1-chief-abc", "chief", "Running")


@pytest.mark.parametrize(
    "run_spec, launcher",
    [("sync:2", "kubernetes"), ("sync:2", "trainjob"), ("async:2:ps=1", "trainjob")],
)
@pytest.mark.parametrize("ending", ["success", "failure", "sigterm", "timeout"])
def test_every_object_is_deleted_on_each_ending(run_spec, launcher, ending):
    previous = signal.getsignal(signal.SIGTERM)
    ticks = iter(range(0, 10_000, 60))
    script = {"success": _succeed, "failure": _fail, "sigterm": _sigterm, "timeout": _run_forever}
    run, cluster, _, objects = _run(
        run_spec,
        script[ending],
        launcher,
        timeout_seconds=300,
        clock=lambda: next(ticks),
    )
    if ending == "success":
        run.run()
    else:
        error = {"failure": "failed", "sigterm": "cancelled", "timeout": "timed out"}[ending]
        with pytest.raises(TrainingError, match=error) as info:
            run.run()
        assert isinstance(info.value, Cancelled) == (ending == "sigterm")
    assert len(run.created) == len(objects)
    assert sorted(run.deleted) == sorted(run.created)
    assert cluster.objects == {}  # parameter servers included
    assert signal.getsignal(signal.SIGTERM) == previous  # the handler is put back


def test_transient_api_errors_are_retried_and_others_are_not():
    def script(c, poll):
        if poll == 2:
            c.mpijob_conditions = [{"type": "Complete", "status": "True"}]

    run, cluster, out, _ = _run("sync:2", script, "trainjob")
    import urllib3

    cluster.failures = {
        # The create went through but its answer was lost: the retry's 409 is our object.
        "create_namespaced_custom_object": [
            urllib3.exceptions.ProtocolError("Connection reset by peer"),
        ],
        "list_namespaced_pod": [
            client.ApiException(status=429, reason="Too Many Requests"),
            client.ApiException(status=503, reason="Service Unavailable"),
        ],
    }
    run.run()
    text = out.getvalue()
    assert "create TrainJob/r1: transient API error (ProtocolError)" in text
    assert "list pods: transient API error (429)" in text
    assert "list pods: transient API error (503)" in text
    assert cluster.objects == {}

    run, cluster, _, _ = _run("sync:2", script, "trainjob")
    cluster.failures = {"list_namespaced_pod": [client.ApiException(status=403, reason="no")]}
    with pytest.raises(client.ApiException, match="no"):
        run.run()
    assert cluster.objects == {}


def test_a_create_answered_with_409_after_a_lost_reply_counts_as_created():
    run, cluster, _, _ = _run("sync:2", _succeed, "trainjob")
    real_add = cluster.add
    calls = []

    def add_then_lose_the_reply(kind, body):
        if kind == "NetworkPolicy":
            return real_add(kind, body)
        calls.append(kind)
        if len(calls) == 1:
            real_add(kind, body)
            raise client.ApiException(status=504, reason="Gateway Timeout")
        raise client.ApiException(status=409, reason="AlreadyExists")

    cluster.add = add_then_lose_the_reply
    run.run()
    assert calls == ["TrainJob", "TrainJob"]
    assert run.created == [("NetworkPolicy", "r1"), ("TrainJob", "r1")]
    assert cluster.objects == {}


def test_objects_are_owned_by_the_launcher_pod_when_it_is_known(tmp_path, monkeypatch):
    env = {"POD_NAME": "train-abc", "POD_UID": "1234-5678", "POD_NAMESPACE": "ns"}
    owner = launcher_owner("ns", env)
    assert owner == {"apiVersion": "v1", "kind": "Pod", "name": "train-abc", "uid": "1234-5678"}
    assert launcher_owner("other-ns", env) is None  # owner references stay in a namespace
    assert launcher_owner("ns", {}) is None

    data = tmp_path / "examples"
    data.mkdir()
    cfg = TrainConfig(data_dir=str(data), output_dir=str(tmp_path / "t"), run="async:2:ps=1")
    k = KubernetesConfig(namespace="ns", mount_path=str(tmp_path / "claim"), poll_seconds=0.01)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seen = []

    def script(c, poll):
        seen.extend(o["metadata"].get("ownerReferences") for o in c.objects.values())
        c.job_status["r7-chief"] = client.V1JobStatus(succeeded=1)

    cluster = FakeCluster(script)
    cluster.run_name = "r7"
    with pytest.raises(TrainingError, match="wrote no"):
        train_on_cluster(cfg, k, _api(cluster), name="r7", out=io.StringIO())
    assert len(seen) == 9 and all(refs == [owner] for refs in seen)  # the ps Jobs too
    objects = build_objects(_cfg_for_owner(), KubernetesConfig(launcher="trainjob"), "r", "/c")
    add_owner(objects, owner)
    assert validate_all(objects) == 2


def _cfg_for_owner():
    return TrainConfig(data_dir="/d", output_dir="/o", run="sync:2")


def _stalling_run(tmp_path, run, stop_at_poll):
    """A cluster run of ``run`` whose ranks beat on the claim, rank 1 stopping at a poll.

    The clock is the launcher's (a fake advanced by its sleeps); the files' times are the
    volume's, an unrelated clock (an NFS server's), as on a cluster.
    """
    from distrain.train import heartbeat

    data = tmp_path / "examples"
    data.mkdir()
    (data / "metadata.json").write_text("{}")
    cfg = TrainConfig(
        data_dir=str(data), output_dir=str(tmp_path / "t"), run=run, operation_timeout=60
    )
    # A deadline of ten minutes stands for the three days: without the watch, the run
    # would end only there.
    k = KubernetesConfig(
        namespace="ns", mount_path=str(tmp_path / "claim"), poll_seconds=5, timeout_seconds=600
    )
    output = tmp_path / "claim" / "runs" / run_key(cfg) / "output"
    # An earlier attempt's rank, silent for ever: not this attempt's business.
    heartbeat.write_record(output, "rank 1", host="r8-worker-1", pid=7)
    now = [0.0]
    seen = {"last_beat": None, "ended_at": None, "stale_left": None}
    files = {}

    def script(c, poll):
        if poll == 1:  # removed before this attempt's pods start
            seen["stale_left"] = (output / "heartbeats" / "r8-worker-1-7.json").exists()
        for i in range(2):
            c.pod(f"r9-worker-{i}", "worker", "Running")
            if poll == 1:
                files[i] = heartbeat.write_record(
                    output, f"rank {i}", host=f"r9-worker-{i}", pid=40
                )
            if i == 1 and poll >= stop_at_poll:
                continue  # stopped: its file no longer advances, its pod still runs
            stamp = 1.7e9 + 3.0 * poll  # the volume's clock: hours off the launcher's
            os.utime(files[i], (stamp, stamp))
            if i == 1:
                seen["last_beat"] = now[0]
        c.pod("r9-launcher-x", "launcher", "Running")

    cluster = FakeCluster(script)
    cluster.run_name = "r9"

    def sleep(seconds):
        now[0] += seconds

    def run_it():
        try:
            return train_on_cluster(
                cfg,
                k,
                _api(cluster),
                name="r9",
                out=io.StringIO(),
                clock=lambda: now[0],
                sleep=sleep,
            )
        finally:
            seen["ended_at"] = now[0]

    return run_it, cluster, seen


@pytest.mark.case("k8s/stall")
def test_a_stopped_rank_ends_the_cluster_run_within_the_bound_naming_it_and_its_pod(tmp_path):
    run_it, cluster, seen = _stalling_run(tmp_path, "sync:2", stop_at_poll=4)
    with pytest.raises(TrainingError) as err:
        run_it()
    message = str(err.value)
    assert "rank 1 in pod r9-worker-1" in message and "has not run for" in message
    assert "rank 0" not in message
    # operation_timeout (60 s) after its last beat, not before, and within one more poll.
    stalled_for = seen["ended_at"] - seen["last_beat"]
    assert 60 < stalled_for <= 60 + 5, stalled_for
    assert seen["stale_left"] is False
    assert cluster.objects == {}  # the MPIJob and its policy deleted


def test_a_cluster_run_whose_ranks_beat_is_not_stopped(tmp_path):
    # Ranks beating for longer than operation_timeout: the run goes on until the job ends.
    run_it, cluster, seen = _stalling_run(tmp_path, "sync:2", stop_at_poll=10**6)
    original = cluster.script

    def script(c, poll):
        original(c, poll)
        if poll == 40:  # 200 s of polls: over three times operation_timeout
            (mpijob,) = [o for (kind, _), o in c.objects.items() if kind == "MPIJob"]
            launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]
            out = Path(
                json.loads(Path(launcher["containers"][0]["args"][-1]).read_text())["output_dir"]
            )
            (out / "history.json").write_text(json.dumps({"run": {"name": "sync:2"}}))
            c.mpijob_conditions = [{"type": "Succeeded", "status": "True"}]

    cluster.script = script
    assert run_it()["kubernetes"]["name"] == "r9"
    assert seen["ended_at"] >= 190 and seen["stale_left"] is False


def test_the_stall_watch_follows_the_engine_and_the_pods():
    from distrain.k8s.watchdog import pod_of, stall_watch

    ps = TrainConfig(data_dir="/d", output_dir="/o", run="async:2")
    assert stall_watch(ps, Path("/nonexistent")) is None  # PS modes: the others go on
    assert pod_of("r9-worker-1", ["r9-worker-1", "r9-worker-10"]) == "r9-worker-1"
    # A JobSet pod's hostname is its name without the Job controller's suffix.
    assert pod_of("t-node-0-1", ["t-node-0-1-x7k2p", "t-node-0-10-abcde"]) == "t-node-0-1-x7k2p"
    assert pod_of("r8-worker-1", ["r9-worker-1"]) == ""
