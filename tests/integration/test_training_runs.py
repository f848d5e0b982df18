"""Training with local processes: single, and sync under horovodrun (2 ranks, MPI and gloo)."""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from distrain.base.errors import ConfigError, TrainingError
from distrain.datasets.info import DataError, DatasetInfo
from distrain.learning.inputs import make_dataset, shard_size
from distrain.train import horovod, launch
from distrain.train.config import TrainConfig
from distrain.train.engine import worker_command
from distrain.train.horovod import MPIRUN_OPTIONS, horovod_env, sync_controller
from distrain.train.launch import launch_command, launch_env, run_training


def test_shard_size_matches_dataset_shard():
    total = 103
    assert sum(shard_size(total, 4, i) for i in range(4)) == total
    assert [shard_size(10, 3, i) for i in range(3)] == [4, 3, 3]


def test_input_pipelines_do_not_autotune(mnist_examples):
    # tf.data's autotuning thread makes deleting a long-lived iterator wait for its next
    # round (20 s at the end of a 30 s run); every training and scoring input is built
    # with fixed parallelism instead.
    info = DatasetInfo.load(mnist_examples)
    for kwargs in ({}, {"shuffle": True, "repeat": True, "shard": (2, 1)}):
        ds = make_dataset(info, "train", 32, **kwargs)
        assert ds.options().autotune.enabled is False
        x, y = next(iter(ds))
        assert x.shape[0] == 32 and y.shape == (32,)


def test_missing_metadata_is_a_clear_error(tmp_path):
    with pytest.raises(DataError, match="metadata.json: not found"):
        DatasetInfo.load(tmp_path)


def test_launch_commands_per_mode(tmp_path):
    single = TrainConfig(data_dir="d", output_dir=str(tmp_path), run="single:1")
    assert launch_command(single, "c.json")[-5:] == [
        "-m",
        "distrain",
        "worker",
        "--config",
        "c.json",
    ]
    sync = TrainConfig(data_dir="d", output_dir=str(tmp_path), run="sync:3", controller="gloo")
    cmd = launch_command(sync, "c.json")
    assert cmd[0].endswith("horovodrun")
    assert cmd[1:5] == ["-np", "3", "-H", "localhost:3"]
    assert "--gloo" in cmd


def _sync(tmp_path, run="sync:2", controller="auto"):
    return TrainConfig(data_dir="d", output_dir=str(tmp_path), run=run, controller=controller)


@pytest.mark.parametrize("built", [True, False])
def test_sync_controller_is_mpi_where_built_and_gloo_when_elastic(tmp_path, monkeypatch, built):
    monkeypatch.setattr(horovod, "mpi_controller_available", lambda: built)
    auto = _sync(tmp_path)
    assert sync_controller(auto) == ("mpi" if built else "gloo")
    cmd = launch_command(auto, "c.json")
    if built:  # mpirun itself, as the cluster's MPIJob launcher runs it
        assert Path(cmd[0]).name == "mpirun" and cmd[1:5] == ["-np", "2", "-H", "localhost:2"]
        assert cmd[5:-12] == MPIRUN_OPTIONS and cmd[-6:] == worker_command("c.json")
        # A local run's ranks talk over loopback only.
        assert cmd[-12:-6] == [
            "-mca",
            "btl_tcp_if_include",
            "lo",
            "-mca",
            "oob_tcp_if_include",
            "lo",
        ]
    else:
        assert Path(cmd[0]).name == "horovodrun" and "--gloo" in cmd
    assert sync_controller(_sync(tmp_path, "sync:3:min=2")) == "gloo"  # elastic needs gloo
    assert sync_controller(_sync(tmp_path, controller="gloo")) == "gloo"
    if built:
        env = horovod_env(auto)
        # Waits yield the core the rank's compute threads need.
        assert env["OMPI_MCA_mpi_yield_when_idle"] == "1"
        # PyPI's Open MPI in the venv is told where it was installed.
        assert env["OPAL_PREFIX"] == str(Path(horovod.venv_tool("mpirun")).parent.parent)
        assert sync_controller(_sync(tmp_path, controller="mpi")) == "mpi"
    else:
        assert horovod_env(auto) == {}
        with pytest.raises(ConfigError, match="controller 'mpi' needs mpirun"):
            sync_controller(_sync(tmp_path, controller="mpi"))
    assert launch_env(auto) == horovod_env(auto)  # what the main process (mpirun) gets


