"""Sphinx extension: the bottom line and the Verdicts page, built from the chapters' ledger rows.

The directives below are filled once every chapter has executed:

* ``{claims-scoreboard}`` (first on the Verdicts page and on the landing page): one compact grid,
  one line per claim of the paper (:func:`paper_rows`) grouped by chapter, its id and few words,
  what the paper reports, and one cell per model coloured by its verdict, with the headline number
  and the rule on hover, linking to the chapter's verdict (:func:`scoreboard_html`).
* ``{claims-bottom-line}`` (under the scoreboard): at most five sentences generated from the
  ledger (:func:`bottom_line`): how many of the paper's claims were graded on which model, how
  many per verdict, how many hold on each model, what is graded apart and not counted; then the
  count of the paper's claims per verdict. Only claims of kind ``paper``
  (:class:`normlimits.claims.Claim`), each on its own row, are counted: premises, the book's own
  results, other papers' claims, replays on control models, chosen-reading rows and sensitivity
  rows (another protocol on the same model) are counted apart.
* ``{verdict-legend}``: every verdict defined once (:data:`normlimits.claims.rules.VERDICT_DEFINITIONS`),
  placed directly below the scoreboard, before the tables.
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
from normlimits.claims.rules import VERDICT_DEFINITIONS, plain_text
from normlimits.core.markup import html_table, inline_html, significant, units_of, with_interval
from normlimits.core.cache import atomic_write_json
from normlimits.book import timings

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
    "gemma3-270m": "Gemma 3 270M, a second real pretrained family (not the paper's GPT-2 124M)",
    "standin": "the stand-in, a small GPT-2 trained here on the corpus (not the paper's model)",
    "standin-rope": "the RoPE stand-in, a small Llama trained here (not the paper's model)",
    "gpt2-random": "GPT-2 124M's architecture with random weights (timing only)",
}


#: a model setting's short name, used wherever a sentence names a model again
MODEL_NAMES = {"gpt2": "GPT-2 124M", "smollm2-135m": "SmolLM2-135M", "gemma3-270m": "Gemma 3 270M",
               "standin": "the stand-in",
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
    "control": "the paper's claims replayed on the book's other models, the stand-in and the other "
               "real family (the other model columns of the tables)",
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
    """The bottom line, generated from the ledger, in at most five sentences (the scoreboard,
    :func:`scoreboard_html`, lists the claims): how many claims of the paper (kind ``paper``, each
    on its own row: :func:`paper_rows`) were graded on which model; how many per verdict; how
    many hold on each model of the scoreboard (:func:`holds_sentence`, with how many replays keep
    their verdict); what is graded but not counted (premises, with "premise fails" where one is
    refuted; the book's own results; other papers' claims; sensitivity rows); and which counted
    claims name GPT-2's own measurements (the registry's ``about``). MyST-like text (``$math$``,
    ``**bold**``) for :func:`normlimits.core.markup.inline_html`."""
    paper = paper_rows(rows)
    if not paper:
        return "No claim of the paper was graded in this build."
    by_model = Counter(model_words(r["model"]) for r in paper)
    where = _join([m + (f" ({n} of them)" if len(by_model) > 1 else "")
                   for m, n in by_model.most_common()])
    parts = [f"**Bottom line.** This build graded {len(paper)} claims of the paper on {where}.",
             verdict_counts_sentence(paper), holds_sentence(rows)]
    apart = _apart_sentence(rows)
    if apart:
        parts.append(apart)
    gpt2 = [r["id"] for r in paper if about_gpt2(r) and not on_paper_model(r)]
    if gpt2:
        parts.append(f"{_join(gpt2)} {'names' if len(gpt2) == 1 else 'name'} GPT-2's own measurements "
                     "and, measured here on another model, can be not reproduced but never refuted: "
                     f"{'its verdict is' if len(gpt2) == 1 else 'their verdicts are'} about that model.")
    return " ".join(parts)


def verdict_words(verdict: str, count: int) -> str:
    """``count`` claims' verdict in words (:data:`VERDICT_WORDS`): ``2 are refuted``."""
    one, many = VERDICT_WORDS.get(verdict, (f"is {verdict}", f"are {verdict}"))
    return f"{count} {one if count == 1 else many}"


