"""Experiments: configurations that rerun exactly, reports whose sentences follow the numbers,
pipelines that compile with both compilers, and one whole tiny experiment through kfp.local."""

from __future__ import annotations

import dataclasses
import html
import json
import subprocess

import pytest
import yaml

from distrain.analysis import experiments
from distrain.analysis.experiments import ExperimentConfig, load_config
from distrain.analysis.experiments.report import (
    build_report,
    match_results,
    worker_delays,
    write_report,
)
from distrain.base.errors import ConfigError
from distrain.steps import StepError
from distrain.train.config import RunSpec
from tests.conftest import ROOT, VENV_BIN

NAMES = ("consistency", "averaging", "parallelism", "scaling")


def test_every_experiment_is_registered():
    assert tuple(experiments.names()[: len(NAMES)]) == NAMES
    with pytest.raises(ConfigError, match="unknown experiment 'nope'"):
        experiments.get("nope")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("scale", experiments.SCALES)
def test_config_round_trips_through_its_json(name, scale, tmp_path):
    cfg = experiments.get(name).config(scale, seed=3)
    path = tmp_path / "experiment.json"
    path.write_text(cfg.to_json())
    again = load_config(path)
    assert again == cfg
    assert again.seed == 3 and all(p.seed == 3 for p in again.points)
    # Run specs are stored whole, so that a rerun reads no default differently.
    assert all(p.run == str(RunSpec.parse(p.run)) for p in again.points)


def test_config_refuses_what_cannot_run():
    cfg = experiments.get("consistency").config("tiny")
    raw = cfg.to_dict()
    with pytest.raises(ConfigError, match="unexpected keyword"):
        ExperimentConfig.from_dict({**raw, "colour": "red"})
    twice = {**raw, "points": raw["points"] + raw["points"][:1]}
    with pytest.raises(ConfigError, match="two points are the same run"):
        ExperimentConfig.from_dict(twice)
    bad = {**raw, "points": [{**raw["points"][0], "run": "async:2:ps=0"}]}
    with pytest.raises(ConfigError, match="ps must be at least 1"):
        ExperimentConfig.from_dict(bad)
    bad = {**raw, "points": [{**raw["points"][0], "model": "resnet"}]}
    with pytest.raises(ConfigError, match="no such model for dbpedia"):
        ExperimentConfig.from_dict(bad)
    with pytest.raises(ConfigError, match="scale"):
        ExperimentConfig.from_dict({**raw, "scale": "huge"})


# --- made-up results ---------------------------------------------------------------------


def fake_report(point, accuracy, *, seconds=10.0, val=None, history=None, test=10_000):
    """An evaluate step's report for ``point`` with the numbers given (``test`` examples)."""
    val = val if val is not None else [accuracy * 0.8, accuracy]
    epochs = [
        {
            "epoch": i + 1,
            "loss": 1.0 / (i + 1),
            "val_accuracy": v,
            "wall_seconds": seconds * (i + 1) / len(val),
            "examples": 64 * 10 * (i + 1),
        }
        for i, v in enumerate(val)
    ]
    return {
        "run": {"dataset": point.dataset, "spec": point.run, "name": point.run},
        "history": {
            "config": {
                "model": point.model,
                "seed": point.seed,
                "epochs": point.epochs,
                "threads_per_worker": point.threads,
            },
            "epochs": epochs,
            "train_seconds": seconds,
            "global_batch_size": 64,
            "steps": 10 * len(val),
            **(history or {}),
        },
        "evaluation": {
            "accuracy": accuracy,
            "macro_precision": accuracy,
            "macro_recall": accuracy,
            "num_examples": test,
        },
    }


def consistency_reports(cfg, numbers):
    """Reports for every point; ``numbers[(model, rule)]`` = (accuracy, seconds, history)."""
    reports = []
    for p in cfg.points:
        accuracy, seconds, history = numbers[(p.model, p.knobs["rule"])]
        reports.append(fake_report(p, accuracy, seconds=seconds, history=history))
    return reports


def _consistency_numbers(cfg, accuracy, blocked=(2.0, 0.5)):
    numbers = {}
    for p in cfg.points:
        rule = p.knobs["rule"]
        history = {"staleness": [0, 1, 3] if rule == "async" else [0, 0, 1]}
        if "staleness" in p.knobs:
            tight = p.knobs["staleness"] == min(experiments.consistency.BOUNDS)
            history["blocked_seconds_by_worker"] = {"0": blocked[0 if tight else 1], "1": 0.0}
        numbers[(p.model, rule)] = (accuracy[rule], 10.0, history)
    return numbers


