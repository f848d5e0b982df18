"""Downloads from pinned URLs with sha256 checks, resumption and safe archive extraction.

Nothing unverified is kept: a file whose size or digest is wrong is deleted and the
download fails naming the URL, the expected and the actual digest. A partial download
(``<name>.part``) resumes with an HTTP ``Range`` request when the server supports it and
restarts from zero when it does not.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import os
import shutil
import tarfile
import time
import urllib.error
import urllib.request
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from distrain.progress import Progress

CHUNK = 1 << 16


class ChecksumError(ValueError):
    """A downloaded file's size or sha256 is not the pinned one."""


class UnsafeArchiveError(ValueError):
    """An archive member would land outside the target directory, or is not a plain file."""


@dataclass(frozen=True)
class RemoteFile:
    """A file at a pinned URL with its expected digest.

    Attributes:
        url: http(s):// or file:// URL.
        sha256: Expected hex digest ('' when none is published: then fetch refuses unless
            told ``allow_unverified``).
        size: Expected size in bytes, if known.
        name: Local file name (default: the URL's last path component).
        md5: Expected MD5, for files whose publishers give no sha256 (checked as well as
            the sha256 when both are pinned).
    """

    url: str
    sha256: str
    size: int | None = None
    name: str = ""
    md5: str = ""

    @property
    def filename(self) -> str:
        """The local file name."""
        return self.name or PurePosixPath(urlparse(self.url).path).name


def sha256_of(path: str | os.PathLike, algorithm: str = "sha256") -> str:
    """The hex digest of a file (sha256 unless another hashlib algorithm is named)."""
    digest = hashlib.new(algorithm)
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(CHUNK), b""):
            digest.update(block)
    return digest.hexdigest()


def _verify(remote: RemoteFile, path: Path) -> None:
    if remote.size is not None and path.stat().st_size != remote.size:
        size = path.stat().st_size
        path.unlink()
        raise ChecksumError(f"{remote.url}: {size} bytes, expected {remote.size}; file removed")
    for algorithm, expected in (("sha256", remote.sha256), ("md5", remote.md5)):
        if not expected:
            continue
        actual = sha256_of(path, algorithm)
        if actual != expected:
            path.unlink()
            raise ChecksumError(
                f"{remote.url}: {algorithm} {actual}, expected {expected}; file removed"
            )


def _open(url: str, offset: int, timeout: float):
    request = urllib.request.Request(url, headers={"User-Agent": "distrain"})
    if offset and urlparse(url).scheme in ("http", "https"):
        request.add_header("Range", f"bytes={offset}-")
    return urllib.request.urlopen(request, timeout=timeout)  # noqa: S310 (pinned URLs)


def _transfer(remote: RemoteFile, part: Path, timeout: float, progress: bool) -> None:
    offset = part.stat().st_size if part.exists() else 0
    try:
        response = _open(remote.url, offset, timeout)
    except urllib.error.HTTPError as err:
        if err.code != 416:
            raise
        part.unlink()  # the partial file does not fit the server's: start again
        offset = 0
        response = _open(remote.url, 0, timeout)
    with response:
        status = getattr(response, "status", None)
        if offset and status != 206:
            offset = 0  # the server ignored the range: restart cleanly
        length = response.headers.get("Content-Length")
        expected = int(length) + offset if length is not None else None
        total = remote.size or expected
        mode = "ab" if offset else "wb"
        done = offset
        bar = Progress(f"download {remote.filename}", total, "bytes", completed=offset, interval=10)
        with open(part, mode) as out, bar if progress else contextlib.nullcontext():
            while block := response.read(CHUNK):
                out.write(block)
                done += len(block)
                if progress:
                    bar.update(len(block))
        if expected is not None and done < expected:
            raise ConnectionError(f"{remote.url}: connection closed at {done} of {expected} bytes")


