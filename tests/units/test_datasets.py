"""Data sets as plugins, and the tasks their models learn: known values in, the rule's out."""

from __future__ import annotations

import ast
import json

import numpy as np
import pytest

from distrain import datasets
from distrain.datasets import DataSetError
from distrain.datasets.gutenberg.beam import line_pairs
from distrain.learning.models import find_model, load_info
from distrain.learning.tasks import NEXT_CHARACTER, RECONSTRUCTION, TRANSLATION, markdown
from distrain.steps import StepError, check_parameters, fetch
from tests.conftest import ROOT


def test_registry_lists_each_data_set_once_and_model_names_are_unique():
    assert datasets.names() == ["mnist", "dbpedia", "gutenberg", "tfrecord"]
    every = [m for d in datasets.names() for m in datasets.get(d).models]
    assert len(every) == len(set(every))  # find_model relies on it
    assert find_model("convae").task is RECONSTRUCTION
    assert find_model("seq2seq").view == "pairs" and not find_model("seq2seq").stages
    with pytest.raises(DataSetError, match="unknown dataset 'imagenet'"):
        datasets.get("imagenet")
    with pytest.raises(DataSetError, match="no such model for mnist.*mlp, cnn"):
        datasets.get("mnist").model("lstm")
    # The user's code is resolved above the registry, which only tells it from a name.
    with pytest.raises(DataSetError, match="user's code: distrain.learning.models.model_spec"):
        datasets.get("mnist").model("m.py:build")
    assert find_model("m.py:build@reconstruction").task is RECONSTRUCTION


