"""One pipeline shape for every data set.

fetch data -> preprocess (Beam) -> for each run spec, in parallel: train -> evaluate;
the data set's baseline -> compare (fan-in with ``dsl.Collected``).
"""

from dataclasses import dataclass, field

from kfp import dsl

from distrain.components.baseline import baseline
from distrain.components.compare import compare
from distrain.components.data import fetch_data, preprocess
from distrain.components.evaluate import evaluate
from distrain.components.train import train
from distrain.train.config import DEFAULT_RUNS


@dataclass(frozen=True)
class PipelineDefaults:
    """A data set's pipeline: its name and the defaults of its parameters."""

    dataset: str
    description: str
    model: str
    epochs: int
    batch_size: int
    learning_rate: float
    target_accuracy: float
    runs: list[str] = field(default_factory=lambda: list(DEFAULT_RUNS))
    sample_size: int = 0


def build_pipeline(defaults: PipelineDefaults, parallelism: int = 0):
    """Builds the ``@dsl.pipeline`` function of a data set.

    Args:
        defaults: The data set and its parameter defaults.
        parallelism: How many training runs may execute at once (0: no limit). Local runs
            use 1 so that runs do not compete for the same cores and their times compare.
    """
    d = defaults

    @dsl.pipeline(name=f"distrain-{d.dataset}", description=d.description)
    def pipeline(
        source: str = "sample",
        runs: list[str] = d.runs,
        model: str = d.model,
        epochs: int = d.epochs,
        batch_size: int = d.batch_size,
        learning_rate: float = d.learning_rate,
        seed: int = 0,
        sample_size: int = d.sample_size,
        validation_fraction: float = 0.1,
        target_accuracy: float = d.target_accuracy,
        beam_runner: str = "DirectRunner",
    ) -> dsl.Artifact:
        data = fetch_data(
            dataset=d.dataset, source=source, sample_size=sample_size, seed=seed
        ).set_display_name("fetch data")
        prep = preprocess(
            raw=data.outputs["raw"],
            dataset=d.dataset,
            validation_fraction=validation_fraction,
            seed=seed,
            beam_runner=beam_runner,
        ).set_display_name("preprocess (Beam)")
        base = baseline(examples=prep.outputs["examples"]).set_display_name("baseline")
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
            reports=dsl.Collected(scored.outputs["report"]),
            baseline=base.outputs["report"],
            target_accuracy=target_accuracy,
        ).set_display_name("compare")
        return result.outputs["comparison"]

    pipeline.__doc__ = f"{d.description} Returns the comparison directory."
    return pipeline
