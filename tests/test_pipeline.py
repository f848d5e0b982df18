"""The MNIST pipeline: compiled by both compilers, and run whole by kfp.local."""

import json
import subprocess
import sys

import pytest
import yaml

from distrain.images import BEAM_IMAGE, TRAINER_IMAGE
from distrain.train.config import DEFAULT_RUNS

from .conftest import ROOT, VENV_BIN


def _load(path):
    return yaml.safe_load(path.read_text())


def _check_ir(spec: dict) -> None:
    assert spec["pipelineInfo"]["name"] == "distrain-mnist"
    executors = spec["deploymentSpec"]["executors"]
    images = {e["container"]["image"] for e in executors.values()}
    assert images == {BEAM_IMAGE, TRAINER_IMAGE}
    tasks = spec["root"]["dag"]["tasks"]
    assert {"fetch-data", "preprocess", "baseline", "compare"} <= set(tasks)
    loop = next(t for name, t in tasks.items() if name.startswith("for-loop"))
    assert loop["parameterIterator"]["items"]["inputParameter"] == "pipelinechannel--runs"
    inner = spec["components"][loop["componentRef"]["name"]]["dag"]["tasks"]
    assert {"train", "evaluate"} <= set(inner)
    defaults = spec["root"]["inputDefinitions"]["parameters"]
    assert defaults["runs"]["defaultValue"] == DEFAULT_RUNS
    # No component installs packages at run time: the images carry distrain and kfp.
    for executor in executors.values():
        assert "pip install" not in " ".join(executor["container"]["command"])


def test_distrain_compile(tmp_path, cli_env):
    out = tmp_path / "mnist.yaml"
    subprocess.run(
        [str(VENV_BIN / "distrain"), "compile", "mnist", "--output", str(out)],
        check=True,
        env=cli_env,
    )
    _check_ir(_load(out))


def test_kfp_dsl_compile(tmp_path, cli_env):
    out = tmp_path / "mnist.yaml"
    subprocess.run(
        [
            str(VENV_BIN / "kfp"),
            "dsl",
            "compile",
            "--py",
            str(ROOT / "pipelines" / "mnist.py"),
            "--output",
            str(out),
        ],
        check=True,
        env=cli_env,
        cwd=tmp_path,
    )
    _check_ir(_load(out))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--runs", "sync:0"], "workers must be a positive integer"),
        (["--runs", "ring:2"], "unknown mode 'ring'"),
        (["--runs", "syncreplicas:2:aggregate=3"], "replicas_to_aggregate must be between"),
        (["--data", "/nonexistent/mnist"], "data directory /nonexistent/mnist does not exist"),
    ],
)
def test_run_refuses_bad_parameters_before_any_work(tmp_path, cli_env, args, message):
    proc = subprocess.run(
        [str(VENV_BIN / "distrain"), "run", "mnist", "--output", str(tmp_path / "o"), *args],
        capture_output=True,
        text=True,
        env=cli_env,
    )
    assert proc.returncode == 2
    assert message in proc.stderr
    assert not (tmp_path / "o").exists()


@pytest.mark.slow
@pytest.mark.horovod
def test_local_pipeline_run_end_to_end(tmp_path, cli_env, mnist_raw):
    out = tmp_path / "out"
    proc = subprocess.run(
        [
            str(VENV_BIN / "distrain"),
            "run",
            "mnist",
            "--data",
            str(mnist_raw),
            "--output",
            str(out),
            "--epochs",
            "2",
        ],
        capture_output=True,
        text=True,
        env=cli_env,
        timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    comparison = json.loads((out / "comparison.json").read_text())
    rows = {row["name"]: row for row in comparison["rows"]}
    assert set(rows) == {"single:1", "sync:2", "async:2", "syncreplicas:3"}
    assert rows["single:1"]["speedup"] == pytest.approx(1.0)
    for row in rows.values():
        assert 0.5 < row["accuracy"] <= 1.0
        assert row["examples_per_second"] > 0
    assert comparison["best"] in rows
    assert rows["async:2"]["staleness_max"] > 0
    assert rows["sync:2"]["staleness_max"] == 0
    assert rows["syncreplicas:3"]["aggregation"] == "2/3"
    assert "syncreplicas:3" in (out / "comparison.md").read_text()
    assert "data:image/png;base64," in (out / "comparison.html").read_text()
    # Progress and the final table were printed.
    assert "epoch 2/2" in proc.stdout + proc.stderr
    tail = proc.stdout[proc.stdout.rindex("pipeline finished") - 2000 :]
    assert all(name in tail for name in rows)


def test_pipeline_module_is_importable_by_path():
    # `kfp dsl compile --py` imports the file by path; it must not rely on relative imports.
    proc = subprocess.run(
        [sys.executable, str(ROOT / "pipelines" / "mnist.py")], capture_output=True, text=True
    )
    assert proc.returncode == 0, proc.stderr
