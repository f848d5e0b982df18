"""KFP component: train one run (mode x workers). Interface only; logic in distrain.steps."""

from kfp import dsl
from kfp.dsl import Dataset, Input, Model, Output

from distrain.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def train(
    examples: Input[Dataset],
    trained: Output[Model],
    run_spec: str = "single:1",
    model: str = "mlp",
    epochs: int = 5,
    batch_size: int = 64,
    learning_rate: float = 0.001,
    seed: int = 0,
):
    """Trains ``run_spec`` (``MODE:WORKERS[:ps=P][:aggregate=A]``) on the examples.

    ``trained`` is a directory: ``model.keras``, ``history.json``, checkpoints.
    """
    from distrain.steps import train as step

    history = step(
        examples.path,
        trained.path,
        run_spec,
        model=model,
        epochs=epochs,
        batch_size=batch_size,
        learning_rate=learning_rate,
        seed=seed,
    )
    trained.metadata.update(
        {
            "run": history["run"]["name"],
            "train_seconds": history["train_seconds"],
            "examples_per_second": history["examples_per_second"],
        }
    )
