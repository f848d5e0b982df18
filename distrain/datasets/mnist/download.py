"""Where MNIST is downloaded from: the pinned files and their digests."""

from __future__ import annotations

import os
from pathlib import Path

from distrain.preprocess.download import RemoteFile, fetch

# The MNIST mirror TensorFlow's datasets use; sizes and digests as published with them.
MNIST_MIRROR = "https://storage.googleapis.com/cvdf-datasets/mnist/"
MNIST_REMOTE: dict[str, RemoteFile] = {
    name: RemoteFile(MNIST_MIRROR + name, digest, size)
    for name, size, digest in (
        (
            "train-images-idx3-ubyte.gz",
            9912422,
            "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609",
        ),
        (
            "train-labels-idx1-ubyte.gz",
            28881,
            "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c",
        ),
        (
            "t10k-images-idx3-ubyte.gz",
            1648877,
            "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6",
        ),
        (
            "t10k-labels-idx1-ubyte.gz",
            4542,
            "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6",
        ),
    )
}


def download_mnist(dest_dir: str | os.PathLike, base_url: str | None = None) -> dict[str, Path]:
    """Fetches the four MNIST files, sha256-checked.

    Args:
        dest_dir: Destination directory.
        base_url: Another location of the same files (a mirror, a file:// directory);
            names and digests stay pinned.

    Returns:
        File name to local path.
    """
    files = {}
    for name, remote in MNIST_REMOTE.items():
        if base_url:
            remote = RemoteFile(base_url.rstrip("/") + "/" + name, remote.sha256, remote.size)
        files[name] = fetch(remote, dest_dir)
    return files
