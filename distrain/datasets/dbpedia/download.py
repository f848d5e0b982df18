"""Where DBPedia-14 is downloaded from: the pinned archive, checked and extracted safely."""

from __future__ import annotations

import os
from pathlib import Path

from distrain.preprocess.download import RemoteFile, fetch, safe_extract

# DBPedia-14 as Zhang et al. distribute it. Its publishers give an MD5 (torchtext pins it) and
# the archive's size is 68,341,698 bytes; no sha256 is published.
DBPEDIA_REMOTE = RemoteFile(
    "https://github.com/le-scientifique/torchDatasets/raw/master/dbpedia_csv.tar.gz",
    sha256="",
    size=68341698,
    md5="dca7b1ae12b1091090db52aa7ec5ca64",
)


def download_dbpedia(dest_dir: str | os.PathLike, url: str | None = None) -> Path:
    """Fetches and safely extracts ``dbpedia_csv.tar.gz``; returns the ``dbpedia_csv`` dir."""
    remote = DBPEDIA_REMOTE
    if url:
        remote = RemoteFile(url, remote.sha256, remote.size, "dbpedia_csv.tar.gz", remote.md5)
    archive = fetch(remote, dest_dir)
    safe_extract(archive, dest_dir)
    return Path(dest_dir) / "dbpedia_csv"
