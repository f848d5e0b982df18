"""The simulated-network benchmark skips cleanly, saying why, and reports each error."""

from benchmarks import netsim


def test_without_root_or_iproute2_it_says_why_and_measures_nothing(monkeypatch):
    monkeypatch.setattr(netsim.os, "geteuid", lambda: 1000)
    assert netsim.why_not() == "network namespaces need root"
    assert netsim.bench_plan() == {"skipped": "network namespaces need root"}
    monkeypatch.setattr(netsim.shutil, "which", lambda name: None)
    assert netsim.why_not() == "iproute2 (ip, tc) is not installed"
    lines = netsim.render({"skipped": "network namespaces need root"})
    assert lines[-1] == "Not measured here: network namespaces need root."


def test_each_row_reports_the_models_error_against_the_bound():
    row = netsim._row("sync", "sync:2", 100, 12e-6, 0.080, 0.075)
    assert row["error"] == 0.075 / 0.080 - 1
    section = {"bytes": 940_584, "bound": 0.25, "rows": [row, {**row, "error": -0.3}]}
    lines = netsim.render(section)
    assert lines[-2].endswith("| -6% | yes |") and lines[-1].endswith("| -30% | no |")
