"""Flag groups the command line shares between subcommands: repeats, and the learning-rate search.

``--tune`` (``distrain run``, ``distrain compile``) searches each run spec's learning
rate before the comparison (:mod:`distrain.analysis.tuning`); its flags are checked here before
any work starts, and become the pipeline's build arguments and parameters.
"""

from __future__ import annotations

import argparse

from distrain.analysis import tuning
from distrain.base.errors import ConfigError


def add_repeats(parser: argparse.ArgumentParser) -> None:
    """``--repeats K``."""
    parser.add_argument(
        "--repeats",
        type=int,
        default=1,
        metavar="K",
        help="train each run K times with seeds SEED, SEED+1, ... (weights and data order); "
        "the comparison gives medians and 95 %% intervals and names a winner only where the "
        "intervals separate",
    )


def add_tune(parser: argparse.ArgumentParser) -> None:
    """``--tune RANGE`` and the search's shape: grid, eta, epochs, parallelism."""
    parser.add_argument(
        "--tune",
        metavar="learning_rate=LOW..HIGH",
        default="",
        help="search each run's learning rate first, by successive halving (Hyperband's "
        "rung rule) over a log-spaced grid, scored on the validation split only; the "
        "comparison then trains each run at its chosen rate",
    )
    parser.add_argument(
        "--tune-grid",
        type=int,
        default=tuning.DEFAULT_GRID,
        metavar="N",
        help="rates in the search's grid (default %(default)s)",
    )
    parser.add_argument(
        "--tune-eta",
        type=int,
        default=tuning.DEFAULT_ETA,
        metavar="ETA",
        help="keep the best 1/ETA of a rung's candidates and give them ETA times the epochs "
        "(default %(default)s)",
    )
    parser.add_argument(
        "--tune-epochs",
        type=int,
        default=0,
        metavar="E",
        help="epochs of the search's last rung (default: the runs' epochs)",
    )
    parser.add_argument(
        "--tune-parallelism",
        type=int,
        default=0,
        metavar="P",
        help="candidates of a rung that may train at once (default: no limit in a compiled "
        "pipeline; one at a time in distrain run, where candidates at once share the "
        "machine's cores)",
    )


def tune_settings(args: argparse.Namespace, local: bool = False) -> tuple[dict, dict]:
    """``(build arguments, pipeline parameters)`` of the search flags, checked.

    ``local``: for kfp.local, where a parallelism of 0 trains one candidate at a time.

    Raises:
        ConfigError: A bad range, grid, eta, epochs or parallelism.
    """
    if not args.tune:
        return {}, {}
    tuning.parse(args.tune)
    tuning.check(args.tune_grid, args.tune_eta)
    if args.tune_epochs < 0 or args.tune_parallelism < 0:
        raise ConfigError("--tune-epochs and --tune-parallelism must be 0 or positive")
    build = {
        "tune": args.tune,
        "tune_grid": args.tune_grid,
        "tune_eta": args.tune_eta,
        "tune_parallelism": args.tune_parallelism or (1 if local else 0),
    }
    return build, {"tune": args.tune, "tune_epochs": args.tune_epochs}
