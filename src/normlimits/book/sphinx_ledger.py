"""Sphinx extension: the bottom line and the Verdicts page, built from the chapters' ledger rows.

Two directives, both filled once every chapter has executed:

* ``{claims-bottom-line}`` (the landing page and the top of the Verdicts page): one paragraph
  saying which of the paper's claims hold and which do not, on which model, generated from the
  ledger (:func:`bottom_line`), then the count of the paper's claims per verdict. Only claims of
  kind ``paper`` (:class:`normlimits.claims.Claim`), each on its own row, are counted: premises,
  the book's own results, other papers' claims, replays on control models, chosen-reading rows
  and sensitivity rows (another protocol on the same model) are listed apart.
* ``{verdict-legend}``: every verdict defined once (:data:`normlimits.claims.rules.VERDICT_DEFINITIONS`),
  placed before the tables.
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
from normlimits.claims.rules import VERDICT_DEFINITIONS
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


#: a model setting's short name, used wherever a sentence names a model again
MODEL_NAMES = {"gpt2": "GPT-2 124M", "smollm2-135m": "SmolLM2-135M", "standin": "the stand-in",
               "standin-rope": "the RoPE stand-in", "gpt2-random": "random-weight GPT-2"}
#: how the page names the groups of rows that are not counted as the paper's claims
APART = {
    "premise": "premises of the paper's claims (each graded beside its conclusion: \"premise "
               "fails\" where it is refuted)",
    "book": "the book's own results and questions (not in the paper)",
    "cited": "other papers' claims that the book tests",
    "chosen": "graded on a reading chosen among several because it reproduces the figure "
              "(labelled variants beside the claims' own rows, which rest on the primary reading)",
    "sensitivity": "sensitivity rows: another protocol on the same model (shown beside the "
                   "claim's own row, never its verdict)",
    "control": "the paper's claims replayed on the control models (the other model columns of "
               "the tables)",
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


def _registered(row: dict, field: str, default: str) -> str:
    """A row's ``claim_kind`` or ``about`` (schema 4.0); for an older row, the registry's."""
    if row.get(field):
        return row[field]
    item = claims.REGISTRY.get(row["id"])
    return getattr(item, "kind" if field == "claim_kind" else field) if item else default


def claim_kind(row: dict) -> str:
    """Whose statement the row grades: ``paper``, ``premise``, ``book`` or ``cited``."""
    return _registered(row, "claim_kind", "paper")


def about_gpt2(row: dict) -> bool:
    """Whether the row's claim names GPT-2's own measurements (the registry's ``about="gpt2"``):
    on another model it can be "not reproduced" but never "refuted"."""
    return _registered(row, "about", "general") == "gpt2"


def home(row: dict) -> str:
    """The chapter whose claim the row grades (the architectures chapter replays others')."""
    return row.get("home") or row["chapter"]


def part_of(row: dict) -> str:
    """Where a row belongs: ``sensitivity`` (a labelled row measured under another protocol on the
    same model, e.g. the architectures chapter's survey: shown, never the claim's verdict),
    ``chosen`` (graded on a reading chosen among several because it reproduces the figure: a
    labelled variant with a ``selection``), ``control`` (a claim of the paper replayed on a control
    model: a variant), else by whose statement it grades (:func:`claim_kind`): ``paper`` (the
    claim's own row, counted as the paper's), ``premise``, ``book`` or ``cited`` (any row of
    such a claim, its replays included)."""
    if row.get("sensitivity"):
        return "sensitivity"
    if row.get("selection"):
        return "chosen"
    kind = claim_kind(row)
    if row.get("variant") and kind == "paper":
        return "control"
    return kind


def paper_rows(rows: list[dict]) -> list[dict]:
    """The rows counted as the paper's claims: each claim of kind ``paper``, on its own row (no
    variant: not a replay, a chosen reading or a sensitivity row), wherever it was graded."""
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


def model_name(label: str) -> str:
    """A row's model in a few words (:data:`MODEL_NAMES`), for a sentence that names it again;
    a model of no known setting by its whole label without its parameter count."""
    return MODEL_NAMES.get(model_setting(label), short_model(label))


def model_words(label: str) -> str:
    """A row's model label in words: the words of its model setting (:data:`MODEL_WORDS`), else
    the whole label without its parameter count (a model the chapter describes itself, e.g. the
    temperature runs' ``byte-level GPT-2, 2 layers x 4 heads x 128, 3 seeds per T``)."""
    return MODEL_WORDS.get(model_setting(label), short_model(label))


def bottom_line(rows: list[dict]) -> str:
    """The bottom line, generated from the ledger: how many claims of the paper (kind ``paper``,
    each on its own row: :func:`paper_rows`) were graded on which model, which hold as stated,
    which once corrected, which in part, which are refuted, not reproduced, not testable or
    inconclusive, each claim in its few words with its id; then what is listed apart and not
    counted (premises, with "premise fails" where one is refuted; the book's own results; other
    papers' claims; sensitivity rows), how many claims keep their verdict on each control model
    (another model, never the same one), and which counted claims name GPT-2's own measurements
    (the registry's ``about``). MyST-like text (``$math$``, ``**bold**``) for
    :func:`normlimits.core.markup.inline_html`."""
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
    apart = _apart_sentence(rows)
    if apart:
        parts.append(apart)
    own = {(r["id"], model_setting(r["model"])): r for r in paper}
    first = {r["id"]: r for r in paper}
    controls = [r for r in rows if part_of(r) == "control" and r["id"] in first
                and (r["id"], model_setting(r["model"])) not in own]
    for name in dict.fromkeys(model_name(r["model"]) for r in controls):
        replayed = [r for r in controls if model_name(r["model"]) == name]
        differ = [r for r in replayed if r["verdict"] != first[r["id"]]["verdict"]]
        text = (f"Replayed on {name} by the same rules, "
                f"{len(replayed) - len(differ)} of {len(replayed)} of these claims keep their verdict")
        if differ:
            text += "; " + "; ".join(f"{r['id']} is {r['verdict']} there ({first[r['id']]['verdict']} above)"
                                     for r in differ)
        parts.append(text + ".")
    gpt2 = [r["id"] for r in paper if about_gpt2(r) and not on_paper_model(r)]
    if gpt2:
        parts.append(f"{_join(gpt2)} {'names' if len(gpt2) == 1 else 'name'} GPT-2's own measurements "
                     "and, measured here on another model, can be not reproduced but never refuted: "
                     f"{'its verdict is' if len(gpt2) == 1 else 'their verdicts are'} about that model.")
    return " ".join(parts)


def premise_fails(rows: list[dict], row: dict) -> dict | None:
    """The refuted row of ``row``'s premise on the same model and protocol (same variant), if
    any: the conclusion is then shown with "premise fails"."""
    premise = row.get("premise")
    if not premise:
        return None
    return next((r for r in rows if r["id"] == premise and r["model"] == row["model"]
                 and r.get("variant", "") == row.get("variant", "") and r["verdict"] == "refuted"), None)


def _apart_sentence(rows: list[dict]) -> str:
    """What is graded but not counted: premises (with "premise fails"), the book's own results,
    other papers' claims, and the number of sensitivity rows."""
    items = []
    for kind in ("premise", "book", "cited"):
        found = [r for r in rows if part_of(r) == kind]
        if not found:
            continue
        if kind == "premise":
            found = [r for r in found if not r.get("variant")] or found     # its own rows
            words = "; ".join(
                f"{r['id']}, the premise of {', '.join(sorted({c['id'] for c in rows if c.get('premise') == r['id']})) or 'a claim'}"
                f" ({r['verdict']} on {model_name(r['model'])}"
                + (": premise fails" if r["verdict"] == "refuted" else "") + ")" for r in found)
            items.append(f"{'the premise' if len(found) == 1 else 'the premises'} {words}")
        else:
            label = {"book": "the book's own results and questions", "cited": "other papers' claims"}[kind]
            ids = list(dict.fromkeys(r["id"] for r in found))
            shown = _join(ids) if len(ids) <= 6 else f"{len(ids)} of them"
            items.append(f"{label} ({shown})")
    sensitivity = [r for r in rows if part_of(r) == "sensitivity"]
    if sensitivity:
        items.append(f"{len(sensitivity)} sensitivity row{'s' if len(sensitivity) != 1 else ''} "
                     "(another protocol on the same model)")
    if not items:
        return ""
    return "Graded but not counted as the paper's claims: " + "; ".join(items) + "."


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
              + (f" Sensitivity row (not counted as the claim's verdict): {r['sensitivity']}."
                 if r.get("sensitivity") else "")
              + (f" {readings_words(r)}" if r.get("readings") else "") for r in line_rows]
    texts.append(f"Rule: {first['rule']}." + (f" Scope: {first['scope']}." if first.get("scope") else ""))
    body = "".join(f"<p>{inline_html(t)}</p>" for t in texts)
    return f'<details class="claim-details"><summary>paper, measured, rule</summary>{body}</details>'


def _model_cell(row: dict | None, column: str, premise: dict | None = None) -> str:
    if row is None:
        return '<span class="claim-absent" title="not measured on this model">—</span>'
    head = headline(row)
    parts = [f'<span class="verdict-cell" data-claim="{html.escape(row["id"])}" '
             f'data-part="{html.escape(part_of(row))}" '
             f'data-chapter="{html.escape(row["chapter"])}" data-variant="{html.escape(row.get("variant", ""))}" '
             f'data-verdict="{html.escape(row["verdict"])}">{badge_html(row["verdict"])} '
             f'<span class="verdict-number">{html.escape(number_text(row))}</span></span>']
    if column == "comparison":
        parts.append(f'<span class="verdict-model-note">{html.escape(short_model(row["model"]))}</span>')
    if part_of(row) == "sensitivity":
        parts.append('<span class="verdict-model-note verdict-sensitivity-note">sensitivity row: another '
                     "protocol on this model, not counted as the claim's verdict</span>")
    if premise is not None:
        parts.append(f'<span class="verdict-model-note verdict-premise-note">premise fails: '
                     f"{html.escape(premise['id'])} is refuted on this model</span>")
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


#: how a line's id is marked when its claim is not the paper's, or its row is not the claim's own
KIND_MARKS = {"premise": "premise", "book": "the book's", "cited": "cited"}


def line_label(row: dict) -> str:
    """A table line's label: the id, with the variant of a chosen-reading or sensitivity row and
    the kind of a claim that is not the paper's (``MHP (premise)``, ``C1S (the book's)``)."""
    marks = []
    if part_of(row) in ("chosen", "sensitivity"):
        marks.append(row["variant"] + (", sensitivity" if part_of(row) == "sensitivity" else ""))
    if claim_kind(row) in KIND_MARKS:
        marks.append(KIND_MARKS[claim_kind(row)])
    return row["id"] + (f" ({'; '.join(marks)})" if marks else "")


def chapter_table_html(rows: list[dict], chapter_uri: str | None) -> str:
    """One chapter's claims as a table: id (a link to the chapter's verdict; :func:`line_label`),
    the claim (what it rests on, the details toggle), what the paper reports (when the chapter's
    claims say), one column per model. A sensitivity row says so in its cell, and a conclusion
    whose premise is refuted on the same model and protocol says "premise fails"."""
    columns, lines = table_lines(rows)
    with_paper = any(r.get("paper_value") for r in rows)
    header = ["id", "claim", *(["paper"] if with_paper else []), *(_column_title(c, rows) for c in columns)]
    cells = []
    for line in lines:
        line_rows = list(line["rows"].values())
        first = line_rows[0]
        label = html.escape(line_label(first))
        ident = f'<a class="claim-id" href="{html.escape(chapter_uri)}#verdict">{label}</a>' \
            if chapter_uri else f'<span class="claim-id">{label}</span>'
        head = headline(first)
        claim = (f'<span class="claim-text">{inline_html(first["claim"])}</span>'
                 f'<span class="claim-rests">rests on: {inline_html(head["statistic"])}; rule '
                 f"{html.escape(rule_text(first))}</span>" + _details_html(line_rows))
        row_cells = [ident, claim]
        if with_paper:
            row_cells.append(f'<span class="claim-paper">{inline_html(first.get("paper_value") or "—")}</span>')
        row_cells += [_model_cell(line["rows"].get(c), c,
                                  premise_fails(rows, line["rows"][c]) if c in line["rows"] else None)
                      for c in columns]
        cells.append(row_cells)
    kinds = ["id-column", "claim-column", *(["paper-column"] if with_paper else []),
             *(["model-column"] * len(columns))]
    return html_table(header, cells, column_classes=kinds,
                      classes=("claims-ledger", f"claims-models-{len(columns)}",
                               *(["with-paper"] if with_paper else [])))


def chapter_counts_html(rows: list[dict]) -> str:
    """A chapter's rows per verdict, its sensitivity rows counted apart (they are not verdicts)."""
    graded = [r for r in rows if part_of(r) != "sensitivity"]
    counts = Counter(r["verdict"] for r in graded)
    summary = ", ".join(f"{counts[v]} {v}" for v in verdict_order(graded) if counts[v])
    apart = len(rows) - len(graded)
    more = (f"; and {apart} sensitivity row{'s' if apart != 1 else ''} (another protocol on the "
            "same model, not verdicts)") if apart else ""
    return (f'<p class="verdict-chapter-counts">{len(graded)} rows: {html.escape(summary or "none")}'
            f"{html.escape(more)}.</p>")


def bottom_line_html(rows: list[dict]) -> str:
    """The bottom-line paragraph and the paper's counts, as HTML."""
    paper = paper_rows(rows)
    return (f'<p class="bottom-line">{inline_html(bottom_line(rows))}</p>'
            + counts_html(paper, f"{len(paper)} claims of the paper", "paper"))


def book_counts_html(rows: list[dict]) -> str:
    """The rows not counted as the paper's claims, counted by group (:data:`APART`: premises, the
    book's own, other papers' claims, chosen readings, sensitivity rows, control replays)."""
    parts = []
    for part, label in APART.items():
        chosen = [r for r in rows if part_of(r) == part]
        if chosen:
            parts.append(counts_html(chosen, f"{len(chosen)} row{'s' if len(chosen) != 1 else ''} "
                                             f"of {label}", part))
    return "".join(parts) or "<p>Every row of this build is counted as a claim of the paper.</p>"


def legend_html() -> str:
    """Every verdict defined once, in the registry's order, as a definition list
    (:data:`normlimits.claims.rules.VERDICT_DEFINITIONS`), each term with its badge."""
    items = "".join(f'<dt data-verdict="{html.escape(v)}">{badge_html(v)}</dt>'
                    f"<dd>{inline_html(VERDICT_DEFINITIONS[v])}</dd>" for v in VERDICTS)
    return f'<dl class="verdict-legend">{items}</dl>'


# --- Sphinx ------------------------------------------------------------------------------------

class ledger_placeholder(nodes.General, nodes.Element):
    """Replaced once every chapter has executed: ``kind`` is ``bottom-line``, ``counts`` (the
    rows not counted as the paper's), ``legend``, ``download`` or ``chapter`` (with ``chapter``)."""


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


class VerdictLegendDirective(SphinxDirective):
    """``{verdict-legend}``: every verdict defined once (:func:`legend_html`)."""

    def run(self):
        return [ledger_placeholder(kind="legend")]


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
    elif kind == "legend":
        text = legend_html()
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
        text = chapter_counts_html(chapter_rows) + chapter_table_html(chapter_rows, uri)
    return nodes.raw("", text, format="html")


def _resolve(app, doctree, fromdocname):
    placeholders = list(doctree.findall(ledger_placeholder))
    if not placeholders:
        return
    rows = _rows(app)
    if any(p["kind"] not in ("bottom-line", "legend") for p in placeholders):
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
    app.add_directive("verdict-legend", VerdictLegendDirective)
    app.connect("env-get-outdated", _outdated)
    app.connect("doctree-resolved", _resolve)
    app.connect("build-finished", _write_json)
    return {"version": "3", "parallel_read_safe": True, "parallel_write_safe": True}
