"""Sphinx extension: the Verdicts page, built from the chapters' ledger rows after they executed.

``{claims-ledger}`` places the summary on a page: first the count of claims per verdict, then one
compact table per chapter (id, the claim in a few words, the verdict, the one number it rests on
with its rule threshold, a link to the chapter's verdict), each row with the paper's wording, what
was measured and the rule behind a "details" toggle. ``$math$`` in the registry's texts is
rendered as math. Every document is read (so every chapter executed) before any is written, so
the page is filled at ``doctree-resolved`` from the ledger folder the chapters wrote
(:func:`normlimits.ledger.ledger_dir`). At ``build-finished`` the rows are merged into
``_build/ledger.json`` (:func:`normlimits.ledger.ledger_document`: versioned, schema-checked). A registered claim that a chapter of the table of contents did not record
is a warning (an error under ``-W``).
"""

from __future__ import annotations

import html
import re
from collections import Counter
from pathlib import Path

from docutils import nodes
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from . import ledger
from .claims import VERDICTS, Criterion

logger = logging.getLogger(__name__)
#: columns of a chapter's table and their relative widths (book/_static/ledger.css fits them)
COLUMNS = (("id", 2), ("claim", 8), ("model", 3), ("verdict", 3), ("rests on", 5))


def short_model(label: str) -> str:
    """A row's model label without its parameter count: ``smollm2-135m (134.5M params)`` ->
    ``smollm2-135m``; a comparison (``a against b``) keeps both names."""
    return re.sub(r" \([^()]*params\)", "", label)


def on_paper_model(row: dict) -> bool:
    """Whether the row was measured on the paper's GPT-2 124M (model setting ``gpt2``)."""
    return short_model(row["model"]).split(" ")[0] == "gpt2"


class ledger_placeholder(nodes.General, nodes.Element):
    """Replaced by the Verdicts summary once every chapter has executed."""


class ClaimsLedgerDirective(SphinxDirective):
    def run(self):
        return [ledger_placeholder()]


def _root(app) -> Path:
    return Path(app.confdir)


def _chapters(app) -> list[str]:
    """Docnames in reading order of the table of contents, as chapter ids (file stems)."""
    names = list(app.env.found_docs)
    order = {name: i for i, name in enumerate(app.env.toctree_includes.get(app.config.root_doc, []))}
    names.sort(key=lambda d: (order.get(d, len(order)), d))
    return [Path(d).name for d in names]


def _rows(app) -> list[dict]:
    return ledger.collect(ledger.ledger_dir(_root(app)), _chapters(app))


def inline(text: str) -> list[nodes.Node]:
    """Plain text with ``$...$`` spans turned into math nodes (MathJax renders them)."""
    parts = re.split(r"(?<!\\)\$([^$]+)\$", text)
    out: list[nodes.Node] = []
    for i, part in enumerate(parts):
        if not part:
            continue
        out.append(nodes.math(part, part) if i % 2 else nodes.Text(part.replace("\\$", "$")))
    return out


def _paragraph(text: str, classes=()) -> nodes.paragraph:
    para = nodes.paragraph(classes=list(classes))
    para.extend(inline(text))
    return para


def _badge(verdict: str) -> nodes.inline:
    return nodes.inline(verdict, verdict, classes=["verdict-badge", f"verdict-{verdict.replace(' ', '-')}"])


def _number(value) -> str:
    return "not measured" if value is None else f"{value:.3g}"


def _rests_on(row: dict) -> nodes.paragraph:
    head = next(c for c in row["criteria"] if c["key"] == row["headline"])
    rule = Criterion(head["key"], head["statistic"], head["op"],
                     tuple(head["threshold"]) if isinstance(head["threshold"], list) else head["threshold"],
                     head["kind"]).describe()
    para = nodes.paragraph()
    para += nodes.literal(_number(head["value"]), _number(head["value"]))
    para += nodes.Text(f" (rule: {rule}) ")
    para.extend(inline(head["statistic"]))
    return para


