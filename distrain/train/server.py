"""A parameter-server or worker process of the PS modes: ``distrain server``.

It reads its role from ``TF_CONFIG`` (as on Kubernetes), serves until it is stopped, and
holds no training logic: the coordinator (``distrain worker`` as chief) drives it.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)


def main(argv: list[str] | None = None) -> int:
    """Starts the TensorFlow server named by TF_CONFIG and serves until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    args = parser.parse_args(argv)
    tf_config = json.loads(os.environ["TF_CONFIG"])
    task = tf_config["task"]
    import tensorflow as tf

    config = tf.compat.v1.ConfigProto(
        # On few cores a server with fewer inter-op threads can deadlock.
        inter_op_parallelism_threads=max(4, args.threads),
        intra_op_parallelism_threads=args.threads,
    )
    server = tf.distribute.Server(
        tf.train.ClusterSpec(tf_config["cluster"]),
        job_name=task["type"],
        task_index=int(task["index"]),
        protocol="grpc",
        config=config,
        start=True,
    )
    print(f"{task['type']}:{task['index']} serving at {server.target}", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
