"""BENCHMARKS.md from benchmarks/results.json: the header and targets, then each section's lines.

.venv/bin/python -m benchmarks.render             # BENCHMARKS.md again from results.json
.venv/bin/python -m benchmarks.render --readme    # README.md's key-results block too
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from benchmarks import netsim, tuned
from benchmarks.beam_memory import render_beam_memory
from benchmarks.common import ROOT
from benchmarks.full_others import render_full_others
from benchmarks.full_size import render_full_size
from benchmarks.model_parallel import render_models
from benchmarks.prose import render_prose, texts_summary
from benchmarks.sections import allreduce, peers, pipelines, preprocessing, scaling, training
from benchmarks.sections.dask import render_dask


def _changes(changes: list[dict]) -> list[str]:
    """A paragraph per default that changed after some sections were measured.

    Each change (``results["changes"]``, written when a default changes and dropped by the
    next whole-suite run) says when, what, and which numbers are of the old default.
    """
    return [
        f"**Changed on {c['date']}, after some of these numbers were measured:** {c['what']} "
        f"Of the old default: {c['before']}.\n"
        for c in changes
    ]


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
        *_changes(results.get("changes") or []),
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
    if results.get("beam_memory"):
        lines += ["", *render_beam_memory(results["beam_memory"])]
    if results.get("full_others"):
        lines += ["", *render_full_others(results["full_others"])]
    if results.get("plan"):
        lines += netsim.render(results["plan"])
    if results.get("tuned"):
        lines += ["", *tuned.render(results["tuned"])]
    return "\n".join(lines) + "\n"


# The README's key results sit between these two lines, written by :func:`update_readme`.
BEGIN = (
    "<!-- key-results: written by `python -m benchmarks.render --readme` "
    "from benchmarks/results.json -->"
)
END = "<!-- /key-results -->"


def key_results(results: dict) -> list[str]:
    """The README's key results: when and on what, every target, each data set's time to it."""
    m = results["machine"]
    met = sum(t["met"] for t in results["targets"])
    lines = [
        f"Measured by `scripts/bench.sh` on {m['date']} on {m['cores']} cores ({m['cpu']}), "
        f"TensorFlow {m['tensorflow']}, Horovod {m['horovod']}"
        + (f" over {m['mpi']}" if m.get("mpi") else " over gloo")
        + (" (**--quick: tiny workloads, not measurements**)" if m["quick"] else "")
        + f": {met} of {len(results['targets'])} targets met. "
        "[BENCHMARKS.md](BENCHMARKS.md) has every table and how each number was measured.",
        "",
        *(
            f"**A default changed after some of these were measured:** {c['what']} "
            "BENCHMARKS.md says which numbers are of the old default.\n"
            for c in results.get("changes") or []
        ),
        "| target | measured | met |",
        "|---|---|---|",
    ]
    for t in results["targets"]:
        met = "yes" if t["met"] else f"**no** ({t['miss']})"
        lines.append(f"| {t['target']} | {t['measured']} | {met} |")
    lines += [
        "",
        "Seconds of training to the target on each data set's generated sample (one "
        "`distrain run` each, kfp.local; BENCHMARKS.md section 3):",
        "",
        "| data set | target | seconds to target per run |",
        "|---|---|---|",
    ]
    for dataset, s in results["steps"].items():
        metric = "bits/char <=" if dataset == "gutenberg" else "val accuracy >="
        runs = ", ".join(
            f"{t['run']} " + ("not reached" if t["seconds"] is None else f"{t['seconds']:.1f}")
            for t in s["time_to_target"]
        )
        lines.append(f"| {dataset} | {metric} {s['target']} | {runs} |")
    texts = (results.get("prose") or {}).get("texts")
    if texts and texts.get("cells"):
        lines += ["", *texts_summary(texts)]
    return lines


def update_readme(text: str, results: dict) -> str:
    """``text`` (the README) with the block between its key-results markers rendered again.

    Raises:
        ValueError: If the README does not have both markers, in order.
    """
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < start:
        raise ValueError(f"README.md: no key-results block ({BEGIN!r} ... {END!r})")
    block = "\n".join([BEGIN, "", *key_results(results), "", END])
    return text[:start] + block + text[end + len(END) :]


def write(results: dict, output: Path, readme: Path | None = None) -> str:
    """Writes BENCHMARKS.md to ``output`` (and the README's key results if ``readme``)."""
    report = render_markdown(results)
    output.write_text(report)
    if readme is not None:
        readme.write_text(update_readme(readme.read_text(), results))
    return report


def main(argv: list[str] | None = None) -> int:
    """Renders BENCHMARKS.md (and with ``--readme`` the README's key results) again."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", default=str(ROOT / "benchmarks" / "results.json"))
    parser.add_argument("--output", default=str(ROOT / "BENCHMARKS.md"))
    parser.add_argument("--readme", action="store_true", help="also README.md's key results")
    args = parser.parse_args(argv)
    results = json.loads(Path(args.json).read_text())
    write(results, Path(args.output), ROOT / "README.md" if args.readme else None)
    return 0


if __name__ == "__main__":
    sys.exit(main())
