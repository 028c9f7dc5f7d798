"""The versioned JSON Schemas of the files this project writes for others to read.

Three documents share one row format (a graded claim, :mod:`normlimits.claims`):

- ``audit``: ``normlimits audit``'s ``audit.json``;
- ``ledger``: the book's ``_build/ledger.json`` (:mod:`normlimits.book.sphinx_ledger`);
- ``compare``: ``normlimits compare``'s ``compare.json``.

The schemas live in the package, one folder per version: ``schemas/<version>/row.schema.json``
and ``schemas/<version>/<document>.schema.json`` (JSON Schema draft 2020-12). Every document
carries ``schema_version`` (``"MAJOR.MINOR"``), and is validated against the schemas of *its own*
version, so a file written under an older version stays checkable after the format moves on.

What changes the version (the README says the same):

- **MINOR** (1.0 -> 1.1): a new *optional* field, or a new document. A reader of 1.0 that ignores
  fields it does not know reads a 1.1 file correctly.
- **MAJOR** (1.x -> 2.0): anything a reader of the old version could misread: a field removed,
  renamed, made required, or given another type, unit or meaning; a new value in a closed list
  (a new verdict, operator or yardstick).

Every object of the schemas is closed (``additionalProperties: false``), so a field added without
a new schema version is refused by the tests, never slipped in silently. For example, issue 31's
per-row ``interval`` ([low, high]), ``n`` and resampling ``unit`` are optional fields (1.1 on their
own), and its new verdict ``inconclusive`` is a new value in the verdict list: together, 2.0.
1.2 added two optional row fields (issue 31, one policy for readings): ``readings`` (the claim's
verdict and values under each reading of Eq. (7) tried) and ``selection`` (on a row whose reading
was chosen among several: how many were tried and which reproduce).
2.0 (issue 31, intervals): the verdict ``inconclusive``; on a criterion its ``interval`` and
``decision`` (pass, fail or undecided over the whole interval), on the row the headline's
``interval`` and the ``resampling`` that produced the intervals (method, unit, n, resamples,
level, seed). A 1.x file validates against its own version's schemas as before.
2.1 (issue 31, intervals for the distances claims, replication on other texts): an optional
``intervals`` on each entry of a row's ``readings`` (the criteria's intervals under that reading,
its verdict graded on them), and an optional row field ``corpus`` (the text a row's windows came
from, when it is not the book's corpus).
3.0 (issue 31, every row with its interval or the reason it has none): a criterion ``kind``
``check`` (an extreme or a count of violations over everything measured, which one counterexample
decides and which takes no interval: a new value in a closed list, so a major version), and an
optional row field ``unresampled`` (why a row's measurement criteria carry no interval).
4.0 (issue 47, verdicts a referee signs): the verdict ``partial`` (a claim's main feature holds
while a number or a further part it states does not, and no proven statement repairs it), the
criterion kind ``scope`` (a measurement saying whether the data lie where the claim applies; when
it fails the verdict is "not testable"), both new values in closed lists; and three optional row
fields: ``claim_kind`` (paper, premise, book or cited: only the paper's claims are counted as the
paper's), ``about`` (general, or gpt2 for a claim naming GPT-2's own measurements, which another
model can leave "not reproduced" but never "refuted") and ``sensitivity`` (a labelled row measured
under another protocol than the claim's own on the same model, never counted as its verdict).
"""

from __future__ import annotations

import json
from functools import lru_cache
from pathlib import Path
from typing import Any

__all__ = ["SCHEMA_VERSION", "DOCUMENTS", "SchemaError", "schema_root", "versions", "load_schema",
           "problems", "validate", "read_document"]

#: the version every file is written with now
SCHEMA_VERSION = "4.0"
#: the documents with a schema (``<name>.schema.json``); ``row`` is their shared row format
DOCUMENTS = ("audit", "ledger", "compare")
ROW = "row"


class SchemaError(ValueError):
    """A document does not follow its schema; the message names the file, the field and the
    remedy."""


def schema_root() -> Path:
    """The folder holding one sub-folder of schemas per version."""
    return Path(__file__).resolve().parent / "schemas"


def versions() -> list[str]:
    """Every schema version kept in the package, oldest first."""
    found = [p.name for p in schema_root().iterdir() if p.is_dir() and (p / f"{ROW}.schema.json").is_file()]
    return sorted(found, key=lambda v: tuple(int(x) for x in v.split(".")))


@lru_cache(maxsize=None)
def load_schema(document: str, version: str = SCHEMA_VERSION) -> dict:
    """The schema of ``document`` (``audit``, ``ledger``, ``compare`` or ``row``) at ``version``."""
    if document not in (*DOCUMENTS, ROW):
        raise ValueError(f"document={document!r}: choose one of {', '.join((*DOCUMENTS, ROW))}")
    path = schema_root() / version / f"{document}.schema.json"
    if (schema_root() / version).is_dir() and not path.is_file():
        raise FileNotFoundError(f"the package lacks the {document} schema of version {version} "
                                f"({path}); reinstall normlimits")
    if not path.is_file():
        raise SchemaError(f"schema_version {version!r} is not one this normlimits knows (it knows "
                          f"{', '.join(versions())}); the file was written by another version of "
                          "normlimits: read it with that version, or write it again with this one.")
    return json.loads(path.read_text(encoding="utf-8"))


@lru_cache(maxsize=None)
def _validator(document: str, version: str):
    from jsonschema import Draft202012Validator
    from referencing import Registry, Resource

    row = load_schema(ROW, version)
    registry = Registry().with_resource(row["$id"], Resource.from_contents(row))
    schema = load_schema(document, version)
    Draft202012Validator.check_schema(schema)
    return Draft202012Validator(schema, registry=registry)


def _where(error) -> str:
    path = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in error.absolute_path)
    return path.lstrip(".") or "(the document itself)"


def problems(doc: Any, document: str) -> list[str]:
    """Every way ``doc`` departs from the schema of ``document`` at its own ``schema_version``
    (``[]`` when it follows it), each as ``field: what is wrong``."""
    if not isinstance(doc, dict):
        return [f"(the document itself): a JSON object is expected, not {type(doc).__name__}"]
    version = doc.get("schema_version")
    if version is None:
        return ["schema_version: missing (the file was written before schema versions, or by "
                "something else)"]
    if not isinstance(version, str) or version not in versions():
        return [f"schema_version: {version!r} is not one this normlimits knows "
                f"({', '.join(versions())})"]
    errors = sorted(_validator(document, version).iter_errors(doc),
                    key=lambda e: (list(map(str, e.absolute_path)), e.message))
    return [f"{_where(e)}: {e.message}" for e in errors]


def validate(doc: Any, document: str, *, source: str = "", remedy: str = "") -> dict:
    """``doc`` if it follows its schema, else :class:`SchemaError` naming ``source`` (the file),
    the first few departures and ``remedy``."""
    found = problems(doc, document)
    if found:
        shown = "; ".join(found[:5]) + (f"; and {len(found) - 5} more" if len(found) > 5 else "")
        where = f"{source} " if source else ""
        raise SchemaError(f"{where}is not a valid {document} document: {shown}."
                          + (f" {remedy}" if remedy else ""))
    return doc


def read_document(path: Path, document: str, *, remedy: str = "") -> dict:
    """Read and validate the JSON file ``path`` as ``document``; a missing, unparsable or invalid
    file is a :class:`SchemaError` naming it."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SchemaError(f"{path} does not exist. {remedy}".strip()) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise SchemaError(f"{path} is not readable JSON ({exc}). {remedy}".strip()) from None
    return validate(doc, document, source=str(path), remedy=remedy)
