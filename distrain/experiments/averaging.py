"""``averaging`` (seed 002): periodic model averaging of 4 replicas on MNIST.

For a convex, a strongly convex and a non-convex model: the period, the initialisation,
common examples and weighted averaging.
"""

from __future__ import annotations

import numpy as np

from distrain.experiments import DataSource, Experiment, ExperimentConfig, Point, register
from distrain.experiments.report import Result, Table, fmt, png, pyplot

REPLICAS = 4
# The models and the kind of loss they have.
MODELS = {"softmax": "convex", "softmax-l2": "strongly convex", "cnn": "non-convex"}
# An accuracy difference below this is reported as no difference.
NEGLIGIBLE = 0.005
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
    title = "Model averaging on MNIST: period, initialisation, common examples, weights"
    paper = "seed 002 (model averaging for data parallelism)"
    datasets = ("mnist",)

    def config(self, scale: str = "small", seed: int = 0) -> ExperimentConfig:
        periods, varied, middle, epochs, images, batch = SCALES[scale]
        points = []
        for model, sweep in periods.items():
            for period in sweep:
                knobs = {"model": model, "loss": MODELS[model], "period": period, **BASE}
                points.append(
                    Point("mnist", model, spec(period, **BASE), epochs, batch, 1e-3, seed, knobs)
                )
        for model in varied:
            if middle not in periods[model]:
                knobs = {"model": model, "loss": MODELS[model], "period": middle, **BASE}
                points.append(
                    Point("mnist", model, spec(middle, **BASE), epochs, batch, 1e-3, seed, knobs)
                )
            for knob, value in VARIANTS.items():
                setting = {**BASE, knob: value}
                knobs = {"model": model, "loss": MODELS[model], "period": middle, **setting}
                knobs["variant"] = knob
                points.append(
                    Point("mnist", model, spec(middle, **setting), epochs, batch, 1e-3, seed, knobs)
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
            data=(DataSource("mnist", "sample", images),),
            points=tuple(points),
            settings={"negligible": NEGLIGIBLE, "variant_period": middle},
            notes=tuple(notes),
        ).checked()

    def analyse(self, config: ExperimentConfig, results: list[Result], figures=True) -> dict:
        negligible = float(config.settings.get("negligible", NEGLIGIBLE))
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
        sentences = sweep_sentences(rows, negligible)
        sentences += variant_sentences(rows, middle, negligible)
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


def sweep_sentences(rows: list[dict], negligible: float) -> list[str]:
    """What the averaging period did to each model's accuracy."""
    out, spread = [], {}
    for model in dict.fromkeys(r["model"] for r in rows):
        sweep = sorted(
            (r for r in rows if r["model"] == model and _base(r) and r["accuracy"] is not None),
            key=lambda r: r["period"],
        )
        if len(sweep) < 2:
            continue
        first, last = sweep[0], sweep[-1]
        accuracies = [r["accuracy"] for r in sweep]
        spread[model] = (max(accuracies) - min(accuracies), sweep[0]["loss"])
        change = last["accuracy"] - first["accuracy"]
        if spread[model][0] < negligible:
            verdict = "the period made no difference worth the name"
        elif change <= -negligible:
            verdict = "averaging less often cost accuracy"
        elif change >= negligible:
            verdict = "averaging less often did better"
        else:
            best = max(sweep, key=lambda r: r["accuracy"])
            verdict = f"the best was {every(best['period'])}, between the ends"
        period_every = first.get("iterations_per_epoch")
        text = (
            f"For {model} ({first['loss']}), test accuracy went from {first['accuracy']:.4f} "
            f"averaging {every(first['period'])} to {last['accuracy']:.4f} "
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
        most = max(spread, key=lambda m: spread[m][0])
        least = min(spread, key=lambda m: spread[m][0])
        out.append(
            f"The period moved {most}'s ({spread[most][1]}) accuracy most ({spread[most][0]:.4f}) "
            f"and {least}'s ({spread[least][1]}) least ({spread[least][0]:.4f})."
        )
    return out


WORDS = {
    "init": "Independent initialisation (one per replica) instead of a shared one",
    "common": "Giving every replica 10 % common examples",
    "weights": "Weighting each replica by its held-out accuracy instead of uniformly",
}


def variant_sentences(rows: list[dict], middle: int, negligible: float) -> list[str]:
    """What each variant (init, common examples, weights) changed, model by model."""
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
        parts = []
        for model, base, varied in effects:
            diff = varied["accuracy"] - base["accuracy"]
            moved = (
                f"left {model}'s accuracy within {negligible}"
                if abs(diff) < negligible
                else f"moved {model}'s accuracy by {diff:+.4f}"
            )
            part = f"{moved} ({varied['accuracy']:.4f} against {base['accuracy']:.4f})"
            if knob == "init" and base["divergence_mean"] and varied["divergence_mean"]:
                ratio = varied["divergence_mean"] / base["divergence_mean"]
                part += f", its replicas {ratio:.1f}x as far from their average at exchanges"
            parts.append(part)
        biggest = max(effects, key=lambda e: abs(e[2]["accuracy"] - e[1]["accuracy"]))
        text = f"{words} ({every(middle)}) " + "; ".join(parts)
        if len(effects) > 1:
            text += f". It mattered most for {biggest[0]} ({biggest[1]['loss']})"
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
        fig, axes = plt.subplots(1, len(varied), figsize=(4.6 * len(varied), 3.4), squeeze=False)
        for ax, m in zip(axes[0], varied, strict=True):
            for r in results:
                k = r.point.knobs
                if r.point.model != m or k["period"] != middle:
                    continue
                label = (
                    k.get("variant") and f"{k['variant']}: {k[k['variant']]}" or "shared, uniform"
                )
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
                label = (
                    k.get("variant") and f"{k['variant']}: {k[k['variant']]}" or "shared, uniform"
                )
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
