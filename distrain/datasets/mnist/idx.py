"""Reading and writing IDX files, the format of the MNIST data set.

An IDX file is a big-endian header followed by raw data::

    magic: 0x00 0x00 <dtype code> <number of dimensions>
    dims:  one uint32 per dimension
    data:  prod(dims) items of the dtype

MNIST uses dtype code 0x08 (unsigned byte): images are ``idx3`` (count, rows,
columns, magic 0x00000803) and labels ``idx1`` (count, magic 0x00000801). Files
are usually gzipped; both forms are read. Every problem is raised as
:class:`IdxFormatError` naming the file and what was expected.
"""

from __future__ import annotations

import gzip
import math
import os
import struct
import zlib
from pathlib import Path

import numpy as np
from isal import igzip, isal_zlib

# Gzip streams are inflated with Intel ISA-L (python-isal): the same format as the gzip
# module, 2-3 times as fast. Unpacking the training images is the one serial step of
# the MNIST job, so its speed bounds what more workers can gain.
_GZIP_ERRORS = (EOFError, OSError, zlib.error, isal_zlib.error)

# IDX type codes and the numpy dtypes they hold (big-endian where it matters).
_DTYPES: dict[int, np.dtype] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}
_CODES = {dtype.newbyteorder("="): code for code, dtype in _DTYPES.items()}

IMAGES_MAGIC = 0x00000803
LABELS_MAGIC = 0x00000801

# The four files of the MNIST distribution, by split.
MNIST_FILES: dict[str, tuple[str, str]] = {
    "train": ("train-images-idx3-ubyte.gz", "train-labels-idx1-ubyte.gz"),
    "test": ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"),
}


# Deflate (gzip) expands its input at most about 1032-fold: a header asking for more
# than that from the file's compressed bytes is impossible, whatever its trailer says.
_MAX_DEFLATE_RATIO = 1032


class IdxFormatError(ValueError):
    """An IDX file is missing, unreadable or not what it should be."""


def _read_bytes(path: Path) -> bytes:
    if not path.exists():
        raise IdxFormatError(f"{path}: file not found")
    raw = path.read_bytes()
    if not raw:
        raise IdxFormatError(f"{path}: file is empty, expected an IDX header")
    if raw[:2] == b"\x1f\x8b":
        try:
            return igzip.decompress(raw)
        except _GZIP_ERRORS as err:
            raise IdxFormatError(f"{path}: corrupt or truncated gzip stream ({err})") from err
    if path.suffix == ".gz":
        raise IdxFormatError(f"{path}: not a gzip file (name ends in .gz, bytes do not)")
    return raw


def _parse_header(data: bytes, name: str, expect_magic: int | None):
    """``(dtype, dims, header length)`` of an IDX file from (at least) its first bytes."""
    if len(data) < 4:
        raise IdxFormatError(f"{name}: {len(data)} bytes, too short for an IDX header (4 bytes)")
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    magic = struct.unpack(">I", data[:4])[0]
    if zero != 0 or code not in _DTYPES or ndim == 0:
        raise IdxFormatError(
            f"{name}: bad IDX magic 0x{magic:08X}; expected 0x0000 then a type code "
            f"({', '.join(f'0x{c:02X}' for c in _DTYPES)}) and a dimension count"
        )
    if expect_magic is not None and magic != expect_magic:
        raise IdxFormatError(f"{name}: IDX magic 0x{magic:08X}, expected 0x{expect_magic:08X}")
    header = 4 + 4 * ndim
    if len(data) < header:
        raise IdxFormatError(f"{name}: header declares {ndim} dimensions but the file ends early")
    dims = struct.unpack(f">{ndim}I", data[4:header])
    return _DTYPES[code], tuple(int(d) for d in dims), header


def inspect_idx(path: str | os.PathLike, expect_magic: int | None = None):
    """Checks an IDX file's header and length without decoding its data.

    For a gzipped file only the first bytes are decompressed; the length comes from the
    gzip trailer (ISIZE), so a truncated file is caught without reading it all. What only
    a full read can find (a bad CRC in the middle) is found by :func:`read_idx`.

    Returns:
        ``(dtype, shape)``.

    Raises:
        IdxFormatError: The file is missing, empty, not gzip as named, or its header or
            length is wrong.
    """
    path = Path(path)
    if not path.exists():
        raise IdxFormatError(f"{path}: file not found")
    raw = path.read_bytes()
    if not raw:
        raise IdxFormatError(f"{path}: file is empty, expected an IDX header")
    gzipped = raw[:2] == b"\x1f\x8b"
    if gzipped:
        try:
            head = zlib.decompressobj(wbits=31).decompress(raw, 4 + 4 * 255)
        except zlib.error as err:
            raise IdxFormatError(f"{path}: corrupt or truncated gzip stream ({err})") from err
        length = int.from_bytes(raw[-4:], "little")  # uncompressed size mod 2**32
    elif path.suffix == ".gz":
        raise IdxFormatError(f"{path}: not a gzip file (name ends in .gz, bytes do not)")
    else:
        head, length = raw[:1024], len(raw)
    dtype, dims, header = _parse_header(head, str(path), expect_magic)
    # Sizes in Python integers: a header's dimensions multiply past 64 bits (2**31 x 2**31
    # images), where numpy's int64 would wrap around to a size that looks right.
    expected = header + math.prod(dims) * dtype.itemsize
    if gzipped and expected > _MAX_DEFLATE_RATIO * len(raw) + header:
        raise IdxFormatError(
            f"{path}: header dimensions {list(dims)} need {expected} bytes, more than "
            f"{len(raw)} gzip bytes can hold (deflate expands at most "
            f"{_MAX_DEFLATE_RATIO}-fold): an impossible header"
        )
    if gzipped and length != expected % 2**32:
        raise IdxFormatError(
            f"{path}: corrupt or truncated gzip stream (its trailer gives {length} bytes, "
            f"the header's dimensions {list(dims)} need {expected})"
        )
    if not gzipped and length != expected:
        raise IdxFormatError(
            f"{path}: dimensions {list(dims)} need {expected - header} data bytes, "
            f"file has {length - header}"
        )
    return dtype, dims


