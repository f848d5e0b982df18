"""``consistency`` (seed 003): async, bulk-synchronous and stale-synchronous text classification.

Logistic regression and the fastText-style model, each under every rule.
"""

from __future__ import annotations

import numpy as np

from distrain.analysis.experiments import DataSource, Experiment, ExperimentConfig, Point, register
from distrain.analysis.experiments.report import (
    Result,
    Table,
    fmt,
    png,
    pyplot,
    time_to,
    worker_delays,
)
from distrain.base.verdict import accuracy_difference, accuracy_interval, interval_text

WORKERS = 2  # the paper's two workers
# The two staleness bounds of SSP: a tight one and a loose one.
BOUNDS = (1, 8)
# Time to accuracy: the time to this fraction of the best validation accuracy any rule
# reached with the same model (a fixed number would be out of reach on some data).
TARGET_FRACTION = 0.95

# scale -> (models, epochs, generated training rows (0: the data set's default))
SCALES = {
    "tiny": (("logreg",), 1, 1000),
    "small": (("logreg", "fasttext"), 5, 20000),
    "full": (("logreg", "fasttext"), 10, 0),
}


def rules(workers: int = WORKERS) -> list[tuple[str, dict]]:
    """The consistency rules compared: run spec and knobs."""
    return [
        (f"async:{workers}:ps=1", {"rule": "async"}),
        (f"syncreplicas:{workers}:aggregate={workers}", {"rule": "bulk-synchronous"}),
        *[(f"ssp:{workers}:staleness={s}", {"rule": f"SSP s={s}", "staleness": s}) for s in BOUNDS],
    ]


def _staleness(history: dict) -> tuple[float | None, int | None]:
    delays = history.get("staleness") or []
    if not delays:
        return None, None
    return float(np.mean(delays)), int(np.max(delays))


def _blocked(history: dict) -> float | None:
    blocked = history.get("blocked_seconds_by_worker")
    return float(sum(blocked.values())) if blocked else None


def _mean_lag(history: dict) -> float | None:
    """The slowest worker's mean delay behind the leader, in steps, over the run."""
    _, delays = worker_delays(history)
    if not delays:
        return None
    return float(np.mean(np.max(np.stack(list(delays.values())), axis=0)))


