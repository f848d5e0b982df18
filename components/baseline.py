"""KFP component: the data set's count-based baseline as a run report. Interface only."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Output

from distrain.base.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def baseline(
    examples: Input[Dataset],
    report: Output[Artifact],
    metrics: Output[Metrics],
    model: str = "",
):
    """The count-based baseline of the model's task.

    Majority class (classifiers), the best Kneser-Ney character n-gram (language models;
    over the target lines alone for the encoder-decoder) or the training mean image (the
    autoencoder).
    """
    import json

    from distrain.preprocess.failures import step_errors
    from distrain.steps import baseline as step

    with step_errors("baseline"):
        result = step(examples.path, model)
    keys = ("accuracy", "macro_f1", "bits_per_char", "perplexity", "reconstruction_mse", "psnr")
    for key in keys:
        if result["evaluation"].get(key) is not None:
            metrics.log_metric(key, round(float(result["evaluation"][key]), 6))
    with open(report.path, "w") as f:
        json.dump(result, f)
