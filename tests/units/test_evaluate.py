import numpy as np
import pytest

from distrain.learning.metrics import classification_metrics, majority_baseline, metrics_markdown

NAMES = ["a", "b", "c", "d"]


def test_metrics_by_hand():
    y_true = [0, 0, 0, 1, 1, 2, 2, 2]
    y_pred = [0, 0, 1, 1, 0, 2, 2, 0]
    m = classification_metrics(y_true, y_pred, NAMES)
    assert m["num_examples"] == 8
    assert m["accuracy"] == pytest.approx(5 / 8)
    # rows are true classes, columns predictions
    assert m["confusion_matrix"] == [[2, 1, 0, 0], [1, 1, 0, 0], [1, 0, 2, 0], [0, 0, 0, 0]]
    a, b, c, d = m["per_class"]
    assert (a["precision"], a["recall"], a["support"]) == (
        pytest.approx(0.5),
        pytest.approx(2 / 3),
        3,
    )
    assert a["f1"] == pytest.approx(2 * 0.5 * (2 / 3) / (0.5 + 2 / 3))
    assert (b["precision"], b["recall"]) == (pytest.approx(0.5), pytest.approx(0.5))
    assert (c["precision"], c["recall"]) == (pytest.approx(1.0), pytest.approx(2 / 3))
    # class d: no support and never predicted: 0 by convention
    assert (d["precision"], d["recall"], d["f1"], d["support"]) == (0.0, 0.0, 0.0, 0)
    assert m["macro_precision"] == pytest.approx((0.5 + 0.5 + 1.0 + 0) / 4)
    assert m["weighted_f1"] == pytest.approx((a["f1"] * 3 + b["f1"] * 2 + c["f1"] * 3) / 8)


def test_class_never_predicted_has_zero_precision():
    m = classification_metrics([0, 1, 1], [0, 0, 0], ["x", "y"])
    assert m["per_class"][1]["precision"] == 0.0 and m["per_class"][1]["recall"] == 0.0


@pytest.mark.parametrize(
    "y_true, y_pred, message",
    [
        ([0, 1], [0], "2 labels but y_pred has 1"),
        ([], [], "no examples"),
        ([0, 4], [0, 1], "y_true holds labels outside 0..3"),
        ([0, 1], [0, -1], "y_pred holds labels outside"),
    ],
)
def test_validation(y_true, y_pred, message):
    with pytest.raises(ValueError, match=message):
        classification_metrics(y_true, y_pred, NAMES)


def test_majority_baseline_and_markdown():
    m = majority_baseline([5, 50, 3, 1], np.array([1, 1, 0, 2]), NAMES)
    assert m["accuracy"] == pytest.approx(0.5)
    assert m["confusion_matrix"][0] == [0, 1, 0, 0]
    text = metrics_markdown(m, "Baseline")
    assert text.startswith("## Baseline") and "| b | 0.5000 | 1.0000 |" in text
