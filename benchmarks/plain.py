"""Plain-Python versions of the three Beam preprocessing jobs: the baselines of the suite.

Each does the same parsing, the same train/validation assignment, the same vocabulary and
the same ``tf.train.Example`` records as its Beam job, with the library's own functions
(the same record encoders and TFRecord writer), and writes one TFRecord file per split:
no Beam, one process.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import numpy as np

from distrain.datasets.dbpedia import beam as db
from distrain.datasets.dbpedia import rows as db_rows
from distrain.datasets.gutenberg import beam as gb
from distrain.datasets.mnist.beam import mnist_example
from distrain.datasets.mnist.idx import mnist_paths, read_mnist_split
from distrain.preprocess.records import write_tfrecords
from distrain.preprocess.transforms import validation_mask


def _write(out: Path, records: dict[str, list[bytes]]) -> int:
    """One TFRecord file per split; returns the records written."""
    return sum(write_tfrecords(str(out / f"{s}.tfrecord"), r) for s, r in records.items())


def mnist(raw: Path, out: Path, seed: int = 0, fraction: float = 0.1) -> int:
    """MNIST IDX files to TFRecords; returns the records written."""
    records = {"train": [], "validation": [], "test": []}
    for source in ("train", "test"):
        images, labels = read_mnist_split(*mnist_paths(raw, source))
        to_val = (
            validation_mask(np.arange(len(labels)), seed, fraction)
            if source == "train"
            else np.zeros(len(labels), bool)
        )
        for i in range(len(labels)):
            split = source if source == "test" else ("validation" if to_val[i] else "train")
            records[split].append(mnist_example(images[i].tobytes(), int(labels[i])))
    return _write(out, records)


def dbpedia(raw: Path, out: Path, seed: int = 0, fraction: float = 0.1) -> int:
    """dbpedia_csv to TFRecords (vocabulary from the training split); returns records."""
    cfg = db.DbpediaPreprocessConfig(str(raw), str(out), validation_fraction=fraction, seed=seed)
    classes = db.read_classes(raw)
    rows = {"train": [], "validation": [], "test": []}
    for source in ("train", "test"):
        path = raw / f"{source}.csv"
        good = [
            (line, a, b)
            for kind, line, a, b, _ in db_rows.parse_csv(str(path), path.read_bytes(), len(classes))
            if kind == "ok"
        ]
        if source == "test":
            rows["test"] = good
            continue
        to_val = validation_mask(np.array([r[0] for r in good]), seed, fraction)
        for row, val in zip(good, to_val, strict=True):
            rows["validation" if val else "train"].append(row)
    with_bigrams = cfg.max_bigrams > 0
    uni, bi = Counter(), Counter()
    for _, _, text in rows["train"]:
        u, b = db.ngrams(db.tokenize(text), with_bigrams)
        uni.update(u)
        bi.update(b)
    vocab = db.build_vocabulary((uni, bi), cfg.min_count, cfg.max_unigrams, cfg.max_bigrams)
    index = {w: i for i, w in enumerate(vocab)}
    records = {
        split: [
            db.text_example(db.encode(text, index, cfg.max_tokens, with_bigrams), label)
            for _, label, text in items
        ]
        for split, items in rows.items()
    }
    return _write(out, records)


def gutenberg(raw: Path, out: Path, fraction: float = 0.1) -> int:
    """Books to TFRecord windows (vocabulary from training text); returns records."""
    cfg = gb.GutenbergPreprocessConfig(str(raw), str(out), validation_fraction=fraction)
    books = {}
    for path in sorted(raw.glob("*.txt")):
        text, _ = gb.decode_book(path.read_bytes())
        body, _ = (None, "") if text is None else gb.strip_gutenberg(text)
        if body is not None:
            books[path.name] = gb.split_book(body, fraction)
    counts = Counter()
    for parts in books.values():
        counts.update(parts["train"])
    vocab = gb.build_char_vocabulary(counts, cfg.min_char_count)
    index = {c: i for i, c in enumerate(vocab)}
    records = {"train": [], "validation": []}
    for parts in books.values():
        for split, text in parts.items():
            ids = [index.get(c, gb.OOV) for c in text]
            records[split].extend(
                gb.window_example(w) for w in gb.windows(ids, cfg.seq_len, cfg.stride)
            )
    return _write(out, records)
