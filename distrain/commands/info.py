"""The commands that tell what is there: ``list`` and ``faults``.

``list`` names what is installed, and whence; ``faults`` runs the reliability matrix's tests.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from distrain.commands import AddParser
from distrain.listing import installed


def add_list(add: AddParser) -> None:
    """``distrain list``'s parser."""
    ls = add(
        "list", help="list the data sets, models and modes installed, and where each came from"
    )
    ls.set_defaults(func=cmd_list)


def cmd_list(args: argparse.Namespace) -> int:
    """``distrain list``: the data sets (with their models) and modes, and where each came from."""
    print("\n".join(installed()))
    return 0


def add_faults(add: AddParser) -> None:
    """``distrain faults``'s flags."""
    fl = add(
        "faults",
        help="run the bad-input and fault tests; print the reliability matrix, a line per case",
    )
    fl.add_argument("--root", help="repository checkout (default: this package's)")
    fl.add_argument("--quick", action="store_true", help="leave out the slow (minutes) cases")
    fl.set_defaults(func=cmd_faults)


def cmd_faults(args: argparse.Namespace) -> int:
    """``distrain faults``: run the reliability matrix's tests and print the matrix."""
    from distrain.faults import run_matrix

    root = Path(args.root).resolve() if args.root else Path(__file__).resolve().parents[2]
    return run_matrix(root, quick=args.quick)