def verdict_counts_sentence(paper: list[dict]) -> str:
    """One sentence counting the paper's claims (their own rows) per verdict, in the registry's
    order: ``Of these, **3 hold as stated** and **2 are refuted**.``"""
    counts = Counter(r["verdict"] for r in paper)
    return "Of these, " + _join([f"**{verdict_words(v, counts[v])}**"
                                 for v in verdict_order(paper) if counts[v]]) + "."


#: the verdicts by which a claim holds (as stated, or once its statement is repaired)
HOLDS = ("confirmed", "corrected")
#: the model settings of real pretrained families (trained by their authors, not here): a claim
#: graded on two of them is counted as holding on both, one or neither of them
REAL_FAMILIES = ("gpt2", "smollm2-135m", "gemma3-270m")


def holds_sentence(rows: list[dict]) -> str:
    """One sentence: on each model column of the scoreboard (:func:`scoreboard_lines`), how many
    of the claims shown there hold (:data:`HOLDS`), and how many of those replayed there from
    another model (control rows) keep the verdict of the claim's own row."""
    columns, groups = scoreboard_lines(rows)
    lines = [line for _, chapter_lines in groups for line in chapter_lines]
    items = []
    for i, column in enumerate(columns):
        cells = [(line_own(line), line["rows"][column]) for line in lines if column in line["rows"]]
        held = sum(row["verdict"] in HOLDS for _, row in cells)
        text = f"{held} of {len(cells)}" + (" hold as stated or once corrected" if i == 0 else "") \
            + f" on {model_name(column)}"
        replays = [(own, row) for own, row in cells if row is not own]
        if replays:
            kept = sum(row["verdict"] == own["verdict"] for own, row in replays)
            text += (f" ({kept} of the {len(replays)} replayed there by the same rules keep "
                     "their verdict)")
        items.append(text)
    return "Model by model, " + _join(items) + families_clause(columns, lines) + "."


def families_clause(columns: list[str], lines: list[dict]) -> str:
    """The end of :func:`holds_sentence` where the scoreboard has two or more real families
    (:data:`REAL_FAMILIES`): of the claims graded on every one of them, how many hold
    (:data:`HOLDS`) on all, on some and on none; an empty string otherwise."""
    real = [c for c in columns if model_setting(c) in REAL_FAMILIES]
    if len(real) < 2:
        return ""
    graded = [[line["rows"][c]["verdict"] in HOLDS for c in real]
              for line in lines if all(c in line["rows"] for c in real)]
    every = sum(all(held) for held in graded)
    none = sum(not any(held) for held in graded)
    which = _join([model_name(c) for c in real])
    words = ("both", "one", "neither") if len(real) == 2 else ("all", "some", "none")
    return (f"; of the {len(graded)} claims graded on {which}, {every} hold on {words[0]}, "
            f"{len(graded) - every - none} on {words[1]} and {none} on {words[2]}")


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
#: what separates a claim's id from its variant in the id cell: ``F3 · Moby-Dick``
VARIANT_SEPARATOR = " · "


