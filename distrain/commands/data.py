"""The data commands: ``distrain data`` and ``distrain preprocess``.

``data`` writes a data set's sample or fetches its real files; ``preprocess`` runs its Beam
job alone, on any Beam runner.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from distrain.commands import PIPELINES, SAMPLE_HELP, AddParser


def add_data(add: AddParser) -> None:
    """``distrain data``'s flags."""
    data = add("data", help="write sample data or download a data set")
    data.add_argument("dataset", choices=PIPELINES)
    how = data.add_mutually_exclusive_group(required=True)
    how.add_argument("--sample", action="store_true", help="generate the sample")
    how.add_argument("--download", action="store_true", help="download the real data")
    data.add_argument("--output", required=True)
    data.add_argument("--sample-size", type=int, default=0, help=SAMPLE_HELP)
    data.add_argument(
        "--ids", help="ids to download, comma-separated (data sets downloaded by id, e.g. books)"
    )
    data.add_argument("--seed", type=int, default=0)
    data.set_defaults(func=cmd_data)


def cmd_data(args: argparse.Namespace) -> int:
    """``distrain data``: write the sample or download the real data."""
    from distrain.steps import fetch

    source = "sample" if args.sample else "download"
    if args.download and args.ids:  # what to download, for the data sets that ask for ids
        source = f"download:{args.ids}"
    summary = fetch(args.dataset, source, args.output, sample_size=args.sample_size, seed=args.seed)
    print(f"{args.dataset} ({source}) in {args.output}: {', '.join(summary['files'])}")
    return 0


def add_preprocess(add: AddParser) -> None:
    """``distrain preprocess``'s flags; everything after ``--`` goes to Beam."""
    pre = add(
        "preprocess",
        help="run a data set's Beam preprocessing alone, on any Beam runner",
        usage=f"distrain preprocess {{{','.join(PIPELINES)}}} --data RAW --output EXAMPLES "
        "[--overwrite] "
        "[--validation-fraction F] [--seed S] [-- BEAM OPTIONS ...]",
        description="Run the Beam preprocessing job of a data set. Everything after -- "
        "goes to Beam as pipeline options, e.g. -- --runner=DataflowRunner --project P "
        "--region R --temp_location gs://B/tmp, -- --runner=FlinkRunner --flink_master "
        "HOST:PORT, -- --runner=DaskRunner --dask_client_address HOST:PORT or -- "
        "--direct_num_workers=2 (default: the local runner, in memory).",
    )
    pre.__class__ = _BeamOptionsParser  # add_parser makes a plain ArgumentParser
    pre.add_argument("dataset", choices=PIPELINES)
    pre.add_argument("--data", required=True, help="raw data directory")
    pre.add_argument("--output", required=True, help="where examples and metadata go")
    pre.add_argument("--validation-fraction", type=float, default=0.1)
    pre.add_argument("--seed", type=int, default=0, help="seed of the train/validation split")
    pre.add_argument(
        "--overwrite",
        action="store_true",
        help="replace an --output folder that holds files (whole, once the job succeeds); "
        "without it such a folder is refused, never mixed with the new output",
    )
    pre.set_defaults(func=cmd_preprocess)


def cmd_preprocess(args: argparse.Namespace) -> int:
    """``distrain preprocess``: the data set's Beam job alone, with any Beam options."""
    from distrain.steps import preprocess

    if not Path(args.data).is_dir():
        print(f"distrain: data directory {args.data} does not exist", file=sys.stderr)
        return 2
    start = time.perf_counter()
    meta = preprocess(
        args.dataset,
        args.data,
        args.output,
        validation_fraction=args.validation_fraction,
        seed=args.seed,
        beam_args=args.beam_args,
        overwrite=args.overwrite,
    )
    splits = ", ".join(f"{split} {count:,}" for split, count in meta["splits"].items())
    print(
        f"{args.dataset} preprocessed in {time.perf_counter() - start:.1f} s: {splits} examples, "
        f"{meta['rejected']['count']:,} rejected (dead letters in {args.output}/dead_letter); "
        f"metadata in {args.output}/metadata.json"
    )
    return 0


class _BeamOptionsParser(argparse.ArgumentParser):
    """A subcommand's parser that hands everything after the first ``--`` to Beam unparsed.

    argparse alone cannot take a variable list of option-like strings after ``--`` beside
    a positional argument; here they never reach it and land in ``beam_args``.
    """

    def parse_known_args(self, args=None, namespace=None):
        args = list(sys.argv[1:] if args is None else args)
        beam_args = []
        if "--" in args:
            cut = args.index("--")
            args, beam_args = args[:cut], args[cut + 1 :]
        namespace, extras = super().parse_known_args(args, namespace)
        namespace.beam_args = beam_args
        return namespace, extras