def parse_idx(data: bytes, name: str = "<bytes>", expect_magic: int | None = None) -> np.ndarray:
    """Parses the bytes of an (uncompressed) IDX file.

    Args:
        data: The file's bytes, after any gzip decompression.
        name: What to call the source in error messages (usually its path).
        expect_magic: If given, the magic number the file must carry.

    Returns:
        The array with the file's shape and dtype (native byte order).

    Raises:
        IdxFormatError: The header or the data length is wrong.
    """
    dtype, dims, header = _parse_header(data, name, expect_magic)
    expected = math.prod(dims) * dtype.itemsize
    got = len(data) - header
    if got != expected:
        raise IdxFormatError(
            f"{name}: dimensions {list(dims)} need {expected} data bytes, file has {got}"
        )
    array = np.frombuffer(data, dtype=dtype, offset=header).reshape(dims)
    return array.astype(dtype.newbyteorder("="), copy=False)


def read_idx(path: str | os.PathLike, expect_magic: int | None = None) -> np.ndarray:
    """Reads an IDX file, gzipped or not.

    Args:
        path: The file.
        expect_magic: If given, the magic number the file must carry.

    Returns:
        The array stored in the file.

    Raises:
        IdxFormatError: The file is missing, empty, corrupt or malformed.
    """
    path = Path(path)
    return parse_idx(_read_bytes(path), str(path), expect_magic)


def unpack_idx(path: str | os.PathLike, dest_dir: str | os.PathLike) -> Path:
    """An uncompressed copy of a gzipped IDX file, so that rows can be read by seeking.

    A gzip stream can only be read from its start: jobs that read row ranges in parallel
    unpack it once, then every range is a seek. An uncompressed file is returned as is.
    The copy is written to a temporary name and renamed, streaming, so a rerun (a retried
    Beam bundle) rewrites it whole and memory holds one chunk at a time.

    Args:
        path: The IDX file, gzipped or not.
        dest_dir: Where the uncompressed copy goes (created if missing).

    Returns:
        The path of an uncompressed IDX file with the same content.

    Raises:
        IdxFormatError: The file is missing, or its gzip stream is corrupt or truncated.
    """
    import shutil
    import uuid

    path = Path(path)
    if not path.exists():
        raise IdxFormatError(f"{path}: file not found")
    with open(path, "rb") as f:
        if f.read(2) != b"\x1f\x8b":
            if path.suffix == ".gz":
                raise IdxFormatError(f"{path}: not a gzip file (name ends in .gz, bytes do not)")
            return path
    dest = Path(dest_dir) / (path.name[:-3] if path.suffix == ".gz" else path.name + ".raw")
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_name(f"{dest.name}.tmp-{uuid.uuid4().hex}")
    try:
        with igzip.open(path, "rb") as src, open(tmp, "wb") as out:
            shutil.copyfileobj(src, out, 4 * 2**20)
    except _GZIP_ERRORS as err:
        tmp.unlink(missing_ok=True)
        raise IdxFormatError(f"{path}: corrupt or truncated gzip stream ({err})") from err
    os.replace(tmp, dest)
    return dest


def idx_shape(path: str | os.PathLike, expect_magic: int | None = None) -> tuple[int, ...]:
    """The shape of an uncompressed IDX file, from its header, checked against its size.

    Raises:
        IdxFormatError: The file is gzipped, malformed, or its size disagrees with its
            header.
    """
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(4 + 4 * 255)
    if head[:2] == b"\x1f\x8b":
        raise IdxFormatError(f"{path}: gzipped; rows are read from an unpacked copy")
    dtype, dims, header = _parse_header(head, str(path), expect_magic)
    expected = math.prod(dims) * dtype.itemsize
    got = path.stat().st_size - header
    if got != expected:
        raise IdxFormatError(
            f"{path}: dimensions {list(dims)} need {expected} data bytes, file has {got}"
        )
    return dims


