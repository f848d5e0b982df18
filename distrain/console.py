"""What the command line tells people at the end of a command: one line each, not a dump.

``distrain train`` ends with :func:`train_summary` (the whole history is in
``history.json``); a local pipeline or experiment with :func:`finished`; ``distrain run
--tensorboard`` prints :func:`tensorboard_command`.
"""

from __future__ import annotations

import math
import shlex
import sys
import time
from pathlib import Path


def tensorboard_command(logdir: str | Path) -> str:
    """The command that shows the event files under ``logdir`` (each run's folder a run).

    TensorFlow 2.21 no longer installs TensorBoard: ``pip install tensorboard`` first.
    """
    return f"tensorboard --logdir {shlex.quote(str(logdir))}"


def _quality(history: dict) -> str:
    """The last validated epoch's quality: bits/char for a language model, else accuracy."""
    validated = [e for e in history.get("epochs", []) if e.get("val_loss") is not None]
    if not validated:
        return "not validated"
    last = validated[-1]
    if _is_language_model(history):
        return f"val {last['val_loss'] / math.log(2):.3f} bits/char"
    return f"val accuracy {last['val_accuracy']:.4f}"


def _is_language_model(history: dict) -> bool:
    from distrain.learning.models import model_spec

    run = history.get("run") or {}
    try:
        return model_spec(run["dataset"], run["model"]).task.quality == "bits_per_char"
    except Exception:  # noqa: BLE001 (a model no longer found: the summary says accuracy)
        return False


def train_summary(history: dict, output_dir: str | Path) -> str:
    """``distrain train``'s closing line: the run, epochs, quality, speed and its files."""
    out = Path(output_dir)
    run = (history.get("run") or {}).get("name", "?")
    epochs = len(history.get("epochs", []))
    stopped = (
        " (stopped at the plateau)"
        if (history.get("until_plateau") or {}).get("stopped_early")
        else ""
    )
    return (
        f"{run}: {epochs} epoch(s){stopped}, {_quality(history)}, "
        f"{history.get('examples_per_second', 0.0):,.0f} examples/s, "
        f"{history.get('train_seconds', 0.0):.0f} s; history in {out / 'history.json'}, "
        f"curves in {out / 'tensorboard'}"
    )


def finished(out: Path, what: str, name: str, holds: str, start: float, open_page: bool):
    """The closing lines of a local run: its time, what it wrote, the page (opened if asked)."""
    print(f"\n{what} finished in {time.perf_counter() - start:.0f} s; ", end="")
    print(f"wrote {out}/{name}.json, {name}.md, {name}.html")
    page = out / f"{name}.html"
    print(f"{name} ({holds}): {page.as_uri()}")
    if open_page:
        import webbrowser

        if not webbrowser.open(page.as_uri()):
            print("distrain: no web browser to open it with here", file=sys.stderr)
