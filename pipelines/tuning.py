"""The learning-rate search inside a data set's pipeline (``tune``): rungs of candidates.

search data (the examples without the test split) and the search's start -> for each
rung: every candidate its own training step inside a ``dsl.ParallelFor`` (``parallelism``
at once) -> the rung's end (``dsl.Collected``), which keeps the best ``1/eta`` of each run
spec's candidates and gives the next rung's trainings, resuming from their checkpoints.
The last rung's end gives the comparison's trainings, each run spec at its chosen rate,
and the search's record. The rungs' count depends on the grid's size and ``eta`` alone
(:func:`distrain.analysis.tuning.rungs`): both are fixed when the pipeline is compiled.
"""

from kfp import dsl

from distrain.analysis import tuning
from distrain.components.train import train
from distrain.components.tune import search_data, tune_rung, tune_start

# The display name of a search's candidate training steps (a compile test looks for them).
CANDIDATE_TASK = "candidate"


def search(
    *,
    examples,
    runs,
    tune,
    tune_epochs,
    epochs,
    seed,
    learning_rate,
    repeats,
    grid: int,
    eta: int,
    parallelism: int,
    train_args: dict,
    prepare,
):
    """Adds the search's steps; returns ``(trainings, record, start task)``.

    Args:
        examples: The preprocessed examples (an artifact channel).
        runs: The pipeline's run specs (a channel, as are the next six).
        tune: The range, ``learning_rate=LOW..HIGH``.
        tune_epochs: The last rung's epochs (0: ``epochs``).
        epochs: The runs' epochs.
        seed: The candidates' seed.
        learning_rate: The untuned rate (the untuned ranking's).
        repeats: Trainings of each run spec at its chosen rate.
        grid: Rates per run spec.
        eta: The halving factor.
        parallelism: Candidates training at once (0: no limit).
        train_args: The training step's arguments shared by every candidate and the
            comparison's runs (model, batch size, launcher, placement ...).
        prepare: What the pipeline does to each training step (retries, no caching,
            placement on a cluster).
    """
    view = search_data(examples=examples).set_display_name("search data (no test split)")
    start = tune_start(
        tune=tune,
        runs=runs,
        grid=grid,
        eta=eta,
        epochs=epochs,
        tune_epochs=tune_epochs,
        seed=seed,
        learning_rate=learning_rate,
    ).set_display_name("tune: start")
    state, trainings = start.outputs["state"], start.outputs["Output"]
    rung = None
    for i in range(len(tuning.rungs(grid, eta, 1))):
        with dsl.ParallelFor(trainings, parallelism=parallelism, name=f"rung-{i}") as candidate:
            trained = train(
                examples=view.outputs["view"],
                run_spec=candidate.run_spec,
                learning_rate=candidate.learning_rate,
                epochs=candidate.epochs,
                schedule_epochs=candidate.schedule_epochs,
                seed=candidate.seed,
                resume_from=candidate.resume_from,
                # A fixed budget per rung, and a diverging rate scores worst instead of
                # failing the search.
                until_plateau=0,
                on_nan="continue",
                **train_args,
            ).set_display_name(f"{CANDIDATE_TASK} (rung {i})")
            prepare(trained)
        rung = tune_rung(
            trained=dsl.Collected(trained.outputs["trained"]), earlier=state, repeats=repeats
        ).set_display_name(f"tune: rung {i}")
        state, trainings = rung.outputs["state"], rung.outputs["Output"]
    return trainings, rung.outputs["record"], start
