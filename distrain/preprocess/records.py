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


def varint(value: int) -> bytes:
    """The protobuf varint encoding of one int64 value."""
    return _SMALL[value] if 0 <= value < 16384 else _varint_slow(value)


def _field(tag: bytes, body: bytes) -> bytes:
    """A length-delimited field: tag, length, body."""
    n = len(body)
    return tag + (_SMALL[n] if n < 16384 else _varint_slow(n)) + body


def int64_feature(values: Iterable[int] | np.ndarray) -> bytes:
    """A ``Feature`` holding an ``int64_list`` (packed)."""
    if isinstance(values, np.ndarray):
        arr = values.astype(np.int64, copy=False).ravel()
        if arr.size and arr.min() >= 0 and arr.max() < 128:
            packed = arr.astype(np.uint8).tobytes()  # one byte per value
        else:
            packed = b"".join([varint(int(v)) for v in arr.tolist()])
    else:
        packed = b"".join([_SMALL[v] if 0 <= v < 16384 else _varint_slow(v) for v in values])
    return _field(b"\x1a", _field(b"\x0a", packed) if packed else b"")


def bytes_feature(values: Iterable[bytes]) -> bytes:
    """A ``Feature`` holding a ``bytes_list``."""
    return _field(b"\x0a", b"".join([_field(b"\x0a", bytes(v)) for v in values]))


def float_feature(values: Iterable[float] | np.ndarray) -> bytes:
    """A ``Feature`` holding a ``float_list`` (packed float32)."""
    packed = np.asarray(values, dtype="<f4").ravel().tobytes()
    return _field(b"\x12", _field(b"\x0a", packed) if packed else b"")


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


def _crc32c():
    try:
        import google_crc32c
    except ImportError as e:  # a declared dependency; say what is missing
        raise ImportError("distrain writes TFRecords with google-crc32c: pip install it") from e
    return google_crc32c.value


def masked_crc32c(data: bytes, _crc=[]) -> int:  # noqa: B006  (a one-slot cache)
    """TFRecord's checksum: crc32c rotated right by 15 bits plus a constant."""
    if not _crc:
        _crc.append(_crc32c())
    crc = _crc[0](data)
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


def _makedirs(directory: str) -> None:
    from apache_beam.io.filesystems import FileSystems

    if directory and not FileSystems.exists(directory):
        try:
            FileSystems.mkdirs(directory)
        except OSError:  # made meanwhile by another worker
            if not FileSystems.exists(directory):
                raise


def write_tfrecords(path: str, records: Iterable[bytes], chunk_bytes: int = 1 << 20) -> int:
    """Writes records to a TFRecord file, atomically; returns how many.

    A temporary file is renamed into place, so a retried bundle rewrites the same file
    instead of leaving a second or partial one.
    """
    from apache_beam.io.filesystems import CompressionTypes, FileSystems

    _makedirs(os.path.dirname(path))
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    count, size, pending = 0, 0, []
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        for record in records:
            frame = tfrecord_frame(record)
            pending.append(frame)
            size += len(frame)
            count += 1
            if size >= chunk_bytes:
                f.write(b"".join(pending))
                pending, size = [], 0
        f.write(b"".join(pending))
    _replace(tmp, path)
    return count


def write_text(path: str, text: str) -> str:
    """Writes a UTF-8 text file atomically; returns the path."""
    from apache_beam.io.filesystems import CompressionTypes, FileSystems

    _makedirs(os.path.dirname(path))
    tmp = f"{path}.tmp-{uuid.uuid4().hex}"
    with FileSystems.create(tmp, compression_type=CompressionTypes.UNCOMPRESSED) as f:
        f.write(text.encode("utf-8"))
    _replace(tmp, path)
    return path


def _replace(tmp: str, path: str) -> None:
    from apache_beam.io.filesystems import FileSystems

    if "://" not in path:
        os.replace(tmp, path)  # atomic on one local file system, replaces an older file
        return
    if FileSystems.exists(path):
        FileSystems.delete([path])
    FileSystems.rename([tmp], [path])
