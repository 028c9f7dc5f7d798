"""Sphinx extension: the bottom line and the Verdicts page, built from the chapters' ledger rows.

Two directives, both filled once every chapter has executed:

* ``{claims-bottom-line}`` (the landing page and the top of the Verdicts page): one paragraph
  saying which of the paper's claims hold and which do not, on which model, generated from the
  ledger (:func:`bottom_line`), then the count of the paper's claims per verdict.
* ``{claims-ledger}`` with ``:part: paper`` or ``:part: book``: one section per chapter (a
  heading with an anchor, in the page's contents), each a table with one line per claim: its id
  (linking to the chapter's verdict), the claim in a few words with what it rests on and the full
  texts behind a toggle, what the paper reports, and one column per model with the verdict badge
  and the number [with its interval, when the row has one]. The paper's claims (the chapters of
  the paper's results) are counted apart from the book's own questions: the alternatives, the
  architectures, and the replays of the paper's claims on the control models (which appear as
  the other model columns of the paper's tables).

The tables are HTML written from data (:mod:`normlimits.core.markup`), so math holding ``|``, ``*`` or
``_`` cannot break them, and each cell carries its column's title for the narrow-screen layout
(``book/_static/ledger.css``). Every document is read (so every chapter executed) before any is
written, so the placeholders are filled at ``doctree-resolved`` from the ledger folder the
chapters wrote (:func:`normlimits.claims.ledger.ledger_dir`). At ``build-finished`` the rows are merged
into ``_build/ledger.json`` (:func:`normlimits.claims.ledger.ledger_document`: versioned,
schema-checked) and copied next to the site's pages, where the Verdicts page links to
it. A registered claim that a chapter of the table of contents did not record is a warning (an
error under ``-W``).
"""

from __future__ import annotations

import html
import posixpath
import re
import shutil
from collections import Counter
from pathlib import Path

from docutils import nodes
from docutils.parsers.rst import directives
from sphinx.util import logging
from sphinx.util.docutils import SphinxDirective

from normlimits import claims
from normlimits.claims import ledger
from normlimits.claims import CHAPTER_MODULES, VERDICTS, Criterion, readings_words
from normlimits.core.markup import html_table, inline_html, significant, units_of, with_interval
from normlimits.core.cache import atomic_write_json

logger = logging.getLogger(__name__)

#: chapters whose claims are the book's own questions, not the paper's claims: the paper's
#: guidelines and other normalisers on the paper's yardsticks, and the architectures comparison
BEYOND_PAPER = ("alternatives", "architectures")
PAPER_CHAPTERS = tuple(c for c in CHAPTER_MODULES if c not in BEYOND_PAPER)
#: the file, next to the site's pages, that the Verdicts page offers for download
LEDGER_FILE = "ledger.json"
#: how the bottom line says each verdict: (one claim, several claims)
VERDICT_WORDS = {
    "confirmed": ("holds as stated", "hold as stated"),
    "corrected": ("holds once corrected", "hold once corrected"),
    "partial": ("holds in part", "hold in part"),
    "refuted": ("is refuted", "are refuted"),
    "not reproduced": ("was not reproduced", "were not reproduced"),
    "not testable": ("could not be tested in this build", "could not be tested in this build"),
    "inconclusive": ("is inconclusive (its interval straddles the rule's threshold)",
                     "are inconclusive (their intervals straddle the rules' thresholds)"),
}
#: a model setting in words, for the bottom line (a model of no known setting is named by its
#: whole label: :func:`model_words`)
MODEL_WORDS = {
    "gpt2": "GPT-2 124M, the paper's model",
    "smollm2-135m": "SmolLM2-135M, a real pretrained model of GPT-2's size (not the paper's GPT-2 124M)",
    "standin": "the stand-in, a small GPT-2 trained here on the corpus (not the paper's model)",
    "standin-rope": "the RoPE stand-in, a small Llama trained here (not the paper's model)",
    "gpt2-random": "GPT-2 124M's architecture with random weights (timing only)",
}


# --- the rows ----------------------------------------------------------------------------------

