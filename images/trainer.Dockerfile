# distrain CPU trainer: TensorFlow 2.21 (CPU) + tf-keras + Horovod 0.28.1 (gloo and MPI) + distrain.
# Build with scripts/build_images.sh (tag = package version; --local builds here with buildah on
# a Debian base made from Debian's archive), or from the repository root:
#   docker build -f images/trainer.Dockerfile -t distrain/trainer:0.1.0 .
# Horovod is built by the same script as the local setup (scripts/build_horovod.sh), here with
# the MPI controller too: the MPI Operator's launcher starts the ranks with mpirun over ssh.
# The script keeps its wheel in /cache: build_images.sh mounts the machine's wheel cache there,
# so a rebuild reuses it instead of compiling Horovod again.
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
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -r requirements/pins.txt \
 && . requirements/horovod.env && pip install --no-deps "tf-keras==${TF_KERAS_VERSION}"
COPY scripts/build_horovod.sh scripts/
RUN DISTRAIN_CACHE=/cache DISTRAIN_HOROVOD_MPI=1 bash scripts/build_horovod.sh /opt/venv/bin/python
COPY pyproject.toml setup.py README.md ./
COPY distrain/ distrain/
COPY components/ components/
COPY pipelines/ pipelines/
# The wheel a user installs, built from these files.
RUN --mount=type=cache,target=/root/.cache/pip \
    pip wheel --no-deps -w /tmp/dist . && pip install --no-deps /tmp/dist/distrain-*.whl

FROM ${BASE}
# openmpi + ssh: MPIJob workers run sshd (as the non-root user, on port 2222) and the
# launcher runs mpirun; see manifests/ and distrain/k8s/objects.py.
RUN apt-get update && apt-get install -y --no-install-recommends \
        libgomp1=12.2.0-14+deb12u1 openmpi-bin=4.1.4-3+b1 \
        openssh-client=1:9.2p1-2+deb12u10 openssh-server=1:9.2p1-2+deb12u10 \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 distrain
COPY images/ssh/ /etc/distrain/ssh/
RUN sh /etc/distrain/ssh/configure.sh
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH TF_USE_LEGACY_KERAS=1 PYTHONUNBUFFERED=1
USER 1000
WORKDIR /home/distrain
ENTRYPOINT ["distrain"]
