"""Section 1 of the suite: each Beam job against a plain loop doing the same work."""

from __future__ import annotations

import shutil
import statistics
import time
from pathlib import Path

from benchmarks.common import (
    SuiteConfig,
    fmt,
    log,
    raw_sample,
    tile_sample,
    time_call,
)

BEAM_CONFIGS = (
    ("Beam, 1 worker", ["--direct_num_workers=1", "--direct_running_mode=in_memory"]),
    ("Beam, 2 workers", ["--direct_num_workers=2", "--direct_running_mode=multi_processing"]),
)


# Records of the tiny input whose run is a set-up's start-up (pipeline construction,
# worker processes, file handling), per data set.
STARTUP_SIZES = {"mnist": 120, "dbpedia": 140, "gutenberg": 20000}


def bench_preprocessing(cfg: SuiteConfig, tmp: Path) -> list[dict]:
    """Section 1: each Beam job against its plain loop, per record, start-up apart.

    Every repeat runs the plain loop and both Beam set-ups on a tiny input (their
    start-up) and on the timed input, one after the other, and gives each its per-record
    cost and its ratio to the plain loop's in that same repeat; the table shows the median
    over repeats and the range of the ratio. Compared with timing two sizes n and 2n, the
    whole timed input is signal: three times the signal for the same time.
    """

    import tensorflow  # noqa: F401  (loaded before timing: start-up is not the loop's work)

    from benchmarks import plain
    from distrain.steps import preprocess

    sizes = {
        "mnist": cfg.mnist_records,
        "dbpedia": cfg.dbpedia_rows,
        "gutenberg": cfg.gutenberg_chars,
    }
    names = ["plain loop", *(name for name, _ in BEAM_CONFIGS)]
    rows = []
    for dataset, n in sizes.items():
        sample = raw_sample(tmp, dataset, n)
        tiny = raw_sample(tmp, dataset, STARTUP_SIZES[dataset])
        tiles = cfg.preprocess_tiles[dataset]
        timed = tile_sample(dataset, sample, tmp / f"{dataset}-x", tiles)
        raws = {"start-up": tiny, "timed": timed}
        # timings[name][repeat] = [(records, seconds) of the start-up run, of the timed run]
        timings: dict[str, list[list[tuple[int, float]]]] = {name: [] for name in names}
        for rep in range(cfg.preprocess_repeats):
            for name in names:
                timings[name].append([])
            for size, raw in raws.items():
                seconds, records = time_call(
                    getattr(plain, dataset), raw, tmp / f"p-{dataset}-{size}-{rep}"
                )
                shutil.rmtree(tmp / f"p-{dataset}-{size}-{rep}", ignore_errors=True)
                timings["plain loop"][rep].append((records, seconds))
                for i, (name, args) in enumerate(BEAM_CONFIGS):
                    out = tmp / f"b-{dataset}-{size}-{i}-{rep}"
                    start = time.perf_counter()
                    meta = preprocess(dataset, raw, out, beam_args=["--runner=FnApiRunner", *args])
                    seconds = time.perf_counter() - start
                    written = sum(meta["splits"].values())
                    assert written == records, f"{dataset}: Beam wrote {written}, plain {records}"
                    timings[name][rep].append((written, seconds))
                    shutil.rmtree(out, ignore_errors=True)
            log(f"preprocessing {dataset}, repeat {rep + 1}: {records} records timed")
        plain_costs = [_per_record(points) for points in timings["plain loop"]]
        for name in names:
            costs = [_per_record(points) for points in timings[name]]
            ratios = [c / p for c, p in zip(costs, plain_costs, strict=True)]
            (tiny_n, _), (timed_n, _) = timings[name][0]
            tiny_s = [points[0][1] for points in timings[name]]
            timed_s = [points[1][1] for points in timings[name]]
            per_record = statistics.median(costs)
            # The timed run's excess over the start-up run has to stand out of the
            # run-to-run spread, or the per-record cost is start-up noise (the 2-worker
            # runner's process start).
            work = statistics.median(timed_s) - statistics.median(tiny_s)
            noise = max(max(tiny_s) - min(tiny_s), max(timed_s) - min(timed_s))
            resolved = work > noise
            rows.append(
                {
                    "dataset": dataset,
                    "pipeline": name,
                    "records": [tiny_n, timed_n],
                    "seconds": [min(tiny_s), min(timed_s)],
                    "repeats": len(costs),
                    "records_per_second": timed_n / min(timed_s),
                    "per_record_us": per_record * 1e6 if resolved else None,
                    "startup_seconds": max(0.0, min(tiny_s) - tiny_n * per_record),
                    "work_seconds": work,
                    "noise_seconds": noise,
                    "per_record_vs_plain": statistics.median(ratios) if resolved else None,
                    "ratio_range": [min(ratios), max(ratios)],
                }
            )
    return mark_unresolved(rows)


