"""Input pipelines: preprocessed TFRecords to ``tf.data`` datasets, the same for every mode."""

from __future__ import annotations

from distrain import datasets
from distrain.datasets.info import DatasetInfo

_PARSE_CALLS = 2
_PREFETCH_BATCHES = 2


def make_dataset(
    info: DatasetInfo,
    split: str,
    batch_size: int,
    *,
    shard: tuple[int, int] = (1, 0),
    shuffle: bool = False,
    seed: int = 0,
    repeat: bool = False,
    drop_remainder: bool = False,
    common_every: int = 0,
    held_out: tuple[int, bool] | None = None,
):
    """Builds the batched dataset of ``(features, labels)`` for one split.

    Args:
        info: The data set's metadata.
        split: ``train``, ``validation`` or ``test``.
        batch_size: Examples per batch.
        shard: ``(num_shards, index)``: this worker reads every ``num_shards``-th record
            starting at ``index`` (data parallelism: each worker sees a disjoint part).
        shuffle: Shuffle records (with ``seed``, reshuffled each epoch).
        seed: Shuffle seed.
        repeat: Repeat forever (the caller counts steps).
        drop_remainder: Drop a last partial batch.
        common_every: Every shard also reads each ``common_every``-th record of the split
            (records every worker shares besides its own; 0: none).
        held_out: ``(every, only)``: of this shard's records, every ``every``-th one is
            held out: ``only=False`` leaves them out, ``only=True`` keeps just them.

    Returns:
        A ``tf.data.Dataset``.
    """
    import tensorflow as tf

    parse = datasets.get(info.dataset).parser(info)
    num_shards, index = shard
    ds = tf.data.TFRecordDataset(info.split_files(split))
    if common_every > 0 and num_shards > 1:
        ds = ds.enumerate().filter(
            lambda i, _: tf.logical_or(i % num_shards == index, i % common_every == 0)
        )
        ds = ds.map(lambda _, record: record)
    elif num_shards > 1:
        ds = ds.shard(num_shards, index)
    if held_out is not None:
        every, only = held_out
        ds = ds.enumerate().filter(lambda i, _: tf.equal(i % every == 0, only))
        ds = ds.map(lambda _, record: record)
    ds = ds.cache()
    if shuffle:
        ds = ds.shuffle(10_000, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        ds = ds.repeat()
    ds = ds.batch(batch_size, drop_remainder=drop_remainder)
    # Fixed parallelism and buffer, and tf.data's autotuning off: with it on, TF 2.21's
    # autotuning thread sleeps ever longer between rounds and deleting the iterator waits
    # for it to wake (measured: 20 s at the end of a 30 s run of the MLP on one core, 50 s
    # after 95 s). Parsing a batch is a few ms; two batches in flight keep a step fed.
    ds = ds.map(parse, num_parallel_calls=_PARSE_CALLS)
    options = tf.data.Options()
    options.autotune.enabled = False
    return ds.prefetch(_PREFETCH_BATCHES).with_options(options)


def shard_size(total: int, num_shards: int, index: int) -> int:
    """How many of ``total`` records ``Dataset.shard(num_shards, index)`` keeps."""
    return total // num_shards + (1 if index < total % num_shards else 0)
