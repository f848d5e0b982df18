"""Tasks: what a model learns and how it is scored, one class per task.

Every mode's step asks the model's task for its per-label losses and hits (the
"correct" count behind a run's accuracy), so a classifier, a language model, an
autoencoder, an encoder-decoder and a regression train through the same steps; the evaluation and
baseline steps ask it how to score a trained model and what to compare it with.

A *label* is what one loss term is about: an example's class, a next character, a
pixel. Losses and accuracies in a run's history are per label.
"""

from __future__ import annotations

import math
import os

import numpy as np

from distrain.datasets import texts as read_texts
from distrain.learning.lm import language_model_scores, score_ngrams
from distrain.learning.metrics import (
    classification_metrics,
    majority_baseline,
    mean_baseline,
    metrics_markdown,
    regression_markdown,
    regression_metrics,
)
from distrain.learning.predict import (
    evaluate_language_model,
    load_model,
    predict_split,
    split_labels,
    targets_and_outputs,
)


class Task:
    """The base of every task.

    Attributes:
        name: Written in a run's history and the comparison.
        split: The split the evaluation step scores by default.
        metrics: Evaluation keys a component logs as KFP metrics, when present.
        quality: The evaluation key that says how good a model is (what the comparison
            ranks and decides on when no run reached the target).
        lower_is_better: Which way :attr:`quality` is better.
        accuracy_target: Whether its hits make an accuracy that can reach the comparison's
            target (time to target); without, the verdict decides on :attr:`quality`.
    """

    name = ""
    split = "test"
    metrics: tuple[str, ...] = ()
    quality = "accuracy"
    lower_is_better = False
    accuracy_target = True
    #: Whether validation scores a contiguous text rather than records
    #: (:meth:`distrain.train.replica.Replica.evaluate_text`).
    text_scoring = False

    def labels_per_example(self, info) -> int:
        """Loss terms per example."""
        return 1

    def losses(self, y, outputs):
        """Per-label losses (a tensor of ``y``'s shape)."""
        raise NotImplementedError

    def training_losses(self, y, outputs):
        """Per-label losses a training step minimises (by default :meth:`losses`).

        The user's class weights weigh them (:class:`distrain.learning.choices.WeightedTask`).
        """
        return self.losses(y, outputs)

    def hits(self, y, outputs):
        """Per-label hits, 1.0 or 0.0 (a float32 tensor of ``y``'s shape)."""
        raise NotImplementedError

    def sums(self, y, outputs, training: bool = False):
        """The batch's summed loss and hits: every mode's step returns these.

        ``training``: the training losses (:meth:`training_losses`), else validation's.
        """
        import tensorflow as tf

        losses = self.training_losses(y, outputs) if training else self.losses(y, outputs)
        return tf.reduce_sum(losses), tf.reduce_sum(self.hits(y, outputs))

    def evaluate(self, model_path: str | os.PathLike, info, split: str) -> dict:
        """Scores a trained model on a split of ``info``'s records."""
        raise NotImplementedError

    def check_model(self, model, info) -> str:
        """What is wrong with a user's built model for this task and data ("": nothing)."""
        return ""

    def first_guess_loss(self, info) -> float:
        """A label's loss under a guess that knows nothing: ln of the classes (at least 2).

        The scale of the loss, e.g. for the adaptive period of ``easgd``.
        """
        return math.log(max(info.num_classes, 2))

    def baseline(self, info) -> tuple[dict, dict]:
        """``(run, evaluation)`` of the task's count-based baseline on ``info``'s data."""
        raise NotImplementedError

    def markdown(self, evaluation: dict, title: str) -> str:
        """The evaluation as the Markdown a pipeline's UI shows."""
        lines = [f"## {title}", ""]
        for key in self.metrics:
            if evaluation.get(key) is not None:
                lines.append(f"- {key.replace('_', ' ')}: {evaluation[key]:.4f}")
        return "\n".join(lines) + "\n"


def _sparse_losses(y, logits):
    import tf_keras as keras

    return keras.losses.sparse_categorical_crossentropy(y, logits, from_logits=True)


def _argmax_hits(y, logits):
    import tensorflow as tf

    return tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), y), tf.float32)


