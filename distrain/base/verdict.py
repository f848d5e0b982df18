"""Intervals on noisy numbers and the verdicts they allow: a winner only where intervals separate.

One run of one seed is one draw: a test accuracy of 0.982 on 2,000 images is 0.976 to 0.987
at 95 %, and two runs inside that are the same. Here: the 95 % interval of a number measured
on several repeats (Student's t on their mean, centred output on their median), the binomial
(Wilson) interval of an accuracy on ``n`` examples, whether two intervals separate, and the
verdict over the runs of a comparison (MLPerf's rule: several seeded runs, never the best one,
runs that never converge counted). Plain functions, no TensorFlow: the comparison and the
experiments' reports decide every "better" and "worse" here.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import mean, median, stdev

# The normal distribution's two-sided 95 % quantile.
Z95 = 1.959963984540054
# Student's t two-sided 95 % quantiles by degrees of freedom (standard tables); beyond 30
# the normal quantile is within 4 %.
T95 = {
    1: 12.706,
    2: 4.303,
    3: 3.182,
    4: 2.776,
    5: 2.571,
    6: 2.447,
    7: 2.365,
    8: 2.306,
    9: 2.262,
    10: 2.228,
    12: 2.179,
    15: 2.131,
    20: 2.086,
    25: 2.060,
    30: 2.042,
}


def t95(dof: int) -> float:
    """Student's t two-sided 95 % quantile for ``dof`` degrees of freedom (conservative)."""
    if dof < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {dof}")
    if dof > 30:
        return Z95
    return T95[max(d for d in T95 if d <= dof)]  # the next smaller: a wider interval


def wilson(proportion: float, n: int, z: float = Z95) -> tuple[float, float]:
    """The Wilson score interval of a proportion (an accuracy) measured on ``n`` examples.

    Raises:
        ValueError: ``n`` is not positive or the proportion is outside [0, 1].
    """
    if n <= 0:
        raise ValueError(f"an interval needs at least one example, got n={n}")
    if not 0.0 <= proportion <= 1.0:
        raise ValueError(f"a proportion is between 0 and 1, got {proportion}")
    denom = 1 + z * z / n
    centre = (proportion + z * z / (2 * n)) / denom
    half = z * math.sqrt(proportion * (1 - proportion) / n + z * z / (4 * n * n)) / denom
    return max(0.0, centre - half), min(1.0, centre + half)


def t_interval(values: list[float]) -> tuple[float, float] | None:
    """The 95 % t interval of the mean of repeated measurements (None: fewer than two)."""
    values = [float(v) for v in values]
    if len(values) < 2:
        return None
    half = t95(len(values) - 1) * stdev(values) / math.sqrt(len(values))
    return mean(values) - half, mean(values) + half


def hull(*intervals: tuple[float, float] | None) -> tuple[float, float] | None:
    """The smallest interval holding every given one (None when none is given)."""
    given = [i for i in intervals if i is not None]
    if not given:
        return None
    return min(i[0] for i in given), max(i[1] for i in given)


@dataclass(frozen=True)
class Summary:
    """A number measured on each repeat: its median, its 95 % interval and the raw values."""

    median: float | None
    interval: tuple[float, float] | None
    values: list[float | None]


