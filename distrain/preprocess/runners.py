"""Which Beam runner a job runs on, and the pipeline it is built in.

Every data set's job builds its pipeline in :func:`job_pipeline`, so the options a user
passes after ``--`` (``distrain data``, ``distrain preprocess``) mean the same for every
data set, and the local default is the same everywhere.
"""

from __future__ import annotations

import contextlib

import apache_beam as beam
from apache_beam.options.pipeline_options import PipelineOptions, StandardOptions

DASK_RUNNER = "apache_beam.runners.dask.dask_runner.DaskRunner"


def pipeline_options(beam_args: list[str] | None) -> PipelineOptions:
    """Beam options from the command line; local runs use the FnApiRunner in memory.

    ``DirectRunner`` (and no runner at all) become the FnApiRunner: in Beam 2.77 the
    DirectRunner first tries to download the Prism runner binary, which fails or stalls on
    machines without that network access, before it falls back to the same FnApiRunner.
    ``DaskRunner`` becomes its full name (Beam 2.77 finds it by that only). Distributed
    runners (Dataflow, Flink, Spark) pass through unchanged. The runner is read the way
    Beam reads it, so ``--runner NAME`` and ``--runner=NAME`` are the same.
    """
    options = PipelineOptions(list(beam_args or []))
    standard = options.view_as(StandardOptions)
    if standard.runner in (None, "DirectRunner"):
        standard.runner = "FnApiRunner"  # in memory: DirectOptions' default running mode
    elif standard.runner == "DaskRunner":
        standard.runner = DASK_RUNNER
    return options


def runner_name(beam_args: list[str] | None) -> str:
    """The short name of the runner a job with these options runs on (for progress lines)."""
    return pipeline_options(beam_args).view_as(StandardOptions).runner.rsplit(".", 1)[-1]


@contextlib.contextmanager
def job_pipeline(beam_args: list[str] | None):
    """A Beam pipeline that runs when its block ends, as ``with beam.Pipeline()`` does.

    Args:
        beam_args: Beam pipeline options (:func:`pipeline_options`).

    Yields:
        The pipeline to build the job in.

    Afterwards the Dask runner's client is closed: the runner leaves it open, and it then
    tries for 30 s to reconnect once its cluster is gone.
    """
    pipeline = beam.Pipeline(options=pipeline_options(beam_args))
    yield pipeline
    result = pipeline.run()
    try:
        result.wait_until_finish()
    finally:
        client = getattr(result, "client", None)
        if client is not None:
            client.close()
