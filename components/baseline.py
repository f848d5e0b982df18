"""KFP component: the data set's count-based baseline as a run report. Interface only."""

from kfp import dsl
from kfp.dsl import Artifact, Dataset, Input, Metrics, Output

from distrain.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def baseline(examples: Input[Dataset], report: Output[Artifact], metrics: Output[Metrics]):
    """Majority class (classifiers) or the best Kneser-Ney character n-gram (language models)."""
    import json

    from distrain.failures import step_errors
    from distrain.steps import baseline as step

    with step_errors("baseline"):
        result = step(examples.path)
    for key in ("accuracy", "macro_f1", "bits_per_char", "perplexity"):
        if result["evaluation"].get(key) is not None:
            metrics.log_metric(key, round(float(result["evaluation"][key]), 6))
    with open(report.path, "w") as f:
        json.dump(result, f)
