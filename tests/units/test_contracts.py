"""Contracts of the two registries: every registered mode and every registered data set.

Parametrised over :func:`distrain.train.modes.mode_names` and :func:`distrain.datasets.names`,
so a mode or a data set added to its registry is checked here with no test written for it
(but its :attr:`~distrain.train.modes.Mode.example`, for a mode whose options have no
defaults). Each check is the registry's surface only, and fast: the exact rules and whole
runs have their own tests (``tests/rules``, ``tests/integration``).
"""

from __future__ import annotations

import inspect

import pytest

from distrain import datasets
from distrain.base.errors import ConfigError
from distrain.k8s.config import KubernetesConfig
from distrain.learning.models import find_model, load_info
from distrain.steps import preprocess
from distrain.train.config import RunSpec, TrainConfig
from distrain.train.modes import Mode, Process, mode_class, mode_for, mode_names

# A run spec of each mode, with the options its mode requires (the others take defaults).
MODES = mode_names()
DATA_SETS = datasets.names()


def _example(name: str) -> str:
    """The mode's own example spec (:attr:`Mode.example`), else ``NAME:N``."""
    cls = mode_class(name)
    return cls.example or f"{name}:{cls.fixed_workers or 2}"


def test_every_mode_in_the_registry_has_a_spec_that_parses():
    # A new mode whose options have no defaults fails here until it declares its example.
    for name in MODES:
        assert RunSpec.parse(_example(name)).mode == name


@pytest.mark.parametrize("name", MODES)
def test_a_mode_declares_its_name_summary_and_options(name):
    cls = mode_class(name)
    assert issubclass(cls, Mode) and cls.name == name
    if cls.__module__.startswith("distrain."):  # distrain's own: one module in modes/
        assert cls.__module__.startswith("distrain.train.modes."), cls.__module__
    assert (inspect.getdoc(cls) or "").strip(), f"{name}: no summary (class docstring)"
    for key, meaning in cls.options.items():
        assert key and meaning.strip(), f"{name}: option {key!r} says nothing"
    assert set(cls.positional) <= set(cls.options), f"{name}: positional options not options"


@pytest.mark.parametrize("name", MODES)
def test_a_mode_builds_from_its_spec_and_counts_its_processes(name):
    spec = RunSpec.parse(_example(name))
    mode = mode_for(spec)
    assert isinstance(mode, mode_class(name))
    assert mode.processes() >= 1 and mode.parameter_servers >= 0
    assert mode.gradients_per_update() >= 1
    assert mode.short_name().startswith(f"{name}:")


@pytest.mark.parametrize("name", MODES)
def test_a_mode_refuses_an_option_it_does_not_know(name):
    with pytest.raises(ConfigError, match=f"{name} mode has no option 'bogus'"):
        RunSpec.parse(f"{_example(name)}:bogus=1")


@pytest.mark.parametrize("name", MODES)
def test_a_mode_starts_one_main_process_here(name, tmp_path):
    example = _example(name)
    cfg = TrainConfig(data_dir="/d", output_dir=str(tmp_path), run=example)
    try:
        processes = mode_for(RunSpec.parse(example)).local_processes(
            cfg, tmp_path / "config.json", tmp_path / "logs"
        )
    except ConfigError as e:  # a Horovod mode where Horovod is not built: as the marker does
        if "horovodrun not found" not in str(e):
            raise
        pytest.skip(f"[horovod] {e}")
    assert processes and all(isinstance(p, Process) for p in processes)
    assert sum(p.main for p in processes) == 1, [p.name for p in processes]
    for p in processes:
        assert p.command and all(isinstance(part, str) for part in p.command), p
    assert len({p.name for p in processes}) == len(processes)


