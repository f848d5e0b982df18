"""A training setting is declared once (TrainConfig); the flags, steps and components follow it."""

from __future__ import annotations

import argparse
import dataclasses
import inspect

import pytest

from distrain.base.errors import ConfigError
from distrain.base.flags import field_types, flag_name
from distrain.cli import build_parser, main
from distrain.steps import StepError, check_parameters
from distrain.train.config import PIPELINE_SETTINGS, RunSpec, TrainConfig

FIELDS = dataclasses.fields(TrainConfig)
TYPES = field_types(TrainConfig)
REQUIRED = ["--data", "d", "--output", "o"]


def _subparser(name: str) -> argparse.ArgumentParser:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return sub.choices[name]


def _flags(name: str) -> dict:
    """A subcommand's flags by destination."""
    return {a.dest: a for a in _subparser(name)._actions if a.option_strings}


def _default(f: dataclasses.Field):
    return f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default


def test_every_config_field_is_a_flag_of_train_with_its_type_choices_and_help():
    flags = _flags("train")
    for f in FIELDS:
        action = flags[f.name]  # a KeyError names a field without a flag
        assert flag_name(f) in action.option_strings
        assert f.metadata["help"].replace("%", "%%") in action.help
        if TYPES[f.name] is bool:
            assert isinstance(action, argparse.BooleanOptionalAction)
        elif TYPES[f.name] in (int, float):
            assert action.type is TYPES[f.name]
        choices = f.metadata.get("choices")
        if isinstance(choices, tuple):
            assert tuple(action.choices) == choices


def test_train_flag_defaults_are_the_config_defaults():
    args = build_parser().parse_args(["train", *REQUIRED])
    assert (args.data_dir, args.output_dir) == ("d", "o")
    for f in FIELDS:
        if f.name in ("data_dir", "output_dir"):
            continue
        value = getattr(args, f.name)
        if f.name == "run":
            assert RunSpec.parse(value) == _default(f)
        elif f.name == "model":  # a flag of its own: "" is the data set's first model
            assert value == ""
        elif f.name in ("learning_rate", "batch_size"):  # None: the data set's recipe
            assert value is None
        else:
            assert value == _default(f), f.name
    # A flag parses to the field's type, and the config checks the value.
    args = build_parser().parse_args(["train", *REQUIRED, "--learning-rate", "0.05"])
    assert args.learning_rate == 0.05
    with pytest.raises(ConfigError, match="threads_per_worker must be 0 .automatic. or positive"):
        TrainConfig(data_dir="d", output_dir="o", threads_per_worker=-1)


def test_run_offers_the_pipeline_settings_and_leaves_unset_ones_to_the_pipeline():
    flags = _flags("run")
    assert {f.name for f in FIELDS} & set(flags) == set(PIPELINE_SETTINGS)
    args = build_parser().parse_args(["run", "mnist", "--output", "o"])
    assert all(getattr(args, name) is None for name in PIPELINE_SETTINGS)


def test_learning_rate_reaches_the_trainer(monkeypatch, tmp_path, capsys):
    seen = []

    def run_training(cfg):
        seen.append(cfg)
        return {"run": cfg.run.to_dict(), "train_seconds": 1.0}

    from distrain.datasets import get

    monkeypatch.setattr("distrain.train.launch.run_training", run_training)
    # The data is DBPedia's: its recipe's rate and batch (0.04, 512) unless given.
    monkeypatch.setattr("distrain.datasets.dataset_of", lambda d: get("dbpedia"))
    argv = ["train", "--data", str(tmp_path), "--output", str(tmp_path / "o"), "--model", "mlp"]
    assert main([*argv, "--run", "sync:2", "--learning-rate", "0.05", "--epochs", "2"]) == 0
    cfg = seen[-1]
    assert (cfg.learning_rate, cfg.epochs, cfg.run.name) == (0.05, 2, "sync:2")
    assert cfg.effective_learning_rate == pytest.approx(0.1)  # scaled by the 2 workers
    assert cfg.batch_size == 512  # not given: the data set's
    assert main([*argv, "--run", "sync:2", "--no-scale-learning-rate", "--batch-size", "32"]) == 0
    assert seen[-1].effective_learning_rate == pytest.approx(0.04)
    assert seen[-1].batch_size == 32
    # A bad value is refused by the config's own check, in one line.
    assert main([*argv, "--learning-rate", "0"]) == 2
    assert "learning_rate must be positive, got 0.0" in capsys.readouterr().err


