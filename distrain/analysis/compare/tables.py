"""The comparison as tables: Markdown, the terminal's, and the headline numbers KFP logs."""

from __future__ import annotations

import numpy as np

from distrain.analysis.compare.rows import BASELINE, COLUMNS
from distrain.analysis.plan import format_seconds, format_span
from distrain.base.machine import text as environment_text
from distrain.base.verdict import interval_text

# The headline numbers a pipeline logs as KFP Metrics, one key per (run, number): the keys
# stay the same from one pipeline run to the next, so that KFP's run-compare page lines
# them up. (key in the row, metric name)
HEADLINE = (
    ("repeats", "repeats"),
    ("accuracy", "accuracy"),
    ("bits_per_char", "bits_per_char"),
    ("reconstruction_mse", "reconstruction_mse"),
    ("mse", "mse"),
    ("mae", "mae"),
    ("r2", "r2"),
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
    "mse",
    "mae",
    "r2",
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
    lines = [
        "| measured | at the plan's scale | a step | effective batch | steps | steps from | "
        "time | interval |",
        "|---|---|---:|---:|---:|---|---:|---|",
    ]
    for p in predictions:
        cells = [
            p["run"],
            p.get("at_scale") or f"refused: {p.get('refused')}",
            format_seconds(p.get("step_seconds")),
            _cell(p, "effective_batch", "{:,}"),
            _cell(p, "steps_to_target", "{:,.0f}"),
            p.get("basis") or "—",
            format_seconds(p.get("time_to_target")),
            format_span(p.get("time_interval")) if p.get("time_interval") else "not ranked",
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