def test_elf_needed_lists_a_binarys_libraries(tmp_path):
    import shutil

    assert "libc.so.6" in horovod.elf_needed(Path(shutil.which("ls")))
    (tmp_path / "text.so").write_text("not an ELF file")
    assert horovod.elf_needed(tmp_path / "text.so") == []


def test_controller_is_checked_with_the_config(tmp_path):
    with pytest.raises(ConfigError, match="unknown controller 'nccl'"):
        _sync(tmp_path, controller="nccl")
    with pytest.raises(ConfigError, match="elastic Horovod runs need the gloo controller"):
        _sync(tmp_path, "sync:3:min=2", controller="mpi")


@pytest.mark.slow
def test_single_run_learns_and_writes_history(mnist_examples, tmp_path):
    cfg = TrainConfig(
        data_dir=str(mnist_examples), output_dir=str(tmp_path / "run"), run="single:1", epochs=3
    )
    history = run_training(cfg, timeout=300)
    assert [e["epoch"] for e in history["epochs"]] == [1, 2, 3]
    last = history["epochs"][-1]
    assert last["val_accuracy"] > 0.8, history["epochs"]
    assert history["epochs"][0]["loss"] > last["loss"]
    assert history["examples_per_second"] > 0
    assert history["train_seconds"] >= last["step_seconds"]
    # Step times: each epoch's spread, and the run's over the epochs after the first.
    steps_per_epoch = history["steps"] // 3
    assert [e["step_ms"]["count"] for e in history["epochs"]] == [steps_per_epoch] * 3
    spread = history["step_ms"]
    assert spread["count"] == 2 * steps_per_epoch
    assert 0 < spread["p10"] <= spread["median"] <= spread["p90"]
    # The mean step (from examples/second) is not faster than the fastest tenth of them.
    assert cfg.batch_size / history["examples_per_second"] * 1e3 >= spread["p10"] * 0.99
    assert (tmp_path / "run" / "model.keras").exists()
    saved = json.loads((tmp_path / "run" / "history.json").read_text())
    assert saved["run"]["name"] == "single:1"


@pytest.mark.slow
def test_rerun_resumes_from_checkpoint_without_extra_epochs(mnist_examples, tmp_path):
    out = tmp_path / "run"
    first = TrainConfig(data_dir=str(mnist_examples), output_dir=str(out), epochs=2)
    run_training(first, timeout=300)
    # The same output directory with more epochs goes on from epoch 2, not from 0.
    second = TrainConfig(data_dir=str(mnist_examples), output_dir=str(out), epochs=3)
    history = run_training(second, timeout=300)
    assert [e["epoch"] for e in history["epochs"]] == [1, 2, 3]
    steps_per_epoch = history["epochs"][0]["examples"]
    assert history["total_examples"] == 3 * steps_per_epoch


