"""Downloads from pinned URLs with sha256 checks, resumption and safe archive extraction.

Nothing unverified is kept: a file whose size or digest is wrong is deleted and the
download fails naming the URL, the expected and the actual digest. A partial download
(``<name>.part``) resumes with an HTTP ``Range`` request when the server supports it and
restarts from zero when it does not.

What comes from outside is bounded (:class:`DownloadLimits`, each bound a setting with a
default and an environment variable): a download has an overall deadline besides its
per-read timeout, and an archive is refused before anything is extracted when its files
would come to more bytes, or it holds more members, than the limits allow.
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
from dataclasses import asdict, dataclass, fields
from pathlib import Path, PurePosixPath
from urllib.parse import urlparse

from distrain.base.progress import Progress

CHUNK = 1 << 16


class ChecksumError(ValueError):
    """A downloaded file's size or sha256 is not the pinned one."""


class UnsafeArchiveError(ValueError):
    """An archive member would land outside the target directory, or is not a plain file."""


class ArchiveLimitError(UnsafeArchiveError):
    """An archive would extract to more bytes, or more members, than the limits allow.

    A ``ValueError``: the same archive is refused again, so the failure is permanent.
    """


class DownloadDeadlineError(TimeoutError):
    """A download did not finish within its overall deadline.

    A ``TimeoutError``, so transient (:func:`distrain.preprocess.failures.classify`): the partial
    file is kept, and a retried step resumes it with a ``Range`` request where the last
    attempt stopped, so a slow link still gets the file in a few attempts.
    """


@dataclass(frozen=True)
class DownloadLimits:
    """Bounds on what comes from outside: each field a setting, declared here once.

    Each one's environment variable (``DISTRAIN_`` and the field's name in capitals, e.g.
    ``DISTRAIN_MAX_EXTRACT_BYTES``) overrides its default (:meth:`from_env`); the real
    data sets lie well inside the defaults: the largest archive a built-in data set fetches
    (68 MB) holds 5 members that come to about 196 MB, and it is also the largest single
    download.

    Attributes:
        download_deadline: Seconds one file's download may take in all: every attempt
            and the waits between them (each read still has its own timeout). 3,600 s
            fetches that 68 MB archive at 19 KB/s.
        max_extract_bytes: Most bytes an archive's files may come to once extracted
            (1 GiB, five times that archive's).
        max_extract_members: Most members (files, folders, links) an archive may hold
            (1,000; that archive has 5).
    """

    download_deadline: float = 3600.0
    max_extract_bytes: int = 2**30
    max_extract_members: int = 1000

    def __post_init__(self) -> None:
        for name, value in asdict(self).items():
            if not value > 0:
                raise ValueError(f"{self.env(name)} ({name}) must be positive, got {value}")

    @staticmethod
    def env(name: str) -> str:
        """The environment variable of a field: ``DISTRAIN_`` and its name in capitals."""
        return f"DISTRAIN_{name.upper()}"

    @classmethod
    def from_env(cls, environ: dict[str, str] | None = None) -> DownloadLimits:
        """The defaults, each replaced by its environment variable when that is set.

        Raises:
            ValueError: A variable is not a positive number (named).
        """
        environ = os.environ if environ is None else environ
        values = {}
        for f in fields(cls):
            text = environ.get(cls.env(f.name), "").strip()
            if not text:
                continue
            try:
                values[f.name] = type(f.default)(float(text))
            except (ValueError, OverflowError):
                raise ValueError(
                    f"{cls.env(f.name)}={text!r}: not a number ({f.name}, default {f.default})"
                ) from None
        return cls(**values)


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


def _past_deadline(remote: RemoteFile, part: Path, deadline: float) -> DownloadDeadlineError:
    """The error of a download past its deadline, naming the URL, the deadline, the bytes."""
    done = part.stat().st_size if part.exists() else 0
    of = f" of {remote.size:,}" if remote.size else ""
    return DownloadDeadlineError(
        f"{remote.url}: not downloaded within the deadline of {deadline:g} s "
        f"({done:,}{of} bytes; {DownloadLimits.env('download_deadline')} to change it; the "
        "partial file is kept and a retry resumes it)"
    )


