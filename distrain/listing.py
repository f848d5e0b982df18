"""What ``distrain list`` prints: the data sets, models and modes installed, and whence each."""

from __future__ import annotations

from distrain import datasets
from distrain.base import plugins
from distrain.train.modes import mode_class, mode_names


def _line(name: str, group: str, summary: str, indent: int = 2) -> str:
    return f"{' ' * indent}{name:<{22 - indent}} [{plugins.origin(group, name)}] {summary}"


def installed() -> list[str]:
    """The listing's lines.

    Data sets with their models (the default first), then modes, each with its origin:
    ``built-in`` or the distribution (name and version) whose entry point added it
    (:mod:`distrain.base.plugins`); then the plugins that failed to load, with their errors.
    """
    lines = ["data sets (distrain run NAME), each with its models (the first is the default):"]
    for name in datasets.names():
        dataset = datasets.get(name)
        lines.append(_line(name, plugins.DATASETS, dataset.summary))
        for model, spec in dataset.models.items():
            lines.append(_line(model, plugins.MODELS, spec.summary, indent=6))
    lines.append("modes (--runs MODE:WORKERS[:OPTION=VALUE]):")
    for name in mode_names():
        doc = (mode_class(name).__doc__ or "").strip().splitlines()
        lines.append(_line(name, plugins.MODES, doc[0] if doc else ""))
    broken = plugins.broken()
    if broken:
        lines.append("plugins left out (they failed to load):")
        lines += [f"  {b.name:<20} [{b.origin}] {b.group}: {b.error}" for b in broken]
    return lines
