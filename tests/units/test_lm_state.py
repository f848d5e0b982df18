"""A language model's state: trained from zero too, scored whatever the cut, carried in sampling."""

import functools

import numpy as np
import pytest

from distrain.datasets.gutenberg.models import char_lstm
from distrain.learning import lm
from distrain.learning.lm import (
    StreamScorer,
    encode,
    recurrent_copy,
    scored_characters,
    stream_batches,
)

VOCAB = ["<oov>", *"abcdefgh ."]
LOG2 = np.log(2)


def _tiny_lstm(units=32, seed=1):
    import tf_keras as keras

    return keras.Sequential(
        [
            keras.layers.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(len(VOCAB), 8),
            keras.layers.LSTM(units, return_sequences=True, seed=seed),
            keras.layers.Dense(len(VOCAB)),
        ]
    )


@pytest.fixture(scope="module")
def trained():
    """A tiny LSTM trained on streams with its state carried, and a text it has not seen.

    The text repeats a random 30-character period: where a character is in the period
    is known only from the characters before it, so the state matters.
    """
    import tf_keras as keras

    keras.utils.set_random_seed(0)  # every layer's initial weights
    rng = np.random.default_rng(0)
    period = "".join(rng.choice(list("abcdefgh "), 30))
    x, y = stream_batches(encode(period * 80, VOCAB), batch_size=8, seq_len=15)
    model = recurrent_copy(_tiny_lstm(), 8)
    model.compile(keras.optimizers.Adam(0.02), keras.losses.SparseCategoricalCrossentropy(True))
    for _ in range(12):
        model.reset_states()
        model.fit(x.reshape(-1, 15), y.reshape(-1, 15), batch_size=8, shuffle=False, verbose=0)
    return model, [period[7:] + period * 5, period * 3 + "abc"]


# ---- point 2: the score does not depend on the cut ----------------------------------


def test_the_score_does_not_depend_on_how_the_text_is_cut(trained):
    """One pass over each whole text is the score; rows and warm-ups only change the work."""
    model, texts = trained
    reference = StreamScorer(model, streams=1, warmup=0).score(texts, VOCAB)
    assert reference.count == scored_characters(texts)
    ref_bits = reference.scores()["bits_per_char"]
    for streams in (3, 24):
        for warmup in (0, 200):
            scorer = StreamScorer(model, streams=streams, chunk=10, warmup=warmup)
            score = scorer.score(texts, VOCAB)
            assert score.count == reference.count
            bits = score.scores()["bits_per_char"]
            assert bits == pytest.approx(ref_bits, abs=1e-3), (streams, warmup, bits, ref_bits)
            assert len(score.rows) >= streams - 1 and scorer.passes >= 1
    # Each shard counts its own rows: together they are the whole score.
    parts = [StreamScorer(model, streams=8).score(texts, VOCAB, (2, i)) for i in range(2)]
    assert parts[0].count + parts[1].count == reference.count
    assert (parts[0].nats + parts[1].nats) / reference.count == pytest.approx(
        reference.nats / reference.count, abs=1e-3
    )


def test_rows_far_above_the_others_or_a_unigram_are_flagged(trained):
    from distrain.learning.lm import row_outliers, row_spread

    assert row_outliers([2.0, 2.1, 5.0, 1.9], [4.0] * 4) == [2]  # far above the others
    assert row_outliers([2.0, 2.1, 2.2, 1.9], [4.0, 4.0, 2.1, 4.0]) == [2]  # above the unigram
    assert row_outliers([2.0, 2.1, 2.2], [3.0] * 3) == []
    model, texts = trained
    score = StreamScorer(model, streams=6).score(texts, VOCAB)
    spread = row_spread(score.rows, texts, ["abcdefgh ." * 50], VOCAB, 6)
    bits = spread["row_bits_per_char"]
    assert len(bits) == len(score.rows) and spread["row_bits_per_char_max"] == pytest.approx(
        max(bits), abs=1e-3
    )
    assert spread["row_bits_per_char_min"] <= spread["row_bits_per_char_median"] <= max(bits)
    assert spread["outlier_rows"] == []  # a trained model on its own kind of text
    # A text unlike the training text in one row: that row is named.
    odd = [texts[0], "hhhhhhhhhh" * 6]
    score = StreamScorer(model, streams=4).score(odd, VOCAB)
    spread = row_spread(score.rows, odd, [texts[0]], VOCAB, 4)
    flagged = [r["row"] for r in spread["outlier_rows"]]
    assert flagged and all(r >= len(score.rows) - 1 for r in flagged), spread


