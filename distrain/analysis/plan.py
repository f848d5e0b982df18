"""A recommendation at the user's own scale: the cost model, calibrated on this comparison's runs.

``--plan "workers=16,gpus_per_worker=1,link_gbps=25"`` asks: at that scale, which mode
reaches the target first? The answer is the cost model's (:mod:`distrain.base.costmodel`, each
mode's :meth:`~distrain.train.modes.Mode.predicted_step`), calibrated on what this
comparison measured: the one-process step time of the ``single`` run, the model's profile,
and the link the sync runs probed (its per-message latency; the bandwidth is the user's).
Steps to target are carried over from the runs measured here as examples to target (the
statistical efficiency at the larger batch is an assumption, and said to be one). Before it
recommends, the model predicts the step time of every run it can check here; its error on
those is part of the answer.
"""

from __future__ import annotations

import dataclasses
import statistics
from dataclasses import dataclass

from distrain.base.costmodel import contention, fit_link, ps_throughput
from distrain.base.errors import ConfigError
from distrain.train.config import RunSpec
from distrain.train.driver import steady

# A message's latency when no run probed the link (a data-centre network's order).
DEFAULT_LATENCY_SECONDS = 50e-6
FLOAT = 4


@dataclass(frozen=True)
class Plan:
    """The scale a user plans to train at.

    Attributes:
        workers: Training processes (workers or ranks) of each mode.
        gpus_per_worker: GPUs each has (0: CPUs). No GPU is measured here: a worker's
            compute is taken as this machine's, which the answer says.
        link_gbps: The network between workers, gigabits per second.
        parameter_servers: Parameter servers of the parameter-server modes (0: as the
            runs measured here had).
    """

    workers: int
    gpus_per_worker: int = 0
    link_gbps: float = 10.0
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
                given[key] = float(value) if key == "link_gbps" else int(value)
            except ValueError:
                raise ConfigError(
                    f"--plan {text!r}: {key} must be a number, got {value!r}"
                ) from None
        if "workers" not in given or given["workers"] < 1:
            raise ConfigError(f"--plan {text!r}: needs workers=N with N at least 1")
        if given.get("link_gbps", 1.0) <= 0:
            raise ConfigError(f"--plan {text!r}: link_gbps must be positive")
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


def _reports_by_name(reports: list[dict]) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for r in reports:
        if r.get("history") and r["run"].get("mode") != "baseline":
            out.setdefault(r["run"]["name"], []).append(r)
    return out


