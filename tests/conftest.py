"""Shared fixtures: a tiny generated MNIST sample and its preprocessed form, a download server.

The fakes the fixtures and tests share are in ``tests/fakes/``.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from pathlib import Path

import pytest

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tests.fakes.download import Server

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent
# Beam's local runner named (the DirectRunner would fetch Prism first), in memory, and its
# two-process form (the Beam jobs' tests compare one worker's output with two workers').
BEAM_IN_MEMORY = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
BEAM_TWO_WORKERS = [
    "--runner=FnApiRunner",
    "--direct_num_workers=2",
    "--direct_running_mode=multi_processing",
]


def _tool(name: str) -> str | None:
    """``name`` in this virtualenv's bin/ (where scripts/setup.sh puts it), else on PATH."""
    local = VENV_BIN / name
    return str(local) if local.exists() else shutil.which(name)


def _horovod_missing() -> str | None:
    spec = importlib.util.find_spec("horovod")
    if spec is None or not spec.submodule_search_locations:
        return "needs Horovod (scripts/setup.sh builds it): not importable"
    package = Path(next(iter(spec.submodule_search_locations)))
    if not list((package / "tensorflow").glob("mpi_lib*.so")):
        return f"needs Horovod built with TensorFlow: no tensorflow/mpi_lib*.so in {package}"
    if not _tool("horovodrun"):
        return "needs horovodrun (scripts/setup.sh builds Horovod): not found"
    return None


def _missing(*tools: str) -> str | None:
    absent = [tool for tool in tools if not _tool(tool)]
    return f"needs {' and '.join(absent)}: not found" if absent else None


# Marker -> why its tests cannot run here (None: they can). A test marked with one of these
# is skipped, with the reason, where its tool is missing, instead of failing half-way.
TOOL_MARKERS = {
    "horovod": _horovod_missing,
    "mpi": lambda: _missing("mpirun"),
    "images": lambda: _missing("buildah", "mmdebstrap"),
}


def pytest_collection_modifyitems(config, items):
    """Skips the tests whose marked tool (``TOOL_MARKERS``) is missing, saying which."""
    reasons = {}
    for item in items:
        for marker, missing in TOOL_MARKERS.items():
            if item.get_closest_marker(marker) is None:
                continue
            if marker not in reasons:
                reasons[marker] = missing()
            if reasons[marker]:
                item.add_marker(pytest.mark.skip(reason=f"[{marker}] {reasons[marker]}"))


@pytest.fixture(scope="session")
def mnist_raw(tmp_path_factory) -> Path:
    """The four MNIST IDX files of a small generated sample (1,500 train, 300 test)."""
    from distrain.steps import fetch

    out = tmp_path_factory.mktemp("mnist_raw")
    fetch("mnist", "sample", out, sample_size=1500, seed=7)
    return out


@pytest.fixture(scope="session")
def mnist_examples(mnist_raw, tmp_path_factory) -> Path:
    """The sample after Beam preprocessing: TFRecord shards and metadata.json."""
    from distrain.steps import preprocess

    out = tmp_path_factory.mktemp("mnist_examples")
    preprocess("mnist", mnist_raw, out, validation_fraction=0.1, seed=0)
    return out


@pytest.fixture
def cli_env() -> dict:
    """Environment for running the console scripts of this virtualenv."""
    return dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")


@pytest.fixture
def server():
    """A local HTTP server on 127.0.0.1 serving ``tests.fakes.download.PAYLOAD``."""
    s = Server()
    yield s
    s.close()


@pytest.fixture(scope="session")
def zoo_raw(tmp_path_factory) -> Path:
    """The zoo's tiny tfrecord folder, written with ``tf.io.TFRecordWriter`` (tests/zoo)."""
    from tests.zoo.data import write_raw

    return write_raw(tmp_path_factory.mktemp("zoo_raw"))


@pytest.fixture(scope="session")
def zoo_examples(zoo_raw, tmp_path_factory) -> Path:
    """The zoo's folder after the tfrecord job: what the zoo's models train on."""
    from distrain.steps import preprocess

    out = tmp_path_factory.mktemp("zoo_examples") / "out"
    preprocess("tfrecord", zoo_raw, out, validation_fraction=0.1, seed=0)
    return out