def short_model(label: str) -> str:
    """A row's model label without its parameter count: ``smollm2-135m (134.5M params)`` ->
    ``smollm2-135m``; a comparison (``a against b``) keeps both names."""
    return re.sub(r" \([^()]*params\)", "", label)


def model_setting(label: str) -> str:
    """The model setting a label starts with: ``gpt2 (default) (124.4M params)`` -> ``gpt2``."""
    return short_model(label).split(" ")[0]


def on_paper_model(row: dict) -> bool:
    """Whether the row was measured on the paper's GPT-2 124M (model setting ``gpt2``)."""
    return model_setting(row["model"]) == "gpt2"


def about_gpt2(row: dict) -> bool:
    """Whether a claim of the paper is about GPT-2: its wording names GPT-2, or it is one of the
    paper's measurements (its experiments, Section 3 and the figures, all ran on GPT-2 124M).
    The book's own questions are not."""
    if part_of(row) not in ("paper", "control"):
        return False
    words = row.get("claim_text", row["claim"]) + " " + row.get("paper", "")
    return "GPT-2" in words or bool(re.search(r"\bSec\. 3\b|\bFig(ure|\.)", row.get("section", "")))


def home(row: dict) -> str:
    """The chapter whose claim the row grades (the architectures chapter replays others')."""
    return row.get("home") or row["chapter"]


def part_of(row: dict) -> str:
    """Where a row belongs: ``paper`` (a claim of the paper, graded by its own chapter on the
    chapter's model), ``chosen`` (the same claim on the same model graded on a reading chosen
    among several because it reproduces the figure: a labelled variant with a ``selection``, shown
    beside the claim's own row and counted apart, never as the claim's verdict), ``control`` (the
    same claim replayed on a control model: a variant), or the chapter of the book's own question
    (``alternatives``, ``architectures``)."""
    if row["chapter"] in BEYOND_PAPER:
        return row["chapter"]
    if home(row) in BEYOND_PAPER:
        return home(row)
    if row.get("selection"):
        return "chosen"
    return "control" if row.get("variant") else "paper"


def paper_rows(rows: list[dict]) -> list[dict]:
    """The paper's claims as graded on each chapter's own model (one row per claim)."""
    return [r for r in rows if part_of(r) == "paper"]


def verdict_order(rows: list[dict]) -> list[str]:
    """The registered verdicts, then any other verdict the rows carry (rows of a newer schema)."""
    extra = sorted({r["verdict"] for r in rows} - set(VERDICTS))
    return [*VERDICTS, *extra]


def css_verdict(verdict: str) -> str:
    """The CSS class of a verdict: ``verdict-not-reproduced``."""
    return "verdict-" + re.sub(r"[^a-z0-9]+", "-", verdict.lower()).strip("-")


def headline(row: dict) -> dict:
    """The criterion the row's verdict rests on most."""
    return next(c for c in row["criteria"] if c["key"] == row["headline"])


def number_text(row: dict) -> str:
    """The headline number, as ``value [low, high] (8 windows)`` when the row has an interval
    (the units it rests on beside it; ``range over 3 windows`` below
    :data:`~normlimits.core.markup.RANGE_BELOW`)."""
    head = headline(row)
    if head["value"] is None:
        return "not measured"
    return with_interval(head["value"], row.get("interval") or head.get("interval"), **units_of(row))


def rule_text(row: dict) -> str:
    """The headline criterion's test in words, e.g. ``≤ 0.25``."""
    head = headline(row)
    return Criterion(head["key"], head["statistic"], head["op"],
                     tuple(head["threshold"]) if isinstance(head["threshold"], list) else head["threshold"],
                     head["kind"]).describe()


