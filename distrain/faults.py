"""The reliability matrix: every kind of bad input and fault distrain must survive.

Each case is proved by one or more tests marked ``@pytest.mark.case("ID", ...)``. This
module is also a pytest plugin: when loaded (``tests/conftest.py`` does), a test run ends
with the matrix, one line per case with the outcome of the tests behind it.
``distrain faults`` runs just those tests and exits non-zero unless every case passes.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from distrain import datasets

# (id, what is checked). Ids group by area: the text before the first "/". Each data set's
# own cases come first, as it declares them (``DataSet.fault_cases``).
CASES: list[tuple[str, str]] = [
    *(case for name in datasets.names() for case in datasets.get(name).fault_cases),
    ("integrity/shard-names", "Shards: names that differ in punctuation never overwrite"),
    ("integrity/csv-recovery", "CSV: a stray quote costs its lines, parsing resumes at a row"),
    ("integrity/output-folder", "Outputs: a used --output refused, or replaced whole"),
    ("integrity/one-writer", "Outputs: a second job for one output fails, naming the first"),
    ("integrity/stale-temp", "Outputs: a killed job's temporary folder removed on the next run"),
    ("integrity/file-list", "Data: files differing from metadata's list refused, named"),
    ("integrity/idx-sizes", "IDX: impossible header sizes a permanent error naming the file"),
    ("integrity/metadata-last", "Outputs: no metadata.json unless every check passed"),
    ("integrity/checkpoint-state", "Checkpoints: a garbled state file rebuilt from the files"),
    (
        "integrity/checkpoint-fingerprint",
        "Checkpoints: another model's or settings' checkpoint refused; --restart",
    ),
    ("integrity/errors", "Errors: permanent and transient causes told apart, case by case"),
    ("integrity/stalls", "A stopped (SIGSTOP) parameter server ends the run within a bound"),
    ("integrity/non-finite", "TFRecords: a NaN or inf float dead-lettered, file/record/feature"),
    ("integrity/label-bound", "TFRecords: a label past max_label or int32 dead-lettered, named"),
    ("download/sha256", "Download: digest mismatch refused, partial file removed"),
    ("download/unsafe-members", "Download: absolute, '..' and outside-link members refused"),
    ("download/interrupted", "Download: an interrupted download resumes or restarts"),
    ("download/archive-limits", "Download: an archive past its size or member limit refused"),
    ("download/deadline", "Download: a download past its overall deadline ended, named"),
    ("params/mode", "Parameters: unknown mode refused before any work"),
    ("params/workers", "Parameters: zero or negative workers refused"),
    ("params/aggregate", "Parameters: syncreplicas aggregate > replicas refused"),
    ("params/data-dir", "Parameters: missing data directory refused before any work"),
    ("params/tune", "Parameters: a bad --tune range, grid or eta refused before any work"),
    ("usermodel/exit", "User model: sys.exit/os._exit in its code exits 2, naming file:line"),
    ("usermodel/error-permanent", "User model: an error through its code is permanent, named"),
    ("usermodel/batch-norm-pipeline", "User model: batch norm refused by pipeline, layer named"),
    ("usermodel/split-refused", "User model: one a split mode cannot cut refused, layer named"),
    (
        "usermodel/choices-refused",
        "User model: a loss/optimizer/class weights a mode cannot honour: one line, exit 2",
    ),
    ("train/no-result", "A process or step that exited 0 with no result fails, named"),
    ("train/checkpoints", "Training: chief checkpoints every k steps, atomically"),
    ("train/kill-resume", "Training: whole run killed mid-epoch resumes, same total steps"),
    ("train/deadline", "Training: a local run has a deadline by default and ends at it"),
    ("train/resume-exact", "Training: killed mid-epoch or mid-save, ends with unbroken weights"),
    ("train/non-finite-loss", "Training: a NaN/inf loss stops every mode at its step, exit 2"),
    ("train/watch-fails", "Training: a failing status report or event file is told, run goes on"),
    ("sync/elastic", "sync: elastic Horovod survives 1 of 3 workers killed"),
    ("sync/rank-death", "sync: a killed rank ends the run with an error within seconds"),
    ("sync/stall", "sync: a stopped (SIGSTOP) rank ends the run within the bound, named"),
    ("sync/elastic-bounds", "elastic sync: losing rank 0 or the minimum ends in bounded time"),
    ("async/worker-death", "async: a killed worker, training continues and completes"),
    ("async/stall", "async: a stalled worker does not stall training"),
    ("async/ps-death", "async: a killed PS fails the run clearly; the rerun resumes"),
    ("syncreplicas/stall", "syncreplicas: a stalled worker does not stall training"),
    ("syncreplicas/worker-death", "syncreplicas: a dead worker does not stall training"),
    ("ssp/bound", "ssp: a slowed worker holds the others within the staleness bound"),
    ("ssp/worker-death", "ssp: a dead worker is left out of the bound; training completes"),
    ("easgd/worker-death", "easgd: a dead worker, the others go on exchanging; completes"),
    ("avg/rank-death", "avg: a killed rank ends the run with an error; the rerun resumes"),
    ("train/no-orphans", "No orphaned processes after any fault, or a killed launcher"),
    ("kfp/retries", "KFP: data and training steps retry with backoff"),
    ("kfp/permanent", "KFP: bad input fails its step once, unretried, in one line"),
    ("kfp/transient", "KFP: a worker killed mid-run: the step is retried, the run succeeds"),
    ("kfp/caching", "KFP: caching keyed on inputs, so a rerun reuses finished steps"),
    ("k8s/network-policy", "Cluster: no pod reaches a step or run pod; runs reach only DNS"),
    ("k8s/stall", "Cluster: a stopped rank ends the run within the bound, rank and pod named"),
    ("k8s/request-timeouts", "Kubernetes: every API call (and submit's) has a request timeout"),
    ("serving/refused", "Push: a name or InferenceService KServe refuses, refused before copying"),
    ("serving/versions", "Push: each push a new version folder, renamed into place whole"),
    ("serving/python-op", "Export: a model calling Python (tf.numpy_function) refused, named"),
]
CASE_IDS = {case for case, _ in CASES}

_results: dict[str, dict[str, str]] = {}  # case -> {test node id: outcome}
_node_cases: dict[str, tuple[str, ...]] = {}


def pytest_addoption(parser):
    """Adds ``--fault-matrix`` (fail unless every case passes)."""
    parser.addoption(
        "--fault-matrix",
        action="store_true",
        help="fail the session unless every case of distrain's reliability matrix passed",
    )


def pytest_configure(config):
    """Registers the ``case`` marker."""
    config.addinivalue_line("markers", "case(*ids): reliability-matrix cases the test proves")


def pytest_collection_modifyitems(session, config, items):
    """Notes each test's cases; an unknown case id is an error."""
    for item in items:
        ids = tuple(i for mark in item.iter_markers("case") for i in mark.args)
        unknown = sorted(set(ids) - CASE_IDS)
        if unknown:
            raise ValueError(f"{item.nodeid}: unknown matrix case(s) {unknown}")
        if ids:
            _node_cases[item.nodeid] = ids


