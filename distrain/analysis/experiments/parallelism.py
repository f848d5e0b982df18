"""``parallelism`` (seed 004): six models under data, tensor, pipeline and hybrid splits.

Each model trains alone (``single:1``), data-parallel (``sync:2``), split by columns
(``tensor:2``), cut into two pipeline stages (``pipeline:2:micro=4``) and as one tensor
group inside data parallelism (``hybrid:1:2``): time per epoch, loss, quality and the
fullest rank's parameters and memory. A split a model cannot take is shown refused, with
the reason the mode gives.
"""

from __future__ import annotations

import numpy as np

from distrain import datasets
from distrain.analysis.compare import COLUMNS
from distrain.analysis.experiments import DataSource, Experiment, ExperimentConfig, Point, register
from distrain.analysis.experiments.report import Result, Table, fmt, png, pyplot
from distrain.base.errors import ConfigError
from distrain.base.verdict import accuracy_difference, with_interval
from distrain.learning.tasks import TASKS, quality_of
from distrain.train.config import RunSpec, TrainConfig


def models() -> dict[str, str]:
    """Seed 004's six models and the data set each learns, as the data sets declare them."""
    return {
        model: d.name
        for d in datasets.serving("parallelism")
        for model in d.experiments["parallelism"]["models"]
    }


def quality(dataset: str, evaluation: dict) -> tuple[str, bool]:
    """``(key, lower_is_better)`` of a run's quality in this study.

    Its task's declared metric (:func:`distrain.learning.tasks.quality_of`), unless the data
    set's declaration of the study names another (``"quality"``, e.g. a translation
    model's character accuracy, not its task's bits per character); that key's direction
    is the direction of the task that declares it.
    """
    key = datasets.get(dataset).experiments["parallelism"].get("quality")
    if key is None:
        return quality_of(evaluation)
    return key, next(t.lower_is_better for t in TASKS.values() if t.quality == key)


def training(dataset: str) -> tuple[int, float]:
    """A data set's batch and learning rate in this study (its declaration)."""
    own = datasets.get(dataset).experiments["parallelism"]
    return own["batch_size"], own["learning_rate"]


# The splits at two ranks, and what the report calls them.
RUNS = {
    "single:1": "one process",
    "sync:2": "data-parallel",
    "tensor:2": "tensor-parallel",
    "pipeline:2:micro=4": "pipeline-parallel",
    "hybrid:1:2": "hybrid-parallel",
}
ALONE = RUNS["single:1"]
SPLITS = (RUNS["tensor:2"], RUNS["pipeline:2:micro=4"], RUNS["hybrid:1:2"])
# What the report calls a quality key: the comparison table's header of it.
QUALITY_NAMES = {key: header for key, header, _ in COLUMNS}

# At the small scale, hybrid:1:2 (a tensor group inside data parallelism of one group,
# tensor:2's arithmetic with hybrid's process sets) trains these models only.
SMALL_HYBRID = ("mlp", "cnn")
# scale -> (models (None: all six), runs, epochs); each data set declares its generated
# sample's size at each scale (0: its default).
SCALES = {
    "tiny": (("mlp", "nbow"), ("single:1", "tensor:2"), 1),
    "small": (None, tuple(RUNS), 2),
    "full": (None, tuple(RUNS), 5),
}


def refusal(model: str, run: str) -> str | None:
    """Why ``run`` cannot train ``model`` (the mode's own words), or None when it can."""
    batch, rate = training(models()[model])
    try:
        TrainConfig(
            data_dir="",
            output_dir="",
            run=RunSpec.parse(run),
            model=model,
            batch_size=batch,
            learning_rate=rate,
        )
    except ConfigError as err:
        return str(err)
    return None