def variant_label(row: dict) -> str:
    """What tells a row apart from the claim's other rows in the same column, in a few words:
    the text it was measured on (``corpus``: ``Moby-Dick``), else its variant without the model
    setting the column already names (``smollm2-135m on Moby-Dick`` -> ``Moby-Dick``,
    ``all heads``, ``chosen reading``); a sensitivity row whose variant is only its model says
    ``survey`` when its protocol is a survey, else ``another protocol``. Empty for a row without
    a variant, a replay whose variant is just its model (the column names it), and a comparison
    of two models (its cell names both)."""
    variant = (row.get("variant") or "").strip()
    if not variant or " against " in row["model"]:
        return ""
    if row.get("corpus"):
        return str(row["corpus"])
    setting = model_setting(row["model"])
    rest = variant
    if rest == setting:
        rest = ""
    elif rest.startswith(setting + " "):
        rest = re.sub(r"^on\s+", "", rest[len(setting) + 1:].strip())
    if not rest and part_of(row) == "sensitivity":
        rest = "survey" if "survey" in (row.get("sensitivity") or "") else "another protocol"
    return rest


def line_marks(row: dict) -> list[str]:
    """The marks under a line's id: ``sensitivity`` for a sensitivity row, and the kind of a
    claim that is not the paper's (``premise``, ``the book's``, ``cited``)."""
    marks = ["sensitivity"] if part_of(row) == "sensitivity" else []
    if claim_kind(row) in KIND_MARKS:
        marks.append(KIND_MARKS[claim_kind(row)])
    return marks


def line_label(row: dict) -> str:
    """A table line's label in plain text: the id, the variant that tells the line apart
    (:func:`variant_label`: ``F3 · Moby-Dick``, ``F2a · chosen reading``) and the marks
    (:func:`line_marks`) in parentheses (``MHP · all heads (sensitivity; premise)``,
    ``C1S (the book's)``)."""
    variant = variant_label(row)
    marks = line_marks(row)
    return (row["id"] + (VARIANT_SEPARATOR + variant if variant else "")
            + (f" ({'; '.join(marks)})" if marks else ""))


def line_label_html(row: dict, chapter_uri: str | None) -> str:
    """A table line's id cell: the id (linked to the chapter's verdict), `` · `` and the variant
    (class ``claim-variant``) on the same line, the marks below it (class ``claim-mark``): the
    same words as :func:`line_label`, laid out to wrap inside a narrow column."""
    variant = variant_label(row)
    marks = line_marks(row)
    return (_claim_id_html(row["id"], chapter_uri)
            + (f'<span class="claim-variant">{html.escape(VARIANT_SEPARATOR + variant)}</span>' if variant else "")
            + (f'<span class="claim-mark">({html.escape("; ".join(marks))})</span>' if marks else ""))


def chapter_table_html(rows: list[dict], chapter_uri: str | None) -> str:
    """One chapter's claims as a table (in a box that scrolls sideways should the table's
    narrowest layout be wider than the page): id (a link to the chapter's verdict, the variant
    and marks: :func:`line_label_html`),
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
        ident = line_label_html(first, chapter_uri)
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
    table = html_table(header, cells, column_classes=kinds,
                       classes=("claims-ledger", f"claims-models-{len(columns)}",
                                *(["with-paper"] if with_paper else [])))
    return f'<div class="ledger-box">{table}</div>'


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


def scoreboard_lines(rows: list[dict]) -> tuple[list[str], list[tuple[str, list[dict]]]]:
    """The scoreboard's layout: (model columns, [(chapter, lines)]). Each chapter's paper and
    control rows are laid out by :func:`table_lines`, and only the lines holding a claim's own row
    counted as the paper's (:func:`paper_rows`) are kept: one line per claim of the paper, its
    replays on the control models in the other columns; premises, the book's own and cited
    claims, chosen readings and sensitivity rows are not shown. The columns are every chapter's
    columns, in order of first appearance; chapters in the order of their rows."""
    shown = [r for r in rows if part_of(r) in ("paper", "control")]
    columns: list[str] = []
    groups = []
    for chapter in dict.fromkeys(r["chapter"] for r in paper_rows(rows)):
        chapter_columns, lines = table_lines([r for r in shown if r["chapter"] == chapter])
        columns += [c for c in chapter_columns if c not in columns]
        groups.append((chapter, [ln for ln in lines if any(part_of(r) == "paper" for r in ln["rows"].values())]))
    return columns, groups


def line_own(line: dict) -> dict:
    """A scoreboard line's own row: the claim's row counted as the paper's."""
    return next(r for r in line["rows"].values() if part_of(r) == "paper")


