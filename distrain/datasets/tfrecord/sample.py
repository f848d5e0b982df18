"""A learnable sample in the tfrecord data set's exact format: TFRecords and features.json.

Four classes. Each record has ``x`` (float32 [8]: the class's centre plus Gaussian
noise), ``bucket`` (int64 []: a small count that leans towards the class) and ``label``
(int64 []). Training records go to two files, the second gzipped (the format allows
both); test records to one. The same seed gives the same bytes.
"""

from __future__ import annotations

import gzip
import json
import os
from pathlib import Path

import numpy as np

from distrain.datasets.tfrecord.spec import SPEC_FILE
from distrain.preprocess.records import (
    bytes_feature,
    example,
    float_feature,
    int64_feature,
    tfrecord_frame,
)

CLASSES = 4
WIDTH = 8
SPEC = {
    "features": {
        "x": {"dtype": "float32", "shape": [WIDTH]},
        "bucket": {"dtype": "int64", "shape": []},
        "label": {"dtype": "int64", "shape": []},
    },
    "label": "label",
}


def sample_records(n: int, seed: int) -> list[bytes]:
    """``n`` serialised examples of the sample's classes (balanced, shuffled)."""
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(1234).normal(0.0, 1.0, (CLASSES, WIDTH))
    labels = rng.permutation(np.arange(n) % CLASSES)
    x = centres[labels] + rng.normal(0.0, 0.8, (n, WIDTH))
    bucket = rng.poisson(1.0 + labels)
    return [
        example(
            {
                "x": float_feature(x[i]),
                "bucket": int64_feature((int(bucket[i]),)),
                "label": int64_feature((int(labels[i]),)),
            }
        )
        for i in range(n)
    ]


def write_frames(path: str | os.PathLike, records: list[bytes], gzipped: bool = False) -> None:
    """Writes records as a TFRecord file (gzipped with ``gzipped``)."""
    data = b"".join(tfrecord_frame(r) for r in records)
    Path(path).write_bytes(gzip.compress(data, mtime=0) if gzipped else data)


def write_tfrecord_sample(output_dir: str | os.PathLike, train: int, test: int, seed: int) -> dict:
    """Writes ``features.json``, two training files (one gzipped) and a test file.

    Returns:
        ``{"files": [names], "counts": {"train": n, "test": n}}``.
    """
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    seeds = np.random.SeedSequence(seed).spawn(2)
    train_seed, test_seed = (int(s.generate_state(1)[0]) for s in seeds)
    records = sample_records(train, train_seed)
    half = (len(records) + 1) // 2
    (out / SPEC_FILE).write_text(json.dumps(SPEC, indent=2) + "\n")
    write_frames(out / "train-00000-of-00002.tfrecord", records[:half])
    write_frames(out / "train-00001-of-00002.tfrecord.gz", records[half:], gzipped=True)
    write_frames(out / "test-00000-of-00001.tfrecord", sample_records(test, test_seed))
    names = sorted(p.name for p in out.iterdir())
    return {"files": names, "counts": {"train": train, "test": test}}


# A sample of every dtype, for a model over several inputs: ``amount`` (float32 [], in
# the thousands: it needs normalising), ``store`` (int64 [], an id for an embedding),
# ``colour`` (bytes [], categorical) and ``review`` (bytes [1], a sentence tokenized as
# words). Each leans towards the class; together they tell it well.
MIXED_SPEC = {
    "features": {
        "amount": {"dtype": "float32", "shape": []},
        "store": {"dtype": "int64", "shape": []},
        "colour": {"dtype": "bytes", "shape": []},
        "review": {"dtype": "bytes", "shape": [1], "tokenizer": "words"},
        "label": {"dtype": "int64", "shape": []},
    },
    "label": "label",
}
COLOURS = ("red", "green", "blue", "black", "white", "grey")
CLASS_WORDS = (("cheap", "fine"), ("broken", "late"), ("lovely", "great"), ("odd", "noisy"))
COMMON_WORDS = ("the", "it", "was", "and", "very", "item", "a", "box")


def mixed_records(n: int, seed: int) -> list[bytes]:
    """``n`` serialised examples of :data:`MIXED_SPEC`'s four classes (balanced, shuffled)."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % CLASSES)
    amount = 1000.0 + 150.0 * labels + rng.normal(0.0, 120.0, n)
    own = rng.random(n) < 0.6  # else a store of any class
    store = np.where(own, labels * 5 + rng.integers(0, 5, n), rng.integers(0, 20, n))
    colour = np.where(rng.random(n) < 0.5, labels, rng.integers(0, len(COLOURS), n))
    records = []
    for i in range(n):
        words = list(rng.choice(COMMON_WORDS, 4))
        if rng.random() < 0.6:
            words.append(str(rng.choice(CLASS_WORDS[labels[i]])))
        rng.shuffle(words)
        text = " ".join(words).capitalize() + ("!" if rng.random() < 0.5 else ".")
        records.append(
            example(
                {
                    "amount": float_feature([amount[i]]),
                    "store": int64_feature([int(store[i])]),
                    "colour": bytes_feature([COLOURS[colour[i]].encode()]),
                    "review": bytes_feature([text.encode()]),
                    "label": int64_feature([int(labels[i])]),
                }
            )
        )
    return records


def write_mixed_sample(output_dir: str | os.PathLike, train: int, test: int, seed: int) -> None:
    """Writes :data:`MIXED_SPEC` as ``features.json``, a training file and a test file."""
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / SPEC_FILE).write_text(json.dumps(MIXED_SPEC, indent=2) + "\n")
    write_frames(out / "train-00000-of-00001.tfrecord", mixed_records(train, seed))
    write_frames(out / "test-00000-of-00001.tfrecord", mixed_records(test, seed + 1))
