"""KFP component: score a trained run on the test split. Interface only."""

from kfp import dsl
from kfp.dsl import Artifact, ClassificationMetrics, Dataset, Input, Metrics, Model, Output

from distrain.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def evaluate(
    examples: Input[Dataset],
    trained: Input[Model],
    metrics: Output[Metrics],
    confusion: Output[ClassificationMetrics],
    report: Output[Artifact],
    split: str = "test",
):
    """Accuracy, per-class and macro precision/recall/F1 and the confusion matrix.

    ``report`` (JSON: run, history, evaluation) is what the comparison step fans in.
    """
    import json

    from distrain.steps import evaluate as step

    result = step(examples.path, trained.path, split)
    ev = result["evaluation"]
    for key in ("accuracy", "macro_precision", "macro_recall", "macro_f1"):
        metrics.log_metric(key, round(float(ev[key]), 6))
    metrics.log_metric("train_seconds", round(result["history"]["train_seconds"], 3))
    metrics.log_metric("examples_per_second", round(result["history"]["examples_per_second"], 1))
    confusion.log_confusion_matrix(ev["class_names"], ev["confusion_matrix"])
    with open(report.path, "w") as f:
        json.dump(result, f)
    report.metadata["run"] = result["run"]["name"]
