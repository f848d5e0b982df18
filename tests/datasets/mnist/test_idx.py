"""IDX parsing: good files and every kind of bad one, each a clear error naming the file."""

import gzip
import struct

import numpy as np
import pytest

from distrain.datasets.mnist.idx import (
    IMAGES_MAGIC,
    LABELS_MAGIC,
    IdxFormatError,
    idx_shape,
    mnist_paths,
    parse_idx,
    read_idx,
    read_idx_rows,
    read_mnist_split,
    unpack_idx,
    write_idx,
)


def _images(n=5):
    return np.random.default_rng(0).integers(0, 256, (n, 28, 28), dtype=np.uint8)


@pytest.mark.parametrize("name", ["x-images-idx3-ubyte.gz", "x-images-idx3-ubyte"])
def test_round_trip_gzip_and_raw(tmp_path, name):
    images = _images()
    write_idx(tmp_path / name, images)
    back = read_idx(tmp_path / name, IMAGES_MAGIC)
    assert back.dtype == np.uint8 and back.shape == (5, 28, 28)
    np.testing.assert_array_equal(back, images)


def test_header_bytes_are_the_real_mnist_ones(tmp_path):
    write_idx(tmp_path / "l.gz", np.arange(10, dtype=np.uint8))
    raw = gzip.decompress((tmp_path / "l.gz").read_bytes())
    assert raw[:8] == bytes.fromhex("00000801") + struct.pack(">I", 10)
    write_idx(tmp_path / "i.gz", _images(3))
    raw = gzip.decompress((tmp_path / "i.gz").read_bytes())
    assert raw[:16] == bytes.fromhex("00000803") + struct.pack(">III", 3, 28, 28)
    assert len(raw) == 16 + 3 * 784


def test_other_dtypes_round_trip():
    data = np.array([[1.5, -2.0], [3.25, 4.0]], dtype=np.float32)
    raw = bytes([0, 0, 0x0D, 2]) + struct.pack(">II", 2, 2) + data.astype(">f4").tobytes()
    np.testing.assert_array_equal(parse_idx(raw), data)


@pytest.mark.case("mnist/missing-file")
def test_missing_file(tmp_path):
    with pytest.raises(IdxFormatError, match=r"nope\.gz: file not found"):
        read_idx(tmp_path / "nope.gz")


@pytest.mark.case("mnist/empty-file")
def test_empty_file(tmp_path):
    (tmp_path / "e.gz").write_bytes(b"")
    with pytest.raises(IdxFormatError, match=r"e\.gz: file is empty"):
        read_idx(tmp_path / "e.gz")


