"""How a preprocessing job writes, and the checks that what it wrote adds up.

:class:`WriteOutputs` is every job's last step (the TFRecord batches, the dead letters, the
counts and the files the job wrote itself, all listed in one manifest); it does no I/O of
its own beyond Beam's writes. Around the pipeline, :func:`staged_output` stages the output
folder and puts it in place once the job succeeds; the readers give back what was written;
:func:`check_accounting` and :func:`check_bad_ratio` fail a job whose records do not add up
or whose share of rejected records is above its bound.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
from collections.abc import Iterable
from pathlib import Path

import apache_beam as beam
import numpy as np

from distrain.preprocess.outputs import one_writer, remove_stale
from distrain.preprocess.records import write_text, write_tfrecords
from distrain.preprocess.transforms import CombineAll, SumStatsFn


class BadRecordsError(ValueError):
    """More records were rejected than the configured ratio allows."""


class AllWritten(beam.PTransform):
    """The last transform of a job: waits for every sink's output and lists what they wrote.

    Beam 2.77's Dask runner computes only what the pipeline's last transform depends
    on; this one depends on every sink. On other runners it costs a few elements.
    Input: a tuple of the sinks' output PCollections (a file name, or ``(file name,
    record count)`` for TFRecord files). With ``manifest`` (a path without its
    ``.jsonl``), every file is written there as a line ``{"file", "records", "bytes"}``,
    its size taken once it is in place (:func:`read_manifest` reads it back). Output:
    one element per file written.
    """

    def __init__(self, manifest: str | None = None):
        super().__init__()
        self.manifest = manifest

    def expand(self, written):
        done = written | "Flatten" >> beam.Flatten() | "Done" >> beam.Map(lambda item: item)
        if self.manifest is None:
            return done
        return (
            done
            | "Describe" >> beam.Map(_describe_file)
            | "WriteManifest"
            >> WriteJsonLines(self.manifest, exact_name=True, key=lambda d: d["file"])
        )


def _describe_file(item) -> dict:
    """``{"file", "records", "bytes"}`` of a sink's output (records: None if not TFRecords)."""
    from apache_beam.io.filesystems import FileSystems

    path, records = item if isinstance(item, tuple) else (item, None)
    size = FileSystems.match([path])[0].metadata_list[0].size_in_bytes
    return {"file": path, "records": records, "bytes": int(size)}


class WriteJsonLines(beam.PTransform):
    """Writes dicts as JSON lines into one file, in a stable order, atomically.

    The file is ``<prefix>-00000-of-00001<suffix>``, or exactly ``<prefix><suffix>`` with
    ``exact_name`` (for single small outputs); it is written (empty) also when there is
    nothing to write. Lines are sorted by ``key`` of their dict (default: the JSON text),
    so that the file's bytes do not depend on the runner or on bundling. All lines go
    through one worker, as with one shard of ``WriteToText`` (whose side inputs the Dask
    runner would recompute).

    Output: the file's name.
    """

    def __init__(
        self, prefix: str, suffix: str = ".jsonl", exact_name: bool = False, key=None
    ) -> None:
        super().__init__()
        self.path = f"{prefix}{suffix}" if exact_name else f"{prefix}-00000-of-00001{suffix}"
        self.key = key

    def expand(self, items):
        key = self.key
        lines = items | "ToJson" >> beam.Map(
            lambda item: (0, ((key(item) if key else ()), json.dumps(item, sort_keys=True)))
        )
        always = items.pipeline | "Always" >> beam.Create([(0, None)])
        return (
            (lines, always)
            | "WithAlways" >> beam.Flatten()
            | "Gather" >> beam.GroupByKey()
            | "Write" >> beam.Map(_write_json_lines, self.path)
        )


def _write_json_lines(group, path: str) -> str:
    _, lines = group
    ordered = sorted((line for line in lines if line is not None), key=lambda kv: kv)
    return write_text("".join(text + "\n" for _, text in ordered), path)


class RecordAccountingError(ValueError):
    """Records read from a file and records written or rejected do not add up.

    A ``ValueError``: the same input gives the same count again, so the step's failure is
    permanent (never retried, see :mod:`distrain.preprocess.failures`).
    """


def check_accounting(
    name: str, input_records: int, written: int, rejected: int, unit: str = "records"
) -> None:
    """Fails loudly unless every input record was written or rejected.

    Args:
        name: The file (or split) the records came from, for the message.
        input_records: Records in it, counted independently of the parser.
        written: Records written out.
        rejected: Records dead-lettered.
        unit: What is counted (``records``, ``lines``, ``bytes``).

    Raises:
        RecordAccountingError: ``input_records != written + rejected``.
    """
    if input_records != written + rejected:
        raise RecordAccountingError(
            f"{name}: {input_records} {unit} in the input, but {written} written + "
            f"{rejected} rejected = {written + rejected}; "
            f"{abs(input_records - written - rejected)} {unit} "
            f"{'lost' if input_records > written + rejected else 'counted twice'}"
        )


