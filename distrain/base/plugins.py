"""Plugins from other packages: the entry points that add data sets, models and modes.

A pip-installed package declares entry points in three groups (``importlib.metadata``, as
pytest plugins and Beam's IO connectors are found)::

    [project.entry-points."distrain.datasets"]
    NAME = "package.module:DataSetSubclass"          # a distrain.datasets.DataSet
    [project.entry-points."distrain.models"]
    NAME = "package.module:MODEL"                    # a distrain.datasets.PluginModel
    [project.entry-points."distrain.modes"]
    NAME = "package.module:ModeSubclass"             # a distrain.train.modes.Mode

The registries (:mod:`distrain.datasets`, :mod:`distrain.train.modes`) load their groups
once, the first time they are asked, through :func:`load`. A plugin that fails to load
(an import error, the wrong kind of object, a name already taken) is left out with one
line on stderr naming its entry point; every other command still works, and ``distrain
list`` shows it with its error. This module knows no registry: it imports nothing of
distrain.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points

DATASETS = "distrain.datasets"
MODELS = "distrain.models"
MODES = "distrain.modes"
GROUPS = (DATASETS, MODELS, MODES)
BUILT_IN = "built-in"


class PluginError(ValueError):
    """An entry point's object is not what its group takes (the message says why)."""


@dataclass(frozen=True)
class Broken:
    """A plugin left out: its group, entry-point name, distribution and error."""

    group: str
    name: str
    origin: str
    error: str


_ORIGINS: dict[tuple[str, str], str] = {}
_BROKEN: list[Broken] = []


def origin_of(entry: EntryPoint) -> str:
    """Where an entry point comes from: ``distribution version`` (else its value)."""
    dist = getattr(entry, "dist", None)
    return f"{dist.name} {dist.version}" if dist is not None else entry.value


def load(group: str, accept: Callable[[str, object, str], None]) -> None:
    """Loads every entry point of ``group``, in name order, and hands each to ``accept``.

    Args:
        group: The entry-point group.
        accept: ``accept(name, loaded object, origin)`` registers it, or raises (any
            exception: the plugin is then reported and left out).
    """
    for entry in sorted(entry_points(group=group), key=lambda e: e.name):
        origin = origin_of(entry)
        try:
            accept(entry.name, entry.load(), origin)
        except Exception as err:  # noqa: BLE001 (a broken plugin must not break distrain)
            broken = Broken(group, entry.name, origin, f"{type(err).__name__}: {err}")
            _BROKEN.append(broken)
            print(
                f"distrain: plugin {entry.name!r} ({group}, from {origin}) left out: "
                f"{broken.error}",
                file=sys.stderr,
            )
        else:
            _ORIGINS[(group, entry.name)] = origin


def origin(group: str, name: str) -> str:
    """Where the data set, model or mode ``name`` of ``group`` came from (else built-in)."""
    return _ORIGINS.get((group, name), BUILT_IN)


def broken(group: str | None = None) -> list[Broken]:
    """The plugins left out so far (of ``group``, or of every group)."""
    return [b for b in _BROKEN if group is None or b.group == group]


def broken_named(group: str, name: str) -> Broken | None:
    """The broken plugin of ``group`` called ``name``, if there is one."""
    return next((b for b in broken(group) if b.name == name), None)
