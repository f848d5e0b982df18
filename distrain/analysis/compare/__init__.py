"""Side-by-side comparison of training runs: what each mode costs and buys.

Input: run reports ``{"run", "history", "evaluation"}`` (one per run, from the
evaluation step). Output: a comparison dict (one row per run, :mod:`.rows`), rendered as
JSON, Markdown and a terminal table (:mod:`.tables`) and a self-contained HTML page with
plots (:mod:`.page`).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from distrain.analysis.compare.page import plots, render_html
from distrain.analysis.compare.rows import (
    BASELINE,
    COLUMNS,
    QUALITY,
    CompareConfig,
    build_comparison,
    steps_to_target,
    time_to_target,
    verdict_of,
)
from distrain.analysis.compare.tables import (
    HEADLINE,
    WITH_INTERVAL,
    columns,
    headline_metrics,
    plan_table,
    render_markdown,
    render_text_table,
    verdict_sentence,
)
from distrain.analysis.compare.tuned import attach
from distrain.analysis.plan import plan_comparison

__all__ = [
    "BASELINE",
    "COLUMNS",
    "HEADLINE",
    "QUALITY",
    "WITH_INTERVAL",
    "CompareConfig",
    "build_comparison",
    "columns",
    "headline_metrics",
    "plan_table",
    "plots",
    "render_html",
    "render_markdown",
    "render_text_table",
    "steps_to_target",
    "time_to_target",
    "verdict_of",
    "verdict_sentence",
    "write_comparison",
]


def write_comparison(
    out_dir: str | os.PathLike,
    reports: list[dict],
    config: CompareConfig | None = None,
    environment: dict | None = None,
    plan: str = "",
    tuning: dict | None = None,
) -> dict:
    """Writes ``comparison.json`` (with the reports under ``runs``), ``.md`` and ``.html``.

    ``environment`` (:func:`distrain.base.machine.describe`) is recorded as the comparison's
    ``environment`` and said under the table. ``plan`` (``workers=16,link_gbps=25``) adds
    the cost model's recommendation at that scale (:mod:`distrain.analysis.plan`) as ``plan``.
    ``tuning`` (run name -> its search's record, :mod:`distrain.search`) puts each run's
    search into its row and says in the verdict whether it changed the ranking
    (:mod:`.tuned`).
    """
    comparison = build_comparison(reports, config)
    if tuning:
        attach(comparison, tuning)
    if environment:
        comparison["environment"] = environment
    if plan:
        comparison["plan"] = plan_comparison(comparison, reports, plan)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "comparison.json").write_text(json.dumps({**comparison, "runs": reports}, indent=2))
    (out / "comparison.md").write_text(render_markdown(comparison))
    (out / "comparison.html").write_text(render_html(comparison, reports))
    return comparison
