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

from distrain.datasets import texts as read_texts
from distrain.learning.ngram import best_ngram

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
        reset_probability: Before each batch, each row's state is set to zero with this
            probability (and every row's at an epoch's start), so that the model also
            learns to read on from a zero state: carried from batch to batch only, a
            model's behaviour from a zero state is never trained, and from there it
            sometimes fell into a state it never left (predicting rare characters
            everywhere).
    """

    clip_norm: float = 1.0
    decay_per_epoch: float = 1.0
    evaluation_streams: int = 32
    bptt: int = 50
    anneal: bool = False
    reset_probability: float = 0.05

    def decay_per_update(self, updates_per_epoch: int) -> float:
        """The learning rate's factor per update that makes :attr:`decay_per_epoch` an epoch."""
        return self.decay_per_epoch ** (1.0 / max(updates_per_epoch, 1))

    def schedule(self, updates_per_epoch: int, epochs: int) -> dict:
        """The optimizer's schedule arguments (:class:`distrain.learning.optim.Adam`) for a run.

        Every mode's optimizer takes them from here, whichever process applies the
        updates, so that a comparison of modes trains each on the same schedule.
        """
        return {
            "decay": self.decay_per_update(updates_per_epoch),
            "anneal_updates": updates_per_epoch * epochs if self.anneal else 0,
        }


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
    ``info``: the data set's :class:`distrain.learning.inputs.DatasetInfo`; ``seq_len``:
    characters per row (default: the data set's window).
    """
    import tensorflow as tf

    texts = read_texts(info.data_dir, split).values()
    ids = stream_ids(texts, info.metadata["vocabulary"], shard)
    x, y = stream_batches(ids, batch_size, seq_len or int(info.metadata["seq_len"]))
    ds = tf.data.Dataset.from_tensor_slices((x, y))
    return ds.repeat() if repeat else ds


def stream_batches_per_epoch(info, batch_size: int, shard=(1, 0), seq_len: int = 0) -> int:
    """Training batches in one pass over this shard's streams (rows of ``seq_len``)."""
    length = sum(len(t) for t in read_texts(info.data_dir, "train").values()) // shard[0]
    return max(1, stream_steps(length, batch_size, seq_len or int(info.metadata["seq_len"])))


# ---- models with state -----------------------------------------------------------------


def is_recurrent(model) -> bool:
    """Whether the model has a recurrent layer (whose state scoring carries)."""
    return any(type(layer).__name__ in RECURRENT_LAYERS for layer in model.layers)


def recurrent_copy(model, batch_size: int | None, stateful: bool = True, float32: bool = False):
    """The same Sequential model (same weights) for batches of ``batch_size``, stateful or not.

    A stateful recurrent layer keeps each row's last state for the next call, so a batch
    of rows that continue the previous batch's rows is read as one long sequence.
    ``float32``: every layer computes in float32, whatever precision the model trained in
    (:mod:`distrain.learning.precision`): scores and samples measure the weights alone.
    """
    import tf_keras as keras

    config = model.get_config()
    for layer in config["layers"]:
        if layer["class_name"] == "InputLayer":
            shape = list(layer["config"]["batch_input_shape"])
            layer["config"]["batch_input_shape"] = [batch_size, *shape[1:]]
            continue
        if layer["class_name"] in RECURRENT_LAYERS:
            layer["config"]["stateful"] = stateful
        if float32 and "dtype" in layer["config"]:
            layer["config"]["dtype"] = "float32"
    copy = keras.Sequential.from_config(config)
    copy.set_weights(model.get_weights())
    return copy


def reset_rows(model, keep) -> None:
    """Sets the state of the rows where ``keep`` is 0 to zero (a stateful model's)."""
    import tensorflow as tf

    for layer in model.layers:
        if type(layer).__name__ in RECURRENT_LAYERS:
            for state in layer.states:
                state.assign(state * tf.cast(keep, state.dtype)[:, None])


def random_resets(model, stream: StreamTraining, seed, update, updates_per_epoch: int) -> None:
    """Before update ``update``: each row's state zeroed with the stream's probability.

    Every row's at an epoch's start. Drawn from ``(seed, update)`` alone (a stateless
    draw), so a resumed run resets the same rows as one that was never stopped.
    """
    import tensorflow as tf

    rows = model.input_shape[0]
    pair = tf.stack([tf.constant(seed, tf.int64), tf.cast(update, tf.int64)])
    draw = tf.random.stateless_uniform([rows], pair)
    keep = draw >= stream.reset_probability
    epoch_start = tf.equal(tf.math.floormod(update, max(updates_per_epoch, 1)), 0)
    reset_rows(model, tf.logical_and(keep, tf.logical_not(epoch_start)))


# ---- scoring ---------------------------------------------------------------------------


@dataclass
class Score:
    """Summed negative log-likelihood (nats), correct next-character guesses, characters."""

    nats: float = 0.0
    correct: float = 0.0
    count: int = 0
    #: Each scored row's ``(nats, correct, count)`` (a recurrent model's, carried state).
    rows: list | None = None

    def add(self, other: Score) -> None:
        self.nats += other.nats
        self.correct += other.correct
        self.count += other.count
        if other.rows is not None:
            self.rows = [*(self.rows or []), *other.rows]

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
    books, cuts = row_cuts(texts, vocabulary, streams)
    rows = []
    for book, a, b in cuts:
        ids = books[book]
        s = max(0, a - warmup)
        mask = np.zeros(b - s, np.float32)
        mask[a - s :] = 1.0
        rows.append((ids[s:b], ids[s + 1 : b + 1], mask))
    return rows


def row_cuts(texts, vocabulary, streams: int):
    """The books' ids and their rows ``(book, start, end)``: predictions ``start..end - 1``.

    A book's ``n - 1`` predictions are cut into parts in proportion to its length, about
    ``streams`` rows in all, in order: a book's rows follow one another.
    """
    books = [encode(t, vocabulary) for t in texts if len(t) > 1]
    total = sum(len(i) - 1 for i in books)
    cuts = []
    for k, book in enumerate(books):
        n = len(book) - 1
        parts = max(1, round(streams * n / total))
        bounds = np.linspace(0, n, parts + 1).astype(int)
        cuts += [(k, a, b) for a, b in zip(bounds[:-1], bounds[1:], strict=True) if b > a]
    return books, cuts


def unigram_bits(train_texts, texts, vocabulary: list[str]) -> list[float]:
    """Bits/char of each text under the training text's unigram (add-one) distribution."""
    counts = np.bincount(encode("".join(train_texts), vocabulary), minlength=len(vocabulary))
    log_probs = np.log2((counts + 1.0) / (counts.sum() + len(vocabulary)))
    return [float(-log_probs[encode(t, vocabulary)].mean()) if t else 0.0 for t in texts]


def row_outliers(row_bits, unigram_row_bits, margin: float = 1.0) -> list[int]:
    """Rows whose bits/char are ``margin`` above the rows' median, or above the unigram's.

    Such a row is not an average part of the text for the model (it broke down there,
    or the text there is unlike the rest): a comparison names it, not only its mean.
    """
    median = float(np.median(row_bits)) if len(row_bits) else 0.0
    return [
        i
        for i, (bits, unigram) in enumerate(zip(row_bits, unigram_row_bits, strict=True))
        if bits > median + margin or bits > unigram
    ]


def row_spread(rows, texts, train_texts, vocabulary: list[str], streams: int) -> dict:
    """The bits/char of each scored row (:attr:`Score.rows`), their spread, the outliers.

    A row stands out (:func:`row_outliers`) when it is far above the others or above a
    unigram model of the training text on the same characters.
    """
    books = [t for t in texts if len(t) > 1]
    _, cuts = row_cuts(books, vocabulary, streams)
    unigram = unigram_bits(train_texts, [books[k][a + 1 : b + 1] for k, a, b in cuts], vocabulary)
    bits = [nats / count / math.log(2) for nats, _, count in rows]
    flagged = row_outliers(bits, unigram)
    return {
        "row_bits_per_char": [round(b, 4) for b in bits],
        "row_bits_per_char_min": min(bits),
        "row_bits_per_char_median": float(np.median(bits)),
        "row_bits_per_char_max": max(bits),
        "outlier_rows": [
            {"row": i, "bits_per_char": bits[i], "unigram_bits_per_char": unigram[i]}
            for i in flagged
        ],
    }


class StreamScorer:
    """Scores a model over contiguous texts, each character once (see the module's words).

    A recurrent model's score is that of reading each book from its start in one pass,
    its state carried along the text, however the text is cut into rows: the book is cut
    into ``streams`` rows scored side by side, and each row starts from the state the row
    before it ended with. Since that state is only known after a pass, passes are
    repeated until every row's start state is the previous row's end state, or every
    row's bits/char is the pass before's (within ``tolerance``): after ``p`` passes a
    book's first ``p`` rows are exact, and a model that forgets its start within a row
    needs two or three passes whatever the cut. The
    first pass starts each row from the state after ``warmup`` characters read from a
    zero state (only a guess: it sets how many passes are needed, not the score).

    ``carry_state`` False: the state is reset before every chunk instead, as a model
    trained on windows from a zero state sees them. Other models see a context of the
    ``context`` characters before each scored one, in windows that overlap by half.

    Args:
        model: A Keras model from ids ``[batch, time]`` to logits ``[batch, time, vocab]``.
        streams: Rows scored side by side.
        chunk: Characters per call.
        warmup: Characters read before a row's first scored one, for the first pass.
        carry_state: Carry a recurrent model's state from one chunk to the next.
        context: A non-recurrent model's window.
        tolerance: The largest difference in a state value (absolute, and relative to
            the value) between a row's start and the row before it's end that counts as
            the same state; and in a row's bits/char from one pass to the next.
    """

    def __init__(
        self,
        model,
        streams: int = 32,
        chunk: int = 100,
        warmup: int = 200,
        carry_state: bool = True,
        context: int = 0,
        tolerance: float = 1e-4,
    ):
        import tensorflow as tf

        self.recurrent = is_recurrent(model)
        self.streams, self.chunk, self.warmup = streams, chunk, warmup
        self.carry_state, self.context, self.tolerance = carry_state, context, tolerance
        self.model = recurrent_copy(model, streams, float32=True) if self.recurrent else model
        self.passes = 0  # passes the last score needed
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
        """Scores the texts' characters after each text's first (this shard's rows of them).

        A recurrent model's rows are all computed by every shard (a row's start state is
        the row before it's end state); each shard counts its own rows.
        """
        if self.recurrent and self.carry_state:
            return self._score_carried(texts, vocabulary, shard)
        if self.recurrent:
            return self._score_reset(texts, vocabulary, shard)
        return self._score_windows(texts, vocabulary, shard)

    def _run(self, x, y, mask, score: Score) -> None:
        nats, hits = self.step(x, y)
        score.nats += float(np.sum(nats.numpy() * mask))
        score.correct += float(np.sum(hits.numpy() * mask))
        score.count += int(mask.sum())

    def _state_variables(self) -> list:
        return [
            v
            for layer in self.model.layers
            if type(layer).__name__ in RECURRENT_LAYERS
            for v in layer.states
        ]

    def _read(self, segments, starts: list[np.ndarray]):
        """Reads each segment ``(inputs, targets)`` from its start state.

        Returns:
            ``(ends, sums)``: each segment's end state (one array per state variable,
            a row per segment) and its ``[nats, correct, count]``.
        """
        variables = self._state_variables()
        ends = [s.copy() for s in starts]
        sums = np.zeros((len(segments), 3))
        b = self.streams
        for g in range(0, len(segments), b):
            group = segments[g : g + b]
            lengths = np.array([len(xi) for xi, _ in group])
            length = int(lengths.max())
            if not length:
                continue
            x = np.zeros((b, length), np.int32)
            y = np.zeros((b, length), np.int32)
            for i, (xi, yi) in enumerate(group):
                x[i, : len(xi)], y[i, : len(yi)] = xi, yi
            for v, start in zip(variables, starts, strict=True):
                value = np.zeros(v.shape, v.dtype.as_numpy_dtype)
                value[: len(group)] = start[g : g + len(group)]
                v.assign(value)
            # Calls end at every chunk and at every row's end (to read its state there).
            bounds = sorted({*range(self.chunk, length, self.chunk), *lengths.tolist(), length})
            t0 = 0
            for t1 in (t for t in bounds if t > 0):
                nats, hits = self.step(x[:, t0:t1], y[:, t0:t1])
                scored = (np.arange(t0, t1)[None, :] < lengths[:, None]).astype(np.float64)
                n = len(group)
                sums[g : g + n, 0] += np.sum(nats.numpy()[:n] * scored, axis=1)
                sums[g : g + n, 1] += np.sum(hits.numpy()[:n] * scored, axis=1)
                sums[g : g + n, 2] += scored.sum(axis=1)
                done = np.flatnonzero(lengths == t1)
                if len(done):
                    for v, end in zip(variables, ends, strict=True):
                        end[g + done] = v.numpy()[done]
                t0 = t1
        return ends, sums

    def _score_carried(self, texts, vocabulary, shard) -> Score:
        num_shards, index = shard
        books, cuts = row_cuts(texts, vocabulary, self.streams)
        zero = [np.zeros((len(cuts), *v.shape[1:]), np.float32) for v in self._state_variables()]
        warm = [
            (books[k][max(0, a - self.warmup) : a], books[k][max(0, a - self.warmup) + 1 : a + 1])
            for k, a, _ in cuts
        ]
        starts, _ = self._read(warm, zero)
        segments = [(books[k][a:b], books[k][a + 1 : b + 1]) for k, a, b in cuts]
        # The rows whose start is the end of the row before them (not a book's first).
        follows = np.array([i > 0 and cuts[i - 1][0] == k for i, (k, _, _) in enumerate(cuts)])
        self.passes, before = 0, None
        while True:
            self.passes += 1
            ends, sums = self._read(segments, starts)
            nexts = [s.copy() for s in starts]
            for nxt, end in zip(nexts, ends, strict=True):
                nxt[1:][follows[1:]] = end[:-1][follows[1:]]
            same = all(
                np.allclose(n, s, rtol=self.tolerance, atol=self.tolerance)
                for n, s in zip(nexts, starts, strict=True)
            )
            # Or every row's score as in the pass before (a unit with a long memory may
            # keep the states apart after they no longer change a prediction).
            bits = sums[:, 0] / np.maximum(sums[:, 2], 1) / math.log(2)
            if before is not None and np.all(np.abs(bits - before) <= self.tolerance):
                same = True
            if same or self.passes > len(cuts):
                break
            starts, before = nexts, bits
        score = Score(rows=[])
        for nats, correct, count in sums[index::num_shards]:
            score.add(Score(float(nats), float(correct), int(count), [(nats, correct, count)]))
        return score

    def _score_reset(self, texts, vocabulary, shard) -> Score:
        num_shards, index = shard
        # The same rows however many shards score them: the same number from every split.
        rows = _rows(texts, vocabulary, self.streams, 0)[index::num_shards]
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
            for t in range(0, length, self.chunk):
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
    train = [known(t, vocabulary) for t in train]
    valid = [known(t, vocabulary) for t in valid]
    order, per_order = best_ngram(train, valid, len(vocabulary), orders)
    scores = language_model_scores(per_order[order])
    scores["characters"] = scored_characters(valid)
    scores["bits_per_char_by_order"] = {str(n): v / math.log(2) for n, v in per_order.items()}
    return order, scores
