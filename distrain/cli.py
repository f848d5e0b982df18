"""The ``distrain`` command line.

distrain data NAME --sample --output DIR     write a learnable sample in the data set's format
distrain data NAME --download --output DIR   fetch the real files (pinned, sha256-checked)
distrain preprocess NAME --data RAW --output EXAMPLES [-- BEAM OPTIONS]   the Beam job alone
distrain compile NAME --output NAME.yaml     compile the KFP pipeline
distrain run NAME [--data DIR] --output OUT  run the pipeline locally (kfp.local)
distrain train --data DIR --output OUT --run sync:2   one training run, no pipeline
distrain experiment consistency --output OUT  a seed paper's study, ending in one report
distrain list                                the data sets, models and modes installed, and whence

Each command's flags and work live in :mod:`distrain.commands`, grouped by concern; this
module assembles the parser and owns how a command ends (:func:`main`).
"""

from __future__ import annotations

import argparse
import sys

import distrain
from distrain.commands import data, info, pipelines, training

# The commands in `distrain --help`'s order: each adds its parser (flags, help, cmd_*).
COMMANDS = (
    data.add_data,
    data.add_preprocess,
    pipelines.add_compile,
    pipelines.add_experiment,
    pipelines.add_run,
    training.add_train,
    training.add_manifests,
    pipelines.add_submit,
    training.add_roles,
    info.add_list,
    info.add_faults,
)


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of every subcommand."""
    parser = argparse.ArgumentParser(prog="distrain", description=__doc__.split("\n\n")[0])
    parser.add_argument("--version", action="version", version=distrain.__version__)
    # --debug before or after the subcommand: a failure prints its traceback too.
    debug = argparse.ArgumentParser(add_help=False)
    debug.add_argument(
        "--debug",
        action="store_true",
        default=argparse.SUPPRESS,
        help="print the traceback of a failure (steps and training processes too)",
    )
    parser.add_argument("--debug", action="store_true", help=debug._actions[0].help)
    sub = parser.add_subparsers(dest="command", required=True)

    def add(name: str, **kwargs) -> argparse.ArgumentParser:
        return sub.add_parser(name, parents=[debug], **kwargs)

    for add_command in COMMANDS:
        add_command(add)
    return parser


def _step_name(args: argparse.Namespace) -> str:
    """What a failure of the command is called in its one line."""
    if args.command == "train":
        return f"train {args.run}"
    if args.command == "experiment":
        return f"experiment {args.name or args.from_file}"
    if args.command in ("data", "run", "compile", "submit"):
        return f"{args.command} {getattr(args, 'dataset', None) or args.pipeline}"
    return args.command


def main(argv: list[str] | None = None) -> int:
    """Entry point of the ``distrain`` console script.

    A failure ends with one line, ``distrain: STEP failed: MESSAGE`` (the traceback
    before it with ``--debug``), and exit code 2 for bad input or parameters, 1 otherwise
    (:mod:`distrain.preprocess.failures`).
    """
    import os

    from distrain.preprocess.failures import DEBUG_ENV, Failure, StepFailed, report

    args = build_parser().parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)
    if getattr(args, "debug", False):
        os.environ[DEBUG_ENV] = "1"  # the steps and training processes inherit it
    try:
        return args.func(args)
    except KeyboardInterrupt:
        print("distrain: interrupted", file=sys.stderr)
        return 130
    except StepFailed as err:
        report(err.failure, err)
        return err.failure.exit_code
    except Exception as err:  # noqa: BLE001 (every failure ends with its one line)
        failure = Failure.of(_step_name(args), err)
        report(failure, err)
        return failure.exit_code


if __name__ == "__main__":
    sys.exit(main())