@register
class Consistency(Experiment):
    """Seed 003's study: the same models under async, BSP and SSP at two bounds."""

    name = "consistency"

    @property
    def title(self) -> str:
        """The report's title, naming the data set."""
        return (
            f"Consistency models on {self.dataset().title}: async, bulk-synchronous and "
            "stale-synchronous"
        )

    @property
    def paper(self) -> str:
        """The seed paper, naming the data set."""
        return f"seed 003 (distributed TensorFlow on {self.dataset().title})"

    def config(self, scale: str = "small", seed: int = 0) -> ExperimentConfig:
        data = self.dataset().name
        models, epochs, rows = SCALES[scale]
        rule_list = rules() if scale != "tiny" else [rules()[0], rules()[2]]
        points = tuple(
            Point(data, m, spec, epochs, 64, 0.01, seed, {"model": m, **knobs})
            for m in models
            for spec, knobs in rule_list
        )
        notes = []
        if scale == "tiny":
            notes.append("tiny: logistic regression under async and SSP s=1 only, one epoch")
        return ExperimentConfig(
            experiment=self.name,
            scale=scale,
            seed=seed,
            data=(DataSource(data, "sample", rows),),
            points=points,
            settings={"target_fraction": TARGET_FRACTION},
            notes=tuple(notes),
        ).checked()

    def analyse(self, config: ExperimentConfig, results: list[Result], figures=True) -> dict:
        fraction = float(config.settings.get("target_fraction", TARGET_FRACTION))
        models = list(dict.fromkeys(r.point.model for r in results))
        rows: dict[str, list[dict]] = {m: [] for m in models}
        for r in results:
            ev = r.evaluation
            mean, worst = _staleness(r.history)
            rows[r.point.model].append(
                {
                    "rule": r.point.knobs["rule"],
                    "staleness_bound": r.point.knobs.get("staleness"),
                    "run": r.point.run,
                    "accuracy": ev.get("accuracy"),
                    "test_examples": ev.get("num_examples"),
                    "macro_precision": ev.get("macro_precision"),
                    "macro_recall": ev.get("macro_recall"),
                    "train_seconds": r.history.get("train_seconds"),
                    "best_val_accuracy": max(r.curve("val_accuracy")[1], default=None),
                    "staleness_mean": mean,
                    "staleness_max": worst,
                    "blocked_seconds": _blocked(r.history),
                    "mean_lag_steps": _mean_lag(r.history),
                }
            )
        for m in models:
            best = max(row["best_val_accuracy"] or 0.0 for row in rows[m])
            for row, r in zip(rows[m], [r for r in results if r.point.model == m], strict=True):
                row["target"] = fraction * best
                row["time_to_target"] = time_to(r, fraction * best)

        sentences = []
        for m in models:
            sentences += model_sentences(m, rows[m], fraction)
        sentences += across_models(rows)
        table = Table(
            "Test accuracy, macro precision and recall (the paper's table), time and staleness",
            [
                "model",
                "rule",
                "accuracy",
                "macro P",
                "macro R",
                "train s",
                "time to target s",
                "staleness mean",
                "max",
                "blocked s",
                "slowest worker's lag",
            ],
        )
        for m in models:
            for row in rows[m]:
                table.rows.append(
                    [
                        m,
                        row["rule"],
                        fmt(row["accuracy"]),
                        fmt(row["macro_precision"]),
                        fmt(row["macro_recall"]),
                        fmt(row["train_seconds"], "{:.1f}"),
                        fmt(row["time_to_target"], "{:.1f}"),
                        fmt(row["staleness_mean"], "{:.2f}"),
                        fmt(row["staleness_max"], "{}"),
                        fmt(row["blocked_seconds"], "{:.2f}"),
                        fmt(row["mean_lag_steps"], "{:.1f}"),
                    ]
                )
        return {
            "sentences": sentences,
            "tables": [table],
            "figures": _figures(models, results, rows) if figures else [],
            "numbers": rows,
        }


def _differ(a: dict, b: dict, key: str) -> int:
    """+1 / -1 when row ``a``'s ``key`` is measurably above / below ``b``'s, else 0.

    Accuracy and macro recall both get the binomial interval of the test set's size (for
    macro recall an approximation: its classes' own samples are smaller, its noise larger).
    """
    if a[key] is None or b[key] is None:
        return 0
    return accuracy_difference(a[key], a["test_examples"], b[key], b["test_examples"])


def _names(rows: list[dict], key: str, value: float) -> str:
    """The rules whose ``key`` is ``value``, ties named together (``async and SSP s=1``)."""
    tied = [r["rule"] for r in rows if r[key] is not None and abs(r[key] - value) < 1e-12]
    return " and ".join([", ".join(tied[:-1]), tied[-1]] if len(tied) > 1 else tied)


def model_sentences(model: str, rows: list[dict], fraction: float) -> list[str]:
    """What the rules did with one model, in words computed from its rows."""
    out = []
    scored = [r for r in rows if r["accuracy"] is not None]
    if scored:
        out.append(_accuracy_sentence(model, scored))
    timed = [r for r in rows if r["time_to_target"] is not None]
    missed = [r["rule"] for r in rows if r["time_to_target"] is None]
    if timed:
        target = timed[0]["target"]
        first = min(r["time_to_target"] for r in timed)
        last = max(r["time_to_target"] for r in timed)
        text = (
            f"{_names(timed, 'time_to_target', first)} reached {target:.3f} validation accuracy "
            f"({fraction:.0%} of {model}'s best) first, after {first:.1f} s"
        )
        if last > first:
            text += f"; {_names(timed, 'time_to_target', last)} last, after {last:.1f} s"
        if missed:
            text += f"; {', '.join(missed)} never did"
        out.append(text + ".")
    return out + _waiting_sentences(model, rows)