def _summary(rows: list[dict]) -> nodes.raw:
    counts = Counter(r["verdict"] for r in rows)
    items = "".join(
        f'<span class="verdict-count verdict-{v.replace(" ", "-")}" data-verdict="{html.escape(v)}">'
        f'<span class="verdict-count-number">{counts.get(v, 0)}</span> {html.escape(v)}</span>'
        for v in VERDICTS)
    text = (f'<p class="verdict-summary" data-total="{len(rows)}"><strong>{len(rows)} graded '
            f'claims:</strong> {items}</p>')
    return nodes.raw("", text, format="html")


def _details(row: dict) -> list[nodes.Node]:
    """The full texts behind a toggle: the paper's words, what was measured, the rule."""
    body = [nodes.raw("", "<details class=\"claim-details\"><summary>paper, measured, rule</summary>",
                      format="html")]
    scope = f" Scope: {row['scope']}." if row.get("scope") else ""
    reading = f" Reading: {row['reading']}." if row.get("reading") else ""
    body += [_paragraph(f"Paper ({row['section']}): {row['paper']}"),
             _paragraph(f"Measured on {row['model']}: {row['measured']}{reading}"),
             _paragraph(f"Rule: {row['rule']}.{scope}")]
    if row.get("reason"):
        body.append(_paragraph(f"Not testable here: {row['reason']}"))
    body.append(nodes.raw("", "</details>", format="html"))
    return body


def _chapter_table(rows: list[dict], app, fromdocname: str, chapter_doc: str | None) -> nodes.table:
    table = nodes.table(classes=["claims-ledger", "colwidths-given"])
    group = nodes.tgroup(cols=len(COLUMNS))
    table += group
    for _, width in COLUMNS:
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    header = nodes.row()
    for title, _ in COLUMNS:
        header += nodes.entry("", nodes.paragraph(text=title))
    head += header
    group += head
    body = nodes.tbody()
    for row in rows:
        tr = nodes.row(classes=[f"verdict-{row['verdict'].replace(' ', '-')}"], ids=[])
        label = row["id"] + (f" ({row['variant']})" if row.get("variant") else "")
        cell = nodes.paragraph()
        if chapter_doc:
            cell += nodes.reference("", label, internal=True,
                                    refuri=app.builder.get_relative_uri(fromdocname, chapter_doc) + "#verdict")
        else:
            cell += nodes.Text(label)
        tr += nodes.entry("", cell)
        claim = nodes.entry("", _paragraph(row["claim"]))
        claim.extend(_details(row))
        tr += claim
        tr += nodes.entry("", nodes.paragraph(text=short_model(row["model"]), classes=["claim-model"]))
        verdict = nodes.paragraph("", "", _badge(row["verdict"]))
        if not on_paper_model(row):
            verdict += nodes.inline("", " on " + short_model(row["model"]) + ", not GPT-2 124M",
                                    classes=["verdict-model-note"])
        tr += nodes.entry("", verdict)
        tr += nodes.entry("", _rests_on(row))
        body += tr
    group += body
    return table


def models_by_claim(rows: list[dict]) -> tuple[list[str], dict[str, dict[str, dict]]]:
    """The claims measured on more than one model: (models in order of first appearance, claim id
    -> model -> row). A claim's row of its own chapter comes before the replays of other chapters
    (the architectures chapter); comparisons between models (``a against b``) are left out."""
    by_claim: dict[str, dict[str, dict]] = {}
    models: list[str] = []
    for row in sorted(rows, key=lambda r: r["chapter"] != r.get("home", r["chapter"])):
        model = short_model(row["model"])
        if " against " in model:
            continue
        by_claim.setdefault(row["id"], {}).setdefault(model, row)
        if model not in models:
            models.append(model)
    shared = {cid: per for cid, per in by_claim.items() if len(per) > 1}
    used = [m for m in models if any(m in per for per in shared.values())]
    order = [cid for cid in dict.fromkeys(r["id"] for r in rows) if cid in shared]
    return used, {cid: shared[cid] for cid in order}


