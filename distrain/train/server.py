"""A parameter-server or worker process of the PS modes: ``distrain server``.

It reads its role from ``TF_CONFIG`` (as on Kubernetes), serves until it is stopped, and
holds no training logic: the coordinator (``distrain worker`` as chief) drives it.
"""

from __future__ import annotations

import argparse
import sys

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)
from distrain.preprocess.failures import Failure, report
from distrain.train.ps.roles import Role, start_server
from distrain.train.runtime import import_tensorflow
from distrain.train.worker import record_error
from distrain.train.worker import role as process_role


def main(argv: list[str] | None = None) -> int:
    """Starts the TensorFlow server named by TF_CONFIG and serves until killed.

    A failure (a bad TF_CONFIG, a port taken) is recorded for the launcher in the run's
    ``<output>/errors/`` (``--output``), as a training process records its own
    (:func:`distrain.train.worker.record_error`), so that a permanent one is not retried;
    then it is printed as one line, and the exit code is 2 for bad settings, 1 otherwise.
    """
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    parser.add_argument("--output", default="", help="the run's output folder (its errors/)")
    args = parser.parse_args(argv)
    import_tensorflow()  # without its start-up notices (unless --debug)
    try:
        role = Role.from_environment()
        server = start_server(role, args.threads)
        print(f"{role.job}:{role.index} serving at {server.target}", flush=True)
        server.join()
    except Exception as exc:  # noqa: BLE001 (recorded for the launcher, then one line)
        if args.output:
            record_error(args.output, exc)
        failure = Failure.of(f"server {process_role()}", exc)
        report(failure, exc)
        return failure.exit_code
    return 0


if __name__ == "__main__":
    sys.exit(main())
