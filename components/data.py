"""KFP components for data: fetch raw files, Beam preprocessing. Interfaces only."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Output

from distrain.base.images import BEAM_IMAGE


@dsl.component(base_image=BEAM_IMAGE, install_kfp_package=False)
def fetch_data(
    raw: Output[Dataset],
    dataset: str,
    source: str = "sample",
    sample_size: int = 0,
    seed: int = 0,
):
    """Raw files of ``dataset`` in ``raw``: the generated sample, a download or a directory."""
    from distrain.preprocess.failures import step_errors
    from distrain.steps import fetch

    with step_errors("fetch data"):
        raw.metadata.update(fetch(dataset, source, raw.path, sample_size=sample_size, seed=seed))


@dsl.component(base_image=BEAM_IMAGE, install_kfp_package=False)
def preprocess(
    raw: Input[Dataset],
    examples: Output[Dataset],
    stats: Output[Metrics],
    dataset: str,
    validation_fraction: float = 0.1,
    seed: int = 0,
    beam_args: list = [],  # noqa: B006 (component parameter default)
):
    """Beam: raw files to TFRecords, metadata.json and dead letters (rejects with reasons).

    ``beam_args`` are Beam pipeline options (``--runner=DataflowRunner --project ...``);
    none: the local runner, in the step's container.
    """
    from distrain.preprocess.failures import step_errors
    from distrain.steps import preprocess as step

    with step_errors("preprocess (Beam)"):
        meta = step(
            dataset,
            raw.path,
            examples.path,
            validation_fraction=validation_fraction,
            seed=seed,
            beam_args=[str(arg) for arg in beam_args],
            overwrite=True,  # the step's own artifact folder: a retried attempt replaces it
        )
    for split, count in meta["splits"].items():
        stats.log_metric(f"{split}_examples", count)
    stats.log_metric("rejected_records", meta["rejected"]["count"])
    examples.metadata.update({"splits": meta["splits"], "dataset": meta["dataset"]})


@dsl.component(base_image=BEAM_IMAGE, install_kfp_package=False)
def check_parameters(
    dataset: str,
    source: str,
    runs: list,
    model: str = "mlp",
    epochs: int = 5,
    batch_size: int = 64,
    learning_rate: float = 0.001,
    validation_fraction: float = 0.1,
    launcher: str = "local",
    controller: str = "auto",
    export: bool = False,
    until_plateau: int = 0,
    repeats: int = 1,
    seed: int = 0,
    plan: str = "",
    model_file: Input[Artifact] = None,
) -> list:
    """Every pipeline parameter, checked before any step does work; all problems at once.

    The training settings (model ... seed) are TrainConfig's PIPELINE_SETTINGS, with its
    types and defaults (tests/test_settings.py holds them to it).

    Returns the trainings to do, ``{"run_spec", "seed"}`` each: every run spec ``repeats``
    times with seeds ``seed``, ``seed + 1``, ...

    ``model_file`` is the user's model file, when ``model`` is ``FILE.py:FUNCTION``: it
    must compile here; the training step builds the model.
    """
    from distrain.preprocess.failures import step_errors
    from distrain.steps import check_parameters as step

    with step_errors("check parameters"):
        checked = step(
            dataset,
            source,
            runs,
            model=model,
            epochs=epochs,
            until_plateau=until_plateau,
            batch_size=batch_size,
            learning_rate=learning_rate,
            validation_fraction=validation_fraction,
            launcher=launcher,
            controller=controller,
            export=export,
            repeats=repeats,
            seed=seed,
            plan=plan,
            model_file=model_file.path if model_file is not None else "",
        )
    return checked["trainings"]
