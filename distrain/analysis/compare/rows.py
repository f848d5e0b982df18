"""The comparison's rows: one per run (its repeats summarised), the verdict, time to target.

Input: run reports ``{"run", "history", "evaluation"}`` (one per run, from the
evaluation step). Output: the comparison dict (:func:`build_comparison`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass

import numpy as np

from distrain.base.verdict import Candidate, decide, summarize
from distrain.learning.tasks import QUALITY_KEYS, TASKS, quality_of
from distrain.train.driver import steady
from distrain.train.modes import mode_class, mode_names

# Rows that are not training runs (a majority class, an n-gram): listed last.
BASELINE = "baseline"

# (key, header, format) of the table's columns.
COLUMNS = [
    ("name", "run", "{}"),
    ("mode", "mode", "{}"),
    ("workers", "workers", "{}"),
    ("repeats", "repeats", "{}"),
    ("parameter_servers", "PS", "{}"),
    ("aggregation", "aggregate", "{}"),
    ("transport", "transport", "{}"),
    ("accuracy", "accuracy", "{:.4f}"),
    ("macro_f1", "macro F1", "{:.4f}"),
    ("bits_per_char", "bits/char", "{:.3f}"),
    # A language model's scored rows: the worst row's bits/char (the spread behind the mean).
    ("row_bits_per_char_max", "worst row b/c", "{:.3f}"),
    # Autoencoders: mean squared error per pixel and the peak signal-to-noise ratio.
    ("reconstruction_mse", "recon MSE", "{:.4f}"),
    ("psnr", "PSNR dB", "{:.1f}"),
    # Regressions: the test set's mean squared and absolute errors and R².
    ("mse", "MSE", "{:.4f}"),
    ("mae", "MAE", "{:.4f}"),
    ("r2", "R²", "{:.4f}"),
    ("train_seconds", "train s", "{:.1f}"),
    ("epoch_seconds", "s/epoch", "{:.2f}"),
    ("examples_per_second", "examples/s", "{:,.0f}"),
    ("speedup", "speedup", "{:.2f}"),
    ("efficiency", "efficiency", "{:.2f}"),
    ("time_to_target", "time to target s", "{:.1f}"),
    # A learning-rate search (--tune): the rate each row trained at, what its search cost
    # and the time to target with the search's seconds before it.
    ("learning_rate", "learning rate", "{:.3g}"),
    ("search_process_seconds", "search process-s", "{:,.0f}"),
    ("time_to_tuned_model", "time to tuned model s", "{:.1f}"),
    ("target_reached", "reached", "{}"),
    # Time to target = seconds per step (hardware) x steps to target (statistics).
    ("seconds_per_step", "s/step", "{:.4f}"),
    ("steps_to_target", "steps to target", "{:,.0f}"),
    ("global_batch_size", "batch", "{}"),
    ("staleness_mean", "staleness mean", "{:.2f}"),
    ("staleness_p95", "p95", "{:.1f}"),
    ("staleness_max", "max", "{}"),
    # Stale-synchronous runs: the workers' summed seconds waiting for the slowest, and the
    # widest lead (in clocks) any worker started a step with.
    ("blocked_seconds", "blocked s", "{:.1f}"),
    ("clock_gap_max", "clock gap", "{}"),
    # Model averaging: exchanges, what each worker sent in them, and the replicas' mean
    # distance to their average at the last one.
    ("communication_rounds", "rounds", "{:,}"),
    ("megabytes_per_worker", "MB/worker", "{:,.1f}"),
    ("divergence", "divergence", "{:.3f}"),
    # Model parallelism: how the model is split, and what the fullest rank held.
    ("parallelism", "split", "{}"),
    # Runs whose ranks train on different data: each data rank's loss in the last epoch.
    ("rank_loss", "loss by rank", "{}"),
    ("parameters_per_rank", "params/rank", "{:,}"),
    ("rank_memory_mb", "MB/rank", "{:,.0f}"),
]


# What a run's evaluation must have one of: its quality, in its task's terms.
QUALITY = QUALITY_KEYS


def _outlier_note(name: str, evaluation: dict) -> str:
    """A note naming a language model's scored rows that stand out from the others."""
    rows = evaluation["outlier_rows"]
    listed = ", ".join(
        f"row {r['row']}: {r['bits_per_char']:.2f} (unigram {r['unigram_bits_per_char']:.2f})"
        for r in rows[:5]
    )
    more = f" and {len(rows) - 5} more" if len(rows) > 5 else ""
    return (
        f"{name}: {len(rows)} of {len(evaluation['row_bits_per_char'])} scored rows stand out "
        f"(median row {evaluation['row_bits_per_char_median']:.2f} bits/char): {listed}{more}; "
        "its bits/char averages them in"
    )


