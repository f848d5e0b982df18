"""Books in Project Gutenberg's plain-text layout, for character-level language models.

Each book has the usual header (title, author, release date, language), the
``*** START OF THE PROJECT GUTENBERG EBOOK <TITLE> ***`` marker, a body with CRLF line
ends wrapped near 70 columns, the ``*** END OF ... ***`` marker and the licence. The body is
English-like prose: chapters, paragraphs, dialogue, and a topic per paragraph whose words
recur through it, so that context longer than a few characters helps predict the text (as
in real books). The same seed gives the same bytes.
"""

from __future__ import annotations

import os
import textwrap
from dataclasses import dataclass
from pathlib import Path

import numpy as np

_FUNCTION = (
    "the the the of of and and to a a in that it was he she his her with as for had you "
    "not but on at by all they this which from were be one there would their so if when "
    "into no more then some could them been out up what said now very upon"
).split()
_TOPICS = [
    "sea ship wave sail harbour captain storm deck anchor tide shore crew wind mast voyage",
    "garden rose flower tree leaf grass summer bloom orchard hedge blossom branch sunlight",
    "war soldier army battle sword enemy camp general march victory wound cannon banner",
    "house room door window fire chair table candle supper hall stair kitchen lamp hearth",
    "money debt banker fortune shilling pound merchant trade ledger interest bargain purse",
    "church bell prayer parson sermon altar grave chapel hymn bishop faith candle vestry",
    "horse road carriage inn journey coach rider bridle mile stable gallop traveller dust",
    "love heart letter marriage ring kiss lover promise wedding tears sigh suitor bride",
]
_NAMES = "Elinor Marianne Edmund Tom Bertha Jasper Lucy Harriet Walter Agnes Silas Martha".split()
_TITLES = ["The Lost Harbour", "A Garden in Winter", "The Long March", "Letters from Home"]
_AUTHORS = ["Mary Ashdown", "Thomas Wrenfield", "Eliza Carrow", "John Pellham"]

LICENSE = """\
*** END OF THE PROJECT GUTENBERG EBOOK {TITLE} ***

Updated editions will replace the previous one--the old editions will
be renamed.

START: FULL LICENSE

THE FULL PROJECT GUTENBERG LICENSE
PLEASE READ THIS BEFORE YOU DISTRIBUTE OR USE THIS WORK

To protect the Project Gutenberg-tm mission of promoting the free
distribution of electronic works, by using or distributing this work
(or any other work associated in any way with the phrase "Project
Gutenberg"), you agree to comply with all the terms of the Full
Project Gutenberg-tm License available with this file or online at
www.gutenberg.org/license.
"""


@dataclass(frozen=True)
class GutenbergSampleConfig:
    """Size of a generated Gutenberg sample.

    Attributes:
        books: Number of books.
        chars_per_book: Approximate length of each body, in characters.
        seed: Seed of the whole sample.
    """

    books: int = 3
    chars_per_book: int = 120_000
    seed: int = 0

    def __post_init__(self) -> None:
        if self.books < 1 or self.chars_per_book < 1000:
            raise ValueError("need at least one book of at least 1000 characters")


def _sentence(rng: np.random.Generator, topic: list[str], names: list[str]) -> str:
    words = []
    for _ in range(int(rng.integers(6, 16))):
        r = rng.random()
        if r < 0.3:
            words.append(str(rng.choice(topic)))
        elif r < 0.36:
            words.append(str(rng.choice(names)))
        else:
            words.append(str(rng.choice(_FUNCTION)))
        if rng.random() < 0.07:
            words[-1] += ","
    words[-1] = words[-1].rstrip(",")
    text = " ".join(words)
    text = text[0].upper() + text[1:]
    if rng.random() < 0.15:
        return f'"{text}," said {rng.choice(names)}.'
    return text + str(rng.choice([".", ".", ".", "!", "?", ";"]))


def generate_body(chars: int, rng: np.random.Generator) -> str:
    """Chapters of paragraphs, each on one topic, wrapped and joined with CRLF."""
    lines: list[str] = []
    total, chapter = 0, 0
    names = list(rng.choice(_NAMES, size=4, replace=False))
    while total < chars:
        chapter += 1
        lines += [f"CHAPTER {_roman(chapter)}.", ""]
        for _ in range(int(rng.integers(6, 12))):
            topic = _TOPICS[int(rng.integers(len(_TOPICS)))].split()
            paragraph = " ".join(_sentence(rng, topic, names) for _ in range(rng.integers(3, 7)))
            wrapped = textwrap.wrap(paragraph, width=70)
            lines += [*wrapped, ""]
            total += len(paragraph) + len(wrapped) * 2
            if total >= chars:
                break
        lines.append("")
    return "\r\n".join(lines)


def _roman(n: int) -> str:
    out = ""
    for value, numeral in ((10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")):
        while n >= value:
            out += numeral
            n -= value
    return out


def book_text(title: str, author: str, body: str, ebook_id: int) -> str:
    """A whole book file: header, START marker, body, END marker and licence (CRLF)."""
    upper = title.upper()
    header = (
        f"The Project Gutenberg eBook of {title}\n\n"
        "This ebook is for the use of anyone anywhere in the United States and\n"
        "most other parts of the world at no cost and with almost no restrictions\n"
        "whatsoever.\n\n"
        f"Title: {title}\n\nAuthor: {author}\n\n"
        f"Release date: January 1, 2001 [eBook #{ebook_id}]\n\nLanguage: English\n\n"
        f"*** START OF THE PROJECT GUTENBERG EBOOK {upper} ***\n\n\n"
    )
    tail = "\n\n\n" + LICENSE.replace("{TITLE}", upper)
    crlf = header.replace("\n", "\r\n") + body + tail.replace("\n", "\r\n")
    return crlf


def write_gutenberg_sample(
    output_dir: str | os.PathLike, config: GutenbergSampleConfig | None = None
) -> dict:
    """Writes ``pg<id>.txt`` books.

    Returns:
        ``{"files": [...], "characters": n}``.
    """
    cfg = config or GutenbergSampleConfig()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(cfg.seed)
    files, chars = [], 0
    for i in range(cfg.books):
        title = _TITLES[i % len(_TITLES)] + (f" {_roman(i // len(_TITLES) + 1)}" if i >= 4 else "")
        body = generate_body(cfg.chars_per_book, rng)
        ebook_id = 90001 + i
        path = out / f"pg{ebook_id}.txt"
        path.write_bytes(book_text(title, _AUTHORS[i % len(_AUTHORS)], body, ebook_id).encode())
        files.append(str(path))
        chars += len(body)
    return {"files": files, "characters": chars}
