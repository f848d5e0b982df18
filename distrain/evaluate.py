"""Classification metrics in plain numpy.

Accuracy, per-class and macro precision, recall and F1, the confusion matrix, and the
majority-class baseline.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


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
