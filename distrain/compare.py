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
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

# Rows that are not training runs (a majority class, an n-gram): listed last.
BASELINE = "baseline"

# (key, header, format) of the table's columns.
COLUMNS = [
    ("name", "run", "{}"),
    ("mode", "mode", "{}"),
    ("workers", "workers", "{}"),
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
QUALITY = ("accuracy", "bits_per_char", "reconstruction_mse")


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


def time_to_target(epochs: list[dict], target: float) -> float | None:
    """Wall-clock seconds until validation accuracy first reached ``target``.

    Linear interpolation between the epochs around the crossing (from 0 s before the
    first epoch); None when it never got there.
    """
    prev_t, prev_acc = 0.0, None
    for e in epochs:
        acc, t = e.get("val_accuracy"), e.get("wall_seconds")
        if acc is None or t is None:
            continue
        if acc >= target:
            if prev_acc is None or acc == prev_acc:
                return float(t)
            frac = (target - prev_acc) / (acc - prev_acc)
            return float(prev_t + max(0.0, min(1.0, frac)) * (t - prev_t))
        prev_t, prev_acc = t, acc
    return None


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


def build_comparison(reports: list[dict], config: CompareConfig | None = None) -> dict:
    """One row per run with cost and quality side by side, the best run and notes.

    Args:
        reports: Run reports.
        config: Baseline and target.

    Returns:
        ``{"rows", "best", "baseline", "target_accuracy", "notes"}``.

    Raises:
        ValueError: A report lacks a field, or two runs share a name.
    """
    config = config or CompareConfig()
    if not reports:
        raise ValueError("no run reports to compare")
    names = [_check(r, i) for i, r in enumerate(reports)]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise ValueError(f"duplicate run names: {', '.join(dupes)}")

    def order(report):
        run = report["run"]
        from distrain.train.modes import mode_names

        order = [*mode_names(), BASELINE]
        mode = run["mode"]
        rank = order.index(mode) if mode in order else len(order)
        return rank, run["workers"], run["name"]

    reports = sorted(reports, key=order)
    trained = [r for r in reports if r["run"]["mode"] != "baseline"]
    base = next((r for r in trained if r["run"]["mode"] == config.baseline), None)
    notes = []
    if base is None:
        notes.append(f"no {config.baseline!r} run: speedup and efficiency need it as the reference")
    rows = []
    for r in reports:
        run, ev = r["run"], r["evaluation"]
        quality = {
            "accuracy": ev.get("accuracy"),
            "macro_f1": ev.get("macro_f1"),
            "bits_per_char": ev.get("bits_per_char"),
            "row_bits_per_char_max": ev.get("row_bits_per_char_max"),
            "reconstruction_mse": ev.get("reconstruction_mse"),
            "psnr": ev.get("psnr"),
            "sample": ev.get("sample"),
            "prompt": ev.get("prompt"),
        }
        if ev.get("outlier_rows"):
            notes.append(_outlier_note(run["name"], ev))
        if run["mode"] == BASELINE:
            rows.append({"name": run["name"], "mode": BASELINE, "workers": None, **quality})
            continue
        hist = r["history"]
        seconds = float(hist["train_seconds"])
        speedup = None
        if base is not None and seconds > 0:
            speedup = float(base["history"]["train_seconds"]) / seconds
        mean, p95, worst = _staleness(hist)
        # The mode's own cells: parameter servers, aggregation, and how the workers
        # exchanged gradients or variables (the transport).
        from distrain.train.modes import mode_class

        mode_cells = mode_class(run["mode"]).columns(run, hist)
        rows.append(
            {
                "name": run["name"],
                "mode": run["mode"],
                # Every training process: hybrid:D:M has D x M.
                "workers": int(run.get("processes", run["workers"])),
                **mode_cells,
                **quality,
                "train_seconds": seconds,
                "examples_per_second": float(hist.get("examples_per_second", 0.0)),
                "speedup": speedup,
                "efficiency": speedup / int(run.get("processes", run["workers"]))
                if speedup is not None
                else None,
                "epoch_seconds": _epoch_seconds(hist),
                "rank_loss": _rank_loss(hist),
                "time_to_target": time_to_target(hist.get("epochs", []), config.target_accuracy),
                "staleness_mean": mean,
                "staleness_p95": p95,
                "staleness_max": worst,
                "dropped_gradients": hist.get("dropped_gradients"),
                "staleness_by_worker": hist.get("staleness_by_worker"),
            }
        )
    candidates = [row for row in rows if row["mode"] != "baseline"] or rows
    lowest = next(
        (k for k in ("bits_per_char", "reconstruction_mse") if candidates[0].get(k) is not None),
        None,
    )
    if lowest is not None:  # a loss-like score: the lower, the better
        best = min(candidates, key=lambda row: (row[lowest], row.get("train_seconds") or 0))
    else:
        best = max(
            candidates, key=lambda row: (row["accuracy"] or 0, -(row.get("train_seconds") or 0))
        )
    return {
        "rows": rows,
        "best": best["name"],
        "baseline": base["run"]["name"] if base is not None else None,
        "target_accuracy": config.target_accuracy,
        "config": asdict(config),
        "notes": notes,
    }


def columns(comparison: dict) -> list[tuple[str, str, str]]:
    """The table's columns: those with a value in at least one row."""
    return [c for c in COLUMNS if any(row.get(c[0]) is not None for row in comparison["rows"])]


def _cell(row: dict, key: str, fmt: str) -> str:
    value = row.get(key)
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return "—"
    return fmt.format(value)


def render_markdown(comparison: dict) -> str:
    """The comparison as a Markdown document (a table, the best run, notes)."""
    lines = [
        "# Training runs compared",
        "",
        f"Speedup is against `{comparison['baseline'] or 'n/a'}` (its training time over "
        "each run's); efficiency is speedup / workers; time to target is the wall-clock "
        f"time to reach validation accuracy {comparison['target_accuracy']}; staleness "
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
    lines += ["", f"**Best run: {comparison['best']}**."]
    for row in comparison["rows"]:
        if row.get("sample"):
            lines += [
                "",
                f"Text generated by {row['name']} after the prompt (validation text in italics):",
                "",
                "> *" + " ".join(row["prompt"].split()) + "* " + " ".join(row["sample"].split()),
            ]
    lines += [f"- note: {n}" for n in comparison.get("notes", [])]
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
    out.append(f"best run: {comparison['best']}")
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

    by_name = {r["run"]["name"]: r for r in reports if r.get("history")}
    names = [row["name"] for row in comparison["rows"] if row["name"] in by_name]
    figures = []
    for key, label, title in (
        ("loss", "training loss", "Training loss against wall-clock time"),
        ("val_accuracy", "validation accuracy", "Validation accuracy against wall-clock time"),
    ):
        fig, ax = plt.subplots(figsize=(6.5, 3.8))
        for name in names:
            # Epochs without validation (validation_freq > 1) have no point on that plot.
            epochs = [
                e for e in by_name[name]["history"].get("epochs", []) if e.get(key) is not None
            ]
            t = [e["wall_seconds"] for e in epochs]
            ax.plot(t, [e[key] for e in epochs], marker="o", label=name)
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
    return figures


def render_html(comparison: dict, reports: list[dict]) -> str:
    """A self-contained HTML page: the table and the plots (inline PNG)."""
    cols = columns(comparison)
    head = "".join(f"<th>{html.escape(h)}</th>" for _, h, _ in cols)
    body = ""
    for row in comparison["rows"]:
        cls = ' class="best"' if row["name"] == comparison["best"] else ""
        cells = "".join(f"<td>{html.escape(_cell(row, k, f))}</td>" for k, _, f in cols)
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
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>distrain: runs compared</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; font-size: 0.9em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child, td:nth-child(2) {{ text-align: left; }}
tr.best {{ background: #e8f5e9; font-weight: 600; }}
figure {{ display: inline-block; margin: 1em 1em 0 0; }}
figcaption {{ text-align: center; font-size: 0.85em; color: #555; }}
</style></head><body>
<h1>Training runs compared</h1>
<p>Speedup against <code>{html.escape(str(comparison["baseline"]))}</code>; efficiency =
speedup / workers; time to target = wall-clock seconds to validation accuracy
{comparison["target_accuracy"]}. Best run: <b>{html.escape(comparison["best"])}</b>.</p>
<table><thead><tr>{head}</tr></thead><tbody>
{body}</tbody></table>
<ul>{notes}</ul>
{images}</body></html>
"""


def write_comparison(
    out_dir: str | os.PathLike, reports: list[dict], config: CompareConfig | None = None
) -> dict:
    """Writes ``comparison.json`` (with the reports under ``runs``), ``.md`` and ``.html``."""
    comparison = build_comparison(reports, config)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps({**comparison, "runs": reports}, indent=2))
    (out / "comparison.md").write_text(render_markdown(comparison))
    (out / "comparison.html").write_text(render_html(comparison, reports))
    return comparison
