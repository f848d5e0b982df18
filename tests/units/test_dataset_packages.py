"""Each data set is one package: its own contract test, and no name of it anywhere else.

Each data set's contract test is ``tests/datasets/NAME/test_contract.py``, beside its other
tests.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

from distrain import datasets
from distrain.analysis.compare import time_to_target
from distrain.datasets.testing import DataSetTestCase
from distrain.learning.tasks import CLASSIFICATION, NEXT_CHARACTER, RECONSTRUCTION, quality_of

ROOT = Path(__file__).resolve().parents[2]
# The package's source outside the data sets' own packages: what ships in the wheel
# (components/ and pipelines/ as distrain.components and distrain.pipelines).
PACKAGE_SOURCE = ("distrain", "components", "pipelines")
# Data sets named after a word generic code uses for something else (the TFRecord files
# every data set writes): how code would name the data set itself.
MENTIONS = {
    "tfrecord": r""""tfrecord"|'tfrecord'|datasets[./]tfrecord\b|\btfrecord_pipeline\b"""
    r"|\btfrecord (data ?set|pipeline|folder)",
}


def _mentions(names: list[str], root: Path = ROOT) -> list[str]:
    """``file:line: text`` of every line naming a data set outside ``distrain/datasets/``."""
    pattern = re.compile("|".join(MENTIONS.get(n, re.escape(n)) for n in names), re.IGNORECASE)
    found = []
    for top in PACKAGE_SOURCE:
        for path in sorted((root / top).rglob("*")):
            rel = path.relative_to(root)
            if not path.is_file() or "__pycache__" in rel.parts or path.suffix == ".pyc":
                continue
            if rel.parts[:2] == ("distrain", "datasets"):
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                if pattern.search(line):
                    found.append(f"{rel}:{number}: {line.strip()}")
    return found


def test_no_data_set_is_named_outside_its_package():
    # Code, comments and docstrings alike: generic code asks the registry.
    names = sorted({*datasets.names(), "mnist", "dbpedia", "gutenberg"})
    assert _mentions(names) == []


def test_the_name_check_finds_a_mention_and_says_where(tmp_path):
    (tmp_path / "distrain" / "datasets").mkdir(parents=True)
    (tmp_path / "distrain" / "datasets" / "mine.py").write_text("NAME = 'Mine'\n")
    (tmp_path / "components").mkdir()
    (tmp_path / "components" / "step.py").write_text('"""Docs."""\n# trains on MINE\n')
    assert _mentions(["mine"], tmp_path) == ["components/step.py:2: # trains on MINE"]


def test_a_data_set_named_after_the_file_format_is_found_by_how_code_names_it(tmp_path):
    (tmp_path / "distrain").mkdir()
    (tmp_path / "distrain" / "io.py").write_text(
        'SUFFIX = ".tfrecord"  # TFRecord files, write_tfrecords\n'
        'if dataset == "tfrecord":\n'
        "    from distrain.datasets.tfrecord import spec\n"
    )
    assert [m.split(":")[1] for m in _mentions(["tfrecord"], tmp_path)] == ["2", "3"]


def test_every_registered_data_set_has_its_contract_test():
    """``tests/datasets/NAME/test_contract.py`` holds a contract test of each data set."""
    tested = set()
    for path in sorted((ROOT / "tests" / "datasets").glob("*/test_contract.py")):
        module = importlib.import_module(f"tests.datasets.{path.parent.name}.test_contract")
        tested |= {
            cls.DATASET
            for cls in vars(module).values()
            if isinstance(cls, type) and issubclass(cls, DataSetTestCase) and cls.DATASET
        }
    assert tested == set(datasets.names())


def test_tasks_declare_their_quality_and_which_way_is_better():
    assert quality_of({"task": CLASSIFICATION.name}) == ("accuracy", False)
    assert quality_of({"task": NEXT_CHARACTER.name}) == ("bits_per_char", True)
    assert quality_of({"task": RECONSTRUCTION.name}) == ("reconstruction_mse", True)
    # A report without its task: the one whose loss-like quality it holds.
    assert quality_of({"accuracy": 0.3, "bits_per_char": 2.0}) == ("bits_per_char", True)
    assert quality_of({"accuracy": 0.9}) == ("accuracy", False)


def test_time_to_target_rises_to_an_accuracy_or_falls_to_a_loss():
    epochs = [
        {"wall_seconds": 10.0, "val_accuracy": 0.5, "bits": 3.0},
        {"wall_seconds": 20.0, "val_accuracy": 0.9, "bits": 2.0},
    ]
    assert time_to_target(epochs, 0.7) == pytest.approx(15.0)
    bits = lambda e: e["bits"]  # noqa: E731
    assert time_to_target(epochs, 2.5, value=bits, lower_is_better=True) == pytest.approx(15.0)
    assert time_to_target(epochs, 3.5, value=bits, lower_is_better=True) == 10.0
    assert time_to_target(epochs, 1.0, value=bits, lower_is_better=True) is None


def test_the_registry_lists_the_data_sets_in_its_order_whichever_was_imported_first():
    """The registry imports its plugins by name; a process that imported one first (a Beam
    job: ``python -m distrain.datasets.NAME.beam``) still lists them in BUILT_IN's order."""
    import subprocess
    import sys

    last = datasets.BUILT_IN[-1]
    code = (
        f"import distrain.datasets.{last}.beam\n"
        "from distrain import datasets\n"
        "print(','.join(datasets.names()))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == ",".join(datasets.BUILT_IN)
    assert datasets.names()[: len(datasets.BUILT_IN)] == list(datasets.BUILT_IN)