def test_consistency_sentences_follow_the_numbers():
    cfg = experiments.get("consistency").config("small")
    accuracy = {"async": 0.91, "bulk-synchronous": 0.95, "SSP s=1": 0.93, "SSP s=8": 0.92}
    reports = consistency_reports(cfg, _consistency_numbers(cfg, accuracy))
    text = "\n".join(build_report(cfg, reports, figures=False)["sentences"])
    assert "With logreg, bulk-synchronous reached the highest test accuracy (0.9500)" in text
    assert "async the lowest (0.9100), 0.0400 apart, beyond the 95 % intervals" in text
    assert "async applied the stalest gradients to logreg (1.33 versions old on average)" in text
    assert "bulk-synchronous, SSP s=1 and SSP s=8 the freshest (0.33)" in text
    assert "the oldest was 3 versions old (async)" in text
    assert "the tighter bound cost waiting" in text
    assert "blocked logreg's workers for 2.00 s in all against 0.50 s with 8" in text
    assert "the highest macro recall (0.9500) was bulk-synchronous's" in text
    assert (
        "logreg and fasttext each won 0 of the 4 rules on test accuracy, and could not be told "
        "apart under 4" in text
    )

    # The other way round: the numbers change, and so do the words.
    accuracy = {"async": 0.97, "bulk-synchronous": 0.90, "SSP s=1": 0.93, "SSP s=8": 0.92}
    reports = consistency_reports(cfg, _consistency_numbers(cfg, accuracy, blocked=(0.1, 0.4)))
    text = "\n".join(build_report(cfg, reports, figures=False)["sentences"])
    assert "With logreg, async reached the highest test accuracy (0.9700)" in text
    assert "bulk-synchronous the lowest (0.9000), 0.0700 apart" in text
    assert "the tighter bound cost no more waiting here" in text


def test_consistency_time_to_target_and_model_comparison_follow_the_numbers():
    cfg = experiments.get("consistency").config("small")
    numbers = _consistency_numbers(
        cfg, {"async": 0.9, "bulk-synchronous": 0.9, "SSP s=1": 0.9, "SSP s=8": 0.9}
    )
    for rule, seconds in (("async", 4.0), ("bulk-synchronous", 8.0), ("SSP s=1", 6.0)):
        acc, _, history = numbers[("logreg", rule)]
        numbers[("logreg", rule)] = (acc, seconds, history)
    # fasttext is more accurate than logreg under three of the four rules.
    for rule in ("async", "bulk-synchronous", "SSP s=1"):
        _, seconds, history = numbers[("fasttext", rule)]
        numbers[("fasttext", rule)] = (0.95, seconds, history)
    text = "\n".join(
        build_report(cfg, consistency_reports(cfg, numbers), figures=False)["sentences"]
    )
    # Every run's validation accuracy climbs linearly to its final value over its time.
    assert "async reached 0.855 validation accuracy (95% of logreg's best) first" in text
    assert "SSP s=8 last, after 8.7 s" in text
    assert "With logreg, every rule reached the same test accuracy (0.9000)" in text
    # fasttext's runs all took 10 s: no rule was first alone.
    assert "async, bulk-synchronous and SSP s=1 reached 0.903 validation accuracy" not in text
    assert (
        "fasttext beat logreg on test accuracy under 3 of the 4 rules, and could not be told "
        "apart under 1."
    ) in text


def averaging_reports(cfg, accuracy_of, divergence=None):
    """Reports for every point: ``accuracy_of(knobs)`` gives its test accuracy."""
    reports = []
    for p in cfg.points:
        history = {"communication_rounds": 5}
        if divergence:
            history["divergence"] = [[1.0, divergence(p.knobs)]]
        reports.append(fake_report(p, accuracy_of(p.knobs), history=history))
    return reports


