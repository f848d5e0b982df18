"""KFP components of the learning-rate search: its data, its start, each rung's end.

Interfaces only; the logic is in :mod:`distrain.search` and :mod:`distrain.tuning`.
"""

from typing import NamedTuple

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Model, Output

from distrain.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def search_data(examples: Input[Dataset], view: Output[Dataset]):
    """The preprocessed data without the test split's files: what the candidates read."""
    from distrain.failures import step_errors
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
) -> NamedTuple("Start", state=str, trainings=list):
    """The search's state (JSON) and its first rung's trainings.

    ``grid`` rates per run spec, halved by ``eta`` at each rung; the last rung trains
    ``tune_epochs`` (0: ``epochs``). ``learning_rate`` is the untuned runs' rate.
    """
    import json
    from collections import namedtuple

    from distrain.failures import step_errors
    from distrain.search import tune_start as step

    with step_errors("tune"):
        state = step(
            tune,
            [str(r) for r in runs],
            grid=grid,
            eta=eta,
            epochs=tune_epochs or epochs,
            seed=seed,
            default_rate=learning_rate,
        )
    print(f"tune: rungs {state['rungs']}, grid {state['grid']}", flush=True)
    return namedtuple("Start", ["state", "trainings"])(json.dumps(state), state["next"])


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def tune_rung(
    trained: Input[list[Model]],
    state: str,
    record: Output[Artifact],
    repeats: int = 1,
) -> NamedTuple("Rung", state=str, trainings=list):
    """A rung's candidates scored on validation; the survivors' trainings next.

    After the last rung, ``trainings`` are the comparison's (every run spec ``repeats``
    times at its chosen rate) and ``record`` holds each run's search (JSON by run name).
    """
    import json
    from collections import namedtuple

    from distrain.failures import step_errors
    from distrain.search import records
    from distrain.search import tune_rung as step

    with step_errors("tune"):
        moved = step(json.loads(state), [t.path for t in trained], repeats)
    with open(record.path, "w") as f:
        json.dump(records(moved), f, indent=2)
    for name, searched in records(moved).items():
        scores = {c["learning_rate"]: c["rungs"][-1]["score"] for c in searched["candidates"]}
        print(f"tune {name}: {scores}; chosen {searched['chosen']}", flush=True)
    trainings = moved.get("final") if not moved["next"] else moved["next"]
    return namedtuple("Rung", ["state", "trainings"])(json.dumps(moved), trainings)
