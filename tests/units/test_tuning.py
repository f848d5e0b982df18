"""The learning-rate search: its grid, its rungs, its choice, its record and its data."""

import json
import math

import pytest

from distrain import cli
from distrain.analysis import tuning
from distrain.analysis.compare.tuned import attach, ranking_sentence, rankings
from distrain.base.errors import ConfigError, StepError
from distrain.datasets.info import DataError, DatasetInfo
from distrain.search import search_view, seed_from, tune_start


def test_parse_and_grid():
    assert tuning.parse("learning_rate=1e-4..1e-1") == ("learning_rate", 1e-4, 1e-1)
    # Log-spaced, both ends included: 1e-4, 1e-3, 1e-2, 1e-1.
    assert tuning.grid(1e-4, 1e-1, 4) == pytest.approx([1e-4, 1e-3, 1e-2, 1e-1])
    assert tuning.grid(1e-3, 3e-1, 6)[0] == 1e-3 and tuning.grid(1e-3, 3e-1, 6)[-1] == 0.3


@pytest.mark.parametrize(
    "text, message",
    [
        ("learning_rate=1e-1..1e-4", "expected 0 < LOW < HIGH"),
        ("batch_size=1..10", "cannot tune 'batch_size'"),
        ("learning_rate=1e-4", "expected PARAMETER=LOW..HIGH"),
        ("learning_rate=a..b", "the bounds must be numbers"),
    ],
)
def test_parse_refuses(text, message):
    with pytest.raises(ConfigError, match=message):
        tuning.parse(text)


def test_rungs_follow_hyperband():
    # 6 candidates at 30 / 3 epochs, the best 2 on to 30; the one left is the choice.
    assert tuning.rungs(6, 3, 30) == [
        {"candidates": 6, "epochs": 10},
        {"candidates": 2, "epochs": 30},
    ]
    assert tuning.rungs(9, 3, 27) == [
        {"candidates": 9, "epochs": 9},
        {"candidates": 3, "epochs": 27},
    ]
    assert [r["candidates"] for r in tuning.rungs(8, 2, 8)] == [8, 4, 2]
    assert [r["epochs"] for r in tuning.rungs(8, 2, 8)] == [2, 4, 8]
    assert tuning.rungs(2, 3, 5) == [{"candidates": 2, "epochs": 5}]
    with pytest.raises(ConfigError, match="between 2 and"):
        tuning.rungs(1, 3, 5)
    with pytest.raises(ConfigError, match="eta must be at least 2"):
        tuning.rungs(6, 1, 5)


def _history(name, lr, val_losses, seconds, *, processes=1, ps=0, resumed=False):
    return {
        "run": {"name": name, "processes": processes, "parameter_servers": ps},
        "config": {"learning_rate": lr},
        "epochs": [{"val_loss": v, "val_accuracy": 1 - v} for v in val_losses],
        "train_seconds": seconds,
        "resumed_at_steps": [10] if resumed else [],
    }


