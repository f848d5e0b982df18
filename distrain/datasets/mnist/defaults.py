"""The MNIST pipeline: handwritten digits, an MLP (or a small CNN), every training mode.

Compile it with ``distrain compile mnist --output mnist.yaml`` or ``kfp dsl compile --py
pipelines/dataset_pipelines.py --function mnist_pipeline --output mnist.yaml``;
run it locally with ``distrain run mnist``.
"""

from distrain.datasets import PipelineDefaults

DEFAULTS = PipelineDefaults(
    dataset="mnist",
    description="MNIST: Beam preprocessing of IDX files, training in each distributed mode, "
    "evaluation and a side-by-side comparison.",
    model="mlp",
    epochs=30,  # the most: runs stop on a validation plateau
    batch_size=64,
    learning_rate=0.001,
    target_accuracy=0.95,
)
