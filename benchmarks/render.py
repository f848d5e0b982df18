"""BENCHMARKS.md from benchmarks/results.json: the header and targets, then each section's lines.

.venv/bin/python -m benchmarks.render             # BENCHMARKS.md again from results.json
.venv/bin/python -m benchmarks.render --readme    # README.md's key-results block too
"""

from __future__ import annotations

from benchmarks.full_size import render_full_size
from benchmarks.model_parallel import render_models
from benchmarks.prose import render_prose
from benchmarks.sections import allreduce, peers, pipelines, preprocessing, scaling, training
from benchmarks.sections.dask import render_dask


def render_markdown(results: dict) -> str:
    """BENCHMARKS.md from the results."""
    m = results["machine"]
    lines = [
        "# Benchmarks",
        "",
        f"Measured by `scripts/bench.sh` on {m['date']}: {m['cores']} cores ({m['cpu']}), "
        f"Python {m['python']}, TensorFlow {m['tensorflow']}, Beam {m['beam']}, "
        f"Horovod {m['horovod']}"
        + (f" (sync over {m['mpi']})" if m.get("mpi") else " (sync over gloo)")
        + f", KFP {m['kfp']}; the whole suite took "
        f"{results['suite_seconds'] / 60:.1f} minutes"
        + (" (**--quick: tiny workloads, not measurements**)." if m["quick"] else ".")
        + " All numbers come from one run on one shared machine: compare rows and ratios, "
        "not machines. `benchmarks/results.json` has every value.",
        "",
        "## Targets",
        "",
        "| target | measured | met |",
        "|---|---|---|",
    ]
    for t in results["targets"]:
        met = "yes" if t["met"] else f"**no** ({t['miss']})"
        lines.append(f"| {t['target']} | {t['measured']} | {met} |")

    lines += preprocessing.render(results)
    if results.get("dask"):
        lines += render_dask(results["dask"])
    lines += training.render(results)
    lines += pipelines.render_time_to_accuracy(results)
    lines += allreduce.render(results)
    lines += pipelines.render_overhead(results)
    lines += pipelines.render_memory(results)
    lines += scaling.render(results)
    if results.get("peers"):
        lines += peers.render(results)
    if results.get("models"):
        lines += ["", *render_models(results["models"])]
    if results.get("prose"):
        lines += ["", *render_prose(results["prose"])]
    if results.get("full_size"):
        lines += ["", *render_full_size(results["full_size"])]
    return "\n".join(lines) + "\n"
