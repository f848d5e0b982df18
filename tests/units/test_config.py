import pytest

from distrain.base.errors import ConfigError
from distrain.train.config import RunSpec, TrainConfig, parse_run_specs


@pytest.mark.parametrize(
    "text, mode, workers, ps, agg",
    [
        ("single:1", "single", 1, 0, None),
        ("single", "single", 1, 0, None),
        ("sync:2", "sync", 2, 0, None),
        ("async:2", "async", 2, 1, None),
        ("async:3:ps=2", "async", 3, 2, None),
        ("syncreplicas:3:aggregate=2", "syncreplicas", 3, 1, 2),
        ("syncreplicas:3", "syncreplicas", 3, 1, 3),
        (" sync : 4 ", "sync", 4, 0, None),
    ],
)
def test_parse_run_spec(text, mode, workers, ps, agg):
    spec = RunSpec.parse(text)
    assert (spec.mode, spec.workers, spec.parameter_servers, spec.option("aggregate")) == (
        mode,
        workers,
        ps,
        agg,
    )
    assert RunSpec.parse(str(spec)) == spec
    assert spec.name == f"{mode}:{workers}"


@pytest.mark.parametrize(
    "text, message",
    [
        pytest.param(
            "allreduce:2", "unknown mode 'allreduce'", marks=pytest.mark.case("params/mode")
        ),
        pytest.param(
            "sync:0", "workers must be a positive integer", marks=pytest.mark.case("params/workers")
        ),
        pytest.param(
            "sync:-1",
            "workers must be a positive integer",
            marks=pytest.mark.case("params/workers"),
        ),
        ("sync:two", "workers must be an integer"),
        ("single:2", "single mode runs exactly 1 worker"),
        pytest.param(
            "syncreplicas:3:aggregate=4",
            "replicas_to_aggregate must be between 1 and workers",
            marks=pytest.mark.case("params/aggregate"),
        ),
        ("sync:2:ps=1", "sync mode has no option 'ps' \\(it takes min=N\\)"),
        ("sync:2:aggregate=1", "sync mode has no option 'aggregate'"),
        ("async:2:foo=1", "async mode has no option 'foo' \\(it takes ps=N, lr=N\\)"),
        ("async:2:ps", "expected key=value after the worker count"),
        ("async:2:ps=two", "ps='two': expected an integer"),
        ("async:2:ps=0", "ps must be at least 1"),
        ("", "empty run spec"),
        ("async:2:min=1", "async mode has no option 'min'"),
        ("sync:3:min=4", "min workers must be between 1 and workers"),
        ("sync:3:min=0", "min workers must be between 1 and workers"),
    ],
)
def test_bad_run_specs_are_refused(text, message):
    with pytest.raises(ConfigError, match=message):
        RunSpec.parse(text)


def test_parse_run_specs_rejects_duplicates_and_empty():
    assert [s.name for s in parse_run_specs("single:1,sync:2")] == ["single:1", "sync:2"]
    with pytest.raises(ConfigError, match="duplicate runs: sync:2"):
        parse_run_specs("sync:2,sync:2")
    with pytest.raises(ConfigError, match="no run specs"):
        parse_run_specs(" , ")


def test_train_config_round_trip_and_learning_rate_scaling(tmp_path):
    cfg = TrainConfig(data_dir="d", output_dir="o", run="sync:4", learning_rate=0.01)
    assert cfg.effective_learning_rate == pytest.approx(0.04)
    again = TrainConfig.from_json(cfg.to_json())
    assert again == cfg
    sr = TrainConfig(data_dir="d", output_dir="o", run="syncreplicas:3:aggregate=2")
    assert sr.effective_learning_rate == pytest.approx(0.002)
    unscaled = TrainConfig(data_dir="d", output_dir="o", run="sync:4", scale_learning_rate=False)
    assert unscaled.effective_learning_rate == pytest.approx(0.001)
    assert TrainConfig(data_dir="d", output_dir="o", run="async:2").effective_learning_rate == (
        pytest.approx(0.001)
    )


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("model", "resnet", "unknown model"),
        ("epochs", 0, "epochs must be at least 1"),
        ("batch_size", 0, "batch_size must be at least 1"),
        ("learning_rate", 0.0, "learning_rate must be positive"),
    ],
)
def test_train_config_validation(field, value, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(data_dir="d", output_dir="o", **{field: value})


def test_threads_share_the_cores(monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 8)
    assert TrainConfig(data_dir="d", output_dir="o", run="sync:2").threads == 4
    assert TrainConfig(data_dir="d", output_dir="o", run="sync:16").threads == 1
    assert TrainConfig(data_dir="d", output_dir="o", threads_per_worker=3).threads == 3


def test_elastic_sync_spec():
    spec = RunSpec.parse("sync:3:min=2")
    assert spec.impl.elastic and spec.option("min") == 2 and spec.name == "sync:3:min=2"
    assert RunSpec.parse(str(spec)) == spec
    assert not RunSpec.parse("sync:3").impl.elastic
    cfg = TrainConfig(data_dir="d", output_dir="o", run="sync:3:min=2")
    assert TrainConfig.from_json(cfg.to_json()).run == spec
