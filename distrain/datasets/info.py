"""What a preprocessed data directory holds (its ``metadata.json``), as training reads it.

Below the data-set registry (:mod:`distrain.datasets`), which finds a directory's data set
with it, and below the input pipelines (:mod:`distrain.train.inputs`).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path

from distrain.preprocess.records import TFRecordFramingError, count_tfrecords


class DataError(ValueError):
    """Preprocessed data is missing or inconsistent."""


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
