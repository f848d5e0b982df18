"""Experiment ``parallelism`` (seed 004): six models under data, tensor, pipeline and hybrid splits.

Compile it with ``kfp dsl compile --py pipelines/experiments/parallelism.py --output p.yaml``
or ``distrain compile parallelism --output p.yaml``; run it locally with
``distrain experiment parallelism``.
"""

from distrain.analysis.experiments import get
from distrain.pipelines.experiments.common import build_experiment_pipeline

parallelism_pipeline = build_experiment_pipeline(get("parallelism").config("small"))