class _WriteShard(beam.DoFn):
    """Writes one shard's batches, in order, to a temporary file renamed into place."""

    def __init__(self, prefix: str, num_shards: int, suffix: str):
        self.prefix, self.num_shards, self.suffix = prefix, num_shards, suffix

    def process(self, item):
        shard, grouped = item
        batches = sorted(grouped["batches"], key=lambda batch: batch[0])
        final = f"{self.prefix}-{shard:05d}-of-{self.num_shards:05d}{self.suffix}"
        yield final, write_tfrecords(final, (r for _, records in batches for r in records))


def batch_file_name(order_key) -> str:
    """A file-name part for a batch key; different keys never get the same name.

    Integers are zero-padded (files sort in batch order); anything else is reduced to
    ``[A-Za-z0-9_.]`` for the reader and followed by a hash of its exact text, so that
    keys differing only in characters outside that set (``pg-11.txt``, ``pg 11.txt``)
    still name different files.
    """
    import hashlib
    import re

    parts = order_key if isinstance(order_key, tuple) else (order_key,)
    out = []
    for part in parts:
        if isinstance(part, int | np.integer):
            out.append(f"{int(part):09d}")
        else:
            text = str(part)
            digest = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:12]
            out.append(f"{re.sub(r'[^A-Za-z0-9_.]+', '_', text)}.{digest}")
    return "-".join(out)


class _WriteBatchFile(beam.DoFn):
    """Writes each batch to its own file, named by its key, in the stage that made it."""

    def __init__(self, prefix: str, suffix: str):
        self.prefix, self.suffix = prefix, suffix

    def process(self, batch):
        key, records = batch
        final = f"{self.prefix}-{batch_file_name(key)}{self.suffix}"
        yield final, write_tfrecords(final, records)


def shard_of(order_key, num_shards: int) -> int:
    """The shard of a batch: a stable hash of its order key (the same on every runner)."""
    import zlib

    return zlib.crc32(repr(order_key).encode()) % num_shards


class WriteTFRecordBatches(beam.PTransform):
    """Writes batches of serialised records, ``(order_key, [record, ...])``, as TFRecords.

    The per-record sink (``WriteToTFRecord``) costs a Beam element per record and moves
    every record through a shuffle; this one takes batches. Two layouts, both independent
    of bundling and runner, both written atomically:

    * ``num_shards=0`` (default): one file per batch, ``<prefix>-<key><suffix>``, written
      in the stage that made the batch: no record crosses a shuffle.
    * ``num_shards=N``: exactly N files ``<prefix>-SSSSS-of-NNNNN<suffix>`` (empty ones
      too), batches grouped by a stable hash of their key and written in key order; one
      shuffle of all records.

    Output: ``(file name, record count)`` per file.
    """

    def __init__(self, prefix: str, num_shards: int = 0, suffix: str = ".tfrecord"):
        super().__init__()
        if num_shards < 0:
            raise ValueError("num_shards must be 0 (a file per batch) or positive")
        self.prefix, self.num_shards, self.suffix = prefix, num_shards, suffix

    def expand(self, batches):
        n = self.num_shards
        if n == 0:
            return batches | "WriteBatchFiles" >> beam.ParDo(
                _WriteBatchFile(self.prefix, self.suffix)
            )
        keyed = batches | "KeyByShard" >> beam.Map(lambda batch: (shard_of(batch[0], n), batch))
        every_shard = batches.pipeline | "EveryShard" >> beam.Create([(i, None) for i in range(n)])
        return (
            {"batches": keyed, "shard": every_shard}
            | "GroupByShard" >> beam.CoGroupByKey()
            | "WriteShards" >> beam.ParDo(_WriteShard(self.prefix, n, self.suffix))
        )


