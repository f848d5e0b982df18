"""What a checkpoint was made with: the settings that decide the updates still to come.

A checkpoint stores a *fingerprint* (:meth:`distrain.train.replica.Replica.model_fingerprint`):
what shapes the variables (the data set, the model, every variable's shape) and, under
``settings``, what decides the arithmetic of every update after it, built here
(:func:`settings`): the optimizer and its constants, the learning rate and its scaling, the
schedule (or the user's optimizer's configuration, and the user's loss and class weights),
the batch size, the mode with its workers and options, the precision the model
computes in, the seed (the data order and a language model's resets), the digest of the
data's manifest (:func:`data_digest`) and of the user's model file (:func:`model_file_digest`).
A resume whose settings differ would go on from the old state under other rules, and its
history would record the new ones as if they held from the start; :func:`differences` names
each one, for the refusal.

What does not change the arithmetic stays out, so that a killed run resumes whatever it is
told about them: the epochs to go (a schedule that depends on them, a language model's
anneal, says so itself), where the outputs go, the deadlines and timeouts, checkpoint and
validation cadence, the threads, the controller, logging.
"""

from __future__ import annotations

import hashlib
import importlib.util
import json
from pathlib import Path

from distrain.datasets import is_user_model
from distrain.learning.usermodel import ModelReference

# The fingerprint's key of the settings (a checkpoint without it is of an older distrain).
SETTINGS = "settings"
# Keys of the preprocessing job's config in metadata.json that say where it wrote, not what:
# the same records preprocessed into another folder have the same digest.
_LOCATIONS = ("output_dir", "overwrite")


def _sha256(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()[:16]


def data_digest(metadata: dict) -> str:
    """The digest of what a preprocessed folder's ``metadata.json`` says it holds.

    Its counts, every file of every split with its records and bytes (``shards``), the
    features, the vocabulary, the job's settings: all of it but where the job wrote.
    """
    meta = dict(metadata)
    if isinstance(meta.get("config"), dict):
        meta["config"] = {k: v for k, v in meta["config"].items() if k not in _LOCATIONS}
    return _sha256(json.dumps(meta, sort_keys=True, default=str).encode())


def model_file_digest(model: str) -> str | None:
    """The digest of the file that defines a model of the user's code (None: a built-in).

    ``FILE.py:FUNCTION``: that file; ``package.module:FUNCTION``: the module's source file.
    A file that cannot be found is ``"missing"`` (building the model then fails anyway).
    """
    if not is_user_model(model):
        return None
    ref = ModelReference.parse(model)
    if ref.is_file:
        path = Path(ref.where)
    else:
        try:
            found = importlib.util.find_spec(ref.where)
        except (ImportError, ValueError):
            found = None
        path = Path(found.origin) if found is not None and found.origin else None
    if path is None or not path.is_file():
        return "missing"
    return _sha256(path.read_bytes())


def schedule(stream, epochs: int, linear: bool = False) -> str:
    """The learning rate's schedule, in words that do not depend on the workers' count.

    Args:
        stream: A stream language model's :class:`distrain.learning.lm.StreamTraining`
            (None: every other model).
        epochs: The epochs the schedule spans (``TrainConfig.schedule_span``).
        linear: The optimizer's rate falls linearly to zero over them (SGD's recipe).
    """
    if stream is None:
        return f"linear decay to 0 over {epochs} epochs" if linear else "constant"
    parts = [f"decay {stream.decay_per_epoch:g}/epoch"]
    if stream.anneal:  # a half cosine over the run's epochs: they decide every update's rate
        parts.append(f"cosine anneal over {epochs} epochs")
    parts.append(f"clip {stream.clip_norm:g}")
    return ", ".join(parts)


def settings(cfg, optimizer, precision: str, metadata: dict, stream, choices=None) -> dict:
    """The settings of a run that decide its updates (what a resume must keep).

    Args:
        cfg: The run's :class:`distrain.train.config.TrainConfig` (as given, not a rank's
            variant of it).
        optimizer: The replica's optimizer (:class:`distrain.learning.optim.Adam`, or the
            user's in a :class:`distrain.learning.optim.KerasOptimizer`).
        precision: What the model computes in (:func:`distrain.learning.precision.of_model`).
        metadata: The data's ``metadata.json``, as the model reads it.
        stream: A stream language model's training (:attr:`distrain.datasets.ModelSpec.stream`).
        choices: The user's loss and class weights (:func:`distrain.learning.choices.recorded`):
            recorded when the model file defines them.
    """
    chosen = {k: v for k, v in (choices or {}).items() if k in ("loss", "class_weights")}
    return {
        # distrain's Adam and its constants, or the user's optimizer's configuration.
        "optimizer": optimizer.describe(),
        **chosen,
        "learning_rate": cfg.learning_rate,
        "scale_learning_rate": cfg.scale_learning_rate,
        "schedule": schedule(
            stream, cfg.schedule_span, bool(getattr(optimizer, "linear_updates", 0))
        )
        + (f", warm-up over {cfg.warmup_epochs:g} epochs" if cfg.warmup_epochs else ""),
        "batch_size": cfg.batch_size,
        "run": str(cfg.run),
        "precision": precision,
        "seed": cfg.seed,
        "data": data_digest(metadata),
        "model_file": model_file_digest(cfg.model),
    }


def differences(theirs: dict, ours: dict) -> tuple[list[str], list[str]]:
    """The settings that differ, and those the checkpoint does not record.

    Returns:
        ``NAME OLD → NEW`` (the checkpoint's value, then this run's) for each setting
        that differs, and the names of this run's settings the checkpoint has no value
        for (added to the fingerprint since it was written: not checked).
    """
    changed = [
        f"{name} {_shown(theirs[name])} → {_shown(new)}"
        for name, new in ours.items()
        if name in theirs and theirs[name] != new
    ]
    return changed, [name for name in ours if name not in theirs]


def _shown(value) -> str:
    return "none" if value is None else str(value)
