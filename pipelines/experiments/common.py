"""One pipeline shape for every experiment.

For each of the experiment's data sets: fetch data -> preprocess (Beam) -> for each of its
points, in parallel: train -> evaluate -> gather (after the data set before it); then one
report step reads every run and writes the report.
"""

import json

from kfp import dsl

from distrain.analysis.experiments import ExperimentConfig
from distrain.base.images import image
from distrain.components.data import fetch_data, preprocess
from distrain.components.evaluate import evaluate
from distrain.components.experiment import experiment_report, gather
from distrain.components.train import train
from distrain.pipelines.common import _retry


def pipeline_arguments(config: ExperimentConfig) -> dict:
    """The pipeline's parameters that run ``config`` exactly (its points, sources, seed)."""
    # One line: KFP copies a default into a comment at the top of the YAML, line by line.
    args = {"seed": config.seed, "config": json.dumps(config.to_dict())}
    for name in config.datasets():
        source = config.source(name)
        args[f"source_{name}"] = source.source
        args[f"sample_size_{name}"] = source.sample_size
        args[f"points_{name}"] = [p.params() for p in config.points_of(name)]
    return args


def build_experiment_pipeline(config: ExperimentConfig, parallelism: int = 0):
    """The ``@dsl.pipeline`` function of an experiment, its defaults from ``config``.

    Its parameters are, per data set ``D``, ``source_D``, ``sample_size_D`` and
    ``points_D`` (the training runs: model, run spec, epochs, batch, rate, seed), the data
    ``seed``, and ``config``, the experiment's configuration as JSON, which the report step
    reads and checks every run against (:func:`pipeline_arguments` makes all of them from
    one configuration).

    Args:
        config: The experiment at a scale: its data sets and points.
        parallelism: How many training runs may execute at once (0: no limit). Local runs
            use 1 so that runs do not compete for the same cores and their times compare.
    """
    defaults = pipeline_arguments(config)
    names = config.datasets()

    def body(**params):
        gathered = None
        for name in names:
            scored = _dataset_runs(name, params, parallelism)
            reports = dsl.Collected(scored.outputs["report"])
            if gathered is None:
                gathered = gather(reports=reports)
            else:
                gathered = gather(reports=reports, earlier=gathered.outputs["results"])
            gathered.set_display_name(f"gather {name}")
        result = experiment_report(
            results=gathered.outputs["results"], config=params["config"]
        ).set_display_name("report")
        return result.outputs["report"]

    # The parameters depend on the data sets, so the signature is made here: KFP reads a
    # pipeline's parameters from its function's signature.
    import inspect

    common = _parameters(defaults, names)
    keys = list(common)

    def pipeline(*args, **kwargs) -> dsl.Artifact:
        return body(**dict(zip(keys, args, strict=False)), **kwargs)

    pipeline.__signature__ = inspect.Signature(
        [
            inspect.Parameter(k, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=v, annotation=t)
            for k, (t, v) in common.items()
        ],
        return_annotation=dsl.Artifact,
    )
    pipeline.__annotations__ = {k: t for k, (t, _) in common.items()} | {"return": dsl.Artifact}
    pipeline.__name__ = f"experiment_{config.experiment}"
    pipeline.__doc__ = (
        f"Experiment {config.experiment} ({config.scale} scale): its runs and one report. "
        "Returns the report directory."
    )
    return dsl.pipeline(name=f"distrain-experiment-{config.experiment}")(pipeline)


def _dataset_runs(name: str, params: dict, parallelism: int):
    """A data set's steps: fetch, preprocess, then each of its points trained and scored.

    Returns:
        The evaluation task of the points' ``ParallelFor`` (its reports, to collect).
    """
    data = fetch_data(
        dataset=name,
        source=params[f"source_{name}"],
        sample_size=params[f"sample_size_{name}"],
        seed=params["seed"],
    ).set_display_name(f"fetch {name}")
    data.set_container_image(params["beam_image"])
    _retry(data)
    prep = preprocess(
        raw=data.outputs["raw"],
        dataset=name,
        seed=params["seed"],
        beam_args=params["beam_args"],
    ).set_display_name(f"preprocess {name} (Beam)")
    prep.set_container_image(params["beam_image"])
    _retry(prep)
    with dsl.ParallelFor(
        params[f"points_{name}"], parallelism=parallelism, name=f"runs-{name}"
    ) as point:
        trained = train(
            examples=prep.outputs["examples"],
            run_spec=point.run,
            model=point.model,
            epochs=point.epochs,
            batch_size=point.batch_size,
            learning_rate=point.learning_rate,
            seed=point.seed,
            threads_per_worker=point.threads,
            launcher=params["launcher"],
            controller=params["controller"],
            worker_image=params["trainer_image"],
            namespace=params["namespace"],
        ).set_display_name(f"train {name}")
        _retry(trained)
        scored = evaluate(
            examples=prep.outputs["examples"], trained=trained.outputs["trained"]
        ).set_display_name(f"evaluate {name}")
    return scored


def _parameters(defaults: dict, names: list[str]) -> dict:
    """The pipeline's parameters, name -> (type, default); ``names``: its data sets."""
    common = {
        "seed": (int, defaults["seed"]),
        "config": (str, defaults["config"]),
        "beam_args": (list, []),
        "beam_image": (str, image("beam")),
        "trainer_image": (str, image("trainer")),
        "launcher": (str, "local"),
        "controller": (str, "auto"),
        "namespace": (str, ""),
    }
    for name in names:
        common[f"source_{name}"] = (str, defaults[f"source_{name}"])
        common[f"sample_size_{name}"] = (int, defaults[f"sample_size_{name}"])
        common[f"points_{name}"] = (list, defaults[f"points_{name}"])
    return common
