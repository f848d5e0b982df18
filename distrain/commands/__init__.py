"""The ``distrain`` subcommands, grouped in modules by concern.

Each command's ``add_*`` (its flags) sits beside its ``cmd_*`` (what it does);
:mod:`distrain.cli` assembles them into one parser.

This module holds what several commands share: the names they accept, the help naming each
data set's models and sample unit, and the checks they make alike.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from distrain import datasets
from distrain.analysis import experiments

PIPELINES = tuple(datasets.names())
EXPERIMENTS = tuple(experiments.names())

# What adds a subcommand's parser (with the shared --debug), given its name and argparse's
# keyword arguments.
AddParser = Callable[..., argparse.ArgumentParser]


def pipeline_defaults(name: str):
    """The data set's pipeline defaults (``datasets/NAME/pipeline.py``)."""
    return datasets.get(name).pipeline


def models_help() -> str:
    """Each data set's models, its default first."""
    return "; ".join(f"{name}: {', '.join(datasets.get(name).models)}" for name in PIPELINES)


SAMPLE_HELP = "size of a generated sample (0: default): " + ", ".join(
    f"{name}: {datasets.get(name).sample_unit}" for name in PIPELINES
)


def check_repeats(repeats: int) -> None:
    """Refuses a ``--repeats`` out of the steps' range, before any work starts."""
    from distrain.base.errors import ConfigError
    from distrain.steps import MAX_REPEATS

    if not 1 <= repeats <= MAX_REPEATS:
        raise ConfigError(f"--repeats must be between 1 and {MAX_REPEATS}, got {repeats}")
