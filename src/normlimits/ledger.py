"""The claims ledger: one row per claim of the paper, with what was measured and the verdict.

Chapters call :func:`record` as they execute; each chapter's rows go to
``<ledger dir>/<chapter>.json`` (default ``_build/ledger`` under the book's root, or
``NORMLIMITS_LEDGER_DIR``). The book's Sphinx extension (:mod:`normlimits.sphinx_ledger`) turns
them into the Verdicts table and writes the merged ``_build/ledger.json``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .cache import atomic_write_json

LEDGER_ENV = "NORMLIMITS_LEDGER_DIR"
VERDICTS = ("confirmed", "corrected", "refuted", "not testable")
FIELDS = ("id", "chapter", "claim", "paper", "measured", "verdict", "model")

#: The claim ids each chapter must record (the chapter issues fix them). The Verdicts page
#: warns, and so fails the strict build, when a chapter in the table of contents misses one.
EXPECTED_CLAIMS: dict[str, tuple[str, ...]] = {
    "vanishing": ("L1", "C1", "C1S", "NU"),
    "distances": ("T1a", "T1b", "C2i", "C2ii", "F2a", "F2b", "F2c"),
    "separability": ("T2", "F3", "S80", "MH"),
    "gradients": ("EX", "L2", "C3", "F4", "TR"),
    "alternatives": tuple(f"ALT-{key}-{yardstick}" for yardstick in ("vanishing", "gradient")
                          for key in ("sparsemax", "entmax15", "ssmax", "softmax1", "adaptive",
                                      "sa-softmax"))
    + ("ALT-collapse", "ALT-ssmax-separability", "ALT-sparsemax-separability"),
}


def book_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: cwd) holding the book's ``_config.yml``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_config.yml").is_file() and (folder / "_toc.yml").is_file():
            return folder
    return None


def ledger_dir() -> Path:
    """Where chapters write their rows."""
    if os.environ.get(LEDGER_ENV):
        return Path(os.environ[LEDGER_ENV])
    root = book_root()
    if root is None:
        from .settings import cache_dir

        return cache_dir() / "ledger"
    return root / "_build" / "ledger"


def validate_row(row: dict) -> dict:
    """Check a ledger row's fields and verdict; returns it."""
    missing = [f for f in FIELDS if not str(row.get(f, "")).strip()]
    if missing:
        raise ValueError(f"ledger row {row.get('id')!r} lacks {missing}")
    if row["verdict"] not in VERDICTS:
        raise ValueError(f"ledger row {row['id']!r}: verdict {row['verdict']!r} is not one of {VERDICTS}")
    return row


def record(id: str, chapter: str, claim: str, paper: str, measured: str, verdict: str,
           model: str, **extra) -> dict:
    """Record (or replace) the verdict on claim ``id`` of ``chapter``; returns the row."""
    row = validate_row({"id": id, "chapter": chapter, "claim": claim, "paper": paper,
                        "measured": measured, "verdict": verdict, "model": model, **extra})
    path = ledger_dir() / f"{chapter}.json"
    rows = [r for r in read_rows(path) if r["id"] != id]
    rows.append(row)
    atomic_write_json(path, rows)
    return row


def read_rows(path: Path) -> list[dict]:
    """The rows of one chapter file ([] when absent)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else []


def collect(directory: Path, chapters: list[str]) -> list[dict]:
    """All rows of ``chapters`` (in that order, rows in the expected-claims order where known)."""
    rows: list[dict] = []
    for chapter in chapters:
        found = read_rows(Path(directory) / f"{chapter}.json")
        order = {cid: i for i, cid in enumerate(EXPECTED_CLAIMS.get(chapter, ()))}
        rows.extend(sorted(found, key=lambda r: order.get(r["id"], len(order))))
    return rows


def missing_claims(rows: list[dict], chapters: list[str]) -> list[str]:
    """Expected claim ids of ``chapters`` that have no row."""
    have = {(r["chapter"], r["id"]) for r in rows}
    return [f"{ch}:{cid}" for ch in chapters for cid in EXPECTED_CLAIMS.get(ch, ())
            if (ch, cid) not in have]
