"""Which Beam runner a job's options name, in both spellings Beam accepts."""

import pytest
from apache_beam.options.pipeline_options import DirectOptions, StandardOptions

from distrain.preprocess.runners import DASK_RUNNER, pipeline_options, runner_name


@pytest.mark.parametrize(
    ("args", "runner"),
    [
        ([], "FnApiRunner"),
        (["--runner=DirectRunner"], "FnApiRunner"),
        (["--runner", "DirectRunner"], "FnApiRunner"),
        (["--runner=DaskRunner", "--dask_client_address=h:1"], DASK_RUNNER),
        (["--runner", "DaskRunner"], DASK_RUNNER),
        (["--runner", "FlinkRunner", "--flink_master=h:1"], "FlinkRunner"),
        (["--runner=DataflowRunner"], "DataflowRunner"),
    ],
)
def test_the_runner_is_read_as_beam_reads_it(args, runner):
    options = pipeline_options(args)
    assert options.view_as(StandardOptions).runner == runner
    assert runner_name(args) == runner.rsplit(".", 1)[-1]


def test_the_local_runner_runs_in_memory_unless_told_otherwise():
    assert pipeline_options([]).view_as(DirectOptions).direct_running_mode == "in_memory"
    told = pipeline_options(["--direct_running_mode=multi_processing"])
    assert told.view_as(DirectOptions).direct_running_mode == "multi_processing"
    assert told.view_as(StandardOptions).runner == "FnApiRunner"
