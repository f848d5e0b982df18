"""Beam's Dask runner on a local cluster of two worker processes: each preprocessing job
writes exactly what the local runner writes (records, metadata, dead letters)."""

import json

import numpy as np
import pytest
from distributed import Client, LocalCluster, get_task_stream

from distrain.datasets.gutenberg.sample import book_text
from distrain.datasets.mnist.idx import write_idx
from distrain.steps import fetch, preprocess

LOCAL = ["--runner=FnApiRunner", "--direct_running_mode=in_memory"]


@pytest.fixture(scope="module")
def cluster():
    with LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as local_cluster:
        yield local_cluster


def _mnist_raw(raw):
    """A small MNIST layout whose training labels hold two that are not digits."""
    rng = np.random.default_rng(3)
    for prefix, n in (("train", 700), ("t10k", 150)):
        labels = (np.arange(n) % 10).astype(np.uint8)
        if prefix == "train":
            labels[[5, 333]] = 42
        images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
        write_idx(raw / f"{prefix}-images-idx3-ubyte.gz", images)
        write_idx(raw / f"{prefix}-labels-idx1-ubyte.gz", labels)


def _dbpedia_raw(raw):
    """The sample, with bad rows (one with a field over the csv limit) and a BOM."""
    fetch("dbpedia", "sample", raw, sample_size=700, seed=1)
    train = (raw / "train.csv").read_bytes().splitlines(keepends=True)
    bad = [b'2,"Only two columns"\n', b'x,"Bad index","text"\n', b'3,"L","' + b"x" * 140_000]
    bad[-1] += b'"\n'
    (raw / "train.csv").write_bytes(b"".join(train[:100] + bad + train[100:]))
    (raw / "test.csv").write_bytes(b"\xef\xbb\xbf" + (raw / "test.csv").read_bytes())


def _gutenberg_raw(raw):
    """The sample, a book without markers and a book in UTF-16."""
    fetch("gutenberg", "sample", raw, sample_size=9000, seed=1)
    (raw / "nomarkers.txt").write_text("no markers in this one\n" * 20)
    body = "Words saved in UTF-16 by a word processor. " * 40
    (raw / "pg8.txt").write_bytes(book_text("Eight", "Anon", body, 8).encode("utf-16"))


RAW = {"mnist": _mnist_raw, "dbpedia": _dbpedia_raw, "gutenberg": _gutenberg_raw}


def _preprocess(dataset, raw, out, beam_args):
    if dataset == "mnist":  # its default ratio of bad records is 0
        from distrain.datasets.mnist.beam import MnistPreprocessConfig, preprocess_mnist

        return preprocess_mnist(
            MnistPreprocessConfig(str(raw), str(out), max_bad_ratio=0.01), beam_args
        )
    return preprocess(dataset, raw, out, beam_args=beam_args)


def _outputs(root):
    """Every file's bytes, and the metadata without the config (it names the directory)."""
    files = {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
    metadata = json.loads(files.pop("metadata.json"))
    metadata.pop("config")
    return files, metadata


@pytest.mark.slow
@pytest.mark.parametrize("dataset", ["mnist", "dbpedia", "gutenberg"])
def test_dask_runner_writes_what_the_local_runner_writes(tmp_path, cluster, dataset):
    raw = tmp_path / "raw"
    raw.mkdir()
    RAW[dataset](raw)
    _preprocess(dataset, raw, tmp_path / "local", LOCAL)
    dask_args = [
        "--runner=DaskRunner",
        f"--dask_client_address={cluster.scheduler_address}",
        "--dask_npartitions=2",
    ]
    with Client(cluster) as client, get_task_stream(client) as tasks:
        _preprocess(dataset, raw, tmp_path / "dask", dask_args)
    local_files, local_meta = _outputs(tmp_path / "local")
    dask_files, dask_meta = _outputs(tmp_path / "dask")
    assert dask_meta == local_meta
    assert sorted(dask_files) == sorted(local_files)
    for name, content in local_files.items():
        assert dask_files[name] == content, name
    # Not an empty comparison: records, dead letters and rejects are there.
    assert sum(local_meta["splits"].values()) > 0
    dead = [n for n in local_files if n.startswith("dead_letter/")]
    assert dead and all(local_files[n] for n in dead)
    assert local_meta["rejected"]["count"] == {"mnist": 2, "dbpedia": 3, "gutenberg": 1}[dataset]
    # The job ran on the cluster's two worker processes.
    assert len({task["worker"] for task in tasks.data}) == 2
