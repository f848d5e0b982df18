"""The Project Gutenberg pipeline: a character-level LSTM language model.

Compile it with ``distrain compile gutenberg --output gutenberg.yaml`` or ``kfp dsl compile --py
pipelines/dataset_pipelines.py --function gutenberg_pipeline --output gutenberg.yaml``;
run it locally with ``distrain run gutenberg``.
"""

from distrain.datasets import PipelineDefaults

DEFAULTS = PipelineDefaults(
    dataset="gutenberg",
    description="Project Gutenberg: Beam stripping of headers and licences, character "
    "windows and streams, a character LSTM in each distributed mode, bits per character "
    "over the contiguous validation text against the best Kneser-Ney n-gram, a generated "
    "sample, and a side-by-side comparison.",
    model="lstm",
    epochs=10,
    batch_size=64,
    learning_rate=0.004,
    target_accuracy=0.5,
    runs=["single:1", "sync:2", "async:2:ps=1", "syncreplicas:3:aggregate=2"],
)
