"""A preprocessing job's options and their checks.

:class:`JobOptions` holds the options every job takes (its config dataclass adds its own);
:func:`run_job` owns the command line: it makes each field a flag and hands the rest to
Beam. The checks refuse bad options before the pipeline starts.
"""

from __future__ import annotations

import dataclasses
import json


@dataclasses.dataclass(frozen=True)
class JobOptions:
    """The options every preprocessing job takes; a job's config adds its own after them.

    A job's config is a frozen dataclass with ``kw_only=True``: only the two folders may be
    given by position.

    Attributes:
        input_dir: The raw data's folder.
        output_dir: Where TFRecords, dead letters and metadata go.
        validation_fraction: Share of the training data held out for validation.
        num_shards: TFRecord files per split; 0 (default): one file per unit of work and
            split, written where the unit is encoded, with no shuffle of the records.
        range_mb: Megabytes per unit of work (its memory is bounded by this; object stores
            read few large files far faster than many small ones).
        max_bad_ratio: Largest share of rejected records before the job fails.
        overwrite: Replace an output folder that holds files (else it is refused).
    """

    input_dir: str
    output_dir: str
    # The rest by name only, a job's own fields too: a value given by position would land in
    # whichever field the order puts there.
    _: dataclasses.KW_ONLY
    validation_fraction: float = 0.1
    num_shards: int = 0
    range_mb: float = 32.0
    max_bad_ratio: float = 0.0
    overwrite: bool = False

    # The field that sets a unit of work in records instead of ``range_mb`` (0: by size),
    # for the jobs that have one.
    records_field = ""

    def __post_init__(self) -> None:
        check_fraction("validation_fraction", self.validation_fraction, high_open=True)
        check_fraction("max_bad_ratio", self.max_bad_ratio)
        rows = getattr(self, self.records_field) if self.records_field else 0
        check_sharding(self.num_shards, self.range_mb, rows, self.records_field)


def run_job(config_cls, job, argv: list[str] | None, description: str) -> dict:
    """Command-line entry of a preprocessing job.

    Every field of its config dataclass is an option (``--input-dir``, ``--max-bad-ratio``,
    ...); what is left goes to Beam.
    """
    import argparse

    parser = argparse.ArgumentParser(description=description)
    for f in dataclasses.fields(config_cls):
        flag = "--" + f.name.replace("_", "-")
        if f.default is dataclasses.MISSING:
            parser.add_argument(flag, required=True, dest=f.name)
        elif isinstance(f.default, bool):
            parser.add_argument(flag, action="store_true", default=f.default, dest=f.name)
        else:
            parser.add_argument(flag, type=type(f.default), default=f.default, dest=f.name)
    args, beam_args = parser.parse_known_args(argv)
    metadata = job(config_cls(**vars(args)), beam_args)
    print(json.dumps({"splits": metadata["splits"], "rejected": metadata["rejected"]}))
    return metadata


def check_fraction(name: str, value: float, *, low_open: bool = False, high_open: bool = False):
    """Raises ValueError unless ``value`` lies in [0, 1] (ends open as asked)."""
    low_ok = value > 0.0 if low_open else value >= 0.0
    high_ok = value < 1.0 if high_open else value <= 1.0
    if not (low_ok and high_ok):
        interval = f"{'(' if low_open else '['}0, 1{')' if high_open else ']'}"
        raise ValueError(f"{name} must be in {interval}, got {value}")


def check_sharding(num_shards: int, range_mb: float, rows: int = 0, rows_name: str = "") -> None:
    """ValueError unless ``num_shards`` and ``rows`` (``rows_name``) >= 0, ``range_mb`` > 0.

    ``num_shards`` N: N files per split; 0: a file per range, of ``rows`` records or (0) of
    about ``range_mb`` MB of output.
    """
    bad = [
        f"{name} must be {rule}, got {value}"
        for name, value, rule, ok in (
            ("num_shards", num_shards, ">= 0 (0: a file per range)", num_shards >= 0),
            (rows_name or "rows", rows, ">= 0 (0: ranges by size)", rows >= 0),
            ("range_mb", range_mb, "positive", range_mb > 0),
        )
        if not ok
    ]
    if bad:
        raise ValueError("; ".join(bad))
