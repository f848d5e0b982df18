"""Experiment ``consistency`` (seed 003): async, bulk-synchronous and SSP, text classes.

Compile it with ``kfp dsl compile --py pipelines/experiments/consistency.py --output c.yaml``
or ``distrain compile consistency --output c.yaml``; run it locally with
``distrain experiment consistency``.
"""

from distrain.analysis.experiments import get
from distrain.pipelines.experiments.common import build_experiment_pipeline

consistency_pipeline = build_experiment_pipeline(get("consistency").config("small"))
