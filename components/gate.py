"""KFP component: the quality gate on the comparison. Interface only: logic in base/gate."""

from kfp import dsl
from kfp.dsl import Artifact, Input, Markdown, Metrics, Output

from distrain.base.images import TRAINER_IMAGE


@dsl.component(base_image=TRAINER_IMAGE, install_kfp_package=False)
def quality_gate(
    comparison: Input[Artifact], verdict: Output[Markdown], checks: Output[Metrics], gate: str = ""
):
    """Fails the run when the comparison does not meet ``gate`` (empty: always passes).

    ``verdict`` shows each condition per run in the UI; ``checks`` counts them. The failure
    message (what ``distrain submit`` prints) lists every failed condition.
    """
    import json

    from distrain.base.gate import GateFailed, check_gate
    from distrain.preprocess.failures import step_errors

    with step_errors("quality gate"):
        with open(f"{comparison.path}/comparison.json") as f:
            data = json.load(f)
        try:
            results = check_gate(data, gate)
            failure = ""
        except GateFailed as err:
            results, failure = [], str(err)
    lines = [f"# Quality gate: `{gate or 'none'}`", ""]
    if failure:
        lines.append(f"**FAILED**: {failure}")
    else:
        lines += ["| run | condition | value | |", "|---|---|---|---|"]
        lines += [f"| {r['run']} | `{r['condition']}` | {r['value']:.4g} | pass |" for r in results]
        lines += ["", "**PASSED**" if gate else "No gate was set."]
    with open(verdict.path, "w") as f:
        f.write("\n".join(lines) + "\n")
    checks.log_metric("conditions_checked", len(results))
    checks.log_metric("passed", 0 if failure else 1)
    print("\n".join(lines), flush=True)
    if failure:
        with step_errors("quality gate"):
            raise GateFailed(failure)
