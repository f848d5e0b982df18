"""The learning-rate search of each run spec: its grid, its rungs and its choice.

``--tune "learning_rate=1e-4..1e-1"`` searches a log-spaced grid of rates for every run
spec by successive halving, the rung rule of Li et al.'s Hyperband: ``n`` candidates
train ``r`` epochs, the best ``1/eta`` of them by their validation score go on to ``eta``
times the epochs, until one is left. The last rung trains the search's whole budget (the
run's ``epochs`` by default); a survivor resumes from its own checkpoint of the rung
before (the same rate, seed and run: its checkpoint's fingerprint matches), so the rungs
cost the epochs they add.

This module is the arithmetic and the record, with no training: a search's state is a
JSON-ready dict (:func:`start`), each rung's results move it on (:func:`advance`) and its
end gives the rate each run spec trains at (:func:`final_trainings`). The pipeline's steps
(``components/tune.py``) carry the state between the rungs' training steps.

A candidate is scored on the validation split only: its last validation loss (lower is
better; a diverged candidate's, not finite, is the worst). The test split is not read
before the choice: the candidates train on a copy of the data without it
(:func:`distrain.search.search_view`).

The choice among the last rung's candidates leans low (:func:`choose`): the lowest rate
whose score is within :data:`DEFAULT_TOLERANCE` of the best. Each candidate trains one
seed, and on the samples a run spec's repeats end 0.5-31 % apart in validation loss, 10 %
in the median (the untuned races' repeats, BENCHMARKS.md); inside that noise the higher
rate is no better, and it is the one that diverges on another seed (on a language-model
sample ``sync:2`` chose 0.031 at 2.7 % below 0.0031's score, and its second seed diverged
at 0.031). Too low a rate costs a little quality; too high a rate can cost the run.
"""

from __future__ import annotations

import math
import re

from distrain.base.errors import ConfigError

# The parameters a search can tune (the rate rules of other branches plug in as the
# search's centre: a mode's own default rate, distrain.analysis.tuning.start's ``default_rate``).
TUNABLE = ("learning_rate",)
DEFAULT_GRID = 6
DEFAULT_ETA = 3
# The last rung's choice takes the lowest rate scoring within this fraction of the best
# (:func:`choose`).
DEFAULT_TOLERANCE = 0.1
# Rung-0 candidates a search may have per run spec (each a training run).
MAX_GRID = 30

_RANGE = re.compile(r"^\s*(\w+)\s*=\s*([^.\s][^\s]*?)\s*\.\.\s*([^\s]+)\s*$")


def parse(text: str) -> tuple[str, float, float]:
    """``learning_rate=1e-4..1e-1`` as ``(parameter, low, high)``.

    Raises:
        ConfigError: Not of that form, an unknown parameter, or bounds that are not
            positive numbers with ``low < high``.
    """
    match = _RANGE.match(text or "")
    if not match:
        raise ConfigError(
            f"--tune {text!r}: expected PARAMETER=LOW..HIGH, e.g. learning_rate=1e-4..1e-1"
        )
    name, low_text, high_text = match.groups()
    if name not in TUNABLE:
        raise ConfigError(
            f"--tune {text!r}: cannot tune {name!r}; expected one of {', '.join(TUNABLE)}"
        )
    try:
        low, high = float(low_text), float(high_text)
    except ValueError:
        raise ConfigError(f"--tune {text!r}: the bounds must be numbers") from None
    if not (0 < low < high and math.isfinite(high)):
        raise ConfigError(f"--tune {text!r}: expected 0 < LOW < HIGH, got {low:g} and {high:g}")
    return name, low, high


def grid(low: float, high: float, size: int) -> list[float]:
    """``size`` rates spaced evenly in log from ``low`` to ``high`` (both included)."""
    if size < 2:
        return [low]
    step = (math.log(high) - math.log(low)) / (size - 1)
    return [float(f"{math.exp(math.log(low) + i * step):.6g}") for i in range(size)]