def _accuracy_sentence(model: str, scored: list[dict]) -> str:
    """Which rules reached the highest and lowest test accuracy and macro recall, if apart."""
    hi = max(r["accuracy"] for r in scored)
    lo = min(r["accuracy"] for r in scored)
    top = next(r for r in scored if r["accuracy"] == hi)
    bottom = next(r for r in scored if r["accuracy"] == lo)
    measurable = _differ(top, bottom, "accuracy") != 0
    if hi - lo < 1e-12:
        text = f"With {model}, every rule reached the same test accuracy ({hi:.4f})"
    elif not measurable:
        text = (
            f"With {model}, no rule's test accuracy was measurably different from another's: "
            f"{lo:.4f} to {hi:.4f}, inside the 95 % intervals "
            f"({interval_text(accuracy_interval(hi, top['test_examples']))} for the highest)"
        )
    else:
        text = (
            f"With {model}, {_names(scored, 'accuracy', hi)} reached the highest test "
            f"accuracy ({hi:.4f}) and {_names(scored, 'accuracy', lo)} the lowest "
            f"({lo:.4f}), {hi - lo:.4f} apart, beyond the 95 % intervals"
        )
    recall = max(r["macro_recall"] or 0.0 for r in scored)
    low_recall = min(r["macro_recall"] or 0.0 for r in scored)
    first = next(r for r in scored if (r["macro_recall"] or 0.0) == recall)
    last = next(r for r in scored if (r["macro_recall"] or 0.0) == low_recall)
    if recall - low_recall < 1e-12:
        text += f"; every rule had the same macro recall ({recall:.4f})."
    elif _differ(first, last, "macro_recall"):
        best_recall = _names(scored, "macro_recall", recall)
        text += f"; the highest macro recall ({recall:.4f}) was {best_recall}'s."
    else:
        either = " either" if not measurable else ""
        text += (
            f"; macro recall ({low_recall:.4f} to {recall:.4f}) was not measurably "
            f"different{either}."
        )
    return text


def _waiting_sentences(model: str, rows: list[dict]) -> list[str]:
    """How stale the gradients were, what SSP's bound cost, and how far workers drifted."""
    out = []
    stale = [r for r in rows if r["staleness_mean"] is not None]
    if stale and all(r["staleness_max"] == 0 for r in stale):
        out.append(f"No rule applied a stale gradient to {model}'s parameters.")
    elif stale:
        most = max(r["staleness_mean"] for r in stale)
        least = min(r["staleness_mean"] for r in stale)
        widest = max(r["staleness_max"] for r in stale)
        out.append(
            f"{_names(stale, 'staleness_mean', most)} applied the stalest gradients to "
            f"{model} ({most:.2f} versions old on average), "
            f"{_names(stale, 'staleness_mean', least)} the freshest ({least:.2f}); "
            f"the oldest was {widest} versions old ({_names(stale, 'staleness_max', widest)})."
        )
    bounded = sorted(
        (r for r in rows if r["staleness_bound"] is not None and r["blocked_seconds"] is not None),
        key=lambda r: r["staleness_bound"],
    )
    if len(bounded) >= 2:
        tight, loose = bounded[0], bounded[-1]
        verdict = (
            "so the tighter bound cost waiting"
            if tight["blocked_seconds"] > loose["blocked_seconds"]
            else "so the tighter bound cost no more waiting here"
        )
        out.append(
            f"Under SSP, the bound of {tight['staleness_bound']} blocked {model}'s workers for "
            f"{tight['blocked_seconds']:.2f} s in all against {loose['blocked_seconds']:.2f} s "
            f"with {loose['staleness_bound']}, {verdict}; the widest staleness was "
            f"{tight['staleness_max']} and {loose['staleness_max']}."
        )
    lagging = [r for r in rows if r["mean_lag_steps"] is not None]
    if len(lagging) >= 2 and len({round(r["mean_lag_steps"], 1) for r in lagging}) == 1:
        out.append(
            f"Every rule kept {model}'s workers as close (the slowest "
            f"{lagging[0]['mean_lag_steps']:.1f} steps behind the leader on average)."
        )
    elif len(lagging) >= 2:
        far = max(r["mean_lag_steps"] for r in lagging)
        near = min(r["mean_lag_steps"] for r in lagging)
        out.append(
            f"{_names(lagging, 'mean_lag_steps', far)} let {model}'s workers drift furthest apart "
            f"(the slowest {far:.1f} steps behind the leader on average), "
            f"{_names(lagging, 'mean_lag_steps', near)} the least ({near:.1f})."
        )
    return out


