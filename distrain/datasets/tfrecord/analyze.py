"""What a model needs from the user's records, computed over the training split in Beam.

For each numeric feature its element-wise count, mean, variance, min and max
(:class:`~distrain.preprocess.analyzers.MomentsFn`), for each ``bytes`` feature a
vocabulary of its most frequent tokens (:class:`~distrain.preprocess.analyzers.TopTokens`),
split by the feature's ``tokenizer`` in features.json (:mod:`distrain.preprocess.tokens`).
Only the ``train`` split is analysed, as TFX Transform's analyzers are: validation and
test records never shape what the model is given. A token longer than ``max_token_bytes``
or not UTF-8 is left out of the vocabulary and counted (``skipped``), so that the
metadata stays bounded: at most ``vocabulary_size`` tokens of at most
``max_token_bytes`` bytes each, per feature.
"""

from __future__ import annotations

from collections import Counter

import apache_beam as beam
import numpy as np

from distrain.datasets.tfrecord.spec import KINDS, FeatureSpec, _example_class
from distrain.preprocess.analyzers import MomentsFn, TopTokens
from distrain.preprocess.tokens import DEFAULT_TOKENIZER, tokens
from distrain.preprocess.transforms import ByTag, CombineAll, SumStatsFn


class _FeatureValuesFn(beam.DoFn):
    """A batch of checked training records to its analyzers' inputs, as ``(tag, value)``.

    ``moments``: ``(feature, [n, size] array)``; ``tokens``: ``((feature, token),
    count)`` per distinct token of the batch; ``skipped``: one dict of counts of the
    token occurrences left out, per feature and reason.
    """

    def __init__(self, spec: dict, max_token_bytes: int):
        self.spec, self.max_token_bytes = spec, max_token_bytes

    def setup(self):
        self._spec = FeatureSpec.from_dict(self.spec, "features.json")
        self._example = _example_class()

    def process(self, batch):
        _, records = batch
        features = self._spec.features
        numeric = {n: [] for n, f in features.items() if f.dtype != "bytes"}
        counts = {n: Counter() for n, f in features.items() if f.dtype == "bytes"}
        for record in records:
            example = self._example()
            example.ParseFromString(record)
            found = example.features.feature
            for name, rows in numeric.items():
                rows.append(list(getattr(found[name], KINDS[features[name].dtype]).value))
            for name, counter in counts.items():
                tokenizer = features[name].tokenizer or DEFAULT_TOKENIZER
                for value in found[name].bytes_list.value:
                    counter.update(tokens(value, tokenizer))
        for name, rows in numeric.items():
            if rows:
                dtype = np.int64 if features[name].dtype == "int64" else np.float64
                yield "moments", (name, np.array(rows, dtype=dtype).reshape(len(rows), -1))
        skipped: dict = {}
        for name, counter in counts.items():
            for token, n in counter.items():
                text, reason = _text(token, self.max_token_bytes)
                if reason:
                    by_feature = skipped.setdefault(name, {})
                    by_feature[reason] = by_feature.get(reason, 0) + n
                else:
                    yield "tokens", ((name, text), n)
        yield "skipped", skipped


def _text(token: bytes, max_token_bytes: int) -> tuple[str, str]:
    """``(token as text, "")``, or ``("", reason)`` for one left out of the vocabulary."""
    if len(token) > max_token_bytes:
        return "", "too_long"
    try:
        return token.decode("utf-8"), ""
    except UnicodeDecodeError:
        return "", "not_utf8"


class AnalyzeTrain(beam.PTransform):
    """Batches of training records ``(key, [record, ...])`` to one dict of what was found.

    Output: one element, ``{"statistics": {feature: {"count", "mean", "variance", "min",
    "max"}}, "vocabularies": {feature: {"tokenizer", "tokens", "counts", "distinct",
    "skipped"}}}``, every declared feature present (a numeric one without records:
    ``{"count": 0}``).
    """

    def __init__(self, spec: FeatureSpec, vocabulary_size: int, max_token_bytes: int):
        super().__init__()
        self.spec, self.k, self.max_token_bytes = spec.to_dict(), vocabulary_size, max_token_bytes

    def expand(self, batches):
        parts = (
            batches
            | "Values" >> beam.ParDo(_FeatureValuesFn(self.spec, self.max_token_bytes))
            | "ByKind" >> ByTag("moments", "tokens", "skipped")
        )
        moments = (
            parts["moments"]
            | "Moments" >> beam.CombinePerKey(MomentsFn())
            | "TagMoments" >> beam.Map(lambda kv: {"statistics": {kv[0]: kv[1]}})
        )
        vocabularies = (
            parts["tokens"]
            | "Vocabulary" >> TopTokens(self.k)
            | "TagVocabulary" >> beam.Map(lambda kv: {"vocabularies": {kv[0]: kv[1]}})
        )
        skipped = (
            parts["skipped"]
            | "SumSkipped" >> CombineAll(SumStatsFn())
            | "TagSkipped" >> beam.Map(lambda counts: {"skipped": counts})
        )
        return (
            (moments, vocabularies, skipped)
            | "Together" >> beam.Flatten()
            | "Gather" >> CombineAll(_GatherFn())
            | "Assemble" >> beam.Map(assemble, self.spec)
        )


class _GatherFn(beam.CombineFn):
    """Dicts of disjoint keys (one feature's result each) into one."""

    def create_accumulator(self) -> dict:
        return {}

    def add_input(self, acc: dict, part: dict) -> dict:
        for kind, by_feature in part.items():
            acc.setdefault(kind, {}).update(by_feature)
        return acc

    def merge_accumulators(self, accumulators) -> dict:
        out: dict = {}
        for acc in accumulators:
            out = self.add_input(out, acc)
        return out

    def extract_output(self, acc: dict) -> dict:
        return acc


def assemble(found: dict, spec: dict) -> dict:
    """What the analyzers found, for every feature the spec declares."""
    declared = FeatureSpec.from_dict(spec, "features.json")
    stats, vocabularies, skipped = (
        found.get(k, {}) for k in ("statistics", "vocabularies", "skipped")
    )
    out: dict = {"statistics": {}, "vocabularies": {}}
    for name, feature in declared.features.items():
        if feature.dtype != "bytes":
            out["statistics"][name] = stats.get(name, {"count": 0})
            continue
        vocabulary = vocabularies.get(name, {"tokens": [], "counts": [], "distinct": 0})
        out["vocabularies"][name] = {
            **vocabulary,
            "tokenizer": feature.tokenizer or DEFAULT_TOKENIZER,
            "skipped": {"too_long": 0, "not_utf8": 0, **skipped.get(name, {})},
        }
    return out
