"""The strict book build, and the claims ledger it writes."""

from __future__ import annotations

import json

import pytest

from normlimits import ledger

pytestmark = pytest.mark.book


def test_strict_build_writes_the_site(built_book):
    assert (built_book / "html" / "index.html").is_file()
    assert (built_book / "html" / "book" / "verdicts.html").is_file()


def test_ledger_json_has_one_valid_row_per_expected_claim(built_book):
    rows = json.loads((built_book / "ledger.json").read_text())
    assert rows, "the ledger is empty"
    for row in rows:
        ledger.validate_row(row)
    toc = (built_book.parent / "_toc.yml").read_text()
    chapters = sorted({line.split("book/")[-1].strip() for line in toc.splitlines() if "file: book/" in line})
    assert ledger.missing_claims(rows, chapters) == []
    ids = [(r["chapter"], r["id"]) for r in rows]
    assert len(ids) == len(set(ids)), "one row per claim"


def test_verdicts_page_lists_every_ledger_row(built_book):
    rows = json.loads((built_book / "ledger.json").read_text())
    page = (built_book / "html" / "book" / "verdicts.html").read_text()
    assert page.count('class="verdict-') == len(rows)
    for row in rows:
        assert f"<p>{row['id']}</p>" in page