def test_averaging_sentences_follow_the_numbers():
    cfg = experiments.get("averaging").config("small")

    def falling(k):  # accuracy falls as the period grows; independent init costs the CNN
        base = 0.9 - 0.01 * {1: 0, 4: 1, 16: 2, 64: 4}[k["period"]]
        if k["init"] == "independent":
            base -= 0.2 if k["model"] == "cnn" else 0.001
        if k["common"]:
            base += 0.02
        return base

    def divergence(k):
        return 3.0 if k["init"] == "independent" else 1.0

    text = "\n".join(
        build_report(cfg, averaging_reports(cfg, falling, divergence), figures=False)["sentences"]
    )
    assert (
        "For softmax (convex), test accuracy went from 0.9000 (95 % interval 0.8940–0.9057) "
        "averaging every step to 0.8600 (95 % interval 0.8531–0.8667) every 64 steps (a spread "
        "of 0.0400 over 4 periods): averaging less often cost accuracy, beyond the 95 % intervals"
    ) in text
    assert (
        "moved cnn's accuracy by -0.2000: 0.6800 against 0.8800, its replicas 3.0x as far" in text
    )
    # -0.001 on 10,000 test images is inside the intervals: no difference is claimed.
    assert (
        "made no measurable difference to softmax's accuracy: 0.8790 (95 % interval "
        "0.8725–0.8852) against 0.8800 (95 % interval 0.8735–0.8862)"
    ) in text
    assert "The difference was measurable for cnn (non-convex) only" in text
    assert "10 % common examples (every 16 steps) moved softmax's accuracy by +0.0200" in text

    def rising(k):
        return 0.8 + 0.01 * {1: 0, 4: 1, 16: 2, 64: 4}[k["period"]] * (k["model"] == "cnn")

    text = "\n".join(build_report(cfg, averaging_reports(cfg, rising), figures=False)["sentences"])
    assert "For cnn (non-convex), test accuracy went from 0.8000" in text
    assert "averaging less often did better" in text
    assert (
        "every 64 steps (a spread of 0.0000 over 4 periods): no measurable difference between "
        "the periods (each accuracy's 95 % interval is up to ±0.0078 on 10,000 test examples)"
    ) in text
    assert (
        "The period made a measurable difference to test accuracy for cnn (non-convex, a spread "
        "of 0.0400); not for softmax, softmax-l2."
    ) in text


def test_reports_on_a_few_hundred_test_examples_claim_no_difference_inside_the_noise():
    # The digits run: 360 test images, where one accuracy's 95 % interval alone is
    # about +-3 %; a spread of 0.0083 and differences of one to three percent are noise.
    periods = {1: 0.9306, 4: 0.9250, 16: 0.9278, 64: 0.9222}
    cnn = {1: 0.95, 4: 0.94, 16: 0.93, 64: 0.94}
    variants = {"init": -0.03, "common": 0.02, "weights": 0.01}

    def accuracy(k):
        base = (periods if k["model"] != "cnn" else cnn)[k["period"]]
        return base + variants.get(k.get("variant"), 0.0)

    cfg = experiments.get("averaging").config("small")
    reports = averaging_reports(cfg, accuracy)
    for r in reports:
        r["evaluation"]["num_examples"] = 360
    text = "\n".join(build_report(cfg, reports, figures=False)["sentences"])
    for claim in ("cost accuracy", "did better", "moved ", "mattered most", "measurably above"):
        assert claim not in text
    assert "For none of the 3 models did the period make a measurable difference" in text
    assert "on 360 test examples" in text
    assert text.count("For no model was the difference larger than the 95 % intervals") == 3

    cfg = experiments.get("consistency").config("small")
    numbers = _consistency_numbers(
        cfg, {"async": 0.91, "bulk-synchronous": 0.95, "SSP s=1": 0.93, "SSP s=8": 0.92}
    )
    reports = consistency_reports(cfg, numbers)
    for r in reports:
        r["evaluation"]["num_examples"] = 360
    text = "\n".join(build_report(cfg, reports, figures=False)["sentences"])
    assert "reached the highest test accuracy" not in text
    assert "With logreg, no rule's test accuracy was measurably different" in text
    assert "the highest macro recall" not in text

    cfg = experiments.get("parallelism").config("tiny")
    numbers = {
        ("mlp", "one process"): (1.0, 0.90, [1000], 300),
        ("mlp", "tensor-parallel"): (3.0, 0.88, [500, 500], 250),
        ("nbow", "one process"): (2.0, 0.80, [4000], 400),
        ("nbow", "tensor-parallel"): (1.0, 0.82, [3000, 3000], 390),
    }
    reports = parallelism_reports(cfg, numbers)
    for r in reports:
        r["evaluation"]["num_examples"] = 360
    text = "\n".join(build_report(cfg, reports, figures=False)["sentences"])
    assert "worse by" not in text and "better by" not in text
    assert "no split differed measurably from it" in text


