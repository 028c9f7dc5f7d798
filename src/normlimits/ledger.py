"""The claims ledger: one row per graded claim, with its rule, the values and the verdict.

Chapters write rows through :func:`normlimits.claims.record`, which grades the values by the
claim's registered rule; each chapter's rows go to ``<ledger dir>/<chapter>.json`` (default
``_build/ledger`` under the book's root, or ``NORMLIMITS_LEDGER_DIR``). The book's Sphinx
extension (:mod:`normlimits.sphinx_ledger`) reads the same folder, builds the Verdicts page and
writes the merged ``_build/ledger.json`` (:func:`ledger_document`: ``schema_version``, ``tool`` and
``rows``, validated against the ``ledger`` schema of :mod:`normlimits.schema`).

A row is valid only if its verdict is what its own recorded criteria, values and outcomes give
(:func:`normlimits.claims.regrade`): no row can carry a verdict its rule does not produce.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from .cache import atomic_write_json
from .claims.rules import VERDICTS, regrade

LEDGER_ENV = "NORMLIMITS_LEDGER_DIR"
#: the ``tool`` of ``_build/ledger.json``
LEDGER_TOOL = "normlimits ledger"
FIELDS = ("id", "chapter", "section", "claim", "paper", "measured", "verdict", "model", "rule",
          "criteria", "outcomes", "headline", "statistic")


def book_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: cwd) holding the book's ``_config.yml``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_config.yml").is_file() and (folder / "_toc.yml").is_file():
            return folder
    return None


def ledger_dir(start: Path | None = None) -> Path:
    """Where chapters write their rows and the Verdicts page reads them: ``NORMLIMITS_LEDGER_DIR``
    if set, else ``_build/ledger`` under the book root found from ``start`` (default: cwd), else
    the cache folder's ``ledger``."""
    if os.environ.get(LEDGER_ENV):
        return Path(os.environ[LEDGER_ENV])
    root = book_root(start)
    if root is None:
        from .settings import cache_dir

        return cache_dir() / "ledger"
    return root / "_build" / "ledger"


def writable_ledger_dir(start: Path | None = None) -> Path:
    """:func:`ledger_dir`, created if missing and checked writable; a folder that is a file, is
    read-only or cannot be created raises :class:`~normlimits.settings.SettingError` naming
    ``NORMLIMITS_LEDGER_DIR`` (or the default folder) and the remedy. Chapters call it when they
    start, so the error comes before the computing, not at the end."""
    from .settings import SettingError

    folder = ledger_dir(start)
    raw = os.environ.get(LEDGER_ENV)
    named = f"{LEDGER_ENV}={raw!r}" if raw else f"the ledger folder {folder} ({LEDGER_ENV} unset)"
    remedy = (f"set {LEDGER_ENV} to a writable folder" + (", or unset it to use _build/ledger "
              "under the book" if raw else ""))
    if folder.exists() and not folder.is_dir():
        raise SettingError(f"{named} is a file, not a folder: the claims ledger cannot be written "
                           f"there; {remedy}.")
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingError(f"{named} cannot be created ({exc.strerror}): the claims ledger cannot "
                           f"be written there; {remedy}.") from None
    if not os.access(folder, os.W_OK | os.X_OK):
        raise SettingError(f"{named} is not writable: the claims ledger cannot be written there; "
                           f"{remedy}.")
    return folder


def row_key(row: dict) -> tuple[str, str]:
    """A row's identity within its chapter file: (claim id, variant or '')."""
    return row["id"], row.get("variant", "")


def validate_row(row: dict) -> dict:
    """Check a row's fields, its verdict, and that the verdict follows from its own rule."""
    missing = [f for f in FIELDS if f not in row or (isinstance(row[f], str) and not row[f].strip())]
    if missing:
        raise ValueError(f"ledger row {row.get('id')!r} lacks {missing}")
    if row["verdict"] not in VERDICTS:
        raise ValueError(f"ledger row {row['id']!r}: verdict {row['verdict']!r} is not one of {VERDICTS}")
    again = regrade(row)
    if again != row["verdict"]:
        raise ValueError(f"ledger row {row['id']!r}: verdict {row['verdict']!r} does not follow from "
                         f"its recorded rule and values, which give {again!r}")
    if row["verdict"] == "not testable" and not str(row.get("reason", "")).strip():
        raise ValueError(f"ledger row {row['id']!r} is not testable but gives no reason")
    return row


def write_row(row: dict) -> dict:
    """Record (or replace) ``row`` in its chapter's file, atomically; returns it."""
    validate_row(row)
    path = writable_ledger_dir() / f"{row['chapter']}.json"
    rows = [r for r in read_rows(path) if row_key(r) != row_key(row)]
    rows.append(row)
    atomic_write_json(path, rows)
    return row


def read_rows(path: Path) -> list[dict]:
    """The rows of one chapter file ([] when absent)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.is_file() else []


def collect(directory: Path, chapters: list[str]) -> list[dict]:
    """All rows of ``chapters`` (in that order; within a chapter in registry order, then variant)."""
    from .claims import REGISTRY

    order = {cid: i for i, cid in enumerate(REGISTRY)}
    rows: list[dict] = []
    for chapter in chapters:
        found = read_rows(Path(directory) / f"{chapter}.json")
        rows.extend(sorted(found, key=lambda r: (order.get(r["id"], len(order)), r.get("variant", ""))))
    return rows


def missing_claims(rows: list[dict], chapters: list[str]) -> list[str]:
    """Registered claim ids of ``chapters`` that have no row."""
    from .claims import expected_claims

    have = {(r["chapter"], r["id"]) for r in rows}
    return [f"{ch}:{cid}" for ch in chapters for cid in expected_claims(ch) if (ch, cid) not in have]


def ledger_document(rows: list[dict]) -> dict:
    """The merged ledger as written to ``_build/ledger.json``: ``{"schema_version", "tool",
    "rows"}``, each row checked by :func:`validate_row` and the whole by the ``ledger`` schema."""
    from .schema import SCHEMA_VERSION, validate

    doc = {"schema_version": SCHEMA_VERSION, "tool": LEDGER_TOOL,
           "rows": [validate_row(r) for r in rows]}
    return validate(doc, "ledger", source="the merged ledger")


def read_ledger_json(path: Path) -> list[dict]:
    """The rows of a merged ledger file (``_build/ledger.json``), validated against its schema."""
    from .schema import read_document

    return read_document(Path(path), "ledger", remedy="Build the book again (make book) to "
                         "rewrite it.")["rows"]
