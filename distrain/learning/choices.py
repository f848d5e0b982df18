"""The user's own training choices: a model file's loss, optimizer and class weights.

Beside its builder, a model file (:mod:`distrain.learning.usermodel`) may define any of:

* ``loss(info)``: a tf-keras loss, a ``tf_keras.losses.Loss`` (e.g.
  ``CategoricalCrossentropy(from_logits=True, label_smoothing=0.1)``) or a function of
  ``(labels, outputs)`` that returns one loss per example. Labels are the class ids; a
  categorical loss of tf-keras (:data:`ONE_HOT_LOSSES`) gets them one-hot, as it expects.
* ``optimizer(info)``: a new ``tf_keras.optimizers.Optimizer`` on each call (SGD with
  momentum, Adam, AdamW with weight decay, Adagrad, ..., with a learning-rate schedule).
* ``class_weights(info)``: a weight per class, a dict ``{class id or name: weight}`` (the
  classes it leaves out weigh 1) or a list of one per class. Each training example's loss
  is multiplied by its label's weight, and the batch's objective is their mean, as
  ``model.fit(class_weight=...)`` computes it; validation losses are not weighted (as
  ``fit``'s ``val_loss``).

Why a function of the file rather than a setting: weights come from the data (inverse
class frequencies from ``info.metadata["class_histogram"]``), they belong with the model
they were tuned for, and the file already travels to every process and pod and is digested
in each checkpoint's fingerprint.

Every mode applies them (:func:`training_task`, :func:`make_optimizer`): the loss and
weights in every worker's step and validation, the optimizer where the mode applies its
updates (the parameter servers in the parameter-server modes). The user's optimizer wins
over ``learning_rate`` and ``scale_learning_rate``, which then do not apply; the run's
history records its configuration (:meth:`Choices.describe`). What a mode cannot honour
is refused before any process starts (:func:`check`, the mode's
:meth:`~distrain.train.modes.Mode.check_optimizer`), in one line naming the mode and the
setting.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Callable
from functools import cached_property

# The names a model file may define beside its builder.
NAMES = ("loss", "optimizer", "class_weights")

# tf-keras losses (by their function's name) that take one-hot labels.
ONE_HOT_LOSSES = ("categorical_crossentropy", "categorical_focal_crossentropy", "categorical_hinge")


class ChoiceError(ValueError):
    """A training choice of the model file that distrain cannot apply (permanent, exit 2)."""


class Choices:
    """The training choices a model file defines (any of :data:`NAMES`), loaded on first use.

    Args:
        load: Returns ``{name: (function, where)}`` for those the file defines: each
            function guarded as the user's code (:func:`distrain.learning.usermodel.choices`),
            ``where`` its ``FILE:LINE``.
    """

    def __init__(self, load: Callable[[], dict]):
        self._load = load

    @cached_property
    def functions(self) -> dict:
        return self._load()

    def defines(self, name: str) -> bool:
        """Whether the file defines ``name`` (one of :data:`NAMES`)."""
        return name in self.functions

    def _call(self, name: str, info):
        function, _ = self.functions[name]
        return function(info)

    def where(self, name: str) -> str:
        """``FILE:LINE`` of the file's function ``name``."""
        return self.functions[name][1]

    def loss(self, info):
        """The user's per-example loss, a function of (class ids, outputs); None: distrain's.

        Raises:
            ChoiceError: ``loss(info)`` returned something that is not callable.
        """
        if not self.defines("loss"):
            return None
        made = self._call("loss", info)
        if not callable(made):
            raise ChoiceError(
                f"{self.where('loss')}: loss(info) returned a {type(made).__name__}, not a "
                "tf-keras loss (a tf_keras.losses.Loss, or a function of labels and outputs)"
            )
        return per_example(made, info.num_classes)

    def optimizer(self, info):
        """A new tf-keras optimizer of the user's (None: distrain's Adam).

        Raises:
            ChoiceError: ``optimizer(info)`` returned no new-style tf-keras optimizer.
        """
        if not self.defines("optimizer"):
            return None
        import tf_keras

        made = self._call("optimizer", info)
        if not isinstance(made, tf_keras.optimizers.Optimizer):
            kind = f"{type(made).__module__}.{type(made).__qualname__}"
            hint = ""
            if isinstance(made, tf_keras.optimizers.legacy.Optimizer):
                hint = " (a legacy optimizer: use tf_keras.optimizers' own, e.g. AdamW)"
            elif "keras" in kind:
                hint = " (a Keras 3 optimizer: use tf_keras.optimizers)"
            raise ChoiceError(
                f"{self.where('optimizer')}: optimizer(info) returned a {kind}, not a "
                f"tf_keras.optimizers.Optimizer{hint}"
            )
        return made

    def class_weights(self, info) -> list[float] | None:
        """One weight per class (None: every example weighs 1).

        Raises:
            ChoiceError: Not a dict or list, a class the data set does not have, a weight
                that is negative or not finite, or every weight 0.
        """
        if not self.defines("class_weights"):
            return None
        return weights_per_class(
            self._call("class_weights", info), info, self.where("class_weights")
        )

    def describe(self, info) -> dict:
        """What the file chose, for the run's history and the checkpoints' fingerprint."""
        found = {}
        if self.defines("loss"):
            found["loss"] = describe_loss(self._call("loss", info))
        if self.defines("optimizer"):
            from distrain.learning.optim import KerasOptimizer

            found["optimizer"] = json.loads(KerasOptimizer(self.optimizer(info)).describe())
        if self.defines("class_weights"):
            found["class_weights"] = self.class_weights(info)
        return found