def _rank_loss(history: dict) -> str | None:
    """The last epoch's loss on each data rank, e.g. ``0.212 / 0.230`` (None: one rank)."""
    last = (history.get("epochs") or [{}])[-1]
    losses = last.get("rank_loss")
    return " / ".join(f"{v:.3f}" for v in losses) if losses else None


def _epoch_seconds(history: dict) -> float | None:
    """Training seconds per epoch, over the epochs after the first (tracing) if there are more."""
    epochs = steady([e for e in history.get("epochs") or [] if "step_seconds" in e])
    return sum(e["step_seconds"] for e in epochs) / len(epochs) if epochs else None


@dataclass(frozen=True)
class CompareConfig:
    """How runs are compared.

    Attributes:
        baseline: Mode whose run is the speedup reference (its first run).
        target_accuracy: Validation accuracy whose wall-clock time each run reports.
    """

    baseline: str = "single"
    target_accuracy: float = 0.95


def time_to_target(
    epochs: list[dict],
    target: float,
    x: str = "wall_seconds",
    value: Callable[[dict], float | None] | None = None,
    lower_is_better: bool = False,
) -> float | None:
    """Wall-clock seconds (or epoch field ``x``) until an epoch's quality reached ``target``.

    The one time-to-target rule: linear interpolation between the epochs around the
    crossing (from 0 before the first epoch); None when it never got there.

    Args:
        epochs: A history's epochs.
        target: The quality to reach.
        x: The epoch field that counts time (``steps`` gives steps to target).
        value: An epoch's quality (default: its validation accuracy); epochs without
            one (None) are skipped.
        lower_is_better: The target is reached by falling to it (a loss, bits/char).
    """
    value = value or (lambda e: e.get("val_accuracy"))
    prev_t, prev_v = 0.0, None
    for e in epochs:
        v, t = value(e), e.get(x)
        if v is None or t is None:
            continue
        if (v <= target) if lower_is_better else (v >= target):
            if prev_v is None or v == prev_v:
                return float(t)
            frac = (target - prev_v) / (v - prev_v)
            return float(prev_t + max(0.0, min(1.0, frac)) * (t - prev_t))
        prev_t, prev_v = t, v
    return None


def _steps(history: dict) -> tuple[float | None, float | None]:
    """Updates per training run and seconds per update: ``(steps, seconds_per_step)``.

    Updates are counted as examples over the effective (global) batch, as
    :func:`steps_to_target` counts them, so that seconds per step x steps to target
    gives the time to target.
    """
    batch = history.get("global_batch_size")
    examples = history.get("total_examples")
    seconds = history.get("train_seconds")
    if not batch or not examples or not seconds:
        return None, None
    steps = examples / batch
    return steps, seconds / steps


def steps_to_target(history: dict, target: float) -> float | None:
    """Updates (examples over the effective batch) until validation accuracy reached ``target``."""
    batch = history.get("global_batch_size")
    if not batch:
        return None
    epochs = [
        {**e, "steps": e["examples"] / batch}
        for e in history.get("epochs") or []
        if e.get("examples") is not None
    ]
    return time_to_target(epochs, target, x="steps")


def _staleness(history: dict) -> tuple[float | None, float | None, int | None]:
    delays = history.get("staleness")
    if not delays:
        return None, None, None
    values = np.asarray(delays, dtype=np.float64)
    return float(values.mean()), float(np.percentile(values, 95)), int(values.max())


def _check(report: dict, index: int) -> str:
    name = report.get("run", {}).get("name", f"#{index}")
    for key in ("run", "history", "evaluation"):
        if key not in report:
            raise ValueError(f"run report {name}: missing {key!r}")
    if report["run"].get("mode") == "baseline":
        return name  # a count-based baseline: no training history
    if "train_seconds" not in (report["history"] or {}):
        raise ValueError(f"run report {name}: history has no 'train_seconds'")
    if not any(key in (report["evaluation"] or {}) for key in QUALITY):
        raise ValueError(f"run report {name}: evaluation has none of {', '.join(QUALITY)}")
    for key in ("name", "mode", "workers"):
        if key not in report["run"]:
            raise ValueError(f"run report {name}: run has no {key!r}")
    return name


# Numbers measured on every repeat: each row gives their median under the key, the 95 %
# interval under ``KEY_interval`` and the raw values under ``repeat_values[KEY]``.
SUMMARIZED = (
    "accuracy",
    "macro_f1",
    "bits_per_char",
    "reconstruction_mse",
    "psnr",
    "mse",
    "mae",
    "r2",
    "train_seconds",
    "epoch_seconds",
    "examples_per_second",
    "seconds_per_step",
    "time_to_target",
    "steps_to_target",
)