def _side_by_side(rows: list[dict]) -> list[nodes.Node]:
    """One table: each claim measured on several models, its verdict and headline number on each."""
    models, by_claim = models_by_claim(rows)
    if not by_claim:
        return []
    table = nodes.table(classes=["claims-by-model"])
    group = nodes.tgroup(cols=2 + len(models))
    table += group
    for width in (2, 6, *([4] * len(models))):
        group += nodes.colspec(colwidth=width)
    head = nodes.thead()
    header = nodes.row()
    for title in ("id", "claim", *models):
        header += nodes.entry("", nodes.paragraph(text=title))
    head += header
    group += head
    body = nodes.tbody()
    for cid, per in by_claim.items():
        tr = nodes.row()
        first = next(iter(per.values()))
        tr += nodes.entry("", nodes.paragraph(text=cid))
        tr += nodes.entry("", _paragraph(first["claim"]))
        for model in models:
            row = per.get(model)
            if row is None:
                tr += nodes.entry("", nodes.paragraph(text="not measured"))
                continue
            headline = next(c for c in row["criteria"] if c["key"] == row["headline"])
            cell = nodes.paragraph("", "", _badge(row["verdict"]))
            cell += nodes.Text(f" {_number(headline['value'])}")
            tr += nodes.entry("", cell)
        body += tr
    group += body
    intro = _paragraph(
        "The claims measured on more than one model, side by side: the verdict on each model by "
        "the same registered rule, with the number it rests on. The primary model's row comes "
        "from the claim's own chapter, the other models' from the architectures chapter, which "
        "replays the paper's yardsticks on every model with the audit's protocol. None of these "
        "models is the paper's GPT-2 124M unless its column says gpt2: a verdict here is a "
        "verdict on that model.")
    heading = nodes.rubric(text="Each claim on each model", classes=["verdict-chapter"])
    return [heading, intro, table]


def _page(rows: list[dict], app, fromdocname: str) -> list[nodes.Node]:
    out: list[nodes.Node] = [_summary(rows), *_side_by_side(rows)]
    docnames = {Path(d).name: d for d in app.env.found_docs}
    by_chapter: dict[str, list[dict]] = {}
    for row in rows:
        by_chapter.setdefault(row["chapter"], []).append(row)
    for chapter, chapter_rows in by_chapter.items():
        doc = docnames.get(chapter)
        title = app.env.titles[doc].astext() if doc else chapter
        heading = nodes.rubric(classes=["verdict-chapter"])
        if doc:
            heading += nodes.reference("", title, internal=True,
                                       refuri=app.builder.get_relative_uri(fromdocname, doc))
        else:
            heading += nodes.Text(title)
        counts = Counter(r["verdict"] for r in chapter_rows)
        heading += nodes.Text("  (" + ", ".join(f"{counts[v]} {v}" for v in VERDICTS if counts[v]) + ")")
        out += [heading, _chapter_table(chapter_rows, app, fromdocname, doc)]
    return out


def _resolve(app, doctree, fromdocname):
    placeholders = list(doctree.findall(ledger_placeholder))
    if not placeholders:
        return
    rows = _rows(app)
    for missing in ledger.missing_claims(rows, _chapters(app)):
        logger.warning(f"claims ledger: no verdict recorded for {missing}", location=fromdocname)
    for node in placeholders:
        node.replace_self(_page(rows, app, fromdocname) if rows else [nodes.paragraph(text="No verdicts recorded.")])


def _write_json(app, exception):
    if exception is None:
        from .cache import atomic_write_json

        atomic_write_json(_root(app) / "_build" / "ledger.json", ledger.ledger_document(_rows(app)))


def _ledger_docs(env) -> list[str]:
    """Documents that hold a ``{claims-ledger}`` summary."""
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
    and so rewrite the pages holding the summary too, although their own source did not change."""
    if not (added or changed or removed):
        return []
    return [doc for doc in _ledger_docs(env) if doc not in added and doc not in changed]


def setup(app):
    app.add_node(ledger_placeholder)
    app.add_directive("claims-ledger", ClaimsLedgerDirective)
    app.connect("env-get-outdated", _outdated)
    app.connect("doctree-resolved", _resolve)
    app.connect("build-finished", _write_json)
    return {"version": "2", "parallel_read_safe": True, "parallel_write_safe": True}
