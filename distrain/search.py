"""The learning-rate search's steps: the data it may read, a rung's start and its end.

A pipeline with ``tune`` (``distrain run --tune``) searches each run spec's rate before
the comparison (:mod:`distrain.analysis.tuning` holds the rule). Its steps:

- :func:`search_view`: the preprocessed data without the test split's files, which the
  candidates train and validate on; a candidate that read the test split would fail
  (its files are missing), so the choice is made on validation alone;
- :func:`tune_start`: the search's state and its first rung's trainings;
- :func:`tune_rung`: a rung's trained candidates scored, the survivors' next trainings
  (resuming from their own checkpoints, :func:`seed_from`), and after the last rung the
  final trainings, every run spec ``repeats`` times at its chosen rate.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from distrain.analysis import tuning
from distrain.base.errors import ConfigError, StepError
from distrain.train.config import RunSpec

# What a survivor takes from its run of the rung before: the checkpoints and the history
# written with them (the driver resumes from both, distrain.train.driver).
RESUMED = ("checkpoints", "history.json")


def held_out_files(metadata: dict) -> list[str]:
    """The test split's files a ``metadata.json`` lists (its views' too), relative paths."""
    files = []
    for meta in (metadata, *(metadata.get("views") or {}).values()):
        files += [item["file"] for item in (meta.get("shards") or {}).get("test", [])]
    return sorted(set(files))


def search_view(data_dir: str | os.PathLike, output_dir: str | os.PathLike) -> dict:
    """A copy of the preprocessed data without the test split's files.

    Files are hard-linked where the two folders share a file system, else copied. The
    metadata stays as it is (the checkpoints' data digest is the same), so reading the
    test split there fails on its first listed file.

    Returns:
        ``{"left_out": [files], "files": count}``.
    """
    src, out = Path(data_dir), Path(output_dir)
    left_out = set(held_out_files(json.loads((src / "metadata.json").read_text())))
    count = 0
    for path in sorted(src.rglob("*")):
        rel = path.relative_to(src).as_posix()
        if path.is_dir() or rel in left_out:
            continue
        target = out / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.link(path, target)
        except OSError:
            shutil.copy2(path, target)
        count += 1
    return {"left_out": sorted(left_out), "files": count}


def seed_from(resume_from: str | os.PathLike, output_dir: str | os.PathLike) -> bool:
    """Puts a rung's checkpoints and history into the next rung's output, to resume from.

    Returns whether there was something to take (a folder that cannot be read from
    here, as another pod's artifact on a cluster, leaves the survivor to train from its
    start: the record then says it was not resumed).
    """
    src, out = Path(resume_from), Path(output_dir)
    if not (src / "checkpoints").is_dir():
        return False
    out.mkdir(parents=True, exist_ok=True)
    for name in RESUMED:
        if (src / name).is_dir():
            shutil.copytree(src / name, out / name, dirs_exist_ok=True)
        elif (src / name).is_file():
            shutil.copyfile(src / name, out / name)
    return True


def _names(specs: list[str]) -> dict:
    return {spec: RunSpec.parse(spec).name for spec in specs}


def tune_start(
    tune: str,
    runs: list[str],
    *,
    grid: int,
    eta: int,
    epochs: int,
    seed: int,
    default_rate: float,
) -> dict:
    """The search's state (:func:`distrain.analysis.tuning.start`), first trainings in ``next``.

    Raises:
        StepError: A bad ``tune``, grid, eta or run spec.
    """
    try:
        specs = [str(RunSpec.parse(s)) for s in runs]
        return tuning.start(
            tune, specs, size=grid, eta=eta, epochs=epochs, seed=seed, default_rate=default_rate
        )
    except ConfigError as err:
        raise StepError(f"tune: {err}") from None


def tune_rung(state: dict, trained: list[str | os.PathLike], repeats: int) -> dict:
    """One rung's end: its trained folders scored, the state moved on.

    Args:
        state: The state before the rung.
        trained: The rung's training outputs (each with ``history.json``), in any order.
        repeats: Trainings of each run spec at its chosen rate, after the last rung.

    Returns:
        The new state; ``next`` holds the next rung's trainings, or after the last rung
        ``final`` holds the comparison's (``{"run_spec", "seed", "learning_rate"}``).
    """
    results = [
        {"history": json.loads((Path(p) / "history.json").read_text()), "path": str(p)}
        for p in trained
    ]
    state = tuning.advance(state, results, _names(list(state["runs"])))
    if not state["next"]:
        state["final"] = tuning.final_trainings(state, repeats, state["seed"])
    return state


def records(state: dict) -> dict:
    """Each run name's ``tuning`` record (:func:`distrain.analysis.tuning.record`)."""
    return {name: tuning.record(state, spec) for spec, name in _names(list(state["runs"])).items()}
