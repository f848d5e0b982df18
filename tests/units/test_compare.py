import json

import pytest

from distrain.analysis.compare import (
    CompareConfig,
    build_comparison,
    render_html,
    render_markdown,
    render_text_table,
    time_to_target,
    write_comparison,
)


def report(name, mode, workers, seconds, accuracy, accs=(0.9, 0.96), staleness=None, **run):
    epochs = [
        {
            "epoch": i + 1,
            "loss": 1.0 / (i + 1),
            "accuracy": a,
            "val_loss": 0.5,
            "val_accuracy": a,
            "wall_seconds": seconds * (i + 1) / len(accs),
            "examples": 100 * (i + 1),
        }
        for i, a in enumerate(accs)
    ]
    history = {
        "epochs": epochs,
        "train_seconds": seconds,
        "examples_per_second": 1000 / seconds,
        "total_examples": 100 * len(accs),
    }
    if staleness is not None:
        history["staleness"] = staleness
        history["worker_progress"] = {"0": [[0.1, 4], [0.5, 8]], "1": [[0.2, 4], [0.6, 8]]}
        history["staleness_by_worker"] = {
            "0": {"mean": 0.5, "max": 1},
            "1": {"mean": 0.25, "max": 2},
        }
    return {
        "run": {"name": name, "mode": mode, "workers": workers, **run},
        "history": history,
        "evaluation": {"accuracy": accuracy, "macro_f1": accuracy - 0.01},
    }


def reports():
    return [
        report(
            "syncreplicas:3",
            "syncreplicas",
            3,
            20.0,
            0.95,
            staleness=[0, 0, 1, 2],
            parameter_servers=1,
            replicas_to_aggregate=2,
        ),
        report("async:2", "async", 2, 8.0, 0.97, staleness=[0, 1, 1, 0], parameter_servers=1),
        report("sync:2", "sync", 2, 5.0, 0.97, staleness=[0, 0]),
        report("single:1", "single", 1, 10.0, 0.96, accs=(0.9, 0.94)),
    ]


def reports_with_controller(controller="mpi"):
    """:func:`reports`, the sync run's history naming the Horovod controller it used."""
    runs = reports()
    next(r for r in runs if r["run"]["mode"] == "sync")["history"]["controller"] = controller
    return runs


def test_rows_ordered_with_speedup_efficiency_and_best():
    c = build_comparison(reports())
    rows = {r["name"]: r for r in c["rows"]}
    assert [r["name"] for r in c["rows"]] == ["single:1", "sync:2", "async:2", "syncreplicas:3"]
    assert rows["single:1"]["speedup"] == pytest.approx(1.0)
    assert rows["sync:2"]["speedup"] == pytest.approx(2.0)
    assert rows["sync:2"]["efficiency"] == pytest.approx(1.0)
    assert rows["syncreplicas:3"]["efficiency"] == pytest.approx(0.5 / 3)
    assert rows["syncreplicas:3"]["aggregation"] == "2/3"
    assert rows["async:2"]["aggregation"] is None
    # tie on accuracy 0.97: the faster run wins
    assert c["best"] == "sync:2"
    assert rows["async:2"]["staleness_mean"] == pytest.approx(0.5)
    assert rows["syncreplicas:3"]["staleness_max"] == 2
    assert rows["single:1"]["staleness_mean"] is None


def test_transport_column_names_each_runs_exchange():
    c = build_comparison(reports_with_controller("gloo"))
    rows = {r["name"]: r for r in c["rows"]}
    assert rows["sync:2"]["transport"] == "gloo"
    assert rows["async:2"]["transport"] == rows["syncreplicas:3"]["transport"] == "grpc"
    assert rows["single:1"]["transport"] is None
    header = render_markdown(c).splitlines()
    assert any("| transport |" in line for line in header)
    # A sync history from before the controller was recorded: no guess, an empty cell.
    assert build_comparison(reports())["rows"][1]["transport"] is None