def parallelism_reports(cfg, numbers):
    """``numbers[(model, split)]`` = (seconds per epoch, quality, parameters per rank, MB)."""
    reports = []
    for p in cfg.points:
        seconds, quality, parameters, mb = numbers[(p.model, p.knobs["split"])]
        report = fake_report(
            p,
            quality,
            history={"parameters_per_rank": parameters, "peak_memory_per_rank": [mb * 2**20]},
        )
        for epoch in report["history"]["epochs"]:
            epoch["step_seconds"] = seconds
        reports.append(report)
    return reports


def test_parallelism_sentences_follow_the_numbers():
    cfg = experiments.get("parallelism").config("tiny")
    numbers = {
        ("mlp", "one process"): (1.0, 0.90, [1000], 300),
        ("mlp", "tensor-parallel"): (3.0, 0.88, [500, 500], 250),
        ("nbow", "one process"): (2.0, 0.80, [4000], 400),
        ("nbow", "tensor-parallel"): (1.0, 0.80, [3000, 3000], 390),
    }
    text = "\n".join(
        build_report(cfg, parallelism_reports(cfg, numbers), figures=False)["sentences"]
    )
    assert (
        "For mlp, one process had the shortest epoch (1.00 s) and tensor-parallel the "
        "longest (3.00 s, 3.0x as long)." in text
    )
    assert "share of mlp's 1,000 parameters: tensor-parallel 50%." in text
    assert (
        "the split furthest from it was tensor-parallel (0.8800, worse by 0.0200, beyond the "
        "95 % intervals)"
    ) in text
    assert "nbow's accuracy was 0.8000 alone and the same under every split (1)." in text
    assert (
        "A split of the model (tensor, pipeline or hybrid) beat one process's time per epoch "
        "for 1 of the 2 models: nbow (tensor-parallel)."
    ) in text
    assert "Data parallelism beat one process's time per epoch for none of the 2 models." in text

    numbers[("nbow", "tensor-parallel")] = (5.0, 0.85, [3000, 3000], 390)
    text = "\n".join(
        build_report(cfg, parallelism_reports(cfg, numbers), figures=False)["sentences"]
    )
    assert (
        "(tensor, pipeline or hybrid) beat one process's time per epoch for none of the 2" in text
    )
    assert "tensor-parallel (0.8500, better by 0.0500, beyond the 95 % intervals)" in text


def test_parallelism_shows_a_split_a_model_cannot_take_as_refused():
    cfg = experiments.get("parallelism").config("small")
    refused = {(r["model"], r["run"]) for r in cfg.settings["refused"]}
    assert refused == {("nbow", "pipeline:2:micro=4"), ("seq2seq", "pipeline:2:micro=4")}
    assert not any(
        p.run.startswith("pipeline") and p.model in ("nbow", "seq2seq") for p in cfg.points
    )
    numbers = {}
    for p in cfg.points:
        numbers[(p.model, p.knobs["split"])] = (1.0, 0.9, [10], 100)
    report = build_report(cfg, parallelism_reports(cfg, numbers), figures=False)
    assert any(
        s.startswith("pipeline:2:micro=4 refused nbow and seq2seq; its reason for nbow: ")
        and "cannot be cut into stages" in s
        for s in report["sentences"]
    )
    rows = report["tables"][0]["rows"]
    assert ["nbow", "pipeline-parallel", "pipeline:2:micro=4", "refused"] == rows[-2][:4]


def test_parallelism_scores_each_model_by_its_declared_quality():
    """A task's declared metric, or the one the data set's study declaration names."""
    from distrain.analysis.experiments.parallelism import row_of
    from distrain.analysis.experiments.report import Result

    points = {p.model: p for p in experiments.get("parallelism").config("small").points}
    scores = {"accuracy": 0.6, "bits_per_char": 2.5, "num_examples": 100}
    # seq2seq's task declares bits/char; Gutenberg's study names character accuracy.
    seq2seq = row_of(Result(points["seq2seq"], {}, {**scores, "task": "sequence_to_sequence"}))
    assert (seq2seq["quality_key"], seq2seq["quality"]) == ("accuracy", 0.6)
    assert seq2seq["quality_name"] == "accuracy" and seq2seq["higher_is_better"]
    mlp = row_of(Result(points["mlp"], {}, {"accuracy": 0.9, "task": "classification"}))
    assert (mlp["quality_key"], mlp["quality_name"], mlp["higher_is_better"]) == (
        "accuracy",
        "accuracy",
        True,
    )
    # A classifier's evaluation with bits/char in it too is still scored by accuracy...
    both = row_of(Result(points["nbow"], {}, {**scores, "task": "classification"}))
    assert both["quality_key"] == "accuracy"
    # ... and a run without its quality has none (not another key that happens to be there).
    none = row_of(Result(points["nbow"], {}, {"bits_per_char": 2.5, "task": "classification"}))
    assert none["quality"] is None and none["quality_key"] is None


