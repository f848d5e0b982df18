"""Section 11 of the suite: DBPedia at full size against fastText, and how cost grows.

Generated DBPedia rows in the exact ``dbpedia_csv`` format at growing sizes, up to the
real training set's 560,000. At each size: the Beam job (``distrain preprocess``) and one
epoch of ``single:1`` at the pipeline's defaults (batch 512, fastText-style model), each a
process of its own, timed, with the peak resident memory of its whole process tree. At the
largest size, fastText (``fasttext-numpy2``, a benchmark-only dependency: 2 threads, 5
epochs, dim 10, word bigrams) on the same training rows, scored on the same test rows, then
the pipeline's default model at the pipeline's defaults (its model, batch, rate, most epochs
and plateau stop: what ``distrain run dbpedia`` trains), then ours like for like: the same
size of model (``fasttext10``, 10 dimensions, at the rate the full data wants) for as many
epochs as fastText. Each pair is run in turn. The ratios, for each of our two runs: of the
mean epoch (each run's whole time over its epochs: fastText's reading of the file, our
tracing and validation, all in), and of the time to fastText's test accuracy (ours judged
on its validation split after each epoch; "reached" when inside fastText's 95 % interval,
as both lie at the generated data's ceiling) to fastText's whole run. The default model's
are judged (one epoch <= 3x, time to accuracy <= 2x); the like-for-like run's are
reported beside them with their own limits. Slopes are least-squares fits on log-log axes:
1 is linear time, 0 flat memory.

    .venv/bin/python -m benchmarks.suite --only full
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

PY = sys.executable
ROOT = Path(__file__).resolve().parents[1]
SIZES = (35_000, 140_000, 560_000)
QUICK_SIZES = (1_400, 2_800)
FASTTEXT = {"thread": 2, "epoch": 5, "dim": 10, "wordNgrams": 2}
# Ours like for like: fastText's size of model, at the learning rate of the full data.
LIKE_FOR_LIKE = ("fasttext10", 0.01)
# Targets of the like-for-like run: one epoch within 5x of fastText's; its accuracy in 10x.
EPOCH_LIMIT, ACCURACY_LIMIT = 5.0, 10.0
# Targets of the pipeline's default model: one epoch within 3x; fastText's accuracy within
# 2x fastText's whole run.
DEFAULT_EPOCH_LIMIT, DEFAULT_ACCURACY_LIMIT = 3.0, 2.0
BEAM_MEMORY_LIMIT = 2**30


def timed(args: list[str]) -> tuple[float, int | None]:
    """Runs ``args``; (wall seconds, peak resident bytes of its process tree)."""
    from distrain.base.memory import PeakTreeMemory

    start = time.perf_counter()
    proc = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    with PeakTreeMemory(proc.pid, interval=0.05) as peak:
        _, err = proc.communicate()
    seconds = time.perf_counter() - start
    if proc.returncode:
        raise RuntimeError(f"{' '.join(args)} failed ({proc.returncode}):\n{err.decode()[-2000:]}")
    return seconds, peak.peak_bytes


def slope(xs: list[float], ys: list[float]) -> float | None:
    """Least-squares slope of log(y) on log(x) (None with fewer than two points)."""
    pts = [(math.log(x), math.log(y)) for x, y in zip(xs, ys, strict=True) if x > 0 and y > 0]
    if len(pts) < 2:
        return None
    mx = sum(x for x, _ in pts) / len(pts)
    my = sum(y for _, y in pts) / len(pts)
    den = sum((x - mx) ** 2 for x, _ in pts)
    return sum((x - mx) * (y - my) for x, y in pts) / den if den else None


def train(data: str, out: str, epochs: int, model: str = "", learning_rate: float = 0.0) -> None:
    """One ``single:1`` run at the DBPedia pipeline's defaults, or with ``model`` at
    ``learning_rate`` (this module's ``train``). ``epochs`` 0: the pipeline's, the most,
    with its plateau stop."""
    from distrain.datasets.dbpedia.defaults import DEFAULTS
    from distrain.train.config import TrainConfig
    from distrain.train.launch import run_training

    run_training(
        TrainConfig(
            data_dir=data,
            output_dir=out,
            run="single:1",
            model=model or DEFAULTS.model,
            epochs=epochs or DEFAULTS.epochs,
            until_plateau=0 if epochs else DEFAULTS.until_plateau,
            batch_size=DEFAULTS.batch_size,
            learning_rate=learning_rate or DEFAULTS.learning_rate,
        )
    )


def _train_args(data: Path, out: Path, epochs: int, model=("", 0.0)) -> list[str]:
    args = [PY, "-m", "benchmarks.full_size", "train", str(data), str(out), str(epochs)]
    return args + ([model[0], str(model[1])] if model[0] else [])


def default_model() -> tuple[str, float]:
    """The DBPedia pipeline's default model and learning rate."""
    from distrain.datasets.dbpedia.defaults import DEFAULTS

    return DEFAULTS.model, DEFAULTS.learning_rate


def generate_sample(name: str, size: int, out: Path) -> Path:
    """A data set's generated sample of ``size`` in ``out`` (``distrain data NAME --sample``)."""
    cmd = [PY, "-m", "distrain", "data", name, "--sample", "--sample-size", str(size)]
    subprocess.run([*cmd, "--output", str(out)], check=True, stdout=subprocess.DEVNULL)
    return out


def provenance(section: dict) -> str:
    """The end of a section's first paragraph: when it was measured, and its note."""
    measured = f" Measured {section['measured']}." if section.get("measured") else ""
    return measured + (f" {section['note']}" if section.get("note") else "")


def _files(data: Path) -> tuple[int, int]:
    """TFRecord files the job wrote and their total bytes."""
    files = [p for p in data.glob("*/part-*") if p.is_file()]
    return len(files), sum(p.stat().st_size for p in files)


def run_fasttext(raw: Path, work: Path) -> dict:
    """fastText on the job's training rows (the same split), scored on the test rows."""
    import fasttext

    from benchmarks.bench_dbpedia import fasttext_files
    from distrain.datasets.dbpedia.rows import tokenize

    train_file, test_rows = fasttext_files(raw, work, 0, 0.1)
    start = time.perf_counter()
    model = fasttext.train_supervised(str(train_file), verbose=0, **FASTTEXT)
    seconds = time.perf_counter() - start
    test_file = work / "fasttext.test"
    test_file.write_text(
        "".join(f"__label__{r[2]} {' '.join(tokenize(r[3]))}\n" for r in test_rows)
    )
    count, precision_at_1, _ = model.test(str(test_file))  # one label a row: accuracy
    return {
        "seconds": seconds,
        "epoch_seconds": seconds / FASTTEXT["epoch"],
        "test_accuracy": float(precision_at_1),
        "test_rows": count,
        "settings": FASTTEXT,
    }


def model_dim(data: Path) -> int:
    """The embedding dimension of the pipeline's default DBPedia model on ``data`` (its
    size chooses it)."""
    from distrain.learning.models import load_info, model_spec

    model, _ = default_model()
    built = model_spec("dbpedia", model).build(load_info(data, model), 0)
    return int(built.layers[0].output_dim)


def time_to(history: dict, target: float) -> float | None:
    """Seconds into the run when the validation accuracy first reached ``target``
    (interpolated within the epoch that crossed it), or None."""
    from distrain.analysis.compare import time_to_target

    return time_to_target(history["epochs"], target)


def bench_full_size(
    quick: bool, tmp: Path, log, sizes=None, repeats: int = 1, tiled_from: int = 0
) -> dict:
    """Measures the section (see the module's docstring); returns its results.

    ``tiled_from``: sizes above it (multiples of it) are copies of that size's generated
    rows (the suite's ``tile_sample``) instead of generated ones: the generator is pure
    Python, minutes of a core at 560,000 rows, too long on a loaded machine.
    """
    from benchmarks.common import tile_sample

    sizes = list(sizes or (QUICK_SIZES if quick else SIZES))
    rows = []
    for size in sizes:
        raw, data = tmp / f"dbpedia-full-{size}", tmp / f"dbpedia-full-{size}-examples"
        copies = size // tiled_from if tiled_from and size > tiled_from else 1
        if copies > 1:
            if size % tiled_from:
                raise ValueError(f"{size} rows are not copies of {tiled_from}")
            log(f"  DBPedia {size:,} rows: {copies} copies of the {tiled_from:,} generated")
            tile_sample("dbpedia", tmp / f"dbpedia-full-{tiled_from}", raw, copies)
        elif not raw.exists():  # (a sample already in ``tmp`` is reused)
            log(f"  DBPedia {size:,} rows: generating")
            generate_sample("dbpedia", size, raw)
        raw_bytes = sum(p.stat().st_size for p in raw.iterdir())
        row = {"rows": size, "raw_bytes": raw_bytes, "copies": copies}
        row.update(preprocess=[], epoch=[])
        for i in range(repeats):
            log(f"  DBPedia {size:,} rows: preprocess {i + 1}/{repeats}")
            out = data if i == 0 else tmp / f"dbpedia-full-{size}-again"
            args = [PY, "-m", "distrain", "preprocess", "dbpedia", "--data", str(raw)]
            row["preprocess"].append(timed([*args, "--output", str(out)]))
            if i:
                subprocess.run(["rm", "-rf", str(out)], check=True)
        row["files"], row["tfrecord_bytes"] = _files(data)
        for i in range(repeats):
            log(f"  DBPedia {size:,} rows: one epoch of single:1 {i + 1}/{repeats}")
            out = tmp / f"run-{size}-{i}"
            seconds, peak = timed(_train_args(data, out, 1))
            history = json.loads((out / "history.json").read_text())
            row["epoch"].append((history["epochs"][0]["wall_seconds"], peak, seconds))
        rows.append(row)
    largest = rows[-1]
    raw = tmp / f"dbpedia-full-{largest['rows']}"
    data = tmp / f"dbpedia-full-{largest['rows']}-examples"
    epochs = FASTTEXT["epoch"]
    model, rate = LIKE_FOR_LIKE
    pairs, defaults = [], []
    for i in range(repeats):
        log(f"  fastText on {largest['rows']:,} rows {i + 1}/{repeats}")
        ft = run_fasttext(raw, tmp)
        log(f"  single:1 at the pipeline's defaults {i + 1}/{repeats}")
        out = tmp / f"run-default-{i}"
        seconds, peak = timed(_train_args(data, out, 0))
        history = json.loads((out / "history.json").read_text())
        defaults.append(compared(ft, history, largest, peak, default_model()))
        log(f"  single:1 with {model} at {rate:g}, {epochs} epochs {i + 1}/{repeats}")
        out = tmp / f"run-to-accuracy-{i}"
        seconds, peak = timed(_train_args(data, out, epochs, LIKE_FOR_LIKE))
        history = json.loads((out / "history.json").read_text())
        pairs.append(like_for_like(ft, history, largest, peak))
    return {
        "rows": rows,
        "dim": model_dim(data),
        **judged(pairs),
        "default": judged(defaults),
        "slopes": growth_slopes(rows),
    }


def judged(pairs: list[dict]) -> dict:
    """The comparison judged on its worst pair: the highest ratios, one run each, taken in
    turn; every pair kept (``pairs``) for the ranges."""
    worst = max(pairs, key=lambda p: p["epoch_ratio"])
    accuracy = [p["accuracy_ratio"] for p in pairs]
    return {
        **worst,
        "accuracy_ratio": None if None in accuracy else max(accuracy),
        "pairs": [
            {k: p[k] for k in ("epoch_ratio", "accuracy_ratio", "default_epoch_ratio")}
            | {
                "fasttext_epoch": p["fasttext"]["epoch_seconds"],
                "epoch": p["ours"]["epoch_seconds"],
            }
            for p in pairs
        ],
    }


def like_for_like(ft: dict, history: dict, largest: dict, peak: int | None) -> dict:
    """The fastText comparison, from fastText's results and the history of our
    like-for-like run."""
    return compared(ft, history, largest, peak, LIKE_FOR_LIKE)


def compared(ft: dict, history: dict, largest: dict, peak: int | None, run: tuple) -> dict:
    """The fastText comparison, from fastText's results and the history of our ``run``
    (its model and learning rate)."""
    from distrain.base.verdict import wilson

    low, _ = wilson(ft["test_accuracy"], ft["test_rows"])
    exact = time_to(history, ft["test_accuracy"])
    reached = time_to(history, low)
    model, rate = run
    ours_epoch = history["train_seconds"] / len(history["epochs"])
    default_epoch = min(e for e, _, _ in largest["epoch"])
    return {
        "fasttext": {**ft, "accuracy_low": low},
        "ours": {
            "model": model,
            "learning_rate": rate,
            "epoch_seconds": ours_epoch,
            "epochs": [
                {k: e[k] for k in ("epoch", "wall_seconds", "val_accuracy")}
                for e in history["epochs"]
            ],
            "seconds_to_fasttext_accuracy": reached,
            "seconds_to_exact_accuracy": exact,
            "run_seconds": history["train_seconds"],
            "peak_bytes": peak,
            "default_epoch_seconds": default_epoch,
        },
        "epoch_ratio": ours_epoch / ft["epoch_seconds"],
        "default_epoch_ratio": default_epoch / ft["epoch_seconds"],
        "accuracy_ratio": None if reached is None else reached / ft["seconds"],
    }


def growth_slopes(rows: list[dict]) -> dict:
    """Log-log slopes of time and peak memory against rows, for the job and the epoch."""
    n = [r["rows"] for r in rows]

    def best(row, key, i):
        return min(m[i] for m in row[key] if m[i] is not None) if row[key] else None

    return {
        "preprocess_seconds": slope(n, [best(r, "preprocess", 0) for r in rows]),
        "preprocess_memory": slope(n, [best(r, "preprocess", 1) for r in rows]),
        "epoch_seconds": slope(n, [best(r, "epoch", 0) for r in rows]),
        "epoch_memory": slope(n, [best(r, "epoch", 1) for r in rows]),
    }


def _over(ratio: float, limit: float) -> str:
    """How far a missed ratio target is over its limit: ``3.12x, 4% over``."""
    return f"{ratio:.2f}x, {ratio / limit - 1:.0%} over"


def full_size_targets(section: dict) -> list[dict]:
    """The section's targets, in the suite's form.

    A section whose timings are marked ``untrusted`` (the reason: a loaded host, say)
    judges none of its time ratios, one whose Beam memory is ``memory_superseded`` (the
    reason: the job changed since) does not judge that; rows made of copies cannot judge
    the time to accuracy (their validation rows have copies in the training split).
    """
    er, ar = section["epoch_ratio"], section["accuracy_ratio"]
    size = section["rows"][-1]["rows"]
    peak = max(m[1] or 0 for m in section["rows"][-1]["preprocess"])
    untrusted = section.get("untrusted")
    copies = section["rows"][-1].get("copies", 1) > 1
    out = [
        {
            "target": f"DBPedia {size:,} rows: one epoch of single:1 <= {EPOCH_LIMIT:g}x "
            "fastText's, same size of model",
            "measured": f"{er:.1f}x",
            "met": er <= EPOCH_LIMIT,
            "miss": _over(er, EPOCH_LIMIT),
        },
        {
            "target": f"DBPedia {size:,} rows: time to fastText's test accuracy (its 95 % "
            f"interval) <= {ACCURACY_LIMIT:g}x fastText's",
            "measured": "not reached" if ar is None else f"{ar:.1f}x",
            "met": ar is not None and ar <= ACCURACY_LIMIT,
            "miss": "not reached in as many epochs" if ar is None else _over(ar, ACCURACY_LIMIT),
        },
        {
            "target": f"DBPedia {size:,} rows: Beam job's peak memory < 1 GB",
            "measured": f"{peak / 2**20:,.0f} MB",
            "met": peak < BEAM_MEMORY_LIMIT,
            "miss": f"{(peak - BEAM_MEMORY_LIMIT) / 2**20:,.0f} MB over",
        },
    ]
    if copies:
        out[1].update(met=False, miss="not judged: the rows are copies (see section 11)")
    if untrusted:
        for t in out[:2]:
            t.update(met=False, miss=f"not judged: {untrusted}")
    if section.get("memory_superseded"):  # the job changed after: another section measures it
        out[2].update(met=False, miss=f"not judged: {section['memory_superseded']}")
    return _default_targets(section, size, copies, untrusted) + out


def _default_targets(section: dict, size: int, copies: bool, untrusted) -> list[dict]:
    """The pipeline's default model's two targets (none in results from before it was run)."""
    default = section.get("default")
    if not default:
        return []
    er, ar = default["epoch_ratio"], default["accuracy_ratio"]
    out = [
        {
            "target": f"DBPedia {size:,} rows: one epoch of the pipeline's default model "
            f"<= {DEFAULT_EPOCH_LIMIT:g}x fastText's",
            "measured": f"{er:.1f}x",
            "met": er <= DEFAULT_EPOCH_LIMIT,
            "miss": _over(er, DEFAULT_EPOCH_LIMIT),
        },
        {
            "target": f"DBPedia {size:,} rows: the pipeline's default model reaches fastText's "
            f"test accuracy (its 95 % interval) in <= {DEFAULT_ACCURACY_LIMIT:g}x fastText's "
            "whole run",
            "measured": "not reached" if ar is None else f"{ar:.1f}x",
            "met": ar is not None and ar <= DEFAULT_ACCURACY_LIMIT,
            "miss": "not reached in its run" if ar is None else _over(ar, DEFAULT_ACCURACY_LIMIT),
        },
    ]
    if copies:
        out[1].update(met=False, miss="not judged: the rows are copies (see section 11)")
    if untrusted:
        for t in out:
            t.update(met=False, miss=f"not judged: {untrusted}")
    return out


def _span(values, fmt="{:.1f}", scale=1.0) -> str:
    vals = [v / scale for v in values if v is not None]
    if not vals:
        return "—"
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if len(vals) == 1 or lo == hi else f"{fmt.format(lo)}–{fmt.format(hi)}"


def log_plot(series: dict, xs: list[float], width: int = 48, height: int = 12) -> list[str]:
    """A text plot of ``{mark: [y per x]}`` on log-log axes (one character a point)."""
    points = [(x, y, m) for m, ys in series.items() for x, y in zip(xs, ys, strict=True) if y]
    if len(xs) < 2 or not points:
        return []
    lx = [math.log(x) for x in xs]
    ly = [math.log(y) for _, y, _ in points]
    x0, x1, y0, y1 = min(lx), max(lx), min(ly), max(ly)
    grid = [[" "] * width for _ in range(height)]
    for x, y, mark in points:
        col = round((math.log(x) - x0) / ((x1 - x0) or 1) * (width - 1))
        row = round((math.log(y) - y0) / ((y1 - y0) or 1) * (height - 1))
        cell = grid[height - 1 - row][col]
        grid[height - 1 - row][col] = mark if cell in (" ", mark) else "*"
    top, bottom = f"{math.exp(y1):,.0f}", f"{math.exp(y0):,.0f}"
    pad = max(len(top), len(bottom))
    lines = [
        f"{(top if i == 0 else bottom if i == height - 1 else ''):>{pad}} |{''.join(r)}".rstrip()
        for i, r in enumerate(grid)
    ]
    lines.append(" " * pad + " +" + "-" * width)
    left, right = f"{xs[0]:,.0f}", f"{xs[-1]:,.0f} rows"
    lines.append(" " * (pad + 2) + left + " " * max(1, width - len(left) - len(right)) + right)
    return lines


def render_full_size(section: dict) -> list[str]:
    """Markdown lines of the section."""
    ft, sl = section["fasttext"], section["slopes"]
    mb = 2**20
    lines = [
        "## 11. DBPedia at full size, and how cost grows",
        "",
        "Generated rows in the `dbpedia_csv` format; each measure a process of its own, its "
        "whole process tree's peak resident memory sampled every 50 ms. One epoch: "
        "`single:1` at the pipeline's defaults (batch 512, the fastText-style model, "
        f"dimension {section.get('dim', 64)}). Ranges are over the repeats." + provenance(section),
        "",
        "| rows | raw MB | preprocess s | its peak MB | files (MB each) | one epoch s | "
        "its peak MB |",
        "|---|---|---|---|---|---|---|",
    ]

    def copied(r):
        return f" ({r['copies']} copies)" if r.get("copies", 1) > 1 else ""

    for r in section["rows"]:
        each = r["tfrecord_bytes"] / max(r["files"], 1) / mb
        lines.append(
            f"| {r['rows']:,}{copied(r)} | {r['raw_bytes'] / mb:.0f} | "
            f"{_span([m[0] for m in r['preprocess']])} | "
            f"{_span([m[1] for m in r['preprocess']], '{:,.0f}', mb)} | "
            f"{r['files']} ({each:.1f}) | {_span([m[0] for m in r['epoch']])} | "
            f"{_span([m[1] for m in r['epoch']], '{:,.0f}', mb)} |"
        )

    def s(v):
        return "—" if v is None else f"{v:.2f}"

    xs = [r["rows"] for r in section["rows"]]
    best = {
        key: [
            min((m[i] for m in r[key] if m[i] is not None), default=None) for r in section["rows"]
        ]
        for key in ("preprocess", "epoch")
        for i in (0,)
    }
    peaks = {
        key: [
            min((m[1] / 2**20 for m in r[key] if m[1] is not None), default=None)
            for r in section["rows"]
        ]
        for key in ("preprocess", "epoch")
    }
    plot = log_plot({"P": best["preprocess"], "E": best["epoch"]}, xs)
    memory = log_plot({"p": peaks["preprocess"], "e": peaks["epoch"]}, xs)
    if plot:
        lines += [
            "",
            "Seconds against rows (log-log; P preprocessing, E one epoch; * both), then peak "
            "MB (p, e):",
            "",
            "```",
            *plot,
            "",
            *memory,
            "```",
        ]
    lines += [
        "",
        f"Slopes (log-log, against rows; 1 is linear time, 0 flat memory): preprocessing "
        f"time {s(sl['preprocess_seconds'])}, its memory {s(sl['preprocess_memory'])}; one "
        f"epoch's time {s(sl['epoch_seconds'])}, its memory {s(sl['epoch_memory'])}.",
        "",
        f"fastText ({', '.join(f'{k} {v}' for k, v in ft['settings'].items())}) on the "
        f"largest size: {ft['seconds']:.1f} s for {ft['settings']['epoch']} epochs "
        f"({ft['epoch_seconds']:.2f} s each), test accuracy {ft['test_accuracy']:.4f}"
        + (
            f" (95 % interval from {ft['accuracy_low']:.4f}, {ft['test_rows']:,} rows)"
            if "accuracy_low" in ft
            else ""
        )
        + ". "
        + _ours_text(section),
    ]
    return lines


def _ours_text(section: dict) -> str:
    """The comparison's sentences: ours like for like, then the default model."""
    ours = section["ours"]
    model = ours.get("model")
    who = f"Ours like for like (`{model}` at {ours['learning_rate']:g})" if model else "Ours"
    pairs = section.get("pairs", [])
    text = f"{who}: {ours['epoch_seconds']:.1f} s an epoch over {len(ours['epochs'])} "
    text += f"(**{section['epoch_ratio']:.1f}x** fastText's"
    if len(pairs) > 1:
        text += (
            f", the highest of {len(pairs)} pairs run in turn: ours "
            f"{_span([p['epoch'] for p in pairs])} s, fastText "
            f"{_span([p['fasttext_epoch'] for p in pairs], '{:.2f}')} s, ratios "
            f"{_span([p['epoch_ratio'] for p in pairs])}x"
        )
    text += "); validation accuracy after each epoch " + ", ".join(
        f"{e['val_accuracy']:.4f}" for e in ours["epochs"]
    )
    reached = ours["seconds_to_fasttext_accuracy"]
    text += "; fastText's accuracy " + ("(its interval) " if model else "") + "reached "
    if reached is None:
        text += "in no epoch"
    else:
        text += f"at {reached:.1f} s ({reached / section['fasttext']['seconds']:.1f}x "
        text += "fastText's whole run"
        ratios = [p["accuracy_ratio"] for p in pairs]
        if len(pairs) > 1:
            got = [r for r in ratios if r is not None]
            text += f"; over the pairs {_span(got)}x, {len(ratios) - len(got)} not reached"
        ar = section["accuracy_ratio"]
        text += ", judged: " + ("not reached in a pair" if ar is None else f"**{ar:.1f}x**")
        text += ")"
    if model:
        exact = ours.get("seconds_to_exact_accuracy")
        text += ", its exact figure " + ("in no epoch" if exact is None else f"at {exact:.1f} s")
    text += "."
    if section.get("default"):
        text += " " + _default_text(section)
    elif "default_epoch_seconds" in ours:
        text += (
            f" The pipeline's default model (dimension {section.get('dim', 64)}): one epoch "
            f"{ours['default_epoch_seconds']:.1f} s, {section['default_epoch_ratio']:.1f}x "
            "fastText's (not judged: a model of another size)."
        )
    return text


def _default_text(section: dict) -> str:
    """The judged comparison's sentence: the pipeline's default model against fastText."""
    d = section["default"]
    ours, pairs = d["ours"], d.get("pairs", [])
    text = (
        f"**The pipeline's default model** (`{ours['model']}` at {ours['learning_rate']:g}, "
        f"dimension {section.get('dim', 64)} at this size, its most epochs and plateau stop): "
        f"{ours['epoch_seconds']:.1f} s an epoch over {len(ours['epochs'])} "
        f"(**{d['epoch_ratio']:.1f}x** fastText's, judged"
    )
    if len(pairs) > 1:
        text += f"; over {len(pairs)} pairs {_span([p['epoch_ratio'] for p in pairs])}x"
    text += "); validation accuracy after each epoch " + ", ".join(
        f"{e['val_accuracy']:.4f}" for e in ours["epochs"]
    )
    reached = ours["seconds_to_fasttext_accuracy"]
    if reached is None:
        return text + "; fastText's accuracy (its interval) reached in no epoch."
    ar = d["accuracy_ratio"]
    text += (
        f"; fastText's accuracy (its interval) reached at {reached:.1f} s "
        f"({reached / d['fasttext']['seconds']:.1f}x fastText's whole run, judged: "
        + ("not reached in a pair" if ar is None else f"**{ar:.1f}x**")
        + ")."
    )
    return text


if __name__ == "__main__":
    if len(sys.argv) in (5, 7) and sys.argv[1] == "train":
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
        extra = (sys.argv[5], float(sys.argv[6])) if len(sys.argv) == 7 else ()
        train(sys.argv[2], sys.argv[3], int(sys.argv[4]), *extra)
    else:
        raise SystemExit("usage: python -m benchmarks.full_size train DATA OUT EPOCHS [MODEL RATE]")
