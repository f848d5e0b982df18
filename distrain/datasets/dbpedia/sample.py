"""A sample in the exact ``dbpedia_csv`` layout of DBPedia-14.

``classes.txt`` holds the 14 class names in order; ``train.csv`` and ``test.csv`` hold rows
``class_index,"title","abstract"`` (class_index 1-14, RFC 4180 quoting: fields with commas,
double quotes and line breaks inside). The abstracts are English-like: shared function
words and generic vocabulary, each class's own topic words, words of related classes (an
album's abstract mentions artists, a village's mentions rivers) and a little label noise,
so that a good model does well but not perfectly. The same seed gives the same bytes.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

CLASSES = [
    "Company",
    "EducationalInstitution",
    "Artist",
    "Athlete",
    "OfficeHolder",
    "MeanOfTransportation",
    "Building",
    "NaturalPlace",
    "Village",
    "Animal",
    "Plant",
    "Album",
    "Film",
    "WrittenWork",
]

_TOPIC = {
    "Company": "company founded headquartered products services subsidiary corporation "
    "industry revenue employees manufacturer brand retail software acquired shares market",
    "EducationalInstitution": "school university college students campus founded education "
    "faculty academic degree research private public enrollment secondary programs",
    "Artist": "singer musician songwriter band guitarist recorded albums performer painter "
    "composer career vocalist released tour musical",
    "Athlete": "footballer player played team league season professional club midfielder "
    "olympic championship scored goals coach defender",
    "OfficeHolder": "politician served member elected party minister parliament senator "
    "governor democratic council legislature appointed assembly representative",
    "MeanOfTransportation": "ship aircraft locomotive vessel navy launched built engine "
    "class railway cruiser fleet car designed tons",
    "Building": "building church house tower historic built listed architecture hotel "
    "located storey constructed register museum street",
    "NaturalPlace": "river mountain lake tributary peak range valley flows creek elevation "
    "island glacier basin watershed summit",
    "Village": "village population census district municipality commune county gmina "
    "administrative rural inhabitants voivodeship township lies",
    "Animal": "species genus family moth snail beetle described endemic marine bird "
    "spider habitat larvae wingspan gastropod",
    "Plant": "plant species flowering genus shrub native leaves grows herb tree orchid "
    "endemic perennial flowers cultivated",
    "Album": "album released studio songs tracks records label recorded chart debut "
    "single billboard producer ep compilation",
    "Film": "film directed starring drama comedy released movie produced screenplay cast "
    "premiered documentary thriller actor box",
    "WrittenWork": "novel book published author written series magazine edition fiction "
    "story journal newspaper poems volume publisher",
}
# Pairs of classes whose abstracts borrow each other's words (the confusable ones).
_RELATED = {
    "Album": "Artist",
    "Artist": "Album",
    "Film": "WrittenWork",
    "WrittenWork": "Film",
    "Village": "NaturalPlace",
    "NaturalPlace": "Village",
    "Building": "EducationalInstitution",
    "EducationalInstitution": "Building",
    "Animal": "Plant",
    "Plant": "Animal",
    "Athlete": "OfficeHolder",
    "OfficeHolder": "Athlete",
    "Company": "MeanOfTransportation",
    "MeanOfTransportation": "Company",
}
_SHARED = (
    "the of and in a is was to by for on as with at from an it its which his her their "
    "first also known new one two three has been who that this other national state city "
    "american british year years world local based early later part north south east west "
    "area several time name named during after since under between former current main"
).split()
_SYLLABLES = "ka lo mi ne ra tu vo shi an el or is um ber ton ville dor gan mar lin sa".split()


@dataclass(frozen=True)
class DbpediaSampleConfig:
    """Size and look of a generated DBPedia sample.

    Attributes:
        train_per_class: Training rows per class.
        test_per_class: Test rows per class.
        seed: Seed of the whole sample.
        topic_share: Share of an abstract's words drawn from its class's topic words.
        related_share: Share drawn from the related class's topic words.
        label_noise: Share of rows whose words come from another class entirely.
    """

    train_per_class: int = 300
    test_per_class: int = 60
    seed: int = 0
    topic_share: float = 0.2
    related_share: float = 0.05
    label_noise: float = 0.02

    def __post_init__(self) -> None:
        if self.train_per_class < 1 or self.test_per_class < 1:
            raise ValueError("rows per class must be positive")
        if not 0 <= self.topic_share + self.related_share <= 1:
            raise ValueError("topic_share + related_share must be within [0, 1]")
        if not 0 <= self.label_noise < 1:
            raise ValueError("label_noise must be within [0, 1)")


def _name(rng: np.random.Generator) -> str:
    parts = rng.choice(_SYLLABLES, size=rng.integers(2, 4))
    return "".join(parts).capitalize()


def _abstract(cls: str, rng: np.random.Generator, cfg: DbpediaSampleConfig) -> tuple[str, str]:
    title = " ".join(_name(rng) for _ in range(rng.integers(1, 4)))
    topic = _TOPIC[cls].split()
    related = _TOPIC[_RELATED[cls]].split()
    n = int(rng.integers(18, 60))
    draw = rng.random(n)
    words = [
        str(rng.choice(topic))
        if d < cfg.topic_share
        else str(rng.choice(related))
        if d < cfg.topic_share + cfg.related_share
        else str(rng.choice(_SHARED))
        if d < 0.93
        else _name(rng)
        for d in draw
    ]
    # Sentences, with the punctuation that makes CSV quoting matter.
    text, start = [], False
    for i, w in enumerate(words):
        text.append(w.capitalize() if start else w)
        start = False
        if i % 11 == 10:
            text[-1] += "."
            start = True
        elif rng.random() < 0.06:
            text[-1] += ","
    abstract = f"{title} is a " + " ".join(text).rstrip(",") + "."
    if rng.random() < 0.05:
        abstract += f' It is also called "{_name(rng)}".'
    if rng.random() < 0.02:
        abstract += "\nSee also: " + _name(rng) + "."
    return title, abstract


def generate_rows(per_class: int, seed: int, cfg: DbpediaSampleConfig) -> list[tuple]:
    """``(class_index 1-14, title, abstract)`` rows, ``per_class`` of each, shuffled."""
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.repeat(np.arange(len(CLASSES)), per_class))
    rows = []
    for label in labels:
        source = CLASSES[label]
        if rng.random() < cfg.label_noise:
            source = CLASSES[int(rng.integers(len(CLASSES)))]
        title, abstract = _abstract(source, rng, cfg)
        rows.append((int(label) + 1, title, abstract))
    return rows


def rows_to_csv(rows: list[tuple]) -> str:
    """Rows in dbpedia_csv's quoting: class index bare, title and abstract quoted."""
    buffer = io.StringIO()
    writer = csv.writer(buffer, quoting=csv.QUOTE_NONNUMERIC, lineterminator="\n")
    writer.writerows(rows)
    return buffer.getvalue()


def write_dbpedia_sample(
    output_dir: str | os.PathLike, config: DbpediaSampleConfig | None = None
) -> dict:
    """Writes ``classes.txt``, ``train.csv`` and ``test.csv``.

    Returns:
        ``{"files": [...], "counts": {"train": n, "test": n}}``.
    """
    cfg = config or DbpediaSampleConfig()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_seed, test_seed = (
        int(s.generate_state(1)[0]) for s in np.random.SeedSequence(cfg.seed).spawn(2)
    )
    (out / "classes.txt").write_text("\n".join(CLASSES) + "\n")
    train = generate_rows(cfg.train_per_class, train_seed, cfg)
    test = generate_rows(cfg.test_per_class, test_seed, cfg)
    (out / "train.csv").write_text(rows_to_csv(train), encoding="utf-8")
    (out / "test.csv").write_text(rows_to_csv(test), encoding="utf-8")
    return {
        "files": [str(out / n) for n in ("classes.txt", "train.csv", "test.csv")],
        "counts": {"train": len(train), "test": len(test)},
    }
