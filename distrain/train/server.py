"""A parameter-server or worker process of the PS modes: ``distrain server``.

It reads its role from ``TF_CONFIG`` (as on Kubernetes), serves until it is stopped, and
holds no training logic: the coordinator (``distrain worker`` as chief) drives it.
"""

from __future__ import annotations

import argparse
import sys

import distrain  # noqa: F401  (sets TF_USE_LEGACY_KERAS before TensorFlow loads)


def main(argv: list[str] | None = None) -> int:
    """Starts the TensorFlow server named by TF_CONFIG and serves until killed."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=1, help="intra-op threads")
    args = parser.parse_args(argv)
    from distrain.train.ps import Role, start_server

    role = Role.from_environment()
    server = start_server(role, args.threads)
    print(f"{role.job}:{role.index} serving at {server.target}", flush=True)
    server.join()
    return 0


if __name__ == "__main__":
    sys.exit(main())
