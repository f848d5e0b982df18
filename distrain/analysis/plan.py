"""A recommendation at the user's own scale: step time from the cost model, steps measured.

``--plan "workers=16,gpus_per_worker=1,link_gbps=25"`` asks: at that scale, which mode
reaches the target first? Time to target is seconds per step times steps to target:

* **seconds per step**: the cost model's (:mod:`distrain.base.costmodel`, each mode's
  :meth:`~distrain.train.modes.Mode.predicted_step`), from the ``single`` run's one-process
  step time, the model's profile and the plan's link: ``link_gbps`` and ``latency_us``
  (50 µs by default, a data-centre network's order), never this machine's loopback. The
  parameter-server modes are predicted at every server count up to the workers (the servers'
  links cap the cluster), and the fewest servers within the model's error of the fastest
  give the worker/server ratio.
* **steps to target**: measured at the planned statistics (:mod:`distrain.analysis.planstats`):
  ``sync:N`` from the gradient noise scale (:mod:`distrain.base.noisescale`), checked by one
  process at N workers' batch, ``async:N`` by a run with ``N - 1`` updates of staleness
  injected. Other modes' steps are carried over from the runs here, said so, and not ranked.

Each time carries an interval from the model's error (the steps' seeds and resolution, the
step time's error on the runs checked here, at least :data:`STEP_ERROR_FLOOR`); a winner is
named only when its interval clears every other's, otherwise the candidates that cannot be
told apart are listed and the cheapest named, as the verdict does.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass
from pathlib import Path

from distrain.analysis.planstats import measure
from distrain.base.costmodel import contention, fit_link, ps_throughput
from distrain.base.errors import ConfigError
from distrain.base.verdict import separated
from distrain.train.config import RunSpec
from distrain.train.driver import steady
from distrain.train.modes import mode_class

FLOAT = 4
# The least error a predicted step time carries: the simulated-link benchmark's bound on
# the communication terms (BENCHMARKS.md, "plan"); more where the runs here were further off.
STEP_ERROR_FLOOR = 0.25


@dataclass(frozen=True)
class Plan:
    """The scale a user plans to train at.

    Attributes:
        workers: Training processes (workers or ranks) of each mode.
        gpus_per_worker: GPUs each has (0: CPUs). No GPU is measured here: a worker's
            compute is taken as this machine's, which the answer says.
        link_gbps: The network between workers, gigabits per second.
        latency_us: A message's latency on it, microseconds (50: a data-centre network).
        parameter_servers: Parameter servers of the parameter-server modes (0: every
            count from 1 to the workers is predicted and the ratio recommended).
    """

    workers: int
    gpus_per_worker: int = 0
    link_gbps: float = 10.0
    latency_us: float = 50.0
    parameter_servers: int = 0

    @classmethod
    def parse(cls, text: str) -> Plan:
        """``workers=16,gpus_per_worker=1,link_gbps=25`` as a plan.

        Raises:
            ConfigError: An unknown key, a value that is not a number, or workers below 1.
        """
        fields = {f.name: f.type for f in dataclasses.fields(cls)}
        given = {}
        for part in filter(None, (p.strip() for p in str(text).split(","))):
            key, sep, value = part.partition("=")
            key = key.strip()
            if not sep or key not in fields:
                raise ConfigError(
                    f"--plan {text!r}: {part!r} is not KEY=VALUE with KEY one of "
                    f"{', '.join(fields)}"
                )
            try:
                given[key] = float(value) if key in ("link_gbps", "latency_us") else int(value)
            except ValueError:
                raise ConfigError(
                    f"--plan {text!r}: {key} must be a number, got {value!r}"
                ) from None
        if "workers" not in given or given["workers"] < 1:
            raise ConfigError(f"--plan {text!r}: needs workers=N with N at least 1")
        if given.get("link_gbps", 1.0) <= 0:
            raise ConfigError(f"--plan {text!r}: link_gbps must be positive")
        if given.get("latency_us", 0.0) < 0:
            raise ConfigError(f"--plan {text!r}: latency_us must be 0 or more")
        return cls(**given)


def _step_seconds(history: dict) -> float | None:
    """A run's steady seconds per step: the epochs after the first, over their steps."""
    epochs = steady([e for e in history.get("epochs") or [] if "step_seconds" in e])
    count = len(history.get("epochs") or [])
    steps = history.get("steps")
    if not epochs or not steps or not count:
        return None
    return statistics.mean(e["step_seconds"] for e in epochs) / (steps / count)