def _transfer(
    remote: RemoteFile, part: Path, timeout: float, progress: bool, ends: tuple[float, float]
) -> None:
    """One attempt; ``ends``: (the deadline in seconds, its time.monotonic() moment)."""
    deadline, end = ends
    offset = part.stat().st_size if part.exists() else 0
    timeout = max(0.1, min(timeout, end - time.monotonic()))  # a read ends by the deadline
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
        # read1: what one read of the socket gives; read(CHUNK) waits for CHUNK bytes, so
        # a server that trickles a byte at a time would hold it with no read timing out.
        read = getattr(response, "read1", response.read)
        with open(part, mode) as out, bar if progress else contextlib.nullcontext():
            while block := read(CHUNK):
                out.write(block)
                done += len(block)
                if progress:
                    bar.update(len(block))
                if time.monotonic() > end:
                    out.flush()
                    raise _past_deadline(remote, part, deadline)
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
    deadline: float | None = None,
) -> Path:
    """Downloads ``remote`` into ``dest_dir`` unless a verified copy is already there.

    Args:
        remote: What to fetch and its expected digest.
        dest_dir: Destination directory.
        retries: Attempts after a connection error (each resumes the partial file).
        timeout: Socket timeout in seconds (each read's).
        progress: Show the download's progress on stderr (:mod:`distrain.base.progress`).
        allow_unverified: Accept a RemoteFile without a pinned sha256.
        deadline: Seconds the whole download may take, every attempt and wait included
            (None: :attr:`DownloadLimits.download_deadline`, from the environment).

    Returns:
        The verified local file.

    Raises:
        ChecksumError: The size or digest is wrong (the file is removed).
        ValueError: No digest is pinned and ``allow_unverified`` is False.
        DownloadDeadlineError: The deadline passed (the partial file is kept).
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
        if deadline is None:
            deadline = DownloadLimits.from_env().download_deadline
        end = time.monotonic() + deadline
        for attempt in range(retries + 1):
            try:
                _transfer(remote, part, timeout, progress, (deadline, end))
                break
            except DownloadDeadlineError:
                raise
            except (
                urllib.error.URLError,
                ConnectionError,
                TimeoutError,
                http.client.IncompleteRead,
            ) as err:
                if isinstance(err, urllib.error.HTTPError) and err.code < 500:
                    raise
                wait = min(2**attempt, 30) if attempt < retries else 0
                if time.monotonic() + wait > end:  # no time left for another attempt
                    raise _past_deadline(remote, part, deadline) from err
                if attempt == retries:
                    raise OSError(
                        f"{remote.url}: download failed after {retries + 1} attempts: {err}"
                    ) from err
                time.sleep(wait)
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


class _Tally:
    """Counts an archive's members and the bytes they extract to, against the limits."""

    def __init__(self, archive: Path, max_bytes: int, max_members: int):
        self.archive, self.max_bytes, self.max_members = archive, max_bytes, max_members
        self.members = self.bytes = 0

    def add(self, name: str, size: int) -> None:
        """One more member of ``size`` bytes.

        Raises:
            ArchiveLimitError: Past either limit (the message names the archive and it).
        """
        self.members += 1
        self.bytes += size
        if self.members > self.max_members:
            raise ArchiveLimitError(
                f"{self.archive}: more than {self.max_members:,} members, the limit "
                f"({DownloadLimits.env('max_extract_members')}); nothing was extracted"
            )
        if self.bytes > self.max_bytes:
            raise ArchiveLimitError(
                f"{self.archive}: its files come to more than {self.max_bytes:,} bytes, the "
                f"limit ({DownloadLimits.env('max_extract_bytes')}): {self.bytes:,} by member "
                f"{name!r}; nothing was extracted"
            )


