"""The regression task (``@regression``): its scores and intervals, its baseline, its loss,
its rows and verdict in the comparison, and a float label through the tfrecord data set."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from distrain import datasets
from distrain.analysis.compare import build_comparison, render_text_table
from distrain.base.gate import check_gate
from distrain.base.verdict import Z95, summarize
from distrain.datasets.info import DatasetInfo
from distrain.datasets.testing import BEAM_ARGS
from distrain.datasets.tfrecord.beam import TfrecordPreprocessConfig, preprocess_tfrecord
from distrain.datasets.tfrecord.sample import write_frames
from distrain.datasets.tfrecord.spec import FeatureSpec, SpecError, check_example
from distrain.learning.metrics import mean_baseline, mean_interval, regression_metrics
from distrain.learning.models import load_info, model_spec
from distrain.learning.tasks import REGRESSION, TASKS, markdown, quality_of
from distrain.preprocess.records import example, float_feature, int64_feature

# Four examples whose scores are worked out by hand below.
Y_TRUE = [1.0, 2.0, 3.0, 4.0]
Y_PRED = [1.5, 2.0, 2.0, 5.0]  # errors 0.5, 0, -1, 1


def test_mse_mae_and_r2_with_their_intervals_are_the_hand_worked_values():
    got = regression_metrics(Y_TRUE, Y_PRED)
    # Squared errors 0.25, 0, 1, 1: mean 0.5625, sample variance 0.796875 / 3.
    assert got["mse"] == 0.5625
    half = Z95 * math.sqrt(0.796875 / 3) / 2
    assert got["mse_interval"] == pytest.approx([0.5625 - half, 0.5625 + half], abs=1e-15)
    # Absolute errors 0.5, 0, 1, 1: mean 0.625, deviations -0.125, -0.625, 0.375, 0.375.
    assert got["mae"] == 0.625
    half = Z95 * math.sqrt((0.015625 + 0.390625 + 0.140625 * 2) / 3) / 2
    assert got["mae_interval"] == pytest.approx([0.625 - half, 0.625 + half], abs=1e-15)
    # Labels about their mean 2.5: squared 2.25, 0.25, 0.25, 2.25, variance 1.25;
    # R² = 1 - 0.5625 / 1.25 = 0.55. Delta method: d = e² - 0.45 (y - ȳ)² =
    # -0.7625, -0.1125, 0.8875, -0.0125 (mean 0), sample variance 1.381875 / 3.
    assert got["r2"] == pytest.approx(0.55, abs=1e-15)
    half = Z95 * math.sqrt(1.381875 / 3) / (1.25 * 2)
    assert got["r2_interval"] == pytest.approx([0.55 - half, 0.55 + half], abs=1e-12)
    assert got["rmse"] == 0.75 and got["num_examples"] == 4
    assert got["label_mean"] == 2.5 and got["label_std"] == math.sqrt(1.25)


def test_a_perfect_prediction_scores_zero_error_and_r2_one():
    got = regression_metrics(Y_TRUE, Y_TRUE)
    assert got["mse"] == got["mae"] == 0.0 and got["r2"] == 1.0
    assert got["mse_interval"] == [0.0, 0.0] and got["r2_interval"] == [1.0, 1.0]


def test_the_interval_of_a_mean_is_the_normal_approximation():
    assert mean_interval([2.0, 4.0]) == pytest.approx((3.0 - Z95, 3.0 + Z95))  # s = √2, n = 2
    assert mean_interval([5.0]) is None  # one example: no spread to measure


def test_scores_refuse_what_cannot_be_scored():
    with pytest.raises(ValueError, match="y_true has 2 values but y_pred has 1"):
        regression_metrics([1.0, 2.0], [1.0])
    with pytest.raises(ValueError, match="no examples"):
        regression_metrics([], [])
    with pytest.raises(ValueError, match="y_pred: 1 of 2 values are NaN or infinite"):
        regression_metrics([1.0, 2.0], [1.0, float("nan")])
    # Equal labels: no variance, so no R²; the errors are still scored.
    same = regression_metrics([3.0, 3.0], [2.0, 4.0])
    assert same["r2"] is None and same["r2_interval"] is None and same["mse"] == 1.0


def test_the_mean_predictor_scores_the_training_mean_on_every_example():
    got = mean_baseline(2.0, Y_TRUE)  # errors -1, 0, 1, 2
    assert got["train_label_mean"] == 2.0
    assert got["mse"] == 1.5 and got["mae"] == 1.0
    assert got["r2"] == pytest.approx(1 - 1.5 / 1.25, abs=1e-15)  # below 0: not the test mean
    # The test set's own mean would score R² = 0 exactly.
    assert mean_baseline(2.5, Y_TRUE)["r2"] == 0.0


def test_the_loss_is_the_squared_error_of_one_output_and_there_are_no_hits():
    import tensorflow as tf

    y = tf.constant([1.0, 2.0, -1.0])
    for outputs in ([[1.5], [0.0], [-1.0]], [1.5, 0.0, -1.0]):  # [batch, 1] or [batch]
        out = tf.constant(outputs)
        assert REGRESSION.losses(y, out).numpy().tolist() == [0.25, 4.0, 0.0]
        assert REGRESSION.hits(y, out).numpy().tolist() == [0.0, 0.0, 0.0]
        loss, hits = REGRESSION.sums(y, out)
        assert float(loss) == 4.25 and float(hits) == 0.0
    # A half-precision output (a mixed-precision model) is scored in float32.
    half = tf.constant([[1.5], [0.0], [-1.0]], tf.float16)
    assert REGRESSION.losses(y, half).dtype == tf.float32


def test_the_task_is_named_regression_and_ranks_on_mse_lower_being_better():
    assert TASKS["regression"] is REGRESSION
    assert quality_of({"task": "regression"}) == ("mse", True)
    assert quality_of({"mse": 0.3}) == ("mse", True)  # a report without its task
    text = markdown({**regression_metrics(Y_TRUE, Y_PRED), "task": "regression"}, "t")
    assert "- MSE: 0.5625 (95 % interval" in text and "- R²: 0.5500 (95 % interval" in text


def test_a_regression_model_gives_one_value_per_example(tmp_path):
    import tf_keras as keras

    info = DatasetInfo(str(tmp_path), "tfrecord", 0, [], {}, {}, {"label": "y"})
    inputs = keras.Input((3,), name="x")
    one = keras.Model(inputs, keras.layers.Dense(1)(inputs))
    assert REGRESSION.check_model(one, info) == ""
    two = keras.Model(inputs, keras.layers.Dense(2)(inputs))
    assert "one value per example" in REGRESSION.check_model(two, info)
    float_label = {"label": "y", "label_dtype": "float32"}
    classifier = TASKS["classification"]
    assert "y' is float32, a regression target" in classifier.check_model(
        two, DatasetInfo(str(tmp_path), "tfrecord", 0, [], {}, {}, float_label)
    )


def _report(name, mode, workers, mse, half, seed=0):
    evaluation = {
        "task": "regression",
        "mse": mse,
        "mse_interval": [mse - half, mse + half],
        "mae": mse / 2,
        "mae_interval": [mse / 2 - half, mse / 2 + half],
        "r2": 1 - mse,
        "r2_interval": [1 - mse - half, 1 - mse + half],
        "num_examples": 300,
    }
    if mode == "baseline":
        return {
            "run": {"name": name, "mode": mode, "workers": 0},
            "history": None,
            "evaluation": evaluation,
        }
    epochs = [
        {"epoch": 1, "val_loss": mse, "val_accuracy": 0.0, "wall_seconds": 2.0, "examples": 100}
    ]
    history = {
        "epochs": epochs,
        "train_seconds": 2.0 * workers,
        "examples_per_second": 50.0,
        "total_examples": 100,
        "config": {"seed": seed},
    }
    return {
        "run": {"name": name, "mode": mode, "workers": workers},
        "history": history,
        "evaluation": evaluation,
    }


def test_the_comparison_shows_each_score_with_its_interval_and_decides_on_mse():
    runs = [
        _report("single:1", "single", 1, 0.10, 0.02),
        _report("async:2", "async", 2, 0.40, 0.05),
        _report("mean", "baseline", 0, 0.95, 0.1),
    ]
    c = build_comparison(runs)
    rows = {r["name"]: r for r in c["rows"]}
    for name in rows:
        for key in ("mse", "mae", "r2"):
            assert rows[name][f"{key}_interval"] is not None, (name, key)
    # One repeat: the interval is the one over the test examples.
    assert rows["single:1"]["mse_interval"] == pytest.approx([0.08, 0.12])
    assert rows["mean"]["mse"] == 0.95 and rows["mean"]["mode"] == "baseline"
    # No accuracy target for a regression: no "reached" column.
    assert "target_reached" not in rows["single:1"]
    verdict = c["verdict"]
    assert verdict["criterion"] == "mse" and verdict["winner"] == "single:1"
    assert verdict["reason"].startswith(
        "A regression has no accuracy target; decided on test MSE (lower is better). "
        "single:1 is better (lower MSE) on test mean squared error: 0.1"
    )
    assert c["best"] == "single:1"
    table = render_text_table(c)
    assert "MSE" in table and "R²" in table and "0.1000 (0.0800–0.1200)" in table
    assert check_gate(c, "best.mse<0.2 and all.r2>0.5")[0]["passed"]


def test_repeats_never_claim_less_noise_than_the_test_examples_have():
    # Four repeats: t interval of 1.0..1.3 is 1.15 ± 0.2054; the two middle repeats'
    # own intervals are wider, and the row's interval holds them.
    own = [(1.0, 1.0), (0.0, 1.2), (1.0, 2.5), (1.3, 1.3)]
    summary = summarize([1.0, 1.1, 1.2, 1.3], example_intervals=own)
    assert summary.interval == (0.0, 2.5)
    # One repeat: its own interval.
    assert summarize([2.0], example_intervals=[(1.5, 2.5)]).interval == (1.5, 2.5)
    assert summarize([2.0]).interval is None


def _float_raw(tmp_path, labels, test_labels=()):
    raw = tmp_path / "raw"
    raw.mkdir()
    spec = {
        "features": {"x": {"dtype": "float32", "shape": [2]}, "y": {"dtype": "float32"}},
        "label": "y",
    }
    (raw / "features.json").write_text(json.dumps(spec))

    def records(values):
        def x(v):  # the feature stays finite: a non-finite label is the case under test
            return float_feature([v if math.isfinite(v) else 0.0, 1.0])

        return [example({"x": x(v), "y": float_feature([v])}) for v in values]

    write_frames(raw / "train-00000-of-00001.tfrecord", records(labels))
    if test_labels:
        write_frames(raw / "test-00000-of-00001.tfrecord", records(test_labels))
    return raw, FeatureSpec.load(raw)


def test_features_json_takes_a_float32_label_without_classes(tmp_path):
    _, spec = _float_raw(tmp_path, [1.0])
    assert spec.label_dtype == "float32" and spec.to_dict()["features"]["y"]["dtype"] == "float32"
    assert FeatureSpec.from_dict(spec.to_dict(), "again").label_dtype == "float32"
    named = {**spec.to_dict(), "class_names": ["a", "b"]}
    with pytest.raises(SpecError, match="label 'y' is float32 .*: no class_names"):
        FeatureSpec.from_dict(named, "f.json")
    wide = {
        **spec.to_dict(),
        "features": {**spec.to_dict()["features"], "y": {"dtype": "float32", "shape": [2]}},
    }
    with pytest.raises(SpecError, match="must be int64 .* or float32 .* with one value"):
        FeatureSpec.from_dict(wide, "f.json")
    assert check_example(
        example({"x": float_feature([0.0, 1.0]), "y": float_feature([2.5])}), spec
    ) == (2.5, "")
    bad = example({"x": float_feature([0.0, 1.0]), "y": float_feature([float("nan")])})
    assert check_example(bad, spec) == (
        -1,
        "label nan: a regression target must be a finite number",
    )
    ints = example({"x": float_feature([0.0, 1.0]), "y": int64_feature([1])})
    assert check_example(ints, spec) == (-1, "feature 'y': int64_list, features.json says float32")


def test_the_job_counts_a_float_labels_splits_without_classes_and_the_parser_gives_floats(tmp_path):
    train = [float(v) for v in range(-20, 20)]
    raw, _ = _float_raw(tmp_path, train, test_labels=[0.5, 1.5, 2.5])
    out = tmp_path / "out"
    meta = preprocess_tfrecord(TfrecordPreprocessConfig(str(raw), str(out)), BEAM_ARGS)
    assert meta["label_dtype"] == "float32" and meta["num_classes"] == 0
    assert "class_histogram" not in meta and meta["class_names"] == []
    assert meta["splits"]["test"] == 3 and sum(meta["splits"].values()) == 43
    summary = meta["target_summary"]
    assert summary["test"] == {"count": 3, "mean": 1.5, "std": pytest.approx(math.sqrt(2 / 3))}
    info = load_info(out)
    from distrain.learning.predict import split_labels

    labels = split_labels(info, "test")
    assert labels.dtype == np.float32 and labels.tolist() == [0.5, 1.5, 2.5]
    seen = np.concatenate([split_labels(info, s) for s in ("train", "validation")])
    assert sorted(seen.tolist()) == train
    # The baseline: the training labels' mean, scored on the test split.
    run, evaluation = REGRESSION.baseline(info)
    train_mean = float(np.mean(split_labels(info, "train"), dtype=np.float64))
    assert run["name"] == "mean" and evaluation["train_label_mean"] == train_mean
    assert evaluation["mse"] == pytest.approx(
        np.mean((np.array([0.5, 1.5, 2.5]) - train_mean) ** 2)
    )


@pytest.mark.case("tfrecord/float-label")
def test_a_nan_or_infinite_label_is_dead_lettered_naming_its_file_and_record(tmp_path):
    raw, _ = _float_raw(tmp_path, [1.0] * 300 + [float("nan"), float("-inf")])
    out = tmp_path / "out"
    meta = preprocess_tfrecord(TfrecordPreprocessConfig(str(raw), str(out)), BEAM_ARGS)
    assert meta["rejected"]["count"] == 2 and sum(meta["splits"].values()) == 300
    letters = [
        json.loads(line)
        for p in out.glob("dead_letter/*.jsonl")
        for line in p.read_text().splitlines()
    ]
    reason = "a regression target must be a finite number"
    assert sorted(letters, key=lambda d: d["record"]) == [
        {"file": "train-00000-of-00001.tfrecord", "record": 301, "reason": f"label nan: {reason}"},
        {"file": "train-00000-of-00001.tfrecord", "record": 302, "reason": f"label -inf: {reason}"},
    ]


def test_the_default_classifier_refuses_a_float_label_in_one_line(tmp_path):
    raw, _ = _float_raw(tmp_path, [float(v) for v in range(40)])
    out = tmp_path / "out"
    preprocess_tfrecord(TfrecordPreprocessConfig(str(raw), str(out)), BEAM_ARGS)
    info = load_info(out)
    with pytest.raises(datasets.DataSetError, match="label 'y' is float32, a regression target"):
        model_spec("tfrecord", "feature-mlp").build(info, 0)


def test_a_first_guess_loss_is_the_training_labels_variance(tmp_path):
    summary = {"target_summary": {"train": {"count": 9, "mean": 1.0, "std": 2.0}}}
    info = DatasetInfo(str(tmp_path), "tfrecord", 0, [], {}, {}, summary)
    assert REGRESSION.first_guess_loss(info) == 4.0  # easgd's adaptive period: 4 of them
    assert REGRESSION.first_guess_loss(DatasetInfo(str(tmp_path), "t", 0, [], {}, {}, {})) == 1.0
    ten = DatasetInfo(str(tmp_path), "mnist", 10, [], {}, {}, {})
    assert TASKS["classification"].first_guess_loss(ten) == math.log(10)


REGRESSOR = """import tf_keras as keras


