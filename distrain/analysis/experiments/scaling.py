"""``scaling`` (seed 000): speedup against workers and against model size, beside the cost model.

Seed 000 measured how much faster data-parallel and column-split (tensor) training got with
more workers and with wider layers. Here each worker is one process with one thread, so a
worker adds a core while there are cores to add: seed 000's net (784-480-160-10, and its
hidden layers 2, 4 and 8 times as wide) trains alone, data-parallel (``sync``) and split
by columns (``tensor``) at two ranks for every width, and at more ranks for one width.
Speedup is one worker's time per epoch over the run's (the epochs after the first, which
traces). Beside each measured point is the cost model's prediction
(:mod:`distrain.base.costmodel`) from the one-worker step time, the model's profile (recorded
by the evaluate step), the link fitted to the runs' own allreduce probes and the cores
the run's processes shared.
"""

from __future__ import annotations

import statistics

import numpy as np

from distrain.analysis.experiments import DataSource, Experiment, ExperimentConfig, Point, register
from distrain.analysis.experiments.report import Result, Table, fmt, png, pyplot
from distrain.base.costmodel import contention, fit_link
from distrain.base.verdict import accuracy_difference, with_interval
from distrain.train.config import RunSpec
from distrain.train.driver import steady

# The net at each width (hidden layers this many times seed 000's).
MODELS = {1: "fc", 2: "fc-x2", 4: "fc-x4", 8: "fc-x8"}
# The modes compared, and what the report calls them; one worker alone is the baseline.
MODES = {"sync": "data-parallel (sync)", "tensor": "tensor split"}
BASELINE = "single:1"
BATCH, RATE = 256, 1e-3
# scale -> (widths, the width the workers vary at, workers beside 1, epochs, sample size)
SCALES = {
    "tiny": ((1, 2), 2, (2,), 2, 600),
    "small": ((1, 2, 4, 8), 4, (2, 4), 3, 8000),
    "full": ((1, 2, 4, 8), 4, (2, 4, 8), 5, 0),
}


@register
class Scaling(Experiment):
    """Seed 000's study: speedup of data parallelism and of the column split."""

    name = "scaling"
    title = "Speedup against workers and model size, measured and predicted"
    paper = "seed 000 (data- and model-parallel training, its cost model)"

    def config(self, scale: str = "small", seed: int = 0) -> ExperimentConfig:
        data = self.dataset().name
        widths, sweep_width, workers, epochs, size = SCALES[scale]
        points = []

        def add(width: int, run: str, sweep: str):
            knobs = {"width": width, "sweep": sweep, "baseline": run == BASELINE}
            model = MODELS[width]
            points.append(Point(data, model, run, epochs, BATCH, RATE, seed, knobs, threads=1))

        for width in widths:
            add(width, BASELINE, "width")
            for mode in MODES:
                add(width, f"{mode}:2", "width")
        for n in workers:
            for mode in MODES:
                if n != 2:  # two ranks at this width are the width sweep's points
                    add(sweep_width, f"{mode}:{n}", "workers")
        notes = [f"{scale}: one process per worker, one thread each, batch {BATCH}"]
        return ExperimentConfig(
            experiment=self.name,
            scale=scale,
            seed=seed,
            data=(DataSource(data, "sample", size),),
            points=tuple(points),
            settings={"sweep_width": sweep_width},
            notes=tuple(notes),
        ).checked()

    def analyse(self, config: ExperimentConfig, results: list[Result], figures=True) -> dict:
        link = link_of(results)
        rows = rows_of(results, link)
        sweep_width = config.settings.get("sweep_width")
        sentences = sentences_of(rows, link, sweep_width)
        table = Table(
            "Time per epoch and speedup over one worker on one core: measured and predicted",
            [
                "model",
                "params",
                "run",
                "s/epoch",
                "predicted",
                "speedup",
                "predicted",
                "error",
                "accuracy",
            ],
        )
        for row in rows:
            table.rows.append(
                [
                    row["model"],
                    f"{row['parameters']:,}",
                    row["run"],
                    fmt(row["epoch_seconds"], "{:.3f}"),
                    fmt(row["predicted_epoch_seconds"], "{:.3f}"),
                    fmt(row["speedup"], "{:.2f}x"),
                    fmt(row["predicted_speedup"], "{:.2f}x"),
                    fmt(row["error"], "{:+.0%}"),
                    fmt(row["accuracy"], "{:.4f}"),
                ]
            )
        return {
            "sentences": sentences,
            "tables": [table],
            "figures": _figures(rows, sweep_width) if figures else [],
            "numbers": {"rows": rows, "link": link},
        }


