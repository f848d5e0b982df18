"""Preprocessing throughput: the Beam job against a plain-Python loop doing the same work.

Both parse the IDX files, assign train/validation by the same hash, serialise the same
``tf.train.Example`` records and write TFRecords. A script, not a test: it prints a table.

    .venv/bin/python benchmarks/bench_preprocess.py [--records 20000] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

import distrain  # noqa: F401
from distrain.data.idx import mnist_paths, read_mnist_split
from distrain.data.mnist_sample import MnistSampleConfig, write_mnist_sample
from distrain.preprocess.common import validation_mask
from distrain.preprocess.mnist import MnistPreprocessConfig, preprocess_mnist


def plain_loop(raw: Path, out: Path, seed: int = 0, fraction: float = 0.1) -> int:
    """The same work as the Beam job, in one process, without Beam."""
    import tensorflow as tf
    from tensorflow.core.example import example_pb2

    count = 0
    writers = {
        s: tf.io.TFRecordWriter(str(out / f"{s}.tfrecord")) for s in ("train", "validation", "test")
    }
    for source in ("train", "test"):
        images, labels = read_mnist_split(*mnist_paths(raw, source))
        if source == "train":
            to_val = validation_mask(np.arange(len(labels)), seed, fraction)
        else:
            to_val = np.zeros(len(labels), bool)
        for i in range(len(labels)):
            example = example_pb2.Example()
            feature = example.features.feature
            feature["image"].bytes_list.value.append(images[i].tobytes())
            feature["label"].int64_list.value.append(int(labels[i]))
            split = source if source == "test" else ("validation" if to_val[i] else "train")
            writers[split].write(example.SerializeToString())
            count += 1
    for w in writers.values():
        w.close()
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=20000, help="training records")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    results = []
    with tempfile.TemporaryDirectory() as tmp:
        raw = Path(tmp, "raw")
        test_size = max(1, args.records // 6)
        write_mnist_sample(raw, MnistSampleConfig(train_size=args.records, test_size=test_size))
        total = args.records + test_size

        out = Path(tmp, "plain")
        out.mkdir()
        import tensorflow  # noqa: F401  (imported before timing: start-up is not the loop's work)

        start = time.perf_counter()
        plain_loop(raw, out)
        results.append(("plain Python loop", 1, time.perf_counter() - start))

        for workers, mode in ((1, "in_memory"), (2, "multi_processing")):
            cfg = MnistPreprocessConfig(str(raw), str(Path(tmp, f"beam{workers}")))
            beam_args = [
                "--runner=FnApiRunner",
                f"--direct_running_mode={mode}",
                f"--direct_num_workers={workers}",
            ]
            start = time.perf_counter()
            preprocess_mnist(cfg, beam_args)
            results.append((f"Beam FnApiRunner ({mode})", workers, time.perf_counter() - start))

    base = results[0][2]
    print(f"\nPreprocessing {total} MNIST-format records on {os.cpu_count()} cores")
    header = f"{'pipeline':<36}{'workers':>8}{'seconds':>9}{'records/s':>11}{'time vs plain':>15}"
    print(header)
    print("-" * len(header))
    rows = []
    for name, workers, seconds in results:
        rows.append(
            {
                "pipeline": name,
                "workers": workers,
                "seconds": seconds,
                "records_per_second": total / seconds,
                "time_vs_plain": seconds / base,
            }
        )
        print(
            f"{name:<36}{workers:>8}{seconds:>9.2f}{total / seconds:>11,.0f}{seconds / base:>15.2f}"
        )
    print("(Beam's times include pipeline start-up and the metadata pass.)")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()