class Classification(Task):
    """One class per example; the model outputs logits. Scored on ``test``."""

    name = "classification"
    metrics = ("accuracy", "macro_precision", "macro_recall", "macro_f1")

    def losses(self, y, outputs):
        return _sparse_losses(y, outputs)

    def hits(self, y, outputs):
        return _argmax_hits(y, outputs)

    def check_model(self, model, info):
        if info.metadata.get("label_dtype") == "float32":
            return (
                f"the data set's label {info.metadata.get('label')!r} is float32, a regression "
                "target, not a class: name the task, FILE.py:FUNCTION@regression"
            )
        return ""

    def evaluate(self, model_path, info, split):
        y_true, y_pred = predict_split(model_path, info, split)
        names = info.class_names or [str(i) for i in range(info.num_classes)]
        evaluation = classification_metrics(y_true, y_pred, names)
        evaluation["split"] = split
        return evaluation

    def baseline(self, info):
        hist = info.metadata["class_histogram"]["train"]
        names = info.class_names or [str(i) for i in range(info.num_classes)]
        evaluation = majority_baseline(hist, split_labels(info, self.split), names)
        evaluation["split"] = self.split
        return {"name": "majority", "model": "majority class"}, evaluation

    def markdown(self, evaluation, title):
        return metrics_markdown(evaluation, title)


class NextCharacter(Task):
    """A character language model: logits for the next character at every position."""

    name = "language_model"
    split = "validation"
    metrics = ("bits_per_char", "nats_per_char", "perplexity", "accuracy")
    quality = "bits_per_char"
    lower_is_better = True
    text_scoring = True

    def labels_per_example(self, info) -> int:
        return int(info.metadata["seq_len"])

    def losses(self, y, outputs):
        return _sparse_losses(y, outputs)

    def hits(self, y, outputs):
        return _argmax_hits(y, outputs)

    def evaluate(self, model_path, info, split):
        return evaluate_language_model(model_path, info.data_dir, split)

    def baseline(self, info):
        """The best Kneser-Ney character n-gram of orders 3-7, scored as the models are."""
        return _ngram_baseline(info, read_texts(info.data_dir, self.split).values(), self.split)

    def markdown(self, evaluation, title):
        rows = ""
        if evaluation.get("row_bits_per_char"):
            rows = (
                f"- bits/char of the {len(evaluation['row_bits_per_char'])} scored rows: "
                f"min {evaluation['row_bits_per_char_min']:.3f}, median "
                f"{evaluation['row_bits_per_char_median']:.3f}, max "
                f"{evaluation['row_bits_per_char_max']:.3f}\n"
            )
            for row in evaluation.get("outlier_rows", []):
                rows += (
                    f"- row {row['row']} stands out: {row['bits_per_char']:.3f} bits/char "
                    f"(a unigram model: {row['unigram_bits_per_char']:.3f})\n"
                )
        return (
            f"## {title}\n\n- bits/char: {evaluation['bits_per_char']:.4f}\n{rows}"
            f"- perplexity: {evaluation['perplexity']:.3f}\n- next-character accuracy: "
            f"{evaluation['accuracy']:.4f}\n\nSample at temperature {evaluation['temperature']} "
            f"after the prompt:\n\n```\n{evaluation['prompt']}{evaluation['sample']}\n```\n"
        )


