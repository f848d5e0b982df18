"""The user's files: ``features.json``, TFRecord framing (gzip or not) and ``tf.train.Example``.

Nothing here imports TensorFlow (the Beam workers read and check records without it):
the framing is read by hand, and an ``Example`` is decoded by protobuf through a private
copy of its schema (``tensorflow/core/example/{example,feature}.proto``; the wire format
is all that matters, so the copy lives in a pool of its own under another package name).
"""

from __future__ import annotations

import contextlib
import gzip
import json
import math
import os
import re
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from distrain.preprocess.records import TFRecordFramingError, masked_crc32c
from distrain.preprocess.tokens import TOKENIZERS

SPEC_FILE = "features.json"
# The raw files of each source split: ``train-*.tfrecord`` (or ``.tfrecord.gz``).
SOURCES = ("train", "test")
SUFFIXES = (".tfrecord", ".tfrecord.gz")
# features.json's dtypes, the Example list that holds each, and TensorFlow's dtype name.
KINDS = {"float32": "float_list", "int64": "int64_list", "bytes": "bytes_list"}
# A label's dtypes: int64 (a class index, for classification) or float32 (a target value,
# for regression: no classes).
LABEL_DTYPES = ("int64", "float32")
GZIP_MAGIC = b"\x1f\x8b"
# Without class_names, labels must lie below this (the job's ``max_label``, declared
# there with this default): the class count, the histogram and metadata.json grow with
# the largest label, so one stray label of 3,000,000 made a 125 MB metadata.json.
MAX_LABEL = 10_000
# The parser casts labels to int32; a label above this would wrap.
INT32_MAX = 2**31 - 1


class SpecError(ValueError):
    """``features.json`` is missing or does not describe the records."""


