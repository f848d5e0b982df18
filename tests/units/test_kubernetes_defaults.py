"""KubernetesConfig's defaults are declared once; every place that repeats one agrees.

The pipeline's cluster parameters, the CLI's flags, the launcher's own defaults and the
manifest templates are derived from :class:`distrain.k8s.config.KubernetesConfig`. The train
component repeats them as literals (KFP runs a lightweight component's source alone, so a
default naming a module would not resolve in its pod), and the manifests and their README
are files: those are compared here, field by field.
"""

from __future__ import annotations

import dataclasses
import inspect
import re

import yaml

from distrain.k8s.config import KubernetesConfig
from tests.conftest import ROOT

# The component's and the pipeline's parameter names that are not the field's name.
RENAMED = {"worker_image": "image"}
# Their parameters named as a field but meaning more: ``launcher`` also takes ``local``
# (train in the step's own pod), its default there; the config is a cluster run's only.
NOT_THE_FIELD = {"launcher"}


def _defaults() -> dict:
    return {
        f.name: f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        for f in dataclasses.fields(KubernetesConfig)
    }


def _repeated(params: dict) -> dict:
    """The parameters that name a KubernetesConfig field, by field name."""
    fields = _defaults()
    return {
        RENAMED.get(n, n): p
        for n, p in params.items()
        if RENAMED.get(n, n) in fields and n not in NOT_THE_FIELD
    }


def test_the_train_component_repeats_the_config_defaults_literally():
    from distrain.components.train import train

    params = _repeated(inspect.signature(train.python_func).parameters)
    expected = {
        "namespace",
        "image",
        "gpus_per_worker",
        "cpu_per_worker",
        "memory_per_worker",
        "node_selector",
        "tolerations",
        "volume_claim",
        "mount_path",
        "schedule_timeout_seconds",
    }
    assert expected <= set(params)
    defaults = _defaults()
    for name, param in params.items():
        assert param.default == defaults[name], f"train component: {name}"


def test_the_pipeline_takes_the_config_defaults():
    from distrain.pipelines import common
    from distrain.pipelines.dataset_pipelines import mnist_pipeline

    assert common.MOUNT_PATH == KubernetesConfig.mount_path
    spec = mnist_pipeline.pipeline_spec.root.input_definitions.parameters
    repeated = _repeated(dict(spec))
    assert {"schedule_timeout_seconds", "memory_per_worker", "volume_claim"} <= set(repeated)
    defaults = _defaults()
    for name, param in repeated.items():
        value = param.default_value
        kind = value.WhichOneof("kind")
        given = {
            "string_value": value.string_value,
            "number_value": value.number_value,
            "struct_value": dict(value.struct_value) if kind == "struct_value" else None,
            "list_value": list(value.list_value.values) if kind == "list_value" else None,
        }[kind]
        assert given == defaults[name], f"pipeline parameter {name}"


def test_the_pipeline_follows_a_changed_default(monkeypatch):
    """The pipeline's defaults are read from the config, not copied from it."""
    from distrain import datasets
    from distrain.pipelines.common import build_pipeline

    monkeypatch.setattr(KubernetesConfig, "memory_per_worker", "24Gi")
    monkeypatch.setattr(KubernetesConfig, "volume_claim", "other-claim")
    monkeypatch.setattr(KubernetesConfig, "schedule_timeout_seconds", 900)
    fn = build_pipeline(datasets.get("mnist").pipeline)
    spec = fn.pipeline_spec.root.input_definitions.parameters
    assert spec["memory_per_worker"].default_value.string_value == "24Gi"
    assert spec["volume_claim"].default_value.string_value == "other-claim"
    assert spec["schedule_timeout_seconds"].default_value.number_value == 900


def test_the_launcher_and_the_cli_take_the_config_defaults():
    from distrain.cli import build_parser
    from distrain.k8s.launcher import ClusterRun
    from distrain.k8s.train import remove_earlier_attempts

    defaults = _defaults()
    run = {f.name: f.default for f in dataclasses.fields(ClusterRun)}
    for name in ("poll_seconds", "schedule_timeout_seconds", "api_retries", "api_timeout_seconds"):
        assert run[name] == defaults[name], f"ClusterRun.{name}"
    params = inspect.signature(remove_earlier_attempts).parameters
    for name in ("poll_seconds", "api_timeout_seconds"):
        assert params[name].default == defaults[name], f"remove_earlier_attempts {name}"
    args = build_parser().parse_args(["manifests", "--run", "sync:2"])
    assert args.volume_claim == defaults["volume_claim"]
    assert args.gpus_per_worker == defaults["gpus_per_worker"]


def _yaml_docs(path) -> list[dict]:
    return [doc for doc in yaml.safe_load_all(path.read_text()) if isinstance(doc, dict)]


def _walk(node):
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for value in node:
            yield from _walk(value)


def test_the_manifests_name_the_config_claim_and_mount_path():
    k = KubernetesConfig()
    manifests = ROOT / "manifests"
    (pvc,) = [d for d in _yaml_docs(manifests / "base" / "pvc.yaml")]
    assert pvc["kind"] == "PersistentVolumeClaim" and pvc["metadata"]["name"] == k.volume_claim
    # The overlays patch that claim by name.
    for path in sorted((manifests / "overlays").glob("*/kustomization.yaml")):
        for doc in _yaml_docs(path):
            for patch in doc.get("patches") or []:
                target = patch.get("target") or {}
                if target.get("kind") == "PersistentVolumeClaim":
                    assert target["name"] == k.volume_claim, path
    # The templates (what `distrain manifests` prints with the defaults) mount it there.
    # (The MPIJob's launcher pod has its own, smaller, resources.)
    claims, mounts, memory = set(), set(), set()
    for path in sorted((manifests / "templates").glob("*.yaml")):
        for doc in _yaml_docs(path):
            for node in _walk(doc):
                if "claimName" in node:
                    claims.add(node["claimName"])
                if node.get("name") == "data" and "mountPath" in node:
                    mounts.add(node["mountPath"])
                if isinstance(node.get("requests"), dict) and "memory" in node["requests"]:
                    memory.add(node["requests"]["memory"])
    assert claims == {k.volume_claim}
    assert mounts == {k.mount_path}
    assert k.memory_per_worker in memory


def _readme_defaults() -> dict:
    """The ``| `name` | default | meaning |`` rows of manifests/README.md's parameter table."""
    rows = {}
    for line in (ROOT / "manifests" / "README.md").read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            names = re.findall(r"`([a-z_]+)`", cells[0])
            if not names:
                continue
            values = [v.strip().strip("`") for v in cells[1].split(",")]
            if len(names) == len(values):
                rows.update(zip(names, values, strict=True))
            rows.setdefault("_meaning_" + names[0], cells[2])
    return rows


def test_the_manifests_readme_states_the_config_defaults():
    rows = _readme_defaults()
    defaults = _defaults()
    named = {
        "schedule_timeout_seconds",
        "gpus_per_worker",
        "cpu_per_worker",
        "memory_per_worker",
        "volume_claim",
    }
    assert named <= set(rows), sorted(rows)
    for name in named:
        assert rows[name] == str(defaults[name]), f"manifests/README.md: {name}"
    assert f"`{defaults['mount_path']}`" in rows["_meaning_volume_claim"]
