"""The recommendation at a user's scale, on made-up runs whose numbers the cost model knows."""

import pytest

from distrain.analysis.compare import (
    build_comparison,
    render_markdown,
    render_text_table,
    write_comparison,
)
from distrain.analysis.plan import Plan, build_plan, decide, format_seconds, format_span
from distrain.base.costmodel import ring_step
from distrain.base.errors import ConfigError

PARAMETERS = 100_000
PROFILE = {"parameters": PARAMETERS, "layer_costs": [1.0], "output_sizes": [10.0]}
PROFILE.update(split_layers=[], dense_share=1.0)
# A link of 1 GB/s and 100 µs a message, as the sync run's probe measured it.
BANDWIDTH, LATENCY = 1e9, 100e-6


def probe(ranks=2):
    rows = []
    for size in (4_000, 400_000, 4_000_000):
        seconds = 2 * (ranks - 1) * LATENCY + 2 * (ranks - 1) / ranks * size / BANDWIDTH
        rows.append({"bytes": size, "seconds": seconds})
    return {"ranks": ranks, "rows": rows}


def report(spec, mode, workers, step, global_batch, reach=(0.9, 0.97), **history):
    """Two epochs of 100 steps each at ``step`` seconds; validation as ``reach``."""
    epochs = [
        {
            "epoch": i + 1,
            "val_accuracy": a,
            "step_seconds": 100 * step,
            "wall_seconds": 100 * step * (i + 1),
            "examples": 100 * global_batch * (i + 1),
        }
        for i, a in enumerate(reach)
    ]
    run = {"name": spec.split(":ps")[0], "spec": spec, "mode": mode, "workers": workers}
    if mode == "async":
        run["parameter_servers"] = 1
    return {
        "run": run,
        "history": {
            "config": {"seed": 0, "batch_size": 64, "threads_per_worker": 1},
            "epochs": epochs,
            "steps": 200,
            "train_seconds": 200 * step,
            "total_examples": 200 * global_batch,
            "global_batch_size": global_batch,
            "examples_per_second": 200 * global_batch / (200 * step),
            **history,
        },
        "evaluation": {"accuracy": reach[-1], "num_examples": 1000, "model_profile": PROFILE},
    }


def runs():
    t1 = 0.01
    sync_step = ring_step(t1, PARAMETERS * 4, 2, BANDWIDTH, LATENCY)
    return [
        report("single:1", "single", 1, t1, 64),
        # sync measured 10 % slower than its equation: the model's error is 10 %.
        report("sync:2", "sync", 2, sync_step * 1.1, 128, link_probe=probe()),
        report("async:2:ps=1", "async", 2, 0.02, 64, reach=(0.8, 0.9)),
    ]


def stats(check_steps=20, stale_steps=300, workers=8):
    """Made-up statistics at ``workers``: base 200 steps at 64, B_noise 192 (1,440 at 512)."""
    every = 5
    base = {"steps": 200, "every": every, "seed_steps": [190, 200, 210]}
    predicted = 200 / (1 + 192 / 64) * (1 + 192 / 512)  # 68.75
    return {
        "workers": workers,
        "base": base,
        "noise_scale": {"b_noise": 192.0, "range": [150.0, 250.0]},
        "sync": {
            "batch": 64 * workers,
            "predicted": predicted,
            "predicted_range": [55.0, 80.0],
            "check": {"steps": check_steps, "every": 1},
        },
        "async": {"steps": stale_steps, "every": every, "delay": workers - 1},
    }


def test_plan_parses_and_refuses_what_it_cannot_use():
    plan = Plan.parse("workers=16,gpus_per_worker=1,link_gbps=25,latency_us=20")
    assert plan == Plan(workers=16, gpus_per_worker=1, link_gbps=25.0, latency_us=20.0)
    assert Plan.parse("workers=2").latency_us == 50.0  # a data-centre network's order
    for bad, message in (
        ("workers=0", "needs workers=N"),
        ("gpus=2,workers=4", "'gpus=2' is not KEY=VALUE"),
        ("workers=four", "workers must be a number"),
        ("workers=4,link_gbps=0", "link_gbps must be positive"),
        ("workers=4,latency_us=-1", "latency_us must be 0 or more"),
    ):
        with pytest.raises(ConfigError, match=message):
            Plan.parse(bad)


