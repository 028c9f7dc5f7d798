"""A chapter that glues one key twice fails the strict build (myst-nb: "glue key ... duplicate"),
after the whole book has executed. This catches the literal keys in seconds: every key written
as a string in a chapter's ``glue_all({...})`` or ``glue("...")`` appears once in that chapter."""

from __future__ import annotations

import collections
import re
from pathlib import Path

import pytest

BOOK = Path(__file__).resolve().parents[2] / "book"
CHAPTERS = sorted(BOOK.glob("*.md"))


def literal_glue_keys(source: str) -> collections.Counter:
    keys: collections.Counter = collections.Counter()
    for call in re.finditer(r"glue_all\(\{(.*?)\}\)", source, re.S):
        keys.update(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)":', call.group(1)))
    keys.update(re.findall(r'\bglue\("([A-Za-z_][A-Za-z0-9_]*)"', source))
    return keys


def test_the_scan_finds_a_key_glued_twice():
    source = 'glue_all({"a": 1, "b": 2})\nx = 1\nglue_all({"b": 3})\nglue("c", 4)'
    assert [k for k, n in literal_glue_keys(source).items() if n > 1] == ["b"]


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_no_chapter_glues_a_literal_key_twice(chapter):
    twice = [k for k, n in literal_glue_keys(chapter.read_text()).items() if n > 1]
    assert not twice, f"{chapter.name} glues {twice} more than once; the strict build refuses it"