@pytest.mark.slow
@pytest.mark.horovod
@pytest.mark.parametrize("controller", [pytest.param("mpi", marks=pytest.mark.mpi), "gloo"])
def test_sync_two_ranks_end_with_identical_weights(mnist_examples, tmp_path, controller):
    out = tmp_path / "sync"
    cfg = TrainConfig(
        data_dir=str(mnist_examples),
        output_dir=str(out),
        run="sync:2",
        epochs=2,
        dump_rank_weights=True,
        controller=controller,
        idle_horovod_threads=controller == "mpi",  # both settings, one run each
    )
    history = run_training(cfg, timeout=300)
    assert history["controller"] == controller
    # With idle_horovod_threads, Horovod's background thread at least runs at idle
    # priority; without it (the default), none.
    if cfg.idle_horovod_threads:
        assert history["idle_horovod_threads"] >= 1
    else:
        assert history["idle_horovod_threads"] == 0
    assert history["run"]["workers"] == 2
    assert history["global_batch_size"] == 2 * cfg.batch_size
    assert history["config"]["learning_rate"] == cfg.learning_rate
    rank0 = np.load(out / "weights" / "rank0.npz")
    rank1 = np.load(out / "weights" / "rank1.npz")
    assert rank0.files == rank1.files and len(rank0.files) >= 6
    for key in rank0.files:
        np.testing.assert_array_equal(rank0[key], rank1[key])
    # Training moved the weights away from the shared initialisation.
    from distrain.learning.models import build_model

    info = DatasetInfo.load(mnist_examples)
    fresh = build_model(info, "mlp", cfg.seed)
    assert not np.allclose(fresh.weights[0].numpy(), rank0[rank0.files[0]])
    # Each rank ran the same number of full steps over its half of the training split.
    steps = info.splits["train"] // 2 // cfg.batch_size
    assert history["epochs"][0]["examples"] == 2 * steps * cfg.batch_size
    # Each rank's loss on its own shard; together they make the run's loss.
    for epoch in history["epochs"]:
        assert len(epoch["rank_loss"]) == 2 and epoch["rank_loss"][0] != epoch["rank_loss"][1]
        assert np.mean(epoch["rank_loss"]) == pytest.approx(epoch["loss"], rel=1e-6)


_PRIORITIES = """
import json, os, sys, threading
from distrain.train.horovod import start_horovod
main = threading.get_native_id()
hvd, lowered = start_horovod(sys.argv[1] == "idle")
policies = {t: os.sched_getscheduler(int(t)) for t in os.listdir("/proc/self/task")}
print(json.dumps({"main": main, "lowered": lowered, "idle": os.SCHED_IDLE, "policies": policies}))
"""