def _claim_id_html(label: str, chapter_uri: str | None) -> str:
    """A claim's id, linked to its chapter's verdict section when the chapter's page is known."""
    label = html.escape(label)
    return (f'<a class="claim-id" href="{html.escape(chapter_uri)}#verdict">{label}</a>'
            if chapter_uri else f'<span class="claim-id">{label}</span>')


def scoreboard_cell_html(row: dict | None, column: str, rows: list[dict], chapter_uri: str | None) -> str:
    """One scoreboard cell: a ``<td>`` of class ``scoreboard-cell`` and the verdict's class
    (:func:`css_verdict`), holding the verdict badge and the headline number (:func:`number_text`),
    "premise fails" where the claim's premise is refuted on that model, a ``title`` stating what
    the verdict rests on and the rule in plain text, and a link to the chapter's verdict; an
    empty cell (``scoreboard-absent``, "not run") where the claim was not run on that model."""
    if row is None:
        return (f'<td class="scoreboard-cell scoreboard-absent" data-model="{html.escape(column)}" '
                'title="not run on this model"><span aria-label="not run">—</span></td>')
    head = headline(row)
    premise = premise_fails(rows, row)
    title = (f"{row['verdict']} on {short_model(row['model'])}: rests on {plain_text(head['statistic'])}; "
             f"rule {rule_text(row)}. Rule: {plain_text(row['rule'])}"
             + (f" Premise fails: {premise['id']} is refuted on this model." if premise else ""))
    body = (badge_html(row["verdict"]) + f' <span class="verdict-number">{html.escape(number_text(row))}</span>'
            + ('<span class="scoreboard-note">premise fails</span>' if premise else ""))
    link = (f'<a class="scoreboard-link" href="{html.escape(chapter_uri)}#verdict">{body}</a>'
            if chapter_uri else f'<span class="scoreboard-link">{body}</span>')
    return (f'<td class="scoreboard-cell {css_verdict(row["verdict"])}" data-claim="{html.escape(row["id"])}" '
            f'data-model="{html.escape(column)}" data-verdict="{html.escape(row["verdict"])}" '
            f'title="{html.escape(title, quote=True)}">{link}</td>')


def scoreboard_claim_html(own: dict, chapter_uri: str | None) -> str:
    """A scoreboard line's first cell (a row header): the claim's id, linked to its chapter's
    verdict, its few words, and "about GPT-2" when it names GPT-2's own measurements and was
    measured on another model (there it can be not reproduced, never refuted)."""
    gpt2 = ('<span class="scoreboard-note" title="names GPT-2\'s own measurements: measured on another '
            'model it can be not reproduced, never refuted">about GPT-2</span>'
            if about_gpt2(own) and not on_paper_model(own) else "")
    return (f'<th scope="row" class="scoreboard-claim">{_claim_id_html(own["id"], chapter_uri)} '
            f'<span class="claim-text">{inline_html(own["claim"])}</span>{gpt2}</th>')


