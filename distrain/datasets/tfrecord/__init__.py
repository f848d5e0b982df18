"""tfrecord: your own ``tf.train.Example`` files, described by a ``features.json``.

The raw folder holds ``features.json`` (``{"features": {NAME: {"dtype": "float32" |
"int64" | "bytes", "shape": [...]}}, "label": NAME}``), ``train-*.tfrecord`` files and
optionally ``test-*.tfrecord`` files (either gzipped or not). The parser gives a model a
dict of the non-label features keyed by name (float32, int64 or string tensors of shape
``[batch, *shape]``) and the label (int32 ``[batch]``: a class; or float32 ``[batch]`` when
features.json declares a float32 label, a regression's target). The Beam job also computes
each numeric feature's statistics and each bytes feature's vocabulary over the training
split (:mod:`distrain.datasets.tfrecord.analyze`), which ``info.statistics`` and
``info.vocabulary()`` hand to a model builder.
"""

from __future__ import annotations

from pathlib import Path

from distrain.datasets import DataSet, DataSetError, ModelSpec, register
from distrain.datasets.tfrecord.defaults import DEFAULTS
from distrain.datasets.tfrecord.models import mlp
from distrain.datasets.tfrecord.sample import write_tfrecord_sample
from distrain.datasets.tfrecord.spec import (
    SOURCES,
    SPEC_FILE,
    FeatureSpec,
    SpecError,
    check_first_frame,
    source_files,
)
from distrain.learning.tasks import CLASSIFICATION

# tf.io's dtype of each features.json dtype.
TF_DTYPES = {"float32": "float32", "int64": "int64", "bytes": "string"}


@register
class Tfrecord(DataSet):
    """Your TFRecords of ``tf.train.Example`` and their ``features.json``."""

    name = "tfrecord"
    pipeline = DEFAULTS
    fault_cases = (
        ("tfrecord/missing-feature", "TFRecords: a missing feature dead-lettered, file and record"),
        ("tfrecord/wrong-length", "TFRecords: a wrong length or dtype dead-lettered, named"),
        ("tfrecord/no-spec", "TFRecords: a folder without features.json or train files refused"),
        ("tfrecord/framing", "TFRecords: a file that is not whole TFRecords refused, named"),
        ("tfrecord/float-label", "TFRecords: a NaN or infinite float label dead-lettered, named"),
        (
            "tfrecord/vocabulary-bounded",
            "TFRecords: a huge vocabulary stays bounded, the rest counted",
        ),
    )
    summary = "your tf.train.Example TFRecords (gzip or not), described by features.json"
    sample_size = 2000
    sample_unit = "training records"
    title = "TFRecords"
    models = {
        "feature-mlp": ModelSpec(
            mlp,
            CLASSIFICATION,
            stages=False,  # a functional model of named inputs, not a Sequential stack
            summary="MLP over the concatenated numeric features (bytes features refused)",
        ),
    }

    def write_sample(self, out, size, seed):
        size = size or self.sample_size
        write_tfrecord_sample(out, size, max(1, size // 5), seed)

    def check_source(self, source):
        raise DataSetError(
            "the tfrecord data set is your own files: give their folder (--data DIR, "
            "features.json and train-*.tfrecord), or --sample; there is nothing to download"
        )

    def download(self, out, source):
        self.check_source(source)

    def raw_files(self, src):
        return [Path(src) / SPEC_FILE] + [p for s in SOURCES for p in source_files(src, s)]

    def check_raw_files(self, src):
        """features.json readable and valid, training files present, each starting as TFRecords."""
        missing = [SPEC_FILE] if not (Path(src) / SPEC_FILE).is_file() else []
        if not source_files(src, "train"):
            missing.append("train-*.tfrecord files")
        if missing:
            raise SpecError(
                f"{src}: no {' and no '.join(missing)} (a tfrecord folder holds features.json "
                "and train-*.tfrecord, optionally test-*.tfrecord; gzip allowed)"
            )
        FeatureSpec.load(src)
        for source in SOURCES:
            for path in source_files(src, source):
                check_first_frame(path)

    def preprocess(self, raw, out, validation_fraction, seed, beam_args, overwrite=False):
        from distrain.datasets.tfrecord import beam as job

        cfg = job.TfrecordPreprocessConfig(
            raw, out, validation_fraction=validation_fraction, seed=seed, overwrite=overwrite
        )
        return job.preprocess_tfrecord(cfg, beam_args)

    def parser(self, info, serving: bool = False):
        """A dict of the non-label features by name (``[batch, *shape]``), and the label.

        float32 features stay float32, int64 ones int64, bytes ones strings; the label is
        int32 ``[batch]`` (a class), or float32 ``[batch]`` for a float32 label.
        ``serving``: a record may leave its label out (read as 0).
        """
        import tensorflow as tf

        features = info.metadata["features"]
        label = info.metadata["label"]
        spec = {
            name: tf.io.FixedLenFeature(f["shape"], getattr(tf, TF_DTYPES[f["dtype"]]))
            for name, f in features.items()
        }
        regression = info.metadata.get("label_dtype") == "float32"
        # Checked by the job: one value.
        spec[label] = tf.io.FixedLenFeature(
            [], tf.float32 if regression else tf.int64, default_value=0 if serving else None
        )
        target_dtype = tf.float32 if regression else tf.int32

        def parse(records):
            parsed = tf.io.parse_example(records, spec)
            target = tf.cast(parsed.pop(label), target_dtype)
            return parsed, target

        return parse

    def serving_parser(self, info):
        """:meth:`parser`, the label optional."""
        return self.parser(info, serving=True)
