"""A learning-rate search trained for real: on validation alone, its survivors resumed."""

import json

import pytest

from distrain import steps
from distrain.datasets.info import DataError, DatasetInfo
from distrain.search import records, search_view, tune_rung, tune_start


@pytest.mark.slow
def test_a_search_completes_without_the_test_split_and_resumes_its_survivors(
    tmp_path, mnist_examples
):
    view = tmp_path / "view"
    search_view(mnist_examples, view)
    # The candidates' data cannot give the test split: reading it fails.
    with pytest.raises(DataError, match="for test, but missing"):
        DatasetInfo.load(view).split_files("test")
    state = tune_start(
        "learning_rate=1e-3..1e-1",
        ["single:1"],
        grid=4,
        eta=2,
        epochs=2,
        seed=0,
        default_rate=1e-3,
    )
    # 4 rates at 1 epoch, the best 2 on to 2 epochs.
    assert state["rungs"] == [{"candidates": 4, "epochs": 1}, {"candidates": 2, "epochs": 2}]
    rung = 0
    while state["next"]:
        trained = []
        for i, t in enumerate(state["next"]):
            out = tmp_path / f"rung{rung}" / str(i)
            steps.train(
                view,
                out,
                t["run_spec"],
                learning_rate=t["learning_rate"],
                epochs=t["epochs"],
                seed=t["seed"],
                resume_from=t["resume_from"],
                on_nan="continue",
            )
            trained.append(out)
        state = tune_rung(state, trained, repeats=2)
        rung += 1
    record = records(state)["single:1"]
    assert record["chosen"] in record["grid"]
    survivors = [c for c in record["candidates"] if len(c["rungs"]) == 2]
    assert len(survivors) == 2
    for c in survivors:
        second = c["rungs"][1]
        assert second["resumed"] and second["epochs"] == 2
        # The resumed rung costs its own epoch, not both.
        assert 0 < second["seconds"] < second["train_seconds"]
    assert state["final"] == [
        {"run_spec": "single:1", "seed": 0, "learning_rate": record["chosen"]},
        {"run_spec": "single:1", "seed": 1, "learning_rate": record["chosen"]},
    ]
    history = json.loads((tmp_path / "rung1" / "0" / "history.json").read_text())
    assert history["resumed_at_steps"]  # from rung 0's checkpoint, its first epoch kept
    assert len(history["epochs"]) == 2