@register
class Parallelism(Experiment):
    """Seed 004's study: what each way of splitting the work costs each model."""

    name = "parallelism"
    title = "Data, tensor, pipeline and hybrid parallelism across six models"
    paper = "seed 004 (data, model, pipeline and hybrid parallelism)"

    def config(self, scale: str = "small", seed: int = 0) -> ExperimentConfig:
        chosen, runs, epochs = SCALES[scale]
        learns = models()
        chosen = chosen or tuple(learns)
        points, refused = [], []
        for model in chosen:
            dataset = learns[model]
            batch, rate = training(dataset)
            for run in runs:
                if scale == "small" and run == "hybrid:1:2" and model not in SMALL_HYBRID:
                    continue
                reason = refusal(model, run)
                if reason:
                    refused.append({"model": model, "run": run, "reason": reason})
                    continue
                knobs = {"model": model, "split": RUNS[run]}
                points.append(Point(dataset, model, run, epochs, batch, rate, seed, knobs))
        used = list(dict.fromkeys(learns[m] for m in chosen))
        notes = []
        if set(chosen) != set(learns):
            notes.append(f"{scale}: only {', '.join(chosen)}")
        if set(runs) != set(RUNS):
            notes.append(f"{scale}: only {', '.join(runs)}")
        if scale == "small":
            notes.append(f"small: hybrid:1:2 for {', '.join(SMALL_HYBRID)} only")
        return ExperimentConfig(
            experiment=self.name,
            scale=scale,
            seed=seed,
            data=tuple(
                DataSource(d, "sample", datasets.get(d).experiments[self.name]["sizes"][scale])
                for d in used
            ),
            points=tuple(points),
            settings={"refused": refused},
            notes=tuple(notes),
        ).checked()

    def analyse(self, config: ExperimentConfig, results: list[Result], figures=True) -> dict:
        rows = [row_of(r) for r in results]
        refused = list(config.settings.get("refused", []))
        sentences = sentences_of(rows, refused)
        table = Table(
            "Time per epoch, loss, quality and the fullest rank, per model and split",
            ["model", "split", "run", "s/epoch", "loss", "quality", "params/rank", "MB/rank"],
        )
        for row in rows:
            quality = "—"
            if row["quality"] is not None:
                quality = f"{row['quality']:.4f} {row['quality_name']}"
            table.rows.append(
                [
                    row["model"],
                    row["split"],
                    row["run"],
                    fmt(row["epoch_seconds"], "{:.2f}"),
                    fmt(row["loss"], "{:.4f}"),
                    quality,
                    fmt(row["parameters"], "{:,}"),
                    fmt(row["memory_mb"], "{:,.0f}"),
                ]
            )
        for item in refused:
            table.rows.append(
                [item["model"], RUNS.get(item["run"], item["run"]), item["run"], "refused"]
                + ["—", item["reason"], "—", "—"]
            )
        return {
            "sentences": sentences,
            "tables": [table],
            "figures": _figures(rows) if figures else [],
            "numbers": {"rows": rows, "refused": refused},
        }


def _epoch_seconds(history: dict) -> float | None:
    """Training seconds per epoch, over the epochs after the first (tracing) if there are more."""
    epochs = [e for e in history.get("epochs") or [] if "step_seconds" in e]
    steady = epochs[1:] or epochs
    return float(np.mean([e["step_seconds"] for e in steady])) if steady else None


def row_of(r: Result) -> dict:
    """One run's numbers."""
    key, lower_is_better = quality(r.point.dataset, r.evaluation)
    value = r.evaluation.get(key)
    parameters = r.history.get("parameters_per_rank") or []
    memory = r.history.get("peak_memory_per_rank") or []
    return {
        "model": r.point.model,
        "split": r.point.knobs["split"],
        "run": r.point.run,
        "epoch_seconds": _epoch_seconds(r.history),
        "loss": r.final("loss"),
        "quality": float(value) if value is not None else None,
        "quality_key": key if value is not None else None,
        "test_examples": r.evaluation.get("num_examples"),
        "quality_name": QUALITY_NAMES[key] if value is not None else None,
        "higher_is_better": not lower_is_better if value is not None else True,
        "parameters": int(max(parameters)) if parameters else None,
        "memory_mb": max(memory) / 2**20 if memory else None,
    }


