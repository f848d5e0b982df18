"""One rank of the allreduce benchmark: ``python allreduce_worker.py OUT`` per rank.

The suite starts the ranks as sync runs start theirs (``mpirun -np N`` or ``horovodrun
--gloo -np N``).

Times ``hvd.allreduce`` of float32 tensors from 4 bytes to 64 MiB (after a warm-up) and,
on rank 0, writes seconds per allreduce for each size as JSON.
"""

import json
import sys
import time

import distrain  # noqa: F401


def main() -> None:
    import horovod.tensorflow as hvd
    import numpy as np
    import tensorflow as tf

    hvd.init()
    results = []
    for size in [4 * 4**k for k in range(13)]:  # 4 B .. 64 MiB
        x = tf.constant(np.ones(size // 4, np.float32))
        hvd.allreduce(x, op=hvd.Sum)  # warm-up (and negotiation of this tensor's name)
        repeats = max(3, min(200, int(2e8 // max(size, 1) // 50)))
        hvd.allreduce(tf.constant(0.0), op=hvd.Sum)  # barrier
        start = time.perf_counter()
        for _ in range(repeats):
            y = hvd.allreduce(x, op=hvd.Sum)
        _ = y.numpy()
        seconds = (time.perf_counter() - start) / repeats
        results.append({"bytes": size, "seconds": seconds, "repeats": repeats})
    if hvd.rank() == 0:
        with open(sys.argv[1], "w") as f:
            json.dump({"ranks": hvd.size(), "results": results}, f)


if __name__ == "__main__":
    main()