@pytest.mark.case("mnist/truncated-gzip")
def test_truncated_gzip(tmp_path):
    write_idx(tmp_path / "t.gz", _images(50))
    data = (tmp_path / "t.gz").read_bytes()
    (tmp_path / "t.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(IdxFormatError, match=r"t\.gz: corrupt or truncated gzip"):
        read_idx(tmp_path / "t.gz")


@pytest.mark.case("mnist/not-gzip")
def test_non_gzip_bytes_with_gz_name(tmp_path):
    (tmp_path / "n.gz").write_bytes(b"this is not gzip at all")
    with pytest.raises(IdxFormatError, match=r"n\.gz: not a gzip file"):
        read_idx(tmp_path / "n.gz")


@pytest.mark.parametrize(
    "header, message",
    [
        (bytes.fromhex("12340803"), "bad IDX magic 0x12340803"),
        (bytes.fromhex("00000703"), "bad IDX magic 0x00000703"),
        (bytes.fromhex("00000800"), "bad IDX magic 0x00000800"),
    ],
)
@pytest.mark.case("mnist/wrong-magic")
def test_bad_magic(tmp_path, header, message):
    (tmp_path / "m").write_bytes(header + b"\0" * 16)
    with pytest.raises(IdxFormatError, match=message) as err:
        read_idx(tmp_path / "m")
    assert str(tmp_path / "m") in str(err.value)


@pytest.mark.case("mnist/wrong-magic")
def test_wrong_kind_of_file(tmp_path):
    write_idx(tmp_path / "labels.gz", np.zeros(4, np.uint8))
    with pytest.raises(IdxFormatError, match="IDX magic 0x00000801, expected 0x00000803"):
        read_idx(tmp_path / "labels.gz", IMAGES_MAGIC)


def test_too_short_for_header(tmp_path):
    (tmp_path / "s").write_bytes(b"\0\0")
    with pytest.raises(IdxFormatError, match="too short for an IDX header"):
        read_idx(tmp_path / "s")
    (tmp_path / "d").write_bytes(bytes.fromhex("00000803") + b"\0\0\0\5")
    with pytest.raises(IdxFormatError, match="declares 3 dimensions but the file ends early"):
        read_idx(tmp_path / "d")


@pytest.mark.parametrize("delta", [-1, +1, -784])
@pytest.mark.case("mnist/wrong-dimensions")
def test_data_length_must_match_dimensions(tmp_path, delta):
    raw = bytes.fromhex("00000803") + struct.pack(">III", 2, 28, 28)
    (tmp_path / "w").write_bytes(raw + b"\0" * (2 * 784 + delta))
    with pytest.raises(IdxFormatError, match=r"dimensions \[2, 28, 28\] need 1568 data bytes"):
        read_idx(tmp_path / "w")


@pytest.mark.case("mnist/count-mismatch")
def test_split_counts_must_match(tmp_path):
    write_idx(tmp_path / "i.gz", _images(5))
    write_idx(tmp_path / "l.gz", np.zeros(4, np.uint8))
    with pytest.raises(IdxFormatError, match="has 5 images but .* has 4 labels"):
        read_mnist_split(tmp_path / "i.gz", tmp_path / "l.gz")


def test_split_reads_and_paths(tmp_path):
    write_idx(tmp_path / "train-images-idx3-ubyte.gz", _images(3))
    write_idx(tmp_path / "train-labels-idx1-ubyte", np.array([1, 2, 3], np.uint8))
    images, labels = read_mnist_split(*mnist_paths(tmp_path, "train"))
    assert images.shape == (3, 28, 28) and labels.tolist() == [1, 2, 3]
    with pytest.raises(ValueError, match="unknown MNIST split"):
        mnist_paths(tmp_path, "dev")
    assert LABELS_MAGIC == 0x801


def test_inspect_checks_header_and_length_without_decoding(tmp_path):
    import gzip

    from distrain.datasets.mnist.idx import IMAGES_MAGIC, inspect_idx, inspect_mnist_split

    images = np.zeros((5, 4, 3), np.uint8)
    write_idx(tmp_path / "i.gz", images)
    write_idx(tmp_path / "l.gz", np.zeros(5, np.uint8))
    write_idx(tmp_path / "raw", images)
    assert inspect_idx(tmp_path / "i.gz", IMAGES_MAGIC)[1] == (5, 4, 3)
    assert inspect_mnist_split(tmp_path / "i.gz", tmp_path / "l.gz") == (5, 4, 3)
    assert inspect_idx(tmp_path / "raw")[1] == (5, 4, 3)
    # Truncated: the gzip trailer no longer matches what the header needs.
    data = (tmp_path / "i.gz").read_bytes()
    (tmp_path / "t.gz").write_bytes(data[: len(data) - 7])
    with pytest.raises(IdxFormatError, match=r"t\.gz: corrupt or truncated gzip"):
        inspect_idx(tmp_path / "t.gz")
    # A gzip stream whose content is shorter than its header says.
    payload = gzip.decompress(data)[:-10]
    (tmp_path / "s.gz").write_bytes(gzip.compress(payload))
    with pytest.raises(IdxFormatError, match=r"need 76"):
        inspect_idx(tmp_path / "s.gz")
    (tmp_path / "r2").write_bytes((tmp_path / "raw").read_bytes()[:-1])
    with pytest.raises(IdxFormatError, match="need 60 data bytes, file has 59"):
        inspect_idx(tmp_path / "r2")
    write_idx(tmp_path / "l4.gz", np.zeros(4, np.uint8))
    with pytest.raises(IdxFormatError, match="has 5 images but .* has 4 labels"):
        inspect_mnist_split(tmp_path / "i.gz", tmp_path / "l4.gz")


@pytest.mark.parametrize("name", ["x-images-idx3-ubyte.gz", "x-images-idx3-ubyte"])
def test_unpacked_rows_read_by_seeking_match_the_whole_file(tmp_path, name):
    images = _images(37)
    write_idx(tmp_path / name, images)
    raw = unpack_idx(tmp_path / name, tmp_path / "work")
    assert raw == (tmp_path / name if not name.endswith(".gz") else tmp_path / "work" / name[:-3])
    assert idx_shape(raw, IMAGES_MAGIC) == (37, 28, 28)
    for start, stop in [(0, 10), (10, 37), (30, 100), (37, 37)]:
        np.testing.assert_array_equal(read_idx_rows(raw, start, stop), images[start:stop])
    assert not list((tmp_path / "work").glob("*.tmp-*"))


@pytest.mark.case("mnist/truncated-gzip")
def test_unpacking_a_truncated_gzip_names_the_file_and_leaves_nothing(tmp_path):
    write_idx(tmp_path / "t.gz", _images(50))
    data = (tmp_path / "t.gz").read_bytes()
    (tmp_path / "t.gz").write_bytes(data[: len(data) // 2])
    with pytest.raises(IdxFormatError, match=r"t\.gz: corrupt or truncated gzip"):
        unpack_idx(tmp_path / "t.gz", tmp_path / "work")
    assert not list((tmp_path / "work").iterdir())


@pytest.mark.case("mnist/truncated-gzip")
@pytest.mark.parametrize("damage", ["deflate data", "crc", "length"])
def test_a_damaged_gzip_stream_is_refused_by_both_readers(tmp_path, damage):
    # The fast inflater (ISA-L) must refuse what the gzip module refuses, not only
    # truncation: a damaged block, a checksum or a length that does not match.
    write_idx(tmp_path / "d.gz", _images(50))
    data = bytearray((tmp_path / "d.gz").read_bytes())
    at = {"deflate data": 40, "crc": len(data) - 6, "length": len(data) - 2}[damage]
    data[at : at + 4] = bytes(b ^ 0xA5 for b in data[at : at + 4])
    (tmp_path / "d.gz").write_bytes(bytes(data))
    with pytest.raises(Exception):  # noqa: B017  (the stdlib's view of the same bytes)
        gzip.decompress(bytes(data))
    with pytest.raises(IdxFormatError, match=r"d\.gz: corrupt or truncated gzip"):
        read_idx(tmp_path / "d.gz")
    with pytest.raises(IdxFormatError, match=r"d\.gz: corrupt or truncated gzip"):
        unpack_idx(tmp_path / "d.gz", tmp_path / "work")
    assert not list((tmp_path / "work").glob("*"))


def test_row_reads_check_the_file(tmp_path):
    write_idx(tmp_path / "i", _images(8))
    data = (tmp_path / "i").read_bytes()
    (tmp_path / "short").write_bytes(data[:-100])
    with pytest.raises(IdxFormatError, match=r"short: dimensions \[8, 28, 28\] need"):
        idx_shape(tmp_path / "short")
    # The file's size is checked against its header before any read, whichever rows.
    for start, stop in ((4, 8), (0, 1)):
        with pytest.raises(IdxFormatError, match=r"short: dimensions \[8, 28, 28\] need 6272"):
            read_idx_rows(tmp_path / "short", start, stop)
    with pytest.raises(IdxFormatError, match="IDX magic"):
        read_idx_rows(tmp_path / "i", 0, 1, LABELS_MAGIC)
    write_idx(tmp_path / "g.gz", _images(2))
    with pytest.raises(IdxFormatError, match="gzipped"):
        read_idx_rows(tmp_path / "g.gz", 0, 1)