def test_run_passes_the_given_settings_to_the_pipeline(monkeypatch, tmp_path):
    seen = {}

    class Stop(Exception):
        pass

    def run_locally(pipeline, params, out):
        seen.update(params)
        raise Stop

    monkeypatch.setattr("distrain.commands.pipelines.run_locally", run_locally)
    argv = ["run", "mnist", "--output", str(tmp_path), "--learning-rate", "0.01", "--epochs", "3"]
    assert main(argv) == 1
    assert (seen["learning_rate"], seen["epochs"]) == (0.01, 3)
    assert not {"model", "batch_size", "until_plateau", "controller"} & set(seen)


def test_the_parameter_check_takes_every_setting_and_refuses_unknown_ones():
    with pytest.raises(StepError, match="checkpoint_every_steps must be 0 .epoch ends only."):
        check_parameters("mnist", "sample", "single:1", checkpoint_every_steps=-1)
    with pytest.raises(StepError, match="unknown training settings: learning_rat"):
        check_parameters("mnist", "sample", "single:1", learning_rat=0.1)
    assert check_parameters("mnist", "sample", "sync:2", learning_rate=0.5, seed=4) == {
        "runs": ["sync:2"],
        "trainings": [{"run_spec": "sync:2", "seed": 4}],
    }


def _signature(component) -> dict:
    return inspect.signature(component.python_func).parameters


def test_train_component_takes_every_setting_with_the_config_type_and_default():
    from distrain.components.train import train

    params = _signature(train)
    for f in TrainConfig.settings():
        assert f.name in params, f"the train component has no {f.name}"
        assert params[f.name].annotation is TYPES[f.name], f.name
        assert params[f.name].default == _default(f), f.name


def test_check_component_and_pipeline_take_the_pipeline_settings_with_the_config_types():
    from kfp.pipeline_spec import pipeline_spec_pb2

    from distrain.components.data import check_parameters as component
    from distrain.pipelines.dataset_pipelines import mnist_pipeline

    names = {f.name for f in FIELDS}
    params = _signature(component)
    assert names & set(params) == set(PIPELINE_SETTINGS)
    for f in FIELDS:
        if f.name in PIPELINE_SETTINGS:
            assert params[f.name].annotation is TYPES[f.name], f.name
            assert params[f.name].default == _default(f), f.name
    kinds = {int: "NUMBER_INTEGER", float: "NUMBER_DOUBLE", str: "STRING", bool: "BOOLEAN"}
    spec = mnist_pipeline.pipeline_spec.root.input_definitions.parameters
    assert names & set(spec) == set(PIPELINE_SETTINGS)
    for name in PIPELINE_SETTINGS:
        kind = pipeline_spec_pb2.ParameterType.ParameterTypeEnum.Name(spec[name].parameter_type)
        assert kind == kinds[TYPES[name]], name


def test_pipeline_defaults_are_the_config_types_and_the_rest_the_config_defaults():
    from distrain.pipelines.common import PipelineDefaults
    from distrain.pipelines.dataset_pipelines import mnist_pipeline

    own = {f.name for f in dataclasses.fields(PipelineDefaults)} & set(PIPELINE_SETTINGS)
    assert own, "the data sets' pipeline defaults name no training setting"
    pipeline_types = field_types(PipelineDefaults)
    for name in own:  # a data set's own default, of the setting's type
        assert pipeline_types[name] is TYPES[name], name
    spec = mnist_pipeline.pipeline_spec.root.input_definitions.parameters
    defaults = {f.name: _default(f) for f in FIELDS}
    for name in set(PIPELINE_SETTINGS) - own:  # the others: the config's default
        value = spec[name].default_value
        given = value.string_value if TYPES[name] is str else value.number_value
        assert given == defaults[name], name
