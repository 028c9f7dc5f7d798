"""The book's bibliography (book/references.bib): every entry carries a link a reader can follow
(issue 48, item 5): a DOI, an arXiv identifier (``eprint`` with ``archiveprefix = {arXiv}``,
which the bibliography style prints as an arxiv.org link), or a stable URL where the work has
neither (a technical report, a blog post, a Project Gutenberg e-book)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

BIB = Path(__file__).resolve().parents[2] / "book" / "references.bib"
DOI = re.compile(r"^10\.\d{4,9}/\S+$")
ARXIV = re.compile(r"^\d{4}\.\d{4,5}$|^[a-z-]+(\.[A-Z]{2})?/\d{7}$")


def entries() -> dict:
    from pybtex.database import parse_file

    return parse_file(str(BIB)).entries


def test_the_bibliography_has_entries():
    assert len(entries()) >= 20


@pytest.mark.parametrize("key", sorted(entries()))
def test_every_entry_has_a_doi_an_arxiv_identifier_or_a_url(key):
    fields = {name.lower(): str(value) for name, value in entries()[key].fields.items()}
    doi, url, eprint = fields.get("doi"), fields.get("url"), fields.get("eprint")
    arxiv = eprint if eprint and fields.get("archiveprefix", "").lower() == "arxiv" else None
    assert doi or url or arxiv, f"{key}: no doi, url or arXiv eprint"
    if doi:
        assert DOI.match(doi), f"{key}: {doi!r} is not a DOI (10.<registrant>/<suffix>, no resolver prefix)"
    if eprint:
        assert arxiv and ARXIV.match(eprint), f"{key}: eprint {eprint!r} is not an arXiv identifier"
    if url:
        assert url.startswith("https://") and " " not in url, f"{key}: {url!r} is not an https URL"
