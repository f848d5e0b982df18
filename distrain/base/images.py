"""Container images of the pipeline steps, named in one place.

A compiled pipeline names these images. The registry prefix comes from
``DISTRAIN_IMAGE_REGISTRY`` (default ``distrain``) and the tag is the package
version, so images and code move together. ``images/`` holds their Dockerfiles.
"""

from __future__ import annotations

import os

from distrain import __version__


def image(kind: str) -> str:
    """The image reference for a kind of step (``beam``, ``trainer``, ``trainer-gpu``)."""
    if kind not in ("beam", "trainer", "trainer-gpu"):
        raise ValueError(f"unknown image kind {kind!r}")
    registry = os.environ.get("DISTRAIN_IMAGE_REGISTRY", "distrain").rstrip("/")
    return f"{registry}/{kind}:{__version__}"


BEAM_IMAGE = image("beam")
TRAINER_IMAGE = image("trainer")
