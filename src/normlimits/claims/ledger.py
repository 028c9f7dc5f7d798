"""The claims ledger: one row per graded claim, with its rule, the values and the verdict.

Chapters write rows through :func:`normlimits.claims.record`, which grades the values by the
claim's registered rule; each chapter's rows go to ``<ledger dir>/<chapter>.json`` (default
``_build/ledger`` under the book's root, or ``NORMLIMITS_LEDGER_DIR``). The book's Sphinx
extension (:mod:`normlimits.book.sphinx_ledger`) reads the same folder, builds the Verdicts page and
writes the merged ``_build/ledger.json`` (:func:`ledger_document`: ``schema_version``, ``tool`` and
``rows``, validated against the ``ledger`` schema of :mod:`normlimits.claims.schema`, and checked by
:func:`inconsistent`: two rows of one claim on one model must agree unless one is a labelled
chosen-reading variant or a labelled sensitivity row).

A row is valid only if its verdict is what its own recorded criteria, values and outcomes give
(:func:`normlimits.claims.regrade`): no row can carry a verdict its rule does not produce.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from normlimits.core.cache import atomic_write_json
from normlimits.core.paths import book_root
from normlimits.claims.rules import regrade, row_possible_verdicts, Rule, VERDICTS
from normlimits.claims.schema import read_document, SCHEMA_VERSION, validate
from normlimits.core.settings import cache_dir, SettingError

LEDGER_ENV = "NORMLIMITS_LEDGER_DIR"
#: the ``tool`` of ``_build/ledger.json``
LEDGER_TOOL = "normlimits ledger"
FIELDS = ("id", "chapter", "section", "claim", "paper", "measured", "verdict", "model", "rule",
          "criteria", "outcomes", "headline", "statistic")


def ledger_dir(start: Path | None = None) -> Path:
    """Where chapters write their rows and the Verdicts page reads them: ``NORMLIMITS_LEDGER_DIR``
    if set, else ``_build/ledger`` under the book root found from ``start`` (default: cwd), else
    the cache folder's ``ledger``."""
    if os.environ.get(LEDGER_ENV):
        return Path(os.environ[LEDGER_ENV])
    root = book_root(start)
    if root is None:
        return cache_dir() / "ledger"
    return root / "_build" / "ledger"


def writable_ledger_dir(start: Path | None = None) -> Path:
    """:func:`ledger_dir`, created if missing and checked writable; a folder that is a file, is
    read-only or cannot be created raises :class:`~normlimits.core.settings.SettingError` naming
    ``NORMLIMITS_LEDGER_DIR`` (or the default folder) and the remedy. Chapters call it when they
    start, so the error comes before the computing, not at the end."""
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
    _check_readings(row)
    _check_selection(row)
    return row


def _check_readings(row: dict) -> None:
    """Each entry of a row's ``readings`` must carry the verdict the row's own rule gives its
    values (and their intervals, where it records them), and a row without ``selection`` must
    rest on the entry marked primary (if any)."""
    found = row.get("readings") or []
    rule = Rule.from_row(row) if found else None
    for entry in found:
        again = rule.grade(entry["values"], entry.get("intervals"))
        if again != entry["verdict"]:
            raise ValueError(f"ledger row {row['id']!r}: under reading {entry['reading']!r} the "
                             f"verdict {entry['verdict']!r} does not follow from its values, which "
                             f"give {again!r}; build the entries with reading_table.reading_grades")
    primary = [e["reading"] for e in found if e.get("primary")]
    if len(primary) > 1:
        raise ValueError(f"ledger row {row['id']!r}: {len(primary)} readings are marked primary; "
                         "mark only the book's primary reading")
    if primary and not row.get("selection") and row.get("reading") != primary[0]:
        raise ValueError(f"ledger row {row['id']!r}{_variant_words(row)} is graded on "
                         f"{row.get('reading')!r}, not on the primary reading {primary[0]!r}: a "
                         "claim's own row is graded on the book's primary reading; record a reading "
                         "chosen among several as a variant with a selection (reading_table.gradings)")


