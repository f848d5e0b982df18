"""Plugins from other packages: the example plugin installed, listed and trained with; a
broken plugin reported by its entry point's name, every command still working."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "distrain-example-plugin"
ORIGIN = "[distrain-example-plugin 0.1.0]"


def _env(*paths: Path) -> dict:
    """This environment with ``paths`` first on the Python path (where the plugin went)."""
    old = os.environ.get("PYTHONPATH")
    return dict(os.environ, PYTHONPATH=os.pathsep.join([*map(str, paths), *([old] if old else [])]))


def _distrain(env: dict, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "distrain", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """The example plugin pip-installed (offline, no dependencies) into a folder of its own."""
    work = tmp_path_factory.mktemp("plugin")
    source = work / "source"
    shutil.copytree(EXAMPLE, source)  # the build leaves its files beside the source
    target = work / "site"
    subprocess.run(
        [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "--target", str(target), str(source)],
        check=True,
        capture_output=True,
        timeout=300,
    )
    return _env(target)


def test_the_installed_plugin_appears_in_distrain_list(installed):
    proc = _distrain(installed, "list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    model = next(line for line in lines if line.strip().startswith("example-linear"))
    mode = next(line for line in lines if line.strip().startswith("example-single"))
    assert ORIGIN in model and ORIGIN in mode
    # The model is listed under the data set it reads, after that data set's own.
    data_set = next(i for i, line in enumerate(lines) if line.startswith("  tfrecord "))
    assert lines.index(model) > data_set and lines[data_set].endswith(
        lines[data_set].split("] ", 1)[1]
    )
    assert "[built-in]" in lines[data_set] and "left out" not in proc.stdout


@pytest.mark.slow
def test_the_plugin_model_and_mode_train_end_to_end(installed, tmp_path):
    raw, examples, run = tmp_path / "raw", tmp_path / "examples", tmp_path / "run"
    for args in (
        ("data", "tfrecord", "--sample", "--sample-size", "400", "--output", str(raw)),
        ("preprocess", "tfrecord", "--data", str(raw), "--output", str(examples)),
        ("train", "--data", str(examples), "--output", str(run), "--epochs", "3")
        + ("--learning-rate", "0.05", "--model", "example-linear")
        + ("--run", "example-single:1:steps=4"),
    ):
        proc = _distrain(installed, *args)
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    history = json.loads((run / "history.json").read_text())
    assert history["run"]["mode"] == "example-single"
    assert history["run"]["model"] == "example-linear"
    assert history["epochs"][-1]["val_accuracy"] > 0.5  # four classes: a quarter by chance


def _broken_distribution(site: Path) -> None:
    """A distribution whose entry points load nothing usable (written by hand: no build)."""
    info = site / "broken_plugin-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        "[distrain.modes]\nbogus = no_such_module_here:Mode\n\n"
        "[distrain.datasets]\nnotaset = json:dumps\n"
    )


def test_a_broken_plugin_is_named_and_left_out_and_commands_still_work(tmp_path):
    _broken_distribution(tmp_path / "site")
    env = _env(tmp_path / "site")
    proc = _distrain(env, "list")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "plugin 'bogus' (distrain.modes, from broken-plugin 1.0) left out: " in proc.stderr
    assert "ModuleNotFoundError" in proc.stderr
    assert "plugin 'notaset' (distrain.datasets" in proc.stderr
    assert "expected a DataSet subclass" in proc.stderr
    left_out = proc.stdout.split("plugins left out")[1]
    assert "bogus" in left_out and "notaset" in left_out and "[broken-plugin 1.0]" in left_out
    assert "  single " in proc.stdout  # the built-in modes still listed
    # Asking for it says why it is missing, in one line, exit 2 (bad input).
    proc = _distrain(
        env, "train", "--data", str(tmp_path), "--output", str(tmp_path / "o"), "--run", "bogus:1"
    )
    assert proc.returncode == 2
    assert "mode 'bogus': its plugin (from broken-plugin 1.0) failed to load" in proc.stderr
