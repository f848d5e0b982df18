"""The pipeline of every registered data set, as ``<name>_pipeline`` (the cluster form).

What ``kfp dsl compile --py pipelines/dataset_pipelines.py --function <name>_pipeline``
compiles; ``distrain compile <name>`` builds the same pipeline with its options. A data
set's defaults are its own (its package's ``pipeline.py``).
"""

from distrain import datasets
from distrain.pipelines.common import build_pipeline

PIPELINES = {name: build_pipeline(datasets.get(name).pipeline) for name in datasets.names()}
globals().update({f"{name}_pipeline": pipeline for name, pipeline in PIPELINES.items()})
