"""Where Project Gutenberg books are downloaded from, each one's digest kept in a manifest."""

from __future__ import annotations

import json
import os
from pathlib import Path

from distrain.preprocess.download import RemoteFile, fetch, sha256_of

# Project Gutenberg's plain-text books by id. Books change between editions, so no digest can
# be pinned: fetch_gutenberg records each book's sha256 in a manifest on first download and
# verifies the cached copy against it afterwards.
GUTENBERG_URL = "https://www.gutenberg.org/cache/epub/{id}/pg{id}.txt"


def fetch_gutenberg(
    ids: list[int], dest_dir: str | os.PathLike, url_pattern: str = GUTENBERG_URL
) -> list[Path]:
    """Fetches books by id into ``dest_dir`` (cached; sha256 recorded in manifest.json)."""
    dest = Path(dest_dir)
    dest.mkdir(parents=True, exist_ok=True)
    manifest_path = dest / "manifest.json"
    manifest = json.loads(manifest_path.read_text()) if manifest_path.exists() else {}
    paths = []
    for book in ids:
        name = f"pg{int(book)}.txt"
        known = manifest.get(name, "")
        remote = RemoteFile(url_pattern.format(id=int(book)), known, name=name)
        path = fetch(remote, dest, allow_unverified=not known)
        manifest[name] = sha256_of(path)
        paths.append(path)
    manifest_path.write_text(json.dumps(manifest, indent=2, sort_keys=True))
    return paths
