"""The contract every data set keeps, as one test class its own test subclasses.

As TensorFlow Datasets' ``DatasetBuilderTestCase``: a data set's test names the data set
and a small sample size; the shared tests write the generated sample, check its raw
files, run its Beam job (locally, on the FnApiRunner), read the records back with each
model's view and parser, and check that every split holds the records its metadata
counts. Collected by pytest through a ``Test...`` subclass; nothing here imports pytest.
"""

from __future__ import annotations

from pathlib import Path

from distrain import datasets
from distrain.learning.inputs import make_dataset
from distrain.learning.models import load_info

# The local Beam runner, named: in Beam 2.77 the DirectRunner first tries to download the
# Prism runner binary (distrain.preprocess.runners.job_pipeline).
BEAM_ARGS = ("--runner=FnApiRunner",)


class DataSetTestCase:
    """The shared tests; a subclass sets :attr:`DATASET` and :attr:`SAMPLE_SIZE`.

    Attributes:
        DATASET: The registered name of the data set under test.
        SAMPLE_SIZE: The generated sample's size, in the data set's unit (small: the
            whole contract runs in seconds).
        BATCH: Records per parsed batch.
    """

    DATASET = ""
    SAMPLE_SIZE = 0
    BATCH = 4

    @property
    def plugin(self) -> datasets.DataSet:
        """The data set under test, from the registry."""
        return datasets.get(self.DATASET)

    def test_declares_what_generic_code_asks_of_it(self):
        plugin = self.plugin
        assert plugin.name == self.DATASET and plugin.summary and plugin.title
        assert plugin.sample_size > 0 and plugin.sample_unit
        assert plugin.models and plugin.default_model in plugin.models
        for spec in plugin.models.values():
            assert callable(spec.build) and spec.task.quality and spec.summary
        defaults = plugin.pipeline
        assert defaults is not None and defaults.dataset == plugin.name
        assert defaults.model in plugin.models
        assert all(case.startswith(f"{plugin.name}/") for case, _ in plugin.fault_cases)

    def test_sample_preprocessed_and_parsed_as_its_metadata_counts(self, tmp_path: Path):
        plugin = self.plugin
        raw, out = tmp_path / "raw", tmp_path / "examples"
        raw.mkdir()
        plugin.write_sample(raw, self.SAMPLE_SIZE, seed=0)
        plugin.check_raw_files(raw)
        copied = tmp_path / "copied"
        copied.mkdir()
        plugin.copy_raw(raw, copied)
        assert sorted(p.name for p in copied.iterdir()) == sorted(
            p.name for p in plugin.raw_files(raw)
        )
        meta = plugin.preprocess(str(copied), str(out), 0.1, 0, list(BEAM_ARGS))
        assert meta["dataset"] == plugin.name
        assert "train" in meta["splits"] and "validation" in meta["splits"]
        assert all(count > 0 for count in meta["splits"].values()), meta["splits"]
        views = {}
        for model, spec in plugin.models.items():
            views.setdefault(spec.view, model)  # one model per view of the records
        for model in views.values():
            info = load_info(out, model)
            for split in info.splits:
                info.split_files(split)  # every file listed, of its size and record count
                seen = sum(
                    len(_first(targets))
                    for _, targets in make_dataset(info, split, self.BATCH * 64)
                )
                assert seen == info.splits[split], (model, split)
            features, targets = next(iter(make_dataset(info, "train", self.BATCH)))
            assert len(_first(features)) == len(_first(targets)) == self.BATCH


def _first(tensors):
    """The first tensor of a structure (a model with two inputs gets a tuple, or a dict)."""
    if isinstance(tensors, dict):
        return next(iter(tensors.values()))
    return tensors[0] if isinstance(tensors, tuple | list) else tensors


def read_back(out: str | Path, shards: dict[str, list[dict]]) -> dict[str, list[int]]:
    """Each split's files as a job's metadata lists them (``shards``), read by TensorFlow.

    Checks that every listed file holds the records and bytes listed (counted with
    ``tf.data.TFRecordDataset``), and that a split's folder holds no other TFRecord file.

    Returns:
        Each split's file sizes in bytes, in the listed order.
    """
    import tensorflow as tf

    sizes = {}
    for split, files in shards.items():
        paths = [Path(out, f["file"]) for f in files]
        for path, listed in zip(paths, files, strict=True):
            records = sum(1 for _ in tf.data.TFRecordDataset(str(path)))
            assert (records, path.stat().st_size) == (listed["records"], listed["bytes"]), path
        on_disk = {p for folder in {p.parent for p in paths} for p in folder.glob("*.tfrecord")}
        assert on_disk == set(paths), (split, sorted(on_disk - set(paths)))
        sizes[split] = [f["bytes"] for f in files]
    return sizes