def scaling_reports(cfg, epoch_seconds, cores=2, latency=1e-3, bandwidth=1e9):
    """``epoch_seconds[(width, run)]``: each run's steady epoch; one worker takes 10 steps
    an epoch (sync:N, 10 / N); each run's probe is exactly the link given."""
    reports = []
    for p in cfg.points:
        spec = RunSpec.parse(p.run)
        width, n = p.knobs["width"], spec.workers
        steps = 10 // n if spec.mode == "sync" else 10
        report = fake_report(p, 0.9, val=[0.8, 0.85, 0.9])
        history = report["history"]
        history["steps"] = steps * 3
        for epoch in history["epochs"]:
            epoch["step_seconds"] = epoch_seconds[(width, p.run)]
        history["epochs"][0]["step_seconds"] *= 5  # the first epoch traces: left out
        history["host_cores"] = cores
        if n > 1:
            sizes = (4, 2**16, 2**20, 2**22)
            history["link_probe"] = {
                "ranks": n,
                "rows": [
                    {"bytes": b, "seconds": 2 * (n - 1) * (latency + b / n / bandwidth)}
                    for b in sizes
                ],
            }
        report["evaluation"]["model_profile"] = {
            "parameters": 1000 * width,
            "dense_share": 0.5,
            "split_layers": [{"in": 100, "out": 100 * width, "after": False}],
            "layer_costs": [1.0],
            "output_sizes": [1.0],
        }
        reports.append(report)
    return reports


def test_scaling_predictions_and_sentences_follow_the_numbers():
    cfg = experiments.get("scaling").config("small")
    assert {p.threads for p in cfg.points} == {1}  # a worker is one core
    epochs = {}
    for p in cfg.points:
        width, mode = p.knobs["width"], RunSpec.parse(p.run).mode
        # One worker: 1 s an epoch at width 1, 8 s at width 8. sync:2 halves it, sync:4
        # (4 workers on 2 cores) does no better; the split gains with width.
        single = 1.0 * width
        epochs[(width, p.run)] = {
            "single": single,
            "sync": single / 2 * 1.1,
            "tensor": single * (1.5 if width == 1 else 0.8),
        }[mode]
    epochs[(4, "sync:4")] = 4.0 / 1.9
    report = build_report(cfg, scaling_reports(cfg, epochs), figures=False)
    rows = {(r["width"], r["run"]): r for r in report["numbers"]["rows"]}
    link = report["numbers"]["link"]
    assert link["bytes_per_second"] == pytest.approx(1e9)
    assert link["latency_seconds"] == pytest.approx(1e-3)

    # sync:2 at width 1: one worker's step (0.1 s), then a ring allreduce of 4,000 bytes,
    # on each of 5 steps an epoch.
    t1 = 1.0 / 10
    sync = rows[(1, "sync:2")]
    assert sync["predicted_epoch_seconds"] == pytest.approx(5 * (t1 + 2 * (1e-3 + 2000 / 1e9)))
    assert sync["speedup"] == pytest.approx(1 / 0.55)
    assert sync["predicted_speedup"] == pytest.approx(1.0 / sync["predicted_epoch_seconds"])
    # sync:4 at width 4: 4 one-thread workers on 2 cores compute at half speed.
    t1 = 4.0 / 10
    four = rows[(4, "sync:4")]
    ring = 6 * (1e-3 + 4000 * 4 / 4 / 1e9)
    assert four["predicted_epoch_seconds"] == pytest.approx(2 * (2 * t1 + ring))
    # tensor:2 at width 8: half the dense half, plus an allgather of 256 x 800 floats.
    t1 = 8.0 / 10
    tensor = rows[(8, "tensor:2")]
    gather = 1e-3 + 256 * 800 * 4 / 2 / 1e9
    assert tensor["predicted_epoch_seconds"] == pytest.approx(10 * (0.75 * t1 + gather))

    text = "\n".join(report["sentences"])
    assert "allreduce probes (2 ranks): 1.00 GB/s and 1000 µs a message." in text
    assert (
        "At 2 workers, data-parallel (sync)'s speedup over one worker was 1.82x at 1,000 "
        "parameters and stayed near 1.82x at 8,000; its best was 1.82x (fc)."
    ) in text
    assert (
        "At 2 workers, tensor split's speedup over one worker was 0.67x at 1,000 parameters "
        "and rose to 1.25x at 8,000; its best was 1.25x (fc-x2)."
    ) in text
    # Measured and predicted trends compared: both level for sync; the split's prediction
    # stays level while the measured speedup rises.
    assert "The cost model predicted 1.96x and 1.99x: the same trend." in text
    assert (
        "The cost model predicted 1.31x and 1.33x: it stayed level where the measured speedup rose."
    ) in text
    assert "With fc-x4, data-parallel (sync) ran at 1.82x on 2 workers, 1.90x on 4 workers." in text
    assert "This host has 2 cores: beyond 2 workers they share them" in text
    assert "over 10 runs." in text

    # Make the split lose ground with width: the sentence turns with it.
    for width in (2, 4, 8):
        epochs[(width, "tensor:2")] = width * 1.6
    report = build_report(cfg, scaling_reports(cfg, epochs), figures=False)
    text = "\n".join(report["sentences"])
    assert (
        "tensor split's speedup over one worker was 0.67x at 1,000 parameters and fell to 0.62x"
        in text
    )


