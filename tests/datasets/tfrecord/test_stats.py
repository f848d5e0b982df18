"""What the tfrecord job computes for a model from the training split (issue 48, point 5):
each numeric feature's statistics, each bytes feature's vocabulary, and ``info``'s view."""

from __future__ import annotations

import json
import random
from dataclasses import replace

import numpy as np
import pytest

from distrain.datasets.info import DataError
from distrain.datasets.testing import BEAM_ARGS
from distrain.datasets.tfrecord.beam import TfrecordPreprocessConfig, preprocess_tfrecord
from distrain.datasets.tfrecord.sample import MIXED_SPEC, mixed_records, write_frames
from distrain.datasets.tfrecord.spec import FeatureSpec, SpecError
from distrain.learning.models import load_info
from distrain.preprocess.analyzers import MomentsFn, TopKFn, TopTokens, merge_moments
from distrain.preprocess.records import bytes_feature, example, float_feature, int64_feature
from distrain.preprocess.tokens import tokens


def _pipeline():
    import apache_beam as beam
    from apache_beam.testing.test_pipeline import TestPipeline

    return TestPipeline(options=beam.options.pipeline_options.PipelineOptions(list(BEAM_ARGS)))


def test_moments_of_known_values_per_element_in_a_pipeline():
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    # Two features, two batches each: x element-wise over [1, 2, 3, 4] and [10, 20, 30, 40].
    batches = [
        ("x", np.array([[1.0, 10.0], [2.0, 20.0]])),
        ("n", np.array([[5], [-3]], dtype=np.int64)),
        ("x", np.array([[3.0, 30.0], [4.0, 40.0]])),
        ("n", np.array([[7]], dtype=np.int64)),
    ]
    with _pipeline() as p:
        out = p | beam.Create(batches) | beam.CombinePerKey(MomentsFn())
        assert_that(
            out,
            equal_to(
                [
                    (
                        "x",
                        {
                            "count": 4,
                            "mean": [2.5, 25.0],
                            "variance": [1.25, 125.0],
                            "min": [1.0, 10.0],
                            "max": [4.0, 40.0],
                        },
                    ),
                    # mean 3, deviations 2, -6, 4: variance 56 / 3; ints stay ints
                    (
                        "n",
                        {"count": 3, "mean": [3.0], "variance": [56 / 3], "min": [-3], "max": [7]},
                    ),
                ]
            ),
        )


def test_moments_merge_is_exact_for_a_mean_far_from_zero_in_any_grouping():
    # 1e9 + 0..99: the variance of 0..99 (833.25), which a sum of squares loses (1e18 + ...).
    values = 1e9 + np.arange(100.0)
    fn = MomentsFn()
    for seed in range(3):
        order = np.random.default_rng(seed).permutation(values)
        parts = [fn.add_input(None, order[i : i + 7]) for i in range(0, 100, 7)]
        merged = fn.extract_output(fn.merge_accumulators(parts))
        assert merged["count"] == 100
        assert merged["mean"] == [pytest.approx(1e9 + 49.5, abs=1e-6)]
        assert merged["variance"] == [pytest.approx(833.25, rel=1e-9)]
    naive = float(np.mean(values**2) - np.mean(values) ** 2)
    assert abs(naive - 833.25) > 1.0  # the formula the merge avoids would be wrong
    assert merge_moments(None, None) is None and fn.extract_output(None) == {"count": 0}


def test_top_k_keeps_the_most_frequent_ties_by_token_and_any_order_gives_the_same():
    import apache_beam as beam
    from apache_beam.testing.util import assert_that, equal_to

    # Partial counts, as batches give them: a 3 (2 + 1), b 3, c 2, d 2, e 1.
    partial = [("a", 2), ("b", 3), ("c", 2), ("a", 1), ("e", 1), ("d", 1), ("d", 1)]
    expected = {"tokens": ["a", "b", "c"], "counts": [3, 3, 2], "distinct": 5}
    for seed in range(3):
        shuffled = random.Random(seed).sample(partial, len(partial))
        with _pipeline() as p:
            out = p | beam.Create([(("f", token), n) for token, n in shuffled]) | TopTokens(3)
            assert_that(out, equal_to([("f", expected)]))
    # The accumulator stays within 2k entries whatever the number of tokens.
    fn = TopKFn(5)
    acc = fn.create_accumulator()
    for i in range(10_000):
        acc = fn.add_input(acc, (f"t{i:05d}", i % 7))
        assert len(acc[0]) <= 10
    assert fn.extract_output(acc)["tokens"] == ["t00006", "t00013", "t00020", "t00027", "t00034"]
    with pytest.raises(ValueError, match="positive"):
        TopKFn(0)


