"""Side-by-side comparison of training runs: what each mode costs and buys.

Input: run reports ``{"run", "history", "evaluation"}`` (one per run, from the
evaluation step). Output: a comparison dict (one row per run), rendered as JSON,
Markdown, a terminal table and a self-contained HTML page with plots.
"""

from __future__ import annotations

import base64
import html
import io
import json
import os
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from distrain.machine import text as environment_text
from distrain.train.tasks import QUALITY_KEYS, quality_of
from distrain.verdict import Candidate, decide, interval_text, summarize

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
    ("train_seconds", "train s", "{:.1f}"),
    ("epoch_seconds", "s/epoch", "{:.2f}"),
    ("examples_per_second", "examples/s", "{:,.0f}"),
    ("speedup", "speedup", "{:.2f}"),
    ("efficiency", "efficiency", "{:.2f}"),
    ("time_to_target", "time to target s", "{:.1f}"),
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
    from distrain.train.driver import steady

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
    "train_seconds",
    "epoch_seconds",
    "examples_per_second",
    "seconds_per_step",
    "time_to_target",
    "steps_to_target",
)


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
    from distrain.train.modes import mode_class

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
        summary = summarize(values, binomial_n=n)
        row[key] = summary.median
        row[f"{key}_interval"] = list(summary.interval) if summary.interval else None
        row["repeat_values"][key] = summary.values
    if row["mode"] != BASELINE:
        reached = sum(r.get("time_to_target") is not None for r in repeats)
        row["target_reached"] = f"{reached}/{len(repeats)}"
        row["reached"] = reached
    return row


def _cost(row: dict) -> float:
    """What a run occupies: its training processes and parameter servers."""
    servers = row.get("parameter_servers")
    return float(row.get("workers") or 0) + (servers if isinstance(servers, int | float) else 0)


def verdict_of(rows: list[dict]) -> dict:
    """The comparison's verdict (:func:`distrain.verdict.decide`) over its trained rows.

    On time to the target where a run reached it in every repeat; otherwise on the quality
    itself (the quality its task declares, and which way is better: :func:`quality_of`).
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
    verdict["reason"] = (
        "No run reached the target; decided on the quality itself. " + verdict["reason"]
    )
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
        from distrain.train.modes import mode_names

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


# The headline numbers a pipeline logs as KFP Metrics, one key per (run, number): the keys
# stay the same from one pipeline run to the next, so that KFP's run-compare page lines
# them up. (key in the row, metric name)
HEADLINE = (
    ("repeats", "repeats"),
    ("accuracy", "accuracy"),
    ("bits_per_char", "bits_per_char"),
    ("reconstruction_mse", "reconstruction_mse"),
    ("time_to_target", "time_to_target_seconds"),
    ("seconds_per_step", "seconds_per_step"),
    ("steps_to_target", "steps_to_target"),
    ("examples_per_second", "examples_per_second"),
    ("train_seconds", "train_seconds"),
)


def headline_metrics(comparison: dict) -> dict[str, float]:
    """Each trained run's headline numbers as ``{"RUN/NAME": value}`` (with 95 % bounds).

    ``NAME`` is one of :data:`HEADLINE`'s metric names, ``NAME_low`` / ``NAME_high`` its
    interval's ends; numbers a run does not have are left out (KFP metrics are numbers).
    """
    out = {}
    for row in comparison["rows"]:
        if row["mode"] == BASELINE:
            continue
        for key, name in HEADLINE:
            value = row.get(key)
            if isinstance(value, int | float) and not isinstance(value, bool):
                out[f"{row['name']}/{name}"] = float(value)
            interval = row.get(f"{key}_interval")
            if interval:
                out[f"{row['name']}/{name}_low"] = float(interval[0])
                out[f"{row['name']}/{name}_high"] = float(interval[1])
    verdict = comparison.get("verdict") or {}
    out["verdict/decided"] = 1.0 if verdict.get("winner") else 0.0
    out["verdict/tied_runs"] = float(len(verdict.get("tied") or []))
    out["verdict/runs_missing_target"] = float(len(verdict.get("never_reached") or []))
    return out


def columns(comparison: dict) -> list[tuple[str, str, str]]:
    """The table's columns: those with a value in at least one row."""
    return [c for c in COLUMNS if any(row.get(c[0]) is not None for row in comparison["rows"])]


