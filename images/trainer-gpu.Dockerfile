# distrain GPU trainer: TensorFlow 2.21 with CUDA + tf-keras + Horovod 0.28.1 (NCCL for GPU
# collectives; MPI and gloo as controllers) + distrain.
# Build with scripts/build_images.sh (tag = package version; --local builds here with buildah on
# a Debian base made from Debian's archive), or from the repository root:
#   docker build -f images/trainer-gpu.Dockerfile -t distrain/trainer-gpu:0.1.0 .
# CUDA comes from PyPI only, no NVIDIA repository: TensorFlow's GPU wheel brings CUDA 12's
# runtime, cuDNN and NCCL as wheels (tensorflow[and-cuda], pinned in requirements/gpu.txt).
# Horovod's NCCL build also needs nvcc, which no CUDA 12 wheel ships, so its few GPU kernels
# are compiled by CUDA 13.0's nvcc wheels (requirements/cuda-build.txt, build stage only) and
# link CUDA 13.0's runtime statically: Horovod's GPU operations need a CUDA 13 driver (R580+).
# Horovod links the NCCL that TF uses (the nvidia-nccl-cu12 wheel in the venv).
# Horovod is built by the same script as the local setup (scripts/build_horovod.sh), keeping
# its wheel in /cache (build_images.sh mounts the machine's wheel cache there), so a rebuild
# reuses it instead of compiling Horovod again.
# BASE is any Debian 12 (bookworm) image with python3 (3.11) and its venv module; the default is
# the pinned official slim image. Debian packages are pinned by version.
ARG BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
FROM ${BASE} AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        build-essential=12.9 cmake=3.25.1-1 git=1:2.39.5-0+deb12u3 \
        libopenmpi-dev=4.1.4-3+b1 openmpi-bin=4.1.4-3+b1 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements/ requirements/
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
# The CPU wheel pinned for development is swapped for the CUDA build of the same version.
RUN --mount=type=cache,target=/root/.cache/pip \
    sed '/^tensorflow-cpu==/d' requirements/pins.txt > /tmp/pins-gpu.txt \
 && pip install -r /tmp/pins-gpu.txt -r requirements/gpu.txt \
 && . requirements/horovod.env && pip install --no-deps "tf-keras==${TF_KERAS_VERSION}"
# A CUDA home for Horovod's build: the CUDA 13.0 wheels install into one nvidia/cu13 tree
# (bin/nvcc, include, lib, nvvm); nvcc links from lib64 and CMake looks for libcudart.so.
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install --target /opt/cuda-build -r requirements/cuda-build.txt \
 && ln -s lib /opt/cuda-build/nvidia/cu13/lib64 \
 && ln -s libcudart.so.13 /opt/cuda-build/nvidia/cu13/lib/libcudart.so
COPY scripts/build_horovod.sh scripts/
# NCCL: the wheel's header and libnccl.so.2 (linked shared, as TF does; CMake finds it under
# the unversioned name). Kernels for Turing (7.5) to Blackwell (12.0), with PTX for newer GPUs.
RUN nccl=/opt/venv/lib/python3.11/site-packages/nvidia/nccl \
 && ln -sf libnccl.so.2 "$nccl/lib/libnccl.so" \
 && DISTRAIN_CACHE=/cache DISTRAIN_HOROVOD_MPI=1 DISTRAIN_HOROVOD_NCCL=1 \
    HOROVOD_CUDA_HOME=/opt/cuda-build/nvidia/cu13 CUDACXX=/opt/cuda-build/nvidia/cu13/bin/nvcc \
    HOROVOD_NCCL_INCLUDE="$nccl/include" HOROVOD_NCCL_LIB="$nccl/lib" HOROVOD_NCCL_LINK=SHARED \
    HOROVOD_BUILD_CUDA_CC_LIST=75,80,86,89,90,100,120 \
    bash scripts/build_horovod.sh /opt/venv/bin/python
COPY pyproject.toml setup.py README.md ./
COPY distrain/ distrain/
COPY components/ components/
COPY pipelines/ pipelines/
# The wheel a user installs, built from these files.
RUN --mount=type=cache,target=/root/.cache/pip \
    pip wheel --no-deps -w /tmp/dist . && pip install --no-deps /tmp/dist/distrain-*.whl

FROM ${BASE}
# openmpi + ssh: MPIJob workers run sshd (as the non-root user, on port 2222) and the
# launcher runs mpirun; see manifests/ and distrain/k8s/objects.py. No CUDA packages: CUDA is
# in the venv's wheels, and the driver (libcuda) comes from the node with the GPU.
RUN apt-get update && apt-get install -y --no-install-recommends \
        libgomp1=12.2.0-14+deb12u1 openmpi-bin=4.1.4-3+b1 \
        openssh-client=1:9.2p1-2+deb12u10 openssh-server=1:9.2p1-2+deb12u10 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 distrain
COPY images/ssh/ /etc/distrain/ssh/
RUN sh /etc/distrain/ssh/configure.sh
COPY --from=build /opt/venv /opt/venv
# No NVIDIA_VISIBLE_DEVICES: the device plugin sets it for the containers that ask for GPUs;
# set to "all" here it would give the launcher, chief and parameter servers every GPU.
ENV PATH=/opt/venv/bin:$PATH TF_USE_LEGACY_KERAS=1 PYTHONUNBUFFERED=1 \
    NVIDIA_DRIVER_CAPABILITIES=compute,utility
USER 1000
WORKDIR /home/distrain
ENTRYPOINT ["distrain"]