def build_plan(comparison: dict, reports: list[dict], plan: Plan) -> dict:
    """Each compared mode's predicted seconds per step and time to target at ``plan``'s scale.

    Args:
        comparison: :func:`distrain.analysis.compare.build_comparison`'s result (rows: steps to
            target, effective batch).
        reports: The run reports it was built from (histories, the model's profile).
        plan: The scale.

    Returns:
        ``{"plan", "calibration", "checks", "model_error", "predictions", "recommended",
        "assumptions", "sentence"}``.
    """
    by_name = _reports_by_name(reports)
    rows = {r["name"]: r for r in comparison["rows"] if r["mode"] != "baseline"}
    # The comparison's reference run (single:1 by default): one process, nothing scaled.
    reference = comparison.get("baseline")
    single = list(by_name.get(reference, [])) if reference else []
    assumptions = []
    if not single:
        return {
            "plan": dataclasses.asdict(plan),
            "predictions": [],
            "recommended": None,
            "sentence": "No plan: it is calibrated on a single:1 run's step time, and none ran.",
        }
    t1s = [s for s in (_step_seconds(r["history"]) for r in single) if s]
    t1 = statistics.median(t1s)
    prof = next(
        (
            r["evaluation"].get("model_profile")
            for r in single
            if r["evaluation"].get("model_profile")
        ),
        None,
    )
    batch = int(single[0]["history"]["config"]["batch_size"])
    measured_link = _link([r for runs in by_name.values() for r in runs])
    latency = measured_link["latency_seconds"] if measured_link else DEFAULT_LATENCY_SECONDS
    if not measured_link:
        assumptions.append(
            f"no run probed the link: a message's latency is taken as {latency * 1e6:.0f} µs"
        )
    else:
        assumptions.append(
            f"a message's latency is the one the sync runs measured here "
            f"({latency * 1e6:.0f} µs), the bandwidth the plan's"
        )
    target_link = {"bytes_per_second": plan.link_gbps * 1e9 / 8, "latency_seconds": latency}
    if plan.gpus_per_worker:
        assumptions.append(
            f"no GPU was measured here: each worker's compute is taken as this machine's "
            f"({t1 * 1e3:.2f} ms a step), so with {plan.gpus_per_worker} GPU(s) a worker "
            "computes faster and communication weighs more than predicted"
        )
    assumptions.append(
        "the examples each mode needed to reach the target here are taken to carry over to "
        "the larger effective batch (statistical efficiency measured here, not at that scale)"
    )

    # The model's error on the runs it can check here: each run's own step time.
    checks = []
    cores = single[0]["history"].get("host_cores")
    for name, runs in by_name.items():
        spec = RunSpec.parse(runs[0]["run"].get("spec") or name)
        measured = [s for s in (_step_seconds(r["history"]) for r in runs) if s]
        if not measured or prof is None:
            continue
        threads = int(runs[0]["history"]["config"].get("threads_per_worker") or 1)
        slow = contention(spec.processes + spec.parameter_servers, threads, cores)
        per_update = int(runs[0]["history"].get("global_batch_size") or batch) // batch
        predicted = predict_step(spec, t1 * slow, prof, batch, measured_link, per_update)
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
    errors = [abs(c["error"]) for c in checks if c["run"] != "single:1"]

    # Where no run reached the target, the times are for training as long as here (the
    # examples each run saw), and say so: they compare speed, not quality.
    reached_any = any(r.get("steps_to_target") for r in rows.values())
    predictions = []
    for name, runs in by_name.items():
        row = rows.get(name) or {}
        spec = RunSpec.parse(runs[0]["run"].get("spec") or name)
        changes = {"workers": plan.workers}
        if plan.parameter_servers and spec.parameter_servers:
            changes["options"] = {**spec.options_dict(), "ps": plan.parameter_servers}
        try:
            scaled = spec if name == reference else dataclasses.replace(spec, **changes)
        except ConfigError as err:
            predictions.append({"run": name, "mode": spec.mode, "refused": str(err)})
            continue
        examples = None
        if row.get("steps_to_target") and row.get("global_batch_size"):
            examples = row["steps_to_target"] * row["global_batch_size"]
        elif not reached_any:
            examples = statistics.median(r["history"].get("total_examples") or 0 for r in runs)
        # The effective batch grows with the workers where it did here (every worker's
        # gradient in each update: sync), and stays where it did not (async; syncreplicas
        # aggregates a fixed number).
        measured_batch = int(row.get("global_batch_size") or batch)
        per_update = measured_batch // batch
        if spec.workers > 1 and per_update == spec.workers:
            per_update = scaled.workers
        global_batch = batch * per_update
        step = predict_step(scaled, t1, prof, batch, target_link, per_update) if prof else None
        steps = examples / global_batch if examples else None
        predictions.append(
            {
                "run": name,
                "mode": spec.mode,
                "at_scale": str(scaled),
                "step_seconds": step,
                "effective_batch": global_batch,
                "steps_to_target": steps,
                "time_to_target": step * steps if step and steps else None,
                "why_none": None
                if step and steps
                else "no cost model for this mode"
                if not step
                else "it did not reach the target here",
                "basis": "to the target" if reached_any else "as many examples as here",
            }
        )
    timed = [p for p in predictions if p.get("time_to_target")]
    best = min(timed, key=lambda p: p["time_to_target"]) if timed else None
    error_text = (
        f"the model's step times were within {max(errors):.0%} of the {len(errors)} "
        f"distributed run(s) it could check here (median {statistics.median(errors):.0%} off)"
        if errors
        else "no distributed run here could check the model's step times"
    )
    if best and not reached_any:
        sentence = (
            f"No run reached the target here, so the plan compares speed alone: at "
            f"{plan.workers} workers on a {plan.link_gbps:g} Gb/s link the cost model "
            f"calibrated here predicts {best['at_scale']} to train as many examples as its "
            f"run did here fastest ({best['time_to_target']:.1f} s); {error_text}. "
            f"Assumed: {'; '.join(assumptions[:-1]) or 'nothing more'}."
        )
    elif best:
        # Predictions closer to the best than the model's own error cannot be told apart.
        close = [
            p["at_scale"]
            for p in timed
            if p is not best
            and errors
            and p["time_to_target"] <= best["time_to_target"] * (1 + max(errors))
        ]
        caveat = (
            f" ({', '.join(close)} predicted within the model's own error of it: the cost model "
            "cannot tell them apart)"
            if close
            else ""
        )
        sentence = (
            f"At {plan.workers} workers on a {plan.link_gbps:g} Gb/s link, the cost model "
            f"calibrated here recommends {best['at_scale']}: {best['step_seconds'] * 1e3:.2f} ms "
            f"a step x {best['steps_to_target']:,.0f} steps = {best['time_to_target']:.1f} s of "
            f"training to the target (start-up and validation left out){caveat}; {error_text}. "
            f"Assumed: {'; '.join(assumptions)}."
        )
    else:
        sentence = f"No mode has a predicted time to the target at that scale; {error_text}."
    return {
        "plan": dataclasses.asdict(plan),
        "calibration": {
            "one_process_step_seconds": t1,
            "batch_per_worker": batch,
            "measured_link": measured_link,
            "planned_link": target_link,
        },
        "checks": checks,
        "model_error": max(errors) if errors else None,
        "predictions": predictions,
        "recommended": best["at_scale"] if best else None,
        "assumptions": assumptions,
        "sentence": sentence,
    }