def read_idx_rows(
    path: str | os.PathLike, start: int, stop: int, expect_magic: int | None = None
) -> np.ndarray:
    """Rows ``start:stop`` (along the first dimension) of an uncompressed IDX file.

    Reads the header and then only those rows, with a seek.

    Raises:
        IdxFormatError: The file is gzipped, malformed, or shorter than its header says.
    """
    path = Path(path)
    with open(path, "rb") as f:
        head = f.read(4 + 4 * 255)
        if head[:2] == b"\x1f\x8b":
            raise IdxFormatError(f"{path}: gzipped; rows are read from an unpacked copy")
        dtype, dims, header = _parse_header(head, str(path), expect_magic)
        stop = min(stop, dims[0])
        if not 0 <= start <= stop:
            raise ValueError(f"{path}: rows {start}:{stop} outside 0:{dims[0]}")
        row = math.prod(dims[1:]) * dtype.itemsize
        size = os.fstat(f.fileno()).st_size
        if header + dims[0] * row != size:  # before a read of the header's sizes
            raise IdxFormatError(
                f"{path}: dimensions {list(dims)} need {dims[0] * row} data bytes, "
                f"file has {size - header}"
            )
        f.seek(header + start * row)
        data = f.read((stop - start) * row)
    if len(data) != (stop - start) * row:
        raise IdxFormatError(
            f"{path}: ends inside rows {start}:{stop}; dimensions {list(dims)} need "
            f"{dims[0] * row} data bytes"
        )
    array = np.frombuffer(data, dtype=dtype).reshape((stop - start, *dims[1:]))
    return array.astype(dtype.newbyteorder("="), copy=False)


def write_idx(path: str | os.PathLike, array: np.ndarray) -> None:
    """Writes an array as an IDX file, gzipped when the name ends in ``.gz``.

    Args:
        path: Destination file.
        array: Any array whose dtype IDX can hold (uint8 for MNIST).
    """
    path = Path(path)
    array = np.asarray(array)
    native = array.dtype.newbyteorder("=")
    if native not in _CODES:
        raise ValueError(f"IDX cannot hold dtype {array.dtype}")
    code = _CODES[native]
    header = struct.pack(">HBB", 0, code, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape)
    payload = header + array.astype(_DTYPES[code], copy=False).tobytes()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    if path.suffix == ".gz":
        # mtime=0 keeps the bytes deterministic for a given array.
        tmp.write_bytes(gzip.compress(payload, compresslevel=6, mtime=0))
    else:
        tmp.write_bytes(payload)
    os.replace(tmp, path)


def read_mnist_split(images_path: str | os.PathLike, labels_path: str | os.PathLike):
    """Reads one MNIST split and checks that its two files agree.

    Args:
        images_path: The ``*-images-idx3-ubyte[.gz]`` file.
        labels_path: The ``*-labels-idx1-ubyte[.gz]`` file.

    Returns:
        ``(images, labels)``: uint8 arrays of shape ``[N, rows, cols]`` and ``[N]``.

    Raises:
        IdxFormatError: Either file is malformed, or their counts differ.
    """
    images = read_idx(images_path, IMAGES_MAGIC)
    labels = read_idx(labels_path, LABELS_MAGIC)
    if images.dtype != np.uint8 or labels.dtype != np.uint8:
        raise IdxFormatError(f"{images_path}, {labels_path}: MNIST files must hold unsigned bytes")
    if images.shape[1] == 0 or images.shape[2] == 0:
        raise IdxFormatError(f"{images_path}: image dimensions {images.shape[1:]} are empty")
    if images.shape[0] != labels.shape[0]:
        raise IdxFormatError(
            f"{images_path} has {images.shape[0]} images but {labels_path} has "
            f"{labels.shape[0]} labels; the counts must match"
        )
    return images, labels


def inspect_mnist_split(images_path: str | os.PathLike, labels_path: str | os.PathLike):
    """The checks of :func:`read_mnist_split` from headers and lengths only.

    Returns:
        The shape of the images, ``(N, rows, cols)``.
    """
    image_type, images = inspect_idx(images_path, IMAGES_MAGIC)
    label_type, labels = inspect_idx(labels_path, LABELS_MAGIC)
    if image_type != np.uint8 or label_type != np.uint8:
        raise IdxFormatError(f"{images_path}, {labels_path}: MNIST files must hold unsigned bytes")
    if images[1] == 0 or images[2] == 0:
        raise IdxFormatError(f"{images_path}: image dimensions {images[1:]} are empty")
    if images[0] != labels[0]:
        raise IdxFormatError(
            f"{images_path} has {images[0]} images but {labels_path} has "
            f"{labels[0]} labels; the counts must match"
        )
    return images


def mnist_paths(directory: str | os.PathLike, split: str) -> tuple[Path, Path]:
    """The images and labels paths of a split in an MNIST directory.

    Accepts both the gzipped names and the uncompressed ones (as some mirrors ship).
    """
    directory = Path(directory)
    if split not in MNIST_FILES:
        raise ValueError(f"unknown MNIST split {split!r}; expected one of {sorted(MNIST_FILES)}")
    found = []
    for name in MNIST_FILES[split]:
        path = directory / name
        if not path.exists() and (directory / name[:-3]).exists():
            path = directory / name[:-3]
        found.append(path)
    return found[0], found[1]
