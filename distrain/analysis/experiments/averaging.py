"""``averaging`` (seed 002): periodic model averaging of 4 replicas on handwritten digits.

For a convex, a strongly convex and a non-convex model: the period, the initialisation,
common examples and weighted averaging.
"""

from __future__ import annotations

import numpy as np

from distrain.analysis.experiments import DataSource, Experiment, ExperimentConfig, Point, register
from distrain.analysis.experiments.report import Result, Table, fmt, png, pyplot
from distrain.base.verdict import accuracy_difference, accuracy_interval, with_interval

REPLICAS = 4
# The models and the kind of loss they have.
MODELS = {"softmax": "convex", "softmax-l2": "strongly convex", "cnn": "non-convex"}
# An accuracy difference is measurable when the two accuracies' 95 % intervals separate
# (distrain.base.verdict), whatever its size; a configuration's old "negligible" is ignored.
BASE = {"init": "shared", "common": 0.0, "weights": "uniform"}
# The variants, each one knob away from BASE at the middle period.
VARIANTS = {"init": "independent", "common": 0.1, "weights": "accuracy"}

# scale -> (periods per model, models with the variants, the variants' period, epochs,
# generated training images, batch)
SCALES = {
    "tiny": ({"softmax": (1, 16)}, ("softmax",), 16, 1, 1000, 16),
    "small": (
        {"softmax": (1, 4, 16, 64), "softmax-l2": (1, 64), "cnn": (1, 4, 16, 64)},
        ("softmax", "cnn"),
        16,
        3,
        6000,
        16,
    ),
    "full": (
        {m: (1, 4, 16, 64, 256) for m in MODELS},
        tuple(MODELS),
        16,
        10,
        0,
        16,
    ),
}


def spec(period: int, init: str, common: float, weights: str) -> str:
    """The run spec of one setting."""
    return f"avg:{REPLICAS}:period={period}:init={init}:common={common}:weights={weights}"


@register
class Averaging(Experiment):
    """Seed 002's study: how often to average, and from what start, for three losses."""

    name = "averaging"
    paper = "seed 002 (model averaging for data parallelism)"

    @property
    def title(self) -> str:
        """The report's title, naming the data set."""
        return (
            f"Model averaging on {self.dataset().title}: period, initialisation, common "
            "examples, weights"
        )

    def config(self, scale: str = "small", seed: int = 0) -> ExperimentConfig:
        data = self.dataset().name
        periods, varied, middle, epochs, images, batch = SCALES[scale]
        points = []
        for model, sweep in periods.items():
            for period in sweep:
                knobs = {"model": model, "loss": MODELS[model], "period": period, **BASE}
                points.append(
                    Point(data, model, spec(period, **BASE), epochs, batch, 1e-3, seed, knobs)
                )
        for model in varied:
            if middle not in periods[model]:
                knobs = {"model": model, "loss": MODELS[model], "period": middle, **BASE}
                points.append(
                    Point(data, model, spec(middle, **BASE), epochs, batch, 1e-3, seed, knobs)
                )
            for knob, value in VARIANTS.items():
                setting = {**BASE, knob: value}
                knobs = {"model": model, "loss": MODELS[model], "period": middle, **setting}
                knobs["variant"] = knob
                points.append(
                    Point(data, model, spec(middle, **setting), epochs, batch, 1e-3, seed, knobs)
                )
        notes = []
        for model in MODELS:
            if model not in periods:
                notes.append(f"{scale}: {model} ({MODELS[model]}) left out")
            elif periods[model] != SCALES["full"][0][model]:
                shown = ", ".join(str(p) for p in periods[model])
                notes.append(f"{scale}: {model} averaged every {shown} steps only")
            if model in periods and model not in varied:
                notes.append(f"{scale}: {model} without the init, common and weights variants")
        return ExperimentConfig(
            experiment=self.name,
            scale=scale,
            seed=seed,
            data=(DataSource(data, "sample", images),),
            points=tuple(points),
            settings={"variant_period": middle},
            notes=tuple(notes),
        ).checked()

    def analyse(self, config: ExperimentConfig, results: list[Result], figures=True) -> dict:
        middle = int(config.settings.get("variant_period", 16))
        rows = []
        for r in results:
            k = r.point.knobs
            divergence = r.history.get("divergence") or []
            rows.append(
                {
                    **{key: k.get(key) for key in ("model", "loss", "period", *BASE)},
                    "variant": k.get("variant"),
                    "accuracy": r.evaluation.get("accuracy"),
                    "test_examples": r.evaluation.get("num_examples"),
                    "val_accuracy": r.final("val_accuracy"),
                    "iterations": r.history.get("steps"),
                    "iterations_per_epoch": (r.iterations() or [None])[0],
                    "exchanges": r.history.get("communication_rounds"),
                    "divergence_mean": float(np.mean([d[1] for d in divergence]))
                    if divergence
                    else None,
                    "train_seconds": r.history.get("train_seconds"),
                }
            )
        sentences = sweep_sentences(rows)
        sentences += variant_sentences(rows, middle)
        table = Table(
            f"Test accuracy of {REPLICAS} averaged replicas per setting",
            [
                "model",
                "loss",
                "period",
                "init",
                "common",
                "weights",
                "accuracy",
                "iterations",
                "exchanges",
                "mean divergence",
                "train s",
            ],
        )
        for row in rows:
            table.rows.append(
                [
                    row["model"],
                    row["loss"],
                    str(row["period"]),
                    row["init"],
                    f"{row['common']:.0%}",
                    row["weights"],
                    fmt(row["accuracy"]),
                    fmt(row["iterations"], "{}"),
                    fmt(row["exchanges"], "{}"),
                    fmt(row["divergence_mean"], "{:.3f}"),
                    fmt(row["train_seconds"], "{:.1f}"),
                ]
            )
        return {
            "sentences": sentences,
            "tables": [table],
            "figures": _figures(results, middle) if figures else [],
            "numbers": rows,
        }