def table_lines(rows: list[dict]) -> tuple[list[str], list[dict]]:
    """Lay out one chapter's rows: (model columns, lines). Each line is one claim,
    ``{"id", "rows": {column: row}}``; a column is a model setting with its size (``short_model``)
    or ``comparison`` for rows comparing two models. Columns come in order of first appearance,
    the models of rows without a variant (the chapter's own) first. A second row of the same claim
    on the same column opens a further line, so every row is shown exactly once."""
    def column(row):
        return "comparison" if " against " in row["model"] else short_model(row["model"])

    ordered = sorted(rows, key=lambda r: bool(r.get("variant")))
    columns = list(dict.fromkeys(column(r) for r in ordered))
    lines: list[dict] = []
    for row in rows:
        key = column(row)
        line = next((ln for ln in lines if ln["id"] == row["id"] and key not in ln["rows"]), None)
        if line is None:
            line = {"id": row["id"], "rows": {}}
            lines.append(line)
        line["rows"][key] = row
    for line in lines:     # the chapter's own row first among a line's rows
        line["rows"] = dict(sorted(line["rows"].items(), key=lambda kv: columns.index(kv[0])))
    return columns, lines


def _join(items: list[str]) -> str:
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def model_words(label: str) -> str:
    """A row's model label in words: the words of its model setting (:data:`MODEL_WORDS`), else
    the whole label without its parameter count (a model the chapter describes itself, e.g. the
    temperature runs' ``byte-level GPT-2, 2 layers x 4 heads x 128, 3 seeds per T``)."""
    return MODEL_WORDS.get(model_setting(label), short_model(label))


def bottom_line(rows: list[dict]) -> str:
    """The bottom line, generated from the ledger: on which model the paper's claims were graded,
    which hold as stated, which once corrected, which are refuted, not reproduced, not testable (or
    inconclusive), each claim in its few words with its id; then how many keep their verdict on
    the control models, and which claims are about GPT-2 itself. MyST-like text (``$math$``,
    ``**bold**``) for :func:`normlimits.core.markup.inline_html`."""
    paper = paper_rows(rows)
    if not paper:
        return "No claim of the paper was graded in this build."
    by_model = Counter(model_words(r["model"]) for r in paper)
    where = _join([m + (f" ({n} of them)" if len(by_model) > 1 else "")
                   for m, n in by_model.most_common()])
    parts = [f"**Bottom line.** This build graded {len(paper)} claims of the paper on {where}."]
    counts = Counter(r["verdict"] for r in paper)
    for verdict in verdict_order(paper):
        chosen = [r for r in paper if r["verdict"] == verdict]
        if not chosen:
            continue
        one, many = VERDICT_WORDS.get(verdict, (f"is {verdict}", f"are {verdict}"))
        items = "; ".join(f"{r['claim']} ({r['id']})" for r in chosen)
        parts.append(f"**{counts[verdict]} {one if counts[verdict] == 1 else many}**: {items}.")
    controls = [r for r in rows if part_of(r) == "control"]
    own = {r["id"]: r for r in paper}
    for words in dict.fromkeys(model_words(r["model"]) for r in controls):
        replayed = [r for r in controls if model_words(r["model"]) == words and r["id"] in own]
        if not replayed:
            continue
        differ = [r for r in replayed if r["verdict"] != own[r["id"]]["verdict"]]
        text = (f"Replayed on {words} by the same rules, "
                f"{len(replayed) - len(differ)} of {len(replayed)} claims keep their verdict")
        if differ:
            text += "; " + "; ".join(f"{r['id']} is {r['verdict']} there ({own[r['id']]['verdict']} above)"
                                     for r in differ)
        parts.append(text + ".")
    gpt2 = [r["id"] for r in paper if about_gpt2(r) and not on_paper_model(r)]
    if gpt2:
        parts.append(f"{_join(gpt2)} {'is a claim' if len(gpt2) == 1 else 'are claims'} about "
                     "GPT-2 (its wording, or the paper's measurement), measured here on another model: "
                     f"{'its verdict is' if len(gpt2) == 1 else 'their verdicts are'} about that model.")
    return " ".join(parts)


# --- HTML --------------------------------------------------------------------------------------

def badge_html(verdict: str) -> str:
    """A verdict badge (``book/_static/ledger.css`` colours it; ``inconclusive`` included)."""
    return f'<span class="verdict-badge {css_verdict(verdict)}">{html.escape(verdict)}</span>'


