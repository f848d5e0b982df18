"""KFP components of the experiment pipelines: gather a data set's results, write the report.

Interfaces only; the logic is in :mod:`distrain.steps`.
"""

from kfp import dsl
from kfp.dsl import HTML, Artifact, Input, Markdown, Output

from distrain.base.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def gather(
    reports: Input[list[Artifact]],
    results: Output[Artifact],
    earlier: Input[Artifact] = None,
):
    """One JSON list of the evaluated runs: ``earlier``'s, then these ``reports``.

    ``earlier`` is another data set's gathered list, so that one report step reads every
    data set's runs.
    """
    import json

    from distrain.preprocess.failures import step_errors
    from distrain.steps import gather_results

    with step_errors("gather results"):
        runs = gather_results(
            [r.path for r in reports], earlier.path if earlier is not None else None
        )
    with open(results.path, "w") as f:
        json.dump(runs, f)
    results.metadata["runs"] = len(runs)


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def experiment_report(
    results: Input[Artifact],
    config: str,
    report: Output[Artifact],
    page: Output[HTML],
    summary: Output[Markdown],
):
    """The experiment's report from its runs and its configuration (JSON).

    ``report`` is a directory of ``report.json``, ``report.md``, ``report.html``,
    ``experiment.json`` and the figures; ``page`` and ``summary`` show the same in the KFP UI.
    """
    import json
    import shutil

    from distrain.preprocess.failures import step_errors
    from distrain.steps import experiment_report as step

    with open(results.path) as f:
        runs = json.load(f)
    with step_errors("report"):
        written = step(config, runs, report.path)
    shutil.copyfile(f"{report.path}/report.html", page.path)
    shutil.copyfile(f"{report.path}/report.md", summary.path)
    report.metadata["experiment"] = written["experiment"]
    for sentence in written["sentences"]:
        print(sentence, flush=True)