def every(period: int) -> str:
    """``every step`` or ``every 4 steps``."""
    return "every step" if period == 1 else f"every {period} steps"


def _base(row: dict) -> bool:
    return all(row[key] == value for key, value in BASE.items())


def _differ(a: dict, b: dict) -> int:
    """+1 / -1 when row ``a``'s accuracy is measurably above / below ``b``'s, else 0."""
    return accuracy_difference(a["accuracy"], a["test_examples"], b["accuracy"], b["test_examples"])


def _noise(rows: list[dict]) -> str:
    """How wide the widest accuracy interval among ``rows`` is, in words."""
    halves = [
        (i[1] - i[0]) / 2
        for i in (accuracy_interval(r["accuracy"], r["test_examples"]) for r in rows)
        if i is not None
    ]
    if not halves:
        return "no interval: the test-set size is not recorded"
    sizes = sorted({r["test_examples"] for r in rows if r["test_examples"]})
    on = f"{sizes[0]:,}" if len(sizes) == 1 else f"{sizes[0]:,} to {sizes[-1]:,}"
    return f"each accuracy's 95 % interval is up to ±{max(halves):.4f} on {on} test examples"


def sweep_sentences(rows: list[dict]) -> list[str]:
    """What the averaging period did to each model's accuracy, decided by 95 % intervals."""
    out, spread = [], {}
    for model in dict.fromkeys(r["model"] for r in rows):
        sweep = sorted(
            (r for r in rows if r["model"] == model and _base(r) and r["accuracy"] is not None),
            key=lambda r: r["period"],
        )
        if len(sweep) < 2:
            continue
        first, last = sweep[0], sweep[-1]
        hi = max(sweep, key=lambda r: r["accuracy"])
        lo = min(sweep, key=lambda r: r["accuracy"])
        measurable = _differ(hi, lo) != 0
        spread[model] = (hi["accuracy"] - lo["accuracy"], sweep[0]["loss"], measurable)
        if not measurable:
            verdict = f"no measurable difference between the periods ({_noise(sweep)})"
        elif _differ(last, first) < 0:
            verdict = "averaging less often cost accuracy, beyond the 95 % intervals"
        elif _differ(last, first) > 0:
            verdict = "averaging less often did better, beyond the 95 % intervals"
        else:
            verdict = (
                f"the ends cannot be told apart, but {every(hi['period'])} was measurably "
                f"above {every(lo['period'])}"
            )
        period_every = first.get("iterations_per_epoch")
        text = (
            f"For {model} ({first['loss']}), test accuracy went from "
            f"{with_interval(first['accuracy'], first['test_examples'])} averaging "
            f"{every(first['period'])} to {with_interval(last['accuracy'], last['test_examples'])} "
            f"{every(last['period'])} (a spread of {spread[model][0]:.4f} over "
            f"{len(sweep)} periods): {verdict}"
        )
        if period_every and last["period"] > period_every:
            text += (
                f"; the replicas are averaged at every epoch's end too, every {period_every} "
                "steps here, so longer periods average as often as that"
            )
        out.append(text + ".")
    if len(spread) >= 2:
        moved = [m for m in spread if spread[m][2]]
        still = [m for m in spread if not spread[m][2]]
        if not moved:
            out.append(
                f"For none of the {len(spread)} models did the period make a measurable "
                "difference to test accuracy."
            )
        else:
            parts = ", ".join(
                f"{m} ({spread[m][1]}, a spread of {spread[m][0]:.4f})" for m in moved
            )
            tail = f"; not for {', '.join(still)}" if still else ""
            out.append(
                f"The period made a measurable difference to test accuracy for {parts}{tail}."
            )
    return out


WORDS = {
    "init": "Independent initialisation (one per replica) instead of a shared one",
    "common": "Giving every replica 10 % common examples",
    "weights": "Weighting each replica by its held-out accuracy instead of uniformly",
}


