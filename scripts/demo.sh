#!/usr/bin/env bash
# Set up, then run the MNIST pipeline locally on the generated sample:
# preprocess (Beam) -> single:1 and sync:2 (Horovod) -> evaluate -> compare.
# Extra arguments go to `distrain run mnist` (e.g. --runs single:1,sync:2 --epochs 3).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
exec "$root/.venv/bin/distrain" run mnist --output "${DISTRAIN_OUT:-$root/out/mnist}" "$@"
