"""The comparison as a self-contained HTML page: its table and its plots (inline PNG)."""

from __future__ import annotations

import base64
import html
import io

import numpy as np

from distrain.analysis.compare.rows import BASELINE
from distrain.analysis.compare.tables import (
    WITH_INTERVAL,
    _cell,
    columns,
    plan_table,
    verdict_sentence,
)
from distrain.analysis.compare.tuned import sensitivity_plot
from distrain.base.machine import text as environment_text
from distrain.base.verdict import interval_text


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
    figures = _curve_plots(plt, comparison, names, repeats_of)
    fig, ax = plt.subplots(figsize=(6.5, 3.5))
    throughput = [
        row["examples_per_second"] for row in comparison["rows"] if row["name"] in by_name
    ]
    bars = ax.bar(names, throughput, color="tab:blue")
    ax.bar_label(bars, labels=[f"{v:,.0f}" for v in throughput], fontsize=8)
    ax.set(ylabel="examples / second", title="Training throughput per run")
    ax.grid(axis="y", alpha=0.3)
    figures.append(("Training throughput per run", _png(fig)))

    figures += _history_plots(plt, names, by_name)
    sensitivity = sensitivity_plot(comparison)
    if sensitivity:
        figures.append((sensitivity[0], _png(sensitivity[1])))
    figures += _interval_plots(comparison)
    return figures


def _curve_plots(plt, comparison: dict, names: list[str], repeats_of: dict) -> list:
    """Training loss and validation accuracy against wall-clock time, every repeat shown."""
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
    return figures


def _history_plots(plt, names: list[str], by_name: dict) -> list:
    """What some runs' histories hold: staleness, each worker's progress, divergence."""
    figures = []
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
        ("mse", "test MSE"),
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
