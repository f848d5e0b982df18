"""The GitHub Actions workflows: CI runs ruff and the README's test command on every change."""

import re

import yaml

from tests.conftest import ROOT


def _workflow(name: str) -> dict:
    data = yaml.safe_load((ROOT / ".github" / "workflows" / name).read_text())
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads a bare `on` as true
    return data


def test_ci_runs_ruff_and_the_readme_test_command_on_every_push_and_pull_request():
    ci = _workflow("ci.yml")
    assert set(ci["on"]) == {"push", "pull_request"}
    assert ci["on"]["push"] is None  # every branch, not main alone
    steps = [step for job in ci["jobs"].values() for step in job["steps"]]
    runs = "\n".join(step.get("run", "") for step in steps)
    assert "ruff check ." in runs and "ruff format --check ." in runs
    # The README's test command, as the README gives it.
    readme = (ROOT / "README.md").read_text()
    command = re.search(r"^(\./scripts/test\.sh)\s", readme, re.M).group(1)
    assert re.search(rf"^{re.escape(command)}\b", runs, re.M)
    for job in ci["jobs"].values():
        pythons = [
            s["with"]["python-version"] for s in job["steps"] if "setup-python" in s.get("uses", "")
        ]
        assert pythons == ["3.11"]
    caches = [s["with"] for s in steps if s.get("uses", "").startswith("actions/cache")]
    assert any(c["path"] == "~/.cache/distrain" for c in caches)  # the Horovod wheel
    assert all(
        s["with"].get("cache") == "pip" for s in steps if "setup-python" in s.get("uses", "")
    )
    # The ruff job uses the pinned ruff.
    assert "requirements/dev.txt" in runs
    # Jobs end: the whole suite fits the job's time limit with room (about 11 minutes here).
    assert all(0 < job["timeout-minutes"] <= 120 for job in ci["jobs"].values())


def test_the_cluster_workflow_stays_beside_it():
    kfp = _workflow("kfp-pipeline.yml")
    assert "push" in kfp["on"] and "distrain submit" in str(kfp["jobs"])