# Means over the test examples whose evaluation gives their own 95 % interval
# (``KEY_interval``, :func:`distrain.learning.metrics.regression_metrics`): a row's interval is at
# least that of its median repeat, as an accuracy's is at least its Wilson interval.
OWN_INTERVAL = ("mse", "mae", "r2")


def _seed(report: dict):
    return ((report.get("history") or {}).get("config") or {}).get("seed")


def _run_row(r: dict, config: CompareConfig) -> dict:
    """One repeat's row, before repeats are summarized and speedups computed."""
    run, ev = r["run"], r["evaluation"]
    quality = {
        "task": ev.get("task"),
        "accuracy": ev.get("accuracy"),
        "macro_f1": ev.get("macro_f1"),
        "bits_per_char": ev.get("bits_per_char"),
        "row_bits_per_char_max": ev.get("row_bits_per_char_max"),
        "reconstruction_mse": ev.get("reconstruction_mse"),
        "psnr": ev.get("psnr"),
        **{key: ev.get(key) for key in OWN_INTERVAL},
        "example_intervals": {key: ev.get(f"{key}_interval") for key in OWN_INTERVAL},
        "sample": ev.get("sample"),
        "prompt": ev.get("prompt"),
        "test_examples": ev.get("num_examples"),
    }
    if run["mode"] == BASELINE:
        return {"name": run["name"], "mode": BASELINE, "workers": None, **quality}
    hist = r["history"]
    mean, p95, worst = _staleness(hist)
    # The mode's own cells: parameter servers, aggregation, and how the workers
    # exchanged gradients or variables (the transport).

    mode_cells = mode_class(run["mode"]).columns(run, hist)
    to_target = time_to_target(hist.get("epochs", []), config.target_accuracy)
    steps = steps_to_target(hist, config.target_accuracy)
    # Seconds per step up to the target (start-up, tracing and validation included), so
    # that it times steps to target gives the time to target; the whole run's where the
    # target was never reached.
    per_step = to_target / steps if to_target and steps else _steps(hist)[1]
    return {
        "name": run["name"],
        "mode": run["mode"],
        # Every training process: hybrid:D:M has D x M.
        "workers": int(run.get("processes", run["workers"])),
        **mode_cells,
        **quality,
        "learning_rate": (hist.get("config") or {}).get("learning_rate"),
        "train_seconds": float(hist["train_seconds"]),
        "examples_per_second": float(hist.get("examples_per_second", 0.0)),
        "epoch_seconds": _epoch_seconds(hist),
        "rank_loss": _rank_loss(hist),
        "time_to_target": to_target,
        "seconds_per_step": per_step,
        "steps_to_target": steps,
        "global_batch_size": hist.get("global_batch_size"),
        "staleness_mean": mean,
        "staleness_p95": p95,
        "staleness_max": worst,
        "dropped_gradients": hist.get("dropped_gradients"),
        "staleness_by_worker": hist.get("staleness_by_worker"),
    }


def _summarized(repeats: list[dict]) -> dict:
    """The repeats of one run spec as one row: medians, 95 % intervals and raw values."""
    row = dict(repeats[0])
    row["repeats"] = len(repeats)
    # A language model's worst scored row over every repeat.
    worst_rows = [r["row_bits_per_char_max"] for r in repeats if r.get("row_bits_per_char_max")]
    row["row_bits_per_char_max"] = max(worst_rows) if worst_rows else None
    row["repeat_values"] = {}
    for key in SUMMARIZED:
        values = [r.get(key) for r in repeats]
        if all(v is None for v in values):
            row[f"{key}_interval"] = None
            continue
        # An accuracy is a proportion of the test set: its binomial interval holds even
        # with one repeat, and repeats never claim less noise than the test set has.
        n = row.get("test_examples") if key == "accuracy" else None
        own = [r["example_intervals"][key] for r in repeats] if key in OWN_INTERVAL else None
        summary = summarize(values, binomial_n=n, example_intervals=own)
        row[key] = summary.median
        row[f"{key}_interval"] = list(summary.interval) if summary.interval else None
        row["repeat_values"][key] = summary.values
    row.pop("example_intervals")
    task = TASKS.get(row.get("task") or "")
    if row["mode"] != BASELINE and (task is None or task.accuracy_target):
        reached = sum(r.get("time_to_target") is not None for r in repeats)
        row["target_reached"] = f"{reached}/{len(repeats)}"
        row["reached"] = reached
    return row


def _cost(row: dict) -> float:
    """What a run occupies: its training processes and parameter servers."""
    servers = row.get("parameter_servers")
    return float(row.get("workers") or 0) + (servers if isinstance(servers, int | float) else 0)


