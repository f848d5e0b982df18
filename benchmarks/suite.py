"""distrain's benchmark suite: every measure on this machine in one run, with targets.

    scripts/bench.sh                      # the whole suite -> BENCHMARKS.md, results.json
    .venv/bin/python -m benchmarks.suite --quick --output /tmp/b.md   # a smoke run

Measures (the sections of BENCHMARKS.md):

1. Preprocessing: records/second of each Beam job against a plain loop doing the same
   work (``benchmarks/plain.py``), with 1 and 2 Beam workers, on a tiny input (the
   start-up) and a timed one; the per-record cost is the difference between them.
   1b: the same jobs on Beam's Dask runner (a local two-worker cluster) beside the
   local runner, in records/second (``--only dask`` measures it alone).
2. Training throughput per mode and worker count, every configuration on the same cores.
   Sync scaling efficiency against one worker on 1/N of the cores, phase-paired within
   one sync:2 run (``benchmarks/paired_worker.py``: sync steps, the same steps without
   the allreduce, each rank alone, taking turns every second or so); beside it whole
   runs, each set against the one-core runs just before and after it, and against one
   process on all the cores; two independent one-core processes give the machine's own
   ceiling.
3. Time to accuracy (MNIST, DBPedia) or bits/char (Gutenberg) per mode.
4. Horovod allreduce bandwidth against message size (2 ranks on loopback) next to the
   ring bound 2(N-1)/N * S / B, with B measured on the same loopback.
5. Orchestration overhead: each kfp.local pipeline run of section 3 against the sum of
   its steps' own compute time.
6. Peak resident memory of each step's process tree, in those same runs.
7. A scaling plan: the cost model T_comm = K (T_lat + N T_data) for ring allreduce (sync)
   and parameter-server traffic (async), fitted to nothing but the measured single-worker
   step time, the model size and a link's bandwidth and latency; checked against the
   measurements at N = 1 and 2, then extrapolated.

Each section is a module of ``benchmarks/sections/`` (its measure, its targets and its
lines of the report; sections 9-13 are ``benchmarks/model_parallel.py``, ``prose.py``,
``full_size.py``, ``beam_memory.py`` and ``full_others.py``; 14, the plan's link model on
a simulated network, ``netsim.py``, ``--only plan``); ``benchmarks/render.py``
writes BENCHMARKS.md from the results. This module runs them in order and writes both files.

Timings are ratios measured in one run on one machine: compare rows, not machines.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.beam_memory import bench_beam_memory
from benchmarks.common import ROOT, SuiteConfig, log, machine
from benchmarks.full_others import bench_full_others
from benchmarks.full_size import bench_full_size
from benchmarks.model_parallel import bench_models
from benchmarks.netsim import bench_plan
from benchmarks.prose import bench_prose
from benchmarks.render import write
from benchmarks.sections import targets
from benchmarks.sections.allreduce import bench_allreduce
from benchmarks.sections.dask import bench_dask
from benchmarks.sections.peers import bench_peers
from benchmarks.sections.pipelines import bench_pipelines
from benchmarks.sections.preprocessing import bench_preprocessing
from benchmarks.sections.scaling import scaling_plan
from benchmarks.sections.training import bench_training
from distrain.base.costmodel import fit_link


def _measure_alone(args, cfg: SuiteConfig, tmp: Path) -> int:
    """``--only SECTION``: measures one section and merges it into the existing results."""
    results: dict = {}

    def peers() -> dict:
        section = bench_peers(cfg, tmp)
        section["measured_alone"] = machine(cfg)["date"]
        return section

    sections = {  # --only name: (results key, progress line, measure)
        "models": (
            "models",
            "9/9 models under data and model parallelism",
            lambda: _models(cfg, tmp, results),
        ),
        "prose": ("prose", "10/10 real prose", lambda: _prose(cfg, tmp, args.json)),
        "full": ("full_size", "11 DBPedia at full size", lambda: _full_size(cfg, tmp)),
        "memory": ("beam_memory", "12 Beam jobs' memory", lambda: _beam_memory(cfg, tmp)),
        "others": (
            "full_others",
            "13 MNIST and Gutenberg at full size",
            lambda: _full_others(cfg, tmp),
        ),
        "dask": ("dask", "1b/9 Beam's Dask runner", lambda: bench_dask(cfg, tmp)),
        "peers": ("peers", "8/9 each mode against its plain-TensorFlow peer", peers),
        "plan": ("plan", "14 the plan's link model on a simulated network", bench_plan),
    }
    key, line, measure = sections[args.only]
    try:
        results.update(json.loads(Path(args.json).read_text()))
        log(f"{line} (alone)")
        results[key] = measure()
        if key in ("peers", "full_size", "beam_memory", "full_others"):
            results["targets"] = targets(results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _write(args, results)


def main(argv: list[str] | None = None) -> int:
    """Runs the suite and writes the Markdown report and the JSON results."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--output", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results.json"))
    parser.add_argument("--quick", action="store_true", help="tiny workloads (a smoke run)")
    parser.add_argument("--link-gbps", type=float, default=10.0)
    parser.add_argument("--link-latency-us", type=float, default=20.0)
    parser.add_argument(
        "--only",
        choices=["peers", "dask", "models", "prose", "full", "memory", "others", "plan"],
        help="measure this section alone and merge it into the existing results",
    )
    args = parser.parse_args(argv)
    link = {"link_gbps": args.link_gbps, "link_latency_us": args.link_latency_us}
    cfg = SuiteConfig.small(**link) if args.quick else SuiteConfig(**link)

    start = time.perf_counter()
    tmp = Path(tempfile.mkdtemp(prefix="distrain-bench-"))
    if args.only:
        return _measure_alone(args, cfg, tmp)
    try:
        results: dict = {"machine": machine(cfg), "config": cfg.__dict__}
        log("1/9 preprocessing")
        results["preprocessing"] = bench_preprocessing(cfg, tmp)
        log("1b/9 Beam's Dask runner")
        results["dask"] = bench_dask(cfg, tmp)
        log("2/9 training throughput")
        results["training"] = bench_training(cfg, tmp)
        log("3,5,6/9 pipelines with kfp.local: time to accuracy, overhead, memory")
        results["steps"] = bench_pipelines(cfg, tmp)
        log("4/9 allreduce")
        results["allreduce"] = bench_allreduce(cfg, tmp)
        log("7/9 scaling plan")
        results["scaling"] = scaling_plan(cfg, results["training"], results["allreduce"])
        log("8/9 each mode against its plain-TensorFlow peer")
        results["peers"] = bench_peers(cfg, tmp)
        log("9/9 models under data and model parallelism")
        results["models"] = _models(cfg, tmp, results)
        log("10/10 real prose")
        results["prose"] = _prose(cfg, tmp, args.json)
        log("11 DBPedia at full size, and how cost grows")
        results["full_size"] = _full_size(cfg, tmp)
        log("12 Beam jobs' memory as the input grows")
        results["beam_memory"] = _beam_memory(cfg, tmp)
        log("13 MNIST and Gutenberg at full size; the LSTM against plain tf-keras")
        results["full_others"] = _full_others(cfg, tmp)
        log("14 the plan's link model on a simulated network")
        results["plan"] = bench_plan(steps=2 if cfg.quick else 16)
        # Each race untuned and tuned: measured apart (about two hours), carried over.
        results["tuned"] = None if cfg.quick else kept(args.json, "tuned")
        results["targets"] = targets(results)
        results["suite_seconds"] = time.perf_counter() - start
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return _write(args, results)