def _link(reports: list[dict]) -> dict | None:
    """The link the runs probed (median time per size), fitted; None without a probe."""
    sizes: dict[int, list[float]] = {}
    ranks = None
    for r in reports:
        probe = (r.get("history") or {}).get("link_probe")
        if not probe:
            continue
        ranks = probe["ranks"]
        for row in probe["rows"]:
            sizes.setdefault(row["bytes"], []).append(row["seconds"])
    if not sizes or len(sizes) < 2:
        return None
    rows = [{"bytes": b, "seconds": statistics.median(t)} for b, t in sorted(sizes.items())]
    bandwidth, latency = fit_link({"ranks": ranks, "rows": rows})
    return {"bytes_per_second": bandwidth, "latency_seconds": latency}


def predict_step(
    spec: RunSpec, t1: float, prof: dict, batch: int, link: dict | None, per_update: int = 1
) -> float | None:
    """Seconds of one update of ``spec``: the mode's own equation, or the PS model.

    Parameter-server modes without their own equation get :func:`ps_throughput`: the
    cluster's examples per second, of which one update takes ``per_update`` workers'
    batches (1 for async; syncreplicas' aggregate).
    """
    step = spec.impl.predicted_step(t1, prof, batch, link)
    if step is not None or not link or not spec.parameter_servers:
        return step
    size = prof["parameters"] * FLOAT
    rate = ps_throughput(
        t1,
        size,
        spec.workers,
        spec.parameter_servers,
        link["bytes_per_second"],
        link["latency_seconds"],
        batch,
    )
    return batch * per_update / rate


def format_seconds(seconds: float | None) -> str:
    """A duration in the unit that reads best: µs, ms, s, min or h, three figures.

    Never ``0.0 s``: 0.2 ms is ``200 µs``, 36 ms is ``36.0 ms``, 95 s is ``1.58 min``.
    """
    if seconds is None:
        return "—"
    for limit, scale, unit in (
        (1e-3, 1e6, "µs"),
        (1.0, 1e3, "ms"),
        (60.0, 1.0, "s"),
        (3600.0, 1 / 60, "min"),
    ):
        if abs(seconds) < limit:
            return f"{seconds * scale:.3g} {unit}"
    return f"{seconds / 3600:.3g} h"


def format_span(span: list | tuple | None) -> str:
    """``20.1 ms–61.3 ms`` (or ``no interval``)."""
    return f"{format_seconds(span[0])}–{format_seconds(span[1])}" if span else "no interval"


def decide(candidates: list[dict]) -> dict:
    """The plan's verdict: a winner only where its time's interval clears every other's.

    Args:
        candidates: Predictions with ``at_scale``, ``time_to_target``, ``time_interval``
            (None: not ranked) and ``cost`` (processes, servers included).

    Returns:
        ``{"winner", "tied", "cheapest"}``: the winner's name, or None and the candidates
        whose intervals overlap the fastest's (in time order) with the cheapest of them.
    """
    ranked = sorted(
        (c for c in candidates if c.get("time_interval")),
        key=lambda c: (c["time_to_target"], c["cost"], c["at_scale"]),
    )
    if not ranked:
        return {"winner": None, "tied": [], "cheapest": None}
    best = ranked[0]
    tied = [best] + [
        c for c in ranked[1:] if not separated(best["time_interval"], c["time_interval"])
    ]
    if len(tied) == 1:
        return {"winner": best["at_scale"], "tied": [], "cheapest": None}
    cheapest = min(tied, key=lambda c: (c["cost"], c["time_to_target"], c["at_scale"]))
    return {"winner": None, "tied": [c["at_scale"] for c in tied], "cheapest": cheapest["at_scale"]}


