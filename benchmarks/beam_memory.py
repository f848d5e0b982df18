"""Section 12 of the suite: each Beam job's peak memory as its input grows.

Each data set's generated sample at a base size (DBPedia 140,000 training rows, MNIST 60,000
training images, Gutenberg 6.25 M characters), then 4 and 16 copies of it
(``benchmarks.common.tile_sample``: every record parsed and written again), each through
``distrain preprocess NAME`` (the local runner) in a process of its own; the peak resident
memory of its whole process tree, sampled every 50 ms. The target: under 1 GB at 16x, as
the input grows 16-fold (the copies repeat the base's tokens and characters, so a
vocabulary stays the base's size; the rows, images and windows are 16 times as many).

Memory is what this section judges; its times are given (they are process wall times, the
same measure as section 11's) but judged by nothing, so it may run beside other work:

    .venv/bin/python -m benchmarks.suite --only memory
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from benchmarks.full_size import _span, generate_sample, provenance, slope, timed

PY = sys.executable
BASES = {"dbpedia": 140_000, "mnist": 60_000, "gutenberg": 6_250_000}
QUICK_BASES = {"dbpedia": 1_400, "mnist": 1_000, "gutenberg": 100_000}
FACTORS, QUICK_FACTORS = (1, 4, 16), (1, 2)
LIMIT = 2**30


def _written(out: Path) -> tuple[int, int]:
    """TFRecord files under ``out`` and their bytes."""
    files = [p for p in out.rglob("part-*") if p.is_file() and p.suffix != ".jsonl"]
    return len(files), sum(p.stat().st_size for p in files)


def bench_beam_memory(
    quick: bool, tmp: Path, log, bases: dict | None = None, factors: tuple | None = None
) -> dict:
    """Measures the section (see the module's docstring); returns its results."""
    from benchmarks.common import tile_sample

    bases = bases or (QUICK_BASES if quick else BASES)
    factors = factors or (QUICK_FACTORS if quick else FACTORS)
    jobs = {}
    for name, base in bases.items():
        raw = generate_sample(name, base, tmp / f"memory-{name}-x1")
        rows = []
        for factor in factors:
            data = raw if factor == 1 else tmp / f"memory-{name}-x{factor}"
            if factor > 1:
                tile_sample(name, raw, data, factor)
            raw_bytes = sum(p.stat().st_size for p in data.rglob("*") if p.is_file())
            log(f"  {name} x{factor} ({raw_bytes / 2**20:,.0f} MB): preprocess")
            out = tmp / f"memory-{name}-x{factor}-out"
            cmd = [PY, "-m", "distrain", "preprocess", name, "--data", str(data)]
            seconds, peak = timed([*cmd, "--output", str(out)])
            files, written = _written(out)
            rows.append(
                {
                    "factor": factor,
                    "raw_bytes": raw_bytes,
                    "seconds": seconds,
                    "peak_bytes": peak,
                    "files": files,
                    "written_bytes": written,
                }
            )
            shutil.rmtree(out)
            if factor > 1:
                shutil.rmtree(data)
        shutil.rmtree(raw)
        sizes = [r["raw_bytes"] for r in rows]
        jobs[name] = {
            "base": base,
            "rows": rows,
            "memory_slope": slope(sizes, [r["peak_bytes"] or 0 for r in rows]),
        }
    return {"jobs": jobs, "factors": list(factors)}


def beam_memory_targets(section: dict) -> list[dict]:
    """One target per job: its peak memory at the largest input under 1 GB."""
    out = []
    for name, job in section["jobs"].items():
        last = job["rows"][-1]
        peak = last["peak_bytes"] or 0
        out.append(
            {
                "target": f"{name}: Beam job's peak memory at {last['factor']}x its base "
                f"input ({last['raw_bytes'] / 2**20:,.0f} MB) < 1 GB",
                "measured": f"{peak / 2**20:,.0f} MB",
                "met": peak < LIMIT,
                "miss": f"{(peak - LIMIT) / 2**20:,.0f} MB over",
            }
        )
    return out


BASE_UNITS = {"dbpedia": "training rows", "mnist": "training images", "gutenberg": "characters"}


def render_beam_memory(section: dict) -> list[str]:
    """Markdown lines of the section."""
    mb = 2**20
    lines = [
        "## 12. Beam jobs' memory as the input grows",
        "",
        "Each data set's generated sample at its base size, then copies of it "
        f"({', '.join(f'{f}x' for f in section['factors'])}), through `distrain preprocess` "
        "on the local runner, each a process of its own; the peak resident memory of its "
        "process tree, sampled every 50 ms. Copies repeat the base's tokens and characters: "
        "a vocabulary stays the base's size while the records grow. Times are process wall "
        "times, not judged here." + provenance(section),
        "",
        "| job | base | copies | input MB | peak MB | files | MB written | s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for name, job in section["jobs"].items():
        unit = BASE_UNITS.get(name, "records")
        for r in job["rows"]:
            lines.append(
                f"| {name} | {job['base']:,} {unit} | {r['factor']} | "
                f"{r['raw_bytes'] / mb:,.0f} | {_span([r['peak_bytes']], '{:,.0f}', mb)} | "
                f"{r['files']} | {r['written_bytes'] / mb:,.0f} | {r['seconds']:.0f} |"
            )
    slopes = ", ".join(
        f"{name} {job['memory_slope']:.2f}"
        for name, job in section["jobs"].items()
        if job.get("memory_slope") is not None
    )
    lines += ["", f"Slopes of peak memory against input size (log-log; 0 is flat): {slopes}."]
    return lines
