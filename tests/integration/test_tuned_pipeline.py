"""The pipeline with a learning-rate search: compiled, its candidates inside ParallelFors."""

import yaml

from distrain import datasets
from distrain.analysis import tuning


def _compile(tmp_path, **kwargs) -> dict:
    from kfp import compiler

    from distrain.pipelines.common import build_pipeline

    out = tmp_path / "tuned.yaml"
    pipeline = build_pipeline(datasets.get("mnist").pipeline, **kwargs)
    compiler.Compiler().compile(pipeline, str(out))
    return next(yaml.safe_load_all(out.read_text()))


def _loop_items(task: dict) -> tuple[str, str]:
    """The (producer task, output) a ParallelFor iterates over."""
    channel = task["parameterIterator"]["items"]["inputParameter"]
    source = task["inputs"]["parameters"][channel]["taskOutputParameter"]
    return source["producerTask"], source["outputParameterKey"]


def test_the_tuned_pipeline_trains_each_candidate_in_a_parallel_for(tmp_path):
    spec = _compile(
        tmp_path, tune="learning_rate=1e-3..3e-1", tune_grid=6, tune_eta=3, tune_parallelism=4
    )
    params = spec["root"]["inputDefinitions"]["parameters"]
    assert params["tune"]["defaultValue"] == "learning_rate=1e-3..3e-1"
    assert params["tune_epochs"]["defaultValue"] == 0
    tasks = spec["root"]["dag"]["tasks"]
    loops = {t["taskInfo"]["name"]: t for name, t in tasks.items() if name.startswith("for-loop")}
    # 6 rates halved by 3: two rungs of candidates, then the runs at their chosen rates.
    assert sorted(loops) == ["rung-0", "rung-1", "runs"]
    assert len(tuning.rungs(6, 3, 30)) == 2
    assert _loop_items(loops["rung-0"]) == ("tune-start", "Output")
    assert _loop_items(loops["rung-1"]) == ("tune-rung", "Output")
    assert _loop_items(loops["runs"]) == ("tune-rung-2", "Output")
    for i in (0, 1):
        loop = loops[f"rung-{i}"]
        assert loop["iteratorPolicy"]["parallelismLimit"] == 4
        inner = spec["components"][loop["componentRef"]["name"]]["dag"]["tasks"]
        # One training step per candidate, and nothing scores on test inside the search.
        assert [t["taskInfo"]["name"] for t in inner.values()] == [f"candidate (rung {i})"]
        train = next(iter(inner.values()))
        assert train["componentRef"]["name"].startswith("comp-train")
        examples = train["inputs"]["artifacts"]["examples"]["componentInputArtifact"]
        assert examples == "pipelinechannel--search-data-view"  # the data without test
        assert loop["inputs"]["artifacts"][examples]["taskOutputArtifact"]["producerTask"] == (
            "search-data"
        )
        got = train["inputs"]["parameters"]
        assert got["learning_rate"]["parameterExpressionSelector"] == (
            'parseJson(string_value)["learning_rate"]'
        )
        assert got["resume_from"]["parameterExpressionSelector"] == (
            'parseJson(string_value)["resume_from"]'
        )
    # The test split is read by the evaluation steps only, after the last rung's choice.
    final = spec["components"][loops["runs"]["componentRef"]["name"]]["dag"]["tasks"]
    assert sorted(t["taskInfo"]["name"] for t in final.values()) == ["evaluate", "train"]
    assert "tune-rung-2" in loops["runs"]["dependentTasks"]
    assert tasks["compare"]["inputs"]["artifacts"]["tuning"]["taskOutputArtifact"] == {
        "outputArtifactKey": "record",
        "producerTask": "tune-rung-2",
    }


def test_a_pipeline_without_a_search_has_no_search(tmp_path):
    spec = _compile(tmp_path)
    assert "tune" not in spec["root"]["inputDefinitions"]["parameters"]
    tasks = spec["root"]["dag"]["tasks"]
    assert not any(name.startswith(("tune", "search")) for name in tasks)
    assert "tuning" not in tasks["compare"]["inputs"].get("artifacts", {})