def test_the_link_is_the_plans_never_the_probe_and_unmeasured_steps_are_not_ranked():
    reports = runs()
    comparison = build_comparison(reports)
    p = build_plan(comparison, reports, Plan.parse("workers=8,link_gbps=8,latency_us=20"))
    assert p["calibration"]["one_process_step_seconds"] == pytest.approx(0.01)
    # The probe is kept for the checks of the runs here, not for the plan's link.
    assert p["calibration"]["measured_link"]["latency_seconds"] == pytest.approx(LATENCY)
    checks = {c["run"]: c for c in p["checks"]}
    assert checks["sync:2"]["error"] == pytest.approx(1 / 1.1 - 1)
    sync = next(x for x in p["predictions"] if x["run"] == "sync:2")
    assert sync["at_scale"] == "sync:8" and sync["effective_batch"] == 512
    assert sync["step_seconds"] == pytest.approx(ring_step(0.01, PARAMETERS * 4, 8, 1e9, 20e-6))
    # Without statistics measured at the scale the steps are carried over and not ranked.
    assert sync["basis"].startswith("carried over") and sync["time_interval"] is None
    assert p["recommended"] is None
    assert "carried over and no candidate is ranked" in p["sentence"]
    # async is swept over its servers: 1, 2, 4 and 8 for 8 workers.
    swept = [x["at_scale"] for x in p["predictions"] if x["run"] == "async:2"]
    assert swept == [f"async:8:ps={k}" for k in (1, 2, 4, 8)]


def test_measured_statistics_set_the_steps_and_the_plan_says_which():
    reports = runs()
    comparison = build_comparison(reports)
    p = build_plan(comparison, reports, Plan(workers=8, link_gbps=8), stats(check_steps=70))
    by = {x["at_scale"]: x for x in p["predictions"]}
    # The check (70) fell inside the prediction's interval: the prediction stands.
    assert by["sync:8"]["steps"] == pytest.approx(68.75)
    assert by["sync:8"]["basis"] == "69 predicted by the noise scale, 70 when checked"
    assert by["async:8:ps=1"]["steps"] == 300
    assert by["async:8:ps=1"]["basis"] == "measured, 7 updates of staleness injected"
    # A check outside the interval replaces the prediction, and the miss is said.
    p = build_plan(comparison, reports, Plan(workers=8, link_gbps=8), stats(check_steps=20))
    sync = next(x for x in p["predictions"] if x["at_scale"] == "sync:8")
    assert sync["steps"] == 20 and "prediction missed (-71% off its 69)" in sync["basis"]
    # The interval: the check's resolution and the base seeds' spread (185/200 .. 210/200),
    # times the step time's error (the floor, or the runs' median error).
    e = p["step_error"]
    lo, hi = (20 - 1) * (190 - 5) / 200, 20 * 210 / 200
    step = sync["step_seconds"]
    assert sync["time_interval"] == pytest.approx([lo * step / (1 + e), hi * step * (1 + e)])


def test_a_plan_whose_candidates_overlap_names_no_winner_but_the_cheapest():
    reports = runs()
    comparison = build_comparison(reports)
    # async: 30 staleness-injected steps against sync's 20: their intervals overlap.
    p = build_plan(comparison, reports, Plan(workers=8, link_gbps=8), stats(stale_steps=30))
    assert p["recommended"] is None and p["verdict"]["winner"] is None
    assert len(p["verdict"]["tied"]) > 1 and p["verdict"]["cheapest"] in p["verdict"]["tied"]
    assert "names no winner" in p["sentence"] and "cannot be told apart" in p["sentence"]


