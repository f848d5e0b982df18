# distrain Beam preprocessing image: Apache Beam 2.77 + TensorFlow (for tf.train.Example) + distrain.
# Build with scripts/build_images.sh (tag = package version; --local builds here with buildah on
# a Debian base made from Debian's archive), or from the repository root:
#   docker build -f images/beam.Dockerfile -t distrain/beam:0.1.0 .
# BASE is any Debian 12 (bookworm) image with python3 (3.11) and its venv module; the default is
# the pinned official slim image. Python packages come from requirements/pins.txt.
ARG BASE=python:3.11.14-slim-bookworm@sha256:65a93d69fa75478d554f4ad27c85c1e69fa184956261b4301ebaf6dbb0a3543d
FROM ${BASE}
RUN useradd --create-home --uid 1000 distrain
WORKDIR /src
COPY requirements/ requirements/
RUN python3 -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN --mount=type=cache,target=/root/.cache/pip \
    pip install -r requirements/pins.txt \
 && . requirements/horovod.env && pip install --no-deps "tf-keras==${TF_KERAS_VERSION}"
COPY pyproject.toml setup.py README.md ./
COPY distrain/ distrain/
COPY components/ components/
COPY pipelines/ pipelines/
# The wheel a user installs, built from these files, then the sources go.
RUN --mount=type=cache,target=/root/.cache/pip \
    pip wheel --no-deps -w /tmp/dist . && pip install --no-deps /tmp/dist/distrain-*.whl \
 && rm -rf /src /tmp/dist
ENV TF_USE_LEGACY_KERAS=1 PYTHONUNBUFFERED=1
USER 1000
WORKDIR /home/distrain
ENTRYPOINT ["distrain"]
