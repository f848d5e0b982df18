"""One scoring for language models and n-grams: each character once, state carried; streams."""

import math

import numpy as np
import pytest

from distrain.learning.lm import (
    StreamScorer,
    encode,
    known,
    score_ngrams,
    scored_characters,
    stream_batches,
    stream_ids,
)
from distrain.learning.ngram import KneserNeyModels, best_ngram

VOCAB = ["<oov>", *"abcdefgh ."]
TEXTS = ["abcab cabca bcab. " * 20 + "hgfe", "ddd eee fff. gha " * 15]


def test_kneser_ney_is_a_distribution_and_counts_each_character_once():
    model = KneserNeyModels(max_order=5, vocab_size=len(VOCAB)).fit(TEXTS)
    alphabet = [*VOCAB[1:], "\x00"]  # every symbol, the unknown one included
    for order in range(1, 6):
        for history in ("a", "abca", "zzzz", "bcab.", "hgfe"):  # the last char is scored
            probs = [math.exp(model.log_probs(history + c, [order])[order][-1]) for c in alphabet]
            assert sum(probs) == pytest.approx(1.0, abs=1e-9), (order, history)
    valid = ["abcab cab", "x", "", "hgfe dd"]
    for order, (_, count) in model.nats(valid, [3, 5]).items():
        assert count == scored_characters(valid) == 8 + 0 + 0 + 6, order


def test_kneser_ney_learns_and_the_best_order_is_reported():
    train = ["the cat sat on the mat. " * 40]
    valid = ["the mat sat on the cat. " * 5]
    order, per_order = best_ngram(train, valid, 30, orders=range(2, 6))
    assert set(per_order) == {2, 3, 4, 5}
    assert per_order[order] == min(per_order.values())
    assert per_order[order] < math.log(30) / 3  # far below a uniform guess
    order, scores = score_ngrams(train, valid, ["<oov>", *sorted(set(train[0]))], orders=[3, 4])
    assert scores["characters"] == scored_characters(valid)
    assert scores["bits_per_char"] == pytest.approx(scores["nats_per_char"] / math.log(2))
    assert set(scores["bits_per_char_by_order"]) == {"3", "4"}


def test_unknown_characters_are_one_symbol_for_models_and_ngrams():
    assert known("abZ.", VOCAB) == "ab\x00."
    assert encode("abZ.", VOCAB).tolist() == [1, 2, 0, 10]


def test_stream_batches_continue_each_row():
    ids = np.arange(1000, dtype=np.int32)
    x, y = stream_batches(ids, batch_size=4, seq_len=10)
    assert x.shape == y.shape == (24, 4, 10)  # (250 - 1) // 10 steps of 4 rows
    # Row b of batch i + 1 starts where row b of batch i ended: one contiguous stream.
    assert np.array_equal(x[1:, :, 0], x[:-1, :, -1] + 1)
    assert np.array_equal(y, x + 1)
    assert x[0, :, 0].tolist() == [0, 250, 500, 750]
    part = stream_ids(["abcd" * 10, "efgh" * 10], VOCAB, shard=(2, 1))
    assert len(part) == 40 and part[0] == VOCAB.index("e")


def _tiny_lstm(units=16, seed=0):
    import tf_keras as keras

    return keras.Sequential(
        [
            keras.layers.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(len(VOCAB), 8),
            keras.layers.LSTM(units, return_sequences=True, seed=seed),
            keras.layers.Dense(len(VOCAB)),
        ]
    )


def _full_pass_nats(model, texts):
    """The reference: each text in one call, every character after its first scored once."""
    import tensorflow as tf

    nats = count = 0
    for text in (t for t in texts if len(t) > 1):
        ids = encode(text, VOCAB)
        logits = model(ids[None, :-1], training=False)
        nats += float(
            tf.reduce_sum(tf.nn.sparse_softmax_cross_entropy_with_logits(ids[1:], logits[0]))
        )
        count += len(ids) - 1
    return nats, count


@pytest.mark.parametrize("streams, shards", [(1, 1), (3, 1), (4, 2)])
def test_model_scoring_counts_each_character_once(streams, shards):
    model = _tiny_lstm()
    texts = [*TEXTS, "a", "ab"]
    total = None
    for index in range(shards):
        scorer = StreamScorer(model, streams=streams, chunk=7, warmup=0 if streams == 1 else 5)
        part = scorer.score(texts, VOCAB, shard=(shards, index))
        total = part if total is None else (total.add(part) or total)
    assert total.count == scored_characters(texts)
    nats, count = _full_pass_nats(model, texts)
    assert total.count == count
    if streams == 1:  # one row per text, its state carried over every chunk: one long pass
        assert total.nats == pytest.approx(nats, rel=1e-5)


def test_windows_of_a_model_without_state_count_each_character_once():
    import tf_keras as keras

    model = keras.Sequential(
        [
            keras.layers.Input(shape=(None,), dtype="int32"),
            keras.layers.Embedding(len(VOCAB), len(VOCAB)),
        ]
    )
    texts = [*TEXTS, "ab"]
    score = StreamScorer(model, streams=5, context=12).score(texts, VOCAB)
    assert score.count == scored_characters(texts)
    # This model sees one character: any context gives the full pass's numbers.
    nats, _ = _full_pass_nats(model, texts)
    assert score.nats == pytest.approx(nats, rel=1e-5)


