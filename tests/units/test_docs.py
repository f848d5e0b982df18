"""The README is an index: small, every link resolving, its key results rendered, no dates."""

import json
import re
from pathlib import Path

import pytest

from benchmarks.render import BEGIN, END, update_readme
from tests.conftest import ROOT

README = ROOT / "README.md"
PAGES = [README, *sorted((ROOT / "docs").glob("*.md"))]

LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)(?:\s+\"[^\"]*\")?\)")


def _prose(text: str) -> str:
    """The Markdown without its fenced code blocks and inline code spans."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def broken_links(page: Path) -> list[str]:
    """The relative links of a Markdown page whose target does not exist."""
    broken = []
    for target in LINK.findall(_prose(page.read_text())):
        if re.match(r"[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL (https:, mailto:) or an anchor in the page itself
        if not (page.parent / target.split("#", 1)[0]).exists():
            broken.append(target)
    return broken


def test_readme_is_an_index_of_at_most_25_kb():
    size = README.stat().st_size
    assert size <= 25_000, f"README.md is {size:,} bytes: move detail into docs/"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_resolves(page):
    assert broken_links(page) == [], f"{page.relative_to(ROOT)}: links to nothing"


def test_a_broken_link_is_found(tmp_path):
    (tmp_path / "there.md").write_text("x")
    page = tmp_path / "page.md"
    page.write_text(
        "[ok](there.md#part) [web](https://example.com) [anchor](#top) ![img](gone.png)\n"
        "`[code](not-a-link.md)`\n```\n[block](nor-this.md)\n```\n[bad](missing/file.py)\n"
    )
    assert broken_links(page) == ["gone.png", "missing/file.py"]


def test_key_results_are_the_committed_results_rendered():
    # The block between the markers is written by `python -m benchmarks.render --readme`;
    # a new results.json without it (or a hand edit) leaves it stale.
    results = json.loads((ROOT / "benchmarks" / "results.json").read_text())
    text = README.read_text()
    assert BEGIN in text and END in text
    assert update_readme(text, results) == text, "run: python -m benchmarks.render --readme"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_dated_measurements_in_prose(page):
    # Dated numbers belong in BENCHMARKS.md (and the README's block generated from it).
    text = page.read_text()
    if page == README:
        text = text[: text.find(BEGIN)] + text[text.find(END) :]
    dates = re.findall(r"\b20\d\d-\d\d-\d\d\b", _prose(text))
    assert dates == [], f"{page.relative_to(ROOT)}: dated measurements {dates}"
