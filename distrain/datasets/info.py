"""What a preprocessed data directory holds (its ``metadata.json``), as training reads it.

Below the data-set registry (:mod:`distrain.datasets`), which finds a directory's data set
with it, and below the input pipelines (:mod:`distrain.learning.inputs`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np

from distrain.preprocess.records import TFRecordFramingError, count_tfrecords


class DataError(ValueError):
    """Preprocessed data is missing or inconsistent."""


# features.json's dtypes (and the parsers' own) as tf-keras ``Input`` dtypes.
KERAS_DTYPES = {"float32": "float32", "int64": "int64", "int32": "int32", "bytes": "string"}


@dataclass(frozen=True)
class Feature:
    """One input feature of an example: its dtype and its shape (without the batch axis).

    Attributes:
        dtype: ``float32``, ``int64``, ``int32`` or ``bytes``.
        shape: Per example; ``None`` for a length that varies.
    """

    dtype: str
    shape: tuple

    def keras_input(self, name: str, keras):
        """A tf-keras ``Input`` of this feature, named ``name``."""
        return keras.Input(shape=self.shape, dtype=KERAS_DTYPES[self.dtype], name=name)


@dataclass(frozen=True)
class FeatureSpec:
    """What a data set's parser gives a model as input, and the label's name.

    Attributes:
        features: The model's input features by name (the label not among them).
        label: The label's (target's) name.
        as_dict: Whether the model is called with a dict of the features keyed by name
            (else with the one feature's tensor).
    """

    features: dict
    label: str
    as_dict: bool = True

    @classmethod
    def from_json(cls, data: dict, where: str = "features.json") -> FeatureSpec:
        """Reads a spec in features.json's form.

        ``{"features": {NAME: {"dtype": ..., "shape": [...]}}, "label": NAME}``; the label's
        own entry, if listed, is left out of the inputs.

        Raises:
            DataError: The spec is malformed (the message names ``where`` and the feature).
        """
        if not isinstance(data.get("features"), dict) or not isinstance(data.get("label"), str):
            raise DataError(f"{where}: expected {{'features': {{NAME: ...}}, 'label': NAME}}")
        features = {}
        for name, item in data["features"].items():
            if name == data["label"]:
                continue
            dtype, shape = item.get("dtype"), item.get("shape", [])
            if dtype not in KERAS_DTYPES or not isinstance(shape, list):
                raise DataError(
                    f"{where}: feature {name!r}: expected dtype one of "
                    f"{', '.join(KERAS_DTYPES)} and a shape list, got {item}"
                )
            features[name] = Feature(dtype, tuple(shape))
        return cls(features, data["label"])

    def to_json(self) -> dict:
        """The spec in features.json's form."""
        features = {n: {"dtype": f.dtype, "shape": list(f.shape)} for n, f in self.features.items()}
        return {"features": features, "label": self.label, "as_dict": self.as_dict}

    def keras_inputs(self, keras):
        """tf-keras ``Input`` layers for the model: a dict by name, or the one feature's."""
        inputs = {name: f.keras_input(name, keras) for name, f in self.features.items()}
        return inputs if self.as_dict else next(iter(inputs.values()))


# Tokens tf-keras' StringLookup and TextVectorization reserve (the mask and OOV tokens):
# a vocabulary that holds them is refused, so :meth:`DatasetInfo.vocabulary` leaves them out.
RESERVED_TOKENS = ("", "[UNK]")


@dataclass(frozen=True)
class FeatureStatistics:
    """A numeric feature's statistics over the training split, element by element.

    Each array has the feature's shape (``[]``: a 0-d array), as
    ``keras.layers.Normalization(axis=..., mean=s.mean, variance=s.variance)`` takes it.

    Attributes:
        count: Records counted (each element has this many values).
        mean: The mean of each element.
        variance: The population variance of each element (divided by ``count``, as
            ``Normalization.adapt`` computes it).
        min: The smallest value of each element.
        max: The largest value of each element.
    """

    count: int
    mean: np.ndarray
    variance: np.ndarray
    min: np.ndarray
    max: np.ndarray

    @classmethod
    def from_json(cls, data: dict, shape: tuple) -> FeatureStatistics:
        """From metadata.json's lists (flat, one number per element)."""
        if not data.get("count"):
            empty = np.zeros((0,))
            return cls(0, empty, empty, empty, empty)
        return cls(
            int(data["count"]),
            *(np.asarray(data[k]).reshape(shape) for k in ("mean", "variance", "min", "max")),
        )

    def overall(self) -> FeatureStatistics:
        """The statistics of all the feature's values together, as scalars.

        Exact from the element-wise ones (each element has ``count`` values): the mean of
        the means, the variance within elements plus the variance of their means;
        ``count`` is then every value (records times elements).
        """
        mean = float(np.mean(self.mean))
        variance = float(np.mean(self.variance) + np.mean((self.mean - mean) ** 2))
        low, high = np.min(self.min), np.max(self.max)
        return FeatureStatistics(
            self.count * max(1, self.mean.size), *map(np.asarray, (mean, variance, low, high))
        )


@dataclass(frozen=True)
class DatasetInfo:
    """What training needs to know about a preprocessed data set (from ``metadata.json``)."""

    data_dir: str
    dataset: str
    num_classes: int
    class_names: list[str]
    splits: dict[str, int]
    files: dict[str, str]
    metadata: dict
    view_name: str = ""
    # What the model reads (:meth:`distrain.datasets.DataSet.feature_spec`; None until
    # :func:`distrain.learning.models.load_info` fills it in).
    feature_spec: FeatureSpec | None = None

    @property
    def features(self) -> dict:
        """The model's input features by name (:class:`Feature`)."""
        if self.feature_spec is None:
            raise DataError(
                f"{self.data_dir}: no feature spec "
                "(load it with distrain.learning.models.load_info)"
            )
        return self.feature_spec.features

    @property
    def label(self) -> str:
        """The label's name."""
        if self.feature_spec is None:
            raise DataError(
                f"{self.data_dir}: no feature spec "
                "(load it with distrain.learning.models.load_info)"
            )
        return self.feature_spec.label

    @property
    def statistics(self) -> dict[str, FeatureStatistics]:
        """Each numeric feature's statistics over the training split, by name.

        Computed by the preprocessing job (the tfrecord data set's, as TFX Transform's
        analyzers do), so that a model builder sets ``Normalization(mean=...,
        variance=...)`` without ``adapt()``.

        Raises:
            DataError: The data set's preprocessing computes none (or an older one did).
        """
        found = self.metadata.get("statistics")
        if found is None:
            raise DataError(
                f"{self.data_dir}/metadata.json: no feature statistics (the {self.dataset} "
                "data set's preprocessing writes none, or an older version of distrain "
                "preprocessed it: preprocess the data again)"
            )
        shapes = {
            n: tuple(f.get("shape", [])) for n, f in self.metadata.get("features", {}).items()
        }
        return {n: FeatureStatistics.from_json(d, shapes.get(n, (-1,))) for n, d in found.items()}

    def vocabulary(self, name: str, reserved: bool = False) -> list[str]:
        """A bytes feature's most frequent tokens in the training split, most frequent first.

        Ties are broken by the token's UTF-8 bytes, ascending. As
        ``StringLookup(vocabulary=...)`` and ``TextVectorization(vocabulary=...)`` take it:
        the tokens those layers reserve (:data:`RESERVED_TOKENS`, the empty string and
        ``[UNK]``) are left out unless ``reserved``.

        Raises:
            DataError: No vocabulary for ``name`` (not a bytes feature, or the data set's
                preprocessing computes none).
        """
        found = self.metadata.get("vocabularies", {})
        if name not in found:
            have = ", ".join(sorted(found)) or "none"
            raise DataError(
                f"{self.data_dir}/metadata.json: no vocabulary for {name!r} (vocabularies: "
                f"{have}; the tfrecord job builds one per bytes feature)"
            )
        tokens = list(found[name]["tokens"])
        return tokens if reserved else [t for t in tokens if t not in RESERVED_TOKENS]

    @classmethod
    def load(cls, data_dir: str | os.PathLike) -> DatasetInfo:
        """Reads ``metadata.json`` of a preprocessed data directory.

        Raises:
            DataError: The directory or its metadata is missing or incomplete.
        """
        path = Path(data_dir) / "metadata.json"
        if not path.exists():
            raise DataError(
                f"{path}: not found; {data_dir} is not a preprocessed data directory "
                "(run the preprocessing step first)"
            )
        meta = json.loads(path.read_text())
        for key in ("dataset", "splits", "files"):
            if key not in meta:
                raise DataError(f"{path}: missing key {key!r}")
        if meta.get("complete") is not True:
            raise DataError(
                f"{path}: not marked complete (written by a job that did not finish, or by "
                "an older version of distrain); preprocess the data again"
            )
        return cls(
            data_dir=str(data_dir),
            dataset=meta["dataset"],
            num_classes=int(meta.get("num_classes", 0)),
            class_names=list(meta.get("class_names", [])),
            splits={k: int(v) for k, v in meta["splits"].items()},
            files=dict(meta["files"]),
            metadata=meta,
        )

    def view(self, name: str) -> DatasetInfo:
        """The same data as a model of view ``name`` reads it.

        A view the preprocessing wrote records of its own for (``metadata["views"]``) has
        its own splits, files and settings; any other view reads the main records, parsed
        its way by the data set's parser.
        """
        views = self.metadata.get("views", {})
        if name not in views:
            return replace(self, view_name=name)
        own = views[name]
        return replace(
            self,
            splits={k: int(v) for k, v in own["splits"].items()},
            files=dict(own["files"]),
            metadata={**self.metadata, **own},
            view_name=name,
        )

    def split_files(self, split: str) -> list[str]:
        """The TFRecord files of a split: exactly those ``metadata.json`` lists, checked.

        The preprocessing job lists every file it wrote with its records and bytes. A
        split's folder must hold exactly those files (none missing, none more: an
        earlier job's, a stray copy), each of its size and holding its number of records
        (counted from the file's framing), together the split's count.

        Raises:
            DataError: The split is unknown, or its files differ from the list (the
                message names the file and the difference).
        """
        if split not in self.files:
            raise DataError(f"{self.data_dir}: no split {split!r} (have {sorted(self.files)})")
        shards = self.metadata.get("shards")
        meta = os.path.join(self.data_dir, "metadata.json")
        if shards is None or split not in shards:
            raise DataError(
                f"{meta}: no list of the files of {split} (preprocessed by an older version "
                "of distrain); preprocess the data again"
            )
        listed = {os.path.normpath(item["file"]): item for item in shards[split]}
        folders = {os.path.dirname(name) for name in listed} or {os.path.dirname(self.files[split])}
        for folder in sorted(folders):
            where = os.path.join(self.data_dir, folder)
            present = sorted(os.listdir(where)) if os.path.isdir(where) else []
            for name in present:
                if os.path.join(folder, name) not in listed:
                    raise DataError(
                        f"{os.path.join(where, name)}: not in {meta}'s list of {split} "
                        "files (an earlier job's output, or a stray file); the data set is "
                        "refused rather than read mixed: preprocess into an empty folder"
                    )
        total = 0
        for name, item in sorted(listed.items()):
            path = os.path.join(self.data_dir, name)
            if not os.path.isfile(path):
                raise DataError(f"{path}: listed in {meta} for {split}, but missing")
            size = os.path.getsize(path)
            if size != item["bytes"]:
                raise DataError(f"{path}: {size} bytes, {meta} lists {item['bytes']}")
            try:
                records = count_tfrecords(path)
            except TFRecordFramingError as err:
                raise DataError(str(err)) from None
            if records != item["records"]:
                raise DataError(f"{path}: {records} records, {meta} lists {item['records']}")
            total += records
        if total != self.splits.get(split, total):
            raise DataError(
                f"{meta}: the files of {split} hold {total} records, its count says "
                f"{self.splits[split]}"
            )
        if not listed:
            raise DataError(f"{self.data_dir}: no files for {split}")
        return [os.path.join(self.data_dir, name) for name in sorted(listed)]
