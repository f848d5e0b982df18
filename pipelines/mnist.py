"""The MNIST pipeline.

Data -> Beam preprocessing -> one training run per run spec (in parallel) -> evaluation
-> comparison.

Compile it with ``kfp dsl compile --py pipelines/mnist.py --output mnist.yaml`` or
``distrain compile mnist --output mnist.yaml``; run it locally with ``distrain run mnist``.
"""

from kfp import dsl

from distrain.components.compare import compare
from distrain.components.evaluate import evaluate
from distrain.components.mnist import fetch_mnist, preprocess_mnist
from distrain.components.train import train
from distrain.train.config import DEFAULT_RUNS


def build_pipeline(parallelism: int = 0):
    """Builds the MNIST pipeline function.

    Args:
        parallelism: How many training runs may execute at once (0: no limit). Local runs
            use 1 so that runs do not compete for the same cores and their times compare.

    Returns:
        The ``@dsl.pipeline`` function.
    """

    @dsl.pipeline(
        name="distrain-mnist",
        description="MNIST: Beam preprocessing, training in each distributed mode, "
        "evaluation and a side-by-side comparison.",
    )
    def mnist_pipeline(
        source: str = "sample",
        runs: list[str] = DEFAULT_RUNS,  # noqa: B006 (KFP reads the default)
        model: str = "mlp",
        epochs: int = 5,
        batch_size: int = 64,
        learning_rate: float = 0.001,
        seed: int = 0,
        sample_train_size: int = 10000,
        sample_test_size: int = 2000,
        validation_fraction: float = 0.1,
        target_accuracy: float = 0.95,
        beam_runner: str = "DirectRunner",
    ) -> dsl.Artifact:
        """MNIST end to end; returns the comparison directory."""
        data = fetch_mnist(
            source=source,
            sample_train_size=sample_train_size,
            sample_test_size=sample_test_size,
            seed=seed,
        ).set_display_name("fetch data")
        prep = preprocess_mnist(
            raw=data.outputs["raw"],
            validation_fraction=validation_fraction,
            seed=seed,
            beam_runner=beam_runner,
        ).set_display_name("preprocess (Beam)")
        with dsl.ParallelFor(runs, parallelism=parallelism, name="runs") as run_spec:
            trained = train(
                examples=prep.outputs["examples"],
                run_spec=run_spec,
                model=model,
                epochs=epochs,
                batch_size=batch_size,
                learning_rate=learning_rate,
                seed=seed,
            ).set_display_name("train")
            scored = evaluate(
                examples=prep.outputs["examples"], trained=trained.outputs["trained"]
            ).set_display_name("evaluate")
        result = compare(
            reports=dsl.Collected(scored.outputs["report"]), target_accuracy=target_accuracy
        ).set_display_name("compare")
        return result.outputs["comparison"]

    return mnist_pipeline


# What `kfp dsl compile --py pipelines/mnist.py` finds: the cluster form (no parallelism cap).
mnist_pipeline = build_pipeline()
