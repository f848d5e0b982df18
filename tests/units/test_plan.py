"""The recommendation at a user's scale, on made-up runs whose numbers the cost model knows."""

import pytest

from distrain.analysis.compare import (
    build_comparison,
    render_markdown,
    render_text_table,
    write_comparison,
)
from distrain.analysis.plan import Plan, build_plan
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


def test_plan_parses_and_refuses_what_it_cannot_use():
    plan = Plan.parse("workers=16,gpus_per_worker=1,link_gbps=25")
    assert plan == Plan(workers=16, gpus_per_worker=1, link_gbps=25.0)
    for bad, message in (
        ("workers=0", "needs workers=N"),
        ("gpus=2,workers=4", "'gpus=2' is not KEY=VALUE"),
        ("workers=four", "workers must be a number"),
        ("workers=4,link_gbps=0", "link_gbps must be positive"),
    ):
        with pytest.raises(ConfigError, match=message):
            Plan.parse(bad)


def test_plan_is_calibrated_on_the_runs_and_states_its_error_and_assumptions():
    reports = runs()
    comparison = build_comparison(reports)
    p = build_plan(comparison, reports, Plan.parse("workers=8,link_gbps=8"))
    assert p["calibration"]["one_process_step_seconds"] == pytest.approx(0.01)
    link = p["calibration"]["measured_link"]
    assert link["bytes_per_second"] == pytest.approx(BANDWIDTH, rel=1e-6)
    assert link["latency_seconds"] == pytest.approx(LATENCY, rel=1e-6)
    checks = {c["run"]: c for c in p["checks"]}
    assert checks["sync:2"]["error"] == pytest.approx(1 / 1.1 - 1)
    predictions = {x["run"]: x for x in p["predictions"]}
    sync = predictions["sync:2"]
    assert sync["at_scale"] == "sync:8"
    # The plan's link (8 Gb/s = 1 GB/s) and the measured latency, at 8 ranks.
    assert sync["step_seconds"] == pytest.approx(ring_step(0.01, PARAMETERS * 4, 8, 1e9, LATENCY))
    # sync's effective batch grows with the workers; the examples to target carry over.
    assert sync["effective_batch"] == 512
    examples = comparison["rows"][1]["steps_to_target"] * 128
    assert sync["steps_to_target"] == pytest.approx(examples / 512)
    # async never reached the target here: no time is predicted for it.
    assert predictions["async:2"]["time_to_target"] is None
    assert predictions["async:2"]["why_none"] == "it did not reach the target here"
    fastest = min(
        (x for x in p["predictions"] if x["time_to_target"]), key=lambda x: x["time_to_target"]
    )
    assert p["recommended"] == fastest["at_scale"]
    # The model's error: the worst over the distributed runs it could time here.
    assert set(checks) == {"single:1", "sync:2", "async:2"}
    worst = max(abs(checks[n]["error"]) for n in ("sync:2", "async:2"))
    assert p["model_error"] == pytest.approx(worst)
    assert f"within {worst:.0%} of the 2 distributed run(s) it could check here" in p["sentence"]
    assert "taken to carry over" in p["sentence"]
    # Every other prediction within the model's error of the best is named as such.
    close = [
        x["at_scale"]
        for x in p["predictions"]
        if x["time_to_target"]
        and x is not fastest
        and x["time_to_target"] <= fastest["time_to_target"] * (1 + worst)
    ]
    assert ("cannot tell them apart" in p["sentence"]) == bool(close)


def test_plan_is_written_with_the_comparison(tmp_path):
    reports = runs()
    c = write_comparison(tmp_path, reports, plan="workers=4,gpus_per_worker=1,link_gbps=10")
    assert c["plan"]["recommended"]
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
    assert p["sentence"].startswith("No run reached the target here, so the plan compares speed")