def build(info, seed):
    inputs = info.feature_spec.keras_inputs(keras)
    return keras.Model(inputs, keras.layers.Dense(WIDTH)(inputs["x"]))
"""


def test_the_users_model_is_checked_for_its_task_in_one_line_naming_the_file(tmp_path):
    from distrain.datasets.info import FeatureSpec as InputSpec
    from distrain.learning import usermodel

    features = {"x": {"dtype": "float32", "shape": [2]}, "y": {"dtype": "float32", "shape": []}}
    spec = InputSpec.from_json({"features": features, "label": "y"})
    meta = {"label": "y", "label_dtype": "float32"}
    info = DatasetInfo(str(tmp_path), "tfrecord", 0, [], {}, {}, meta, feature_spec=spec)
    for width in (1, 3):
        path = tmp_path / f"m{width}.py"
        path.write_text(REGRESSOR.replace("WIDTH", str(width)))
        ref = usermodel.ModelReference.parse(f"{path}:build@regression")
        if width == 1:
            assert usermodel.build(ref, info, 0).outputs[0].shape[-1] == 1
            # The same file as a classifier: a float label is no class.
            classifier = usermodel.ModelReference.parse(f"{path}:build")
            with pytest.raises(usermodel.UserModelError, match="name the task, .*@regression"):
                usermodel.build(classifier, info, 0)
            continue
        with pytest.raises(usermodel.UserModelError) as err:
            usermodel.build(ref, info, 0)
        assert str(err.value) == (
            f"{path}:4: build's model: a regression model outputs one value per example "
            "([batch] or [batch, 1]), this one [None, 3]"
        )