def link_of(results: list[Result]) -> dict | None:
    """The link fitted to the allreduce probes of the runs whose ranks each had a core.

    Runs whose ranks shared cores are left out: their probes time the scheduler as much
    as the link. Each size's median over the runs is fitted.
    """
    by_ranks: dict[int, dict[int, list[float]]] = {}
    for r in results:
        probe = r.history.get("link_probe")
        cores = r.history.get("host_cores")
        if not probe or (cores and probe["ranks"] > cores):
            continue
        sizes = by_ranks.setdefault(probe["ranks"], {})
        for row in probe["rows"]:
            sizes.setdefault(row["bytes"], []).append(row["seconds"])
    if not by_ranks:
        return None
    ranks = max(by_ranks, key=lambda n: sum(len(v) for v in by_ranks[n].values()))
    rows = [
        {"bytes": size, "seconds": statistics.median(times)}
        for size, times in sorted(by_ranks[ranks].items())
    ]
    bandwidth, latency = fit_link({"ranks": ranks, "rows": rows})
    return {"bytes_per_second": bandwidth, "latency_seconds": latency, "ranks": ranks}


def _epoch_seconds(history: dict) -> float | None:
    """Mean training seconds of the epochs after the first (tracing), if there are more."""
    epochs = steady([e for e in history.get("epochs") or [] if "step_seconds" in e])
    return float(np.mean([e["step_seconds"] for e in epochs])) if epochs else None


def rows_of(results: list[Result], link: dict | None) -> list[dict]:
    """Each run's measured and predicted epoch and speedup over its width's one worker."""
    alone = {r.point.knobs["width"]: r for r in results if r.point.knobs.get("baseline")}
    rows = []
    for r in results:
        spec = RunSpec.parse(r.point.run)
        width, history = r.point.knobs["width"], r.history
        prof = r.evaluation.get("model_profile") or {}
        epoch = _epoch_seconds(history)
        steps = history["steps"] / max(len(history.get("epochs") or []), 1)
        base = alone.get(width)
        base_epoch = _epoch_seconds(base.history) if base else None
        predicted = None
        if base_epoch and prof:
            t1 = base_epoch / (base.history["steps"] / len(base.history["epochs"]))
            slow = contention(spec.processes, r.point.threads, history.get("host_cores"))
            # The mode's own equation (distrain.base.costmodel), from one worker's step.
            step = spec.impl.predicted_step(t1 * slow, prof, r.point.batch_size, link)
            predicted = step * steps if step is not None else None
        speedup = base_epoch / epoch if base_epoch and epoch else None
        rows.append(
            {
                "model": r.point.model,
                "width": width,
                "sweep": r.point.knobs.get("sweep"),
                "parameters": int(prof.get("parameters") or 0),
                "run": r.point.run,
                "mode": spec.mode,
                "baseline": bool(r.point.knobs.get("baseline")),
                "workers": spec.workers,
                "host_cores": history.get("host_cores"),
                "epoch_seconds": epoch,
                "predicted_epoch_seconds": predicted,
                "speedup": speedup,
                "predicted_speedup": base_epoch / predicted if base_epoch and predicted else None,
                "error": predicted / epoch - 1.0 if predicted and epoch else None,
                "accuracy": r.evaluation.get("accuracy"),
                "test_examples": r.evaluation.get("num_examples"),
            }
        )
    return rows