def check(size: int, eta: int) -> None:
    """The grid's size and the halving factor.

    Raises:
        ConfigError: A grid of fewer than 2 or more than :data:`MAX_GRID` rates, or an
            ``eta`` below 2.
    """
    if not 2 <= size <= MAX_GRID:
        raise ConfigError(f"tune grid must be between 2 and {MAX_GRID} rates, got {size}")
    if eta < 2:
        raise ConfigError(f"tune eta must be at least 2, got {eta}")


def rungs(size: int, eta: int, epochs: int) -> list[dict]:
    """The rungs of a search: ``[{"candidates", "epochs"}, ...]``, first to last.

    Hyperband's rule: rung ``i`` trains ``n_i`` candidates, ``n_0 = size`` and
    ``n_{i+1} = max(1, floor(n_i / eta))``, until one is left (that one is the choice and
    trains no further). The last rung trains ``epochs``; each rung before it ``eta`` times
    fewer (at least 1). ``rungs(6, 3, 30)`` is 6 candidates at 10 epochs, then 2 at 30.
    """
    check(size, eta)
    counts = [size]
    while counts[-1] > 1 and counts[-1] // eta >= 1 and len(counts) < 32:
        counts.append(counts[-1] // eta)
    if counts[-1] == 1 and len(counts) > 1:
        counts.pop()  # the one left is chosen: it trains no rung of its own
    last = len(counts) - 1
    return [
        {"candidates": n, "epochs": max(1, epochs // eta ** (last - i))}
        for i, n in enumerate(counts)
    ]


def kept(candidates: int, eta: int) -> int:
    """How many of a rung's candidates go on: the best ``1/eta``, at least one."""
    return max(1, candidates // eta)


def choose(candidates: list[dict], tolerance: float = DEFAULT_TOLERANCE) -> dict:
    """The last rung's choice: the lowest rate whose score is within ``tolerance`` of the best.

    Within ``tolerance`` means a score at most ``best + tolerance * |best|``. With every
    candidate diverged (no finite score) the lowest rate is chosen.

    Args:
        candidates: ``{"learning_rate", "score"}`` each (more keys are kept).
        tolerance: The fraction of the best score that counts as a tie (0: the best alone).

    Returns:
        The chosen candidate, with ``best_rate`` (the best score's rate) and ``why`` (the
        rule, in words a user can check against the scores).

    Raises:
        ValueError: No candidates.
    """
    if not candidates:
        raise ValueError("no candidate to choose from")
    best = min(candidates, key=lambda c: (c["score"], c["learning_rate"]))
    if not math.isfinite(best["score"]):
        chosen = min(candidates, key=lambda c: c["learning_rate"])
        why = "every candidate diverged: the lowest rate"
    else:
        bar = best["score"] + tolerance * abs(best["score"])
        chosen = min((c for c in candidates if c["score"] <= bar), key=lambda c: c["learning_rate"])
        if chosen is best:
            why = f"the best validation loss ({best['score']:.4g})"
        else:
            why = (
                f"the lowest rate within {tolerance:.0%} of the best validation loss "
                f"({chosen['score']:.4g} against {best['score']:.4g} at {best['learning_rate']:g})"
            )
    return {**chosen, "best_rate": best["learning_rate"], "why": why}


def score_of(history: dict) -> tuple[float, float | None, float | None]:
    """A candidate's validation score: ``(score, val_loss, val_accuracy)`` of its last validation.

    The score is the validation loss (lower is better); a candidate without a finite one
    (diverged, or never validated) scores ``inf``.
    """
    validated = [e for e in history.get("epochs") or [] if e.get("val_loss") is not None]
    if not validated:
        return math.inf, None, None
    last = validated[-1]
    loss = float(last["val_loss"])
    acc = last.get("val_accuracy")
    return (loss if math.isfinite(loss) else math.inf), loss, acc


def start(
    tune: str,
    runs: list[str],
    *,
    size: int = DEFAULT_GRID,
    eta: int = DEFAULT_ETA,
    epochs: int,
    seed: int = 0,
    default_rate: float | None = None,
    tolerance: float = DEFAULT_TOLERANCE,
) -> dict:
    """A search's state before its first rung, whose trainings are ``state["next"]``.

    Args:
        tune: ``learning_rate=LOW..HIGH``.
        runs: Run specs (strings), each searched on its own; names are the keys.
        size: Rates in the grid.
        eta: The halving factor.
        epochs: The budget of the last rung.
        seed: The candidates' seed (of the weights and the data order).
        default_rate: The rate the runs train at without a search (the untuned ranking's).
        tolerance: The last rung's tie, as a fraction of the best score (:func:`choose`).
    """
    parameter, low, high = parse(tune)
    plan = rungs(size, eta, epochs)
    rates = grid(low, high, size)
    state = {
        "tune": tune,
        "parameter": parameter,
        "grid": rates,
        "eta": eta,
        "epochs": epochs,
        "seed": seed,
        "default_rate": default_rate,
        "tolerance": tolerance,
        "rungs": plan,
        "done": 0,
        "runs": {
            str(spec): {"candidates": [{"learning_rate": lr, "rungs": []} for lr in rates]}
            for spec in runs
        },
    }
    state["next"] = _trainings(state, {spec: rates for spec in state["runs"]}, {})
    return state


def _trainings(state: dict, rates: dict, resume: dict) -> list[dict]:
    """The next rung's trainings: each run spec at each of its rates."""
    epochs = state["rungs"][state["done"]]["epochs"]
    return [
        {
            "run_spec": spec,
            "learning_rate": lr,
            "seed": state["seed"],
            "epochs": epochs,
            # Every rung trains the first epochs of the last rung's schedule (a language
            # model's anneal, SGD's decay): a survivor's checkpoint is then one it resumes.
            "schedule_epochs": state["rungs"][-1]["epochs"],
            "rung": state["done"],
            "resume_from": resume.get((spec, lr), ""),
        }
        for spec, chosen in rates.items()
        for lr in chosen
    ]


def _candidate(state: dict, spec: str, lr: float) -> dict | None:
    for c in state["runs"][spec]["candidates"]:
        if math.isclose(c["learning_rate"], lr, rel_tol=1e-9):
            return c
    return None


def advance(state: dict, results: list[dict], names: dict) -> dict:
    """The state after a rung, from each of its trainings' ``{"history", "path"}``.

    Each result is matched to its candidate by run name and learning rate (the histories
    say both); the rung's best ``1/eta`` per run spec by score go on, resuming from
    ``path``. After the last rung each run spec's ``chosen`` is its rate (:func:`choose`:
    the lowest within the state's ``tolerance`` of the best), ``best_rate`` the best-scored
    one and ``why`` the rule that chose.

    Args:
        state: The state before the rung (:func:`start` or an earlier call).
        results: The rung's trainings: ``history`` (``history.json``) and ``path`` (the
            folder with its checkpoints).
        names: Run spec (as in the state) -> run name (as histories give it).

    Raises:
        ValueError: A result of no candidate of the rung, or a candidate without a result.
    """
    state = {**state, "runs": {k: {**v} for k, v in state["runs"].items()}}
    rung = state["done"]
    spec_of = {name: spec for spec, name in names.items()}
    expected = {(t["run_spec"], t["learning_rate"]) for t in state["next"]}
    seen = set()
    for result in results:
        history = result["history"]
        spec = spec_of.get(history["run"]["name"])
        lr = float(history["config"]["learning_rate"])
        match = [
            key for key in expected if key[0] == spec and math.isclose(key[1], lr, rel_tol=1e-9)
        ]
        if not match:
            raise ValueError(
                f"rung {rung}: a training of {history['run']['name']} at {lr:g} is no candidate"
            )
        seen.add(match[0])
        candidate = _candidate(state, spec, match[0][1])
        score, loss, acc = score_of(history)
        seconds = float(history.get("train_seconds") or 0.0)
        earlier = candidate["rungs"][-1] if candidate["rungs"] else None
        resumed = bool(history.get("resumed_at_steps")) and earlier is not None
        own = max(0.0, seconds - earlier["train_seconds"]) if resumed else seconds
        processes = int(history["run"].get("processes") or history["run"].get("workers") or 1)
        processes += int(history["run"].get("parameter_servers") or 0)
        candidate["rungs"] = [
            *candidate["rungs"],
            {
                "rung": rung,
                "epochs": len(history.get("epochs") or []),
                "score": score,
                "val_loss": loss,
                "val_accuracy": acc,
                "train_seconds": seconds,
                "seconds": own,
                "process_seconds": own * processes,
                "resumed": resumed,
                "path": result.get("path", ""),
            },
        ]
    missing = expected - seen
    if missing:
        listed = ", ".join(f"{s} at {lr:g}" for s, lr in sorted(missing))
        raise ValueError(f"rung {rung}: no result for {listed}")
    state["done"] = rung + 1
    survivors, resume = {}, {}
    for spec, run in state["runs"].items():
        survivors[spec] = _rung_end(state, run, rung, resume, spec)
    if state["done"] < len(state["rungs"]):
        state["next"] = _trainings(state, survivors, resume)
    else:
        state["next"] = []
    return state


def _rung_end(state: dict, run: dict, rung: int, resume: dict, spec: str) -> list[float]:
    """One run spec after ``rung``: the rates that go on.

    Their checkpoints go into ``resume``; the run spec's search cost so far, and after the
    last rung its choice (:func:`choose`), into ``run``.
    """
    entered = [c for c in run["candidates"] if len(c["rungs"]) == rung + 1]
    ranked = sorted(entered, key=lambda c: (c["rungs"][-1]["score"], c["learning_rate"]))
    best = ranked[: kept(len(entered), state["eta"])]
    for c in best:
        resume[(spec, c["learning_rate"])] = c["rungs"][-1]["path"]
    run["cost_seconds"] = sum(r["seconds"] for c in run["candidates"] for r in c["rungs"])
    run["process_seconds"] = sum(
        r["process_seconds"] for c in run["candidates"] for r in c["rungs"]
    )
    if state["done"] == len(state["rungs"]):
        picked = choose(
            [
                {"learning_rate": c["learning_rate"], "score": c["rungs"][-1]["score"]}
                for c in entered
            ],
            state.get("tolerance", 0.0),
        )
        run["chosen"] = picked["learning_rate"]
        run["best_rate"] = picked["best_rate"]
        run["why"] = picked["why"]
    return [c["learning_rate"] for c in best]


def final_trainings(state: dict, repeats: int, seed: int) -> list[dict]:
    """Every run spec ``repeats`` times at its chosen rate.

    Each training is ``{"run_spec", "seed", "learning_rate"}``, seeds ``seed``, ``seed + 1``...

    Raises:
        ValueError: The search has rungs still to train.
    """
    if state["done"] < len(state["rungs"]):
        raise ValueError(f"the search has trained {state['done']} of {len(state['rungs'])} rungs")
    return [
        {"run_spec": spec, "seed": seed + i, "learning_rate": run["chosen"]}
        for spec, run in state["runs"].items()
        for i in range(repeats)
    ]


def _finite(value):
    """A number as JSON can hold it: not finite is None (a diverged candidate's)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def record(state: dict, spec: str) -> dict:
    """What a comparison row says of its run spec's search (``tuning``)."""
    run = state["runs"][spec]
    return {
        "parameter": state["parameter"],
        "range": state["tune"],
        "grid": state["grid"],
        "eta": state["eta"],
        "rungs": state["rungs"],
        "default_rate": state.get("default_rate"),
        "chosen": run.get("chosen"),
        "best_rate": run.get("best_rate"),
        "why": run.get("why"),
        "tolerance": state.get("tolerance", 0.0),
        "candidates": [
            {
                "learning_rate": c["learning_rate"],
                "rungs": [{k: _finite(v) for k, v in r.items() if k != "path"} for r in c["rungs"]],
            }
            for c in run["candidates"]
        ],
        "seconds": run.get("cost_seconds", 0.0),
        "process_seconds": run.get("process_seconds", 0.0),
        "score": "validation loss of the candidate's last epoch (lower is better)",
    }