def variant_sentences(rows: list[dict], middle: int) -> list[str]:
    """What each variant (init, common examples, weights) changed, decided by 95 % intervals."""
    out = []
    for knob, words in WORDS.items():
        effects = []
        for model in dict.fromkeys(r["model"] for r in rows):
            base = [
                r
                for r in rows
                if r["model"] == model and _base(r) and r["period"] == middle and not r["variant"]
            ]
            varied = [r for r in rows if r["model"] == model and r["variant"] == knob]
            if base and varied and base[0]["accuracy"] is not None:
                effects.append((model, base[0], varied[0]))
        if not effects:
            continue
        parts, measured = [], []
        for model, base, varied in effects:
            diff = varied["accuracy"] - base["accuracy"]
            if _differ(varied, base) == 0:
                moved = f"made no measurable difference to {model}'s accuracy"
                numbers = (
                    f"{with_interval(varied['accuracy'], varied['test_examples'])} against "
                    f"{with_interval(base['accuracy'], base['test_examples'])}"
                )
            else:
                measured.append(f"{model} ({base['loss']})")
                moved = f"moved {model}'s accuracy by {diff:+.4f}"
                numbers = f"{varied['accuracy']:.4f} against {base['accuracy']:.4f}"
            part = f"{moved}: {numbers}"
            if knob == "init" and base["divergence_mean"] and varied["divergence_mean"]:
                ratio = varied["divergence_mean"] / base["divergence_mean"]
                part += f", its replicas {ratio:.1f}x as far from their average at exchanges"
            parts.append(part)
        text = f"{words} ({every(middle)}) " + "; ".join(parts)
        if len(effects) > 1:
            text += (
                f". The difference was measurable for {' and '.join(measured)} only"
                if measured and len(measured) < len(effects)
                else ". The difference was measurable for every model"
                if measured
                else ". For no model was the difference larger than the 95 % intervals"
            )
        out.append(text + ".")
    return out


def _figures(results: list[Result], middle: int) -> list[tuple[str, str]]:
    plt = pyplot()
    figures = []
    models = list(dict.fromkeys(r.point.model for r in results))
    fig, axes = plt.subplots(1, len(models), figsize=(4.6 * len(models), 3.4), squeeze=False)
    for ax, m in zip(axes[0], models, strict=True):
        sweep = [r for r in results if r.point.model == m and _base(r.point.knobs)]
        for r in sorted(sweep, key=lambda r: r.point.knobs["period"]):
            if r.point.knobs.get("variant"):
                continue
            ax.plot(
                r.iterations(),
                [e.get("val_accuracy") for e in r.history["epochs"]],
                marker="o",
                label=f"every {r.point.knobs['period']}",
            )
        ax.set(xlabel="iterations", ylabel="validation accuracy", title=f"{m}: period")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figures.append(("Accuracy against iterations, per averaging period", png(fig)))

    varied = [
        m
        for m in models
        if any(r.point.knobs.get("variant") for r in results if r.point.model == m)
    ]
    if varied:
        figures += _variant_figures(plt, results, varied, middle)
    fig, ax = plt.subplots(figsize=(5.5, 3.4))
    for m in models:
        sweep = sorted(
            (r for r in results if r.point.model == m and _base(r.point.knobs)),
            key=lambda r: r.point.knobs["period"],
        )
        if sweep:
            ax.plot(
                [r.point.knobs["period"] for r in sweep],
                [r.evaluation.get("accuracy") for r in sweep],
                marker="o",
                label=f"{m} ({MODELS.get(m, '')})",
            )
    ax.set(xscale="log", xlabel="averaging period (steps)", ylabel="test accuracy")
    ax.set_title("Test accuracy against the averaging period")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    figures.append(("Test accuracy against the averaging period", png(fig)))
    return figures


def _variant_figures(plt, results: list[Result], varied: list[str], middle: int) -> list:
    """At the middle period, each variant's accuracy and the replicas' divergence."""
    figures = []
    fig, axes = plt.subplots(1, len(varied), figsize=(4.6 * len(varied), 3.4), squeeze=False)
    for ax, m in zip(axes[0], varied, strict=True):
        for r in results:
            k = r.point.knobs
            if r.point.model != m or k["period"] != middle:
                continue
            label = k.get("variant") and f"{k['variant']}: {k[k['variant']]}" or "shared, uniform"
            ax.plot(
                r.iterations(),
                [e.get("val_accuracy") for e in r.history["epochs"]],
                marker="o",
                label=label,
            )
        ax.set(xlabel="iterations", ylabel="validation accuracy", title=f"{m}: every {middle}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figures.append(("Accuracy against iterations: init, common examples, weights", png(fig)))

    fig, axes = plt.subplots(1, len(varied), figsize=(4.6 * len(varied), 3.2), squeeze=False)
    for ax, m in zip(axes[0], varied, strict=True):
        for r in results:
            k = r.point.knobs
            pts = np.asarray(r.history.get("divergence") or [], dtype=float)
            if r.point.model != m or k["period"] != middle or not len(pts):
                continue
            label = k.get("variant") and f"{k['variant']}: {k[k['variant']]}" or "shared, uniform"
            ax.plot(pts[:, 0], pts[:, 1], marker=".", label=label)
        ax.set(
            xlabel="wall-clock s",
            ylabel="mean distance to the average",
            title=f"{m}: divergence",
            yscale="log",
        )
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    figures.append(("Divergence of the replicas at each exchange", png(fig)))
    return figures