def per_example(loss, classes: int):
    """``loss`` as a function of (class ids, outputs) that returns one loss per example.

    A ``tf_keras.losses.Loss`` is called unreduced (its ``call``); a categorical loss of
    tf-keras (:data:`ONE_HOT_LOSSES`) gets the labels one-hot.
    """
    import tensorflow as tf
    import tf_keras

    function = loss.call if isinstance(loss, tf_keras.losses.Loss) else loss
    inner = getattr(loss, "fn", loss)
    one_hot = getattr(inner, "__name__", "") in ONE_HOT_LOSSES

    def losses(y, outputs):
        labels = tf.one_hot(y, classes, dtype=outputs.dtype) if one_hot else y
        return function(labels, outputs)

    return losses


def describe_loss(loss) -> dict | str:
    """A loss's class and configuration (a tf-keras loss), or its function's name."""
    import tf_keras

    if isinstance(loss, tf_keras.losses.Loss):
        try:
            return json.loads(json.dumps(tf_keras.losses.serialize(loss), default=str))
        except (TypeError, ValueError, NotImplementedError):
            return type(loss).__qualname__
    return f"{getattr(loss, '__module__', '')}.{getattr(loss, '__qualname__', repr(loss))}"


def weights_per_class(given, info, where: str) -> list[float]:
    """``class_weights(info)``'s result as one weight per class, checked.

    Raises:
        ChoiceError: As :meth:`Choices.class_weights`, naming ``where``.
    """
    classes = info.num_classes
    names = list(info.class_names or [])
    line = f"{where}: class_weights(info)"
    if isinstance(given, dict):
        weights = [1.0] * classes
        for key, value in given.items():
            if isinstance(key, str) and key in names:
                index = names.index(key)
            elif isinstance(key, numbers.Integral) and not isinstance(key, bool):
                index = int(key)
            else:
                raise ChoiceError(f"{line}: {key!r} is not a class of the data set")
            if not 0 <= index < classes:
                raise ChoiceError(f"{line}: class {key!r} is not one of the {classes} classes")
            weights[index] = value
    elif isinstance(given, list | tuple) or hasattr(given, "tolist"):
        weights = list(given.tolist() if hasattr(given, "tolist") else given)
        if len(weights) != classes:
            raise ChoiceError(f"{line}: {len(weights)} weights, the data set has {classes} classes")
    else:
        raise ChoiceError(
            f"{line} returned a {type(given).__name__}; expected a dict of class to weight, "
            "or a list of one weight per class"
        )
    try:
        weights = [float(w) for w in weights]
    except (TypeError, ValueError):
        raise ChoiceError(f"{line}: a weight is not a number ({weights!r})") from None
    bad = [w for w in weights if not math.isfinite(w) or w < 0]
    if bad:
        raise ChoiceError(f"{line}: weight {bad[0]!r} is not a finite number of 0 or more")
    if not any(weights):
        raise ChoiceError(f"{line}: every class weighs 0: nothing would be learnt")
    return weights


