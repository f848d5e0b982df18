"""KFP component: fan in every run's report and compare them. Interface only."""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Input, Markdown, Metrics, Output

from distrain.base.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def compare(
    reports: Input[list[Artifact]],
    baseline: Input[Artifact],
    comparison: Output[Artifact],
    table: Output[Markdown],
    page: Output[HTML],
    metrics: Output[Metrics],
    target_accuracy: float = 0.95,
    plan: str = "",
    tuning: Input[Artifact] = None,
):
    """Side-by-side table and plots of all runs and the baseline: time, throughput, accuracy.

    ``comparison`` is a directory holding ``comparison.json``, ``.md`` and ``.html``;
    ``table`` and ``page`` show the same in the KFP UI; ``metrics`` holds each run's
    headline numbers and their 95 % bounds under stable keys (``RUN/accuracy``,
    ``RUN/time_to_target_seconds_low``, ...) for KFP's run-compare page. ``plan``
    (``workers=16,gpus_per_worker=1,link_gbps=25``) adds the cost model's recommendation
    at that scale. ``tuning`` (a learning-rate search's records, JSON by run name) puts
    each run's search, its cost and the time to a tuned model into its row.
    """
    import json
    import shutil

    from distrain.analysis.compare import headline_metrics, render_text_table
    from distrain.steps import compare as step

    runs = []
    for artifact in reports:
        with open(artifact.path) as f:
            runs.append(json.load(f))
    with open(baseline.path) as f:
        runs.append(json.load(f))
    from distrain.preprocess.failures import step_errors

    searched = None
    if tuning is not None:
        with open(tuning.path) as f:
            searched = json.load(f)
    with step_errors("compare"):
        result = step(
            runs, comparison.path, target_accuracy=target_accuracy, plan=plan, tuning=searched
        )
    shutil.copyfile(f"{comparison.path}/comparison.md", table.path)
    shutil.copyfile(f"{comparison.path}/comparison.html", page.path)
    comparison.metadata["best"] = result["best"]
    verdict = result["verdict"]
    comparison.metadata["verdict"] = verdict["reason"]
    comparison.metadata["winner"] = verdict["winner"] or ""
    for key, value in headline_metrics(result).items():
        metrics.log_metric(key, round(value, 6))
    print(render_text_table(result), flush=True)
