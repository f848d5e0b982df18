"""Classification and regression metrics in plain numpy.

Accuracy, per-class and macro precision, recall and F1, the confusion matrix, and the
majority-class baseline; a regression's mean squared and absolute errors and R², each with
its 95 % interval over the examples (the normal approximation), and the mean predictor's.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from distrain.base.verdict import Z95


def _validate(y_true, y_pred, num_classes: int) -> tuple[np.ndarray, np.ndarray]:
    y_true = np.asarray(y_true).astype(np.int64).ravel()
    y_pred = np.asarray(y_pred).astype(np.int64).ravel()
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true has {y_true.size} labels but y_pred has {y_pred.size}")
    if y_true.size == 0:
        raise ValueError("no examples to score")
    for name, y in (("y_true", y_true), ("y_pred", y_pred)):
        if y.min() < 0 or y.max() >= num_classes:
            raise ValueError(
                f"{name} holds labels outside 0..{num_classes - 1} (min {y.min()}, max {y.max()})"
            )
    return y_true, y_pred


def _safe_divide(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num, dtype=np.float64), where=den > 0)


def classification_metrics(y_true, y_pred, class_names: Sequence[str]) -> dict:
    """Scores predicted classes against true ones.

    A ratio whose denominator is zero (a class never predicted, or with no examples) is
    0.0, as scikit-learn's ``zero_division=0`` does. Macro averages weigh every class
    alike; ``weighted_f1`` weighs them by support.

    Args:
        y_true: True class ids.
        y_pred: Predicted class ids.
        class_names: Name of each class id.

    Returns:
        ``num_examples, accuracy, macro_precision, macro_recall, macro_f1, weighted_f1,
        per_class`` (list of ``class, precision, recall, f1, support``),
        ``confusion_matrix`` (rows: true class, columns: predicted) and ``class_names``.

    Raises:
        ValueError: Lengths differ, nothing to score, or a label is out of range.
    """
    k = len(class_names)
    y_true, y_pred = _validate(y_true, y_pred, k)
    cm = np.zeros((k, k), dtype=np.int64)
    np.add.at(cm, (y_true, y_pred), 1)
    tp = np.diag(cm).astype(np.float64)
    support = cm.sum(axis=1).astype(np.float64)
    predicted = cm.sum(axis=0).astype(np.float64)
    precision = _safe_divide(tp, predicted)
    recall = _safe_divide(tp, support)
    f1 = _safe_divide(2 * precision * recall, precision + recall)
    return {
        "num_examples": int(y_true.size),
        "accuracy": float(tp.sum() / y_true.size),
        "macro_precision": float(precision.mean()),
        "macro_recall": float(recall.mean()),
        "macro_f1": float(f1.mean()),
        "weighted_f1": float((f1 * support).sum() / support.sum()),
        "per_class": [
            {
                "class": str(name),
                "precision": float(precision[i]),
                "recall": float(recall[i]),
                "f1": float(f1[i]),
                "support": int(support[i]),
            }
            for i, name in enumerate(class_names)
        ],
        "confusion_matrix": cm.tolist(),
        "class_names": [str(n) for n in class_names],
    }


def majority_baseline(train_class_histogram: Sequence[int], y_true, class_names) -> dict:
    """Metrics of always predicting the most frequent training class."""
    majority = int(np.argmax(np.asarray(train_class_histogram)))
    y_true = np.asarray(y_true)
    return classification_metrics(y_true, np.full(y_true.shape, majority), class_names)


def metrics_markdown(metrics: dict, title: str) -> str:
    """A Markdown section: overall numbers, then a per-class table."""
    lines = [
        f"## {title}",
        "",
        f"- examples: {metrics['num_examples']}",
        f"- accuracy: {metrics['accuracy']:.4f}",
        f"- macro precision / recall / F1: {metrics['macro_precision']:.4f} / "
        f"{metrics['macro_recall']:.4f} / {metrics['macro_f1']:.4f}",
        "",
        "| class | precision | recall | F1 | support |",
        "|---|---:|---:|---:|---:|",
    ]
    for row in metrics["per_class"]:
        lines.append(
            f"| {row['class']} | {row['precision']:.4f} | {row['recall']:.4f} | "
            f"{row['f1']:.4f} | {row['support']} |"
        )
    return "\n".join(lines) + "\n"


def mean_interval(values) -> tuple[float, float] | None:
    """The 95 % interval of a mean over examples, by the normal approximation.

    ``mean ± 1.96 · s / √n``, ``s`` the values' sample standard deviation; None for
    fewer than two values.
    """
    values = np.asarray(values, dtype=np.float64).ravel()
    if values.size < 2:
        return None
    half = Z95 * float(np.std(values, ddof=1)) / math.sqrt(values.size)
    centre = float(np.mean(values))
    return centre - half, centre + half


def regression_metrics(y_true, y_pred) -> dict:
    """Scores predicted values against true ones, each score with its 95 % interval.

    MSE and MAE are means over the examples (:func:`mean_interval`). R² is ``1 - MSE /
    var``, ``var`` the true values' variance about their own mean; its interval is the delta
    method's for that ratio, ``R² ± 1.96 · s_d / (var · √n)`` with ``d_i = e_i² - (MSE /
    var) · (y_i - ȳ)²``. R² is None when the true values are all equal.

    Args:
        y_true: True values.
        y_pred: Predicted values, one per true value.

    Returns:
        ``num_examples, mse, mae, rmse, r2`` and ``mse_interval, mae_interval,
        r2_interval`` (``[low, high]``, None for one example), ``label_mean, label_std``.

    Raises:
        ValueError: Lengths differ, nothing to score, or a value is NaN or infinite.
    """
    y_true = np.asarray(y_true, dtype=np.float64).ravel()
    y_pred = np.asarray(y_pred, dtype=np.float64).ravel()
    if y_true.shape != y_pred.shape:
        raise ValueError(f"y_true has {y_true.size} values but y_pred has {y_pred.size}")
    if y_true.size == 0:
        raise ValueError("no examples to score")
    for name, y in (("y_true", y_true), ("y_pred", y_pred)):
        bad = int(np.sum(~np.isfinite(y)))
        if bad:
            raise ValueError(f"{name}: {bad} of {y.size} values are NaN or infinite")
    squared = (y_pred - y_true) ** 2
    absolute = np.abs(y_pred - y_true)
    centred = (y_true - y_true.mean()) ** 2
    mse, variance = float(squared.mean()), float(centred.mean())
    r2 = r2_interval = None
    if variance > 0:
        r2 = 1.0 - mse / variance
        if y_true.size > 1:
            spread = float(np.std(squared - (mse / variance) * centred, ddof=1))
            half = Z95 * spread / (variance * math.sqrt(y_true.size))
            r2_interval = [r2 - half, r2 + half]

    def listed(interval):
        return list(interval) if interval else None

    return {
        "num_examples": int(y_true.size),
        "mse": mse,
        "mse_interval": listed(mean_interval(squared)),
        "mae": float(absolute.mean()),
        "mae_interval": listed(mean_interval(absolute)),
        "rmse": math.sqrt(mse),
        "r2": r2,
        "r2_interval": r2_interval,
        "label_mean": float(y_true.mean()),
        "label_std": math.sqrt(variance),
    }


def mean_baseline(train_mean: float, y_true) -> dict:
    """Metrics of always predicting the training labels' mean (``train_mean`` recorded)."""
    y_true = np.asarray(y_true, dtype=np.float64)
    scores = regression_metrics(y_true, np.full(y_true.shape, float(train_mean)))
    scores["train_label_mean"] = float(train_mean)
    return scores


def regression_markdown(metrics: dict, title: str) -> str:
    """A Markdown section: the regression scores with their 95 % intervals."""
    lines = [f"## {title}", "", f"- examples: {metrics['num_examples']}"]
    for key, label in (("mse", "MSE"), ("mae", "MAE"), ("r2", "R²")):
        value, interval = metrics.get(key), metrics.get(f"{key}_interval")
        if value is None:
            lines.append(f"- {label}: — (the true values are all equal)")
            continue
        span = f" (95 % interval {interval[0]:.4f}–{interval[1]:.4f})" if interval else ""
        lines.append(f"- {label}: {value:.4f}{span}")
    return "\n".join(lines) + "\n"
