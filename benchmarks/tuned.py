"""A section of the suite: each data set's race, untuned and tuned, side by side.

On each data set's embedded sample, one ``distrain run DATASET --runs RUNS --repeats K``
at the pipeline's default learning rate (the untuned race), then the same command with
``--tune RANGE`` (each run spec's rate searched by successive halving on the validation
split, then the race at the chosen rates). The section puts the two verdicts side by
side with what the search cost: its process-seconds per run spec and the wall time of the
whole tuned command. Measured apart (``python -m benchmarks.tuned``, about an hour on the
2-core development machine) and carried over by the suite like section 10's texts.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from benchmarks.common import json_lines, run_pipeline

DATASETS = ["mnist", "dbpedia", "gutenberg", "tfrecord"]
RUNS = "single:1,sync:2,async:2,easgd:2:tau=adaptive"
TUNE = "learning_rate=1e-3..3e-1"
REPEATS = 3
# The row fields the section keeps of each run (comparison.json's rows).
FIELDS = [
    "name",
    "learning_rate",
    "accuracy",
    "accuracy_interval",
    "bits_per_char",
    "bits_per_char_interval",
    "time_to_target",
    "time_to_target_interval",
    "target_reached",
    "train_seconds",
    "search_process_seconds",
    "time_to_tuned_model",
]


def race(
    dataset: str, work: Path, runs: str, repeats: int, tune: str | None, epochs: int = 0
) -> dict:
    """One ``distrain run``: its rows (:data:`FIELDS`), verdict, wall time and load.

    ``epochs``: the most a run trains (0: the pipeline's default).
    """
    cmd = [sys.executable, "-m", "distrain", "run", dataset, "--output", str(work)]
    cmd += ["--runs", runs, "--repeats", str(repeats)]
    if epochs:
        cmd += ["--epochs", str(epochs)]
    if tune:
        cmd += ["--tune", tune]
    load_before, wall, comparison = run_pipeline(cmd, work)
    rows = [
        {k: r.get(k) for k in FIELDS} | {"chosen": (r.get("tuning") or {}).get("chosen")}
        for r in comparison["rows"]
        if r.get("mode") != "baseline"
    ]
    return {
        "command": " ".join(["distrain", *cmd[3:]]).replace(str(work), "OUT"),
        "rows": rows,
        "verdict": comparison["verdict"]["reason"],
        "target": comparison.get("target_accuracy"),
        "wall_seconds": wall,
        "load_before": load_before[0],
        "load_after": os.getloadavg()[0],
    }


def bench_dataset(
    dataset: str,
    tmp: Path,
    runs: str = RUNS,
    repeats: int = REPEATS,
    tune: str = TUNE,
    log=print,
    epochs: int = 0,
) -> dict:
    """The untuned and the tuned race on one data set's sample (``epochs``: see :func:`race`)."""
    untuned = race(dataset, tmp / f"{dataset}-untuned", runs, repeats, None, epochs)
    log(f"{dataset} untuned: {untuned['wall_seconds']:.0f} s")
    tuned = race(dataset, tmp / f"{dataset}-tuned", runs, repeats, tune, epochs)
    log(f"{dataset} tuned: {tuned['wall_seconds']:.0f} s")
    return {
        "dataset": dataset,
        "runs": runs,
        "repeats": repeats,
        "tune": tune,
        "untuned": untuned,
        "tuned": tuned,
    }


def _metric(row: dict) -> str:
    """A row's quality with its interval: a language model's bits/char, else its accuracy."""
    for key, fmt, unit in (("bits_per_char", "{:.3f}", " bits/char"), ("accuracy", "{:.4f}", "")):
        if row.get(key) is not None:
            interval = row.get(f"{key}_interval")
            band = f" ({fmt.format(interval[0])}–{fmt.format(interval[1])})" if interval else ""
            return fmt.format(row[key]) + unit + band
    return "—"


def _time(row: dict) -> str:
    """A row's time to target with its interval (intervals below zero read from zero)."""
    if row.get("time_to_target") is None:
        return f"not reached ({row.get('target_reached') or '0'})"
    lo, hi = row.get("time_to_target_interval") or (None, None)
    band = f" ({max(lo, 0.0):.1f}–{hi:.1f})" if lo is not None else ""
    return f"{row['time_to_target']:.1f}{band}"


def render(section: dict) -> list[str]:
    """The section's lines: per data set, the untuned and the tuned rows, then the verdicts."""
    lines = [
        "## Each race untuned and tuned",
        "",
        f"`python -m benchmarks.tuned`: on each data set's embedded sample, `distrain run "
        f"DATASET --runs {section['runs']} --repeats {section['repeats']}` (unless the data "
        "set's heading names another command) at the pipeline's "
        f'default learning rate, then the same with `--tune "{section["tune"]}"` (the '
        "search's defaults: 6 rates, eta 3, scored on the validation split only). Quality and "
        "time to the data set's target are medians over the repeats with 95 % intervals "
        "(an interval's low end below zero reads 0). *Search process-s* is what one run "
        "spec's search cost: every process of every candidate (a `sync:2` candidate counts "
        "its two ranks); *time to tuned model* adds the search's wall seconds to the time to "
        "target. The tuned command's wall time includes every search and the race. "
        f"Measured on {section['measured']}. {section.get('note', '')}",
        "",
    ]
    for d in section["datasets"]:
        command = d["tuned"]["command"]
        usual = f"--runs {section['runs']} --repeats {section['repeats']} --tune"
        lines += [
            f"### {d['dataset']}" + ("" if usual in command else f": `{command}`"),
            "",
            "| run | rate untuned | quality untuned | time to target s | rate tuned "
            "| quality tuned | time to target s | search process-s | time to tuned model s |",
            "|---|---:|---|---|---:|---|---|---:|---:|",
        ]
        tuned = {r["name"]: r for r in d["tuned"]["rows"]}
        for u in d["untuned"]["rows"]:
            t = tuned.get(u["name"], {})
            search = t.get("search_process_seconds")
            to_model = t.get("time_to_tuned_model")
            lines.append(
                f"| {u['name']} | {u['learning_rate']:.3g} | {_metric(u)} | {_time(u)} "
                f"| {t.get('learning_rate', 0):.3g} | {_metric(t)} | {_time(t)} "
                f"| {search if search is None else f'{search:,.0f}'} "
                f"| {'—' if to_model is None else f'{to_model:.1f}'} |"
            )
        lines += [
            "",
            f"Untuned ({_wall(d['untuned'])}): {d['untuned']['verdict']}",
            "",
            f"Tuned ({_wall(d['tuned'], ' with the search')}): {d['tuned']['verdict']}",
            "",
        ]
    return lines


def _wall(race: dict, what: str = "") -> str:
    """A command's wall time and the one-minute load average before and after it."""
    load = race.get("load_before"), race.get("load_after")
    said = "" if None in load else f", load {load[0]:.1f}/{load[1]:.1f}"
    return f"{race['wall_seconds']:.0f} s{what}{said}"


def merge(found: Path, results: Path, note: str = "") -> dict:
    """Puts the JSON lines of a measurement into ``results`` as the section (``tuned``)."""
    import datetime

    datasets = json_lines(found)
    data = json.loads(results.read_text())
    first = datasets[0]
    data["tuned"] = {
        "measured": datetime.date.today().isoformat(),
        "note": note,
        **{key: first[key] for key in ("runs", "repeats", "tune")},
        "datasets": datasets,
    }
    results.write_text(json.dumps(data, indent=2, default=str))
    return data["tuned"]


def main(argv: list[str] | None = None) -> int:
    """Measures the data sets one after another, a JSON line each as it completes."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--datasets", default=",".join(DATASETS))
    parser.add_argument("--runs", default=RUNS)
    parser.add_argument("--repeats", type=int, default=REPEATS)
    parser.add_argument("--tune", default=TUNE)
    parser.add_argument("--epochs", type=int, default=0, help="the most (0: the pipeline's)")
    parser.add_argument("--tmp", type=Path, help="where the runs go (to measure)")
    parser.add_argument("--results", type=Path, required=True, help="JSON lines, one per set")
    parser.add_argument("--merge", type=Path, help="put --results' lines into this file")
    parser.add_argument("--note", default="", help="with --merge: the section's note")
    args = parser.parse_args(argv)
    if args.merge:
        merge(args.results, args.merge, args.note)
        return 0
    if args.tmp is None:
        parser.error("--tmp is needed to measure")
    for dataset in args.datasets.split(","):
        found = bench_dataset(
            dataset, args.tmp, args.runs, args.repeats, args.tune, epochs=args.epochs
        )
        with args.results.open("a") as f:
            f.write(json.dumps(found) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
