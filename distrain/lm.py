"""Character language models: one scoring for models and n-grams, and contiguous training streams.

Every language model and baseline is scored the same way: bits per character over the
contiguous validation text of each book, each character after the book's first scored
exactly once, from the characters before it (a recurrent model carries its state along the
text; an n-gram reads its context), with one rule for characters outside the training
vocabulary (all of them are the one unknown symbol, id 0). Training of the stream models
reads the training text as contiguous streams, one per batch row, so that a stateful model
carries its state from one batch to the next (truncated backpropagation through time).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

# Recurrent layers whose state a stateful copy carries.
RECURRENT_LAYERS = ("LSTM", "GRU", "SimpleRNN")


@dataclass(frozen=True)
class StreamTraining:
    """How a stream model trains (:attr:`distrain.datasets.ModelSpec.stream`).

    Attributes:
        clip_norm: Gradients are clipped to this global norm (0: not clipped).
        decay_per_epoch: The learning rate is multiplied by this every epoch's worth of
            updates (smoothly, per update; 1: constant).
        evaluation_streams: Streams scored side by side in validation.
        bptt: Characters per batch row: the steps backpropagation goes back through.
        anneal: The learning rate falls along a half cosine to zero over the run's
            epochs (with ``--until-plateau``, the most it may run): the last updates are
            small, which averages out their noise.
    """

    clip_norm: float = 1.0
    decay_per_epoch: float = 1.0
    evaluation_streams: int = 32
    bptt: int = 50
    anneal: bool = False

    def decay_per_update(self, updates_per_epoch: int) -> float:
        """The learning rate's factor per update that makes :attr:`decay_per_epoch` an epoch."""
        return self.decay_per_epoch ** (1.0 / max(updates_per_epoch, 1))

    def schedule(self, updates_per_epoch: int, epochs: int) -> dict:
        """The optimizer's schedule arguments (:class:`distrain.train.optim.Adam`) for a run.

        Every mode's optimizer takes them from here, whichever process applies the
        updates, so that a comparison of modes trains each on the same schedule.
        """
        return {
            "decay": self.decay_per_update(updates_per_epoch),
            "anneal_updates": updates_per_epoch * epochs if self.anneal else 0,
        }


def char_lstm(info, seed: int, units: int = 512, layers: int = 1, embed: int = 64, dropout=0.25):
    """The default character language model: an embedding, LSTM layer(s), logits per step.

    Dropout after each LSTM layer: without it, on 1 MB of real prose, the training text's
    bits/char fell 0.26 below the validation text's within 7 epochs.

    Built for any batch and without state; training in a mode that carries state, and
    scoring, use its stateful copy (:func:`recurrent_copy`).
    """
    import tf_keras as keras

    vocab = info.metadata["vocab_size"]
    stack = [
        keras.layers.Input(shape=(None,), dtype="int32"),
        keras.layers.Embedding(
            vocab, embed, embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed)
        ),
    ]
    for i in range(layers):
        stack.append(
            keras.layers.LSTM(
                units,
                return_sequences=True,
                kernel_initializer=keras.initializers.GlorotUniform(seed + 1 + i),
                recurrent_initializer=keras.initializers.Orthogonal(seed=seed + 10 + i),
            )
        )
        if dropout:
            stack.append(keras.layers.Dropout(dropout, seed=seed + 30 + i))
    stack.append(
        keras.layers.Dense(vocab, kernel_initializer=keras.initializers.GlorotUniform(seed + 20))
    )
    return keras.Sequential(stack, name="gutenberg_char_lstm")


# ---- the unknown-character rule --------------------------------------------------------


def encode(text: str, vocabulary: list[str]) -> np.ndarray:
    """Character ids of ``text`` (int32); characters outside the vocabulary are 0."""
    index = {c: i for i, c in enumerate(vocabulary)}
    return np.fromiter((index.get(c, 0) for c in text), np.int32, len(text))