def test_report_files_hold_the_sentences_tables_and_figures(tmp_path):
    cfg = experiments.get("consistency").config("small")
    accuracy = {"async": 0.91, "bulk-synchronous": 0.95, "SSP s=1": 0.93, "SSP s=8": 0.92}
    numbers = _consistency_numbers(cfg, accuracy)
    progress = {"0": [[0.0, 1], [1.0, 10], [2.0, 20]], "1": [[0.0, 1], [1.0, 5], [2.0, 20]]}
    for key, (acc, seconds, history) in numbers.items():
        numbers[key] = (acc, seconds, {**history, "worker_progress": progress})
    report = build_report(cfg, consistency_reports(cfg, numbers))
    write_report(tmp_path, report)
    page = (tmp_path / "report.html").read_text()
    assert html.escape(report["sentences"][0]) in page
    assert page.count("data:image/png;base64,") == len(report["figures"]) == 3
    assert "| logreg | bulk-synchronous | 0.9500 |" in (tmp_path / "report.md").read_text()
    assert load_config(tmp_path / "experiment.json") == cfg
    assert len(list((tmp_path / "figures").glob("*.png"))) == 3


def test_worker_delays_are_each_workers_lag_behind_the_leader():
    grid, delays = worker_delays(
        {"worker_progress": {"0": [[10.0, 0], [12.0, 20]], "1": [[10.0, 0], [12.0, 10]]}},
        samples=3,
    )
    assert grid.tolist() == [0.0, 1.0, 2.0]
    assert delays["0"].tolist() == [0.0, 0.0, 0.0]
    assert delays["1"].tolist() == [0.0, 5.0, 10.0]


def test_results_must_match_the_configuration():
    cfg = experiments.get("consistency").config("tiny")
    reports = [fake_report(p, 0.5) for p in cfg.points]
    assert [r.point for r in match_results(cfg, reports)] == list(cfg.points)
    with pytest.raises(StepError, match="no result for the points"):
        match_results(cfg, reports[:1])
    other = dataclasses.replace(cfg.points[0], seed=9)
    with pytest.raises(StepError, match="matches no point"):
        match_results(cfg, [*reports, fake_report(other, 0.5)])


# --- pipelines ---------------------------------------------------------------------------


def _parameters(path):
    return yaml.safe_load(path.read_text())["root"]["inputDefinitions"]["parameters"]


