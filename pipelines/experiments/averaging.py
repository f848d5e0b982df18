"""Experiment ``averaging`` (seed 002): periodic model averaging of 4 replicas on digits.

Compile it with ``kfp dsl compile --py pipelines/experiments/averaging.py --output a.yaml``
or ``distrain compile averaging --output a.yaml``; run it locally with
``distrain experiment averaging``.
"""

from distrain.analysis.experiments import get
from distrain.pipelines.experiments.common import build_experiment_pipeline

averaging_pipeline = build_experiment_pipeline(get("averaging").config("small"))
