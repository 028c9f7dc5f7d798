"""Sphinx extension: the Verdicts table, built from the chapters' ledger rows after they executed.

``{claims-ledger}`` places a table on a page. Every document is read (so every chapter executed)
before any is written, so the table is filled at ``doctree-resolved`` from the ledger files the
chapters wrote. At ``build-finished`` the merged rows are written to ``_build/ledger.json``.
A claim a chapter is expected to record but did not is a warning (an error under ``-W``).
"""

from __future__ import annotations

from pathlib import Path

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from . import ledger

logger = logging.getLogger(__name__)
#: (column, relative width) after the chapter column; the verdict sits next to the id so that it
#: is the first thing a reader sees (book/_static/ledger.css colours it and fits the table)
COLUMNS = (("id", 2), ("verdict", 4), ("claim", 5), ("paper", 6), ("measured", 9))


class ledger_placeholder(nodes.General, nodes.Element):
    """Replaced by the Verdicts table once every chapter has executed."""


class ClaimsLedgerDirective(SphinxDirective):
    def run(self):
        return [ledger_placeholder()]


def _root(app) -> Path:
    return Path(app.confdir)


def _chapters(app) -> list[str]:
    """Docnames in reading order of the table of contents, as chapter ids (file stems)."""
    names = [d for d in app.env.found_docs]
    order = {name: i for i, name in enumerate(app.env.toctree_includes.get(app.config.root_doc, []))}
    names.sort(key=lambda d: (order.get(d, len(order)), d))
    return [Path(d).name for d in names]


def _rows(app) -> list[dict]:
    return ledger.collect(_root(app) / "_build" / "ledger", _chapters(app))


def _paragraph(text: str) -> nodes.paragraph:
    return nodes.paragraph(text=text)


def _table(rows: list[dict], app, fromdocname: str) -> nodes.table:
    table = nodes.table(classes=["claims-ledger", "colwidths-given"])
    group = nodes.tgroup(cols=len(COLUMNS) + 1)
    table += group
    for _, width in (("chapter", 4),) + COLUMNS:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    header = nodes.row()
    for title in ("chapter",) + tuple(c for c, _ in COLUMNS):
        header += nodes.entry("", _paragraph(title))
    head += header
    group += head
    body = nodes.tbody()
    docnames = {Path(d).name: d for d in app.env.found_docs}
    for row in rows:
        tr = nodes.row(classes=[f"verdict-{row['verdict'].replace(' ', '-')}"])
        chapter_doc = docnames.get(row["chapter"])
        cell = nodes.paragraph()
        if chapter_doc:
            ref = nodes.reference("", app.env.titles[chapter_doc].astext(), internal=True,
                                  refuri=app.builder.get_relative_uri(fromdocname, chapter_doc))
            cell += ref
        else:
            cell += nodes.Text(row["chapter"])
        tr += nodes.entry("", cell)
        for column, _ in COLUMNS:
            tr += nodes.entry("", _paragraph(str(row[column])))
        body += tr
    group += body
    return table


def _resolve(app, doctree, fromdocname):
    placeholders = list(doctree.findall(ledger_placeholder))
    if not placeholders:
        return
    rows = _rows(app)
    for missing in ledger.missing_claims(rows, _chapters(app)):
        logger.warning(f"claims ledger: no verdict recorded for {missing}", location=fromdocname)
    for node in placeholders:
        node.replace_self(_table(rows, app, fromdocname) if rows else _paragraph("No verdicts recorded."))


def _write_json(app, exception):
    if exception is None:
        from .cache import atomic_write_json

        atomic_write_json(_root(app) / "_build" / "ledger.json", _rows(app))


def _ledger_docs(env) -> list[str]:
    """Documents that hold a ``{claims-ledger}`` table."""
    found = []
    for doc in env.found_docs:
        try:
            text = Path(env.doc2path(doc)).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "{claims-ledger}" in text:
            found.append(doc)
    return found


def _outdated(app, env, added, changed, removed):
    """Whenever any document is re-read (a chapter may execute and record new verdicts), re-read
    and so rewrite the pages holding the table too, although their own source did not change."""
    if not (added or changed or removed):
        return []
    return [doc for doc in _ledger_docs(env) if doc not in added and doc not in changed]


def setup(app):
    app.add_node(ledger_placeholder)
    app.add_directive("claims-ledger", ClaimsLedgerDirective)
    app.connect("env-get-outdated", _outdated)
    app.connect("doctree-resolved", _resolve)
    app.connect("build-finished", _write_json)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