class WriteOutputs(beam.PTransform):
    """A job's last step: writes its outputs into ``out`` and lists every file written.

    Input: a dict of PCollections by name, each written as its name says:

    * a name in ``tfrecords`` (a split, or a path such as ``pairs/train``): batches
      ``(order_key, [record, ...])``, to ``out/NAME/part-*.tfrecord``
      (:class:`WriteTFRecordBatches`, ``num_shards`` as there);
    * ``dead_letter``: dicts, to ``out/dead_letter/part-00000-of-00001.jsonl``, in the
      order of ``dead_letter_key`` (:class:`WriteJsonLines`);
    * ``stats``: dicts of counts, added up (:class:`SumStatsFn`) into ``out/stats.json``
      (:func:`read_outputs` reads it back);
    * any other name: an output the job wrote itself (a vocabulary, texts), as the names
      of the files it wrote (or ``(file name, record count)``).

    Every file goes into the manifest (:class:`AllWritten`), one element each.
    """

    def __init__(self, out, tfrecords: Iterable[str], num_shards: int = 0, dead_letter_key=None):
        super().__init__()
        self.out, self.tfrecords = str(out), tuple(tfrecords)
        self.num_shards, self.dead_letter_key = num_shards, dead_letter_key

    def expand(self, outputs):
        needed = (*self.tfrecords, "dead_letter", "stats")
        missing = [name for name in needed if name not in outputs]
        if missing:
            raise ValueError(f"WriteOutputs: no output named {', '.join(missing)}")
        written = []
        for name, pcoll in outputs.items():
            label = "Write" + "".join(part.title() for part in name.replace("/", "_").split("_"))
            if name in self.tfrecords:
                prefix = os.path.join(self.out, name, "part")
                pcoll = pcoll | label >> WriteTFRecordBatches(prefix, self.num_shards)
            elif name == "dead_letter":
                prefix = os.path.join(self.out, "dead_letter", "part")
                pcoll = pcoll | label >> WriteJsonLines(prefix, key=self.dead_letter_key)
            elif name == "stats":
                pcoll = (
                    pcoll
                    | "SumStats" >> CombineAll(SumStatsFn())
                    | label >> WriteJsonLines(os.path.join(self.out, "stats"), ".json", True)
                )
            written.append(pcoll)
        return tuple(written) | "AllWritten" >> AllWritten(os.path.join(self.out, MANIFEST))


def check_bad_ratio(
    name: str,
    input_records: int,
    rejected: int,
    max_bad_ratio: float,
    output_dir: str | os.PathLike | None = None,
    unit: str = "records",
) -> None:
    """Fails when the share of rejected records (or lines) is above ``max_bad_ratio``.

    ``output_dir``: the job's output folder; the message points at the dead letters the
    failed job left in ``OUT.failed`` (:func:`staged_output`).
    """
    if input_records and rejected / input_records > max_bad_ratio:
        where = (
            f"{failed_dir(output_dir) / 'dead_letter'}" if output_dir else "the dead_letter output"
        )
        raise BadRecordsError(
            f"{name}: {rejected} of {input_records} {unit} rejected "
            f"({rejected / input_records:.2%}), above the allowed {max_bad_ratio:.2%}; "
            f"see {where} for each record and its reason"
        )


class OutputExistsError(ValueError):
    """The output folder already holds files, and ``--overwrite`` was not given."""


METADATA = "metadata.json"


MANIFEST = "written"  # the list of files a job wrote (AllWritten), read by read_manifest


def failed_dir(output_dir: str | os.PathLike) -> Path:
    """Where a failed job's output goes (its dead letters, for a look): ``OUT.failed``."""
    out = Path(output_dir)
    return out.with_name(out.name + ".failed")


@contextlib.contextmanager
def staged_output(output_dir: str | os.PathLike, overwrite: bool = False):
    """A job's output folder, written in a temporary sibling and moved into place whole.

    The job holds the folder's lock throughout (:func:`~distrain.preprocess.outputs.one_writer`:
    a second job for it fails naming this one), and first removes what dead jobs left
    beside it (:func:`~distrain.preprocess.outputs.remove_stale`). It writes into the
    folder this yields (``.NAME.tmp-XXXX`` beside ``output_dir``).
    When the block ends without an error it replaces ``output_dir``: a reader sees the
    old output or the new one, never a mix, and never a partial one. When the block
    fails, the temporary folder becomes ``NAME.failed`` (its dead letters can be read
    there) and ``output_dir`` is left as it was.

    Args:
        output_dir: The output folder; it may be missing or empty.
        overwrite: Replace an output folder that holds files (``--overwrite``).

    Yields:
        The temporary folder to write into.

    Raises:
        OutputExistsError: ``output_dir`` holds files and ``overwrite`` is off.
        OutputBusyError: Another job is writing ``output_dir``.
    """
    with one_writer(output_dir) as before:
        remove_stale(output_dir, before)
        with _staged(Path(output_dir), overwrite) as stage:
            yield stage