def _check_selection(row: dict) -> None:
    """A row graded on a chosen reading (``selection``) is a labelled variant resting on the first
    reproducing reading, which its ``readings`` (if any) list."""
    sel = row.get("selection")
    if not sel:
        return
    if not str(row.get("variant", "")).strip():
        raise ValueError(f"ledger row {row['id']!r} rests on a reading chosen among {sel['tried']} "
                         "but names no variant: label it (e.g. variant='chosen reading') so it "
                         "cannot be read as the claim's own verdict")
    if not sel["reproducing"] or row.get("reading") != sel["reproducing"][0]:
        raise ValueError(f"ledger row {row['id']!r} ({row.get('variant')}): its reading "
                         f"{row.get('reading')!r} is not the first reproducing reading of its "
                         f"selection {sel['reproducing']}")
    if not 1 <= len(sel["reproducing"]) <= sel["tried"]:
        raise ValueError(f"ledger row {row['id']!r} ({row.get('variant')}): {len(sel['reproducing'])} "
                         f"reproducing readings out of {sel['tried']} tried")
    listed = {e["reading"] for e in row.get("readings") or []}
    if listed and not set(sel["reproducing"]) <= listed:
        raise ValueError(f"ledger row {row['id']!r} ({row.get('variant')}): reproducing readings "
                         f"{sorted(set(sel['reproducing']) - listed)} are not among its readings")


def _variant_words(row: dict) -> str:
    return f" ({row['variant']})" if row.get("variant") else ""


def row_words(row: dict) -> str:
    """A row named for an error message: chapter, id, variant, model, verdict and reading."""
    reading = f" under {row['reading']!r}" if row.get("reading") else ""
    text = f" ({row['corpus']})" if row.get("corpus") else ""
    return (f"{row['chapter']}:{row['id']}{_variant_words(row) or ' (no variant)'} on "
            f"{row['model']!r}{text}: {row['verdict']}{reading}")


def inconsistent(rows: list[dict]) -> list[str]:
    """Every pair of rows of one claim on one model and text (same ``id``, ``model`` and
    ``corpus``: a replication on another text or other windows is a different measurement) whose
    verdicts disagree without a label saying why, as a sentence naming both rows and the remedy.

    Rows of one claim on one model, wherever recorded (its chapter, the architectures chapter's
    per-model rows, a replay), are the claim's verdict on that model and must agree, unless one is
    a labelled variant graded on a chosen reading (``selection`` and ``variant``, written by
    :func:`normlimits.experiments.reading_table.gradings`) or a sensitivity row (``sensitivity``
    and ``variant``: another protocol on the same model, e.g. the architectures chapter's survey),
    both shown apart from the claim's own verdict and never counted.
    A model's name in ``variant`` (the architectures chapter's label) does not say why two gradings
    of the same measurement differ, so it does not count as such a label. An inconclusive row
    disagrees only with a verdict its undecided criteria could not give (the chapter's 8 windows
    may leave EPS between confirmed and corrected where the survey's one window says corrected)."""
    found, seen = [], {}
    for row in rows:
        if row.get("selection") or row.get("sensitivity"):
            continue
        earlier = seen.setdefault((row["id"], row["model"], row.get("corpus")), [])
        for other in earlier:
            if (other["verdict"] != row["verdict"]
                    and not row_possible_verdicts(other) & row_possible_verdicts(row)):
                found.append(f"{row_words(other)} and {row_words(row)} disagree: grade both on "
                             "the book's primary reading (the same policy everywhere), or record "
                             "the other grading as a labelled variant with a selection "
                             "(normlimits.experiments.reading_table.gradings)")
        earlier.append(row)
    return found


def check_consistent(rows: list[dict]) -> list[dict]:
    """``rows`` if :func:`inconsistent` finds nothing, else ValueError listing every pair."""
    found = inconsistent(rows)
    if found:
        raise ValueError("the ledger grades a claim twice on one model with different verdicts: "
                         + "; ".join(found))
    return rows


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


def ledger_document(rows: list[dict]) -> dict:
    """The merged ledger as written to ``_build/ledger.json``: ``{"schema_version", "tool",
    "rows"}``, each row checked by :func:`validate_row` and the whole by the ``ledger`` schema."""
    doc = {"schema_version": SCHEMA_VERSION, "tool": LEDGER_TOOL,
           "rows": check_consistent([validate_row(r) for r in rows])}
    return validate(doc, "ledger", source="the merged ledger")


def read_ledger_json(path: Path) -> list[dict]:
    """The rows of a merged ledger file (``_build/ledger.json``), validated against its schema."""
    return read_document(Path(path), "ledger", remedy="Build the book again (make book) to "
                         "rewrite it.")["rows"]
