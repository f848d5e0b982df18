"""A tiny tfrecord folder as a user writes one: ``tf.io.TFRecordWriter`` and features.json.

Four classes. Each record has ``x`` (float32 [8]: the class's centre plus noise),
``bucket`` (int64 []: a count below :data:`BUCKETS` that leans towards the class),
``colour`` (bytes []: one of :data:`COLOURS`, mostly the class's own) and ``label``. The
zoo's models read all three features (:mod:`tests.zoo.models`); the same seed gives the
same records.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

CLASSES = 4
WIDTH = 8
BUCKETS = 8
COLOURS = ("red", "green", "blue", "amber")
SPEC = {
    "features": {
        "x": {"dtype": "float32", "shape": [WIDTH]},
        "bucket": {"dtype": "int64", "shape": []},
        "colour": {"dtype": "bytes", "shape": []},
        "label": {"dtype": "int64", "shape": []},
    },
    "label": "label",
}


def _records(n: int, seed: int) -> list[bytes]:
    import tensorflow as tf

    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(99).normal(0.0, 1.0, (CLASSES, WIDTH))
    labels = rng.permutation(np.arange(n) % CLASSES)
    x = centres[labels] + rng.normal(0.0, 0.8, (n, WIDTH))
    bucket = np.minimum(rng.poisson(1.0 + labels), BUCKETS - 1)
    own = rng.random(n) < 0.7  # the class's colour, else any
    colour = np.where(own, labels, rng.integers(0, len(COLOURS), n))
    feature = tf.train.Feature
    return [
        tf.train.Example(
            features=tf.train.Features(
                feature={
                    "x": feature(float_list=tf.train.FloatList(value=x[i])),
                    "bucket": feature(int64_list=tf.train.Int64List(value=[int(bucket[i])])),
                    "colour": feature(
                        bytes_list=tf.train.BytesList(value=[COLOURS[colour[i]].encode()])
                    ),
                    "label": feature(int64_list=tf.train.Int64List(value=[int(labels[i])])),
                }
            )
        ).SerializeToString()
        for i in range(n)
    ]


def write_raw(directory: str | os.PathLike, train: int = 320, test: int = 80, seed: int = 5):
    """Writes ``features.json``, ``train-00000-of-00001.tfrecord`` and a test file."""
    import tensorflow as tf

    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    (out / "features.json").write_text(json.dumps(SPEC, indent=2) + "\n")
    for name, n, offset in (("train", train, 0), ("test", test, 1)):
        with tf.io.TFRecordWriter(str(out / f"{name}-00000-of-00001.tfrecord")) as writer:
            for record in _records(n, seed + offset):
                writer.write(record)
    return out