def counts_html(rows: list[dict], label: str, part: str) -> str:
    """The count bar: ``label`` (e.g. "30 claims of the paper"), then the count per verdict. The
    bar carries ``data-part`` and ``data-total``, each count ``data-verdict`` (the tests read them)."""
    counts = Counter(r["verdict"] for r in rows)
    items = "".join(
        f'<span class="verdict-count {css_verdict(v)}" data-verdict="{html.escape(v)}">'
        f'<span class="verdict-count-number">{counts.get(v, 0)}</span> {html.escape(v)}</span>'
        for v in verdict_order(rows))
    return (f'<p class="verdict-summary" data-part="{part}" data-total="{len(rows)}">'
            f"<strong>{html.escape(label)}:</strong> {items}</p>")


def _details_html(line_rows: list[dict]) -> str:
    first = line_rows[0]
    texts = [f"Paper ({first['section']}): {first['paper']}"]
    texts += [f"Measured on {r['model']}" + (f" ({r['variant']})" if r.get("variant") else "")
              + f": {r['measured']}" + (f" Reading: {r['reading']}." if r.get("reading") else "")
              + (f" Not testable here: {r['reason']}" if r.get("reason") else "")
              + (f" {readings_words(r)}" if r.get("readings") else "") for r in line_rows]
    texts.append(f"Rule: {first['rule']}." + (f" Scope: {first['scope']}." if first.get("scope") else ""))
    body = "".join(f"<p>{inline_html(t)}</p>" for t in texts)
    return f'<details class="claim-details"><summary>paper, measured, rule</summary>{body}</details>'


def _model_cell(row: dict | None, column: str) -> str:
    if row is None:
        return '<span class="claim-absent" title="not measured on this model">—</span>'
    head = headline(row)
    parts = [f'<span class="verdict-cell" data-claim="{html.escape(row["id"])}" '
             f'data-chapter="{html.escape(row["chapter"])}" data-variant="{html.escape(row.get("variant", ""))}" '
             f'data-verdict="{html.escape(row["verdict"])}">{badge_html(row["verdict"])} '
             f'<span class="verdict-number">{html.escape(number_text(row))}</span></span>']
    if column == "comparison":
        parts.append(f'<span class="verdict-model-note">{html.escape(short_model(row["model"]))}</span>')
    if about_gpt2(row) and not on_paper_model(row):
        parts.append(f'<span class="verdict-model-note verdict-gpt2-note">about GPT-2; measured here on '
                     f"{html.escape(model_setting(row['model']))}</span>")
    if head["value"] is None and row.get("reason"):
        parts.append('<span class="verdict-model-note">not testable here (reason in the details)</span>')
    return "".join(parts)


def _column_title(column: str, rows: list[dict]) -> str:
    if column == "comparison":
        return "models compared"
    sizes = {re.search(r"\(([^()]*params)\)", r["model"]).group(1) for r in rows
             if short_model(r["model"]) == column and re.search(r"\(([^()]*params)\)", r["model"])}
    return column + (f" ({sizes.pop()})" if len(sizes) == 1 else "")


def chapter_table_html(rows: list[dict], chapter_uri: str | None) -> str:
    """One chapter's claims as a table: id (a link to the chapter's verdict), the claim (what it
    rests on, the details toggle), what the paper reports (when the chapter's claims say), one
    column per model."""
    columns, lines = table_lines(rows)
    with_paper = any(r.get("paper_value") for r in rows)
    header = ["id", "claim", *(["paper"] if with_paper else []), *(_column_title(c, rows) for c in columns)]
    cells = []
    for line in lines:
        line_rows = list(line["rows"].values())
        first = line_rows[0]
        label = html.escape(line["id"] + (f" ({first['variant']})" if part_of(first) == "chosen" else ""))
        ident = f'<a class="claim-id" href="{html.escape(chapter_uri)}#verdict">{label}</a>' \
            if chapter_uri else f'<span class="claim-id">{label}</span>'
        head = headline(first)
        claim = (f'<span class="claim-text">{inline_html(first["claim"])}</span>'
                 f'<span class="claim-rests">rests on: {inline_html(head["statistic"])}; rule '
                 f"{html.escape(rule_text(first))}</span>" + _details_html(line_rows))
        row_cells = [ident, claim]
        if with_paper:
            row_cells.append(f'<span class="claim-paper">{inline_html(first.get("paper_value") or "—")}</span>')
        row_cells += [_model_cell(line["rows"].get(c), c) for c in columns]
        cells.append(row_cells)
    kinds = ["id-column", "claim-column", *(["paper-column"] if with_paper else []),
             *(["model-column"] * len(columns))]
    return html_table(header, cells, column_classes=kinds,
                      classes=("claims-ledger", f"claims-models-{len(columns)}",
                               *(["with-paper"] if with_paper else [])))


