"""The images built from their Dockerfiles here, then smoke-tested inside (a tier of its own).

``scripts/build_images.sh --local`` builds the three images with buildah on a Debian base
made from Debian's archive; ``scripts/test_images.sh`` runs each image's checks as its own
user through its own entrypoint. ``scripts/test.sh`` installs buildah and mmdebstrap where
they are missing and it may (root, apt); without them this tier is skipped, by name.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import ROOT, VENV_BIN

pytestmark = [pytest.mark.slow, pytest.mark.images]
MISSING = [tool for tool in ("buildah", "mmdebstrap") if not shutil.which(tool)]


def _script(*args: str, timeout: int) -> subprocess.CompletedProcess:
    env = dict(os.environ, PATH=f"{VENV_BIN}{os.pathsep}{os.environ.get('PATH', '')}")
    return subprocess.run(
        ["bash", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def built() -> None:
    if MISSING:
        pytest.skip(f"needs {' and '.join(MISSING)} (apt-get install buildah mmdebstrap)")
    done = _script("scripts/build_images.sh", "--local", timeout=3600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def _containers() -> set[str]:
    listed = subprocess.run(
        ["buildah", "containers", "--quiet"], capture_output=True, text=True, check=True
    )
    return set(listed.stdout.split())


@pytest.mark.parametrize("kind", ["beam", "trainer", "trainer-gpu"])
def test_image_smoke(built, kind):
    before = _containers()
    done = _script("scripts/test_images.sh", kind, timeout=1800)
    print(done.stdout)
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert ", 0 failed" in done.stdout.splitlines()[-1]
    # Its working containers are removed: each would keep its image, gigabytes, after the
    # image is rebuilt.
    assert _containers() <= before
