# distrain Beam preprocessing image: Apache Beam 2.77 + TensorFlow (for tf.train.Example) + distrain.
# Build with scripts/build_images.sh (tag = package version), or from the repository root:
#   docker build -f images/beam.Dockerfile -t distrain/beam:0.1.0 .
# Base images are pinned by tag; Debian packages by version (bookworm).
FROM python:3.11.14-slim-bookworm
RUN useradd --create-home --uid 1000 distrain
WORKDIR /src
COPY requirements/ requirements/
RUN pip install --no-cache-dir -r requirements/pins.txt \
 && . requirements/horovod.env && pip install --no-cache-dir --no-deps "tf-keras==${TF_KERAS_VERSION}"
COPY pyproject.toml README.md ./
COPY distrain/ distrain/
COPY components/ components/
COPY pipelines/ pipelines/
RUN pip install --no-cache-dir --no-deps . && rm -rf /src
ENV TF_USE_LEGACY_KERAS=1 PYTHONUNBUFFERED=1
USER 1000
WORKDIR /home/distrain
ENTRYPOINT ["distrain"]
