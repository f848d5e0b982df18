"""Section 1b of the suite: the Beam jobs on Beam's Dask runner beside the local one."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

from benchmarks.common import (
    SuiteConfig,
    log,
    raw_sample,
    tile_sample,
)

DASK_WORKERS = 2


def bench_dask(cfg: SuiteConfig, tmp: Path) -> list[dict]:
    """Section 1b: records/second of each Beam job on Beam's Dask runner and the local one.

    The Dask runner runs on a local ``dask.distributed`` cluster of two worker processes
    of one thread each, started here, with the work in two partitions
    (``--dask_npartitions=2``); the local runner is section 1's "Beam, 1 worker" (the
    FnApiRunner in memory). Both take section 1's timed input, one after the other,
    ``dask_repeats`` times; the fastest run of each is reported, and both must write the
    same number of records.
    """
    from distributed import LocalCluster

    from distrain.steps import preprocess

    sizes = {
        "mnist": cfg.mnist_records,
        "dbpedia": cfg.dbpedia_rows,
        "gutenberg": cfg.gutenberg_chars,
    }
    rows = []
    with LocalCluster(
        n_workers=DASK_WORKERS, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        setups = {
            "local runner (FnApiRunner)": [
                "--runner=FnApiRunner",
                "--direct_running_mode=in_memory",
            ],
            f"Dask runner, {DASK_WORKERS} workers": [
                "--runner=DaskRunner",
                f"--dask_client_address={cluster.scheduler_address}",
                f"--dask_npartitions={DASK_WORKERS}",
            ],
        }
        for dataset, n in sizes.items():
            sample = raw_sample(tmp, dataset, n)
            timed = tile_sample(
                dataset, sample, tmp / f"{dataset}-dask", cfg.preprocess_tiles[dataset]
            )
            seconds: dict[str, list[float]] = {name: [] for name in setups}
            written: dict[str, int] = {}
            for rep in range(cfg.dask_repeats):
                for i, (name, args) in enumerate(setups.items()):
                    out = tmp / f"d-{dataset}-{i}-{rep}"
                    start = time.perf_counter()
                    meta = preprocess(dataset, timed, out, beam_args=args)
                    seconds[name].append(time.perf_counter() - start)
                    written[name] = sum(meta["splits"].values())
                    shutil.rmtree(out, ignore_errors=True)
            assert len(set(written.values())) == 1, f"{dataset}: runners wrote {written}"
            local = min(next(iter(seconds.values())))
            for name, times in seconds.items():
                rows.append(
                    {
                        "dataset": dataset,
                        "pipeline": name,
                        "records": written[name],
                        "seconds": min(times),
                        "repeats": len(times),
                        "records_per_second": written[name] / min(times),
                        "vs_local": local / min(times),
                    }
                )
            log(f"Dask runner, {dataset}: {rows[-1]['records_per_second']:,.0f} records/s")
    return rows


def render_dask(rows: list[dict]) -> list[str]:
    """The lines of section 1b (:func:`bench_dask`) in BENCHMARKS.md."""
    lines = [
        "",
        "### 1b. Beam's Dask runner",
        "",
        "Each job on a local `dask.distributed` cluster of two worker processes (one thread "
        "each, `--dask_npartitions=2`) against the local runner in memory, on section 1's "
        "timed input; the fastest of the repeats. Records are the examples written (the "
        "same on both).",
        "",
        "| data set | runner | records | seconds | records/s | vs local runner |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {r['dataset']} | {r['pipeline']} | {r['records']:,} | {r['seconds']:.2f} | "
            f"{r['records_per_second']:,.0f} | {r['vs_local']:.2f}x |"
        )
    return lines