@dataclass(frozen=True)
class Feature:
    """One feature of the records: its name, dtype and shape (values per record: the product)."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    # A bytes feature's tokenizer for its vocabulary (features.json's optional
    # ``tokenizer``, one of :data:`~distrain.preprocess.tokens.TOKENIZERS`; "": the default).
    tokenizer: str = ""

    @property
    def size(self) -> int:
        """Values one record holds (``shape []``: one)."""
        return math.prod(self.shape)

    def to_dict(self) -> dict:
        """``{"dtype", "shape"}`` (and ``tokenizer`` if given), as features.json writes it."""
        out = {"dtype": self.dtype, "shape": list(self.shape)}
        if self.tokenizer:
            out["tokenizer"] = self.tokenizer
        return out


@dataclass(frozen=True)
class FeatureSpec:
    """What ``features.json`` declares.

    Attributes:
        features: The non-label features, in the file's order.
        label: The label feature (one value per record).
        class_names: Optional names of the classes; then labels must lie in
            ``0 .. len(class_names) - 1``.
        label_dtype: ``int64`` (the class index) or ``float32`` (a regression's target:
            a finite number, no classes).
    """

    features: dict[str, Feature]
    label: str
    class_names: tuple[str, ...] = ()
    label_dtype: str = "int64"

    @classmethod
    def from_dict(cls, raw: object, where: str) -> FeatureSpec:
        """Checks and reads a features.json document; ``where`` names it in errors.

        Raises:
            SpecError: Anything not as the format says (the message names the key).
        """
        if not isinstance(raw, dict) or not isinstance(raw.get("features"), dict):
            raise SpecError(f'{where}: expected {{"features": {{NAME: {{...}}}}, "label": NAME}}')
        features = {}
        for name, item in raw["features"].items():
            if not isinstance(item, dict) or item.get("dtype") not in KINDS:
                raise SpecError(
                    f"{where}: feature {name!r}: dtype must be one of {', '.join(KINDS)}, "
                    f"got {item.get('dtype') if isinstance(item, dict) else item!r}"
                )
            shape = item.get("shape", [])
            if not isinstance(shape, list) or not all(
                isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in shape
            ):
                raise SpecError(
                    f"{where}: feature {name!r}: shape must be a list of positive integers "
                    f"([] for one value), got {shape!r}"
                )
            tokenizer = item.get("tokenizer", "")
            if tokenizer and (item["dtype"] != "bytes" or tokenizer not in TOKENIZERS):
                raise SpecError(
                    f"{where}: feature {name!r}: tokenizer is for bytes features, one of "
                    f"{', '.join(TOKENIZERS)}; got {tokenizer!r} on a {item['dtype']} feature"
                )
            features[name] = Feature(name, item["dtype"], tuple(shape), tokenizer)
        label = raw.get("label")
        if label not in features:
            raise SpecError(f"{where}: label {label!r} is not one of the features")
        if features[label].dtype not in LABEL_DTYPES or features[label].size != 1:
            raise SpecError(
                f"{where}: label {label!r} must be int64 (a class) or float32 (a regression "
                f"target) with one value (shape [] or [1]), got {features[label].dtype} "
                f"{list(features[label].shape)}"
            )
        if len(features) < 2:
            raise SpecError(f"{where}: no feature besides the label {label!r}")
        names = raw.get("class_names", [])
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            raise SpecError(f"{where}: class_names must be a list of strings")
        if names and features[label].dtype == "float32":
            raise SpecError(
                f"{where}: label {label!r} is float32 (a regression target): no class_names"
            )
        return cls(
            {n: f for n, f in features.items() if n != label},
            label,
            tuple(names),
            features[label].dtype,
        )

    @classmethod
    def load(cls, directory: str | os.PathLike) -> FeatureSpec:
        """Reads ``DIRECTORY/features.json``.

        Raises:
            SpecError: The file is missing, not JSON, or not the format.
        """
        path = Path(directory) / SPEC_FILE
        if not path.is_file():
            raise SpecError(
                f"{path}: not found; a tfrecord folder needs features.json beside its "
                '{"features": {NAME: {"dtype": ..., "shape": [...]}}, "label": NAME}'
            )
        try:
            raw = json.loads(path.read_text())
        except (ValueError, UnicodeDecodeError) as err:
            raise SpecError(f"{path}: not JSON ({err})") from None
        return cls.from_dict(raw, str(path))

    def every_feature(self) -> dict[str, Feature]:
        """The features and the label, as records hold them."""
        return {**self.features, self.label: Feature(self.label, self.label_dtype, ())}

    def to_dict(self) -> dict:
        """The spec as features.json writes it (the label among the features)."""
        out = {
            "features": {n: f.to_dict() for n, f in self.every_feature().items()},
            "label": self.label,
        }
        if self.class_names:
            out["class_names"] = list(self.class_names)
        return out


def source_files(directory: str | os.PathLike, source: str) -> list[Path]:
    """The raw files of a source split (``train`` or ``test``), in name order."""
    folder = Path(directory)
    found = {p for suffix in SUFFIXES for p in folder.glob(f"{source}-*{suffix}")}
    return sorted(p for p in found if p.is_file())


def is_gzip(path: str | os.PathLike) -> bool:
    """Whether a file is gzipped: its ``.gz`` suffix or its first two bytes."""
    if str(path).endswith(".gz"):
        return True
    with open(path, "rb") as f:
        return f.read(2) == GZIP_MAGIC


def open_records(path: str | os.PathLike):
    """The file's TFRecord bytes, decompressed when it is gzipped."""
    return gzip.open(path, "rb") if is_gzip(path) else open(path, "rb")


@contextlib.contextmanager
def _named_errors(path):
    """A damaged gzip stream's error (``BadGzipFile``, ``EOFError``) as one naming the file."""
    try:
        yield
    except (OSError, EOFError) as err:
        raise TFRecordFramingError(f"{path}: cannot be read ({err})") from None