def test_a_model_carrying_state_scores_better_than_reset_every_window():
    """Trained on streams with its state carried, scored carried and reset every window."""
    import tf_keras as keras

    from distrain.learning.lm import recurrent_copy

    rng = np.random.default_rng(0)
    period = "".join(rng.choice(list("abcdefgh "), 30))
    text = period * 80
    x, y = stream_batches(encode(text, VOCAB), batch_size=8, seq_len=15)
    model = recurrent_copy(_tiny_lstm(units=32, seed=1), 8)  # stateful: rows are streams
    model.compile(keras.optimizers.Adam(0.02), keras.losses.SparseCategoricalCrossentropy(True))
    for _ in range(12):
        model.reset_states()
        model.fit(x.reshape(-1, 15), y.reshape(-1, 15), batch_size=8, shuffle=False, verbose=0)
    valid = [period * 6]
    carried = StreamScorer(model, streams=4, chunk=6, warmup=0).score(valid, VOCAB)
    reset = StreamScorer(model, streams=4, chunk=6, carry_state=False).score(valid, VOCAB)
    assert carried.count == reset.count == scored_characters(valid)
    carried_bits = carried.scores()["bits_per_char"]
    reset_bits = reset.scores()["bits_per_char"]
    assert carried_bits < 0.5 * reset_bits, (carried_bits, reset_bits)


def test_single_and_sync_carry_the_state_over_contiguous_streams(tmp_path):
    """The replica of a mode that carries state trains a stateful copy on stream batches."""
    from distrain.datasets.gutenberg.beam import GutenbergPreprocessConfig, preprocess_gutenberg
    from distrain.datasets.gutenberg.sample import GutenbergSampleConfig, write_gutenberg_sample
    from distrain.train.config import TrainConfig
    from distrain.train.replica import Replica

    raw, data = tmp_path / "raw", tmp_path / "data"
    write_gutenberg_sample(raw, GutenbergSampleConfig(books=2, chars_per_book=4000, seed=2))
    options = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]
    preprocess_gutenberg(GutenbergPreprocessConfig(str(raw), str(data), seq_len=20), options)

    def replica(run):
        cfg = TrainConfig(str(data), str(tmp_path / run), run=run, model="lstm", batch_size=4)
        return Replica(cfg)

    single = replica("single:1")
    lstm = next(layer for layer in single.model.layers if type(layer).__name__ == "LSTM")
    assert single.streams and lstm.stateful and single.model.input_shape == (4, None)
    batches = iter(single.train_shard(seed=0))
    (x1, y1), (x2, _) = next(batches), next(batches)
    assert x1.shape == (4, single.lm.bptt)  # rows of bptt characters
    # Each row of the next batch continues the same row of this one.
    assert np.array_equal(x2.numpy()[:, 0], y1.numpy()[:, -1])
    # The default LSTM's rate anneals to zero over the run's updates (5 epochs by default).
    assert single.optimizer.anneal_updates == single.batches_per_epoch() * 5 > 0
    step = single.train_step()
    step(x1, y1)
    assert float(np.abs(lstm.states[0].numpy()).sum()) > 0  # the state is kept for x2
    assert replica("sync:2").streams  # each rank its own part of the text (a shard)
    # A mode that does not carry state trains the same model on windows from a zero state.
    other = replica("async:2")
    assert not other.streams and not any(
        getattr(layer, "stateful", False) for layer in other.model.layers
    )
    # [ps] The optimizer that applies a parameter-server run's updates (on the servers)
    # anneals over the updates the chief counts, as every mode's does.
    from distrain.train.modes.asynchronous import AsyncRule
    from distrain.train.ps.graph import PSGraph
    from distrain.train.ps.roles import Role

    cluster = {"ps": ["localhost:1"], "worker": ["localhost:2", "localhost:3"]}
    shared = PSGraph(other.cfg, other.info, Role(cluster, "worker", 0), AsyncRule())
    assert shared.optimizer.anneal_updates == shared.per_epoch * 5 > 0


def test_the_learning_rate_anneals_along_a_half_cosine_to_zero():
    import math

    from distrain.learning.optim import Adam

    opt = Adam(0.004, anneal_updates=100)
    rate = [float(opt.step_size(float(s))) for s in (1, 51, 101, 150)]
    assert rate == pytest.approx([0.004, 0.002, 0.0, 0.0], abs=1e-9)
    assert float(opt.step_size(26.0)) == pytest.approx(0.004 * 0.5 * (1 + math.cos(math.pi / 4)))
    # With the per-epoch decay too, the two multiply.
    both = Adam(0.004, decay=0.99, anneal_updates=100)
    assert float(both.step_size(51.0)) == pytest.approx(0.004 * 0.99**50 * 0.5)
    assert float(Adam(0.004).step_size(1000.0)) == pytest.approx(0.004)  # neither: constant