def test_the_words_tokenizer_splits_as_text_vectorization_does():
    import tensorflow as tf
    from tf_keras.src.layers.preprocessing.text_vectorization import DEFAULT_STRIP_REGEX

    texts = [b"Very GOOD, it's fine!  the\tBOX.", b"caf\xc3\xa9 \xc3\x89t\xc3\xa9 A-b (x)"]
    for text in texts:
        standard = tf.strings.regex_replace(tf.strings.lower(text), DEFAULT_STRIP_REGEX, "")
        assert tokens(text, "words") == tf.strings.split(standard).numpy().tolist()
    assert tokens(b"Red Wine", "value") == [b"Red Wine"]
    with pytest.raises(ValueError, match="unknown tokenizer"):
        tokens(b"x", "chars")


def test_features_json_names_a_bytes_features_tokenizer_and_refuses_others():
    spec = FeatureSpec.from_dict(MIXED_SPEC, "f.json")
    assert spec.features["review"].tokenizer == "words"
    assert spec.features["colour"].tokenizer == ""
    assert spec.to_dict()["features"]["review"]["tokenizer"] == "words"
    for feature, tokenizer in (("amount", "words"), ("colour", "chars")):
        raw = json.loads(json.dumps(MIXED_SPEC))
        raw["features"][feature]["tokenizer"] = tokenizer
        with pytest.raises(SpecError, match=f"f.json: feature '{feature}': tokenizer"):
            FeatureSpec.from_dict(raw, "f.json")


def _folder(path, spec, train: list[bytes], test: list[bytes]):
    path.mkdir(parents=True)
    (path / "features.json").write_text(json.dumps(spec))
    write_frames(path / "train-00000-of-00001.tfrecord", train)
    write_frames(path / "test-00000-of-00001.tfrecord", test)
    return path


def _train_values(out):
    """Each feature's values in the written train split, read back with TensorFlow."""
    import tensorflow as tf

    spec = {
        "amount": tf.io.FixedLenFeature([], tf.float32),
        "store": tf.io.FixedLenFeature([], tf.int64),
        "colour": tf.io.FixedLenFeature([], tf.string),
    }
    files = sorted(str(p) for p in (out / "train").glob("*.tfrecord"))
    rows = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(files)]
    return {k: np.array([r[k].numpy() for r in rows]) for k in spec}


def test_statistics_and_vocabularies_come_from_the_train_split_only(tmp_path):
    train = mixed_records(400, seed=3)
    first = _folder(tmp_path / "a", MIXED_SPEC, train, mixed_records(100, seed=4))
    # Another test split, far from the training data: statistics must not move.
    odd = [
        example(
            {
                "amount": float_feature([1e7]),
                "store": int64_feature([999]),
                "colour": bytes_feature([b"purple"]),
                "review": bytes_feature([b"never seen words"]),
                "label": int64_feature([0]),
            }
        )
    ] * 50
    second = _folder(tmp_path / "b", MIXED_SPEC, train, odd)
    metas = [
        preprocess_tfrecord(
            TfrecordPreprocessConfig(str(raw), str(tmp_path / f"out{i}")), list(BEAM_ARGS)
        )
        for i, raw in enumerate((first, second))
    ]
    for key in ("statistics", "vocabularies"):
        assert metas[0][key] == metas[1][key]
    # And they are the train split's (validation held out of it too), to the last digit.
    values = _train_values(tmp_path / "out0")
    stats = metas[0]["statistics"]
    assert stats["amount"]["count"] == len(values["amount"]) == metas[0]["splits"]["train"]
    assert stats["amount"]["mean"] == [pytest.approx(values["amount"].astype(float).mean())]
    assert stats["amount"]["variance"] == [pytest.approx(values["amount"].astype(float).var())]
    assert stats["store"]["min"] == [int(values["store"].min())]
    assert stats["store"]["max"] == [int(values["store"].max())]
    colours, counts = np.unique(values["colour"], return_counts=True)
    ranked = sorted(
        zip(colours.tolist(), counts.tolist(), strict=True), key=lambda tc: (-tc[1], tc[0])
    )
    colour = metas[0]["vocabularies"]["colour"]
    assert list(zip(colour["tokens"], colour["counts"], strict=True)) == [
        (t.decode(), n) for t, n in ranked
    ]
    assert (
        colour["tokenizer"] == "value"
        and metas[0]["vocabularies"]["review"]["tokenizer"] == "words"
    )
    # Other training records give other statistics (the comparison above can fail).
    third = _folder(tmp_path / "c", MIXED_SPEC, mixed_records(400, seed=5), odd)
    other = preprocess_tfrecord(
        TfrecordPreprocessConfig(str(third), str(tmp_path / "out2")), list(BEAM_ARGS)
    )
    assert other["statistics"] != metas[0]["statistics"]