def test_a_search_keeps_the_best_third_and_resumes_them():
    state = tuning.start(
        "learning_rate=1e-4..1e-1", ["async:2"], size=4, eta=3, epochs=6, default_rate=1e-3
    )
    # 4 rates at 2 epochs, then the best one alone: 4 // 3 = 1 kept, so one rung only.
    assert state["rungs"] == [{"candidates": 4, "epochs": 6}]
    state = tuning.start(
        "learning_rate=1e-4..1e-1", ["async:2"], size=6, eta=3, epochs=6, default_rate=1e-3
    )
    assert [t["epochs"] for t in state["next"]] == [2] * 6
    # Each rung trains the first epochs of the last rung's schedule (an anneal's, a decay's).
    assert {t["schedule_epochs"] for t in state["next"]} == {6}
    rates = state["grid"]
    # Validation losses after rung 0: the third and fourth rates best; the last diverged.
    losses = [0.9, 0.5, 0.2, 0.3, 0.8, math.nan]
    results = [
        {"history": _history("async:2", lr, [1.0, v], 10.0, processes=2, ps=1), "path": f"/r0/{i}"}
        for i, (lr, v) in enumerate(zip(rates, losses, strict=True))
    ]
    state = json.loads(json.dumps(tuning.advance(state, results, {"async:2": "async:2"})))
    nxt = state["next"]
    assert [t["learning_rate"] for t in nxt] == [rates[2], rates[3]]
    assert [t["resume_from"] for t in nxt] == ["/r0/2", "/r0/3"]
    assert {t["epochs"] for t in nxt} == {6} and {t["schedule_epochs"] for t in nxt} == {6}
    # The survivors resume: the history's seconds count both rungs, the rung only its own.
    results = [
        {
            "history": _history(
                "async:2", rates[2], [1.0, 0.2, 0.25], 25.0, processes=2, ps=1, resumed=True
            ),
            "path": "/r1/a",
        },
        {
            "history": _history(
                "async:2", rates[3], [1.0, 0.3, 0.1], 30.0, processes=2, ps=1, resumed=True
            ),
            "path": "/r1/b",
        },
    ]
    state = tuning.advance(state, results, {"async:2": "async:2"})
    run = state["runs"]["async:2"]
    assert run["chosen"] == rates[3]  # rung 0's second best won the longer rung
    # 6 x 10 s at rung 0, then 15 s and 20 s more; 3 processes (2 workers, 1 PS) each.
    assert run["cost_seconds"] == pytest.approx(60 + 15 + 20)
    assert run["process_seconds"] == pytest.approx(3 * 95)
    assert tuning.final_trainings(state, 2, 5) == [
        {"run_spec": "async:2", "seed": 5, "learning_rate": rates[3]},
        {"run_spec": "async:2", "seed": 6, "learning_rate": rates[3]},
    ]
    record = tuning.record(state, "async:2")
    assert record["candidates"][5]["rungs"][0]["score"] is None  # diverged: worst, not NaN
    assert record["candidates"][3]["rungs"][1]["resumed"] is True
    assert json.dumps(record, allow_nan=False)


def test_the_choice_takes_the_lowest_rate_within_the_tolerance_of_the_best():
    def c(lr, score):
        return {"learning_rate": lr, "score": score}

    # Gutenberg's sync:2 search as recorded (last rung, one seed each): 0.0306 scored 2.7 %
    # below 0.00313, and a second seed diverged at 0.0306. Within 10 %: the lower rate.
    picked = tuning.choose([c(0.00312913, 1.4075), c(0.0306389, 1.3708)], 0.1)
    assert picked["learning_rate"] == 0.00312913 and picked["best_rate"] == 0.0306389
    assert picked["why"] == (
        "the lowest rate within 10% of the best validation loss (1.407 against 1.371 at 0.0306389)"
    )
    # No tolerance: the best score alone.
    assert tuning.choose([c(0.00312913, 1.4075), c(0.0306389, 1.3708)], 0.0)["learning_rate"] == (
        0.0306389
    )
    # Outside the tolerance (MNIST's single:1: 0.0542 at 0.001 is 16 % above 0.0466): the best.
    picked = tuning.choose([c(0.001, 0.0542), c(0.00312913, 0.0466)], 0.1)
    assert picked["learning_rate"] == 0.00312913
    assert picked["why"] == "the best validation loss (0.0466)"
    # Exactly at the bar counts; a diverged candidate never does; three finalists.
    picked = tuning.choose([c(0.3, math.inf), c(0.1, 1.0), c(0.03, 1.1), c(0.01, 1.2)], 0.1)
    assert picked["learning_rate"] == 0.03
    # Every candidate diverged: the lowest rate, said so.
    picked = tuning.choose([c(0.3, math.inf), c(0.1, math.inf)])
    assert picked["learning_rate"] == 0.1 and "diverged" in picked["why"]
    with pytest.raises(ValueError):
        tuning.choose([])


