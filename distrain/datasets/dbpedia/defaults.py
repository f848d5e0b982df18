"""The DBPedia-14 pipeline: 14-class text classification with a fastText-style model.

Compile it with ``distrain compile dbpedia --output dbpedia.yaml`` or ``kfp dsl compile --py
pipelines/dataset_pipelines.py --function dbpedia_pipeline --output dbpedia.yaml``;
run it locally with ``distrain run dbpedia``.
"""

from distrain.datasets import PipelineDefaults

DEFAULTS = PipelineDefaults(
    dataset="dbpedia",
    description="DBPedia-14: Beam CSV parsing with dead letters, a training-split n-gram "
    "vocabulary, a fastText-style classifier in each distributed mode, evaluation against the "
    "majority class and a side-by-side comparison.",
    model="fasttext",
    epochs=20,  # the most: runs stop on a validation plateau
    batch_size=512,
    learning_rate=0.04,
    target_accuracy=0.9,
)
