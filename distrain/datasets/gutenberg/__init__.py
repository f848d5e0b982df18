"""Project Gutenberg books: character language models, and an encoder-decoder on line pairs."""

from __future__ import annotations

from pathlib import Path

from distrain.datasets import DataSet, DataSetError, ModelSpec, register
from distrain.datasets.gutenberg.defaults import DEFAULTS
from distrain.datasets.gutenberg.download import fetch_gutenberg
from distrain.datasets.gutenberg.models import char_lstm, lstm_seed, rnn, seq2seq
from distrain.datasets.gutenberg.sample import GutenbergSampleConfig, write_gutenberg_sample
from distrain.learning.lm import StreamTraining
from distrain.learning.tasks import NEXT_CHARACTER, TRANSLATION


def _book_ids(source: str) -> list[int]:
    try:
        ids = [int(i) for i in source.partition(":")[2].split(",") if i.strip()]
    except ValueError:
        ids = []
    if not ids:
        raise DataSetError(
            "Gutenberg downloads need book ids (--ids 1342,11, or the source download:1342,11)"
        )
    return ids


@register
class Gutenberg(DataSet):
    """Project Gutenberg plain-text books (``*.txt``, with their START/END markers)."""

    name = "gutenberg"
    pipeline = DEFAULTS
    # Its cases of the reliability matrix (distrain.faults), each proved by a marked test.
    fault_cases = (
        ("gutenberg/no-markers", "Gutenberg: no START/END markers dead-lettered"),
        ("gutenberg/empty-body", "Gutenberg: empty body dead-lettered"),
        ("gutenberg/binary", "Gutenberg: binary file dead-lettered"),
        ("gutenberg/mixed-encodings", "Gutenberg: mixed UTF-8/Latin-1 decoded line by line"),
        ("gutenberg/utf16", "Gutenberg: UTF-16 and UTF-32 books with a byte-order mark decoded"),
        ("gutenberg/dead-letter", "Gutenberg: books = accepted + rejected, ratio enforced"),
    )
    summary = "Project Gutenberg books as plain text; characters predicted from the ones before"
    sample_size = 360_000  # characters over all books
    sample_unit = "characters over all books"
    title = "Gutenberg"
    experiments = {
        "parallelism": {
            "models": ("seq2seq",),
            "batch_size": 32,
            "learning_rate": 3e-3,
            "sizes": {"small": 60_000, "full": 0},
            # Its quality in the study: character accuracy (its task's is bits/char).
            "quality": "accuracy",
        },
    }
    models = {
        "lstm": ModelSpec(
            char_lstm,
            NEXT_CHARACTER,
            stages=False,
            summary="512-unit char LSTM, stateful streams where the mode carries state",
            stream=StreamTraining(anneal=True),
        ),
        "lstm-seed": ModelSpec(
            lstm_seed, NEXT_CHARACTER, stages=False, summary="seed 000's char LSTM (200/100)"
        ),
        "rnn": ModelSpec(rnn, NEXT_CHARACTER, stages=False, summary="seed 000's char RNN"),
        "seq2seq": ModelSpec(
            seq2seq,
            TRANSLATION,
            view="pairs",
            stages=False,
            summary="encoder-decoder: a line's end to the next line's start",
        ),
    }

    def write_sample(self, out, size, seed):
        books = 3
        cfg = GutenbergSampleConfig(
            books=books, chars_per_book=max(1000, (size or self.sample_size) // books), seed=seed
        )
        write_gutenberg_sample(out, cfg)

    def check_source(self, source):
        """A download names its books: ``download:1342,11``."""
        _book_ids(source)

    def download(self, out, source):
        fetch_gutenberg(_book_ids(source), out)

    def raw_files(self, src):
        files = sorted(Path(src).glob("*.txt"))
        if not files:
            raise DataSetError(f"{src}: no *.txt books")
        return files

    def check_raw_files(self, src):
        """At least one ``*.txt`` book (each book's own checks come in preprocessing)."""
        self.raw_files(src)

    def preprocess(self, raw, out, validation_fraction, seed, beam_args, overwrite=False):
        from distrain.datasets.gutenberg import beam as gutenberg

        cfg = gutenberg.GutenbergPreprocessConfig(
            raw, out, validation_fraction=validation_fraction, overwrite=overwrite
        )
        return gutenberg.preprocess_gutenberg(cfg, beam_args)

    def texts(self, data_dir, split):
        """Each book's normalised text of the split (:func:`~.beam.read_texts`)."""
        from distrain.datasets.gutenberg.beam import read_texts

        return read_texts(data_dir, split)

    def parser(self, info):
        """Parses windows (each character and the next) or line pairs.

        Line ``pairs`` give ``((source, decoder input), target)``, the decoder's input
        being the target shifted right by one.
        """
        import tensorflow as tf

        if info.view_name == "pairs":
            if "target_len" not in info.metadata:
                raise DataSetError(
                    f"{info.data_dir}: no line pairs (preprocessed by an older version: "
                    "preprocess it again)"
                )
            spec = {
                "source": tf.io.FixedLenFeature([info.metadata["source_len"]], tf.int64),
                "target": tf.io.FixedLenFeature([info.metadata["target_len"] + 1], tf.int64),
            }

            def parse_pairs(records):
                features = tf.io.parse_example(records, spec)
                source = tf.cast(features["source"], tf.int32)
                target = tf.cast(features["target"], tf.int32)
                return (source, target[:, :-1]), target[:, 1:]

            return parse_pairs
        window = int(info.metadata["seq_len"]) + 1
        spec = {"chars": tf.io.FixedLenFeature([window], tf.int64)}

        def parse(records):
            chars = tf.cast(tf.io.parse_example(records, spec)["chars"], tf.int32)
            return chars[:, :-1], chars[:, 1:]  # predict each next character

        return parse

    def serving_parser(self, info):
        """:meth:`parser`: its records hold no label."""
        return self.parser(info)