@pytest.mark.parametrize("name", NAMES)
def test_experiment_pipelines_compile_with_both_compilers(name, tmp_path, cli_env):
    ours, theirs = tmp_path / "distrain.yaml", tmp_path / "kfp.yaml"
    subprocess.run(
        [str(VENV_BIN / "distrain"), "compile", name, "--output", str(ours)],
        check=True,
        env=cli_env,
    )
    subprocess.run(
        [
            str(VENV_BIN / "kfp"),
            "dsl",
            "compile",
            "--py",
            str(ROOT / "pipelines" / "experiments" / f"{name}.py"),
            "--output",
            str(theirs),
        ],
        check=True,
        env=cli_env,
        capture_output=True,
    )
    cfg = experiments.get(name).config("small")
    for path in (ours, theirs):
        params = _parameters(path)
        # The configuration the report checks against is the one the points come from.
        assert ExperimentConfig.from_dict(json.loads(params["config"]["defaultValue"])) == cfg
        for dataset in cfg.datasets():
            points = params[f"points_{dataset}"]["defaultValue"]
            assert [p["run"] for p in points] == [p.run for p in cfg.points_of(dataset)]
        tasks = yaml.safe_load(path.read_text())["root"]["dag"]["tasks"]
        assert "experiment-report" in tasks


def test_experiment_command_refuses_bad_arguments(tmp_path, capsys):
    from distrain.cli import main

    assert main(["experiment", "--output", str(tmp_path)]) == 2
    assert "name an experiment" in capsys.readouterr().err
    assert main(["experiment", "consistency", "--data", str(tmp_path / "none")]) == 2
    assert "does not exist" in capsys.readouterr().err
    (tmp_path / "e.json").write_text("{}")
    assert main(["experiment", "--from", str(tmp_path / "e.json")]) == 2


@pytest.mark.slow
def test_tiny_experiment_runs_through_kfp_local_and_reruns_from_its_config(tmp_path):
    """The consistency experiment at its tiny scale (two runs), then again from its file."""
    from distrain.cli import main

    first, second = tmp_path / "first", tmp_path / "second"
    assert main(["experiment", "consistency", "--scale", "tiny", "--output", str(first)]) == 0
    report = json.loads((first / "report.json").read_text())
    assert len(report["runs"]) == 2 and report["sentences"]
    assert report["runs"][0]["evaluation"]["accuracy"] > 0.2  # 14 classes: 0.07 by chance
    for name in ("report.md", "report.html", "experiment.json", "figures/1.png"):
        assert (first / name).is_file(), name

    assert (
        main(["experiment", "--from", str(first / "experiment.json"), "--output", str(second)]) == 0
    )
    assert (second / "experiment.json").read_text() == (first / "experiment.json").read_text()

    def splits_and_configs(out):
        metas = sorted(out.glob("kfp/*/preprocess/examples/metadata.json"))
        histories = sorted(out.glob("kfp/*/for-loop-*/train/trained/history.json"))
        configs = [json.loads(h.read_text())["config"] for h in histories]
        for c in configs:
            c.pop("data_dir"), c.pop("output_dir")
        return [json.loads(m.read_text())["splits"] for m in metas], sorted(configs, key=json.dumps)

    assert splits_and_configs(first) == splits_and_configs(second)
    assert splits_and_configs(first)[1]  # the histories were found


def test_the_strongly_convex_model_adds_its_l2_penalty_to_the_gradient():
    import numpy as np
    import tensorflow as tf

    from distrain.datasets.info import DatasetInfo
    from distrain.datasets.mnist.models import SOFTMAX_L2, softmax, softmax_l2
    from distrain.train.replica import batch_gradients

    info = DatasetInfo("", "mnist", 10, [str(i) for i in range(10)], {}, {}, {})
    x = tf.random.stateless_uniform((8, 28, 28), seed=(1, 2))
    y = tf.constant(np.arange(8) % 10, tf.int32)
    plain, penalised = softmax(info, 0), softmax_l2(info, 0)
    penalised.set_weights(plain.get_weights())
    grads = {}
    for name, model in (("plain", plain), ("l2", penalised)):
        fn = tf.function(lambda x, y, m=model: batch_gradients(m, m.trainable_variables, x, y))
        grads[name] = [g.numpy() for g in fn(x, y)[2]]
    kernel = plain.trainable_variables[0].numpy()
    # d/dW of l2 * ||W||^2 is 2 l2 W; the bias has no penalty.
    np.testing.assert_allclose(
        grads["l2"][0] - grads["plain"][0], 2 * SOFTMAX_L2 * kernel, atol=1e-6
    )
    np.testing.assert_allclose(grads["l2"][1], grads["plain"][1], atol=1e-7)
