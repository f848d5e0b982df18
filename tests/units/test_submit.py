"""``distrain submit`` against a local server speaking KFP's v2beta1 REST API, and the gate."""

import io
import subprocess

import pytest

from distrain.base.gate import GateError, GateFailed, check_gate, parse_gate
from distrain.submit import SubmitConfig, SubmitError, parse_params, submit
from tests.conftest import VENV_BIN
from tests.fakes.kfp import FakeKfp

COMPARISON = {
    "best": "sync:2",
    "rows": [
        {"name": "single:1", "mode": "single", "accuracy": 0.975, "train_seconds": 40.0},
        {"name": "sync:2", "mode": "sync", "accuracy": 0.981, "train_seconds": 60.0},
        {"name": "majority", "mode": "baseline", "accuracy": 0.11},
    ],
}


def test_gate_conditions_per_run_and_for_the_best():
    assert len(check_gate(COMPARISON, "accuracy>=0.97")) == 2  # baselines are not gated
    assert check_gate(COMPARISON, "best.accuracy>=0.98")[0]["run"] == "sync:2"
    with pytest.raises(GateFailed, match=r"single:1: accuracy>=0.98 \(got 0.975\)"):
        check_gate(COMPARISON, "accuracy>=0.98")
    with pytest.raises(GateFailed, match="sync:2: train_seconds<50"):
        check_gate(COMPARISON, "best.accuracy>=0.98 and train_seconds<50")
    assert check_gate(COMPARISON, "") == []
    with pytest.raises(GateError, match="no numeric 'bits_per_char'"):
        check_gate(COMPARISON, "bits_per_char<=1.7")
    for bad in ("accuracy=>0.9", "accuracy>=high", "worst.accuracy>0.5", "accuracy"):
        with pytest.raises(GateError, match="expected"):
            parse_gate(bad)


def _submit(fake, **kwargs):
    out = io.StringIO()
    cfg = SubmitConfig(pipeline="mnist", host=fake.url, poll_seconds=0.01, **kwargs)
    code = submit(cfg, out=out)
    return code, out.getvalue()


def test_gate_passes():
    with FakeKfp(COMPARISON) as fake:
        code, out = _submit(fake, gate="accuracy>=0.97", params={"epochs": 2})
    assert code == 0, out
    assert "met the gate 'accuracy>=0.97'" in out
    assert f"{fake.url}/#/runs/details/" in out
    (run,) = fake.runs.values()
    assert run["params"] == {"epochs": 2, "gate": "accuracy>=0.97"}
    # compiled, uploaded (pipeline, then a version), then run under the experiment
    paths = [p for _, p in fake.requests]
    assert paths.index("/apis/v2beta1/pipelines/upload") < paths.index("/apis/v2beta1/runs")
    assert [e.display_name for e in fake.experiments.values()] == ["distrain"]


def test_gate_fails_with_the_reason():
    with FakeKfp(COMPARISON) as fake:
        code, out = _submit(fake, gate="accuracy>=0.98")
    assert code == 1
    assert "GATE FAILED (accuracy>=0.98)" in out and "single:1" in out


def test_a_failed_run_fails_without_blaming_the_gate():
    with FakeKfp(COMPARISON, crash="pod train-xyz: OOMKilled") as fake:
        code, out = _submit(fake, gate="accuracy>=0.5")
    assert code == 1
    assert "GATE FAILED" not in out and "run failed" in out
    # It ends with the step that failed and its own words.
    assert out.strip().splitlines()[-1] == (
        "distrain submit: run failed: step 'train' failed: pod train-xyz: OOMKilled"
    )


def test_an_unreachable_server_ends_with_one_line(cli_env):
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.run(
        [str(VENV_BIN / "distrain"), "submit", "mnist", "--host", f"http://127.0.0.1:{port}"],
        env=cli_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stdout
    last = proc.stdout.strip().splitlines()[-1]
    assert last.startswith("distrain: submit mnist failed: ") and "Connection refused" in last
    assert "Traceback" not in proc.stdout


def test_second_submit_adds_a_version_to_the_same_pipeline():
    with FakeKfp(COMPARISON) as fake:
        assert _submit(fake)[0] == 0
        assert _submit(fake, wait=True)[0] == 0
    assert len(fake.pipelines) == 1 and len(fake.versions) == 3  # upload + 2 versions
    assert len(fake.experiments) == 1


def test_timeout_leaves_the_run_going():
    with FakeKfp(COMPARISON, polls_until_done=10_000) as fake:
        code, out = _submit(fake, wait=True, timeout=0.2)
    assert code == 3 and "the run goes on" in out


def test_bad_arguments_send_nothing():
    with FakeKfp(COMPARISON) as fake:
        for kwargs, match in (
            ({"gate": "accuracy>>1"}, "expected"),
            ({"params": {"epochz": 3}}, "unknown pipeline parameters: epochz"),
            ({"params": {"runs": ["sync:0"]}}, "runs:"),
        ):
            with pytest.raises(SubmitError, match=match):
                _submit(fake, **kwargs)
        assert fake.requests == []
    with pytest.raises(SubmitError, match="KEY=VALUE"):
        parse_params(["epochs"])
    assert parse_params(['runs=["sync:2"]', "model=cnn"]) == {"runs": ["sync:2"], "model": "cnn"}


def test_command_line_exit_codes(cli_env):
    with FakeKfp(COMPARISON) as fake:
        base = [str(VENV_BIN / "distrain"), "submit", "mnist", "--host", fake.url]
        ok = subprocess.run(
            [*base, "--gate", "accuracy>=0.97", "--poll-seconds", "0.01", "--param", "epochs=1"],
            env=cli_env,
            capture_output=True,
            text=True,
        )
        assert ok.returncode == 0, ok.stdout + ok.stderr
        failed = subprocess.run(
            [*base, "--gate", "accuracy>=0.99", "--poll-seconds", "0.01"],
            env=cli_env,
            capture_output=True,
            text=True,
        )
        assert failed.returncode == 1 and "GATE FAILED" in failed.stdout
        bad = subprocess.run(
            [*base, "--gate", "accuracy>>1"], env=cli_env, capture_output=True, text=True
        )
        assert bad.returncode == 2 and "expected" in bad.stderr
