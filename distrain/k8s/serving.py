"""Handing an exported model to a model server: the versioned copy and KServe's InferenceService.

TF Serving (and KServe's TensorFlow runtime, which runs it) serves a *model base path*
holding one numbered folder per version, each a SavedModel (``SERVING_DIR/NAME/1/``,
``SERVING_DIR/NAME/2/``, ...), and serves the highest. :func:`push_version` adds the next
one atomically; :func:`inference_service` renders the ``InferenceService`` whose
``storageUri`` is the base path, checked against KServe's CRD schema
(:func:`distrain.k8s.validate.validate_object`).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

from distrain.base.errors import ConfigError
from distrain.k8s.validate import KSERVE_GROUP_VERSION

# KServe's webhook refuses other names (IsvcNameFmt in inference_service_validation.go).
ISVC_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
# The storageUri schemes KServe's storage initializer reads (SupportedStorageURIPrefixList).
STORAGE_SCHEMES = (
    "gs://",
    "s3://",
    "pvc://",
    "file://",
    "https://",
    "http://",
    "hdfs://",
    "webhdfs://",
    "oci://",
    "hf://",
)


def check_name(name: str) -> None:
    """Refuses a model name KServe would (and that TF Serving's folder could not be).

    Raises:
        ConfigError: Not a lower-case DNS label starting with a letter, or over 63 characters.
    """
    if not ISVC_NAME.match(name or "") or len(name) > 63:
        raise ConfigError(
            f"model name {name!r}: must be lower-case letters, digits and '-', start with a "
            "letter, end with a letter or digit, at most 63 characters (KServe's rule)"
        )


def versions(base: str | os.PathLike) -> list[int]:
    """The version folders under a model base path, in order."""
    base = Path(base)
    if not base.is_dir():
        return []
    return sorted(int(p.name) for p in base.iterdir() if p.is_dir() and p.name.isdigit())


def push_version(model_dir: str | os.PathLike, serving_dir: str | os.PathLike, name: str) -> Path:
    """Copies a SavedModel to ``serving_dir/name/VERSION``, VERSION one above the highest.

    The copy is written into a hidden temporary folder beside and renamed into place, so a
    server polling the base path never sees half a version; two pushes at once get two
    versions.

    Returns:
        The new version's folder.

    Raises:
        ConfigError: The name is not servable, or ``model_dir`` holds no SavedModel.
    """
    check_name(name)
    if not (Path(model_dir) / "saved_model.pb").is_file():
        raise ConfigError(f"{model_dir}: no saved_model.pb (not an exported model)")
    base = Path(serving_dir) / name
    base.mkdir(parents=True, exist_ok=True)
    staged = Path(tempfile.mkdtemp(prefix=".push-", dir=base))
    try:
        shutil.copytree(model_dir, staged / "model")
        while True:
            target = base / str((versions(base) or [0])[-1] + 1)
            try:
                os.rename(staged / "model", target)  # fails if another push took it
                return target
            except OSError:
                if not target.exists():
                    raise
    finally:
        shutil.rmtree(staged, ignore_errors=True)


def storage_uri(base: str | os.PathLike, mount_path: str = "", claim: str = "") -> str:
    """Where KServe reads a model base path from.

    A path under ``mount_path``, where the volume ``claim`` is mounted, is
    ``pvc://CLAIM/PATH-INSIDE``; any other path ``file://PATH`` (a volume the predictor's
    node mounts there).
    """
    path = os.path.abspath(base)
    mount = mount_path.rstrip("/")
    if claim and mount and path.startswith(mount + "/"):
        return f"pvc://{claim}/{path[len(mount) + 1 :]}"
    return f"file://{path}"


def inference_service(
    name: str,
    namespace: str,
    uri: str,
    *,
    annotations: dict | None = None,
    service_account: str = "",
) -> dict:
    """KServe's ``InferenceService`` serving a SavedModel base path with TensorFlow Serving.

    Without ``namespace``, it goes where it is applied (``kubectl apply -n``).

    ``predictor.model`` names the model format ``tensorflow``: KServe picks its TensorFlow
    runtime (``kserve-tensorflow-serving``), whose storage initializer copies ``uri`` to
    ``/mnt/models`` and serves the highest version folder there.

    Raises:
        ConfigError: The name or the storage URI is one KServe refuses.
    """
    check_name(name)
    if not uri.startswith(STORAGE_SCHEMES):
        raise ConfigError(
            f"storage URI {uri!r}: KServe reads only {', '.join(s[:-3] for s in STORAGE_SCHEMES)}"
        )
    predictor: dict = {"model": {"modelFormat": {"name": "tensorflow"}, "storageUri": uri}}
    if service_account:
        predictor["serviceAccountName"] = service_account
    metadata: dict = {"name": name}
    if namespace:  # else the namespace it is applied in
        metadata["namespace"] = namespace
    metadata["labels"] = {
        "app.kubernetes.io/managed-by": "distrain",
        "app.kubernetes.io/name": name,
    }
    if annotations:
        metadata["annotations"] = {str(k): str(v) for k, v in annotations.items()}
    return {
        "apiVersion": KSERVE_GROUP_VERSION,
        "kind": "InferenceService",
        "metadata": metadata,
        "spec": {"predictor": predictor},
    }