def test_the_comparison_notes_the_rows_that_stand_out():
    from distrain.analysis.compare import build_comparison, render_markdown

    evaluation = {
        "bits_per_char": 3.1,
        "row_bits_per_char": [2.0, 2.1, 9.5, 1.9],
        "row_bits_per_char_min": 1.9,
        "row_bits_per_char_median": 2.05,
        "row_bits_per_char_max": 9.5,
        "outlier_rows": [{"row": 2, "bits_per_char": 9.5, "unigram_bits_per_char": 4.4}],
    }
    history = {"epochs": [], "train_seconds": 10.0, "examples_per_second": 1.0}
    run = {"name": "single:1", "mode": "single", "workers": 1}
    comparison = build_comparison([{"run": run, "history": history, "evaluation": evaluation}])
    assert comparison["rows"][0]["row_bits_per_char_max"] == 9.5
    note = next(n for n in comparison["notes"] if n.startswith("single:1"))
    assert "1 of 4 scored rows" in note and "row 2: 9.50 (unigram 4.40)" in note
    assert "worst row b/c" in render_markdown(comparison)
    from distrain.learning.tasks import NEXT_CHARACTER

    summary = {**evaluation, "perplexity": 8.6, "accuracy": 0.5, "temperature": 0.8}
    summary = NEXT_CHARACTER.markdown({**summary, "prompt": "a", "sample": "b"}, "lstm")
    assert "4 scored rows: min 1.900, median 2.050, max 9.500" in summary
    assert "row 2 stands out: 9.500 bits/char (a unigram model: 4.400)" in summary


# ---- point 3: sampling carries its state ---------------------------------------------


def test_sampling_carries_the_state_from_character_to_character(trained, monkeypatch):
    """Each character is sampled given all before it; after the prompt the model reads one."""
    import distrain.learning.predict as predict

    model, texts = trained
    prompt = texts[0][:40]
    free = recurrent_copy(model, None, stateful=False)
    rng, ids, expected = np.random.default_rng(3), list(encode(prompt, VOCAB)), []
    for _ in range(30):  # the reference: the whole text so far in one eager call each time
        logits = free(np.array([ids], dtype=np.int32), training=False).numpy()[0, -1]
        probs = np.exp(logits - logits.max())
        probs[0] = 0.0
        ids.append(int(rng.choice(len(probs), p=probs / probs.sum())))
        expected.append(VOCAB[ids[-1]])
    lengths = []
    graph_call = predict._graph_call

    def recording(model, select, shape):
        call = graph_call(model, select, shape)

        def run(x):
            lengths.append(x.shape[1])
            return call(x)

        return run

    monkeypatch.setattr(predict, "_graph_call", recording)
    sample = predict.generate_text(model, VOCAB, prompt, 30, temperature=1.0, seed=3, context=8)
    assert sample == "".join(expected)
    assert lengths == [len(prompt)] + [1] * 29  # the prompt once, then each new character


# ---- point 1: zero states trained -----------------------------------------------------


def _sample_data(tmp_path, chars_per_book):
    from distrain.datasets.gutenberg.beam import GutenbergPreprocessConfig, preprocess_gutenberg
    from distrain.datasets.gutenberg.sample import GutenbergSampleConfig, write_gutenberg_sample

    raw, data = tmp_path / "raw", tmp_path / "data"
    write_gutenberg_sample(raw, GutenbergSampleConfig(books=2, chars_per_book=chars_per_book))
    options = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
    preprocess_gutenberg(GutenbergPreprocessConfig(str(raw), str(data), seq_len=20), options)
    return data


def _small_default(monkeypatch, stream):
    """The data set's ``lstm`` made small (the same builder and training, fewer units)."""
    from distrain.datasets import ModelSpec
    from distrain.datasets.gutenberg import Gutenberg
    from distrain.learning.tasks import NEXT_CHARACTER

    build = functools.partial(char_lstm, units=64, embed=16, dropout=0)
    models = {**Gutenberg.models, "lstm": ModelSpec(build, NEXT_CHARACTER, stream=stream)}
    monkeypatch.setattr(Gutenberg, "models", models)


