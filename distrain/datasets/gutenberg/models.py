"""Gutenberg's models: character language models, and an encoder-decoder on line pairs."""

from __future__ import annotations

from distrain.learning.models import keras_module
from distrain.learning.precision import compute_dtype


def char_lstm(info, seed: int, units: int = 512, layers: int = 1, embed: int = 64, dropout=0.4):
    """The default character language model: an embedding, LSTM layer(s), logits per step.

    Dropout after each LSTM layer: without it, on 1 MB of real prose, the training text's
    bits/char fell 0.26 below the validation text's within 7 epochs. At 0.25, over the
    15 epochs that ten minutes buy in bfloat16, it still fell 0.34 below on 1 MB of
    fortunes (whose validation part is other collections), and the validation text stopped
    improving after 10 epochs at 2.14-2.15; at 0.4 it reached 2.129 after 11 of 12, at
    0.55 2.150 (seed 0, one run each).

    Built for any batch and without state; training in a mode that carries state, and
    scoring, use its stateful copy (:func:`distrain.learning.lm.recurrent_copy`).

    It allows bfloat16 (:mod:`distrain.learning.precision`): on 2 cores with native bfloat16
    a training step computes about twice as fast as in float32, and on 1 MB of fortunes
    its validation bits/char after 2 epochs were no worse. The logits stay float32.
    """
    import tf_keras as keras

    vocab = info.metadata["vocab_size"]
    dtype = compute_dtype()
    stack = [
        keras.layers.Input(shape=(None,), dtype="int32"),
        keras.layers.Embedding(
            vocab,
            embed,
            embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed),
            dtype=dtype,
        ),
    ]
    for i in range(layers):
        stack.append(
            keras.layers.LSTM(
                units,
                return_sequences=True,
                kernel_initializer=keras.initializers.GlorotUniform(seed + 1 + i),
                recurrent_initializer=keras.initializers.Orthogonal(seed=seed + 10 + i),
                dtype=dtype,
            )
        )
        if dropout:
            stack.append(keras.layers.Dropout(dropout, seed=seed + 30 + i, dtype=dtype))
    stack.append(
        keras.layers.Dense(
            vocab, kernel_initializer=keras.initializers.GlorotUniform(seed + 20), dtype="float32"
        )
    )
    return keras.Sequential(stack, name="gutenberg_char_lstm")


def recurrent_lm(info, seed: int, units=(200, 100), embed: int = 32, cell: str = "LSTM"):
    """Two-layer character LSTM predicting the next character at every position.

    ``cell``: the recurrent layer (``SimpleRNN`` for seed 000's plain RNN).
    """
    keras = keras_module()
    recurrent = getattr(keras.layers, cell)
    vocab = info.metadata["vocab_size"]
    layers = [
        keras.layers.Input(shape=(None,), dtype="int32"),
        keras.layers.Embedding(
            vocab, embed, embeddings_initializer=keras.initializers.RandomUniform(-0.05, 0.05, seed)
        ),
    ]
    for i, n in enumerate(units):
        layers.append(
            recurrent(
                n,
                return_sequences=True,
                kernel_initializer=keras.initializers.GlorotUniform(seed + 1 + i),
                recurrent_initializer=keras.initializers.Orthogonal(seed=seed + 10 + i),
            )
        )
    layers.append(
        keras.layers.Dense(vocab, kernel_initializer=keras.initializers.GlorotUniform(seed + 20))
    )
    return keras.Sequential(layers, name=f"gutenberg_{cell.lower()}")


def lstm_seed(info, seed: int):
    """Seed 000's two-layer character LSTM (200 and 100 units), next character everywhere."""
    return recurrent_lm(info, seed)


def rnn(info, seed: int):
    """Seed 000's plain RNN: the LSTM's shape (200 and 100 units) with simple recurrent cells."""
    return recurrent_lm(info, seed, cell="SimpleRNN")


def seq2seq(info, seed: int, embed: int = 32, units: int = 128):
    """An encoder-decoder (seed 004's Seq2Seq) on pairs of consecutive lines.

    The encoder's LSTM reads the end of a line; its final state starts the decoder's LSTM,
    which reads the next line's characters so far (teacher forcing) and gives logits for
    each next one. Inputs: ``(source, decoder input)``, both character ids of fixed length.
    """
    keras = keras_module()
    init = keras.initializers
    vocab = info.metadata["vocab_size"]
    source = keras.layers.Input(shape=(info.metadata["source_len"],), dtype="int32")
    target = keras.layers.Input(shape=(info.metadata["target_len"],), dtype="int32")

    def embedding(offset):
        return keras.layers.Embedding(
            vocab, embed, embeddings_initializer=init.RandomUniform(-0.05, 0.05, seed + offset)
        )

    def recurrent(offset, **kwargs):
        return keras.layers.LSTM(
            units,
            kernel_initializer=init.GlorotUniform(seed + offset),
            recurrent_initializer=init.Orthogonal(seed=seed + 10 + offset),
            **kwargs,
        )

    _, h, c = recurrent(1, return_state=True)(embedding(0)(source))
    decoded = recurrent(2, return_sequences=True)(embedding(3)(target), initial_state=[h, c])
    logits = keras.layers.Dense(vocab, kernel_initializer=init.GlorotUniform(seed + 4))(decoded)
    return keras.Model([source, target], logits, name="gutenberg_seq2seq")
