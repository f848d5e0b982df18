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
    state = _search(state, view, tmp_path)
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


def _search(state: dict, view, tmp_path, repeats: int = 2, **settings) -> dict:
    """Trains every rung of a search as the pipeline does (the tuning pipeline's settings)."""
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
                schedule_epochs=t["schedule_epochs"],
                seed=t["seed"],
                resume_from=t["resume_from"],
                on_nan="continue",
                **settings,
            )
            trained.append(out)
        state = tune_rung(state, trained, repeats=repeats)
        rung += 1
    return state


@pytest.mark.slow
def test_a_language_models_survivors_resume_their_annealed_schedule(tmp_path):
    # The LSTM's rate anneals over the run's epochs. Rung 0 trained a 1-epoch anneal and
    # its survivor's 2-epoch rung refused the checkpoint ("a checkpoint of another ...
    # settings"): `distrain run gutenberg --tune` failed. Every rung now trains the first
    # epochs of the last rung's schedule, and the survivor resumes.
    raw, data, view = tmp_path / "raw", tmp_path / "data", tmp_path / "view"
    steps.fetch("gutenberg", "sample", raw, sample_size=30000, seed=2)
    steps.preprocess("gutenberg", raw, data)
    search_view(data, view)
    state = tune_start(
        "learning_rate=1e-3..8e-3", ["single:1"], grid=4, eta=2, epochs=2, seed=0,
        default_rate=4e-3,
    )  # fmt: skip
    assert state["rungs"] == [{"candidates": 4, "epochs": 1}, {"candidates": 2, "epochs": 2}]
    state = _search(state, view, tmp_path, model="lstm", batch_size=16)
    record = records(state)["single:1"]
    survivors = [c for c in record["candidates"] if len(c["rungs"]) == 2]
    assert len(survivors) == 2 and all(c["rungs"][1]["resumed"] for c in survivors)
    history = json.loads((tmp_path / "rung1" / "0" / "history.json").read_text())
    assert history["resumed_at_steps"] and len(history["epochs"]) == 2