def _header(f, path, number: int) -> int | None:
    """The length of record ``number`` (from 1), its checksum checked; None at the end."""
    header = f.read(12)
    if not header:
        return None
    if len(header) < 12:
        raise TFRecordFramingError(f"{path}: ends inside the length of record {number}")
    length_bytes, crc = header[:8], struct.unpack("<I", header[8:])[0]
    if masked_crc32c(length_bytes) != crc:
        raise TFRecordFramingError(
            f"{path}: record {number}: the length's checksum does not match (not a TFRecord "
            "file, or a damaged one)"
        )
    return struct.unpack("<Q", length_bytes)[0]


def read_frames(path: str | os.PathLike) -> Iterator[tuple[bytes, bool]]:
    """Each record of a TFRecord file: ``(data, whether its checksum matches)``.

    Raises:
        TFRecordFramingError: The file ends inside a record, or a length's checksum is
            wrong (what follows cannot be found).
    """
    with _named_errors(path), open_records(path) as f:
        number = 1
        while (length := _header(f, path, number)) is not None:
            data = f.read(length)
            tail = f.read(4)
            if len(data) < length or len(tail) < 4:
                raise TFRecordFramingError(f"{path}: ends inside record {number}")
            yield data, masked_crc32c(data) == struct.unpack("<I", tail)[0]
            number += 1


def count_frames(path: str | os.PathLike) -> int:
    """Records in a TFRecord file (gzip or not), from its framing alone.

    Lengths only: no record is parsed, so the count shares nothing with the job's reader.

    Raises:
        TFRecordFramingError: As :func:`read_frames`.
    """
    count, gz = 0, is_gzip(path)
    size = None if gz else os.path.getsize(path)
    with _named_errors(path), open_records(path) as f:
        while (length := _header(f, path, count + 1)) is not None:
            if gz:  # a gzip stream can only be read through
                whole = len(f.read(length + 4)) == length + 4
            else:
                target = f.tell() + length + 4
                whole = target <= size
                f.seek(target)
            if not whole:
                raise TFRecordFramingError(f"{path}: ends inside record {count + 1}")
            count += 1
    return count


def check_first_frame(path: str | os.PathLike) -> None:
    """The cheap check of a raw file: not empty, and its first length's checksum matches.

    Raises:
        TFRecordFramingError: It is empty or does not start as a TFRecord file does.
    """
    with _named_errors(path), open_records(path) as f:
        if _header(f, path, 1) is None:
            raise TFRecordFramingError(f"{path}: empty file, expected TFRecords")


_EXAMPLE = None


def _example_class():
    """The ``tf.train.Example`` message class, built once from a private copy of its schema."""
    global _EXAMPLE
    if _EXAMPLE is not None:
        return _EXAMPLE
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    fd = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="distrain_tfexample.proto", package="distrain_tfexample", syntax="proto3"
    )

    def message(name, *fields, nested=()):
        m = proto.message_type.add(name=name)
        for number, field_name, kind, label, type_name, oneof in fields:
            f = m.field.add(name=field_name, number=number, type=kind, label=label)
            if type_name:
                f.type_name = type_name
            if oneof is not None:
                f.oneof_index = oneof
        return m

    rep, opt = fd.LABEL_REPEATED, fd.LABEL_OPTIONAL
    message("BytesList", (1, "value", fd.TYPE_BYTES, rep, "", None))
    message("FloatList", (1, "value", fd.TYPE_FLOAT, rep, "", None))
    message("Int64List", (1, "value", fd.TYPE_INT64, rep, "", None))
    feature = message(
        "Feature",
        (1, "bytes_list", fd.TYPE_MESSAGE, opt, ".distrain_tfexample.BytesList", 0),
        (2, "float_list", fd.TYPE_MESSAGE, opt, ".distrain_tfexample.FloatList", 0),
        (3, "int64_list", fd.TYPE_MESSAGE, opt, ".distrain_tfexample.Int64List", 0),
    )
    feature.oneof_decl.add(name="kind")
    features = message(
        "Features",
        (1, "feature", fd.TYPE_MESSAGE, rep, ".distrain_tfexample.Features.FeatureEntry", None),
    )
    entry = features.nested_type.add(name="FeatureEntry")
    entry.field.add(name="key", number=1, type=fd.TYPE_STRING, label=opt)
    entry.field.add(
        name="value",
        number=2,
        type=fd.TYPE_MESSAGE,
        label=opt,
        type_name=".distrain_tfexample.Feature",
    )
    entry.options.map_entry = True
    message("Example", (1, "features", fd.TYPE_MESSAGE, opt, ".distrain_tfexample.Features", None))
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    _EXAMPLE = message_factory.GetMessageClass(
        pool.FindMessageTypeByName("distrain_tfexample.Example")
    )
    return _EXAMPLE