@pytest.mark.case("tfrecord/vocabulary-bounded")
def test_a_huge_vocabulary_keeps_metadata_bounded_and_counts_what_it_leaves_out(tmp_path):
    spec = {
        "features": {
            "tag": {"dtype": "bytes", "shape": [2]},
            "label": {"dtype": "int64", "shape": []},
        },
        "label": "label",
    }
    records = []
    for i in range(6000):
        # Two distinct tags per record (12,000 in all), one long one now and then and
        # a value that is not UTF-8; "common" in every record.
        tag = b"x" * 300 if i % 100 == 0 else (b"\xff\xfe" if i % 100 == 1 else f"tag{i}".encode())
        records.append(
            example({"tag": bytes_feature([b"common", tag]), "label": int64_feature([i % 2])})
        )
    raw = _folder(tmp_path / "raw", spec, records, records[:10])
    out = tmp_path / "out"
    cfg = TfrecordPreprocessConfig(str(raw), str(out), vocabulary_size=50, max_token_bytes=64)
    meta = preprocess_tfrecord(cfg, list(BEAM_ARGS))
    vocabulary = meta["vocabularies"]["tag"]
    assert len(vocabulary["tokens"]) == 50 and vocabulary["tokens"][0] == "common"
    assert vocabulary["counts"][0] == meta["splits"]["train"]
    assert (
        vocabulary["distinct"]
        == meta["splits"]["train"]
        - vocabulary["skipped"]["too_long"]
        - vocabulary["skipped"]["not_utf8"]
        + 1
    )
    assert vocabulary["skipped"]["too_long"] > 0 and vocabulary["skipped"]["not_utf8"] > 0
    # At most 50 tokens of at most 64 bytes: a few kilobytes, whatever the distinct count.
    assert (out / "metadata.json").stat().st_size < 20_000
    with pytest.raises(ValueError, match="vocabulary_size and max_token_bytes must be positive"):
        TfrecordPreprocessConfig(str(raw), str(out), vocabulary_size=0)


def test_info_hands_the_statistics_and_vocabularies_to_the_model_builder(tmp_path):
    import tensorflow as tf

    spec = {
        "features": {
            "grid": {"dtype": "float32", "shape": [2, 2]},
            "amount": {"dtype": "float32", "shape": []},
            "review": {"dtype": "bytes", "shape": [], "tokenizer": "words"},
            "label": {"dtype": "int64", "shape": []},
        },
        "label": "label",
    }
    records = [
        example(
            {
                "grid": float_feature([i, 2 * i, -i, 1.0]),
                "amount": float_feature([i % 7]),
                "review": bytes_feature([b"A b." if i % 3 else b"b c"]),
                "label": int64_feature([i % 2]),
            }
        )
        for i in range(300)
    ]
    raw = _folder(tmp_path / "raw", spec, records, records[:20])
    out = tmp_path / "out"
    preprocess_tfrecord(TfrecordPreprocessConfig(str(raw), str(out)), list(BEAM_ARGS))
    info = load_info(out, "examples/mixed_model.py:build")
    files = sorted(str(p) for p in (out / "train").glob("*.tfrecord"))
    parse = {"grid": tf.io.FixedLenFeature([2, 2], tf.float32)}
    kept = np.array(
        [
            tf.io.parse_single_example(r, parse)["grid"].numpy()
            for r in tf.data.TFRecordDataset(files)
        ]
    )
    grid = info.statistics["grid"]
    assert grid.count == len(kept) == info.splits["train"]
    assert grid.mean.shape == grid.variance.shape == grid.min.shape == (2, 2)
    assert grid.mean == pytest.approx(kept.mean(axis=0).astype(float))
    assert grid.variance == pytest.approx(kept.astype(float).var(axis=0))
    assert (grid.min == kept.min(axis=0)).all() and (grid.max == kept.max(axis=0)).all()
    assert info.statistics["amount"].mean.shape == ()
    # overall(): all values together, exact from the element-wise statistics.
    held = grid.overall()
    assert held.count == 4 * len(kept)
    assert float(held.mean) == pytest.approx(kept.astype(float).mean())
    assert float(held.variance) == pytest.approx(kept.astype(float).var())
    assert float(held.min) == kept.min() and float(held.max) == kept.max()
    # The vocabulary as StringLookup and TextVectorization take it: no reserved token.
    assert info.vocabulary("review") == ["b", "a", "c"]
    with pytest.raises(DataError, match="no vocabulary for 'amount'"):
        info.vocabulary("amount")
    # A data set whose preprocessing computes none says so.
    older = replace(info, metadata={k: v for k, v in info.metadata.items() if k != "statistics"})
    with pytest.raises(DataError, match="no feature statistics"):
        _ = older.statistics


def test_reserved_tokens_are_left_out_unless_asked_for(tmp_path):
    info = replace(
        _bare_info(),
        metadata={"vocabularies": {"v": {"tokens": ["x", "", "[UNK]", "y"]}}},
    )
    assert info.vocabulary("v") == ["x", "y"]
    assert info.vocabulary("v", reserved=True) == ["x", "", "[UNK]", "y"]


def _bare_info():
    from distrain.datasets.info import DatasetInfo

    return DatasetInfo("d", "tfrecord", 2, ["0", "1"], {"train": 1}, {}, {})
