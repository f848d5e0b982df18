"""Validation of Kubernetes objects before they reach a cluster.

Built-in kinds are checked against the Kubernetes OpenAPI schemas (``kubernetes-validate``,
strict: unknown fields are errors). MPIJobs are checked against the MPI Operator's
v2beta1 API (``schemas/mpijob-v2beta1.json``) and each of their pod templates against
Kubernetes' ``PodTemplateSpec``.
"""

from __future__ import annotations

import json
from importlib import resources

KUBERNETES_VERSION = "1.33"


class ManifestError(ValueError):
    """A Kubernetes object does not match its schema."""


def _name(obj: dict) -> str:
    return f"{obj.get('kind', '?')}/{(obj.get('metadata') or {}).get('name', '?')}"


def _kubernetes(obj: dict, version: str) -> None:
    import kubernetes_validate

    try:
        kubernetes_validate.validate(obj, version, strict=True)
    except kubernetes_validate.ValidationError as err:
        path = ".".join(str(p) for p in err.path)
        raise ManifestError(f"{_name(obj)}: {path}: {err.message}") from err
    except kubernetes_validate.SchemaNotFoundError as err:
        raise ManifestError(f"{_name(obj)}: no schema for {obj.get('apiVersion')}") from err


def mpijob_schema() -> dict:
    """The MPIJob v2beta1 JSON schema shipped with distrain."""
    text = resources.files("distrain.k8s").joinpath("schemas/mpijob-v2beta1.json").read_text()
    return json.loads(text)


def validate_object(obj: dict, version: str = KUBERNETES_VERSION) -> None:
    """Checks one object against its kind's schema.

    Raises:
        ManifestError: The object is invalid; the message names it and the field.
    """
    if obj.get("kind") == "MPIJob":
        import jsonschema

        try:
            jsonschema.validate(obj, mpijob_schema())
        except jsonschema.ValidationError as err:
            path = ".".join(str(p) for p in err.absolute_path)
            raise ManifestError(f"{_name(obj)}: {path}: {err.message}") from err
        for role, spec in obj["spec"]["mpiReplicaSpecs"].items():
            wrapper = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": f"{obj['metadata']['name']}-{role.lower()}"},
                "template": spec["template"],
            }
            try:
                _kubernetes(wrapper, version)
            except ManifestError as err:
                raise ManifestError(f"{_name(obj)} {role} template: {err}") from err
        return
    _kubernetes(obj, version)


def validate_all(objects: list[dict], version: str = KUBERNETES_VERSION) -> int:
    """Validates every object; returns how many were checked."""
    for obj in objects:
        validate_object(obj, version)
    return len(objects)