def _replica(data, tmp_path, run="single:1", **cfg):
    from distrain.train.config import TrainConfig
    from distrain.train.replica import Replica

    return Replica(TrainConfig(str(data), str(tmp_path / run), run=run, model="lstm", **cfg))


def test_stream_training_zeroes_rows_at_random_and_at_each_epoch_start(tmp_path, monkeypatch):
    """The traced step of a mode that carries state zeroes the drawn rows' state first."""
    import tensorflow as tf

    data = _sample_data(tmp_path, 4000)
    free_loss = tf.keras.losses.SparseCategoricalCrossentropy(True, reduction="sum")

    def second_batch_loss(probability):
        _small_default(monkeypatch, lm.StreamTraining(reset_probability=probability))
        replica = _replica(data, tmp_path, batch_size=4, seed=5)
        step, batches = replica.train_step(), iter(replica.train_shard(0))
        (x1, y1), (x2, y2) = next(batches), next(batches)
        step(x1, y1)
        for layer in replica.model.layers:  # a state far from zero, carried into x2
            for state in getattr(layer, "states", None) or []:
                state.assign(tf.ones_like(state))
        free = recurrent_copy(replica.model, None, stateful=False)  # after the first update
        from_zero = float(free_loss(y2, free(x2, training=False)))
        return float(step(x2, y2)[0]), from_zero, replica

    loss, from_zero, replica = second_batch_loss(1.0)  # every row, every batch
    assert loss == pytest.approx(from_zero, rel=2e-5), (loss, from_zero)
    loss, from_zero, _ = second_batch_loss(0.0)  # never: the state carries
    assert abs(loss - from_zero) > 2e-4 * from_zero
    # The draw: a stateless one per (seed, update), every row at an epoch's start.
    model = replica.model
    per_epoch = replica.batches_per_epoch()
    lstm = next(layer for layer in model.layers if type(layer).__name__ == "LSTM")
    stream = lm.StreamTraining(reset_probability=0.5)
    kept = []
    for update in (1, 2, per_epoch, 2 * per_epoch):
        for state in lstm.states:
            state.assign(tf.ones_like(state))
        lm.random_resets(model, stream, 7, tf.constant(update, tf.int64), per_epoch)
        kept.append(lstm.states[0].numpy()[:, 0].tolist())
    assert 0 < sum(kept[0]) < 4 and kept[0] != kept[1]  # some rows, a new draw each update
    assert sum(kept[2]) == sum(kept[3]) == 0  # epoch starts: all
    assert lm.StreamTraining().reset_probability > 0  # the default trains zero states


@pytest.mark.slow
def test_a_stream_trained_model_reads_on_from_a_zero_state(tmp_path, monkeypatch):
    """From a zero state at arbitrary offsets, the loss soon matches the carried state's.

    Trained only with its state carried, the model never sees a zero state after its first
    batch, and its first characters from one cost far more than with the carried state.
    """
    import tensorflow as tf

    from distrain.datasets.gutenberg.beam import read_texts

    data = _sample_data(tmp_path, 20000)
    _small_default(monkeypatch, lm.StreamTraining())  # the default zero-state training
    replica = _replica(data, tmp_path, batch_size=8, learning_rate=0.01, seed=0)
    step, batches = replica.train_step(), iter(replica.train_shard(0))
    for _ in range(600):
        step(*next(batches))
    vocabulary = replica.info.metadata["vocabulary"]
    ids = encode("".join(read_texts(data, "validation").values()), vocabulary)
    free = recurrent_copy(replica.model, None, stateful=False)

    def losses(x, y):
        logits = free(x, training=False)
        return tf.nn.sparse_softmax_cross_entropy_with_logits(y, logits).numpy() / LOG2

    carried = losses(ids[None, :-1], ids[None, 1:])[0]  # the whole text, state carried
    offsets = np.random.default_rng(0).integers(0, len(ids) - 101, 64)
    x = np.stack([ids[o : o + 100] for o in offsets])
    y = np.stack([ids[o + 1 : o + 101] for o in offsets])
    zero = losses(x, y)  # each window from a zero state
    same = np.stack([carried[o : o + 100] for o in offsets])
    assert zero.mean() - same.mean() < 0.075, (zero.mean(), same.mean())
    assert zero[:, :10].mean() - same[:, :10].mean() < 0.7, (zero[:, :10].mean(), same.mean())
