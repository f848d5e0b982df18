# distrain GPU trainer: TensorFlow 2.21 with CUDA + tf-keras + Horovod 0.28.1 (NCCL for GPU
# collectives; MPI and gloo as controllers) + distrain.
# Build with scripts/build_images.sh (tag = package version), or from the repository root:
#   docker build -f images/trainer-gpu.Dockerfile -t distrain/trainer-gpu:0.1.0 .
# TensorFlow's GPU wheel brings its CUDA runtime libraries (tensorflow[and-cuda]); Horovod's
# NCCL build also needs nvcc and NCCL's headers, taken from NVIDIA's Debian 12 repository at
# the CUDA minor version below. When TF is bumped, set CUDA_MINOR to the CUDA that TF's
# release notes name. Horovod is built by the same script as the local setup.
ARG CUDA_MINOR=12-5
FROM python:3.11.14-slim-bookworm AS cuda
ARG CUDA_MINOR
ADD https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/cuda-keyring_1.1-1_all.deb /tmp/
# hadolint ignore=DL3008
RUN dpkg -i /tmp/cuda-keyring_1.1-1_all.deb && rm /tmp/cuda-keyring_1.1-1_all.deb \
 && apt-get update && apt-get install -y --no-install-recommends \
        "cuda-cudart-${CUDA_MINOR}" libnccl2 libgomp1=12.2.0-14+deb12u1 openmpi-bin=4.1.4-3+b1 \
        openssh-client=1:9.2p1-2+deb12u10 openssh-server=1:9.2p1-2+deb12u10 \
 && rm -rf /var/lib/apt/lists/*

FROM cuda AS build
ARG CUDA_MINOR
# hadolint ignore=DL3008
RUN apt-get update && apt-get install -y --no-install-recommends \
        "cuda-nvcc-${CUDA_MINOR}" "cuda-cudart-dev-${CUDA_MINOR}" libnccl-dev \
        build-essential=12.9 cmake=3.25.1-1 git=1:2.39.5-0+deb12u3 \
        libopenmpi-dev=4.1.4-3+b1 \
 && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements/ requirements/
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:/usr/local/cuda/bin:$PATH
# The CPU wheel pinned for development is swapped for the GPU build of the same version.
RUN sed 's/^tensorflow-cpu==/tensorflow[and-cuda]==/' requirements/pins.txt > /tmp/pins-gpu.txt \
 && pip install --no-cache-dir -r /tmp/pins-gpu.txt \
 && . requirements/horovod.env && pip install --no-cache-dir --no-deps "tf-keras==${TF_KERAS_VERSION}"
COPY scripts/build_horovod.sh scripts/
RUN DISTRAIN_CACHE=/tmp/cache DISTRAIN_HOROVOD_MPI=1 DISTRAIN_HOROVOD_NCCL=1 \
    HOROVOD_CUDA_HOME=/usr/local/cuda bash scripts/build_horovod.sh /opt/venv/bin/python
COPY pyproject.toml README.md ./
COPY distrain/ distrain/
COPY components/ components/
COPY pipelines/ pipelines/
RUN pip install --no-cache-dir --no-deps .

FROM cuda
RUN useradd --create-home --uid 1000 distrain
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
