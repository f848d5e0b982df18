"""Progress lines with an ETA, and Kubeflow Trainer's status protocol against a local controller.

The fake controller (:mod:`tests.fakes.trainer`) serves Trainer's status endpoint over
HTTPS and checks every report against the TrainJob CRD's ``status.trainerStatus``
schema in ``distrain/k8s/schemas/``.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest

from distrain.train.config import TrainConfig
from distrain.train.status import ProgressHook, TrainerStatus, duration, status_payload
from tests.fakes.trainer import Controller, problems, status_schema


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Replica:
    def __init__(self, rank=0):
        self.rank, self.step, self.lines = rank, 0, []

    def log(self, message):
        self.lines.append(message)


class Steps:
    def updates_per_epoch(self):
        return 10


class Driver:
    def __init__(self):
        self.steps, self.epochs = Steps(), []


def record(epoch: int, examples: int, loss: float = 0.5) -> dict:
    return {"epoch": epoch, "loss": loss, "accuracy": 0.8, "val_loss": 0.6,
            "val_accuracy": 0.75, "step_seconds": 10.0, "examples": examples}  # fmt: skip


def drive(hook, replica, clock, driver=None):
    """Two epochs of 10 updates: segments at updates 3, 5, 8, 10 (epoch 1), then 20."""
    driver = driver or Driver()
    hook.on_train_begin(driver)
    for t, step in ((10, 3), (31, 5), (40, 8)):
        clock.now, replica.step = 1000.0 + t, step
        hook.on_segment_end(driver, step)
    clock.now, replica.step = 1050.0, 10
    hook.on_segment_end(driver, 10)
    driver.epochs.append(record(1, 640))
    hook.on_epoch_end(driver, driver.epochs[-1], [])
    clock.now, replica.step = 1100.0, 20
    hook.on_segment_end(driver, 20)
    driver.epochs.append(record(2, 1280, loss=0.25))
    hook.on_epoch_end(driver, driver.epochs[-1], [])
    hook.on_train_end(driver, {"examples_per_second": 64.0})
    return driver


def config(**kw) -> TrainConfig:
    return TrainConfig(data_dir="-", output_dir="-", epochs=2, **kw)


def test_progress_lines_come_at_most_once_per_interval_each_with_an_eta():
    replica, clock = Replica(), Clock()
    drive(ProgressHook(config(progress_seconds=30), replica, env={}, clock=clock), replica, clock)
    # 31 s for 5 updates: 15 left take 93 s. Nothing at 10 s, 40 s or 50 s (within 30 s
    # of a line), at the end of epoch 1 with the segment's line, then 100 %.
    assert replica.lines == [
        "progress 25% (update 5 of 20, epoch 1/2): 31 s, ETA 1 min 33 s",
        "progress 100% (update 20 of 20, epoch 2/2): 1 min 40 s, ETA 0 s",
    ]


def test_progress_lines_are_rank_zeros_and_off_at_zero():
    for replica, seconds in ((Replica(rank=1), 30), (Replica(), 0)):
        clock = Clock()
        hook = ProgressHook(config(progress_seconds=seconds), replica, env={}, clock=clock)
        drive(hook, replica, clock)
        assert replica.lines == [] and hook.status is None


def test_duration_reads_as_people_write_it():
    assert [duration(s) for s in (0, 42.4, 65, 3600 + 7 * 60 + 5)] == [
        "0 s", "42 s", "1 min 05 s", "1 h 07 min"
    ]  # fmt: skip


def test_the_vendored_trainjob_schema_has_trainers_status():
    trainer = status_schema()["properties"]["trainerStatus"]
    assert set(trainer["properties"]) == {
        "progressPercentage", "estimatedRemainingSeconds", "metrics", "lastUpdatedTime"
    }  # fmt: skip


def test_the_payload_keeps_to_the_crds_bounds():
    now = datetime(2026, 6, 12, 3, 0, tzinfo=UTC)
    body = status_payload(
        140.7, -5.0, {"loss": 0.25, "n" * 80: 1.0, "nan": math.nan, "big": 1e300}, now
    )
    assert problems(body) == []
    status = body["trainerStatus"]
    assert status["progressPercentage"] == 100 and status["estimatedRemainingSeconds"] == 0
    assert status["lastUpdatedTime"] == "2026-06-12T03:00:00Z"
    assert [m["name"] for m in status["metrics"]] == ["loss", "n" * 64, "big"]
    assert status["metrics"][0]["value"] == "0.25"
    assert "estimatedRemainingSeconds" not in status_payload(5, None, {}, now)["trainerStatus"]
    # The check is the CRD's: a number for a metric's value, an unknown field, no time.
    bad = {"trainerStatus": {"metrics": [{"name": "loss", "value": 0.25}], "step": 3}}
    assert len(problems(bad)) == 3


def test_a_run_reports_its_progress_by_trainers_status_protocol(tmp_path):
    controller = Controller(tmp_path)
    try:
        replica, clock = Replica(), Clock()
        hook = ProgressHook(config(progress_seconds=30), replica, env=controller.env(), clock=clock)
        driver = Driver()
        hook.on_train_begin(driver)
        controller.token_file.write_text("tok-2")  # the projected token rotates
        for step in (5, 10):
            clock.now, replica.step = clock.now + 31, step
            hook.on_segment_end(driver, step)
        driver.epochs.append(record(1, 640))
        hook.on_epoch_end(driver, driver.epochs[-1], [])
        hook.on_train_end(driver, {"examples_per_second": 64.0})
    finally:
        controller.close()
    reports = controller.reports
    assert [r["problems"] for r in reports] == [[]] * 4
    assert all(
        r["path"].endswith("/namespaces/team-a/trainjobs/mnist-sync-2/status") for r in reports
    )
    assert [r["token"] for r in reports] == ["Bearer tok-1"] + ["Bearer tok-2"] * 3
    assert {r["content_type"] for r in reports} == {"application/json"}
    statuses = [r["body"]["trainerStatus"] for r in reports]
    assert [s["progressPercentage"] for s in statuses] == [0, 25, 50, 100]
    assert [s.get("estimatedRemainingSeconds") for s in statuses] == [None, 93, 62, 0]
    assert "metrics" not in statuses[1]  # no epoch has ended yet
    last = {m["name"]: m["value"] for m in statuses[-1]["metrics"]}
    assert last == {"epoch": "1", "loss": "0.5", "accuracy": "0.8", "val_loss": "0.6",
                    "val_accuracy": "0.75", "examples_per_second": "64"}  # fmt: skip
    assert hook.status.sent == 4 and replica.lines[-1].startswith("progress 50%")


@pytest.mark.case("train/watch-fails")
def test_a_failing_controller_is_told_once_and_training_goes_on(tmp_path):
    controller = Controller(tmp_path)
    lines: list[str] = []
    try:
        status = TrainerStatus.from_environment(lines.append, controller.env())
        controller.answer = 404
        assert status.report(10, 100, {}) is False and status.report(20, 90, {}) is False
        controller.answer = 200
        assert status.report(30, 80, {}) is True
    finally:
        controller.close()
    assert len(lines) == 2
    assert "HTTP 404: Train job not found" in lines[0] and "training goes on" in lines[0]
    assert lines[1] == "trainer status: reports go through again"


@pytest.mark.case("train/watch-fails")
def test_a_controller_whose_certificate_is_not_the_injected_cas_is_refused(tmp_path):
    controller = Controller(tmp_path)
    lines: list[str] = []
    env = dict(controller.env(), KUBEFLOW_TRAINER_SERVER_CA_CERT=str(tmp_path / "missing.crt"))
    try:
        assert TrainerStatus.from_environment(lines.append, env).report(1, 1, {}) is False
        # No CA file given at all: the system's CAs, which did not sign it either.
        env["KUBEFLOW_TRAINER_SERVER_CA_CERT"] = ""
        assert TrainerStatus.from_environment(lines.append, env).report(1, 1, {}) is False
    finally:
        controller.close()
    assert controller.reports == [] and len(lines) == 2


def test_outside_a_trainjob_nothing_is_reported():
    assert TrainerStatus.from_environment(print, {}) is None


@pytest.mark.slow
def test_a_single_run_reports_to_the_controller_from_its_worker(
    mnist_examples, tmp_path, monkeypatch
):
    from distrain.train.launch import run_training

    controller = Controller(tmp_path)
    for name, value in controller.env().items():
        monkeypatch.setenv(name, value)  # as the plugin injects them into the trainer's pod
    cfg = TrainConfig(
        data_dir=str(mnist_examples), output_dir=str(tmp_path / "run"), epochs=2,
        progress_seconds=1,
    )  # fmt: skip
    try:
        history = run_training(cfg, timeout=300)
    finally:
        controller.close()
    reports = controller.reports
    assert reports and all(r["problems"] == [] for r in reports)
    statuses = [r["body"]["trainerStatus"] for r in reports]
    assert statuses[0]["progressPercentage"] == 0 and statuses[-1]["progressPercentage"] == 100
    last = {m["name"]: float(m["value"]) for m in statuses[-1]["metrics"]}
    assert last["val_accuracy"] == pytest.approx(history["epochs"][-1]["val_accuracy"], rel=1e-5)
