"""Input pipelines: preprocessed TFRecords to ``tf.data`` datasets, the same for every mode."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path


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
    # :func:`distrain.datasets.load_info` fills it in).
    feature_spec: FeatureSpec | None = None

    @property
    def features(self) -> dict:
        """The model's input features by name (:class:`Feature`)."""
        if self.feature_spec is None:
            raise DataError(f"{self.data_dir}: no feature spec (load it with datasets.load_info)")
        return self.feature_spec.features

    @property
    def label(self) -> str:
        """The label's name."""
        if self.feature_spec is None:
            raise DataError(f"{self.data_dir}: no feature spec (load it with datasets.load_info)")
        return self.feature_spec.label

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
        from distrain.preprocess.records import TFRecordFramingError, count_tfrecords

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


_PARSE_CALLS = 2
_PREFETCH_BATCHES = 2


def make_dataset(
    info: DatasetInfo,
    split: str,
    batch_size: int,
    *,
    shard: tuple[int, int] = (1, 0),
    shuffle: bool = False,
    seed: int = 0,
    repeat: bool = False,
    drop_remainder: bool = False,
    common_every: int = 0,
    held_out: tuple[int, bool] | None = None,
):
    """Builds the batched dataset of ``(features, labels)`` for one split.

    Args:
        info: The data set's metadata.
        split: ``train``, ``validation`` or ``test``.
        batch_size: Examples per batch.
        shard: ``(num_shards, index)``: this worker reads every ``num_shards``-th record
            starting at ``index`` (data parallelism: each worker sees a disjoint part).
        shuffle: Shuffle records (with ``seed``, reshuffled each epoch).
        seed: Shuffle seed.
        repeat: Repeat forever (the caller counts steps).
        drop_remainder: Drop a last partial batch.
        common_every: Every shard also reads each ``common_every``-th record of the split
            (records every worker shares besides its own; 0: none).
        held_out: ``(every, only)``: of this shard's records, every ``every``-th one is
            held out: ``only=False`` leaves them out, ``only=True`` keeps just them.

    Returns:
        A ``tf.data.Dataset``.
    """
    import tensorflow as tf

    from distrain import datasets

    parse = datasets.get(info.dataset).parser(info)
    num_shards, index = shard
    ds = tf.data.TFRecordDataset(info.split_files(split))
    if common_every > 0 and num_shards > 1:
        ds = ds.enumerate().filter(
            lambda i, _: tf.logical_or(i % num_shards == index, i % common_every == 0)
        )
        ds = ds.map(lambda _, record: record)
    elif num_shards > 1:
        ds = ds.shard(num_shards, index)
    if held_out is not None:
        every, only = held_out
        ds = ds.enumerate().filter(lambda i, _: tf.equal(i % every == 0, only))
        ds = ds.map(lambda _, record: record)
    ds = ds.cache()
    if shuffle:
        ds = ds.shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    # Fixed parallelism and buffer, and tf.data's autotuning off: with it on, TF 2.21's
    # autotuning thread sleeps ever longer between rounds and deleting the iterator waits
    # for it to wake (measured: 20 s at the end of a 30 s run of the MLP on one core, 50 s
    # after 95 s). Parsing a batch is a few ms; two batches in flight keep a step fed.
    ds = ds.map(parse, num_parallel_calls=_PARSE_CALLS)
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.prefetch(_PREFETCH_BATCHES).with_options(options)


def shard_size(total: int, num_shards: int, index: int) -> int:
    """How many of ``total`` records ``Dataset.shard(num_shards, index)`` keeps."""
    return total // num_shards + (1 if index < total % num_shards else 0)