@contextlib.contextmanager
def _staged(out: Path, overwrite: bool):
    """:func:`staged_output` once its lock is held."""
    import shutil
    import uuid

    if out.exists() and not out.is_dir():
        raise OutputExistsError(f"{out}: exists and is not a folder")
    held = sorted(p.name for p in out.iterdir()) if out.is_dir() else []
    if held and not overwrite:
        shown = ", ".join(held[:5]) + (", ..." if len(held) > 5 else "")
        raise OutputExistsError(
            f"{out}: not empty (holds {shown}); an output folder is never mixed with an "
            "earlier one: give --overwrite to replace it whole, or choose an empty folder"
        )
    out.parent.mkdir(parents=True, exist_ok=True)
    stage = out.with_name(f".{out.name}.tmp-{uuid.uuid4().hex[:12]}")
    stage.mkdir()
    try:
        yield stage
    except BaseException:
        failed = failed_dir(out)
        shutil.rmtree(failed, ignore_errors=True)
        if any(stage.iterdir()):
            os.replace(stage, failed)
        else:
            stage.rmdir()
        raise
    old = None
    if out.exists():
        old = out.with_name(f".{out.name}.old-{uuid.uuid4().hex[:12]}")
        os.replace(out, old)
    os.replace(stage, out)
    shutil.rmtree(failed_dir(out), ignore_errors=True)
    if old is not None:
        shutil.rmtree(old, ignore_errors=True)


def read_manifest(stage: str | os.PathLike) -> list[dict]:
    """The files a job wrote (:class:`AllWritten`'s list), relative to ``stage``; removes it.

    Raises:
        RecordAccountingError: Two outputs of the job were written to the same file (the
            later one replaced the earlier), or a file is outside the output folder.
    """
    stage = Path(stage)
    path = stage / f"{MANIFEST}.jsonl"
    items = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    path.unlink()
    seen: dict[str, dict] = {}
    for item in items:
        relative = os.path.relpath(item["file"], stage)
        if relative.startswith(".."):
            raise RecordAccountingError(f"{item['file']}: written outside {stage}")
        if relative in seen:
            raise RecordAccountingError(
                f"{relative}: two outputs of the job were written to this one file (the "
                "later replaced the earlier); file names must not collide"
            )
        seen[relative] = {**item, "file": relative}
    return [seen[k] for k in sorted(seen)]


def read_outputs(stage: str | os.PathLike) -> tuple[list[dict], dict]:
    """The files :class:`WriteOutputs` listed and the job's counts; both leave ``stage``."""
    files = read_manifest(stage)
    stats = read_single_json(os.path.join(stage, "stats.json"))
    Path(stage, "stats.json").unlink()
    return files, stats


def list_shards(files: list[dict], folder: str, counts: dict[str, int]) -> dict[str, list[dict]]:
    """The TFRecord files of each split under ``folder`` (``""``: the top), checked.

    Args:
        files: What the job wrote (:func:`read_manifest`).
        folder: The folder holding one sub-folder per split.
        counts: Records per split, as the job's statistics counted them.

    Returns:
        ``{split: [{"file", "records", "bytes"}, ...]}``, files in name order.

    Raises:
        RecordAccountingError: A split's files hold another number of records than its
            count says.
    """
    out = {}
    for split, count in counts.items():
        where = os.path.join(folder, split) if folder else split
        listed = [
            {k: f[k] for k in ("file", "records", "bytes")}
            for f in files
            if os.path.dirname(f["file"]) == where and f["file"].endswith(".tfrecord")
        ]
        written = sum(f["records"] for f in listed)
        if written != count:
            raise RecordAccountingError(
                f"{where}: the files written hold {written} records, the job counted {count}"
            )
        out[split] = listed
    return out


def write_metadata(output_dir: str | os.PathLike, metadata: dict) -> Path:
    """Writes ``metadata.json`` atomically, marked complete: the last file a job writes.

    Call it only after every check of the job has passed: a data set without it is not
    one (training refuses the folder).
    """
    metadata["complete"] = True
    path = Path(output_dir) / METADATA
    tmp = path.with_name(f"{METADATA}.tmp")
    tmp.write_text(json.dumps(metadata, indent=2, sort_keys=True))
    os.replace(tmp, path)
    return path


def read_single_json(pattern: str) -> dict:
    """Reads the one JSON document a single-shard Beam text sink wrote."""
    files = sorted(glob.glob(pattern))
    if len(files) != 1:
        raise RuntimeError(f"expected one file for {pattern}, found {files}")
    text = Path(files[0]).read_text().strip()
    return json.loads(text) if text else {}


def read_tfrecords(pattern: str) -> list[bytes]:
    """Every record of the TFRecord files matching ``pattern``, in file order."""
    import tensorflow as tf

    files = sorted(glob.glob(pattern))
    return [r.numpy() for r in tf.data.TFRecordDataset(files)] if files else []