class WeightedTask:
    """A task whose loss is the user's, and whose training losses are class-weighted.

    Everything else (hits, scoring, baselines) is the task's own.

    Args:
        task: The model's task (a classification).
        loss: The user's per-example loss (:func:`per_example`), or None: the task's.
        weights: One weight per class, or None.
    """

    def __init__(self, task, loss=None, weights: list[float] | None = None):
        self.task, self.loss, self.weights = task, loss, weights

    def __getattr__(self, name):
        return getattr(self.task, name)

    def losses(self, y, outputs):
        """Per-example losses, unweighted (validation's)."""
        return self.loss(y, outputs) if self.loss is not None else self.task.losses(y, outputs)

    def training_losses(self, y, outputs):
        """Per-example losses, each times its label's weight (what a step minimises)."""
        import tensorflow as tf

        losses = self.losses(y, outputs)
        if self.weights is None:
            return losses
        weights = tf.gather(tf.constant(self.weights, losses.dtype), y)
        return losses * weights

    def sums(self, y, outputs, training: bool = False):
        """The batch's summed loss (weighted when ``training``) and hits."""
        import tensorflow as tf

        losses = self.training_losses(y, outputs) if training else self.losses(y, outputs)
        return tf.reduce_sum(losses), tf.reduce_sum(self.task.hits(y, outputs))


def training_task(spec, info):
    """The task a run trains ``spec``'s model with: its own, or with the user's loss/weights."""
    choices = spec.choices
    if choices is None or not (choices.defines("loss") or choices.defines("class_weights")):
        return spec.task
    return WeightedTask(spec.task, choices.loss(info), choices.class_weights(info))


def make_optimizer(spec, info, learning_rate: float, examples=1, run_updates=0, **schedule):
    """The optimizer of a run of ``spec``'s model: the user's, or distrain's (its spec's).

    Args:
        spec: The model's :class:`distrain.datasets.ModelSpec`.
        info: The data as the model reads it.
        learning_rate: distrain's rate (the user's optimizer has its own: this one is unused).
        examples: Examples an update's mean gradient is of (a batch): SGD's rate is per
            example.
        run_updates: The run's updates: SGD's rate falls linearly to zero over them.
        schedule: The rate's schedule (a language model's decay and anneal, sync's warm-up).
    """
    from distrain.learning.optim import SGD, Adam, KerasOptimizer

    choices = spec.choices
    made = choices.optimizer(info) if choices is not None else None
    if made is not None:
        return KerasOptimizer(made)
    if spec.optimizer_for(info) == "sgd":
        return SGD(learning_rate, examples=examples, linear_updates=run_updates, **schedule)
    return Adam(learning_rate, **schedule)


def recorded(spec, info) -> dict:
    """The user's choices for the history and the fingerprint (empty: distrain's)."""
    return spec.choices.describe(info) if spec.choices is not None else {}


def check(spec, info, mode, cfg) -> None:
    """Calls each choice once and checks it, before any process starts.

    Raises:
        ChoiceError: A choice that is not what distrain can apply, or one the model's task
            does not take, in one line naming the user's file and line.
        ConfigError: The run's mode cannot honour a choice (the mode's one line).
    """
    import tensorflow as tf

    choices = spec.choices
    if choices is None:
        return
    task = spec.task.name
    for name in ("loss", "class_weights"):
        if choices.defines(name) and task != "classification":
            raise ChoiceError(
                f"{choices.where(name)}: {name}(info) applies to a classifier; the model "
                f"is trained as {task}, whose loss is distrain's"
            )
    loss = choices.loss(info)
    if loss is not None:
        classes = info.num_classes
        y = tf.constant([c % classes for c in range(3)], tf.int32)
        outputs = tf.zeros([3, classes])
        try:
            values = loss(y, outputs)
        except Exception as err:  # noqa: BLE001 (the user's loss: any error is theirs)
            raise ChoiceError(
                f"{choices.where('loss')}: the loss fails on labels of class ids and "
                f"{classes} logits per example: {type(err).__name__}: "
                f"{str(err).strip().splitlines()[0] if str(err).strip() else ''}"
            ) from None
        if values.shape.rank != 1 or values.shape[0] != 3:
            raise ChoiceError(
                f"{choices.where('loss')}: the loss returns shape {values.shape.as_list()} "
                "for a batch of 3; distrain needs one loss per example (a tf_keras.losses.Loss, "
                "or a function that does not reduce the batch)"
            )
    choices.class_weights(info)
    optimizer = choices.optimizer(info)
    if optimizer is not None:
        if choices.optimizer(info) is optimizer:
            raise ChoiceError(
                f"{choices.where('optimizer')}: optimizer(info) returned the same optimizer "
                "twice; it must make a new one on each call (one per process and graph)"
            )
        mode.check_optimizer(cfg, optimizer)