def _reports_by_name(reports: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in reports:
        if r.get("history") and r["run"].get("mode") != "baseline":
            out.setdefault(r["run"]["name"], []).append(r)
    return out


def _calibration(single: list[dict], by_name: dict, plan: Plan) -> dict:
    """The one-process step, the profile, the batch, the cores, the probed and planned links."""
    t1 = statistics.median(s for s in (_step_seconds(r["history"]) for r in single) if s)
    prof = next((p for p in (r["evaluation"].get("model_profile") for r in single) if p), None)
    return {
        "one_process_step_seconds": t1,
        "profile": prof,
        "batch_per_worker": int(single[0]["history"]["config"]["batch_size"]),
        "cores": single[0]["history"].get("host_cores"),
        "measured_link": _link([r for runs in by_name.values() for r in runs]),
        "planned_link": {
            "bytes_per_second": plan.link_gbps * 1e9 / 8,
            "latency_seconds": plan.latency_us * 1e-6,
        },
    }


def _checks(by_name: dict, cal: dict) -> list[dict]:
    """The model's step time on each run here, against the run's own (this machine's link)."""
    checks = []
    prof, batch = cal["profile"], cal["batch_per_worker"]
    for name, runs in by_name.items():
        spec = RunSpec.parse(runs[0]["run"].get("spec") or name)
        measured = [s for s in (_step_seconds(r["history"]) for r in runs) if s]
        if not measured or prof is None:
            continue
        threads = int(runs[0]["history"]["config"].get("threads_per_worker") or 1)
        slow = contention(spec.processes + spec.parameter_servers, threads, cal["cores"])
        per_update = int(runs[0]["history"].get("global_batch_size") or batch) // batch
        t1 = cal["one_process_step_seconds"] * slow
        predicted = predict_step(spec, t1, prof, batch, cal["measured_link"], per_update)
        if predicted is None:
            continue
        actual = statistics.median(measured)
        checks.append(
            {
                "run": name,
                "measured_step_seconds": actual,
                "predicted_step_seconds": predicted,
                "error": predicted / actual - 1.0,
            }
        )
    return checks


def _seed_spread(stats: dict | None) -> tuple[float, float]:
    """The base runs' steps over their seeds (the lowest less one evaluation), over the median."""
    base = (stats or {}).get("base") or {}
    seeds = [s for s in base.get("seed_steps") or [] if s]
    if not seeds:
        return 1.0, 1.0
    middle = statistics.median(seeds)
    return (min(seeds) - base["every"]) / middle, max(seeds) / middle


def _measured(steps: float, every: int, stats: dict | None) -> list[float]:
    """A measured run's steps as an interval: its resolution, widened by the seeds' spread."""
    low, high = _seed_spread(stats)
    return [max(1.0, (steps - every) * low), steps * high]


def _sync_steps(stats: dict) -> dict:
    """``sync:N``'s steps: the noise scale's prediction, or the check where it missed."""
    sync, check = stats["sync"], stats["sync"]["check"]
    predicted, span = sync.get("predicted"), sync.get("predicted_range")
    if not check["steps"]:
        return {"steps": None, "basis": f"one process at batch {sync['batch']:,} missed it"}
    measured = check["steps"]
    out = {"predicted_steps": predicted, "predicted_interval": span, "checked_steps": measured}
    inside = bool(span) and span[0] - check["every"] <= measured <= span[1]
    if predicted is not None and inside:
        text = f"{predicted:,.0f} predicted by the noise scale, {measured:,} when checked"
        return {**out, "steps": predicted, "steps_interval": span, "basis": text}
    off = f" ({measured / predicted - 1:+.0%} off its {predicted:,.0f})" if predicted else ""
    return {
        **out,
        "steps": measured,
        "steps_interval": _measured(measured, check["every"], stats),
        "basis": f"{measured:,} measured at batch {sync['batch']:,}: the noise scale's "
        f"prediction missed{off}",
    }


def _steps(kind: str, row: dict, stats: dict | None, examples: float | None, batch: int) -> dict:
    """A candidate's steps to target, their interval and what they rest on."""
    if kind == "batch_grows" and stats:
        return _sync_steps(stats)
    if kind == "stale" and stats:
        run = stats["async"]
        if not run["steps"]:
            return {"steps": None, "basis": f"{run['delay']} updates stale, it missed the target"}
        return {
            "steps": run["steps"],
            "steps_interval": _measured(run["steps"], run["every"], stats),
            "basis": f"measured, {run['delay']} updates of staleness injected",
        }
    steps = examples / batch if examples else None
    if kind == "reference" and steps:
        interval = row.get("steps_to_target_interval")
        if stats:
            interval = _measured(steps, 0, stats)
        return {"steps": steps, "steps_interval": interval, "basis": "measured here"}
    return {"steps": steps, "basis": "carried over from here, not measured at this scale"}


def _scaled(spec: RunSpec, plan: Plan, reference: bool) -> list[RunSpec]:
    """The spec at the plan's scale; a parameter-server mode at each server count swept."""
    if reference:
        return [spec]
    scaled = dataclasses.replace(spec, workers=plan.workers)
    if not spec.parameter_servers:
        return [scaled]
    counts = [plan.parameter_servers] if plan.parameter_servers else []
    counts = counts or sorted({2**k for k in range(8) if 2**k <= plan.workers} | {plan.workers})
    options = spec.options_dict()
    return [dataclasses.replace(scaled, options={**options, "ps": p}) for p in counts]


def _kind(spec: RunSpec, per_update: int, reference: bool) -> str:
    """How a candidate's steps are known.

    ``batch_grows`` (its effective batch grows with the workers: the noise scale
    predicts), ``stale`` (unbounded staleness: measured with it injected), ``reference``
    (the run measured here) or ``other`` (carried over).
    """
    if reference:
        return "reference"
    if spec.workers > 1 and per_update == spec.workers and not spec.parameter_servers:
        return "batch_grows"
    return "stale" if mode_class(spec.mode).unbounded_staleness else "other"


def _predictions(name, runs, row, ctx) -> list[dict]:
    """The candidates of one measured run at the plan's scale."""
    spec = RunSpec.parse(runs[0]["run"].get("spec") or name)
    plan, cal, batch = ctx["plan"], ctx["cal"], ctx["cal"]["batch_per_worker"]
    try:
        scaled = _scaled(spec, plan, name == ctx["reference"])
    except ConfigError as err:
        return [{"run": name, "mode": spec.mode, "refused": str(err)}]
    examples = None
    if row.get("steps_to_target") and row.get("global_batch_size"):
        examples = row["steps_to_target"] * row["global_batch_size"]
    elif not ctx["reached_any"]:
        examples = statistics.median(r["history"].get("total_examples") or 0 for r in runs)
    # The effective batch grows with the workers where it did here (sync), and stays where
    # it did not (async; syncreplicas aggregates a fixed number).
    per_update = int(row.get("global_batch_size") or batch) // batch
    kind = _kind(spec, per_update, name == ctx["reference"])
    if kind == "batch_grows":
        per_update = plan.workers
    stats = ctx["stats"] if ctx["reached_any"] else None
    steps = _steps(kind, row, stats, examples, batch * per_update)
    out, e = [], ctx["step_error"]
    for s in scaled:
        t1, link = cal["one_process_step_seconds"], cal["planned_link"]
        step = (
            predict_step(s, t1, cal["profile"], batch, link, per_update) if cal["profile"] else None
        )
        p = {"run": name, "mode": spec.mode, "at_scale": str(s), "kind": kind, **steps}
        p.update(step_seconds=step, effective_batch=batch * per_update, time_interval=None)
        p.update(cost=s.processes + s.parameter_servers, parameter_servers=s.parameter_servers)
        p["basis"] = p["basis"] if ctx["reached_any"] else "as many examples as here"
        total = step * p["steps"] if step and p["steps"] else None
        p["time_to_target"], p["steps_to_target"] = total, p["steps"]
        if total and p.get("steps_interval"):
            lo, hi = p["steps_interval"]
            p["time_interval"] = [float(lo * step / (1 + e)), float(hi * step * (1 + e))]
        p["why_none"] = None if total else "no cost model for this mode" if not step else p["basis"]
        out.append(p)
    return out


def ps_ratio(predictions: list[dict], error: float, workers: int) -> dict | None:
    """The fewest parameter servers whose step is within the model's error of the fastest."""
    swept = [p for p in predictions if p.get("parameter_servers") and p.get("step_seconds")]
    if not swept:
        return None
    fastest = min(p["step_seconds"] for p in swept)
    enough = min(
        (p for p in swept if p["step_seconds"] <= fastest * (1 + error)),
        key=lambda p: p["parameter_servers"],
    )
    servers = enough["parameter_servers"]
    return {
        "at_scale": enough["at_scale"],
        "parameter_servers": servers,
        "workers_per_server": workers / servers,
        "steps": {p["parameter_servers"]: p["step_seconds"] for p in swept},
    }


def _assumptions(cal: dict, plan: Plan, stats: dict | None, reached_any: bool) -> list[str]:
    out = [
        f"the link is the plan's: {plan.link_gbps:g} Gb/s, {plan.latency_us:g} µs a message "
        "(not this machine's loopback)"
    ]
    if plan.gpus_per_worker:
        out.append(
            f"no GPU was measured here: each worker's compute is taken as this machine's "
            f"({format_seconds(cal['one_process_step_seconds'])} a step), so with "
            f"{plan.gpus_per_worker} GPU(s) a worker computes faster and communication "
            "weighs more than predicted"
        )
    if reached_any and not stats:
        out.append(
            "the steps to target were not measured at the planned batch or staleness (no "
            "data to measure them on): they are carried over and no candidate is ranked on them"
        )
    return out


def _sentence(plan: Plan, verdict: dict, timed: list[dict], ratios: list, tail: str) -> str:
    where = f"At {plan.workers} workers on a {plan.link_gbps:g} Gb/s link ({plan.latency_us:g} µs)"
    by_name = {p["at_scale"]: p for p in timed}
    if verdict["winner"]:
        p = by_name[verdict["winner"]]
        head = (
            f"{where}, the plan recommends {p['at_scale']}: {format_seconds(p['step_seconds'])} "
            f"a step x {p['steps']:,.0f} steps ({p['basis']}) = "
            f"{format_seconds(p['time_to_target'])} of training to the target "
            f"({format_span(p['time_interval'])}, start-up and validation left out)"
        )
    elif verdict["tied"]:
        spans = ", ".join(
            f"{n} {format_span(by_name[n]['time_interval'])}" for n in verdict["tied"]
        )
        head = (
            f"{where}, the plan names no winner: {spans} cannot be told apart inside the "
            f"model's error; the cheapest of them is {verdict['cheapest']}"
        )
    else:
        head = f"{where}, no candidate has a predicted time to the target with an interval"
    for r in ratios:
        head += (
            f"; {r['run']} needs {r['parameter_servers']} parameter server(s) for "
            f"{plan.workers} workers ({r['workers_per_server']:g} workers a server): more are "
            "within the model's error of it, fewer cap the cluster"
            if r["parameter_servers"] > 1
            else f"; {r['run']}'s one parameter server keeps up with {plan.workers} workers"
        )
    return head + tail


def build_plan(
    comparison: dict, reports: list[dict], plan: Plan, stats: dict | None = None
) -> dict:
    """Each compared mode's predicted time to target at ``plan``'s scale, and a verdict.

    Args:
        comparison: :func:`distrain.analysis.compare.build_comparison`'s result.
        reports: The run reports it was built from (histories, the model's profile).
        plan: The scale.
        stats: :func:`distrain.analysis.planstats.measure`'s statistics at that scale (None: the
            steps are carried over and not ranked).

    Returns:
        ``{"plan", "calibration", "checks", "model_error", "step_error", "statistics",
        "predictions", "parameter_servers", "verdict", "recommended", "assumptions",
        "sentence"}``.
    """
    by_name = _reports_by_name(reports)
    rows = {r["name"]: r for r in comparison["rows"] if r["mode"] != "baseline"}
    reference = comparison.get("baseline")
    single = list(by_name.get(reference, [])) if reference else []
    if not single:
        return {
            "plan": dataclasses.asdict(plan),
            "predictions": [],
            "recommended": None,
            "sentence": "No plan: it is calibrated on a single:1 run's step time, and none ran.",
        }
    cal = _calibration(single, by_name, plan)
    checks = _checks(by_name, cal)
    errors = [abs(c["error"]) for c in checks if c["run"] != reference]
    step_error = max(
        [STEP_ERROR_FLOOR, statistics.median(errors)] if errors else [STEP_ERROR_FLOOR]
    )
    reached_any = any(r.get("steps_to_target") for r in rows.values())
    ctx = {"plan": plan, "cal": cal, "reference": reference, "stats": stats}
    ctx.update(reached_any=reached_any, step_error=step_error)
    predictions, ratios = [], []
    for name, runs in by_name.items():
        ours = _predictions(name, runs, rows.get(name) or {}, ctx)
        predictions += ours
        ratio = ps_ratio(ours, step_error, plan.workers) if len(ours) > 1 else None
        if ratio:
            ratios.append({"run": name, **ratio})
    verdict = decide(predictions)
    error_text = (
        f"; the model's step times were {statistics.median(errors):.0%} off (median; at "
        f"worst {max(errors):.0%}) the {len(errors)} distributed run(s) here on this "
        f"machine's loopback, so each step time carries ±{step_error:.0%}"
        if errors
        else f"; no distributed run here checked the step times: each carries ±{step_error:.0%}"
    )
    assumptions = _assumptions(cal, plan, stats, reached_any)
    tail = error_text + (". Assumed: " + "; ".join(assumptions) + ".")
    if not reached_any:
        tail = "; no run reached the target here, so the times are for as many examples" + tail
    timed = [p for p in predictions if p.get("time_to_target")]
    return {
        "plan": dataclasses.asdict(plan),
        "calibration": {k: v for k, v in cal.items() if k not in ("profile", "cores")},
        "checks": checks,
        "model_error": max(errors) if errors else None,
        "step_error": step_error,
        "statistics": stats,
        "predictions": predictions,
        "parameter_servers": ratios,
        "verdict": verdict,
        "recommended": verdict["winner"],
        "assumptions": assumptions,
        "sentence": _sentence(plan, verdict, timed, ratios, tail),
    }


def plan_comparison(comparison: dict, reports: list[dict], text: str) -> dict:
    """``--plan TEXT`` on a comparison: the statistics measured at its scale, then the plan.

    The statistics (:func:`distrain.analysis.planstats.measure`) train on the reference run's data
    and model in this process; without them (no reference run, its data gone, no run at
    the target) the steps are carried over and said to be.
    """
    plan = Plan.parse(text)
    reference = comparison.get("baseline")
    single = [r for r in reports if (r.get("history") and r["run"]["name"] == reference)]
    reached = any(r.get("steps_to_target") for r in comparison["rows"])
    stats = None
    if single and reached:
        cfg = single[0]["history"]["config"]
        if Path(cfg.get("data_dir") or "").joinpath("metadata.json").is_file():
            asynchronous = [
                r
                for r in reports
                if r["run"].get("mode") and mode_class(r["run"]["mode"]).unbounded_staleness
            ]
            rule = bool(asynchronous) and (
                asynchronous[0]["run"].get("options", {}).get("lr") == "staleness"
            )
            stats = measure(
                cfg["data_dir"],
                cfg["model"],
                batch=int(cfg["batch_size"]),
                rate=float(cfg["learning_rate"]),
                target=float(comparison["target_accuracy"]),
                workers=plan.workers,
                seed=int(cfg.get("seed") or 0),
                warmup_epochs=float(cfg.get("warmup_epochs") or 0.0),
                staleness_rate=rule,
            )
    return build_plan(comparison, reports, plan, stats)