def bottom_line_html(rows: list[dict]) -> str:
    """The bottom-line paragraph and the paper's counts, as HTML."""
    paper = paper_rows(rows)
    return (f'<p class="bottom-line">{inline_html(bottom_line(rows))}</p>'
            + counts_html(paper, f"{len(paper)} claims of the paper", "paper"))


def book_counts_html(rows: list[dict]) -> str:
    """The book's own questions, counted by kind (alternatives, architectures, control replays)."""
    parts = []
    for part, label in (("chosen", "graded on a reading chosen among several because it reproduces "
                                   "the figure (labelled variants beside the claims' own rows, "
                                   "which rest on the primary reading)"),
                        ("alternatives", "on other normalisers (the alternatives chapter)"),
                        ("architectures", "on other architectures (the architectures chapter)"),
                        ("control", "the paper's claims replayed on the control models (the other "
                                    "model columns of the tables above)")):
        chosen = [r for r in rows if part_of(r) == part]
        if chosen:
            parts.append(counts_html(chosen, f"{len(chosen)} rows {label}", part))
    return "".join(parts) or "<p>The book asked no questions of its own in this build.</p>"


# --- Sphinx ------------------------------------------------------------------------------------

class ledger_placeholder(nodes.General, nodes.Element):
    """Replaced once every chapter has executed: ``kind`` is ``bottom-line``, ``counts`` (the
    book's own questions), ``download`` or ``chapter`` (with ``chapter``)."""


def _source_title(env, chapter: str) -> str:
    """A chapter's title from its source's first ``# `` heading (read before the chapter is)."""
    doc = next((d for d in env.found_docs if Path(d).name == chapter), None)
    if doc is not None:
        try:
            text = Path(env.doc2path(doc)).read_text(encoding="utf-8")
        except OSError:
            text = ""
        match = re.search(r"^# (.+)$", text, re.M)
        if match:
            return re.sub(r"\$([^$]*)\$", r"\1", match.group(1)).strip()
    return chapter


class BottomLineDirective(SphinxDirective):
    """``{claims-bottom-line}``: the bottom-line paragraph and the paper's counts."""

    def run(self):
        return [ledger_placeholder(kind="bottom-line")]


class ClaimsLedgerDirective(SphinxDirective):
    """``{claims-ledger}`` (``:part: paper`` or ``book``): one anchored section per chapter."""

    option_spec = {"part": lambda value: directives.choice(value, ("paper", "book"))}

    def run(self):
        part = self.options.get("part", "paper")
        out: list[nodes.Node] = []
        if part == "paper":
            out.append(ledger_placeholder(kind="download"))
            chapters = PAPER_CHAPTERS
        else:
            out.append(ledger_placeholder(kind="counts"))
            chapters = BEYOND_PAPER
        for chapter in chapters:
            anchor = f"verdicts-{chapter}"
            section = nodes.section(ids=[anchor], names=[anchor], classes=["verdict-chapter"])
            section += nodes.title(text=_source_title(self.env, chapter))
            section += ledger_placeholder(kind="chapter", chapter=chapter)
            out.append(section)
        return out


def _root(app) -> Path:
    return Path(app.confdir)