def known(text: str, vocabulary: list[str]) -> str:
    """``text`` with every character outside the vocabulary replaced by one symbol (NUL)."""
    vocab = set(vocabulary[1:])
    return "".join(c if c in vocab else "\x00" for c in text)


def scored_characters(texts) -> int:
    """How many characters the scoring counts: each text's characters after its first."""
    return sum(max(len(t) - 1, 0) for t in texts)


# ---- training streams ------------------------------------------------------------------


def stream_ids(texts, vocabulary: list[str], shard: tuple[int, int] = (1, 0)) -> np.ndarray:
    """This shard's contiguous part of the books' text, as ids (books joined in name order).

    ``shard``: ``(num_shards, index)``: the text is cut into ``num_shards`` equal parts.
    """
    ids = encode("".join(texts), vocabulary)
    num_shards, index = shard
    part = len(ids) // num_shards
    return ids[index * part : (index + 1) * part]


def stream_steps(length: int, batch_size: int, seq_len: int) -> int:
    """Batches of ``seq_len`` steps in one pass over ``length`` ids cut into ``batch_size`` rows."""
    return max(0, (length // batch_size - 1) // seq_len)


def stream_batches(ids: np.ndarray, batch_size: int, seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """One pass of stream batches: ``(x, y)`` of shape ``[steps, batch_size, seq_len]``.

    Row ``b`` of every batch is the next ``seq_len`` characters of stream ``b`` (the
    ``b``-th of ``batch_size`` equal parts of ``ids``), so a state carried from a batch's
    row to the next batch's same row continues the text. ``y`` is ``x`` one character on.
    """
    steps = stream_steps(len(ids), batch_size, seq_len)
    if steps == 0:
        raise ValueError(
            f"{len(ids)} characters do not make one batch of {batch_size} streams of {seq_len} + 1"
        )
    rows = ids[: (len(ids) // batch_size) * batch_size].reshape(batch_size, -1)
    span = steps * seq_len
    x = rows[:, :span].reshape(batch_size, steps, seq_len).transpose(1, 0, 2)
    y = rows[:, 1 : span + 1].reshape(batch_size, steps, seq_len).transpose(1, 0, 2)
    return np.ascontiguousarray(x), np.ascontiguousarray(y)


def stream_dataset(
    info, split: str, batch_size: int, *, shard=(1, 0), repeat: bool = False, seq_len: int = 0
):
    """The split's text as stream batches: a ``tf.data.Dataset`` of ``(x, y)``, in order.

    Never shuffled (the order is what carries the state); each epoch is the same pass.
    ``info``: the data set's :class:`distrain.train.inputs.DatasetInfo`; ``seq_len``:
    characters per row (default: the data set's window).
    """
    import tensorflow as tf

    from distrain.preprocess.gutenberg import read_texts

    texts = read_texts(info.data_dir, split).values()
    ids = stream_ids(texts, info.metadata["vocabulary"], shard)
    x, y = stream_batches(ids, batch_size, seq_len or int(info.metadata["seq_len"]))
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    return ds.repeat() if repeat else ds


def stream_batches_per_epoch(info, batch_size: int, shard=(1, 0), seq_len: int = 0) -> int:
    """Training batches in one pass over this shard's streams (rows of ``seq_len``)."""
    from distrain.preprocess.gutenberg import read_texts

    length = sum(len(t) for t in read_texts(info.data_dir, "train").values()) // shard[0]
    return max(1, stream_steps(length, batch_size, seq_len or int(info.metadata["seq_len"])))


# ---- models with state -----------------------------------------------------------------


def is_recurrent(model) -> bool:
    """Whether the model has a recurrent layer (whose state scoring carries)."""
    return any(type(layer).__name__ in RECURRENT_LAYERS for layer in model.layers)


def recurrent_copy(model, batch_size: int | None, stateful: bool = True):
    """The same Sequential model (same weights) for batches of ``batch_size``, stateful or not.

    A stateful recurrent layer keeps each row's last state for the next call, so a batch
    of rows that continue the previous batch's rows is read as one long sequence.
    """
    import tf_keras as keras

    config = model.get_config()
    for layer in config["layers"]:
        if layer["class_name"] == "InputLayer":
            shape = list(layer["config"]["batch_input_shape"])
            layer["config"]["batch_input_shape"] = [batch_size, *shape[1:]]
        elif layer["class_name"] in RECURRENT_LAYERS:
            layer["config"]["stateful"] = stateful
    copy = keras.Sequential.from_config(config)
    copy.set_weights(model.get_weights())
    return copy


# ---- scoring ---------------------------------------------------------------------------


@dataclass
class Score:
    """Summed negative log-likelihood (nats), correct next-character guesses, characters."""

    nats: float = 0.0
    correct: float = 0.0
    count: int = 0

    def add(self, other: Score) -> None:
        self.nats += other.nats
        self.correct += other.correct
        self.count += other.count

    def scores(self) -> dict:
        """Nats/char, bits/char, perplexity and accuracy (see :func:`language_model_scores`)."""
        if not self.count:
            raise ValueError("no characters to score")
        return language_model_scores(self.nats / self.count, self.correct / self.count)


def language_model_scores(nats_per_char: float, accuracy: float | None = None) -> dict:
    """Nats/char, bits/char and perplexity (per character) of a language model."""
    return {
        "nats_per_char": nats_per_char,
        "bits_per_char": nats_per_char / math.log(2),
        "perplexity": math.exp(nats_per_char),
        "accuracy": accuracy,
    }


def _rows(texts, vocabulary, streams: int, warmup: int):
    """The scored texts cut into about ``streams`` rows: (inputs, targets, scored mask).

    A book's ``n - 1`` predictions are cut into parts in proportion to its length; each
    part's row starts up to ``warmup`` characters before the part (inputs whose
    predictions are not counted: they give the state its context), so that every
    character is counted in exactly one row.
    """
    ids = [encode(t, vocabulary) for t in texts if len(t) > 1]
    total = sum(len(i) - 1 for i in ids)
    rows = []
    for book in ids:
        n = len(book) - 1
        parts = max(1, round(streams * n / total))
        bounds = np.linspace(0, n, parts + 1).astype(int)
        for a, b in zip(bounds[:-1], bounds[1:], strict=True):
            if b <= a:
                continue
            s = max(0, a - warmup)
            mask = np.zeros(b - s, np.float32)
            mask[a - s :] = 1.0
            rows.append((book[s:b], book[s + 1 : b + 1], mask))
    return rows


class StreamScorer:
    """Scores a model over contiguous texts, each character once (see the module's words).

    A recurrent model runs as a stateful copy over ``streams`` rows side by side, in
    chunks of ``chunk`` characters, its state carried along each row (``carry_state``
    False: reset before every chunk, as a model trained on windows from a zero state
    sees them). Other models see a context of the ``context`` characters before each
    scored one, in windows that overlap by half.

    Args:
        model: A Keras model from ids ``[batch, time]`` to logits ``[batch, time, vocab]``.
        streams: Rows scored side by side.
        chunk: Characters per call.
        warmup: Characters of a row read before its first scored one (recurrent models).
        carry_state: Carry a recurrent model's state from one chunk to the next.
        context: A non-recurrent model's window.
    """

    def __init__(
        self,
        model,
        streams: int = 32,
        chunk: int = 100,
        warmup: int = 200,
        carry_state: bool = True,
        context: int = 0,
    ):
        import tensorflow as tf

        self.recurrent = is_recurrent(model)
        self.streams, self.chunk, self.warmup = streams, chunk, warmup
        self.carry_state, self.context = carry_state, context
        self.model = recurrent_copy(model, streams) if self.recurrent else model
        batch = streams if self.recurrent else None

        @tf.function(input_signature=[tf.TensorSpec([batch, None], tf.int32)] * 2)
        def step(x, y):
            logits = self.model(x, training=False)
            nats = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=y, logits=logits)
            hits = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32), y), tf.float32)
            return nats, hits

        self.step = step

    def set_weights(self, model) -> None:
        """Scores ``model``'s current weights next (the copy of a model being trained)."""
        if self.model is not model:
            self.model.set_weights(model.get_weights())

    def score(self, texts, vocabulary: list[str], shard=(1, 0)) -> Score:
        """Scores the texts' characters after each text's first (this shard's rows of them)."""
        if self.recurrent:
            return self._score_recurrent(texts, vocabulary, shard)
        return self._score_windows(texts, vocabulary, shard)

    def _run(self, x, y, mask, score: Score) -> None:
        nats, hits = self.step(x, y)
        score.nats += float(np.sum(nats.numpy() * mask))
        score.correct += float(np.sum(hits.numpy() * mask))
        score.count += int(mask.sum())

    def _score_recurrent(self, texts, vocabulary, shard) -> Score:
        num_shards, index = shard
        # The same rows however many shards score them: the same number from every split.
        rows = _rows(texts, vocabulary, self.streams, self.warmup)[index::num_shards]
        score = Score()
        b = self.streams
        for g in range(0, len(rows), b):
            group = rows[g : g + b]
            length = max(len(r[0]) for r in group)
            length = -(-length // self.chunk) * self.chunk
            x = np.zeros((b, length), np.int32)
            y = np.zeros((b, length), np.int32)
            mask = np.zeros((b, length), np.float32)
            for i, (xi, yi, mi) in enumerate(group):
                x[i, : len(xi)], y[i, : len(yi)], mask[i, : len(mi)] = xi, yi, mi
            self.model.reset_states()
            for t in range(0, length, self.chunk):
                if not self.carry_state:
                    self.model.reset_states()
                part = slice(t, t + self.chunk)
                if mask[:, part].any():
                    self._run(x[:, part], y[:, part], mask[:, part], score)
        return score

    def _score_windows(self, texts, vocabulary, shard) -> Score:
        num_shards, index = shard
        context = self.context
        if context < 2:
            raise ValueError("a model without state needs a context of at least 2 characters")
        half = context // 2
        windows = []  # (inputs, targets, mask): the first window scores all, the others half
        for book in (encode(t, vocabulary) for t in texts if len(t) > 1):
            n = len(book) - 1
            start, scored_from = 0, 0
            while scored_from < n:
                end = min(start + context, n)
                mask = np.zeros(context, np.float32)
                mask[scored_from - start : end - start] = 1.0
                x = np.zeros(context, np.int32)
                y = np.zeros(context, np.int32)
                x[: end - start], y[: end - start] = book[start:end], book[start + 1 : end + 1]
                windows.append((x, y, mask))
                scored_from = end
                start = end - half
        windows = windows[index::num_shards]
        score = Score()
        for g in range(0, len(windows), self.streams):
            group = windows[g : g + self.streams]
            x, y, mask = (np.stack(part) for part in zip(*group, strict=True))
            self._run(x, y, mask, score)
        return score


def score_ngrams(train, valid, vocabulary: list[str], orders=range(3, 8)) -> tuple[int, dict]:
    """The best Kneser-Ney n-gram of ``orders``, fitted on ``train``, scored on ``valid``.

    The texts go through the same unknown-character rule as the models'.

    Returns:
        ``(order, scores)``: the best order and its :func:`language_model_scores` with
        ``characters`` and every order's ``bits_per_char_by_order``.
    """
    from distrain.ngram import best_ngram

    train = [known(t, vocabulary) for t in train]
    valid = [known(t, vocabulary) for t in valid]
    order, per_order = best_ngram(train, valid, len(vocabulary), orders)
    scores = language_model_scores(per_order[order])
    scores["characters"] = scored_characters(valid)
    scores["bits_per_char_by_order"] = {str(n): v / math.log(2) for n, v in per_order.items()}
    return order, scores
