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
from distrain.preprocess.records import example, float_feature, int64_feature, tfrecord_frame

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