def across_models(rows: dict[str, list[dict]]) -> list[str]:
    """Which model was more accurate, rule by rule."""
    models = list(rows)
    if len(models) < 2:
        return []
    a, b = models[:2]
    by_rule = {r["rule"]: r for r in rows[b]}
    pairs = [
        (r, by_rule[r["rule"]])
        for r in rows[a]
        if r["rule"] in by_rule and r["accuracy"] is not None
    ]
    if not pairs:
        return []
    # A win is an accuracy measurably above the other's (95 % intervals apart).
    wins = {a: sum(_differ(x, y, "accuracy") > 0 for x, y in pairs)}
    wins[b] = sum(_differ(y, x, "accuracy") > 0 for x, y in pairs)
    ties = len(pairs) - wins[a] - wins[b]
    tied = f", and could not be told apart under {ties}" if ties else ""
    if wins[a] == wins[b]:
        return [f"{a} and {b} each won {wins[a]} of the {len(pairs)} rules on test accuracy{tied}."]
    leader = a if wins[a] > wins[b] else b
    other = b if leader == a else a
    return [
        f"{leader} beat {other} on test accuracy under {wins[leader]} of the {len(pairs)} "
        f"rules{tied}."
    ]


def _figures(models, results: list[Result], rows) -> list[tuple[str, str]]:
    plt = pyplot()
    figures = []
    fig, axes = plt.subplots(1, len(models), figsize=(5.2 * len(models), 3.6), squeeze=False)
    for ax, m in zip(axes[0], models, strict=True):
        for r in results:
            if r.point.model == m:
                t, loss = r.curve("loss")
                ax.plot(t, loss, marker="o", label=r.point.knobs["rule"])
        ax.set(
            xlabel="wall-clock seconds", ylabel="training loss", title=f"{m}: loss", yscale="log"
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figures.append(("Training loss against wall-clock time", png(fig)))

    runs = [r for r in results if r.history.get("worker_progress")]
    if runs:
        cols = max(sum(1 for r in runs if r.point.model == m) for m in models)
        fig, axes = plt.subplots(
            len(models), cols, figsize=(3.4 * cols, 2.6 * len(models)), squeeze=False
        )
        for i, m in enumerate(models):
            mine = [r for r in runs if r.point.model == m]
            for j in range(cols):
                ax = axes[i][j]
                if j >= len(mine):
                    ax.axis("off")
                    continue
                grid, delays = worker_delays(mine[j].history)
                for w, d in delays.items():
                    ax.plot(grid, d, label=f"worker {w}")
                ax.set_title(f"{m}: {mine[j].point.knobs['rule']}", fontsize=9)
                ax.set_xlabel("wall-clock s", fontsize=8)
                ax.set_ylabel("steps behind leader", fontsize=8)
                ax.legend(fontsize=7)
        fig.tight_layout()
        figures.append(
            ("Delay of each worker behind the leader (the paper's figures 8, 10)", png(fig))
        )

    fig, ax = plt.subplots(figsize=(6.5, 3.4))
    labels = list(dict.fromkeys(row["rule"] for m in models for row in rows[m]))
    width = 0.8 / len(models)
    for k, m in enumerate(models):
        by_rule = {row["rule"]: row["time_to_target"] for row in rows[m]}
        heights = [by_rule.get(label) or 0.0 for label in labels]
        ax.bar(np.arange(len(labels)) + k * width, heights, width, label=m)
    ax.set_xticks(np.arange(len(labels)) + width * (len(models) - 1) / 2, labels, fontsize=8)
    ax.set(ylabel="seconds (0: never)", title="Time to the target accuracy")
    ax.grid(axis="y", alpha=0.3)
    ax.legend()
    figures.append(("Time to the target accuracy", png(fig)))
    return figures