def verdict_of(rows: list[dict]) -> dict:
    """The comparison's verdict (:func:`distrain.base.verdict.decide`) over its trained rows.

    On time to the target where a run reached it in every repeat; otherwise on the quality
    itself (the quality its task declares, and which way is better: :func:`quality_of`).
    A task without an accuracy target (a regression) is decided on its quality, and says so.
    """
    trained = [r for r in rows if r["mode"] != BASELINE]
    if not trained:
        return {
            "criterion": None,
            "winner": None,
            "tied": [],
            "cheapest": None,
            "never_reached": [],
            "reason": "No trained run to decide on.",
        }
    if any(r.get("reached") == r["repeats"] for r in trained):
        candidates = [
            Candidate(
                r["name"],
                r["time_to_target"] if r.get("reached") == r["repeats"] else None,
                r.get("time_to_target_interval"),
                _cost(r),
                reached=r.get("reached", 0),
                repeats=r["repeats"],
            )
            for r in trained
        ]
        return decide(candidates, "time_to_target", lower_is_better=True)
    key, lower = quality_of(trained[0])
    candidates = [
        Candidate(r["name"], r.get(key), r.get(f"{key}_interval"), _cost(r), repeats=r["repeats"])
        for r in trained
    ]
    verdict = decide(candidates, key, lower_is_better=lower)
    task = TASKS.get(trained[0].get("task") or "")
    if task is not None and not task.accuracy_target:
        direction = "lower" if lower else "higher"
        why = (
            f"A {task.name} has no accuracy target; decided on test {key.upper()} "
            f"({direction} is better). "
        )
    else:
        why = "No run reached the target; decided on the quality itself. "
    verdict["reason"] = why + verdict["reason"]
    return verdict


def build_comparison(reports: list[dict], config: CompareConfig | None = None) -> dict:
    """One row per run spec with cost and quality side by side, intervals and a verdict.

    Reports of the same run name with different seeds are repeats of one spec: its row
    gives their medians, 95 % intervals (``KEY_interval``) and raw values
    (``repeat_values``).

    Args:
        reports: Run reports.
        config: Baseline and target.

    Returns:
        ``{"rows", "verdict", "best", "baseline", "target_accuracy", "notes"}``; ``best``
        is the best point estimate (what a quality gate's ``best`` scope reads), never
        the verdict.

    Raises:
        ValueError: A report lacks a field, or two runs share a name and a seed.
    """
    config = config or CompareConfig()
    if not reports:
        raise ValueError("no run reports to compare")
    names = [_check(r, i) for i, r in enumerate(reports)]
    keys = [(n, _seed(r)) for n, r in zip(names, reports, strict=True)]
    dupes = sorted({n for n, seed in keys if keys.count((n, seed)) > 1})
    if dupes:
        raise ValueError(f"duplicate run names: {', '.join(dupes)} (the same name and seed)")

    def order(report):
        run = report["run"]

        order = [*mode_names(), BASELINE]
        mode = run["mode"]
        rank = order.index(mode) if mode in order else len(order)
        return rank, run["workers"], run["name"], _seed(report) or 0

    reports = sorted(reports, key=order)
    groups: dict[str, list[dict]] = {}
    for r in reports:
        groups.setdefault(r["run"]["name"], []).append(_run_row(r, config))
    rows = [_summarized(repeats) for repeats in groups.values()]
    base = next((row for row in rows if row["mode"] == config.baseline), None)
    notes = []
    if base is None:
        notes.append(f"no {config.baseline!r} run: speedup and efficiency need it as the reference")
    for r in reports:
        if r["evaluation"].get("outlier_rows"):
            notes.append(_outlier_note(r["run"]["name"], r["evaluation"]))
    for row in rows:
        if row["mode"] == BASELINE:
            continue
        seconds = row["train_seconds"]
        row["speedup"] = base["train_seconds"] / seconds if base and seconds > 0 else None
        row["efficiency"] = row["speedup"] / row["workers"] if row["speedup"] else None
    candidates = [row for row in rows if row["mode"] != "baseline"] or rows
    key, lower = quality_of(candidates[0])
    if lower:  # a loss-like score: the lower, the better
        best = min(candidates, key=lambda row: (row[key], row.get("train_seconds") or 0))
    else:
        best = max(candidates, key=lambda row: (row[key] or 0, -(row.get("train_seconds") or 0)))
    return {
        "rows": rows,
        "verdict": verdict_of(rows),
        "best": best["name"],
        "baseline": base["name"] if base is not None else None,
        "target_accuracy": config.target_accuracy,
        "config": asdict(config),
        "notes": notes,
    }
