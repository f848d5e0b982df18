"""Section 10 of the suite: the Gutenberg pipeline on real English prose, when it is here.

Debian's ``jargon-text`` package holds the Jargon File (about 1.6 MB of English prose);
its first ~1 MB, wrapped in Gutenberg START/END markers, is one book. One ``distrain run
gutenberg`` trains the default model with ``single:1`` and ``sync:2`` and puts them beside
the best Kneser-Ney n-gram, all scored the same way (bits per character over the
contiguous validation text, each character once: :mod:`distrain.learning.lm`).
"""

from __future__ import annotations

import gzip
import hashlib
import json
import math
import os
import subprocess
import sys
from pathlib import Path

from benchmarks.common import json_lines, run_pipeline

JARGON = Path("/usr/share/doc/jargon-text/jargon.txt.gz")
# The book's length, the runs and the epochs: single:1's training stays within 10
# minutes on the 2-core development machine.
CHARS = 1_000_000
RUNS = ["single:1", "sync:2"]
EPOCHS = 13
START = "*** START OF THE PROJECT GUTENBERG EBOOK THE JARGON FILE ***"
END = "*** END OF THE PROJECT GUTENBERG EBOOK THE JARGON FILE ***"


def write_prose_book(out: Path, chars: int = CHARS, source: Path = JARGON) -> dict:
    """``out/jargon.txt``: the first ``chars`` characters (whole lines) of the Jargon File.

    Returns:
        What was used: the source file, its sha256, the characters kept.
    """
    data = source.read_bytes()
    text = gzip.decompress(data).decode("utf-8")
    body = text[:chars]
    body = body[: body.rfind("\n") + 1]
    out.mkdir(parents=True, exist_ok=True)
    book = f"The Project Gutenberg eBook of The Jargon File\n\n{START}\n\n{body}\n{END}\n"
    (out / "jargon.txt").write_text(book, encoding="utf-8")
    return {
        "source": str(source),
        "sha256": hashlib.sha256(data).hexdigest(),
        "source_chars": len(text),
        "chars": len(body),
    }


# Other real English texts a Debian machine can install (apt-get install NAME), each read
# into plain text: the Debian Reference's HTML chapters through w3m's text dump, and the
# fortune cookies of ``fortunes`` (one file after another, in name order).
DEBIAN_REFERENCE = Path("/usr/share/debian-reference")
FORTUNES = Path("/usr/share/games/fortunes")


def jargon_text() -> tuple[str, list[Path]]:
    """The Jargon File's text and its file."""
    return gzip.decompress(JARGON.read_bytes()).decode("utf-8"), [JARGON]