def test_time_to_target():
    epochs = [
        {"val_accuracy": 0.9, "wall_seconds": 2.0},
        {"val_accuracy": 0.96, "wall_seconds": 4.0},
    ]
    assert time_to_target(epochs, 0.95) == pytest.approx(2.0 + 2.0 * (0.05 / 0.06))
    assert time_to_target(epochs, 0.99) is None
    assert time_to_target(epochs, 0.5) == pytest.approx(2.0)
    c = build_comparison(reports(), CompareConfig(target_accuracy=0.95))
    assert {r["name"]: r["time_to_target"] for r in c["rows"]}["single:1"] is None


def test_missing_baseline_is_a_note():
    c = build_comparison(reports()[:2])
    assert c["baseline"] is None and all(r["speedup"] is None for r in c["rows"])
    assert "no 'single' run" in c["notes"][0]
    assert "—" in render_markdown(c)


def test_validation_errors():
    bad = reports()
    del bad[0]["history"]
    with pytest.raises(ValueError, match="syncreplicas:3: missing 'history'"):
        build_comparison(bad)
    with pytest.raises(ValueError, match="duplicate run names: sync:2"):
        build_comparison([reports()[2], reports()[2]])
    with pytest.raises(ValueError, match="no run reports"):
        build_comparison([])


def test_renderings(tmp_path):
    rs = reports()
    rs[3]["run"]["name"] = "<script>x</script>"
    c = build_comparison(rs)
    md = render_markdown(c)
    table_rows = [line for line in md.splitlines() if line.startswith("| ")]
    assert len(table_rows) == 1 + 4 and "| run | mode | workers |" in table_rows[0]
    assert "- async:2: worker 0: 0.50 / 1, worker 1: 0.25 / 2" in md
    text = render_text_table(c)
    # One repeat: times have no interval, so no winner; the verdict line replaces "best run".
    assert "best run" not in text and len(text.splitlines()) == 2 + 4 + 1
    assert text.splitlines()[-1].startswith("verdict: No run is measurably faster")
    page = render_html(c, rs)
    assert "<script>x</script>" not in page and "&lt;script&gt;" in page
    # loss, accuracy, throughput, staleness, progress, and the intervals of time to target
    # and of accuracy
    assert page.count("data:image/png;base64,") == 7
    out = write_comparison(tmp_path, rs)
    saved = json.loads((tmp_path / "comparison.json").read_text())
    assert saved["rows"] == json.loads(json.dumps(out["rows"])) and len(saved["runs"]) == 4
    assert (tmp_path / "comparison.md").read_text() == md
    assert (tmp_path / "comparison.html").exists()


def test_consistency_modes_bring_their_columns_and_the_divergence_plot():
    ssp = report("ssp:2:staleness=2", "ssp", 2, 12.0, 0.96, staleness=[0, 1, 2], options={})
    ssp["run"]["options"] = {"staleness": 2, "patience": 20, "ps": 1}
    ssp["history"]["blocked_seconds_by_worker"] = {"0": 1.5, "1": 0.25}
    ssp["history"]["clock_gap_by_worker"] = {"0": 2, "1": 1}
    avg = report("avg:2:period=8", "avg", 2, 10.0, 0.97)
    avg["history"].update(
        communication_rounds=12,
        bytes_per_worker=3_000_000,
        divergence=[[1.0, 0.4], [2.0, 0.1]],
        controller="mpi",
    )
    rs = [report("single:1", "single", 1, 20.0, 0.96), ssp, avg]
    c = build_comparison(rs)
    rows = {r["name"]: r for r in c["rows"]}
    assert rows["ssp:2:staleness=2"]["blocked_seconds"] == 1.75
    assert rows["ssp:2:staleness=2"]["clock_gap_max"] == 2
    assert rows["ssp:2:staleness=2"]["aggregation"] == "S=2"
    assert rows["avg:2:period=8"]["communication_rounds"] == 12
    assert rows["avg:2:period=8"]["megabytes_per_worker"] == 3.0
    assert rows["avg:2:period=8"]["divergence"] == 0.1  # at the last exchange
    header = render_markdown(c).splitlines()
    assert any("| blocked s |" in line and "| divergence |" in line for line in header)
    page = render_html(c, rs)
    assert "Divergence between replicas" in page


