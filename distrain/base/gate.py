"""Quality gates: conditions on a comparison's runs that a CI-triggered run must meet.

A gate is one or more conditions joined by ``,`` or ``and``, each ``[SCOPE.]METRIC OP VALUE``:

* ``METRIC``: a numeric column of the comparison (``accuracy``, ``bits_per_char``,
  ``speedup``, ``efficiency``, ``train_seconds``, ``examples_per_second``,
  ``time_to_target``, ``staleness_mean``, a regression's ``mse``, ``mae``, ``r2``, ...);
* ``OP``: ``>=``, ``>``, ``<=``, ``<`` or ``==``;
* ``SCOPE``: ``all`` (default: every trained run must meet it) or ``best`` (the best run).

For example ``accuracy>=0.98`` or ``best.accuracy>=0.98 and all.train_seconds<600``.
Baseline rows are never gated.
"""

from __future__ import annotations

import operator
import re
from dataclasses import dataclass

OPS = {">=": operator.ge, ">": operator.gt, "<=": operator.le, "<": operator.lt, "==": operator.eq}
_CONDITION = re.compile(
    r"^\s*(?:(?P<scope>all|best)\.)?(?P<metric>[a-z_][a-z0-9_]*)\s*(?P<op>>=|<=|==|>|<)\s*"
    r"(?P<value>[-+]?(\d+(\.\d*)?|\.\d+)([eE][-+]?\d+)?)\s*$"
)


class GateError(ValueError):
    """A gate expression cannot be parsed, or names a metric the comparison lacks."""


class GateFailed(RuntimeError):
    """A run does not meet the gate; the message lists every failed condition."""


@dataclass(frozen=True)
class Condition:
    """One condition of a gate."""

    scope: str
    metric: str
    op: str
    value: float

    def __str__(self) -> str:
        prefix = "" if self.scope == "all" else f"{self.scope}."
        return f"{prefix}{self.metric}{self.op}{self.value:g}"


def parse_gate(expression: str) -> list[Condition]:
    """Parses a gate; an empty expression is no gate (an empty list).

    Raises:
        GateError: A condition is not ``[SCOPE.]METRIC OP NUMBER``.
    """
    conditions = []
    for part in re.split(r",|\band\b", expression or ""):
        if not part.strip():
            continue
        m = _CONDITION.match(part)
        if not m:
            raise GateError(
                f"gate condition {part.strip()!r}: expected [all.|best.]METRIC OP NUMBER "
                f"with OP one of {' '.join(OPS)}, e.g. accuracy>=0.98"
            )
        conditions.append(Condition(m["scope"] or "all", m["metric"], m["op"], float(m["value"])))
    return conditions


def check_gate(comparison: dict, expression: str) -> list[dict]:
    """Checks every condition against a comparison (``comparison.json``).

    Returns:
        One result per (condition, run): ``condition``, ``run``, ``value``, ``passed``.

    Raises:
        GateError: Bad expression, no trained runs, or a metric a run does not have.
        GateFailed: Some condition fails; the message lists each failure.
    """
    conditions = parse_gate(expression)
    runs = [r for r in comparison.get("rows", []) if r.get("mode") != "baseline"]
    if conditions and not runs:
        raise GateError("the comparison has no trained runs to gate")
    results = []
    for cond in conditions:
        scoped = [r for r in runs if r["name"] == comparison.get("best")]
        targets = runs if cond.scope == "all" else scoped
        for row in targets:
            value = row.get(cond.metric)
            if not isinstance(value, int | float) or isinstance(value, bool):
                known = sorted(
                    k for k, v in row.items() if isinstance(v, int | float) and v is not None
                )
                raise GateError(
                    f"run {row['name']} has no numeric {cond.metric!r} (it has: {', '.join(known)})"
                )
            passed = bool(OPS[cond.op](value, cond.value))
            results.append(
                {"condition": str(cond), "run": row["name"], "value": value, "passed": passed}
            )
    failures = [r for r in results if not r["passed"]]
    if failures:
        raise GateFailed(
            "quality gate failed: "
            + "; ".join(f"{f['run']}: {f['condition']} (got {f['value']:.4g})" for f in failures)
        )
    return results