def _models(cfg: SuiteConfig, tmp: Path, results: dict) -> dict:
    """Section 9, on the link that section 4 measured (fitted to Horovod's allreduce)."""
    return bench_models(cfg, tmp, fit_link(results["allreduce"]), log)


def _prose(cfg: SuiteConfig, tmp: Path, previous: str | Path) -> dict | None:
    """Section 10: the Gutenberg pipeline on real prose, when Debian's jargon-text is here.

    Its table of texts × seeds is measured apart (``python -m benchmarks.prose``, about an
    hour and a half) and carried over from the results file ``previous``, with its own
    date, so that measuring the suite again does not drop it.
    """
    section = bench_prose(cfg.quick, tmp, log)
    if section is not None:
        section["measured"] = machine(cfg)["date"]
        for key in ("texts", "texts_tuned"):
            texts = kept_texts(previous, key)
            if texts and not cfg.quick:
                section[key] = texts
    return section


def kept_texts(previous: str | Path, key: str = "texts") -> dict | None:
    """Section 10's texts × seeds from the results file ``previous``, if it has them.

    Args:
        previous: The results file.
        key: ``texts`` (at the default rate) or ``texts_tuned`` (at the searched rate).
    """
    return (kept(previous, "prose") or {}).get(key)


def kept(previous: str | Path, key: str) -> dict | None:
    """A section measured apart (``python -m benchmarks.tuned``) from the results file."""
    path = Path(previous)
    return json.loads(path.read_text()).get(key) if path.exists() else None


def _full_size(cfg: SuiteConfig, tmp: Path) -> dict | None:
    """Section 11: DBPedia at 560,000 rows against fastText, and cost against size.

    Not in a ``--quick`` run (its point is the full size), nor without fastText
    (``fasttext-numpy2``, which ``scripts/bench.sh`` installs: a benchmark-only dependency).
    """
    if cfg.quick:
        return None
    try:
        import fasttext  # noqa: F401
    except ImportError:
        log("  skipped: fastText is not installed (pip install fasttext-numpy2)")
        return None
    section = bench_full_size(cfg.quick, tmp, log, repeats=cfg.full_size_repeats)
    section["measured"] = machine(cfg)["date"]
    return section


def _full_others(cfg: SuiteConfig, tmp: Path) -> dict | None:
    """Section 13: MNIST at 60,000 images, Gutenberg at 10 M characters, the LSTM's speed.

    Not in a ``--quick`` run (its point is the full size; its own test runs it small).
    """
    if cfg.quick:
        return None
    section = bench_full_others(cfg.quick, tmp, log, repeats=cfg.full_size_repeats)
    section["measured"] = machine(cfg)["date"]
    return section


def _beam_memory(cfg: SuiteConfig, tmp: Path) -> dict | None:
    """Section 12: each Beam job's peak memory at 1x, 4x and 16x its base input.

    Not in a ``--quick`` run: its point is the growth (its own test runs it small).
    """
    if cfg.quick:
        return None
    section = bench_beam_memory(cfg.quick, tmp, log)
    section["measured"] = machine(cfg)["date"]
    return section


def _write(args, results: dict) -> int:
    """Writes results.json and BENCHMARKS.md (rendered from it)."""
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2, default=str))
    # The committed report also refreshes the README's key results; a run elsewhere does not.
    default = Path(args.output).resolve() == (ROOT / "BENCHMARKS.md").resolve()
    report = write(results, Path(args.output), ROOT / "README.md" if default else None)
    print(report)
    met = sum(t["met"] for t in results["targets"])
    log(f"{met} of {len(results['targets'])} targets met; wrote {args.output} and {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
