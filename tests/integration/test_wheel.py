"""What ships: the built wheel, installed alone, runs the CLI, every compile and a training run.

The wheel is built from the tracked files only (what a clean checkout holds) and installed
with ``--no-deps --no-index`` into a fresh virtual environment. Its third-party packages
(TensorFlow, Beam, KFP, Horovod) come from the setup's ``.venv`` through a site directory of
links that leaves out distrain's editable install, so nothing of the source tree can be
imported: every command runs from a temporary folder with no ``PYTHONPATH``, and the test
first checks that ``distrain`` resolves inside the new environment.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import venv
from pathlib import Path

import pytest

from tests.conftest import ROOT

pytestmark = pytest.mark.slow


def _tracked_copy(dest: Path) -> Path:
    """A copy of the files git tracks (the whole tree where there is no git)."""
    try:
        names = subprocess.run(
            ["git", "-C", str(ROOT), "ls-files", "-z"], check=True, capture_output=True
        ).stdout.split(b"\0")
    except (OSError, subprocess.CalledProcessError):
        shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(".venv", ".git", "out"))
        return dest
    for raw in filter(None, names):
        src = ROOT / raw.decode()
        if src.is_file():
            (dest / raw.decode()).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / raw.decode())
    return dest


def _dependencies_without_distrain(dest: Path) -> Path:
    """A site directory linking every entry of this venv's site-packages but distrain's own."""
    dest.mkdir()
    site = Path(sysconfig.get_paths()["purelib"])
    for entry in site.iterdir():
        name = entry.name.lower()
        if name.startswith(("distrain", "__editable__.distrain", "__editable___distrain")):
            continue
        (dest / entry.name).symlink_to(entry)
    return dest


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict:
    """A fresh venv with the built wheel installed; returns how to run in it."""
    tmp = tmp_path_factory.mktemp("wheel")
    src = _tracked_copy(tmp / "src")
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
        + ["-w", str(tmp / "dist"), str(src)],
        capture_output=True,
        text=True,
    )
    assert built.returncode == 0, built.stderr[-3000:]
    (wheel,) = (tmp / "dist").glob("distrain-*.whl")

    env_dir = tmp / "venv"
    venv.EnvBuilder(with_pip=True).create(env_dir)
    python = env_dir / "bin" / "python"
    purelib = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    deps = _dependencies_without_distrain(tmp / "deps")
    # A .pth line starting with "import" runs: addsitedir also reads the .pth files there.
    Path(purelib, "zz_distrain_test_deps.pth").write_text(
        f"import site; site.addsitedir({str(deps)!r})\n"
    )
    pip = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)],
        capture_output=True,
        text=True,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    shutil.rmtree(src)  # nothing of the source is left to import by accident

    work = tmp / "work"
    work.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV"))}
    env["PATH"] = f"{env_dir / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"
    return {"python": str(python), "bin": env_dir / "bin", "env": env, "cwd": work, "wheel": wheel}


def _run(installed: dict, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        list(args),
        cwd=installed["cwd"],
        env=installed["env"],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_wheel_holds_every_package_of_the_tree(installed):
    """Each package folder of the tree (components/ and pipelines/ mapped) is in the wheel."""
    import zipfile

    names = set(zipfile.ZipFile(installed["wheel"]).namelist())
    expected = set()
    for folder, prefix in (("distrain", "distrain"), ("components", "distrain/components")):
        for init in (ROOT / folder).rglob("__init__.py"):
            expected.add(f"{prefix}/{init.relative_to(ROOT / folder).as_posix()}")
    for init in (ROOT / "pipelines").rglob("__init__.py"):
        expected.add(f"distrain/pipelines/{init.relative_to(ROOT / 'pipelines').as_posix()}")
    for schema in (ROOT / "distrain/k8s/schemas").glob("*.json"):
        expected.add(schema.relative_to(ROOT).as_posix())
    assert expected - names == set()


def test_installed_package_is_the_wheel_and_its_requirements_hold(installed):
    probe = _run(
        installed,
        installed["python"],
        "-c",
        "import json, distrain, importlib.metadata as md;"
        "from packaging.requirements import Requirement;"
        "reqs = [Requirement(r) for r in md.requires('distrain') or []];"
        "bad = [str(r) for r in reqs if not r.extras and (r.marker is None or r.marker.evaluate())"
        " and md.version(r.name) not in r.specifier];"
        "print(json.dumps({'file': distrain.__file__, 'unmet': bad}))",
    )
    assert probe.returncode == 0, probe.stderr[-3000:]
    found = json.loads(probe.stdout.strip().splitlines()[-1])
    assert found["file"].startswith(str(Path(installed["python"]).parents[1]))
    assert found["unmet"] == []


def test_cli_help_from_the_wheel(installed):
    done = _run(installed, str(installed["bin"] / "distrain"), "--help")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compile" in done.stdout and "run" in done.stdout


def test_every_pipeline_compiles_from_the_wheel(installed):
    names = _run(
        installed,
        installed["python"],
        "-c",
        "from distrain.commands import PIPELINES, EXPERIMENTS;"
        " print(' '.join(PIPELINES + EXPERIMENTS))",
    )
    assert names.returncode == 0, names.stderr[-3000:]
    pipelines = names.stdout.split()
    assert {"mnist", "dbpedia", "gutenberg"} <= set(pipelines) and len(pipelines) > 3
    for name in pipelines:
        out = installed["cwd"] / f"{name}.yaml"
        done = _run(
            installed, str(installed["bin"] / "distrain"), "compile", name, "--output", str(out)
        )
        assert done.returncode == 0, f"{name}: {done.stderr[-3000:]}"
        assert "pipelineInfo" in out.read_text()


def test_one_epoch_run_from_the_wheel(installed):
    out = installed["cwd"] / "out"
    done = _run(
        installed,
        str(installed["bin"] / "distrain"),
        "run",
        "mnist",
        "--runs",
        "single:1",
        "--epochs",
        "1",
        "--output",
        str(out),
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    rows = json.loads((out / "comparison.json").read_text())["rows"]
    (single,) = [r for r in rows if r["name"] == "single:1"]
    assert single["accuracy"] > 0.5


@pytest.mark.horovod
def test_a_user_model_runs_the_whole_pipeline_in_every_mode_from_the_wheel(installed):
    # Issue 48's acceptance: a model file with a custom layer, TF ops, a Lambda, batch norm
    # and dropout (the zoo's functional_ops) through `distrain run tfrecord` in every
    # data-parallel and parameter-server mode of the registry (those that train any model;
    # the split modes take or refuse it, tests/integration/test_zoo.py), each evaluated,
    # then compared. The file is the user's: beside the work, never in the wheel.
    from distrain.train.modes import Mode, mode_class, mode_names
    from tests.zoo.data import write_raw

    raw = write_raw(installed["cwd"] / "team_records")
    model_file = installed["cwd"] / "team_model.py"
    shutil.copyfile(ROOT / "tests" / "zoo" / "models.py", model_file)
    modes = [name for name in mode_names() if mode_class(name).check_model is Mode.check_model]
    runs = [mode_class(n).example or f"{n}:{mode_class(n).fixed_workers or 2}" for n in modes]
    out = installed["cwd"] / "team_out"
    # Horovod's launchers (horovodrun, mpirun) where the setup put them, after the wheel's.
    env = dict(installed["env"])
    env["PATH"] = f"{env['PATH']}{os.pathsep}{Path(sys.executable).parent}"
    done = subprocess.run(
        [str(installed["bin"] / "distrain"), "run", "tfrecord", "--data", str(raw),
         "--model", f"{model_file}:functional_ops", "--runs", ",".join(runs),
         "--epochs", "1", "--output", str(out)],
        cwd=installed["cwd"], env=env, capture_output=True, text=True, timeout=2400,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    text = (out / "comparison.json").read_text()
    assert f'"model": "{model_file}:functional_ops"' in text
    rows = {row["mode"]: row for row in json.loads(text)["rows"]}
    assert set(rows) == {*modes, "baseline"}, sorted(rows)
    for mode in modes:  # each run evaluated on the test split, its scores in the table
        assert 0.0 <= rows[mode]["accuracy"] <= 1.0, (mode, rows[mode])
