"""Shared fixtures: a tiny generated MNIST sample and its preprocessed form, a download server.

The fakes the fixtures and tests share are in ``tests/fakes/``.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from tests.fakes.download import Server

ROOT = Path(__file__).resolve().parents[1]
VENV_BIN = Path(sys.executable).parent


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