def test_the_search_records_why_it_chose_a_rate_below_the_best():
    state = tuning.start("learning_rate=1e-3..1e-1", ["sync:2"], size=2, eta=2, epochs=4)
    assert state["tolerance"] == tuning.DEFAULT_TOLERANCE == 0.1
    low, high = state["grid"]
    results = [
        {"history": _history("sync:2", low, [2.0, 1.4075], 8.0, processes=2), "path": "/a"},
        {"history": _history("sync:2", high, [2.0, 1.3708], 8.0, processes=2), "path": "/b"},
    ]
    state = tuning.advance(state, results, {"sync:2": "sync:2"})
    record = tuning.record(state, "sync:2")
    assert (record["chosen"], record["best_rate"], record["tolerance"]) == (low, high, 0.1)
    assert record["why"].startswith("the lowest rate within 10% of the best validation loss")
    assert tuning.final_trainings(state, 1, 0)[0]["learning_rate"] == low
    # The verdict says it, in a sentence a user can check against the plotted scores.
    comparison = {"rows": [{"name": "sync:2", "mode": "sync"}], "verdict": {"reason": "Tie."}}
    attach(comparison, {"sync:2": record})
    assert comparison["verdict"]["reason"] == (
        f"Tie. sync:2 trains at {low:g}, not at the best-scored {high:g}: the lowest rate "
        "within 10% of the best validation loss (1.407 against 1.371 at 0.1)."
    )


def test_a_rung_without_every_candidate_is_refused():
    state = tuning.start("learning_rate=1e-3..1e-1", ["single:1"], size=3, eta=3, epochs=3)
    results = [{"history": _history("single:1", state["grid"][0], [0.5], 1.0), "path": "p"}]
    with pytest.raises(ValueError, match="no result for single:1 at 0.01"):
        tuning.advance(state, results, {"single:1": "single:1"})
    with pytest.raises(ValueError, match="trained 0 of 1 rungs"):
        tuning.final_trainings(state, 1, 0)


def _records(scores0: dict, chosen: dict, final: dict, default=1e-3):
    rates = [1e-3, 1e-2, 1e-1]
    out = {}
    for name, scores in scores0.items():
        candidates = []
        for lr, s in zip(rates, scores, strict=True):
            rungs = [{"rung": 0, "epochs": 1, "score": s, "val_loss": s, "seconds": 2.0}]
            if lr == chosen[name]:
                rungs.append(
                    {"rung": 1, "epochs": 3, "score": final[name], "val_loss": final[name]}
                )
            candidates.append({"learning_rate": lr, "rungs": rungs})
        out[name] = {
            "grid": rates,
            "rungs": [{"candidates": 3, "epochs": 1}, {"candidates": 1, "epochs": 3}],
            "default_rate": default,
            "chosen": chosen[name],
            "candidates": candidates,
            "seconds": 8.0,
            "process_seconds": 16.0,
        }
    return out


def test_the_verdict_says_whether_tuning_changed_the_ranking():
    # At the default rate single:1 is ahead; at their chosen rates sync:2 is.
    records = _records(
        {"single:1": [0.3, 0.2, 0.9], "sync:2": [0.5, 0.1, 0.8]},
        {"single:1": 1e-2, "sync:2": 1e-2},
        {"single:1": 0.15, "sync:2": 0.05},
    )
    assert rankings(records) == (
        ["single:1", "sync:2"],
        ["sync:2", "single:1"],
        "at the default rate 0.001 (on the grid)",
    )
    assert "Tuning changed the ranking" in ranking_sentence(records)
    same = _records(
        {"single:1": [0.3, 0.2, 0.9], "sync:2": [0.5, 0.1, 0.8]},
        {"single:1": 1e-2, "sync:2": 1e-2},
        {"single:1": 0.15, "sync:2": 0.25},
    )
    assert "did not change" in ranking_sentence(same)
    off = _records(
        {"single:1": [0.3, 0.2, 0.9], "sync:2": [0.5, 0.1, 0.8]},
        {"single:1": 1e-2, "sync:2": 1e-2},
        {"single:1": 0.15, "sync:2": 0.25},
        default=2e-3,
    )
    assert "nearest the default 0.002, 0.001" in ranking_sentence(off)

    comparison = {
        "rows": [
            {
                "name": "single:1",
                "mode": "single",
                "time_to_target": 10.0,
                "time_to_target_interval": [9.0, 12.0],
            },
            {"name": "sync:2", "mode": "sync", "time_to_target": None},
        ],
        "verdict": {"reason": "single:1 is faster."},
    }
    attach(comparison, records)
    row = comparison["rows"][0]
    assert row["search_process_seconds"] == 16.0
    assert row["time_to_tuned_model"] == 18.0
    assert row["time_to_tuned_model_interval"] == [17.0, 20.0]
    assert "time_to_tuned_model" not in comparison["rows"][1]
    assert comparison["verdict"]["reason"].startswith("single:1 is faster. Tuning changed")


