"""The tool markers (``horovod``, ``mpi``, ``images``): skipped, with the reason, where absent."""

from __future__ import annotations

import pytest

from tests import conftest


class Item:
    """As much of a collected test as the hook reads: its markers, and the ones it adds."""

    def __init__(self, *markers: str):
        self.markers = set(markers)
        self.added = []

    def get_closest_marker(self, name):
        return name if name in self.markers else None

    def add_marker(self, marker):
        self.added.append(marker)


def test_a_tool_is_looked_for_in_the_venv_then_on_path(tmp_path, monkeypatch):
    monkeypatch.setattr(conftest, "VENV_BIN", tmp_path / "venv")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert conftest._missing("mpirun", "buildah") == "needs mpirun and buildah: not found"
    for folder in ("venv", "bin"):
        (tmp_path / folder).mkdir()
        tool = tmp_path / folder / ("mpirun" if folder == "venv" else "buildah")
        tool.write_text("#!/bin/sh\n")
        tool.chmod(0o755)
    assert conftest._missing("mpirun", "buildah") is None


def test_a_marked_test_is_skipped_with_its_reason_only_where_its_tool_is_missing(monkeypatch):
    monkeypatch.setattr(
        conftest, "TOOL_MARKERS", {"horovod": lambda: None, "mpi": lambda: "needs mpirun"}
    )
    plain, horovod, mpi = Item(), Item("horovod"), Item("horovod", "mpi")
    conftest.pytest_collection_modifyitems(None, [plain, horovod, mpi])
    assert plain.added == [] and horovod.added == []
    [skip] = mpi.added
    assert skip.name == "skip" and skip.kwargs["reason"] == "[mpi] needs mpirun"


def test_the_markers_are_declared_for_pytest(pytestconfig):
    declared = {line.split(":")[0] for line in pytestconfig.getini("markers")}
    assert set(conftest.TOOL_MARKERS) <= declared


@pytest.mark.parametrize("marker", sorted(conftest.TOOL_MARKERS))
def test_this_machines_check_gives_a_reason_or_none(marker):
    reason = conftest.TOOL_MARKERS[marker]()
    assert reason is None or (reason.startswith("needs ") and len(reason) > len("needs "))