def debian_reference_text() -> tuple[str, list[Path]]:
    """The Debian Reference (``debian-reference-en``) as text: w3m's dump of each page."""
    pages = [DEBIAN_REFERENCE / "index.en.html", *sorted(DEBIAN_REFERENCE.glob("ch*.en.html"))]
    pages += sorted(DEBIAN_REFERENCE.glob("ap*.en.html"))
    dumps = [
        subprocess.run(
            ["w3m", "-dump", "-cols", "78", "-T", "text/html", str(page)],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for page in pages
    ]
    return "\n".join(dumps), pages


def fortunes_text() -> tuple[str, list[Path]]:
    """The ``fortunes`` package's cookies: its text files one after another."""
    files = sorted(f for f in FORTUNES.iterdir() if f.is_file() and f.suffix not in (".dat", ".u8"))
    return "".join(f.read_text("utf-8", errors="replace") for f in files), files


# name: (the package, its text)
TEXTS = {
    "jargon": ("jargon-text", jargon_text),
    "debian-reference": ("debian-reference-en", debian_reference_text),
    "fortunes": ("fortunes", fortunes_text),
}


def write_text_book(out: Path, name: str, chars: int = CHARS) -> dict:
    """``out/NAME.txt``: the first ``chars`` characters (whole lines) of a text, as a book.

    Returns:
        What was used: the package, its files' sha256 (together), the characters kept.
    """
    package, read = TEXTS[name]
    text, files = read()
    body = text[:chars]
    body = body[: body.rfind("\n") + 1]
    title = name.replace("-", " ").upper()
    start = f"*** START OF THE PROJECT GUTENBERG EBOOK {title} ***"
    end = f"*** END OF THE PROJECT GUTENBERG EBOOK {title} ***"
    out.mkdir(parents=True, exist_ok=True)
    book = f"The Project Gutenberg eBook of {title}\n\n{start}\n\n{body}\n{end}\n"
    (out / f"{name}.txt").write_text(book, encoding="utf-8")
    digest = hashlib.sha256()
    for f in files:
        digest.update(f.read_bytes())
    return {
        "text": name,
        "package": package,
        "sha256": digest.hexdigest(),
        "source_chars": len(text),
        "chars": len(body),
    }


def time_to_bits(epochs: list[dict], target: float) -> float | None:
    """Training wall-clock seconds until the validation bits/char first reached ``target``.

    Interpolated between the epochs around it (``None``: never reached).
    """
    from distrain.analysis.compare import time_to_target

    bits = lambda e: e["val_loss"] / math.log(2)  # noqa: E731
    return time_to_target(epochs, target, value=bits, lower_is_better=True)


def bench_prose(quick: bool, tmp: Path, log=print) -> dict | None:
    """Runs the Gutenberg pipeline on the Jargon File (None when the package is absent)."""
    if not JARGON.exists():
        log(f"{JARGON} is absent (apt-get install jargon-text): no real-prose section")
        return None
    chars, epochs = (100_000, 1) if quick else (CHARS, EPOCHS)
    books = tmp / "prose-books"
    text = write_prose_book(books, chars)
    work = tmp / "prose-run"
    cmd = [sys.executable, "-m", "distrain", "run", "gutenberg", "--data", str(books)]
    cmd += ["--output", str(work), "--runs", ",".join(RUNS), "--epochs", str(epochs)]
    load_before, wall, comparison = run_pipeline(cmd, work)
    baseline = next(r for r in comparison["runs"] if r["run"]["mode"] == "baseline")
    ngram = baseline["evaluation"]["bits_per_char"]
    runs = []
    for report in (r for r in comparison["runs"] if r.get("history")):
        history, evaluation = report["history"], report["evaluation"]
        runs.append(
            {
                "run": report["run"]["name"],
                "model": report["run"]["model"],
                "bits_per_char": evaluation["bits_per_char"],
                "accuracy": evaluation["accuracy"],
                "train_seconds": history["train_seconds"],
                "epochs": len(history["epochs"]),
                "val_bits": [e["val_loss"] / math.log(2) for e in history["epochs"]],
                "wall_seconds": [e["wall_seconds"] for e in history["epochs"]],
                "seconds_to_ngram": time_to_bits(history["epochs"], ngram),
                "sample": evaluation.get("sample", ""),
            }
        )
    log(f"real prose: {wall:.0f} s; {baseline['run']['name']} {ngram:.3f} bits/char")
    return {
        "text": text,
        "characters_scored": baseline["evaluation"]["characters"],
        "epochs": epochs,
        "baseline": {
            "name": baseline["run"]["name"],
            "bits_per_char": ngram,
            "by_order": baseline["evaluation"]["bits_per_char_by_order"],
            "seconds": baseline.get("seconds"),
        },
        "runs": runs,
        "wall_seconds": wall,
        "load_before": list(load_before),
        "load_after": list(os.getloadavg()),
    }


def render_prose(section: dict) -> list[str]:
    """Section 10 of BENCHMARKS.md."""
    text, base = section["text"], section["baseline"]
    orders = ", ".join(f"{n}: {b:.3f}" for n, b in sorted(base["by_order"].items()))
    lines = [
        "## 10. Real prose",
        "",
        f"The first {text['chars']:,} characters of the Jargon File (`{text['source']}`, "
        f"Debian's `jargon-text`, sha256 `{text['sha256'][:16]}…`, {text['source_chars']:,} "
        "characters in all), wrapped in Gutenberg markers as one book, through one "
        f"`distrain run gutenberg --runs {','.join(r['run'] for r in section['runs'])} "
        f"--epochs {section['epochs']}` (its default model, batch and learning rate). The "
        "last 10 % of the book is the validation text: "
        f"{section['characters_scored']:,} characters, each scored once, by every row, "
        "over the contiguous text (recurrent models carry their state). The baseline is "
        f"the best Kneser-Ney n-gram of orders 3-7 fitted on the training text (bits/char "
        f"by order: {orders}). Measured on {section.get('measured', '?')} by "
        "`scripts/bench.sh --only prose`; the whole run took "
        f"{section['wall_seconds']:.0f} s; one-minute load "
        f"average {section['load_before'][0]:.1f} before it, {section['load_after'][0]:.1f} "
        "after.",
        "",
        "| run | model | bits/char | vs n-gram | next-char accuracy | epochs | train s "
        "| s to the n-gram's bits/char |",
        "|---|---|---|---|---|---|---|---|",
        f"| {base['name']} | baseline | {base['bits_per_char']:.3f} | — | — | — | — | — |",
    ]
    for r in section["runs"]:
        reached = r["seconds_to_ngram"]
        lines.append(
            f"| {r['run']} | {r['model']} | {r['bits_per_char']:.3f} | "
            f"{r['bits_per_char'] - base['bits_per_char']:+.3f} | {r['accuracy']:.4f} | "
            f"{r['epochs']} | {r['train_seconds']:.0f} | "
            + ("not reached" if reached is None else f"{reached:.0f}")
            + " |"
        )
    lines += ["", "Validation bits/char after each epoch (training wall-clock seconds):", ""]
    for r in section["runs"]:
        points = ", ".join(
            f"{b:.3f} ({t:.0f})" for b, t in zip(r["val_bits"], r["wall_seconds"], strict=True)
        )
        lines.append(f"- {r['run']}: {points}")
    if section.get("texts"):
        lines += ["", *render_texts_section(section["texts"])]
    if section.get("texts_tuned"):
        lines += ["", *render_tuned_texts(section["texts_tuned"], section.get("texts"))]
    return lines


def clear(cells: list[dict], bar: float = 0.1) -> int:
    """How many cells beat their n-gram by at least ``bar`` bits/char."""
    return sum(c["bits_per_char"] - c["ngram_bits_per_char"] <= -bar for c in cells)


def render_tuned_texts(tuned: dict, untuned: dict | None = None, bar: float = 0.1) -> list[str]:
    """Section 10's texts × seeds again, each text at the rate its search picked."""
    search = tuned["search"]
    texts = tuned["texts"]
    cells = [c for t in texts for c in t["cells"]]
    lines = [
        "### Several texts and seeds at the searched rate",
        "",
        f'`python -m benchmarks.prose --tune "{search["range"]}" --tune-grid '
        f"{search['grid']} --tune-eta {search['eta']} --tune-epochs {search['epochs']}`: per "
        f"text one `distrain run gutenberg --runs single:1 --epochs {cells[0]['epochs']} "
        f"--repeats {len(texts[0]['cells'])} --tune ...` (the same texts, model and batch "
        "as the table above). Its search trains each rate of the grid by successive halving "
        "and picks the one with the lowest validation bits/char on the text's validation "
        "part; the repeats (seeds 0, 1, 2) then train at that rate, and each is scored as "
        "above. The rate is chosen on the same validation text the cells are scored on, "
        f"as section 10's protocol has it. Measured on {tuned['measured']}. "
        f"{tuned.get('note', '')}",
        "",
        "| text | rates searched | each rate's validation bits/char (its last rung) "
        "| chosen | search process-s | whole command s |",
        "|---|---|---|---:|---:|---:|",
    ]
    for t in texts:
        record = t["tuning"]
        scores = []
        for c in record["candidates"]:
            last = c["rungs"][-1] if c["rungs"] else {}
            score = last.get("score")
            shown = "diverged" if score is None else f"{score / math.log(2):.3f}"
            scores.append(f"{c['learning_rate']:g}: {shown} ({last.get('epochs', 0)} ep.)")
        lines.append(
            f"| {t['text']} | {', '.join(f'{r:g}' for r in record['grid'])} "
            f"| {'; '.join(scores)} | {record['chosen']:g} "
            f"| {record.get('process_seconds', 0):,.0f} | {t['wall_seconds']:,.0f} |"
        )
    lines += ["", *render_texts(cells), ""]
    summary = f"At the searched rate {clear(cells, bar)} of {len(cells)} cells beat their n-gram "
    summary += f"by {bar:g} bits/char or more"
    if untuned and untuned.get("cells"):
        before = untuned["cells"]
        summary += f"; at the default rate (the table above) {clear(before, bar)} of {len(before)}"
    lines.append(summary + ".")
    return lines


def merge_tuned(found: Path, results: Path, note: str = "") -> dict:
    """Puts the JSON lines of ``--tune`` runs into ``results``' section 10 as ``texts_tuned``."""
    import datetime

    texts = json_lines(found)
    data = json.loads(results.read_text())
    first = texts[0]["tuning"]
    data["prose"]["texts_tuned"] = {
        "measured": datetime.date.today().isoformat(),
        "note": note,
        "search": {
            "range": first["range"],
            "grid": len(first["grid"]),
            "eta": first["eta"],
            "epochs": first["rungs"][-1]["epochs"],
        },
        "texts": texts,
    }
    results.write_text(json.dumps(data, indent=2, default=str))
    return data["prose"]["texts_tuned"]


def render_texts_section(texts: dict) -> list[str]:
    """Section 10's table of several texts and seeds (``python -m benchmarks.prose``)."""
    cells = texts["cells"]
    lines = [
        "### Several texts and seeds",
        "",
        "`python -m benchmarks.prose --texts TEXTS --seeds SEEDS` (one `distrain run gutenberg "
        f"--runs single:1 --epochs {cells[0]['epochs'] if cells else EPOCHS} --seed S` per cell, "
        "the default model, batch and learning rate) on the first ~1 MB (whole lines) of "
        "each text, wrapped as one Gutenberg book; the last 10 % is the validation text. "
        "Each cell's n-gram is the best Kneser-Ney n-gram of orders 3-7 fitted on that "
        "text's training part. Scored over the contiguous validation text as if read in one "
        "pass (rows chained until each starts from the state the row before it ended with), "
        "with the stream training that also trains zero states; rows min-max is the spread "
        f"of the 32 scored rows' bits/char. Measured on {texts['measured']}. {texts['note']}",
        "",
        *render_texts(cells),
    ]
    return lines


def texts_summary(texts: dict, bar: float = 0.1) -> list[str]:
    """The README's lines on the multi-text table: each text's margins over its seeds.

    Whether every seed beat the text's n-gram by ``bar`` bits/char, then the table's
    ``verdict`` (where the bar is missed and why), if the results carry one.
    """
    by_text: dict[str, list[dict]] = {}
    for c in texts["cells"]:
        by_text.setdefault(c["text"], []).append(c)
    epochs = sorted({c["epochs"] for c in texts["cells"]})
    precisions = sorted({cell_precision(c) for c in texts["cells"]})
    lines = [
        "The default language model (`lstm`, `single:1`, "
        + "/".join(str(e) for e in epochs)
        + " epochs, "
        + "/".join(precisions)
        + ") against the best Kneser-Ney n-gram of each text, on real English texts "
        "a Debian machine installs (BENCHMARKS.md section 10; bits/char over each text's "
        "validation part, lower is better):",
        "",
        "| text | seeds | model bits/char | n-gram | model - n-gram | train s | "
        f"{bar:g} bits/char better in every seed |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, cells in by_text.items():
        margins = [c["bits_per_char"] - c["ngram_bits_per_char"] for c in cells]
        lines.append(
            f"| {name} (`{cells[0]['package']}`) | {', '.join(str(c['seed']) for c in cells)} "
            f"| {_range([c['bits_per_char'] for c in cells])} "
            f"| {_range([c['ngram_bits_per_char'] for c in cells])} "
            f"| {_range(margins, '{:+.3f}')} "
            f"| {_range([c['train_seconds'] for c in cells], '{:.0f}')} "
            f"| {'yes' if all(m <= -bar for m in margins) else '**no**'} |"
        )
    if texts.get("verdict"):
        lines += ["", texts["verdict"]]
    return lines


def cell_precision(cell: dict) -> str:
    """The precision a cell trained in (cells measured before the setting: float32)."""
    return cell.get("precision", "float32")


def _range(values: list[float], fmt: str = "{:.3f}") -> str:
    lo, hi = min(values), max(values)
    return (
        fmt.format(lo)
        if fmt.format(lo) == fmt.format(hi)
        else f"{fmt.format(lo)} to {fmt.format(hi)}"
    )


def bench_text(name: str, seed: int, tmp: Path, epochs: int = EPOCHS, log=print) -> dict:
    """One cell of the multi-text table: ``single:1`` on a text with a seed, and its n-gram."""
    books = tmp / f"{name}-books"
    text = write_text_book(books, name)
    work = tmp / f"{name}-seed{seed}"
    cmd = [sys.executable, "-m", "distrain", "run", "gutenberg", "--data", str(books)]
    cmd += ["--output", str(work), "--runs", "single:1", "--epochs", str(epochs)]
    cmd += ["--seed", str(seed)]
    load_before, wall, comparison = run_pipeline(cmd, work)
    baseline = next(r for r in comparison["runs"] if r["run"]["mode"] == "baseline")
    report = next(r for r in comparison["runs"] if r.get("history"))
    cell = _cell(text, seed, report, baseline, wall, (load_before, os.getloadavg()))
    log(
        f"{name} seed {seed}: {cell['bits_per_char']:.3f} against "
        f"{cell['ngram_bits_per_char']:.3f} ({wall:.0f} s)"
    )
    return cell


def _cell(text: dict, seed: int, report: dict, baseline: dict, wall: float, loads: tuple) -> dict:
    """One cell's record from a run's report (history and evaluation) and its n-gram."""
    history, evaluation = report["history"], report["evaluation"]
    ngram = baseline["evaluation"]["bits_per_char"]
    return {
        **text,
        "seed": history["config"].get("seed", seed),
        "run": report["run"]["name"],
        "ngram": baseline["run"]["name"],
        "ngram_bits_per_char": ngram,
        "bits_per_char": evaluation["bits_per_char"],
        "row_bits_per_char_min": evaluation.get("row_bits_per_char_min"),
        "row_bits_per_char_max": evaluation.get("row_bits_per_char_max"),
        "outlier_rows": evaluation.get("outlier_rows"),
        "scoring_passes": evaluation.get("scoring_passes"),
        "characters_scored": evaluation["characters"],
        "train_seconds": history["train_seconds"],
        "epochs": len(history["epochs"]),
        "learning_rate": history["config"]["learning_rate"],
        # What the precision setting resolved to on this machine (distrain.learning.precision).
        "precision": history.get("precision", "float32"),
        "val_bits": [e["val_loss"] / math.log(2) for e in history["epochs"]],
        "seconds_to_ngram": time_to_bits(history["epochs"], ngram),
        "wall_seconds": wall,
        "load_before": list(loads[0]),
        "load_after": list(loads[1]),
        "sample": evaluation.get("sample", ""),
    }


def bench_text_tuned(
    name: str, tmp: Path, tune: dict, repeats: int, epochs: int = EPOCHS, log=print
) -> dict:
    """Section 10's cells at the searched rate: one ``distrain run --tune`` per text.

    The search (``tune``: ``range``, ``grid``, ``eta``, ``epochs``) picks ``single:1``'s
    learning rate by validation bits/char on the text's validation part; the run then
    trains ``repeats`` seeds (0, 1, ...) at that rate, each a cell. The cells are scored on
    the same validation text the rate was chosen on (the suite's protocol for section 10).
    """
    books = tmp / f"{name}-books"
    text = write_text_book(books, name)
    work = tmp / f"{name}-tuned"
    cmd = [sys.executable, "-m", "distrain", "run", "gutenberg", "--data", str(books)]
    cmd += ["--output", str(work), "--runs", "single:1", "--epochs", str(epochs)]
    cmd += ["--repeats", str(repeats), "--tune", tune["range"], "--tune-grid", str(tune["grid"])]
    cmd += ["--tune-eta", str(tune["eta"]), "--tune-epochs", str(tune["epochs"])]
    load_before, wall, comparison = run_pipeline(cmd, work)
    loads = (load_before, os.getloadavg())
    baseline = next(r for r in comparison["runs"] if r["run"]["mode"] == "baseline")
    reports = [r for r in comparison["runs"] if r.get("history")]
    row = next(r for r in comparison["rows"] if r.get("tuning"))
    cells = [_cell(text, i, r, baseline, wall, loads) for i, r in enumerate(reports)]
    for c in cells:
        log(
            f"{name} seed {c['seed']} at {c['learning_rate']}: "
            f"{c['bits_per_char']:.3f} against {c['ngram_bits_per_char']:.3f}"
        )
    return {"text": name, "tuning": row["tuning"], "wall_seconds": wall, "cells": cells}


def render_texts(cells: list[dict]) -> list[str]:
    """The multi-text table: text x seed, the model against the n-gram on the same text."""
    lines = [
        "| text (package) | characters (validation) | seed | run | bits/char | rows min-max "
        "| best n-gram | vs n-gram | train s | epochs | precision | load before/after |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in cells:
        rows = (
            f"{c['row_bits_per_char_min']:.2f}-{c['row_bits_per_char_max']:.2f}"
            if c.get("row_bits_per_char_min") is not None
            else "—"
        )
        lines.append(
            f"| {c['text']} (`{c['package']}`) | {c['chars']:,} ({c['characters_scored']:,}) "
            f"| {c['seed']} | {c['run']} | {c['bits_per_char']:.3f} | {rows} "
            f"| {c['ngram']} {c['ngram_bits_per_char']:.3f} "
            f"| {c['bits_per_char'] - c['ngram_bits_per_char']:+.3f} | {c['train_seconds']:.0f} "
            f"| {c['epochs']} | {cell_precision(c)} "
            f"| {c['load_before'][0]:.1f}/{c['load_after'][0]:.1f} |"
        )
    return lines


if __name__ == "__main__":
    import argparse

    parser = argparse.ArgumentParser(description="single:1 on real texts x seeds, with n-grams")
    parser.add_argument("--texts", default=",".join(TEXTS))
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    parser.add_argument("--tmp", type=Path, help="where the books and runs go (to measure)")
    parser.add_argument("--results", type=Path, required=True, help="JSON lines, one per cell")
    parser.add_argument("--tune", help="search single:1's rate, e.g. learning_rate=1e-3..1.6e-2")
    parser.add_argument("--tune-grid", type=int, default=5)
    parser.add_argument("--tune-eta", type=int, default=2)
    parser.add_argument("--tune-epochs", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=3, help="with --tune: seeds at the choice")
    parser.add_argument("--merge", type=Path, help="put --results' --tune lines into this file")
    parser.add_argument("--note", default="", help="with --merge: the table's note")
    args = parser.parse_args()
    if args.merge:
        merge_tuned(args.results, args.merge, args.note)
        sys.exit(0)
    if args.tmp is None:
        parser.error("--tmp is needed to measure")
    if args.tune:
        search = {"range": args.tune, "grid": args.tune_grid, "eta": args.tune_eta}
        search["epochs"] = args.tune_epochs
        for name in args.texts.split(","):
            found = bench_text_tuned(name, args.tmp, search, args.repeats, args.epochs)
            with args.results.open("a") as f:
                f.write(json.dumps(found) + "\n")
        sys.exit(0)
    for seed in (int(s) for s in args.seeds.split(",")):
        for name in args.texts.split(","):
            cell = bench_text(name, seed, args.tmp, args.epochs)
            with args.results.open("a") as f:
                f.write(json.dumps(cell) + "\n")