def _chapters(app) -> list[str]:
    """Docnames in reading order of the table of contents, as chapter ids (file stems)."""
    names = list(app.env.found_docs)
    order = {name: i for i, name in enumerate(app.env.toctree_includes.get(app.config.root_doc, []))}
    names.sort(key=lambda d: (order.get(d, len(order)), d))
    return [Path(d).name for d in names]


def _rows(app) -> list[dict]:
    return claims.collect(ledger.ledger_dir(_root(app)), _chapters(app))


def _uri(app, fromdocname: str, target: str) -> str:
    """A relative link from page ``fromdocname`` to ``target``, a file at the site's root."""
    page = app.builder.get_target_uri(fromdocname).split("#")[0]
    return posixpath.relpath(target, posixpath.dirname(page) or ".")


def _fill(node, rows: list[dict], app, fromdocname: str) -> nodes.Node:
    kind = node["kind"]
    if kind == "bottom-line":
        text = bottom_line_html(rows)
    elif kind == "counts":
        text = book_counts_html(rows)
    elif kind == "download":
        text = (f'<p class="ledger-download">Every row below, with every criterion, value and '
                f'rule, in one file: <a href="{html.escape(_uri(app, fromdocname, LEDGER_FILE))}" '
                f'download>{LEDGER_FILE}</a> ({len(rows)} rows; re-grade them with '
                f"<code>normlimits.claims.regrade</code>).</p>")
    else:
        chapter = node["chapter"]
        chapter_rows = [r for r in rows if r["chapter"] == chapter]
        if not chapter_rows:
            return nodes.paragraph(text="No verdicts recorded for this chapter in this build.")
        doc = next((d for d in app.env.found_docs if Path(d).name == chapter), None)
        uri = app.builder.get_relative_uri(fromdocname, doc) if doc else None
        counts = Counter(r["verdict"] for r in chapter_rows)
        summary = ", ".join(f"{counts[v]} {v}" for v in verdict_order(chapter_rows) if counts[v])
        text = (f'<p class="verdict-chapter-counts">{len(chapter_rows)} rows: {html.escape(summary)}.</p>'
                + chapter_table_html(chapter_rows, uri))
    return nodes.raw("", text, format="html")


def _resolve(app, doctree, fromdocname):
    placeholders = list(doctree.findall(ledger_placeholder))
    if not placeholders:
        return
    rows = _rows(app)
    if any(p["kind"] != "bottom-line" for p in placeholders):
        for missing in claims.missing_claims(rows, _chapters(app)):
            logger.warning(f"claims ledger: no verdict recorded for {missing}", location=fromdocname)
    for node in placeholders:
        node.replace_self(_fill(node, rows, app, fromdocname))


def _write_json(app, exception):
    if exception is None:
        merged = _root(app) / "_build" / LEDGER_FILE
        atomic_write_json(merged, ledger.ledger_document(_rows(app)))
        if app.builder.format == "html":
            shutil.copyfile(merged, Path(app.outdir) / LEDGER_FILE)


def _ledger_docs(env) -> list[str]:
    """Documents that hold a ledger directive (the Verdicts page, the landing page)."""
    found = []
    for doc in env.found_docs:
        try:
            text = Path(env.doc2path(doc)).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if "{claims-ledger}" in text or "{claims-bottom-line}" in text:
            found.append(doc)
    return sorted(found)


def _outdated(app, env, added, changed, removed):
    """Whenever any document is re-read (a chapter may execute and record new verdicts), re-read
    and so rewrite the pages holding the ledger too, although their own source did not change."""
    if not (added or changed or removed):
        return []
    return [doc for doc in _ledger_docs(env) if doc not in added and doc not in changed]


def setup(app):
    app.add_node(ledger_placeholder)
    app.add_directive("claims-ledger", ClaimsLedgerDirective)
    app.add_directive("claims-bottom-line", BottomLineDirective)
    app.connect("env-get-outdated", _outdated)
    app.connect("doctree-resolved", _resolve)
    app.connect("build-finished", _write_json)
    return {"version": "3", "parallel_read_safe": True, "parallel_write_safe": True}