def safe_extract(
    archive: str | os.PathLike,
    dest_dir: str | os.PathLike,
    *,
    max_bytes: int | None = None,
    max_members: int | None = None,
) -> list[Path]:
    """Extracts a .tar, .tar.gz/.tgz or .zip archive, refusing anything unsafe.

    Every member is checked before anything is written: absolute paths, ``..`` escapes,
    links pointing outside the target, and device files or FIFOs are refused, and so is
    an archive whose members come to more bytes or are more than the limits allow (read
    from the members' headers, which bind what is written: a tar member is exactly its
    size, a zip member is cut there and fails its CRC). A tar.gz is counted as its
    headers are read, so a bomb is refused at the first header past a limit, before its
    data is decompressed. An extraction that fails half-way removes what it wrote.

    Args:
        archive: The .tar, .tar.gz/.tgz or .zip file.
        dest_dir: Where to extract it.
        max_bytes: Most bytes the files may come to (None:
            :attr:`DownloadLimits.max_extract_bytes`, from the environment).
        max_members: Most members (None: :attr:`DownloadLimits.max_extract_members`).

    Returns:
        The extracted files.

    Raises:
        UnsafeArchiveError: A member is unsafe (nothing is extracted).
        ArchiveLimitError: The archive is past a limit (nothing is extracted).
    """
    archive = Path(archive)
    limits = DownloadLimits.from_env() if max_bytes is None or max_members is None else None
    tally = _Tally(
        archive,
        limits.max_extract_bytes if max_bytes is None else max_bytes,
        limits.max_extract_members if max_members is None else max_members,
    )
    root = Path(dest_dir).resolve()
    root.mkdir(parents=True, exist_ok=True)
    if zipfile.is_zipfile(archive):
        return _extract_zip(archive, root, tally)
    return _extract_tar(archive, root, tally)


def _extract_zip(archive: Path, root: Path, tally: _Tally) -> list[Path]:
    """:func:`safe_extract` of a zip file: its central directory checked, then extracted."""
    with zipfile.ZipFile(archive) as zf:
        infos = zf.infolist()  # the central directory: nothing is decompressed
        for info in infos:
            tally.add(info.filename, info.file_size)
            _check_member(root, info.filename, str(archive))
            if (info.external_attr >> 16) & 0o170000 == 0o120000:
                raise UnsafeArchiveError(f"{archive}: member {info.filename!r} is a symlink")
        with _undone_on_failure(root, [i.filename for i in infos]):
            zf.extractall(root)
        return [root / i.filename for i in infos if not i.is_dir()]


def _extract_tar(archive: Path, root: Path, tally: _Tally) -> list[Path]:
    """:func:`safe_extract` of a tar file: header by header counted, checked, extracted."""
    with tarfile.open(archive) as tf:
        members, sizes = [], {}
        for m in tf:  # header by header: refused at the first past a limit
            members.append(m)
            # A hard link is extracted as a copy where links cannot be made: its target's size.
            size = m.size if m.isfile() else sizes.get(_parts(m.linkname), 0) if m.islnk() else 0
            sizes[_parts(m.name)] = size
            tally.add(m.name, size)
        _check_tar_members(archive, root, members)
        # The checks above are the guard. Where tarfile has PEP 706's filters (3.11.4 and
        # later) the "data" filter is a second one; Debian 12's Python 3.11.2, which the
        # images are built on, lacks them.
        with _undone_on_failure(root, [m.name for m in members]):
            if hasattr(tarfile, "data_filter"):
                tf.extractall(root, filter="data")
            else:
                tf.extractall(root)  # every member was checked above
        return [root / m.name for m in members if m.isfile()]


def _check_tar_members(archive: Path, root: Path, members: list) -> None:
    """Refuses a tar's unsafe members.

    A member outside ``root``, under a link, or neither file nor folder is refused, and so
    is a link that points outside ``root`` or passes through another link.
    """
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
            through = next((path[:i] for i in range(1, len(path) + 1) if path[:i] in links), None)
            if through is not None:
                raise UnsafeArchiveError(
                    f"{archive}: link {m.name!r} -> {m.linkname!r} passes through the "
                    f"link {'/'.join(through)!r}"
                )
        elif not (m.isfile() or m.isdir()):
            raise UnsafeArchiveError(f"{archive}: member {m.name!r} is not a regular file")


@contextlib.contextmanager
def _undone_on_failure(root: Path, names: list[str]):
    """On a failure, removes the members' paths (and folders) that were not there before."""
    paths = {root.joinpath(*_parts(n)[:i]) for n in names for i in range(1, len(_parts(n)) + 1)}
    new = sorted((p for p in paths if not os.path.lexists(p)), key=lambda p: -len(p.parts))
    try:
        yield
    except BaseException:
        for path in new:  # deepest first
            if path.is_symlink() or path.is_file():
                path.unlink(missing_ok=True)
            elif path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
        raise


def _parts(name: str) -> tuple[str, ...]:
    """An archive path's parts, without ``.`` and empty parts (``./a//b`` is ``a/b``)."""
    return tuple(p for p in name.replace("\\", "/").split("/") if p not in ("", "."))
