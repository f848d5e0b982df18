"""Downloads against a local HTTP server on 127.0.0.1, and safe archive extraction."""

import hashlib
import io
import tarfile
import zipfile

import pytest

from distrain.datasets.mnist.download import MNIST_REMOTE, download_mnist
from distrain.preprocess.download import (
    ArchiveLimitError,
    ChecksumError,
    DownloadDeadlineError,
    RemoteFile,
    UnsafeArchiveError,
    fetch,
    safe_extract,
)
from tests.fakes.download import DIGEST, PAYLOAD, Server


def test_good_download_and_cached_reuse(server, tmp_path):
    remote = RemoteFile(server.url, DIGEST, len(PAYLOAD))
    path = fetch(remote, tmp_path, progress=False)
    assert path.read_bytes() == PAYLOAD and path.name == "data.bin"
    assert fetch(remote, tmp_path, progress=False) == path
    assert len(server.requests) == 1  # the verified copy was reused without a request


@pytest.mark.case("download/sha256")
def test_checksum_mismatch_is_refused_and_removed(server, tmp_path):
    with pytest.raises(ChecksumError, match=f"sha256 {DIGEST}, expected 0+; file removed"):
        fetch(RemoteFile(server.url, "0" * 64), tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(ChecksumError, match="200000 bytes, expected 5"):
        fetch(RemoteFile(server.url, DIGEST, 5), tmp_path, progress=False)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.case("download/interrupted")
def test_interrupted_download_resumes_with_range(tmp_path):
    s = Server(cut_first=True)
    try:
        path = fetch(RemoteFile(s.url, DIGEST, len(PAYLOAD)), tmp_path, progress=False)
    finally:
        s.close()
    assert path.read_bytes() == PAYLOAD
    assert s.requests[0] is None and s.requests[1].startswith("bytes=")
    assert not (tmp_path / "data.bin.part").exists()


@pytest.mark.case("download/interrupted")
def test_server_ignoring_range_restarts_cleanly(tmp_path):
    (tmp_path / "data.bin.part").write_bytes(PAYLOAD[:1000])
    s = Server(honour_range=False)
    try:
        path = fetch(RemoteFile(s.url, DIGEST, len(PAYLOAD)), tmp_path, progress=False)
    finally:
        s.close()
    assert path.read_bytes() == PAYLOAD
    assert s.requests == ["bytes=1000-"]


def test_file_url_and_unverified_refusal(tmp_path):
    src = tmp_path / "src" / "f.bin"
    src.parent.mkdir()
    src.write_bytes(PAYLOAD)
    path = fetch(RemoteFile(src.as_uri(), DIGEST), tmp_path / "dst", progress=False)
    assert path.read_bytes() == PAYLOAD
    with pytest.raises(ValueError, match="no sha256 pinned"):
        fetch(RemoteFile(src.as_uri(), ""), tmp_path / "x")


def test_pinned_mnist_table():
    assert len(MNIST_REMOTE) == 4
    for name, remote in MNIST_REMOTE.items():
        assert remote.filename == name and remote.url.startswith("https://")
        assert len(remote.sha256) == 64 and int(remote.sha256, 16) >= 0
        assert remote.size > 0


@pytest.mark.case("download/sha256")
def test_download_mnist_from_a_mirror_checks_the_pinned_digests(tmp_path):
    mirror = tmp_path / "mirror"
    mirror.mkdir()
    for name in MNIST_REMOTE:
        (mirror / name).write_bytes(b"not the real file")
    with pytest.raises(ChecksumError, match="expected 9912422|expected 28881|bytes, expected"):
        download_mnist(tmp_path / "out", base_url=mirror.as_uri())


def _tar(path, members):
    with tarfile.open(path, "w:gz") as tf:
        for info, data in members:
            tf.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _file(name, data=b"x"):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def _link(name, target, kind=tarfile.SYMTYPE):
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info, None


@pytest.mark.parametrize(
    "member, message",
    [
        (_file("/etc/evil"), "absolute path"),
        (_file("ok/../../evil"), "outside"),
        (_link("ok/link", "../../etc/passwd"), "points outside"),
        (_link("ok/abs", "/etc/passwd"), "points outside"),
        (_link("ok/hard", "../../etc/passwd", tarfile.LNKTYPE), "points outside"),
    ],
)
@pytest.mark.case("download/unsafe-members")
def test_unsafe_tar_members_are_refused(tmp_path, member, message):
    archive = _tar(tmp_path / "a.tar.gz", [_file("ok/fine.txt"), member])
    with pytest.raises(UnsafeArchiveError, match=message):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out" / "ok" / "fine.txt").exists()  # nothing was extracted


@pytest.mark.case("download/unsafe-members", "integrity/errors")
@pytest.mark.parametrize(
    "chain, message",
    [
        # On an empty disk each resolves inside; extracted in order, x/evil lands above.
        ([_link("y", "."), _link("x", "y/.."), _file("x/evil")], "passes through the link 'y'"),
        ([_link("d", "."), _file("d/evil")], "lies under the link 'd'"),
    ],
    ids=["link-chain", "under-a-link"],
)
@pytest.mark.parametrize("filters", [True, False], ids=["pep706", "python-3.11.2"])
def test_link_chains_are_refused_by_the_archives_own_paths(
    tmp_path, chain, message, filters, monkeypatch
):
    # Debian 12's Python 3.11.2 (the images') has no extraction filters: the checks alone hold.
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    archive = _tar(tmp_path / "chain.tar.gz", chain)
    with pytest.raises(UnsafeArchiveError, match=message):
        safe_extract(archive, tmp_path / "root" / "out")
    assert not (tmp_path / "root" / "evil").exists()
    assert not list((tmp_path / "root" / "out").iterdir())


@pytest.mark.case("download/unsafe-members")
def test_device_member_refused(tmp_path):
    info = tarfile.TarInfo("dev")
    info.type = tarfile.CHRTYPE
    with pytest.raises(UnsafeArchiveError, match="not a regular file"):
        safe_extract(_tar(tmp_path / "d.tgz", [(info, None)]), tmp_path / "out")


@pytest.mark.parametrize("filters", [True, False], ids=["pep706", "python-3.11.2"])
def test_good_archives_extract(tmp_path, filters, monkeypatch):
    if not filters:
        monkeypatch.delattr(tarfile, "data_filter", raising=False)
    archive = _tar(
        tmp_path / "good.tar.gz",
        [_file("dbpedia_csv/classes.txt", b"Company\n"), _link("dbpedia_csv/alias", "classes.txt")],
    )
    files = safe_extract(archive, tmp_path / "out")
    assert [f.name for f in files] == ["classes.txt"]
    assert (tmp_path / "out" / "dbpedia_csv" / "classes.txt").read_bytes() == b"Company\n"
    with zipfile.ZipFile(tmp_path / "g.zip", "w") as zf:
        zf.writestr("a/b.txt", "hello")
    assert safe_extract(tmp_path / "g.zip", tmp_path / "z")[0].read_text() == "hello"
    with zipfile.ZipFile(tmp_path / "bad.zip", "w") as zf:
        zf.writestr("../escape.txt", "no")
    with pytest.raises(UnsafeArchiveError, match="outside"):
        safe_extract(tmp_path / "bad.zip", tmp_path / "z2")


def test_md5_pinned_files_and_dbpedia_archive(tmp_path):
    src = tmp_path / "src"
    src.mkdir()
    layout = tmp_path / "layout" / "dbpedia_csv"
    layout.mkdir(parents=True)
    (layout / "classes.txt").write_text("Company\n")
    (layout / "train.csv").write_text('1,"a","b"\n')
    (layout / "test.csv").write_text('1,"a","b"\n')
    archive = src / "dbpedia_csv.tar.gz"
    with tarfile.open(archive, "w:gz") as tf:
        tf.add(layout, arcname="dbpedia_csv")
    from distrain.datasets.dbpedia import download

    # The pinned MD5 (and size) are the real archive's: a look-alike is refused and removed.
    with pytest.raises(ChecksumError, match="expected 68341698"):
        download.download_dbpedia(tmp_path / "out", url=archive.as_uri())
    assert not (tmp_path / "out" / "dbpedia_csv.tar.gz").exists()
    digest = hashlib.md5(archive.read_bytes()).hexdigest()
    remote = RemoteFile(archive.as_uri(), "", archive.stat().st_size, md5=digest)
    path = fetch(remote, tmp_path / "ok", progress=False)
    assert safe_extract(path, tmp_path / "ok")[0].name in {"classes.txt", "train.csv", "test.csv"}
    with pytest.raises(ChecksumError, match="md5"):
        fetch(RemoteFile(archive.as_uri(), "", md5="0" * 32), tmp_path / "bad", progress=False)


def test_gutenberg_books_cached_with_a_manifest(server, tmp_path):
    from distrain.datasets.gutenberg.download import fetch_gutenberg

    pattern = server.url.replace("data.bin", "pg{id}.txt")
    first = fetch_gutenberg([11], tmp_path, url_pattern=pattern)
    assert first[0].read_bytes() == PAYLOAD
    manifest = (tmp_path / "manifest.json").read_text()
    assert DIGEST in manifest
    fetch_gutenberg([11], tmp_path, url_pattern=pattern)
    assert len(server.requests) == 1  # the cached book matched its recorded digest
    first[0].write_bytes(b"tampered")
    fetch_gutenberg([11], tmp_path, url_pattern=pattern)
    assert len(server.requests) == 2 and first[0].read_bytes() == PAYLOAD


# ---- issue 49: bounds on what comes from outside ---------------------------------------------


def _zip(path, members, compression=zipfile.ZIP_DEFLATED):
    with zipfile.ZipFile(path, "w", compression) as zf:
        for name, data in members:
            zf.writestr(name, data)
    return path


@pytest.mark.case("download/archive-limits", "integrity/errors")
def test_an_archive_past_the_size_limit_is_refused_before_anything_is_extracted(
    tmp_path, monkeypatch
):
    from distrain.preprocess.failures import Failure

    # A bomb in small: 4 MB of zeros in a tar.gz of a few KB, the big member second.
    bomb = _tar(tmp_path / "bomb.tar.gz", [_file("a/small.txt"), _file("a/zeros", bytes(4 << 20))])
    assert bomb.stat().st_size < 50_000
    out = tmp_path / "out"
    with pytest.raises(ArchiveLimitError) as caught:
        safe_extract(bomb, out, max_bytes=1_000_000)
    assert str(caught.value) == (
        f"{bomb}: its files come to more than 1,000,000 bytes, the limit "
        f"(DISTRAIN_MAX_EXTRACT_BYTES): 4,194,305 by member 'a/zeros'; nothing was extracted"
    )
    assert list(out.iterdir()) == []
    failure = Failure.of("fetch data", caught.value)
    assert not failure.retryable and failure.exit_code == 2  # permanent: one line, exit 2
    # The limit is a setting: its environment variable, when no argument is given.
    monkeypatch.setenv("DISTRAIN_MAX_EXTRACT_BYTES", "2000000")
    with pytest.raises(ArchiveLimitError, match="more than 2,000,000 bytes"):
        safe_extract(bomb, out)
    zipped = _zip(tmp_path / "bomb.zip", [("a/zeros", bytes(4 << 20))])
    with pytest.raises(ArchiveLimitError, match="bomb.zip: its files come to more than 2,000,000"):
        safe_extract(zipped, out)
    assert list(out.iterdir()) == []
    monkeypatch.setenv("DISTRAIN_MAX_EXTRACT_BYTES", "lots")
    with pytest.raises(ValueError, match="DISTRAIN_MAX_EXTRACT_BYTES='lots': not a number"):
        safe_extract(bomb, out)


@pytest.mark.case("download/archive-limits")
def test_an_archive_past_the_member_limit_is_refused_before_anything_is_extracted(tmp_path):
    many = [_file(f"d/f{i:03d}.txt", b"x") for i in range(30)]
    out = tmp_path / "out"
    with pytest.raises(ArchiveLimitError) as caught:
        safe_extract(_tar(tmp_path / "many.tar.gz", many), out, max_members=20)
    assert str(caught.value) == (
        f"{tmp_path / 'many.tar.gz'}: more than 20 members, the limit "
        "(DISTRAIN_MAX_EXTRACT_MEMBERS); nothing was extracted"
    )
    zipped = _zip(tmp_path / "many.zip", [(f"d/f{i:03d}.txt", "x") for i in range(30)])
    with pytest.raises(ArchiveLimitError, match="many.zip: more than 20 members"):
        safe_extract(zipped, out, max_members=20)
    assert list(out.iterdir()) == []
    assert len(safe_extract(zipped, out, max_members=30)) == 30  # at the limit: extracted


@pytest.mark.case("download/archive-limits")
def test_an_extraction_that_fails_half_way_leaves_nothing_behind(tmp_path):
    # The second member's bytes are damaged: zipfile fails on its CRC after writing the first.
    members = [("d/first.txt", "a" * 1000), ("d/second.txt", "b" * 1000)]
    good = _zip(tmp_path / "g.zip", members, zipfile.ZIP_STORED)
    data = bytearray(good.read_bytes())
    at = data.index(b"d/second.txt") + len("d/second.txt") + 5  # inside its data
    data[at] ^= 0xFF
    damaged = tmp_path / "damaged.zip"
    damaged.write_bytes(bytes(data))
    out = tmp_path / "out"
    out.mkdir()
    (out / "kept.txt").write_text("there before")  # what was there stays
    with pytest.raises(zipfile.BadZipFile):
        safe_extract(damaged, out)
    assert sorted(p.name for p in out.iterdir()) == ["kept.txt"]


def test_the_default_limits_admit_the_real_archive():
    # dbpedia_csv.tar.gz (the pinned 68,341,698 bytes): a folder and four files, about 196 MB
    # (the sizes as published with the archive, to within a few bytes for the small files).
    from distrain.preprocess.download import DownloadLimits, _Tally

    limits = DownloadLimits()
    tally = _Tally("dbpedia_csv.tar.gz", limits.max_extract_bytes, limits.max_extract_members)
    for name, size in (
        ("dbpedia_csv", 0),
        ("dbpedia_csv/classes.txt", 135),
        ("dbpedia_csv/readme.txt", 1_854),
        ("dbpedia_csv/test.csv", 21_794_028),
        ("dbpedia_csv/train.csv", 174_148_970),
    ):
        tally.add(name, size)
    assert limits.max_extract_bytes >= 4 * tally.bytes  # margin for a bigger edition
    # The whole 68 MB archive within the deadline at 20 KB/s.
    assert limits.download_deadline * 20_000 >= 68_341_698


@pytest.mark.case("download/deadline", "integrity/errors")
def test_a_download_that_trickles_past_the_overall_deadline_is_ended_naming_url_and_deadline(
    tmp_path, monkeypatch
):
    import time

    from distrain.preprocess.failures import Failure

    # 100 bytes every 50 ms: each read comes well within the 10 s per-read timeout, and
    # the whole 200 KB would take 100 s.
    slow = Server(trickle=0.05, piece=100, trickle_for=20)
    monkeypatch.setenv("DISTRAIN_DOWNLOAD_DEADLINE", "1.5")
    start = time.monotonic()
    try:
        with pytest.raises(DownloadDeadlineError) as caught:
            fetch(RemoteFile(slow.url, DIGEST, len(PAYLOAD)), tmp_path, timeout=10, progress=False)
    finally:
        slow.close()
    assert time.monotonic() - start < 6
    message = str(caught.value)
    assert message.startswith(f"{slow.url}: not downloaded within the deadline of 1.5 s (")
    assert "of 200,000 bytes; DISTRAIN_DOWNLOAD_DEADLINE to change it" in message
    # Transient: the partial file is kept, and the retry resumes it where it stopped.
    failure = Failure.of("fetch data", caught.value)
    assert failure.retryable and failure.exit_code == 1
    part = tmp_path / "data.bin.part"
    resumed_from = part.stat().st_size
    assert 0 < resumed_from < len(PAYLOAD)
    fast = Server()
    try:
        path = fetch(RemoteFile(fast.url, DIGEST, len(PAYLOAD)), tmp_path, progress=False)
    finally:
        fast.close()
    assert path.read_bytes() == PAYLOAD and fast.requests == [f"bytes={resumed_from}-"]
