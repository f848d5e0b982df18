"""The tfrecord pipeline: your TFRecords and features.json, checked, split, trained in each mode.

Run it locally with ``distrain run tfrecord --data DIR``.
"""

from distrain.datasets import PipelineDefaults

DEFAULTS = PipelineDefaults(
    dataset="tfrecord",
    description="Your TFRecords: Beam checks every tf.train.Example against features.json, "
    "holds out validation, trains in each distributed mode, evaluates and compares.",
    model="feature-mlp",
    epochs=20,  # the most: runs stop on a validation plateau
    batch_size=64,
    learning_rate=0.003,
    target_accuracy=0.9,
)