def sentences_of(rows: list[dict], refused: list[dict]) -> list[str]:
    """What the splits cost and bought, model by model, in words from the numbers."""
    out = []
    faster: list[tuple[str, str]] = []  # (model, split) faster than one process
    for model in dict.fromkeys(r["model"] for r in rows):
        mine = [r for r in rows if r["model"] == model]
        timed = [r for r in mine if r["epoch_seconds"] is not None]
        single = next((r for r in mine if r["split"] == ALONE), None)
        if len(timed) >= 2:
            quick = min(timed, key=lambda r: r["epoch_seconds"])
            slow = max(timed, key=lambda r: r["epoch_seconds"])
            out.append(
                f"For {model}, {quick['split']} had the shortest epoch "
                f"({quick['epoch_seconds']:.2f} s) and {slow['split']} the longest "
                f"({slow['epoch_seconds']:.2f} s, "
                f"{slow['epoch_seconds'] / quick['epoch_seconds']:.1f}x as long)."
            )
        if single and single["epoch_seconds"]:
            for r in mine:
                if r is not single and (r["epoch_seconds"] or np.inf) < single["epoch_seconds"]:
                    faster.append((model, r["split"]))
        if single and single["parameters"]:
            split = [r for r in mine if r["split"] in SPLITS and r["parameters"] is not None]
            if split:
                parts = ", ".join(
                    f"{r['split']} {r['parameters'] / single['parameters']:.0%}" for r in split
                )
                out.append(
                    f"The fullest rank held this share of {model}'s {single['parameters']:,} "
                    f"parameters: {parts}."
                )
        if single and single["quality"] is not None:
            sentence = _quality_sentence(model, single, mine)
            if sentence:
                out.append(sentence)
    models = list(dict.fromkeys(r["model"] for r in rows))
    for kinds, words in (
        ((RUNS["sync:2"],), "Data parallelism"),
        (SPLITS, "A split of the model (tensor, pipeline or hybrid)"),
    ):
        won = [f"{m} ({split})" for m, split in faster if split in kinds]
        count = len({m for m, split in faster if split in kinds})
        if won:
            out.append(
                f"{words} beat one process's time per epoch for {count} of the {len(models)} "
                f"models: {', '.join(won)}."
            )
        elif models:
            out.append(
                f"{words} beat one process's time per epoch for none of the {len(models)} models."
            )
    by_run: dict[str, list[str]] = {}
    for item in refused:
        by_run.setdefault(item["run"], []).append(item["model"])
    for run, models_refused in by_run.items():
        first = next(i for i in refused if i["run"] == run)
        out.append(
            f"{run} refused {' and '.join(models_refused)}; its reason for {first['model']}: "
            f"{first['reason']}."
        )
    return out


def _quality_sentence(model: str, single: dict, mine: list[dict]) -> str | None:
    """How far a split's score went from one process's, judged where an interval allows."""
    others = [r for r in mine if r is not single and r["quality"] is not None]
    if not others:
        return None
    gap = max(others, key=lambda r: abs(r["quality"] - single["quality"]))
    diff = gap["quality"] - single["quality"]
    better = (diff > 0) == single["higher_is_better"]
    if abs(diff) < 1e-9:
        return (
            f"{model}'s {single['quality_name']} was {single['quality']:.4f} alone "
            f"and the same under every split ({len(others)})."
        )
    if single["quality_key"] != "accuracy":
        # One run each and no interval for this score: the difference is given, not judged.
        judged = "one run each, no interval to judge it by"
    elif accuracy_difference(
        gap["quality"], gap["test_examples"], single["quality"], single["test_examples"]
    ):
        judged = "beyond the 95 % intervals"
    else:
        return (
            f"{model}'s {single['quality_name']} alone was "
            f"{with_interval(single['quality'], single['test_examples'])}; no split "
            f"differed measurably from it (the furthest, {gap['split']}, at "
            f"{gap['quality']:.4f})."
        )
    return (
        f"{model}'s {single['quality_name']} alone was {single['quality']:.4f}; the "
        f"split furthest from it was {gap['split']} ({gap['quality']:.4f}, "
        f"{'better' if better else 'worse'} by {abs(diff):.4f}, {judged})."
    )


def _figures(rows: list[dict]) -> list[tuple[str, str]]:
    plt = pyplot()
    figures = []
    models = list(dict.fromkeys(r["model"] for r in rows))
    splits = list(dict.fromkeys(RUNS.values()))
    width = 0.8 / len(splits)
    for key, label, title in (
        ("epoch_seconds", "seconds per epoch", "Time per epoch"),
        ("parameters", "parameters on the fullest rank", "Parameters per rank"),
        ("memory_mb", "peak MB on the fullest rank", "Memory per rank"),
    ):
        fig, ax = plt.subplots(figsize=(7.5, 3.4))
        for k, split in enumerate(splits):
            values = []
            for m in models:
                row = next((r for r in rows if r["model"] == m and r["split"] == split), None)
                values.append((row or {}).get(key) or 0.0)
            ax.bar(np.arange(len(models)) + k * width, values, width, label=split)
        ax.set_xticks(np.arange(len(models)) + width * (len(splits) - 1) / 2, models)
        ax.set(ylabel=label, title=f"{title} (0: refused or not run)")
        if key == "epoch_seconds":
            ax.set_yscale("log")
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8)
        figures.append((title, png(fig)))
    return figures
