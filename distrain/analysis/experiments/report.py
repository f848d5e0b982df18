"""An experiment's report: its results matched to its points, written as JSON, Markdown, HTML."""

from __future__ import annotations

import base64
import html
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from distrain.analysis.compare import time_to_target
from distrain.analysis.experiments import ExperimentConfig, Point, get
from distrain.base.errors import StepError


@dataclass
class Result:
    """One point's outcome: its training history and its evaluation."""

    point: Point
    history: dict
    evaluation: dict

    def final(self, key: str) -> float | None:
        """The last epoch's value of ``key`` (``val_accuracy``, ``loss``, ...)."""
        values = [e.get(key) for e in self.history.get("epochs", []) if e.get(key) is not None]
        return float(values[-1]) if values else None

    def curve(self, key: str, x: str = "wall_seconds") -> tuple[list[float], list[float]]:
        """``key`` against ``x`` over the epochs that have it."""
        epochs = [e for e in self.history.get("epochs", []) if e.get(key) is not None]
        return [float(e[x]) for e in epochs], [float(e[key]) for e in epochs]

    def iterations(self) -> list[int]:
        """Each epoch's end in updates (steps of one replica), from the examples seen."""
        per_update = max(int(self.history.get("global_batch_size") or 1), 1)
        return [int(e["examples"]) // per_update for e in self.history.get("epochs", [])]


@dataclass
class Table:
    """A table of the report: a title, column headers and rows of formatted cells."""

    title: str
    columns: list[str]
    rows: list[list[str]] = field(default_factory=list)

    def markdown(self) -> str:
        lines = [f"### {self.title}", "", "| " + " | ".join(self.columns) + " |"]
        lines.append("|" + "---|" * len(self.columns))
        lines += ["| " + " | ".join(row) + " |" for row in self.rows]
        return "\n".join(lines)

    def html(self) -> str:
        head = "".join(f"<th>{html.escape(c)}</th>" for c in self.columns)
        body = "".join(
            "<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in row) + "</tr>\n"
            for row in self.rows
        )
        return (
            f"<h3>{html.escape(self.title)}</h3>\n"
            f"<table><thead><tr>{head}</tr></thead><tbody>\n{body}</tbody></table>"
        )


def fmt(value, spec: str = "{:.4f}") -> str:
    """A table cell: ``—`` for a missing number."""
    return "—" if value is None else spec.format(value)


def match_results(config: ExperimentConfig, reports: list[dict]) -> list[Result]:
    """Pairs every evaluated run with its point, in the configuration's order.

    A run is the evaluate step's ``{run, history, evaluation}``.

    Raises:
        StepError: A run that is no point of the configuration, or a point without a run.
    """
    by_key = {p.key(): p for p in config.points}
    results: dict[tuple, Result] = {}
    for report in reports:
        history = report["history"]
        cfg = history["config"]
        key = (report["run"]["dataset"], cfg["model"], report["run"]["spec"], cfg["seed"])
        key = (*key, cfg["epochs"], cfg.get("threads_per_worker", 0))
        if key not in by_key:
            raise StepError(f"a result matches no point of the configuration: {key}")
        results[key] = Result(by_key[key], history, report["evaluation"])
    missing = [p.key() for p in config.points if p.key() not in results]
    if missing:
        raise StepError(f"no result for the points {missing}")
    return [results[p.key()] for p in config.points]


def time_to(result: Result, target: float) -> float | None:
    """Wall-clock seconds until validation accuracy first reached ``target`` (interpolated)."""
    return time_to_target(result.history.get("epochs", []), target)


def worker_delays(history: dict, samples: int = 60) -> tuple[np.ndarray, dict[str, np.ndarray]]:
    """Each worker's delay behind the leading worker, in steps, against wall-clock time.

    From the parameter-server chief's samples of each worker's step count
    (``worker_progress``): every worker's count is interpolated on a common time grid and
    the delay is the most advanced worker's count minus its own (the "delays between
    workers" figures of distributed-training studies).

    Returns:
        The time grid (seconds from the first sample) and each worker's delay on it; empty
        without progress samples.
    """
    progress = history.get("worker_progress") or {}
    curves = {w: np.asarray(p, dtype=np.float64) for w, p in progress.items() if len(p)}
    if not curves:
        return np.zeros(0), {}
    start = min(c[0, 0] for c in curves.values())
    end = max(c[-1, 0] for c in curves.values())
    grid = np.linspace(start, end, samples)
    # Before a worker's first sample it had made no step; after its last, it had finished.
    steps = {w: np.interp(grid, c[:, 0], c[:, 1], left=0.0) for w, c in curves.items()}
    lead = np.max(np.stack(list(steps.values())), axis=0)
    return grid - start, {w: lead - s for w, s in sorted(steps.items())}


def png(fig) -> str:
    """A matplotlib figure as base64 PNG (and closed)."""
    import matplotlib.pyplot as plt

    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=80, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def pyplot():
    """Matplotlib's pyplot on the Agg backend (no display in a step)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def build_report(config: ExperimentConfig, reports: list[dict], figures: bool = True) -> dict:
    """The report of ``config``'s results: the experiment's analysis and what it ran.

    Args:
        config: What ran.
        reports: The evaluate steps' reports, one per point.
        figures: Draw the figures (tests of the sentences leave them out).
    """
    experiment = get(config.experiment)
    results = match_results(config, reports)
    analysis = experiment.analyse(config, results, figures=figures)
    return {
        "experiment": config.experiment,
        "title": experiment.title,
        "paper": experiment.paper,
        "config": config.to_dict(),
        "sentences": analysis["sentences"],
        "numbers": analysis.get("numbers", {}),
        "tables": [t.__dict__ for t in analysis["tables"]],
        "figures": analysis.get("figures", []),
        "notes": list(config.notes),
        "runs": [
            {
                **r.point.__dict__,
                "evaluation": {k: v for k, v in r.evaluation.items() if not isinstance(v, list)},
                "train_seconds": r.history.get("train_seconds"),
                "epochs_record": r.history.get("epochs"),
            }
            for r in results
        ],
    }


def render_markdown(report: dict) -> str:
    """The report in Markdown (figures inline as data URIs)."""
    cfg = report["config"]
    lines = [
        f"# {report['title']}",
        "",
        f"Reruns {report['paper']}. Scale `{cfg['scale']}`, {len(cfg['points'])} runs, "
        f"data seed {cfg['seed']}; rerun with `distrain experiment --from experiment.json`.",
        "",
        "## What the numbers say",
        "",
        *[f"- {s}" for s in report["sentences"]],
        "",
    ]
    if report["notes"]:
        lines += ["## What this scale left out", "", *[f"- {n}" for n in report["notes"]], ""]
    for table in report["tables"]:
        lines += [Table(**table).markdown(), ""]
    for title, data in report["figures"]:
        lines += [f"![{title}](data:image/png;base64,{data})", ""]
    return "\n".join(lines)


def render_html(report: dict) -> str:
    """The report as one self-contained HTML page (figures inline)."""
    cfg = report["config"]
    sentences = "".join(f"<li>{html.escape(s)}</li>" for s in report["sentences"])
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in report["notes"])
    tables = "\n".join(Table(**t).html() for t in report["tables"])
    images = "".join(
        f'<figure><img alt="{html.escape(title)}" src="data:image/png;base64,{data}">'
        f"<figcaption>{html.escape(title)}</figcaption></figure>\n"
        for title, data in report["figures"]
    )
    left_out = f"<h2>What this scale left out</h2><ul>{notes}</ul>" if notes else ""
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(report["title"])}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 2em; color: #222; max-width: 80em; }}
table {{ border-collapse: collapse; font-size: 0.9em; margin-bottom: 1em; }}
th, td {{ border: 1px solid #ccc; padding: 0.3em 0.6em; text-align: right; }}
th {{ background: #f3f3f3; }} td:first-child, td:nth-child(2) {{ text-align: left; }}
figure {{ display: inline-block; margin: 1em 1em 0 0; }}
figcaption {{ text-align: center; font-size: 0.85em; color: #555; }}
</style></head><body>
<h1>{html.escape(report["title"])}</h1>
<p>Reruns {html.escape(report["paper"])}. Scale <code>{html.escape(cfg["scale"])}</code>,
{len(cfg["points"])} runs, data seed {cfg["seed"]}; rerun with
<code>distrain experiment --from experiment.json</code>.</p>
<h2>What the numbers say</h2><ul>{sentences}</ul>
{left_out}
{tables}
{images}</body></html>
"""


def write_report(out_dir: str | os.PathLike, report: dict) -> None:
    """Writes the report into ``out_dir``.

    ``report.json``, ``report.md``, ``report.html``, ``experiment.json`` and each figure
    as ``figures/N.png``.
    """
    out = Path(out_dir)
    (out / "figures").mkdir(parents=True, exist_ok=True)
    (out / "report.json").write_text(json.dumps(report, indent=2))
    (out / "report.md").write_text(render_markdown(report))
    (out / "report.html").write_text(render_html(report))
    (out / "experiment.json").write_text(json.dumps(report["config"], indent=2))
    for i, (_, data) in enumerate(report["figures"], 1):
        (out / "figures" / f"{i}.png").write_bytes(base64.b64decode(data))
