"""KFP components of the MNIST pipeline: interfaces only; the logic is in distrain.steps."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Metrics, Output

from distrain.images import BEAM_IMAGE


@dsl.component(base_image=BEAM_IMAGE, install_kfp_package=False)
def fetch_mnist(
    raw: Output[Dataset],
    source: str = "sample",
    sample_train_size: int = 10000,
    sample_test_size: int = 2000,
    seed: int = 0,
):
    """Puts the MNIST IDX files in ``raw``: a generated sample, a download or a directory."""
    from distrain.steps import fetch_mnist as step

    summary = step(
        source,
        raw.path,
        sample_train_size=sample_train_size,
        sample_test_size=sample_test_size,
        seed=seed,
    )
    raw.metadata.update(summary)


@dsl.component(base_image=BEAM_IMAGE, install_kfp_package=False)
def preprocess_mnist(
    raw: Input[Dataset],
    examples: Output[Dataset],
    stats: Output[Metrics],
    validation_fraction: float = 0.1,
    seed: int = 0,
    num_shards: int = 2,
    beam_runner: str = "DirectRunner",
):
    """Beam: IDX files to sharded TFRecords of tf.train.Example plus metadata.json."""
    from distrain.steps import preprocess_mnist as step

    meta = step(
        raw.path,
        examples.path,
        validation_fraction=validation_fraction,
        seed=seed,
        num_shards=num_shards,
        beam_args=[f"--runner={beam_runner}"],
    )
    for split, count in meta["splits"].items():
        stats.log_metric(f"{split}_examples", count)
    stats.log_metric("rejected_records", meta["rejected"]["count"])
    examples.metadata.update({"splits": meta["splits"], "dataset": meta["dataset"]})
