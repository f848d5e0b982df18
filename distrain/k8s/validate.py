"""Validation of Kubernetes objects before they reach a cluster.

Built-in kinds are checked against the Kubernetes OpenAPI schemas (``kubernetes-validate``,
strict: unknown fields are errors). MPIJobs are checked against the MPI Operator's
v2beta1 API (``schemas/mpijob-v2beta1.json``) and each of their pod templates against
Kubernetes' ``PodTemplateSpec``. Kubeflow Trainer's ``TrainJob``, ``ClusterTrainingRuntime``
and ``TrainingRuntime`` (``trainer.kubeflow.org/v1alpha1``) are checked against the
``openAPIV3Schema`` of Trainer v2.3.0's CRDs (``schemas/*-v1alpha1.json``), made strict the
way the API server's ``fieldValidation=Strict`` is (an unknown field is an error, where the
schema does not keep unknown fields), plus the CEL rules on names that JSON Schema cannot
express; a runtime's pod templates are also checked as Kubernetes ``PodTemplateSpec``s.
KServe's ``InferenceService`` (``serving.kserve.io/v1beta1``, :mod:`distrain.k8s.serving`)
is checked the same strict way against the ``openAPIV3Schema`` of KServe v0.20.0's CRD
(``schemas/inferenceservice-v1beta1.json``, trimmed to what distrain renders: its
``$comment`` says what was left out), plus the name rule of KServe's webhook.
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources

from distrain.datasets import is_user_model
from distrain.learning.usermodel import ModelReference

KUBERNETES_VERSION = "1.33"
TRAINER_GROUP_VERSION = "trainer.kubeflow.org/v1alpha1"
# Trainer v2.3's kinds and their vendored schema files.
TRAINER_SCHEMAS = {
    "TrainJob": "trainjob-v1alpha1.json",
    "ClusterTrainingRuntime": "clustertrainingruntime-v1alpha1.json",
    "TrainingRuntime": "trainingruntime-v1alpha1.json",
}
# KServe's kinds and their vendored schema files (trimmed; see the file's $comment).
KSERVE_SCHEMAS = {"InferenceService": "inferenceservice-v1beta1.json"}
KSERVE_GROUP_VERSION = "serving.kserve.io/v1beta1"
# The TrainJob CRD's CEL rules on metadata.name (x-kubernetes-validations).
_RFC1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


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


def _strict(node):
    """The schema with ``additionalProperties: false`` wherever the API server would prune."""
    if isinstance(node, list):
        return [_strict(v) for v in node]
    if not isinstance(node, dict):
        return node
    out = {}
    for key, value in node.items():
        if key == "properties":
            out[key] = {name: _strict(sub) for name, sub in value.items()}
        else:
            out[key] = _strict(value)
    if (
        "properties" in node
        and "additionalProperties" not in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@functools.cache
def trainer_schema(kind: str) -> dict:
    """The strict JSON schema of a Kubeflow Trainer v2.3 or KServe kind (vendored CRDs).

    Raises:
        KeyError: Neither a Trainer nor a KServe kind.
    """
    path = f"schemas/{(TRAINER_SCHEMAS | KSERVE_SCHEMAS)[kind]}"
    return _strict(json.loads(resources.files("distrain.k8s").joinpath(path).read_text()))


def _jsonschema(obj: dict, schema: dict) -> None:
    import jsonschema

    validator = jsonschema.Draft7Validator(schema)
    error = jsonschema.exceptions.best_match(validator.iter_errors(obj))
    if error is not None:
        path = ".".join(str(p) for p in error.absolute_path)
        raise ManifestError(f"{_name(obj)}: {path}: {error.message}")


def _pod_templates(node, where: str):
    """``(path, template)`` of every pod template (a Job's ``spec.template``) under ``node``."""
    if isinstance(node, dict):
        template = node.get("template")
        if isinstance(template, dict) and "containers" in (template.get("spec") or {}):
            yield f"{where}.template", template
        for key, value in node.items():
            yield from _pod_templates(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            label = value.get("name", i) if isinstance(value, dict) else i
            yield from _pod_templates(value, f"{where}[{label}]")


def _trainer_object(obj: dict, version: str) -> None:
    kind = obj["kind"]
    if obj.get("apiVersion") != TRAINER_GROUP_VERSION:
        raise ManifestError(f"{_name(obj)}: apiVersion must be {TRAINER_GROUP_VERSION}")
    _jsonschema(obj, trainer_schema(kind))
    name = (obj.get("metadata") or {}).get("name", "")
    if kind == "TrainJob" and (not _RFC1035_LABEL.match(name) or len(name) > 63):
        raise ManifestError(
            f"{_name(obj)}: metadata.name must be an RFC 1035 DNS label of at most 63 characters"
        )
    if kind != "TrainJob":
        for path, template in _pod_templates(obj.get("spec"), "spec"):
            wrapper = {
                "apiVersion": "v1",
                "kind": "PodTemplate",
                "metadata": {"name": name or "runtime"},
                "template": template,
            }
            try:
                _kubernetes(wrapper, version)
            except ManifestError as err:
                raise ManifestError(f"{_name(obj)} {path}: {err}") from err


def _kserve_object(obj: dict) -> None:
    if obj.get("apiVersion") != KSERVE_GROUP_VERSION:
        raise ManifestError(f"{_name(obj)}: apiVersion must be {KSERVE_GROUP_VERSION}")
    _jsonschema(obj, trainer_schema(obj["kind"]))
    name = (obj.get("metadata") or {}).get("name", "")
    if not _RFC1035_LABEL.match(name) or len(name) > 63:  # KServe's IsvcNameFmt
        raise ManifestError(
            f"{_name(obj)}: metadata.name must be lower-case letters, digits and '-', "
            "start with a letter and end with a letter or digit (KServe's webhook rule)"
        )


def validate_object(obj: dict, version: str = KUBERNETES_VERSION) -> None:
    """Checks one object against its kind's schema.

    Raises:
        ManifestError: The object is invalid; the message names it and the field.
    """
    if obj.get("kind") in TRAINER_SCHEMAS:
        _trainer_object(obj, version)
        return
    if obj.get("kind") in KSERVE_SCHEMAS:
        _kserve_object(obj)
        return
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


def _containers(node, where: str):
    """``(path, container)`` of every container of every pod (template) under ``node``."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "containers" and isinstance(value, list):
                for c in value:
                    if isinstance(c, dict):
                        yield f"{where}.containers[{c.get('name', '?')}]", c
            else:
                yield from _containers(value, f"{where}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _containers(value, f"{where}[{i}]")


def validate_model_shipping(objects: list[dict], model: str) -> None:
    """Checks that every pod of a run can read the user's model.

    The model in the user's code: :mod:`distrain.learning.usermodel`.

    A model file must lie on a volume of every container that mounts the run's volumes
    (the training processes; the shared claim the launcher ships it to); a
    ``package.module:FUNCTION`` model is in the image (built ``FROM`` the trainer), so
    every container must run the run's one image. A built-in model needs neither.

    Raises:
        ManifestError: A container without the file's volume, or with another image.
    """
    if not is_user_model(model):
        return
    ref = ModelReference.parse(model)
    images, readers = set(), 0
    for obj in objects:
        for where, container in _containers(obj.get("spec"), "spec"):
            if not ref.is_file:
                if container.get("image"):
                    images.add(container["image"])
                continue
            volumes = container.get("volumeMounts") or []
            if not volumes:
                continue  # reads nothing of the run (an MPIJob's launcher starts the ranks)
            mounts = [str(m.get("mountPath", "")).rstrip("/") for m in volumes]
            if not any(m and ref.where.startswith(m + "/") for m in mounts):
                raise ManifestError(
                    f"{_name(obj)} {where}: mounts no volume holding the model file {ref.where} "
                    f"(mounts {', '.join(mounts)})"
                )
            readers += 1
    if ref.is_file and not readers:
        raise ManifestError(f"model {model}: no container of the run mounts a volume")
    if len(images) > 1:
        raise ManifestError(
            f"model {model}: a module in the image, but the run's pods run different images "
            f"({', '.join(sorted(images))}); build one image FROM the trainer with it"
        )