def scoreboard_html(rows: list[dict], chapter_uri=lambda chapter: None, chapter_title=lambda chapter: chapter,
                    chapter_lines: bool = True) -> str:
    """The scoreboard: one compact table (class ``claims-scoreboard``, in a box that scrolls
    sideways on a narrow screen), one ``<tbody>`` per chapter under a thin header line with the
    chapter's title (``chapter_title(chapter)``; none with ``chapter_lines=False``), one line per claim of the paper
    (:func:`scoreboard_lines`): the claim (:func:`scoreboard_claim_html`), what the paper reports,
    and one cell per model column (:func:`scoreboard_cell_html`). ``chapter_uri(chapter)`` is the
    relative link to a chapter's page, or None. The table declares its column count
    (``data-columns``)."""
    columns, groups = scoreboard_lines(rows)
    if not groups:
        return '<p class="scoreboard-empty">No claim of the paper was graded in this build.</p>'
    width = 2 + len(columns)
    head = ('<th scope="col" class="claim-column">claim</th><th scope="col" class="paper-column">paper</th>'
            + "".join(f'<th scope="col" class="model-column">{html.escape(_column_title(c, rows))}</th>'
                      for c in columns))
    bodies = []
    for chapter, lines in groups:
        uri = chapter_uri(chapter)
        title = html.escape(chapter_title(chapter))
        name = f'<a href="{html.escape(uri)}">{title}</a>' if uri else title
        body = ([f'<tr class="scoreboard-chapter"><th scope="rowgroup" colspan="{width}">{name}</th></tr>']
                if chapter_lines else [])
        for line in lines:
            own = line_own(line)
            paper = f'<td class="scoreboard-paper">{inline_html(own.get("paper_value") or "—")}</td>'
            cells = "".join(scoreboard_cell_html(line["rows"].get(c), c, rows, uri) for c in columns)
            body.append(f'<tr data-claim="{html.escape(own["id"])}">'
                        f"{scoreboard_claim_html(own, uri)}{paper}{cells}</tr>")
        bodies.append(f'<tbody data-chapter="{html.escape(chapter)}">{"".join(body)}</tbody>')
    return (f'<div class="scoreboard-box"><table class="claims-scoreboard scoreboard-models-{len(columns)}" '
            f'data-columns="{width}"><thead><tr>{head}</tr></thead>{"".join(bodies)}</table></div>')


def chapter_card_html(rows: list[dict], chapter: str, chapter_uri: str | None,
                      verdicts_uri: str | None) -> str:
    """A chapter's verdict card (class ``verdict-card``): one line per claim of the paper graded
    in ``chapter``, what the paper says, and each model's verdict and number, as on the
    scoreboard (:func:`scoreboard_html` on the chapter's own rows: the control models' replays
    included), above one sentence that points to the chapter's verdict section and to the
    legend. A chapter with no claim of the paper says so."""
    own = [r for r in rows if r["chapter"] == chapter]
    if not paper_rows(own):
        return ('<div class="verdict-card verdict-card-empty"><p>No claim of the paper is graded in '
                "this chapter in this build.</p></div>")
    table = scoreboard_html(own, lambda _: chapter_uri, chapter_lines=False)   # one chapter: no header line
    lead = ('<p class="verdict-card-lead"><strong>At a glance.</strong> The paper\'s claims in this '
            "chapter, what the paper reports, and the verdict on each model by the claim's registered "
            f'rule (hover a cell for the rule). The evidence is in <a href="{html.escape(chapter_uri or "")}#verdict">'
            f'the verdict section</a> at the end; every verdict is defined in <a href="{html.escape(verdicts_uri or "")}">'
            "the Verdicts page's legend</a>.</p>")
    return f'<div class="verdict-card">{lead}{table}</div>'


# --- Sphinx ------------------------------------------------------------------------------------