# Cells that show their 95 % interval beside the median (the rest have it in the JSON).
WITH_INTERVAL = (
    "accuracy",
    "bits_per_char",
    "reconstruction_mse",
    "time_to_target",
    "examples_per_second",
)


def _cell(row: dict, key: str, fmt: str, intervals: bool = True) -> str:
    value = row.get(key)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    text = fmt.format(value)
    interval = row.get(f"{key}_interval")
    if intervals and key in WITH_INTERVAL and interval:
        text += f" ({interval_text(interval, fmt)})"
    return text


def plan_table(comparison: dict) -> list[str]:
    """The plan's predictions as Markdown table lines (none without a plan)."""
    predictions = (comparison.get("plan") or {}).get("predictions") or []
    if not predictions:
        return []
    to = "target" if predictions[0].get("basis", "to the target") == "to the target" else "end"
    lines = [
        f"| measured | at the plan's scale | s/step | effective batch | steps to {to} | "
        f"time to {to} s |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for p in predictions:
        cells = [
            p["run"],
            p.get("at_scale") or f"refused: {p.get('refused')}",
            _cell(p, "step_seconds", "{:.5f}"),
            _cell(p, "effective_batch", "{:,}"),
            _cell(p, "steps_to_target", "{:,.0f}"),
            _cell(p, "time_to_target", "{:.2f}"),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def verdict_sentence(comparison: dict) -> str:
    """The verdict in one sentence, with its reason."""
    verdict = comparison.get("verdict") or {}
    return verdict.get("reason") or "No verdict."


def render_markdown(comparison: dict) -> str:
    """The comparison as a Markdown document (a table, the best run, notes)."""
    lines = [
        "# Training runs compared",
        "",
        f"Speedup is against `{comparison['baseline'] or 'n/a'}` (its training time over "
        "each run's); efficiency is speedup / workers; time to target is the wall-clock "
        f"time to reach validation accuracy {comparison['target_accuracy']}, seconds per "
        "step up to it (hardware: compute, communication, start-up) x steps to target "
        "(statistics), a step being one update of the effective batch; numbers in "
        "brackets are 95 % intervals (over the repeats; for an accuracy at least the "
        "binomial interval of the test set); staleness "
        "is the number of parameter versions between the one a gradient was computed on and "
        "the one it was applied to (or dropped at); transport is how the workers exchanged "
        "gradients (Horovod's mpi or gloo controller for sync runs, TensorFlow's gRPC to the "
        "parameter servers for async and syncreplicas).",
        "",
        "| " + " | ".join(h for _, h, _ in columns(comparison)) + " |",
        "|"
        + "|".join("---" if k in ("name", "mode") else "---:" for k, _, _ in columns(comparison))
        + "|",
    ]
    for row in comparison["rows"]:
        lines.append("| " + " | ".join(_cell(row, k, f) for k, _, f in columns(comparison)) + " |")
    per_worker = [r for r in comparison["rows"] if r.get("staleness_by_worker")]
    if per_worker:
        lines += ["", "Staleness per worker (mean / max):", ""]
        for row in per_worker:
            cells = ", ".join(
                f"worker {w}: {s['mean']:.2f} / {s['max']}"
                for w, s in row["staleness_by_worker"].items()
            )
            dropped = row.get("dropped_gradients")
            tail = f"; {dropped} stale gradients dropped" if dropped else ""
            lines.append(f"- {row['name']}: {cells}{tail}")
    lines += ["", f"**Verdict:** {verdict_sentence(comparison)}"]
    if comparison.get("plan"):
        lines += ["", f"**Plan:** {comparison['plan']['sentence']}", "", *plan_table(comparison)]
    for row in comparison["rows"]:
        if row.get("sample"):
            lines += [
                "",
                f"Text generated by {row['name']} after the prompt (validation text in italics):",
                "",
                "> *" + " ".join(row["prompt"].split()) + "* " + " ".join(row["sample"].split()),
            ]
    lines += [f"- note: {n}" for n in comparison.get("notes", [])]
    if comparison.get("environment"):
        lines += ["", environment_text(comparison["environment"])]
    return "\n".join(lines) + "\n"


def render_text_table(comparison: dict) -> str:
    """The comparison as an aligned plain-text table for a terminal."""
    cols = columns(comparison)
    table = [[h for _, h, _ in cols]]
    table += [[_cell(row, k, f) for k, _, f in cols] for row in comparison["rows"]]
    widths = [max(len(r[i]) for r in table) for i in range(len(cols))]
    out = []
    for j, r in enumerate(table):
        cells = [
            c.ljust(w) if i < 2 else c.rjust(w)
            for i, (c, w) in enumerate(zip(r, widths, strict=True))
        ]
        out.append("  ".join(cells))
        if j == 0:
            out.append("  ".join("-" * w for w in widths))
    out.append(f"verdict: {verdict_sentence(comparison)}")
    if comparison.get("plan"):
        out.append(f"plan: {comparison['plan']['sentence']}")
    out += [f"note: {n}" for n in comparison.get("notes", [])]
    return "\n".join(out)


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def plots(comparison: dict, reports: list[dict]) -> list[tuple[str, str]]:
    """The comparison's figures as ``(title, base64 PNG)`` pairs."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    repeats_of: dict[str, list[dict]] = {}
    for r in reports:
        if r.get("history"):
            repeats_of.setdefault(r["run"]["name"], []).append(r)
    by_name = {name: runs[0] for name, runs in repeats_of.items()}  # a run's first repeat
    names = [row["name"] for row in comparison["rows"] if row["name"] in by_name]
    figures = []
    for key, label, title in (
        ("loss", "training loss", "Training loss against wall-clock time"),
        ("val_accuracy", "validation accuracy", "Validation accuracy against wall-clock time"),
    ):
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        for colour, name in enumerate(names):
            # Every repeat, in the run's colour; the label once.
            for i, report in enumerate(repeats_of[name]):
                # Epochs without validation (validation_freq > 1) have no point on that plot.
                epochs = [e for e in report["history"].get("epochs", []) if e.get(key) is not None]
                t = [e["wall_seconds"] for e in epochs]
                ax.plot(
                    t,
                    [e[key] for e in epochs],
                    marker="o",
                    color=f"C{colour % 10}",
                    alpha=1.0 if i == 0 else 0.45,
                    label=name if i == 0 else None,
                )
        if key == "val_accuracy":
            ax.axhline(comparison["target_accuracy"], color="grey", ls="--", lw=1, label="target")
        else:
            ax.set_yscale("log")
        ax.set(xlabel="wall-clock seconds", ylabel=label, title=title)
        ax.grid(alpha=0.3)
        ax.legend()
        figures.append((title, _png(fig)))

    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    throughput = [
        row["examples_per_second"] for row in comparison["rows"] if row["name"] in by_name
    ]
    bars = ax.bar(names, throughput, color="tab:blue")
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in throughput], fontsize=8)
    ax.set(ylabel="examples / second", title="Training throughput per run")
    ax.grid(axis="y", alpha=0.3)
    figures.append(("Training throughput per run", _png(fig)))

    stale = [n for n in names if by_name[n]["history"].get("staleness")]
    if any(max(by_name[n]["history"]["staleness"]) > 0 for n in stale):
        fig, ax = plt.subplots(figsize=(6.5, 3.5))
        top = max(max(by_name[n]["history"]["staleness"]) for n in stale)
        bins = np.arange(-0.5, top + 1.5, 1.0)
        for n in stale:
            ax.hist(by_name[n]["history"]["staleness"], bins=bins, alpha=0.5, label=n)
        ax.set(xlabel="staleness (parameter versions)", ylabel="gradients", yscale="log")
        ax.set_title("Gradient staleness")
        ax.legend()
        figures.append(("Gradient staleness", _png(fig)))

    progress = [n for n in names if by_name[n]["history"].get("worker_progress")]
    if progress:
        fig, axes = plt.subplots(1, len(progress), figsize=(4.2 * len(progress), 3.3))
        for ax, n in zip(np.atleast_1d(axes), progress, strict=True):
            for worker, points in sorted(by_name[n]["history"]["worker_progress"].items()):
                pts = np.asarray(points)
                ax.plot(pts[:, 0] - pts[0, 0], pts[:, 1], label=f"worker {worker}")
            ax.set(xlabel="wall-clock seconds", ylabel="steps", title=f"{n}: steps per worker")
            ax.legend(fontsize=8)
        figures.append(("Progress of each worker", _png(fig)))

    # Model averaging: how far the replicas drift apart between exchanges.
    drifting = [n for n in names if by_name[n]["history"].get("divergence")]
    if drifting:
        fig, ax = plt.subplots(figsize=(6.5, 3.5))
        for n in drifting:
            pts = np.asarray(by_name[n]["history"]["divergence"])
            ax.plot(pts[:, 0], pts[:, 1], marker=".", label=n)
        ax.set(
            xlabel="wall-clock seconds",
            ylabel="mean distance to the average",
            title="Divergence between replicas at each exchange",
            yscale="log",
        )
        ax.grid(alpha=0.3)
        ax.legend()
        figures.append(("Divergence between replicas", _png(fig)))
    figures += _interval_plots(comparison)
    return figures


def _interval_plots(comparison: dict) -> list[tuple[str, str]]:
    """Each run's median with its 95 % interval as an error bar: the verdict's numbers."""
    import matplotlib.pyplot as plt

    figures = []
    rows = [r for r in comparison["rows"] if r["mode"] != BASELINE]
    for key, label in (
        ("time_to_target", f"seconds to {comparison['target_accuracy']}"),
        ("accuracy", "test accuracy"),
        ("bits_per_char", "bits per character"),
        ("reconstruction_mse", "reconstruction MSE"),
    ):
        shown = [r for r in rows if r.get(key) is not None]
        if not shown:
            continue
        values = np.asarray([r[key] for r in shown], dtype=float)
        low = [r[key] - r[f"{key}_interval"][0] if r.get(f"{key}_interval") else 0 for r in shown]
        high = [r[f"{key}_interval"][1] - r[key] if r.get(f"{key}_interval") else 0 for r in shown]
        fig, ax = plt.subplots(figsize=(6.5, 3.5))
        ax.errorbar(
            [r["name"] for r in shown], values, yerr=[low, high], fmt="o", capsize=5, lw=1.5
        )
        ax.set(ylabel=label, title=f"{label}: median and 95 % interval per run")
        ax.grid(axis="y", alpha=0.3)
        ax.tick_params(axis="x", labelrotation=20)
        title = f"{label[:1].upper()}{label[1:]} with 95 % intervals"
        figures.append((title, _png(fig)))
    return figures


def _html_cell(row: dict, key: str, fmt: str) -> str:
    """A table cell: the median, its 95 % interval on a second, smaller line."""
    text = html.escape(_cell(row, key, fmt, intervals=False))
    interval = row.get(f"{key}_interval")
    if key in WITH_INTERVAL and interval and row.get(key) is not None:
        text += f"<br><small>{html.escape(interval_text(interval, fmt))}</small>"
    return text


def render_html(comparison: dict, reports: list[dict]) -> str:
    """A self-contained HTML page: the verdict, the table and the plots (inline PNG).

    The table fits a 1,400-pixel-wide page: headers wrap, intervals sit under their
    medians; the winner's row (or the tied runs') is highlighted.
    """
    cols = columns(comparison)
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in cols)
    verdict = comparison.get("verdict") or {}
    body = ""
    for row in comparison["rows"]:
        cls = ""
        if row["name"] == verdict.get("winner"):
            cls = ' class="winner"'
        elif row["name"] in (verdict.get("tied") or []):
            cls = ' class="tied"'
        cells = "".join(f"<td>{_html_cell(row, k, f)}</td>" for k, _, f in cols)
        body += f"<tr{cls}>{cells}</tr>\n"
    images = "".join(
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(title)}</figcaption></figure>\n"
        for title, data in plots(comparison, reports)
    )
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in comparison.get("notes", []))
    notes += "".join(
        f"<li>Generated by <b>{html.escape(row['name'])}</b> after the prompt:"
        f"<pre><i>{html.escape(row['prompt'] or '')}</i>{html.escape(row['sample'])}</pre></li>"
        for row in comparison["rows"]
        if row.get("sample")
    )
    plan = ""
    if comparison.get("plan"):
        rows_md = plan_table(comparison)
        cells = [[c.strip() for c in line.strip("|").split("|")] for line in rows_md]
        plan_head = "".join(f"<th>{html.escape(c)}</th>" for c in cells[0]) if cells else ""
        plan_body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in cells[2:]
        )
        plan = (
            f'<p class="verdict"><b>Plan:</b> {html.escape(comparison["plan"]["sentence"])}</p>'
            f"<table><thead><tr>{plan_head}</tr></thead><tbody>{plan_body}</tbody></table>"
        )
    env = comparison.get("environment")
    machine = f"<p><small>{html.escape(environment_text(env))}</small></p>" if env else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>distrain: runs compared</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1em; color: #222; max-width: 1380px; }}
table {{ border-collapse: collapse; font-size: 0.72em; max-width: 100%; }}
th, td {{ border: 1px solid #ccc; padding: 0.2em 0.3em; text-align: right; }}
th {{ background: #f3f3f3; white-space: normal; }}
td:first-child, td:nth-child(2) {{ text-align: left; }}
td small {{ color: #666; white-space: nowrap; }}
tr.winner {{ background: #e8f5e9; font-weight: 600; }}
tr.tied {{ background: #f4f8fc; }}
p.verdict {{ font-size: 1.1em; }}
figure {{ display: inline-block; margin: 1em 1em 0 0; max-width: 100%; }}
figure img {{ max-width: 100%; }}
figcaption {{ text-align: center; font-size: 0.85em; color: #555; }}
</style></head><body>
<h1>Training runs compared</h1>
<p class="verdict"><b>Verdict:</b> {html.escape(verdict_sentence(comparison))}</p>
<p>Speedup against <code>{html.escape(str(comparison["baseline"]))}</code>; efficiency =
speedup / workers; time to target = wall-clock seconds to validation accuracy
{comparison["target_accuracy"]} = seconds per step up to it (hardware: compute,
communication, start-up) &times; steps to target (statistics), a step being one update of
the effective batch. Under each median: its 95 %
interval (over the repeats; for an accuracy at least the test set's binomial interval).</p>
<table><thead><tr>{head}</tr></thead><tbody>
{body}</tbody></table>
{plan}
{machine}
<ul>{notes}</ul>
{images}</body></html>
"""


def write_comparison(
    out_dir: str | os.PathLike,
    reports: list[dict],
    config: CompareConfig | None = None,
    environment: dict | None = None,
    plan: str = "",
) -> dict:
    """Writes ``comparison.json`` (with the reports under ``runs``), ``.md`` and ``.html``.

    ``environment`` (:func:`distrain.machine.describe`) is recorded as the comparison's
    ``environment`` and said under the table. ``plan`` (``workers=16,link_gbps=25``) adds
    the cost model's recommendation at that scale (:mod:`distrain.plan`) as ``plan``.
    """
    comparison = build_comparison(reports, config)
    if environment:
        comparison["environment"] = environment
    if plan:
        from distrain.plan import Plan, build_plan

        comparison["plan"] = build_plan(comparison, reports, Plan.parse(plan))
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps({**comparison, "runs": reports}, indent=2))
    (out / "comparison.md").write_text(render_markdown(comparison))
    (out / "comparison.html").write_text(render_html(comparison, reports))
    return comparison
