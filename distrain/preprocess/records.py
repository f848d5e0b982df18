"""``tf.train.Example`` records and TFRecord files, written without TensorFlow.

The Beam workers only ever *write* examples, and importing TensorFlow for that costs each
worker process seconds of start-up (and a few hundred MB). The two formats are small and
stable:

* ``Example`` (``tensorflow/core/example/example.proto`` and ``feature.proto``):
  ``Example{features: Features{feature: map<string, Feature>}}``, where a ``Feature`` is one
  of ``bytes_list`` (field 1), ``float_list`` (2, packed) or ``int64_list`` (3, packed
  varints).
* TFRecord framing: ``uint64 length``, ``uint32 masked_crc32c(length)``, ``data``,
  ``uint32 masked_crc32c(data)``, little-endian.

Features are written in sorted name order, so a record's bytes depend on its content only
(protobuf's own map serialisation order may differ between processes). The tests check
every encoder against TensorFlow's own parser and reader.

Files go through Beam's ``FileSystems``: local paths, ``gs://`` and the other file systems
Beam's runners support.
"""

from __future__ import annotations

import os
import struct
import uuid
from collections.abc import Iterable, Mapping

import google_crc32c
import numpy as np

_MASK64 = (1 << 64) - 1


def _varint_slow(value: int) -> bytes:
    value &= _MASK64  # negative int64 values are written as 10-byte two's complement
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


# Varints of 0 .. 2**14 - 1 (one or two bytes): token ids, labels and lengths are looked up.
_SMALL = [_varint_slow(i) for i in range(1 << 14)]


def _varint(value: int) -> bytes:
    return _SMALL[value] if 0 <= value < 16384 else _varint_slow(value)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: tag, length, body."""
    return tag + _varint(len(body)) + body


def _packed_feature(kind_tag: bytes, packed: bytes) -> bytes:
    """A ``Feature`` whose list holds packed values (none: an empty list)."""
    return _field(kind_tag, _field(b"\x0a", packed) if packed else b"")


def int64_feature(values: Iterable[int] | np.ndarray) -> bytes:
    """A ``Feature`` holding an ``int64_list`` (packed)."""
    if isinstance(values, np.ndarray):
        values = values.astype(np.int64, copy=False).ravel().tolist()  # Python ints
    # The hot path of every job: the lookup is inlined rather than a call per value.
    packed = b"".join([_SMALL[v] if 0 <= v < 16384 else _varint_slow(v) for v in values])
    return _packed_feature(b"\x1a", packed)


def bytes_feature(values: Iterable[bytes]) -> bytes:
    """A ``Feature`` holding a ``bytes_list``."""
    return _field(b"\x0a", b"".join([_field(b"\x0a", bytes(v)) for v in values]))


def float_feature(values: Iterable[float] | np.ndarray) -> bytes:
    """A ``Feature`` holding a ``float_list`` (packed float32)."""
    return _packed_feature(b"\x12", np.asarray(values, dtype="<f4").ravel().tobytes())


_KEYS: dict[str, bytes] = {}


def example(features: Mapping[str, bytes]) -> bytes:
    """A serialised ``tf.train.Example``.

    Args:
        features: Feature name to an encoded ``Feature`` (from :func:`int64_feature`,
            :func:`bytes_feature` or :func:`float_feature`).

    Returns:
        The record's bytes; features in sorted name order.
    """
    parts = []
    for name in sorted(features):
        key = _KEYS.get(name)
        if key is None:
            key = _KEYS[name] = _field(b"\x0a", name.encode("utf-8"))
        parts.append(_field(b"\x0a", key + _field(b"\x12", features[name])))
    return _field(b"\x0a", b"".join(parts))


# -- TFRecord files ---------------------------------------------------------------------


def masked_crc32c(data: bytes) -> int:
    """TFRecord's checksum: crc32c rotated right by 15 bits plus a constant."""
    crc = google_crc32c.value(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def tfrecord_frame(record: bytes) -> bytes:
    """One record framed as in a TFRecord file."""
    header = struct.pack("<Q", len(record))
    return b"".join(
        (
            header,
            struct.pack("<I", masked_crc32c(header)),
            record,
            struct.pack("<I", masked_crc32c(record)),
        )
    )


FRAME_BYTES = 16  # a TFRecord frame around its data: length, its checksum, data's checksum


def records_per_file(file_bytes: int, record: bytes) -> int:
    """How many records of ``record``'s size fill a TFRecord file of ``file_bytes`` (>= 1)."""
    return max(1, file_bytes // (len(record) + FRAME_BYTES))


def _write_atomically(path: str, chunks: Iterable[bytes]) -> None:
    """Writes the chunks to a temporary file, renamed to ``path`` once complete.

    A retried bundle rewrites the same file instead of leaving a second or partial one.
    """
    from apache_beam.io.filesystems import CompressionTypes, FileSystems

    directory = os.path.dirname(path)
    if directory and not FileSystems.exists(directory):
        try:
            FileSystems.mkdirs(directory)
        except OSError:  # made meanwhile by another worker
            if not FileSystems.exists(directory):
                raise
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for chunk in chunks:
            f.write(chunk)
    if "://" not in path:
        os.replace(tmp, path)  # atomic on one local file system, replaces an older file
        return
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])


def write_tfrecords(path: str, records: Iterable[bytes], chunk_bytes: int = 1 << 20) -> int:
    """Writes records to a TFRecord file, atomically; returns how many."""
    count = 0

    def chunks():
        nonlocal count
        pending, size = [], 0
        for record in records:
            frame = tfrecord_frame(record)
            pending.append(frame)
            size += len(frame)
            count += 1
            if size >= chunk_bytes:
                yield b"".join(pending)
                pending, size = [], 0
        yield b"".join(pending)

    _write_atomically(path, chunks())
    return count


class TFRecordFramingError(ValueError):
    """A TFRecord file ends inside a record (cut short, or not a TFRecord file)."""


def count_tfrecords(path: str | os.PathLike) -> int:
    """Records in a local TFRecord file, from its framing alone (lengths; no data read).

    A count that shares nothing with the writer's or the reader's: each record's
    8-byte length is read and the rest of the record skipped with a seek.

    Raises:
        TFRecordFramingError: The file ends inside a record.
    """
    count, size = 0, os.path.getsize(path)
    with open(path, "rb") as f:
        position = 0
        while position < size:
            header = f.read(8)
            if len(header) < 8:
                raise TFRecordFramingError(f"{path}: ends inside the length of record {count + 1}")
            (length,) = struct.unpack("<Q", header)
            position += 8 + 4 + length + 4
            if position > size:
                raise TFRecordFramingError(f"{path}: ends inside record {count + 1}")
            f.seek(position)
            count += 1
    return count


def write_text(text: str, path: str) -> str:
    """Writes a UTF-8 text file atomically; returns the path."""
    _write_atomically(path, [text.encode("utf-8")])
    return path