@pytest.mark.parametrize("name", MODES)
def test_a_mode_becomes_cluster_objects_or_says_it_runs_in_the_step(name, tmp_path):
    example = _example(name)
    cfg = TrainConfig(data_dir="/d", output_dir="/o", run=example)
    mode = mode_for(RunSpec.parse(example))
    k = KubernetesConfig(namespace="ns")
    if not mode.needs_cluster():
        with pytest.raises(ConfigError, match="runs in the step's own pod"):
            mode.kubernetes_objects(cfg, k, "r1", "/o/c.json")
        return
    objects = mode.kubernetes_objects(cfg, k, "r1", "/o/c.json")
    assert objects
    for obj in objects:
        assert obj["apiVersion"] and obj["kind"] and obj["metadata"]["name"], obj


@pytest.mark.parametrize("name", MODES)
def test_a_mode_fills_the_comparisons_shared_columns(name):
    run = RunSpec.parse(_example(name)).to_dict()  # a history's "run", before any training
    columns = mode_class(name).columns(run, {"run": run})
    assert {"parameter_servers", "aggregation", "transport"} <= set(columns)


@pytest.mark.parametrize("name", DATA_SETS)
def test_a_data_set_declares_its_name_summary_and_models(name):
    dataset = datasets.get(name)
    assert isinstance(dataset, datasets.DataSet) and dataset.name == name
    assert dataset.summary.strip() and dataset.sample_size > 0
    assert dataset.models and dataset.default_model == next(iter(dataset.models))
    for model, spec in dataset.models.items():
        assert callable(spec.build) and spec.task is not None, model
        assert spec.summary.strip(), f"{name}/{model}: no summary"
        assert find_model(model) is spec  # model names are unique over data sets


@pytest.fixture(scope="module", params=DATA_SETS)
def sample(request, tmp_path_factory):
    """(name, raw, examples): a small sample of the data set, written and preprocessed."""
    name = request.param
    dataset = datasets.get(name)
    raw = tmp_path_factory.mktemp(f"{name}_raw")
    dataset.write_sample(raw, size=max(1, dataset.sample_size // 20), seed=0)
    examples = tmp_path_factory.mktemp(f"{name}_examples") / "out"
    preprocess(name, raw, examples, validation_fraction=0.1, seed=0)
    return name, raw, examples


def test_a_data_sets_sample_is_its_raw_files(sample):
    name, raw, _ = sample
    dataset = datasets.get(name)
    files = dataset.raw_files(raw)
    assert files and all(path.is_file() and path.stat().st_size > 0 for path in files)
    dataset.check_raw_files(raw)  # what a download is checked against


def test_every_model_of_a_data_set_builds_on_its_preprocessed_sample(sample):
    name, _, examples = sample
    for model, spec in datasets.get(name).models.items():
        built = spec.build(load_info(examples, model), 0)
        assert built.count_params() > 0, f"{name}/{model}"


def test_a_mode_registered_from_outside_joins_the_registry_after_the_built_in_ones(monkeypatch):
    from distrain.train import modes

    class Probe(Mode):
        """A mode registered by a test: the contract above then holds for it."""

        name = "probe"
        options = {"k": "a number"}

    monkeypatch.setitem(modes._REGISTRY, "probe", Probe)
    assert mode_names()[-1] == "probe" and mode_names()[:-1] == MODES
    test_a_mode_declares_its_name_summary_and_options("probe")
    test_a_mode_builds_from_its_spec_and_counts_its_processes("probe")
    test_a_mode_refuses_an_option_it_does_not_know("probe")


def test_a_data_set_registered_from_outside_is_listed_and_found(monkeypatch):
    from distrain.learning.tasks import CLASSIFICATION

    class Probe(datasets.DataSet):
        """A data set registered by a test."""

        name = "probe"
        summary = "a registered probe"
        sample_size = 1
        models = {
            "probe-model": datasets.ModelSpec(lambda info, seed: None, CLASSIFICATION, summary="x")
        }

    monkeypatch.setitem(datasets._REGISTRY, "probe", Probe())
    assert datasets.names() == [*DATA_SETS, "probe"]
    test_a_data_set_declares_its_name_summary_and_models("probe")
    assert datasets.get("probe").model("probe-model") is Probe.models["probe-model"]
