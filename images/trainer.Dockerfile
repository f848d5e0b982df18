# distrain CPU trainer: TensorFlow 2.21 (CPU) + tf-keras + Horovod 0.28.1 (gloo) + distrain.
# Build from the repository root:
#   docker build -f images/trainer.Dockerfile -t distrain/trainer:0.1.0 .
# Horovod is built with the same script as the local setup (scripts/build_horovod.sh).
FROM python:3.11-slim-bookworm AS build
RUN apt-get update && apt-get install -y --no-install-recommends \
        build-essential cmake git && rm -rf /var/lib/apt/lists/*
WORKDIR /src
COPY requirements/ requirements/
RUN python -m venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH
RUN pip install --no-cache-dir -r requirements/pins.txt \
 && . requirements/horovod.env && pip install --no-cache-dir --no-deps "tf-keras==${TF_KERAS_VERSION}"
COPY scripts/build_horovod.sh scripts/
RUN DISTRAIN_CACHE=/tmp/cache bash scripts/build_horovod.sh /opt/venv/bin/python
COPY pyproject.toml README.md ./
COPY distrain/ distrain/
COPY components/ components/
COPY pipelines/ pipelines/
RUN pip install --no-cache-dir --no-deps .

FROM python:3.11-slim-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends libgomp1 openssh-client \
 && rm -rf /var/lib/apt/lists/* \
 && useradd --create-home --uid 1000 distrain
COPY --from=build /opt/venv /opt/venv
ENV PATH=/opt/venv/bin:$PATH TF_USE_LEGACY_KERAS=1 PYTHONUNBUFFERED=1
USER 1000
WORKDIR /home/distrain
ENTRYPOINT ["distrain"]