class Translation(NextCharacter):
    """An encoder-decoder: a target sequence's characters from the source and its own past.

    Each character is predicted from the source and the target's characters before it
    (teacher forcing); scored per target character.
    """

    name = "sequence_to_sequence"
    text_scoring = False  # its targets are records: line pairs

    def labels_per_example(self, info) -> int:
        return int(info.metadata["target_len"])

    def evaluate(self, model_path, info, split):
        nats = hits = count = 0.0
        for y, logits in targets_and_outputs(load_model(model_path), info, split):
            nats += float(np.sum(self.losses(y, logits)))
            hits += float(np.sum(self.hits(y, logits)))
            count += y.size
        if not count:
            raise ValueError(f"{info.data_dir}: split {split!r} has no {info.view_name} records")
        evaluation = language_model_scores(nats / count, hits / count)
        evaluation.update(split=split, characters=int(count))
        return evaluation

    def baseline(self, info):
        """The best Kneser-Ney n-gram over the targets alone: the decoder without a source.

        Fitted on the training text, it scores each target from the start of its line (the
        line break before it is context only), as the decoder sees it; a model below it
        has learnt something from the source line.
        """
        vocabulary = info.metadata["vocabulary"]
        targets = [
            "\n" + "".join(vocabulary[i] if i else "\x00" for i in row)  # 0: unknown
            for row in split_labels(info, self.split)
        ]
        return _ngram_baseline(info, targets, self.split, " (targets)", ", no source")

    def markdown(self, evaluation, title):
        return (
            f"## {title}\n\n- bits/char: {evaluation['bits_per_char']:.4f}\n"
            f"- perplexity: {evaluation['perplexity']:.3f}\n- character accuracy: "
            f"{evaluation['accuracy']:.4f}\n"
        )


def _ngram_baseline(info, texts, split: str, name_note: str = "", model_note: str = ""):
    """The best Kneser-Ney n-gram, fitted on the training text, scored on ``texts``."""
    train = read_texts(info.data_dir, "train").values()
    order, evaluation = score_ngrams(train, texts, info.metadata["vocabulary"])
    evaluation["split"] = split
    name = f"{order}-gram KN"
    return {"name": name + name_note, "model": f"char {name}{model_note}"}, evaluation


class Reconstruction(Task):
    """An autoencoder: the image back from its own pixels; the model outputs a logit per pixel.

    The loss is each pixel's binary cross-entropy (pixels are intensities in [0, 1]); a
    pixel is a hit when the reconstruction and the image agree on which side of 0.5 it is.
    The evaluation adds the mean squared error per pixel and the peak signal-to-noise ratio.
    """

    name = "reconstruction"
    metrics = ("reconstruction_mse", "psnr", "pixel_accuracy", "bce_per_pixel")
    quality = "reconstruction_mse"
    lower_is_better = True

    def labels_per_example(self, info) -> int:
        return int(np.prod(info.metadata.get("image_shape", [28, 28])))

    def losses(self, y, outputs):
        import tensorflow as tf

        return tf.nn.sigmoid_cross_entropy_with_logits(labels=y, logits=outputs)

    def hits(self, y, outputs):
        import tensorflow as tf

        return tf.cast(tf.equal(outputs > 0.0, y > 0.5), tf.float32)

    def evaluate(self, model_path, info, split):
        squared = bce = hits = count = 0.0
        for y, logits in targets_and_outputs(load_model(model_path), info, split):
            squared += float(np.sum((1.0 / (1.0 + np.exp(-logits)) - y) ** 2))
            bce += float(np.sum(self.losses(y, logits)))
            hits += float(np.sum(self.hits(y, logits)))
            count += y.size
        if not count:
            raise ValueError(f"{info.data_dir}: split {split!r} is empty")
        return reconstruction_scores(squared / count, bce / count, hits / count, split, count)

    def baseline(self, info):
        """The training images' mean image, whatever the input: what knowing no pixel gives."""
        mean = np.mean(split_labels(info, "train"), axis=0)
        images = split_labels(info, self.split)
        eps = 1e-7
        p = np.clip(mean, eps, 1 - eps)
        bce = -(images * np.log(p) + (1 - images) * np.log(1 - p))
        evaluation = reconstruction_scores(
            float(np.mean((images - mean) ** 2)),
            float(np.mean(bce)),
            float(np.mean((mean > 0.5) == (images > 0.5))),
            self.split,
            images.size,
        )
        return {"name": "mean image", "model": "training mean image"}, evaluation


def reconstruction_scores(mse: float, bce: float, pixel_accuracy: float, split: str, pixels):
    """A reconstruction's scores: MSE and BCE per pixel, PSNR (peak 1.0), pixel accuracy."""
    return {
        "reconstruction_mse": mse,
        "bce_per_pixel": bce,
        "psnr": 10.0 * math.log10(1.0 / mse) if mse > 0 else float("inf"),
        "pixel_accuracy": pixel_accuracy,
        "split": split,
        "pixels": int(pixels),
    }