def pytest_runtest_logreport(report):
    """Records a case test's outcome (a failure in any phase fails it)."""
    cases = _node_cases.get(report.nodeid)
    if not cases:
        return
    for case in cases:
        outcomes = _results.setdefault(case, {})
        previous = outcomes.get(report.nodeid, "passed")
        if report.failed:
            outcomes[report.nodeid] = "failed"
        elif report.skipped:
            outcomes[report.nodeid] = "skipped" if previous != "failed" else previous
        elif report.when == "call" and previous != "failed":
            outcomes[report.nodeid] = "passed"


def case_status(case: str) -> tuple[str, int]:
    """(PASS | FAIL | SKIP | not run, number of tests) of one case after a session."""
    outcomes = _results.get(case, {})
    if not outcomes:
        return "not run", 0
    values = set(outcomes.values())
    if "failed" in values:
        return "FAIL", len(outcomes)
    if values == {"passed"}:
        return "PASS", len(outcomes)
    return "SKIP", len(outcomes)


def matrix_lines() -> list[str]:
    """The matrix, one line per case."""
    lines = []
    for case, text in CASES:
        status, tests = case_status(case)
        lines.append(f"{status:<8} {case:<28} {text}  [{tests} test{'s' * (tests != 1)}]")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    """Prints the matrix when any case test ran."""
    if not _results:
        return
    terminalreporter.section("distrain reliability matrix")
    for line in matrix_lines():
        terminalreporter.write_line(line)
    passed = sum(case_status(c)[0] == "PASS" for c, _ in CASES)
    terminalreporter.write_line(f"{passed} of {len(CASES)} cases pass")


def pytest_sessionfinish(session, exitstatus):
    """With ``--fault-matrix``: the session fails unless every case passed."""
    if session.config.getoption("--fault-matrix", default=False):
        if any(case_status(c)[0] != "PASS" for c, _ in CASES):
            session.exitstatus = 1


def run_matrix(root: Path, quick: bool = False) -> int:
    """Runs the tests behind the matrix (``pytest -m case``) and returns their exit code.

    Args:
        root: The repository (its ``tests/`` folder holds the tests).
        quick: Leave out the slow cases (multi-process runs); the cases left out show as
            ``not run`` and only the others must pass.
    """
    tests = root / "tests"
    if not tests.is_dir():
        raise FileNotFoundError(
            f"{tests}: not found; the matrix runs the repository's tests (run from a checkout)"
        )
    cmd = [sys.executable, "-m", "pytest", str(tests), "-q", "-p", "distrain.faults"]
    cmd += ["-m", "case and not slow"] if quick else ["-m", "case", "--fault-matrix"]
    return subprocess.call(cmd, cwd=root)
