"""Experiment ``scaling`` (seed 000): speedup against workers and model size, beside the cost model.

Compile it with ``kfp dsl compile --py pipelines/experiments/scaling.py --output p.yaml``
or ``distrain compile scaling --output p.yaml``; run it locally with
``distrain experiment scaling``.
"""

from distrain.analysis.experiments import get
from distrain.pipelines.experiments.common import build_experiment_pipeline

scaling_pipeline = build_experiment_pipeline(get("scaling").config("small"))