def fetch(
    remote: RemoteFile,
    dest_dir: str | os.PathLike,
    *,
    retries: int = 3,
    timeout: float = 60,
    progress: bool = True,
    allow_unverified: bool = False,
) -> Path:
    """Downloads ``remote`` into ``dest_dir`` unless a verified copy is already there.

    Args:
        remote: What to fetch and its expected digest.
        dest_dir: Destination directory.
        retries: Attempts after a connection error (each resumes the partial file).
        timeout: Socket timeout in seconds.
        progress: Show the download's progress on stderr (:mod:`distrain.progress`).
        allow_unverified: Accept a RemoteFile without a pinned sha256.

    Returns:
        The verified local file.

    Raises:
        ChecksumError: The size or digest is wrong (the file is removed).
        ValueError: No digest is pinned and ``allow_unverified`` is False.
        OSError: The download kept failing.
    """
    if not (remote.sha256 or remote.md5) and not allow_unverified:
        raise ValueError(f"{remote.url}: no sha256 pinned; refusing an unverified download")
    dest = Path(dest_dir) / remote.filename
    dest.parent.mkdir(parents=True, exist_ok=True)
    if dest.exists():
        try:
            _verify(remote, dest)  # removes a copy that does not match
            return dest
        except ChecksumError:
            pass
    part = dest.with_name(dest.name + ".part")
    if urlparse(remote.url).scheme == "file":
        shutil.copyfile(urllib.request.url2pathname(urlparse(remote.url).path), part)
    else:
        for attempt in range(retries + 1):
            try:
                _transfer(remote, part, timeout, progress)
                break
            except (
                urllib.error.URLError,
                ConnectionError,
                TimeoutError,
                http.client.IncompleteRead,
            ) as err:
                if isinstance(err, urllib.error.HTTPError) and err.code < 500:
                    raise
                if attempt == retries:
                    raise OSError(
                        f"{remote.url}: download failed after {retries + 1} attempts: {err}"
                    ) from err
                time.sleep(min(2**attempt, 30))
    _verify(remote, part)
    os.replace(part, dest)
    return dest


def _check_member(root: Path, name: str, archive: str) -> Path:
    if name.startswith(("/", "\\")) or PurePosixPath(name).is_absolute() or ":" in name[:3]:
        raise UnsafeArchiveError(f"{archive}: member {name!r} has an absolute path")
    target = (root / name).resolve()
    if target != root and root not in target.parents:
        raise UnsafeArchiveError(f"{archive}: member {name!r} would land outside {root}")
    return target


def safe_extract(archive: str | os.PathLike, dest_dir: str | os.PathLike) -> list[Path]:
    """Extracts a .tar, .tar.gz/.tgz or .zip archive, refusing anything unsafe.

    Every member is checked before anything is written: absolute paths, ``..`` escapes,
    links pointing outside the target, and device files or FIFOs are refused.

    Returns:
        The extracted files.

    Raises:
        UnsafeArchiveError: A member is unsafe (nothing is extracted).
    """
    archive = Path(archive)
    root = Path(dest_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        with zipfile.ZipFile(archive) as zf:
            infos = zf.infolist()
            for info in infos:
                _check_member(root, info.filename, str(archive))
                if (info.external_attr >> 16) & 0o170000 == 0o120000:
                    raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is a symlink")
            zf.extractall(root)
            return [root / i.filename for i in infos if not i.is_dir()]
    with tarfile.open(archive) as tf:
        members = tf.getmembers()
        # Links are judged by the archive's own paths, not by the (still empty) target:
        # a chain such as ``y -> .``, ``x -> y/..``, ``x/evil`` resolves inside on an
        # empty disk and outside once extracted. No member may lie under a link, and no
        # link's target may pass through another link.
        links = {_parts(m.name) for m in members if m.issym() or m.islnk()}
        for m in members:
            target = _check_member(root, m.name, str(archive))
            parts = _parts(m.name)
            under = next((parts[:i] for i in range(1, len(parts)) if parts[:i] in links), None)
            if under is not None:
                raise UnsafeArchiveError(
                    f"{archive}: member {m.name!r} lies under the link {'/'.join(under)!r}"
                )
            if m.issym() or m.islnk():
                base = target.parent if m.issym() else root
                link = (base / m.linkname).resolve()
                if PurePosixPath(m.linkname).is_absolute() or (
                    link != root and root not in link.parents
                ):
                    raise UnsafeArchiveError(
                        f"{archive}: link {m.name!r} -> {m.linkname!r} points outside {root}"
                    )
                start = parts[:-1] if m.issym() else ()
                path = start + tuple(PurePosixPath(m.linkname).parts)
                through = next(
                    (path[:i] for i in range(1, len(path) + 1) if path[:i] in links), None
                )
                if through is not None:
                    raise UnsafeArchiveError(
                        f"{archive}: link {m.name!r} -> {m.linkname!r} passes through the "
                        f"link {'/'.join(through)!r}"
                    )
            elif not (m.isfile() or m.isdir()):
                raise UnsafeArchiveError(f"{archive}: member {m.name!r} is not a regular file")
        # The checks above are the guard. Where tarfile has PEP 706's filters (3.11.4 and
        # later) the "data" filter is a second one; Debian 12's Python 3.11.2, which the
        # images are built on, lacks them.
        if hasattr(tarfile, "data_filter"):
            tf.extractall(root, filter="data")
        else:
            tf.extractall(root)  # every member was checked above
        return [root / m.name for m in members if m.isfile()]


def _parts(name: str) -> tuple[str, ...]:
    """An archive path's parts, without ``.`` and empty parts (``./a//b`` is ``a/b``)."""
    return tuple(p for p in name.replace("\\", "/").split("/") if p not in ("", "."))
