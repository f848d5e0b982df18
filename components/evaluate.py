"""KFP component: score a trained run. Interface only."""

from kfp import dsl
from kfp.dsl import (
    Artifact,
    ClassificationMetrics,
    Dataset,
    Input,
    Markdown,
    Metrics,
    Model,
    Output,
)

from distrain.base.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def evaluate(
    examples: Input[Dataset],
    trained: Input[Model],
    metrics: Output[Metrics],
    confusion: Output[ClassificationMetrics],
    summary: Output[Markdown],
    report: Output[Artifact],
):
    """Classifiers: accuracy, per-class and macro precision/recall/F1, confusion matrix.

    Language models: nats and bits per character, perplexity, next-character accuracy and
    a generated sample. ``report`` (JSON: run, history, evaluation) is what the comparison
    step fans in.
    """
    import json

    from distrain.learning.tasks import markdown
    from distrain.preprocess.failures import step_errors
    from distrain.steps import evaluate as step

    with step_errors("evaluate"):
        result = step(examples.path, trained.path)
    ev = result["evaluation"]
    keys = (
        "accuracy",
        "macro_precision",
        "macro_recall",
        "macro_f1",
        "bits_per_char",
        "nats_per_char",
        "perplexity",
        "reconstruction_mse",
        "psnr",
        "pixel_accuracy",
    )
    for key in keys:
        if ev.get(key) is not None:
            metrics.log_metric(key, round(float(ev[key]), 6))
    metrics.log_metric("train_seconds", round(result["history"]["train_seconds"], 3))
    metrics.log_metric("examples_per_second", round(result["history"]["examples_per_second"], 1))
    # Which repeat this is: its seed (of the initial weights and the data order).
    metrics.log_metric("seed", int((result["history"].get("config") or {}).get("seed", 0)))
    name = result["run"]["name"]
    if "confusion_matrix" in ev:
        confusion.log_confusion_matrix(ev["class_names"], ev["confusion_matrix"])
    text = markdown(ev, f"{name} on {ev['split']}")
    with open(summary.path, "w") as f:
        f.write(text)
    with open(report.path, "w") as f:
        json.dump(result, f)
    report.metadata["run"] = name