class Regression(Task):
    """One float target per example; the model outputs one value (``[batch]`` or ``[batch, 1]``).

    The loss is the squared error; scored on ``test`` by MSE, MAE and R², each with its
    95 % interval over the examples (:func:`distrain.learning.metrics.regression_metrics`), against
    the mean of the training labels. A regression has no hits (its accuracy is 0): the
    verdict decides on test MSE, lower being better.
    """

    name = "regression"
    metrics = ("mse", "mae", "r2")
    quality = "mse"
    lower_is_better = True
    accuracy_target = False

    def losses(self, y, outputs):
        import tensorflow as tf

        y = tf.cast(y, tf.float32)
        return tf.square(tf.reshape(tf.cast(outputs, tf.float32), tf.shape(y)) - y)

    def hits(self, y, outputs):
        import tensorflow as tf

        return tf.zeros(tf.shape(y), tf.float32)

    def first_guess_loss(self, info) -> float:
        """The training labels' variance: the squared error of predicting their mean (else 1)."""
        std = ((info.metadata.get("target_summary") or {}).get("train") or {}).get("std")
        return float(std) ** 2 if std else 1.0

    def check_model(self, model, info):
        outputs = model.outputs
        if outputs is None:  # a subclassed model: its output is known at its first step only
            return ""
        if len(outputs) != 1:
            return f"a regression model has one output, this one has {len(outputs)}"
        shape = tuple(outputs[0].shape)
        if len(shape) not in (1, 2) or (len(shape) == 2 and shape[-1] != 1):
            return (
                f"a regression model outputs one value per example ([batch] or [batch, 1]), "
                f"this one {list(shape)}"
            )
        return ""

    def evaluate(self, model_path, info, split):
        y_true, y_pred = [], []
        for y, outputs in targets_and_outputs(load_model(model_path), info, split):
            y_true.append(y.reshape(-1))
            y_pred.append(outputs.reshape(len(y), -1)[:, 0])
        if not y_true:
            raise ValueError(f"{info.data_dir}: split {split!r} is empty")
        evaluation = regression_metrics(np.concatenate(y_true), np.concatenate(y_pred))
        evaluation["split"] = split
        return evaluation

    def baseline(self, info):
        """The training labels' mean, whatever the input: what knowing no feature gives."""
        train = split_labels(info, "train")
        if not train.size:
            raise ValueError(f"{info.data_dir}: split 'train' is empty")
        evaluation = mean_baseline(
            float(np.mean(train, dtype=np.float64)), split_labels(info, self.split)
        )
        evaluation["split"] = self.split
        return {"name": "mean", "model": "training label mean"}, evaluation

    def markdown(self, evaluation, title):
        return regression_markdown(evaluation, title)


CLASSIFICATION = Classification()
NEXT_CHARACTER = NextCharacter()
TRANSLATION = Translation()
RECONSTRUCTION = Reconstruction()
REGRESSION = Regression()
TASKS = {
    t.name: t for t in (CLASSIFICATION, NEXT_CHARACTER, TRANSLATION, RECONSTRUCTION, REGRESSION)
}
# Every task's quality key, in the order of TASKS.
QUALITY_KEYS = tuple(dict.fromkeys(t.quality for t in TASKS.values()))


def quality_of(evaluation: dict) -> tuple[str, bool]:
    """``(key, lower_is_better)`` of an evaluation or comparison row, as its task declares.

    Its task is ``evaluation["task"]``; a report written without one is the task whose
    loss-like quality key it holds, else a classification.
    """
    task = TASKS.get(evaluation.get("task") or "")
    if task is None:
        task = next(
            (
                t
                for t in TASKS.values()
                if t.lower_is_better and evaluation.get(t.quality) is not None
            ),
            CLASSIFICATION,
        )
    return task.quality, task.lower_is_better


def markdown(evaluation: dict, title: str) -> str:
    """An evaluation step's result as Markdown, in its task's words (``evaluation["task"]``)."""
    return TASKS[evaluation.get("task", CLASSIFICATION.name)].markdown(evaluation, title)