def _preprocessed(tmp_path):
    data = tmp_path / "ex"
    for split, body in (("train", b"a" * 5), ("validation", b"b" * 3), ("test", b"c" * 4)):
        (data / split).mkdir(parents=True)
        (data / split / "part-0.tfrecord").write_bytes(body)
    shards = {
        split: [{"file": f"{split}/part-0.tfrecord", "records": 1, "bytes": n}]
        for split, n in (("train", 5), ("validation", 3), ("test", 4))
    }
    meta = {
        "dataset": "mnist",
        "complete": True,
        "splits": {"train": 1, "validation": 1, "test": 1},
        "files": {s: f"{s}/part-*.tfrecord" for s in ("train", "validation", "test")},
        "shards": shards,
    }
    (data / "metadata.json").write_text(json.dumps(meta))
    return data


def test_the_search_data_has_no_test_split(tmp_path):
    data = _preprocessed(tmp_path)
    summary = search_view(data, tmp_path / "view")
    assert summary["left_out"] == ["test/part-0.tfrecord"]
    view = DatasetInfo.load(tmp_path / "view")
    assert (tmp_path / "view" / "train" / "part-0.tfrecord").read_bytes() == b"a" * 5
    assert (tmp_path / "view" / "validation" / "part-0.tfrecord").exists()
    with pytest.raises(DataError, match="listed in .* for test, but missing"):
        view.split_files("test")


def test_a_survivor_takes_its_checkpoints_and_history(tmp_path):
    earlier = tmp_path / "rung0"
    (earlier / "checkpoints").mkdir(parents=True)
    (earlier / "checkpoints" / "ckpt-1.index").write_text("x")
    (earlier / "history.json").write_text("{}")
    (earlier / "model.keras").write_text("model")
    assert seed_from(earlier, tmp_path / "rung1")
    assert (tmp_path / "rung1" / "checkpoints" / "ckpt-1.index").read_text() == "x"
    assert (tmp_path / "rung1" / "history.json").exists()
    assert not (tmp_path / "rung1" / "model.keras").exists()
    assert not seed_from(tmp_path / "elsewhere", tmp_path / "rung2")


@pytest.mark.case("params/tune")
@pytest.mark.parametrize(
    "args, message",
    [
        (["--tune", "lr=1e-3..1e-1"], "cannot tune 'lr'"),
        (["--tune", "learning_rate=1e-1..1e-3"], "expected 0 < LOW < HIGH"),
        (["--tune", "learning_rate=1e-3..1e-1", "--tune-grid", "1"], "between 2 and 30"),
        (["--tune", "learning_rate=1e-3..1e-1", "--tune-eta", "1"], "eta must be at least 2"),
    ],
)
def test_run_refuses_a_bad_search_before_any_work(tmp_path, capsys, args, message):
    out = tmp_path / "o"
    assert cli.main(["run", "mnist", "--output", str(out), *args]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("distrain: run mnist failed:") and message in err[-1]
    assert not out.exists()
    with pytest.raises(StepError, match=message.split(" (")[0]):
        tune_start(
            args[1],
            ["single:1"],
            grid=int(_flag(args, "--tune-grid", 6)),
            eta=int(_flag(args, "--tune-eta", 3)),
            epochs=3,
            seed=0,
            default_rate=1e-3,
        )


def _flag(args, name, default):
    return args[args.index(name) + 1] if name in args else default