class ledger_placeholder(nodes.General, nodes.Element):
    """Replaced once every chapter has executed: ``kind`` is ``scoreboard``, ``bottom-line``, ``counts`` (the
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


class ScoreboardDirective(SphinxDirective):
    """``{claims-scoreboard}``: one line per claim of the paper, one cell per model (:func:`scoreboard_html`)."""

    def run(self):
        return [ledger_placeholder(kind="scoreboard")]


class ChapterVerdictsDirective(SphinxDirective):
    """``{chapter-verdicts}``: the verdict card atop a chapter: its own lines of the scoreboard
    (:func:`chapter_card_html`), filled once every chapter has executed."""

    def run(self):
        return [ledger_placeholder(kind="card", chapter=Path(self.env.docname).name)]


class VerdictLegendDirective(SphinxDirective):
    """``{verdict-legend}``: every verdict defined once (:func:`legend_html`)."""

    def run(self):
        return [ledger_placeholder(kind="legend")]


class BuildTimingsDirective(SphinxDirective):
    """``{build-timings}``: each chapter's wall time against its forward passes, as recorded beside
    the ledger (:func:`normlimits.book.timings.floor_html`), filled once every chapter has executed."""

    def run(self):
        return [ledger_placeholder(kind="timings")]


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


def _chapter_uri(app, fromdocname: str, chapter: str) -> str | None:
    """The relative link from page ``fromdocname`` to a chapter's page, or None if not built."""
    doc = next((d for d in app.env.found_docs if Path(d).name == chapter), None)
    return app.builder.get_relative_uri(fromdocname, doc) if doc else None


def _fill(node, rows: list[dict], app, fromdocname: str) -> nodes.Node:
    kind = node["kind"]
    if kind == "bottom-line":
        text = bottom_line_html(rows)
    elif kind == "counts":
        text = book_counts_html(rows)
    elif kind == "legend":
        text = legend_html()
    elif kind == "timings":
        folder = ledger.ledger_dir(_root(app))
        text = timings.floor_html(timings.read_timings(folder), timings.read_execution(folder))
    elif kind == "download":
        text = (f'<p class="ledger-download">Every row below, with every criterion, value and '
                f'rule, in one file: <a href="{html.escape(_uri(app, fromdocname, LEDGER_FILE))}" '
                f'download>{LEDGER_FILE}</a> ({len(rows)} rows; re-grade them with '
                f"<code>normlimits.claims.regrade</code>).</p>")
    elif kind == "card":
        chapter = node["chapter"]
        text = chapter_card_html(rows, chapter, _chapter_uri(app, fromdocname, chapter),
                                 _chapter_uri(app, fromdocname, "verdicts"))
    elif kind == "scoreboard":
        text = scoreboard_html(rows, lambda chapter: _chapter_uri(app, fromdocname, chapter),
                               lambda chapter: _source_title(app.env, chapter))
    else:
        chapter = node["chapter"]
        chapter_rows = [r for r in rows if r["chapter"] == chapter]
        if not chapter_rows:
            return nodes.paragraph(text="No verdicts recorded for this chapter in this build.")
        uri = _chapter_uri(app, fromdocname, chapter)
        text = chapter_counts_html(chapter_rows) + chapter_table_html(chapter_rows, uri)
    return nodes.raw("", text, format="html")


def _resolve(app, doctree, fromdocname):
    placeholders = list(doctree.findall(ledger_placeholder))
    if not placeholders:
        return
    rows = _rows(app)
    if any(p["kind"] not in ("scoreboard", "bottom-line", "legend", "card", "timings") for p in placeholders):
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
    """Documents that hold a ledger directive (the Verdicts page, the landing page): the
    tables, the scoreboard, the bottom line or the build's timings."""
    found = []
    for doc in env.found_docs:
        try:
            text = Path(env.doc2path(doc)).read_text(encoding="utf-8", errors="replace")
        except OSError:
            continue
        if any(name in text for name in ("{claims-ledger}", "{claims-bottom-line}", "{claims-scoreboard}",
                                         "{build-timings}")):
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
    app.add_directive("claims-scoreboard", ScoreboardDirective)
    app.add_directive("verdict-legend", VerdictLegendDirective)
    app.add_directive("chapter-verdicts", ChapterVerdictsDirective)
    app.add_directive("build-timings", BuildTimingsDirective)
    app.connect("env-get-outdated", _outdated)
    app.connect("doctree-resolved", _resolve)
    app.connect("build-finished", _write_json)
    return {"version": "4", "parallel_read_safe": True, "parallel_write_safe": True}