def mark_unresolved(rows: list[dict]) -> list[dict]:
    """A data set whose plain loop cost is lost in the noise has no ratios to give."""
    for row in rows:
        base = next(
            r for r in rows if r["dataset"] == row["dataset"] and r["pipeline"] == "plain loop"
        )
        if base["per_record_vs_plain"] is None and row["per_record_vs_plain"] is not None:
            row["per_record_vs_plain"] = None
            row["work_seconds"], row["noise_seconds"] = base["work_seconds"], base["noise_seconds"]
            row["unresolved_by"] = "plain loop"
    return rows


def _per_record(points: list[tuple[int, float]]) -> float:
    """Seconds per record from two sizes; at least 0.1 % of the larger run's mean (timing
    noise can make the difference vanish on tiny inputs)."""
    (n1, t1), (n2, t2) = points
    return max((t2 - t1) / max(n2 - n1, 1), 0.001 * t2 / n2)


def targets(results: dict) -> list[dict]:
    """Section 1's targets: each Beam set-up's per-record cost against the plain loop."""
    out = []
    prep = results["preprocessing"]
    for dataset in ("mnist", "dbpedia", "gutenberg"):
        by = {r["pipeline"]: r for r in prep if r["dataset"] == dataset}
        one, two = by["Beam, 1 worker"], by["Beam, 2 workers"]
        out.append(
            _ratio_target(
                one,
                f"{dataset}: Beam (1 worker) per-record cost <= 1.5x the plain loop",
                1.5,
                "{:.2f}x",
                "{:.2f}x over",
            )
        )
        out.append(
            _ratio_target(
                two,
                f"{dataset}: Beam (2 workers) per record faster than the plain loop",
                1.0 - 1e-9,
                "{:.2f}x the loop's time",
                "{:.2f}x slower",
            )
        )
    return out


def _ratio_target(row: dict, target: str, limit: float, measured: str, miss: str) -> dict:
    """A per-record target; not met when the measure did not stand out of the noise."""
    ratio = row["per_record_vs_plain"]
    if ratio is None:
        return {
            "target": target,
            "measured": "not resolved",
            "met": False,
            "miss": (
                "not measurable here: the timed run's excess over the start-up run"
                + (f" of the {row['unresolved_by']}" if row.get("unresolved_by") else "")
                + f", {row['work_seconds']:.2f} s, is within the run-to-run spread of "
                f"{row['noise_seconds']:.2f} s (start-up {row['startup_seconds']:.1f} s)"
            ),
        }
    return {
        "target": target,
        "measured": measured.format(ratio),
        "met": ratio <= limit,
        "miss": miss.format(ratio / limit if limit > 1 else ratio),
    }


def render(results: dict) -> list[str]:
    """Section 1's lines of BENCHMARKS.md."""
    lines: list[str] = []
    tiles = results.get("config", {}).get("preprocess_tiles", {})
    copies = ", ".join(f"{n} ({d})" for d, n in tiles.items()) or "several"
    lines += [
        "",
        "## 1. Preprocessing",
        "",
        "Each Beam job against `benchmarks/plain.py`, a plain loop doing the same parsing, "
        "split, vocabulary and `tf.train.Example` records with the library's own functions "
        "(records encoded and written without TensorFlow, as the Beam workers do). The "
        f"timed input is a generated sample copied {copies} times in each data set's own "
        "format; each set-up also runs a tiny input of the same format (a few records: "
        "its start-up). The per-record cost is (t(timed) - t(tiny)) / (records between "
        "them), so start-up (pipeline construction, worker processes) cancels out and is "
        "shown apart. Each repeat runs all three set-ups on both inputs back to back and "
        "takes the ratio to the plain loop within the repeat; the table gives the median "
        "over repeats (and the ratio's range), seconds are the fastest repeat.",
        "",
        "| data set | pipeline | records (tiny, timed) | seconds (tiny, timed) | "
        "records/s, timed | "
        "µs/record | start-up s | per record vs plain (range) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results["preprocessing"]:
        ratio = r["per_record_vs_plain"]
        low, high = r.get("ratio_range", [ratio, ratio])
        vs_plain = (
            f"{ratio:.2f}x ({low:.2f}-{high:.2f})"
            if ratio is not None
            else f"not resolved: {r['work_seconds']:.2f} s of work, "
            f"{r['noise_seconds']:.2f} s of spread"
            + (f" ({r['unresolved_by']})" if r.get("unresolved_by") else "")
        )
        lines.append(
            f"| {r['dataset']} | {r['pipeline']} | {r['records'][0]:,}, {r['records'][1]:,} | "
            f"{r['seconds'][0]:.2f}, {r['seconds'][1]:.2f} | {r['records_per_second']:,.0f} | "
            f"{fmt(r['per_record_us'], '.1f')} | {r['startup_seconds']:.1f} | {vs_plain} |"
        )
    return lines