def summarize(
    values: list[float | None],
    binomial_n: int | None = None,
    example_intervals: list | None = None,
) -> Summary:
    """The median and 95 % interval of a number over repeats (None values left out).

    Args:
        values: One value per repeat (None where the repeat has none, e.g. never reached).
        binomial_n: For a proportion (accuracy), the examples it was measured on: the
            interval is then at least the Wilson interval at the median, so that one
            repeat still has one and several never claim less noise than the test set has.
        example_intervals: For a mean over test examples (a regression's MSE), each
            repeat's own 95 % interval over its examples: the interval is then at least
            the median repeat's (the two middle ones' hull for an even count), as an
            accuracy's is at least the Wilson interval.
    """
    present = [float(v) for v in values if v is not None]
    if not present:
        return Summary(None, None, list(values))
    centre = median(present)
    interval = t_interval(present)
    if binomial_n:
        interval = hull(interval, wilson(min(max(centre, 0.0), 1.0), binomial_n))
    if example_intervals:
        ranked = sorted(
            (float(v), tuple(i) if i else None)
            for v, i in zip(values, example_intervals, strict=True)
            if v is not None
        )
        middle = ranked[(len(ranked) - 1) // 2 : len(ranked) // 2 + 1]
        interval = hull(interval, *(i for _, i in middle))
    return Summary(centre, interval, list(values))


def separated(better: tuple[float, float] | None, other: tuple[float, float] | None) -> bool:
    """Whether two intervals do not overlap (no interval: cannot be told apart)."""
    if better is None or other is None:
        return False
    return better[1] < other[0] or other[1] < better[0]


def compare_values(a: float, a_interval: tuple[float, float] | None, b: float, b_interval) -> int:
    """+1 when ``a`` is measurably above ``b``, -1 measurably below, 0 inside the noise."""
    if not separated(a_interval, b_interval):
        return 0
    return 1 if a > b else -1


def interval_text(interval: tuple[float, float] | None, spec: str = "{:.4f}") -> str:
    """``0.9761–0.9869`` (or ``no interval``)."""
    if interval is None:
        return "no interval"
    return f"{spec.format(interval[0])}–{spec.format(interval[1])}"


@dataclass
class Candidate:
    """One run as the verdict sees it.

    Attributes:
        name: The run's name.
        value: Its median on the criterion (None: it never reached the target).
        interval: The 95 % interval of that value (None: one repeat of a timed number).
        cost: Cores or processes it used (the cheapest of a tie is named).
        reached: Repeats that reached the target (time criterion).
        repeats: Repeats it ran.
    """

    name: str
    value: float | None
    interval: tuple[float, float] | None
    cost: float
    reached: int = 1
    repeats: int = 1
    extra: dict = field(default_factory=dict)


# How a criterion reads in a sentence: (what is measured, better adjective, number format,
# unit).
WORDS = {
    "time_to_target": ("time to the target", "faster", "{:.1f}", " s"),
    "accuracy": ("test accuracy", "more accurate", "{:.4f}", ""),
    "bits_per_char": ("bits per character", "better (fewer bits per character)", "{:.3f}", ""),
    "reconstruction_mse": ("reconstruction error", "better (lower error)", "{:.4f}", ""),
    "mse": ("test mean squared error", "better (lower MSE)", "{:.4g}", ""),
}


def _processes(cost: float) -> str:
    return f"{cost:g} process" + ("" if cost == 1 else "es")


def decide(candidates: list[Candidate], criterion: str, lower_is_better: bool) -> dict:
    """The verdict over runs on one criterion: a winner only where its interval clears all.

    A run whose value is None (it never reached the target in every repeat) cannot win and
    is counted in the reason. Among the rest, the best median wins only if its interval
    separates from every other run's; otherwise the runs whose intervals overlap the best's
    (or that have none) are tied, and the cheapest of them is named.

    Returns:
        ``{criterion, winner, tied, cheapest, never_reached, reason}``.
    """
    what, better, number, unit = WORDS.get(criterion, (criterion, "better", "{:.4g}", ""))

    def value(v: float) -> str:
        return number.format(v) + unit

    def span(interval) -> str:
        return interval_text(interval, number) + (unit if interval else "")

    ranked = [c for c in candidates if c.value is not None]
    missing = [c for c in candidates if c.value is None]
    sign = 1 if lower_is_better else -1
    ranked.sort(key=lambda c: (sign * c.value, c.cost, c.name))
    never = [c.name for c in missing]
    tail = ""
    if missing:
        parts = [
            f"{c.name} ({c.reached} of {c.repeats} repeats)" if c.reached else c.name
            for c in missing
        ]
        tail = (
            f"; {len(missing)} of {len(candidates)} runs did not reach the target in every "
            f"repeat and cannot win: {', '.join(parts)}"
        )
    verdict = {"criterion": criterion, "winner": None, "tied": [], "cheapest": None}
    verdict["never_reached"] = never
    if not ranked:
        verdict["reason"] = f"No run has a {what} to decide on{tail}."
        return verdict
    best = ranked[0]
    rest = ranked[1:]
    if all(separated(best.interval, c.interval) for c in rest):
        verdict["winner"] = best.name
        if rest:
            runner = rest[0]
            reason = (
                f"{best.name} is {better} on {what}: {value(best.value)} "
                f"(95 % interval {span(best.interval)}) against "
                f"{value(runner.value)} ({span(runner.interval)}) for "
                f"the next best, {runner.name}"
            )
        else:
            reason = f"{best.name} is the only run with a {what}: {value(best.value)}"
        verdict["reason"] = reason + tail + "."
        return verdict
    tied = [best] + [c for c in rest if not separated(best.interval, c.interval)]
    cheapest = min(tied, key=lambda c: (c.cost, sign * c.value, c.name))
    verdict["tied"] = [c.name for c in tied]
    verdict["cheapest"] = cheapest.name
    if best.interval is None:
        why = f"with one repeat, {what} has no interval: give --repeats 3 or more to separate runs"
    else:
        why = (
            f"the best, {best.name} at {value(best.value)}, has an interval "
            f"({span(best.interval)}) that overlaps theirs"
        )
    verdict["reason"] = (
        f"No run is measurably {better} on {what}: {', '.join(verdict['tied'])} cannot be "
        f"told apart ({why}); the cheapest of them is {cheapest.name} "
        f"({_processes(cheapest.cost)}){tail}."
    )
    return verdict


def accuracy_interval(accuracy: float | None, n: int | None) -> tuple[float, float] | None:
    """The Wilson 95 % interval of an accuracy on ``n`` test examples (None without ``n``)."""
    if accuracy is None or not n:
        return None
    return wilson(min(max(float(accuracy), 0.0), 1.0), int(n))


def accuracy_difference(a: float, n_a: int | None, b: float, n_b: int | None) -> int:
    """+1 when accuracy ``a`` is measurably above ``b``, -1 below, 0 inside their intervals.

    Without the test-set sizes there is no interval, and no difference is claimed.
    """
    return compare_values(a, accuracy_interval(a, n_a), b, accuracy_interval(b, n_b))


def with_interval(accuracy: float, n: int | None) -> str:
    """``0.8790 (95 % interval 0.8429–0.9063)``: an accuracy as a report should give it."""
    interval = accuracy_interval(accuracy, n)
    if interval is None:
        return f"{accuracy:.4f} (no test-set size: no interval)"
    return f"{accuracy:.4f} (95 % interval {interval_text(interval)})"


def repeat_summary(histories: list[dict]) -> dict:
    """Repeats of one run (``distrain train --repeats``): its headline numbers' summaries.

    The median, 95 % interval and raw values of its time, throughput and final validation
    accuracy.
    """

    def final_val(history):
        values = [e.get("val_accuracy") for e in history.get("epochs") or []]
        values = [v for v in values if v is not None]
        return values[-1] if values else None

    out = {"run": histories[0]["run"]["name"], "repeats": len(histories)}
    for key, get in (
        ("train_seconds", lambda h: h.get("train_seconds")),
        ("examples_per_second", lambda h: h.get("examples_per_second")),
        ("val_accuracy", final_val),
    ):
        summary = summarize([get(h) for h in histories])
        out[key] = summary.median
        out[f"{key}_interval"] = list(summary.interval) if summary.interval else None
        out[f"{key}_values"] = summary.values
    return out
