"""What a learning-rate search adds to a comparison: its cost per row, its sensitivity, its ranking.

Input: the comparison (:func:`distrain.analysis.compare.rows.build_comparison`) and each run
name's ``tuning`` record (:func:`distrain.analysis.tuning.record`). Each row gets its record, the
search's seconds and process-seconds, and the time to a tuned model (the search's seconds
plus the time to target); the verdict says whether the search changed the modes' order;
the page plots each mode's validation score against the rate.
"""

from __future__ import annotations

import math

from distrain.analysis.compare.rows import BASELINE


def attach(comparison: dict, records: dict) -> dict:
    """Puts each run's search into its row and the ranking sentence into the verdict.

    ``search_seconds`` is the sum of the candidates' training seconds (the search's time
    when they train one after another, as ``kfp.local`` runs them); ``search_process_seconds``
    counts each candidate's processes (workers and parameter servers) times its seconds.
    ``time_to_tuned_model`` is ``search_seconds`` plus the time to target (its interval
    shifted by the same: the search ran once).
    """
    for row in comparison["rows"]:
        record = records.get(row["name"])
        if row["mode"] == BASELINE or record is None:
            continue
        row["tuning"] = record
        row["search_seconds"] = record["seconds"]
        row["search_process_seconds"] = record["process_seconds"]
        if row.get("time_to_target") is not None:
            row["time_to_tuned_model"] = row["time_to_target"] + record["seconds"]
            interval = row.get("time_to_target_interval")
            row["time_to_tuned_model_interval"] = (
                [v + record["seconds"] for v in interval] if interval else None
            )
    sentence = " ".join(filter(None, [ranking_sentence(records), *leaning_low(records)]))
    if sentence:
        verdict = comparison["verdict"]
        verdict["tuning"] = sentence
        verdict["reason"] = f"{verdict['reason']} {sentence}"
    return comparison


def leaning_low(records: dict) -> list[str]:
    """One sentence per run whose search chose a rate below its best-scored one, and why."""
    return [
        f"{name} trains at {record['chosen']:g}, not at the best-scored {record['best_rate']:g}: "
        f"{record['why']}."
        for name, record in records.items()
        if record.get("best_rate") is not None
        and record.get("chosen") is not None
        and not math.isclose(record["chosen"], record["best_rate"], rel_tol=1e-9)
    ]


def _nearest(record: dict, rate: float) -> dict | None:
    """The candidate whose rate is nearest ``rate`` (in log) and trained rung 0."""
    trained = [c for c in record["candidates"] if c["rungs"]]
    if not trained or not rate or rate <= 0:
        return None
    return min(trained, key=lambda c: abs(math.log(c["learning_rate"] / rate)))


def _score(candidate: dict, rung: int = -1) -> float:
    score = candidate["rungs"][rung].get("score")
    return math.inf if score is None else score


def rankings(records: dict) -> tuple[list[str], list[str], str] | None:
    """``(untuned, tuned, how)``: run names best first, and how the untuned one was read.

    Untuned: each run's rung-0 validation score at the default rate, or at the grid's rate
    nearest it (``how`` says which). Tuned: the chosen candidate's score at its last rung,
    the same budget for every run. None: fewer than two runs, or no default rate.
    """
    if len(records) < 2:
        return None
    default = next(iter(records.values())).get("default_rate")
    untuned = {}
    for name, record in records.items():
        nearest = _nearest(record, default)
        if nearest is None or record.get("chosen") is None:
            return None
        untuned[name] = (_score(nearest, 0), nearest["learning_rate"])
    rate = next(iter(untuned.values()))[1]
    on_grid = math.isclose(rate, default, rel_tol=1e-6)
    how = (
        f"at the default rate {default:g} (on the grid)"
        if on_grid
        else f"at the grid's rate nearest the default {default:g}, {rate:g}"
    )
    tuned = {}
    for name, record in records.items():
        chosen = next(
            c
            for c in record["candidates"]
            if math.isclose(c["learning_rate"], record["chosen"], rel_tol=1e-9)
        )
        tuned[name] = _score(chosen)
    untuned_order = sorted(untuned, key=lambda n: (untuned[n][0], n))
    tuned_order = sorted(tuned, key=lambda n: (tuned[n], n))
    return untuned_order, tuned_order, how


def _epochs(n: int) -> str:
    return f"{n} epoch" if n == 1 else f"{n} epochs"


def ranking_sentence(records: dict) -> str:
    """Whether the search changed the runs' order by validation loss, in one sentence."""
    ranked = rankings(records)
    if ranked is None:
        return ""
    untuned, tuned, how = ranked
    first = next(iter(records.values()))
    epochs = first["rungs"][0]["epochs"], first["rungs"][-1]["epochs"]
    changed = "changed" if untuned != tuned else "did not change"
    return (
        f"Tuning {changed} the ranking by validation loss: untuned {' > '.join(untuned)} "
        f"({how}, {_epochs(epochs[0])}); tuned {' > '.join(tuned)} (each at its chosen rate, "
        f"{_epochs(epochs[1])})."
    )


def sensitivity_plot(comparison: dict):
    """Validation loss against the learning rate per run, the chosen rate starred.

    Returns ``(title, figure)`` or None without a search. Every rung is drawn (rung 0
    joined by a line: the same budget for every rate; later rungs as open marks).
    """
    tuned = [r for r in comparison["rows"] if r.get("tuning")]
    if not tuned:
        return None
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.5, 3.8))
    for colour, row in enumerate(tuned):
        record, c = row["tuning"], f"C{colour % 10}"
        first = [
            (cand["learning_rate"], cand["rungs"][0].get("val_loss"))
            for cand in record["candidates"]
            if cand["rungs"]
        ]
        shown = [(x, y) for x, y in first if y is not None and math.isfinite(y)]
        if shown:
            ax.plot(*zip(*shown, strict=True), marker="o", color=c, label=row["name"])
        for cand in record["candidates"]:
            for later in cand["rungs"][1:]:
                if later.get("val_loss") is not None and math.isfinite(later["val_loss"]):
                    ax.plot(cand["learning_rate"], later["val_loss"], "o", mfc="none", color=c)
            if math.isclose(cand["learning_rate"], record["chosen"] or -1, rel_tol=1e-9):
                y = cand["rungs"][-1].get("val_loss")
                if y is not None and math.isfinite(y):
                    ax.plot(cand["learning_rate"], y, "*", ms=16, color=c, mec="black")
    default = tuned[0]["tuning"].get("default_rate")
    if default:
        ax.axvline(default, color="grey", ls="--", lw=1, label=f"default {default:g}")
    ax.set(
        xscale="log",
        yscale="log",
        xlabel="learning rate",
        ylabel="validation loss",
        title="Validation loss against the learning rate (★ chosen; open: later rungs)",
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return "Sensitivity to the learning rate", fig