def _direction(first: float, last: float) -> str:
    """Whether a value rose, fell or stayed within 5 % of where it started."""
    if abs(last - first) < 0.05 * max(abs(first), 1e-12):
        return "stayed level"
    return "rose" if last > first else "fell"


def _trend(first: float, last: float) -> str:
    """:func:`_direction` as words before the last value ("rose to 1.2x")."""
    words = {"stayed level": "stayed near", "rose": "rose to", "fell": "fell to"}
    return words[_direction(first, last)]


def sentences_of(rows: list[dict], link: dict | None, sweep_width: int | None) -> list[str]:
    """What the speedups were, how they moved with width and workers, and the model's error."""
    out = []
    if link:
        out.append(
            f"The link, fitted to the runs' own allreduce probes ({link['ranks']} ranks): "
            f"{link['bytes_per_second'] / 1e9:.2f} GB/s and "
            f"{link['latency_seconds'] * 1e6:.0f} µs a message."
        )
    else:
        out.append("No run recorded an allreduce probe: there is no link to predict with.")
    out += _width_sentences(rows)
    at_width = [r for r in rows if r["width"] == sweep_width and r["speedup"] is not None]
    for mode, words in MODES.items():
        mine = sorted((r for r in at_width if r["mode"] == mode), key=lambda r: r["workers"])
        if len(mine) < 2:
            continue
        most = mine[-1]
        cores = most["host_cores"]
        sentence = (
            f"With {most['model']}, {words} ran at "
            + ", ".join(f"{r['speedup']:.2f}x on {r['workers']} workers" for r in mine)
            + "."
        )
        if cores and most["workers"] > cores:
            sentence += (
                f" This host has {cores} cores: beyond {cores} workers they share them, "
                f"which the prediction ({fmt(most['predicted_speedup'], '{:.2f}x')} at "
                f"{most['workers']}) counts."
            )
        out.append(sentence)
    errors = [r["error"] for r in rows if r["error"] is not None and not r["baseline"]]
    if errors:
        out.append(
            f"The cost model's epochs were {min(errors):+.0%} to {max(errors):+.0%} off the "
            f"measured ones (median {statistics.median(errors):+.0%}) over "
            f"{len(errors)} runs."
        )
    scored = [r for r in rows if r["accuracy"] is not None]
    if scored:
        hi = max(scored, key=lambda r: r["accuracy"])
        lo = min(scored, key=lambda r: r["accuracy"])
        ranged = (
            f"Test accuracy ranged from {lo['accuracy']:.4f} to {hi['accuracy']:.4f} over the "
            f"{len(scored)} runs"
        )
        # Decided by the test set's 95 % intervals (distrain.base.verdict), not by a threshold.
        if accuracy_difference(
            hi["accuracy"], hi["test_examples"], lo["accuracy"], lo["test_examples"]
        ):
            out.append(f"{ranged}: the lowest is measurably below the highest.")
        else:
            out.append(
                f"{ranged}, inside the 95 % intervals "
                f"(the lowest {with_interval(lo['accuracy'], lo['test_examples'])}): no "
                "measurable difference in the models, so speed here is not bought with a "
                "worse one."
            )
    return out