@pytest.mark.horovod
@pytest.mark.parametrize("priority", ["idle", "normal"])
def test_start_horovod_lowers_only_the_threads_it_started(tmp_path, priority):
    # One rank started alone, with the environment sync runs get (Open MPI's prefix).
    cfg = TrainConfig(data_dir="d", output_dir=str(tmp_path), run="sync:2")
    env = {**os.environ, **launch_env(cfg)}
    done = subprocess.run(
        [sys.executable, "-c", _PRIORITIES, priority],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    idle = {int(t) for t, policy in seen["policies"].items() if policy == seen["idle"]}
    if priority == "idle":
        # Horovod's background thread (and MPI's) came with hvd.init() and run at idle
        # priority; the thread that called it, and so TensorFlow's compute, does not.
        assert seen["lowered"] and idle == set(seen["lowered"])
        assert seen["main"] not in idle
    else:
        assert seen["lowered"] == [] and idle == set()


def _server_processes() -> set[int]:
    import psutil

    found = set()
    for proc in psutil.process_iter(["pid", "cmdline"]):
        command = " ".join(proc.info["cmdline"] or [])
        if "-m distrain server" in command or "-m distrain worker" in command:
            found.add(proc.info["pid"])
    return found


@pytest.mark.slow
def test_async_trains_records_staleness_and_leaves_no_process(
    mnist_examples, tmp_path, monkeypatch
):
    scratch = tmp_path / "tmp"  # the launcher's temporary directory, and its processes'
    scratch.mkdir()
    monkeypatch.setenv("TMPDIR", str(scratch))
    monkeypatch.setattr(tempfile, "tempdir", None)  # read TMPDIR again
    before = _server_processes()
    cfg = TrainConfig(
        data_dir=str(mnist_examples),
        output_dir=str(tmp_path / "a"),
        run="async:2",
        epochs=5,  # at 3, stale updates left some runs just under the bar (0.78)
        batch_size=32,
    )
    history = run_training(cfg, timeout=300)
    assert _server_processes() == before, "parameter servers or workers outlived the run"
    # Nor did their files: servers are stopped and the chief ends with os._exit, so
    # autograph's generated modules outlive them unless the run's directory goes.
    assert list(scratch.iterdir()) == []
    assert history["run"]["parameter_servers"] == 1
    assert history["epochs"][-1]["val_accuracy"] > 0.8
    # Workers pushed without waiting for each other: some gradients were computed on
    # parameters that another worker had already updated.
    assert len(history["staleness"]) == sum(c[-1][1] for c in history["worker_progress"].values())
    assert max(history["staleness"]) > 0
    assert history["staleness_summary"]["mean"] > 0
    assert set(history["worker_progress"]) == {"0", "1"}
    assert (tmp_path / "a" / "model.keras").exists()
    logs = sorted(p.name for p in (tmp_path / "a" / "logs").iterdir())
    assert logs == ["ps-0.log", "worker-0.log", "worker-1.log"]


@pytest.mark.slow
def test_syncreplicas_drops_stale_gradients_and_learns(mnist_examples, tmp_path):
    before = _server_processes()
    cfg = TrainConfig(
        data_dir=str(mnist_examples),
        output_dir=str(tmp_path / "sr"),
        run="syncreplicas:3:aggregate=2",
        epochs=4,  # at 3, one CI run ended at 0.795 (161 validation examples: 0.006 each)
        batch_size=32,
    )
    history = run_training(cfg, timeout=300)
    assert _server_processes() == before
    assert history["epochs"][-1]["val_accuracy"] > 0.8
    assert history["global_batch_size"] == 2 * cfg.batch_size
    # Each update took 2 fresh gradients; the third worker's late ones were dropped.
    delays = history["staleness"]
    assert history["dropped_gradients"] == sum(1 for d in delays if d > 0) > 0
    assert delays.count(0) >= 2 * (history["total_examples"] // (2 * cfg.batch_size))


@pytest.mark.slow
@pytest.mark.horovod
def test_sync_is_never_stale(mnist_examples, tmp_path):
    cfg = TrainConfig(
        data_dir=str(mnist_examples), output_dir=str(tmp_path / "s"), run="sync:2", epochs=1
    )
    history = run_training(cfg, timeout=300)
    assert history["staleness"] and set(history["staleness"]) == {0}
    # One epoch: the run's step spread is that epoch's (each step waited for its allreduce).
    assert history["step_ms"] == history["epochs"][0]["step_ms"]
    assert history["step_ms"]["count"] == history["steps"]


def test_sync_ranks_bind_to_their_own_cores(monkeypatch):
    from distrain.train import horovod as worker

    calls = []
    monkeypatch.setattr(worker.os, "sched_getaffinity", lambda pid: {0, 1, 2, 3, 4})
    monkeypatch.setattr(worker.os, "sched_setaffinity", lambda pid, cores: calls.append(cores))
    monkeypatch.delenv("DISTRAIN_BIND_CORES", raising=False)
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "2")
    monkeypatch.setenv("HOROVOD_LOCAL_RANK", "1")
    assert worker.bind_rank_to_cores() == {2, 3}
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "8")  # fewer cores than ranks: leave it
    assert worker.bind_rank_to_cores() is None
    monkeypatch.setenv("HOROVOD_LOCAL_SIZE", "2")
    monkeypatch.setenv("DISTRAIN_BIND_CORES", "0")
    assert worker.bind_rank_to_cores() is None
    monkeypatch.delenv("HOROVOD_LOCAL_RANK")
    monkeypatch.delenv("DISTRAIN_BIND_CORES")
    assert worker.bind_rank_to_cores() is None  # not a Horovod rank
    assert calls == [{2, 3}]


def test_a_dead_parameter_server_is_named_even_when_the_chief_fails_right_after(
    mnist_examples, tmp_path, monkeypatch
):
    """Both end between two of the launcher's looks: the cause named is the server."""
    from distrain.train.engine import Process
    from distrain.train.modes.asynchronous import Async

    def processes(self, cfg, config_path, logs):
        return [
            Process(
                "ps:0",
                ["sh", "-c", "sleep 0.1; exit 3"],
                critical=True,
                what="parameter server ps:0",
            ),
            Process("chief", ["sh", "-c", "sleep 0.15; exit 1"], main=True),
        ]

    monkeypatch.setattr(Async, "local_processes", processes)
    cfg = TrainConfig(data_dir=str(mnist_examples), output_dir=str(tmp_path / "r"), run="async:2")
    with pytest.raises(TrainingError, match="parameter server ps:0 exited with code 3"):
        launch.run_training(cfg, timeout=60)