def test_reconstruction_runs_are_ranked_by_error_and_show_each_data_ranks_loss():
    def autoencoder(name, mode, workers, mse, seconds):
        r = report(name, mode, workers, seconds, 0.0)
        r["evaluation"] = {"reconstruction_mse": mse, "psnr": 10.0, "task": "reconstruction"}
        return r

    runs = [
        autoencoder("single:1", "single", 1, 0.020, 10.0),
        autoencoder("sync:2", "sync", 2, 0.018, 6.0),
        autoencoder("tensor:2", "tensor", 2, 0.025, 4.0),
    ]
    runs[1]["history"]["epochs"][-1]["rank_loss"] = [0.2121, 0.2304]
    c = build_comparison(runs)
    rows = {r["name"]: r for r in c["rows"]}
    assert c["best"] == "sync:2"  # the lowest error, though not the fastest
    assert rows["sync:2"]["rank_loss"] == "0.212 / 0.230"
    assert rows["tensor:2"]["rank_loss"] is None
    table = render_markdown(c)
    assert "recon MSE" in table and "loss by rank" in table and "| accuracy |" not in table
    runs[0]["evaluation"] = {"task": "reconstruction"}
    with pytest.raises(ValueError, match="single:1: evaluation has none of accuracy"):
        build_comparison(runs)


def test_a_search_adds_its_rate_cost_sensitivity_and_ranking(tmp_path):
    rs = [report("sync:2", "sync", 2, 5.0, 0.97), report("single:1", "single", 1, 10.0, 0.96)]
    rs[0]["history"]["config"] = {"learning_rate": 0.01, "seed": 0}
    rs[1]["history"]["config"] = {"learning_rate": 0.001, "seed": 0}

    def record(chosen, losses, final):
        return {
            "grid": [0.001, 0.01],
            "rungs": [{"candidates": 2, "epochs": 1}, {"candidates": 1, "epochs": 2}][:1],
            "default_rate": 0.001,
            "chosen": chosen,
            "seconds": 30.0,
            "process_seconds": 60.0,
            "candidates": [
                {
                    "learning_rate": lr,
                    "rungs": [{"rung": 0, "epochs": 1, "score": v, "val_loss": v}]
                    + (
                        [{"rung": 1, "epochs": 2, "score": final, "val_loss": final}]
                        if lr == chosen
                        else []
                    ),
                }
                for lr, v in zip([0.001, 0.01], losses, strict=True)
            ],
        }

    tuning = {
        "sync:2": record(0.01, [0.6, 0.2], 0.1),
        "single:1": record(0.001, [0.3, None], 0.3),
    }
    out = write_comparison(tmp_path, rs, tuning=tuning)
    rows = {r["name"]: r for r in out["rows"]}
    assert rows["sync:2"]["learning_rate"] == 0.01 and rows["single:1"]["learning_rate"] == 0.001
    assert rows["sync:2"]["tuning"]["chosen"] == 0.01
    assert rows["sync:2"]["search_process_seconds"] == 60.0
    assert rows["sync:2"]["time_to_tuned_model"] == rows["sync:2"]["time_to_target"] + 30.0
    assert "Tuning changed the ranking" in out["verdict"]["reason"]
    page = (tmp_path / "comparison.html").read_text()
    assert "Sensitivity to the learning rate" in page
    assert "time to tuned model s" in (tmp_path / "comparison.md").read_text()
    # Without a search: no sensitivity plot, but every row still says its rate.
    plain = write_comparison(tmp_path / "plain", rs)
    assert "Sensitivity" not in (tmp_path / "plain" / "comparison.html").read_text()
    assert all("tuning" not in r for r in plain["rows"])
