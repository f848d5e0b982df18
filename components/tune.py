"""KFP components of the learning-rate search: its data, its start, each rung's end.

Interfaces only; the logic is in :mod:`distrain.search` and :mod:`distrain.analysis.tuning`.
"""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from distrain.base.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def search_data(examples: Input[Dataset], view: Output[Dataset]):
    """The preprocessed data without the test split's files: what the candidates read."""
    from distrain.preprocess.failures import step_errors
    from distrain.search import search_view

    with step_errors("search data"):
        view.metadata.update(search_view(examples.path, view.path))


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def tune_start(
    tune: str,
    runs: list,
    grid: int,
    eta: int,
    epochs: int,
    tune_epochs: int,
    seed: int,
    learning_rate: float,
    state: Output[Artifact],
) -> list:
    """The search's state (``state``, JSON) and its first rung's trainings (returned).

    The state travels as an artifact, the trainings as the one output a ``ParallelFor``
    iterates over (kfp.local resolves a loop's items only from a task's single output).

    ``grid`` rates per run spec, halved by ``eta`` at each rung; the last rung trains
    ``tune_epochs`` (0: ``epochs``). ``learning_rate`` is the untuned runs' rate.
    """
    import json

    from distrain.preprocess.failures import step_errors
    from distrain.search import tune_start as step

    with step_errors("tune"):
        started = step(
            tune,
            [str(r) for r in runs],
            grid=grid,
            eta=eta,
            epochs=tune_epochs or epochs,
            seed=seed,
            default_rate=learning_rate,
        )
    with open(state.path, "w") as f:
        json.dump(started, f)
    print(f"tune: rungs {started['rungs']}, grid {started['grid']}", flush=True)
    return started["next"]


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def tune_rung(
    trained: Input[list[Model]],
    earlier: Input[Artifact],
    state: Output[Artifact],
    record: Output[Artifact],
    repeats: int = 1,
) -> list:
    """A rung's candidates scored on validation; the survivors' trainings next (returned).

    ``earlier`` is the state before the rung, ``state`` the state after it. After the last
    rung the trainings returned are the comparison's (every run spec ``repeats`` times at
    its chosen rate) and ``record`` holds each run's search (JSON by run name).
    """
    import json

    from distrain.preprocess.failures import step_errors
    from distrain.search import records
    from distrain.search import tune_rung as step

    with open(earlier.path) as f:
        before = json.load(f)
    with step_errors("tune"):
        moved = step(before, [t.path for t in trained], repeats)
    with open(state.path, "w") as f:
        json.dump(moved, f)
    with open(record.path, "w") as f:
        json.dump(records(moved), f, indent=2)
    for name, searched in records(moved).items():
        scores = {c["learning_rate"]: c["rungs"][-1]["score"] for c in searched["candidates"]}
        print(f"tune {name}: {scores}; chosen {searched['chosen']}", flush=True)
    return moved.get("final") if not moved["next"] else moved["next"]