def _width_sentences(rows: list[dict]) -> list[str]:
    """How each mode's speedup moved with the model's width, measured and predicted."""
    out = []
    width_rows = [r for r in rows if r["sweep"] == "width" and not r["baseline"]]
    for mode, words in MODES.items():
        mine = sorted(
            (r for r in width_rows if r["mode"] == mode and r["speedup"] is not None),
            key=lambda r: r["parameters"],
        )
        if len(mine) < 2:
            continue
        first, last = mine[0], mine[-1]
        best = max(mine, key=lambda r: r["speedup"])
        sentence = (
            f"At {first['workers']} workers, {words}'s speedup over one worker was "
            f"{first['speedup']:.2f}x at {first['parameters']:,} parameters and "
            f"{_trend(first['speedup'], last['speedup'])} {last['speedup']:.2f}x at "
            f"{last['parameters']:,}; its best was {best['speedup']:.2f}x ({best['model']})."
        )
        if first["predicted_speedup"] and last["predicted_speedup"]:
            measured = _direction(first["speedup"], last["speedup"])
            predicted = _direction(first["predicted_speedup"], last["predicted_speedup"])
            sentence += (
                f" The cost model predicted {first['predicted_speedup']:.2f}x and "
                f"{last['predicted_speedup']:.2f}x: "
                + (
                    "the same trend."
                    if measured == predicted
                    else f"it {predicted} where the measured speedup {measured}."
                )
            )
        out.append(sentence)
    return out


def _figures(rows: list[dict], sweep_width: int | None) -> list[tuple[str, str]]:
    plt = pyplot()
    colours = {"sync": "tab:blue", "tensor": "tab:orange"}
    figures = []
    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    at_width = [r for r in rows if r["width"] == sweep_width and r["speedup"] is not None]
    model = next((r["model"] for r in at_width), "")
    for mode, words in MODES.items():
        mine = sorted(
            (r for r in at_width if (r["mode"] == mode or r["baseline"])),
            key=lambda r: r["workers"],
        )
        x = [r["workers"] for r in mine]
        ax.plot(x, [r["speedup"] for r in mine], "o-", color=colours[mode], label=words)
        pred = [(r["workers"], r["predicted_speedup"]) for r in mine if r["predicted_speedup"]]
        if pred:
            ax.plot(*zip(*pred, strict=True), "s--", mfc="none", color=colours[mode],
                    label=f"{words}, predicted")  # fmt: skip
    cores = next((r["host_cores"] for r in rows if r["host_cores"]), None)
    if cores:
        ax.axvline(cores, color="grey", lw=0.8, ls=":", label=f"{cores} cores")
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set(
        xlabel="workers", ylabel="speedup over one worker", title=f"Speedup with workers ({model})"
    )
    ax.xaxis.set_major_locator(plt.MaxNLocator(integer=True))
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    figures.append(("Speedup against workers", png(fig)))

    fig, ax = plt.subplots(figsize=(8.5, 3.6))
    width_rows = [r for r in rows if r["sweep"] == "width" and r["speedup"] is not None]
    for mode, words in MODES.items():
        mine = sorted((r for r in width_rows if r["mode"] == mode), key=lambda r: r["parameters"])
        if not mine:
            continue
        x = [r["parameters"] for r in mine]
        label = f"{mode}:{mine[0]['workers']}, {words}"
        ax.plot(x, [r["speedup"] for r in mine], "o-", color=colours[mode], label=label)
        pred = [(r["parameters"], r["predicted_speedup"]) for r in mine if r["predicted_speedup"]]
        if pred:
            ax.plot(*zip(*pred, strict=True), "s--", mfc="none", color=colours[mode],
                    label=f"{label}, predicted")  # fmt: skip
    ax.axhline(1.0, color="black", lw=0.6)
    ax.set_xscale("log")
    # One tick per width, in millions of parameters (a log axis's own minor labels crowd).
    sizes = sorted({r["parameters"] for r in width_rows if r["parameters"]})
    ax.set_xticks(sizes, [f"{n / 1e6:.2g}M" for n in sizes])
    ax.xaxis.set_minor_locator(plt.NullLocator())
    ax.set(xlabel="parameters (hidden layers widened)", ylabel="speedup over one worker",
           title="Speedup with model size")  # fmt: skip
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    figures.append(("Speedup against model size", png(fig)))
    return figures