def _names_compared(tree) -> set[str]:
    """String constants compared with ``==``/``in`` anywhere in a module."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for part in [node.left, *node.comparators]:
                for sub in ast.walk(part):
                    if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                        found.add(sub.value)
    return found


def test_nothing_outside_the_data_set_modules_branches_on_a_data_set_name():
    names = set(datasets.names())
    offenders = []
    for path in [*ROOT.glob("distrain/**/*.py"), *ROOT.glob("components/*.py")]:
        if "datasets" in path.parts:
            continue  # a data set's own package: its plugin, Beam job, sample, parser
        hits = _names_compared(ast.parse(path.read_text())) & names
        if hits:
            offenders.append(f"{path.relative_to(ROOT)}: {sorted(hits)}")
    assert offenders == []


def test_unknown_data_set_and_model_fail_the_parameter_check(tmp_path):
    with pytest.raises(StepError, match="dataset 'imagenet'.*mnist, dbpedia, gutenberg"):
        check_parameters("imagenet", "sample", "single:1")
    with pytest.raises(StepError, match="no such model for dbpedia"):
        check_parameters("dbpedia", "sample", "single:1", model="convae")
    with pytest.raises(StepError, match="cannot be cut into stages"):
        check_parameters("gutenberg", "sample", "pipeline:2", model="seq2seq")
    with pytest.raises(StepError, match="no \\*.txt books"):
        fetch("gutenberg", str(tmp_path), tmp_path / "out")


def test_line_pairs_keep_only_lines_long_enough_and_start_the_target_at_the_break():
    text = "abcdefgh\nijklmnop\nqr\nstuvwxyz\n0123"
    assert line_pairs(text, 4, 3) == [("efgh", "\nijk"), ("wxyz", "\n012")]  # not qr
    assert line_pairs(text, 2, 2) == [
        ("gh", "\nij"),
        ("op", "\nqr"),
        ("qr", "\nst"),
        ("yz", "\n01"),
    ]


def test_reconstruction_losses_hits_and_scores_are_the_rule():
    import tensorflow as tf

    y = tf.constant([[0.0, 1.0], [0.2, 0.9]])
    logits = tf.constant([[0.0, 2.0], [-1.0, -0.5]])
    p = 1 / (1 + np.exp(-logits.numpy()))
    want = -(y.numpy() * np.log(p) + (1 - y.numpy()) * np.log(1 - p))
    np.testing.assert_allclose(RECONSTRUCTION.losses(y, logits).numpy(), want, rtol=1e-6)
    # Same side of 0.5: pixel 0 (0.0 vs 0.5 is not above), 1, 2; pixel 3 (0.9 vs 0.38) not.
    assert RECONSTRUCTION.hits(y, logits).numpy().tolist() == [[1, 1], [1, 0]]

    class Info:
        metadata = {"image_shape": [28, 28]}

    assert RECONSTRUCTION.labels_per_example(Info()) == 784
    text = markdown({"task": "reconstruction", "reconstruction_mse": 0.01, "psnr": 20.0}, "t")
    assert "reconstruction mse: 0.0100" in text and "psnr: 20.0000" in text


def test_sequence_tasks_count_their_own_labels():
    class Info:
        metadata = {"seq_len": 100, "target_len": 32}

    assert NEXT_CHARACTER.labels_per_example(Info()) == 100
    assert TRANSLATION.labels_per_example(Info()) == 32


@pytest.fixture(scope="module")
def gutenberg_examples(tmp_path_factory):
    from distrain.steps import preprocess

    raw = tmp_path_factory.mktemp("gutenberg_raw")
    out = tmp_path_factory.mktemp("gutenberg_examples")
    fetch("gutenberg", "sample", raw, sample_size=30000, seed=2)
    preprocess("gutenberg", raw, out)
    return out


def test_gutenberg_writes_line_pairs_the_seq2seq_view_reads(gutenberg_examples):
    from distrain.datasets.gutenberg.beam import read_texts
    from distrain.learning.inputs import make_dataset

    info = load_info(gutenberg_examples, "seq2seq")
    assert info.view_name == "pairs" and info.metadata["target_len"] == 32
    expected = sum(
        len(line_pairs(t, 48, 32)) for t in read_texts(gutenberg_examples, "train").values()
    )
    assert info.splits["train"] == expected > 0
    (source, decoder_in), target = next(iter(make_dataset(info, "train", 4)))
    assert source.shape == (4, 48) and decoder_in.shape == target.shape == (4, 32)
    # Teacher forcing: the decoder reads the target shifted right, starting at the break.
    newline = info.metadata["vocabulary"].index("\n")
    assert (decoder_in[:, 0].numpy() == newline).all()
    np.testing.assert_array_equal(decoder_in[:, 1:].numpy(), target[:, :-1].numpy())
    # The language models still read the windows.
    lm = load_info(gutenberg_examples, "lstm")
    assert lm.splits == json.loads((gutenberg_examples / "metadata.json").read_text())["splits"]


def test_reconstruction_view_pairs_each_image_with_itself(mnist_examples):
    from distrain.learning.inputs import make_dataset

    x, y = next(iter(make_dataset(load_info(mnist_examples, "convae"), "test", 8)))
    np.testing.assert_array_equal(x.numpy(), y.numpy())
    _, labels = next(iter(make_dataset(load_info(mnist_examples, "mlp"), "test", 8)))
    assert labels.dtype.name == "int32" and labels.shape == (8,)


def test_mean_image_baseline_is_the_training_mean(mnist_examples):
    from distrain.learning.predict import split_labels
    from distrain.steps import baseline

    result = baseline(mnist_examples, "convae")
    assert result["run"]["name"] == "mean image" and result["run"]["mode"] == "baseline"
    info = load_info(mnist_examples, "convae")
    mean = split_labels(info, "train").mean(axis=0)
    test = split_labels(info, "test")
    want = float(((test - mean) ** 2).mean())
    assert result["evaluation"]["reconstruction_mse"] == pytest.approx(want, rel=1e-5)
    assert result["evaluation"]["psnr"] == pytest.approx(10 * np.log10(1 / want), rel=1e-5)


@pytest.mark.slow
def test_convae_and_seq2seq_train_and_are_scored_in_their_terms(
    mnist_examples, gutenberg_examples, tmp_path
):
    from distrain.steps import evaluate
    from distrain.train.config import TrainConfig
    from distrain.train.launch import run_training

    runs = [  # the autoencoder needs ~250 steps to leave the mean image behind
        (mnist_examples, "convae", "reconstruction_mse", 6),
        (gutenberg_examples, "seq2seq", "bits_per_char", 2),
    ]
    for data, model, key, epochs in runs:
        out = tmp_path / model
        cfg = TrainConfig(
            data_dir=str(data),
            output_dir=str(out),
            run="single:1",
            model=model,
            epochs=epochs,
            batch_size=32,
        )
        history = run_training(cfg, timeout=300)
        losses = [e["loss"] for e in history["epochs"]]
        assert losses[-1] < losses[0], (model, losses)
        report = evaluate(data, out)
        assert report["evaluation"]["task"] == find_model(model).task.name
        assert report["evaluation"][key] > 0
    # The autoencoder beats the mean image it is compared with.
    from distrain.steps import baseline

    mean_image = baseline(mnist_examples, "convae")["evaluation"]["reconstruction_mse"]
    assert evaluate(mnist_examples, tmp_path / "convae")["evaluation"]["reconstruction_mse"] < (
        mean_image
    )


def test_the_default_model_is_the_preprocessed_data_sets_own(mnist_examples, gutenberg_examples):
    # distrain train without --model trains the data set's default, not MNIST's mlp.
    assert datasets.default_model(mnist_examples) == "mlp"
    assert datasets.default_model(gutenberg_examples) == "lstm"