def test_the_tie_rule():
    def c(name, time, low, high, cost):
        return {
            "at_scale": name,
            "time_to_target": time,
            "time_interval": [low, high],
            "cost": cost,
        }

    separate = decide([c("a", 1.0, 0.9, 1.1, 9), c("b", 2.0, 1.5, 2.5, 2)])
    assert separate == {"winner": "a", "tied": [], "cheapest": None}
    overlap = decide([c("a", 1.0, 0.5, 1.6, 9), c("b", 1.4, 1.5, 2.5, 2), c("d", 9, 8, 10, 1)])
    assert overlap == {"winner": None, "tied": ["a", "b"], "cheapest": "b"}
    unranked = {"at_scale": "x", "time_to_target": 0.1, "time_interval": None, "cost": 1}
    assert decide([unranked])["winner"] is None  # no interval: never a winner


def test_times_read_in_sensible_units_never_zero_seconds():
    assert format_seconds(0.0002) == "200 µs"
    assert format_seconds(0.036) == "36 ms"
    assert format_seconds(0.2) == "200 ms"
    assert format_seconds(12.345) == "12.3 s"
    assert format_seconds(95) == "1.58 min"
    assert format_seconds(7200) == "2 h"
    assert format_span([0.02, 0.061]) == "20 ms–61 ms"
    assert "0.0 s" not in format_seconds(1e-5)


def test_plan_is_written_with_the_comparison(tmp_path):
    reports = runs()
    c = write_comparison(tmp_path, reports, plan="workers=4,gpus_per_worker=1,link_gbps=10")
    assert "no GPU was measured here" in c["plan"]["sentence"]
    assert "**Plan:**" in render_markdown(c) and "| sync:2 | sync:4 |" in render_markdown(c)
    assert render_text_table(c).splitlines()[-1].startswith("plan: At 4 workers")
    assert "<b>Plan:</b>" in (tmp_path / "comparison.html").read_text()


def test_no_single_run_means_no_plan():
    reports = runs()[1:]
    p = build_plan(build_comparison(reports), reports, Plan(workers=4))
    assert p["recommended"] is None and "single:1" in p["sentence"]


def test_without_any_run_at_the_target_the_plan_compares_speed_alone():
    reports = [
        report("single:1", "single", 1, 0.01, 64, reach=(0.5, 0.6)),
        report("sync:2", "sync", 2, 0.012, 128, reach=(0.5, 0.6), link_probe=probe()),
    ]
    p = build_plan(build_comparison(reports), reports, Plan(workers=4, link_gbps=8))
    predictions = {x["run"]: x for x in p["predictions"]}
    # As many examples as each run trained here: 200 steps of its effective batch.
    assert predictions["single:1"]["steps_to_target"] == pytest.approx(200)
    assert predictions["sync:2"]["steps_to_target"] == pytest.approx(200 * 128 / 256)
    assert predictions["sync:2"]["basis"] == "as many examples as here"
    assert "no run reached the target here" in p["sentence"]


def test_the_compare_step_measures_the_statistics_on_the_reference_runs_data(tmp_path, monkeypatch):
    import distrain.analysis.plan as plan_module

    reports = runs()
    (tmp_path / "metadata.json").write_text("{}")
    reports[0]["history"]["config"].update(data_dir=str(tmp_path), model="mlp", learning_rate=0.002)
    calls = []

    def measure(data_dir, model, **kwargs):
        calls.append((data_dir, model, kwargs))
        return stats(workers=kwargs["workers"])

    monkeypatch.setattr(plan_module, "measure", measure)
    comparison = build_comparison(reports)
    p = plan_module.plan_comparison(comparison, reports, "workers=8,link_gbps=8")
    (data_dir, model, kwargs), *_ = calls
    assert (data_dir, model) == (str(tmp_path), "mlp")
    assert kwargs["batch"] == 64 and kwargs["rate"] == 0.002 and kwargs["workers"] == 8
    assert kwargs["target"] == comparison["target_accuracy"]
    assert p["statistics"]["workers"] == 8
    # Without the data (a cluster's compare pod), nothing is measured and it is said.
    calls.clear()
    reports[0]["history"]["config"]["data_dir"] = str(tmp_path / "gone")
    p = plan_module.plan_comparison(build_comparison(reports), reports, "workers=8")
    assert not calls and p["statistics"] is None and "not measured" in p["sentence"]
