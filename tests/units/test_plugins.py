"""The registries' entry-point loading, in this process: what each group accepts and refuses."""

from __future__ import annotations

from importlib.metadata import EntryPoint

import pytest

from distrain import datasets
from distrain.base import plugins
from distrain.learning.models import find_model
from distrain.learning.tasks import CLASSIFICATION

SPEC = datasets.ModelSpec(lambda info, seed: None, CLASSIFICATION, summary="probe")
PROBE_MODEL = datasets.PluginModel("tfrecord", SPEC)
TAKEN = datasets.PluginModel("tfrecord", SPEC)  # a model name mnist already has
NOWHERE = datasets.PluginModel("no-such-data-set", SPEC)


class ProbeSet(datasets.DataSet):
    """A data set a plugin adds."""

    name = "probe-set"
    summary = "a probe"


@pytest.fixture
def entry_points(monkeypatch):
    """Installs fake entry points; restores the registries and the plugin records after."""
    points: list[EntryPoint] = []
    monkeypatch.setattr(
        plugins, "entry_points", lambda group: [p for p in points if p.group == group]
    )
    monkeypatch.setattr(plugins, "_BROKEN", [])
    monkeypatch.setattr(plugins, "_ORIGINS", {})
    monkeypatch.setattr(datasets, "_REGISTRY", dict(datasets._REGISTRY))
    tfrecord = datasets.get("tfrecord")
    monkeypatch.setattr(tfrecord, "models", dict(tfrecord.models))
    monkeypatch.setattr(datasets, "_PLUGINS_LOADED", False)  # the test's points load when asked
    return points


def _point(name: str, value: str, group: str) -> EntryPoint:
    return EntryPoint(name, value, group)


def test_a_plugins_data_set_and_model_join_the_registry(entry_points):
    entry_points += [
        _point("probe-set", f"{__name__}:ProbeSet", plugins.DATASETS),
        _point("probe-model", f"{__name__}:PROBE_MODEL", plugins.MODELS),
    ]
    assert datasets.names()[-1] == "probe-set"
    assert isinstance(datasets.get("probe-set"), ProbeSet)
    assert datasets.get("tfrecord").model("probe-model") is SPEC
    assert find_model("probe-model") is SPEC
    assert plugins.origin(plugins.MODELS, "probe-model") == f"{__name__}:PROBE_MODEL"
    assert plugins.origin(plugins.DATASETS, "mnist") == plugins.BUILT_IN


def test_a_broken_or_clashing_plugin_is_left_out_and_asking_for_it_says_why(entry_points, capsys):
    entry_points += [
        _point("renamed", f"{__name__}:ProbeSet", plugins.DATASETS),  # its class says probe-set
        _point("mlp", f"{__name__}:TAKEN", plugins.MODELS),  # mnist's model's name
        _point("lost", f"{__name__}:NOWHERE", plugins.MODELS),
        _point("gone", "no_such_module_at_all:X", plugins.MODELS),
    ]
    assert "renamed" not in datasets.names() and "probe-set" not in datasets.names()
    left_out = {b.name: b.error for b in plugins.broken()}
    assert left_out["renamed"].startswith("PluginError: its class names itself 'probe-set'")
    assert left_out["mlp"] == "PluginError: the mnist data set already has a model 'mlp'"
    assert left_out["lost"].startswith("DataSetError: unknown dataset 'no-such-data-set'")
    assert left_out["gone"].startswith("ModuleNotFoundError")
    assert "plugin 'gone' (distrain.models, from no_such_module_at_all:X) left out" in (
        capsys.readouterr().err
    )
    with pytest.raises(datasets.DataSetError, match="dataset 'renamed': its plugin .* failed"):
        datasets.get("renamed")
    with pytest.raises(datasets.DataSetError, match="model 'gone': its plugin .* failed to load"):
        datasets.get("tfrecord").model("gone")
    assert "mlp" not in datasets.get("tfrecord").models