def check_example(
    record: bytes, spec: FeatureSpec, max_label: int = MAX_LABEL
) -> tuple[int | float, str]:
    """Checks one serialised record against the spec.

    Args:
        record: The serialised ``tf.train.Example``.
        spec: What features.json declares.
        max_label: Without ``class_names``, labels must lie in ``0 .. max_label - 1``.

    Returns:
        ``(label, "")`` for a good record (an int class, or a float32 label's value),
        ``(-1, reason)`` for a bad one (a missing feature, a wrong dtype or number of
        values, a NaN or infinite float value, a label outside the classes, above the
        int32 range or, without class_names, at or above ``max_label``, a float label that
        is NaN or infinite, bytes that are not an ``Example``).
    """
    from google.protobuf.message import DecodeError

    example = _example_class()()
    try:
        example.ParseFromString(record)
    except DecodeError as err:
        return -1, f"not a tf.train.Example ({err})"
    found = example.features.feature
    for name, feature in spec.every_feature().items():
        if name not in found:
            return -1, f"feature {name!r} missing"
        kind = found[name].WhichOneof("kind")
        if kind != KINDS[feature.dtype]:
            return -1, f"feature {name!r}: {kind or 'no list'}, features.json says {feature.dtype}"
        values = getattr(found[name], kind).value
        if len(values) != feature.size:
            return -1, (
                f"feature {name!r}: {len(values)} values, features.json says {feature.size} "
                f"(shape {list(feature.shape)})"
            )
        checked = kind == "float_list" and name != spec.label  # a float label: below
        if checked and not all(map(math.isfinite, values)):
            index = next(i for i, v in enumerate(values) if not math.isfinite(v))
            return -1, f"feature {name!r}: {values[index]} at index {index} (not finite)"
    if spec.label_dtype == "float32":
        value = float(found[spec.label].float_list.value[0])
        if not math.isfinite(value):
            return -1, f"label {value}: a regression target must be a finite number"
        return value, ""
    return _check_label(int(found[spec.label].int64_list.value[0]), spec, max_label)


def _check_label(label: int, spec: FeatureSpec, max_label: int) -> tuple[int, str]:
    """``(label, "")`` when the label is a class index, else ``(-1, reason)``.

    The int32 range is checked first, on the int64 as read: nothing is cast before it.
    """
    classes = len(spec.class_names)
    top = classes - 1 if classes else max_label - 1
    if label < 0:
        return -1, f"label {label} outside 0..{top}"
    if label > INT32_MAX:
        return -1, f"label {label} above the int32 range (labels are int32, at most {INT32_MAX})"
    if classes and label >= classes:
        return -1, f"label {label} outside 0..{top} (class_names has {classes})"
    if not classes and label >= max_label:
        return -1, (
            f"label {label} at or above max_label {max_label} (no class_names in features.json: "
            "give class_names, or a larger --max-label)"
        )
    return label, ""


def reason_kind(reason: str) -> str:
    """A dead letter's reason without the record's own label value: what the job counts by.

    A label's reason names its value (``label 3000000 at or above ...``), so counting by
    the reason itself would make one count per distinct bad label, and metadata.json
    would grow with the data. Every other reason is counted as it is (its values are
    bounded by features.json: a feature, an index, nan or inf).
    """
    return re.sub(r"^label -?\d+ ", "label ", reason)
