"""The claim registry: every claim of the paper the book grades, with its grading rule.

One :class:`Claim` per claim: its id, the chapter that grades it, the paper's section, the claim
in a few words, the paper's wording, the scope of the verdict (e.g. "for L ≤ 1024" when the claim
is asymptotic) and its :class:`~normlimits.claims.rules.Rule`. The definitions live in one module
per chapter of this package (``claims/vanishing.py``, ``claims/distances.py``, ...); this module
collects them into :data:`REGISTRY`.

Chapters record a verdict with one call::

    claims.record(ctx, "NU", {"exponent": -0.41, "entropy": 0.83}, measured="...")

which grades the values by the registered rule (a chapter cannot pass a verdict of its own),
writes the ledger row (:mod:`normlimits.claims.ledger`), glues ``verdict_<id>`` for the prose and
returns a :class:`Graded` that displays the rule, the values and the verdict on the page.
"""

from __future__ import annotations

import html
import importlib
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from normlimits.claims import ledger, rules
from normlimits.core.markup import html_table, inline_html, units_of, with_interval
from normlimits.claims.base import ABOUT, CLAIM_KINDS, Claim
from normlimits.claims.rules import (
    KINDS, OPS, VERDICTS, Criterion, Rule, describe_outcomes, plain_text, regrade)

__all__ = ["Claim", "Criterion", "Rule", "Graded", "REGISTRY", "VERDICTS", "OPS", "KINDS",
           "CLAIM_KINDS", "ABOUT", "check_gpt2_policy", "scope_reason",
           "CHAPTER_MODULES", "claim", "expected_claims", "make_row", "record", "record_variant",
           "regrade", "plain_text", "describe_outcomes", "glue_key", "readings_words",
           "selection_words", "ONE_WINDOW", "why_unresampled", "narrowing_rows"]

#: chapters whose claims are registered, in book order (a module of this package each)
CHAPTER_MODULES = ("vanishing", "distances", "separability", "gradients", "alternatives",
                   "architectures")


def _collect() -> dict[str, Claim]:
    registry: dict[str, Claim] = {}
    for chapter in CHAPTER_MODULES:
        # every listed chapter must exist: a missing module (a typo, a file not committed) would
        # otherwise drop that chapter's claims from the registry, the ledger checks and the Verdicts page
        module = importlib.import_module(f"{__name__}.{chapter}")
        for item in module.CLAIMS:
            if item.id in registry:
                raise ValueError(f"claim id {item.id!r} is registered twice")
            if item.chapter != chapter:
                raise ValueError(f"claim {item.id!r} is defined in claims/{chapter}.py but names "
                                 f"chapter {item.chapter!r}")
            registry[item.id] = item
    for item in registry.values():
        if item.premise and item.premise not in registry:
            raise ValueError(f"claim {item.id!r} names premise {item.premise!r}, which is not registered")
        check_gpt2_policy(item)
    return registry


#: the identity criterion a claim about GPT-2's measurements carries: 1 on the paper's GPT-2 124M
PAPER_MODEL_KEY = "paper_model"


def check_gpt2_policy(item: Claim) -> None:
    """The one policy for claims that name GPT-2's measurements (``about="gpt2"``): graded on
    another model they are "not reproduced", never "refuted". The rule must therefore carry the
    identity criterion ``paper_model`` (``== 1``: measured on GPT-2 124M), and no pass/fail
    assignment of its criteria with ``paper_model`` failing may give "refuted". A general claim
    needs no such criterion. ValueError naming the claim and the assignment otherwise."""
    if item.about != "gpt2":
        return
    rule = item.rule
    keys = [c.key for c in rule.criteria]
    if PAPER_MODEL_KEY not in keys:
        raise ValueError(f"claim {item.id!r} is about GPT-2's measurements but its rule has no "
                         f"{PAPER_MODEL_KEY!r} criterion: add one (identity, == 1) so that another "
                         "model's data can give 'not reproduced' but never 'refuted'")
    import itertools

    others = [k for k in keys if k != PAPER_MODEL_KEY]
    for bits in itertools.product((True, False), repeat=len(others)):
        results = {**dict(zip(others, bits)), PAPER_MODEL_KEY: False}
        if rule._verdict(results) == "refuted":
            passing = [k for k, b in results.items() if b]
            raise ValueError(f"claim {item.id!r} is about GPT-2's measurements, yet off GPT-2 its rule "
                             f"gives 'refuted' when {passing or 'no criterion'} pass: only "
                             "'not reproduced' may grade another model")


#: every registered claim by id, in book order
REGISTRY: dict[str, Claim] = _collect()


def claim(claim_id: str) -> Claim:
    """The registered claim ``claim_id`` (KeyError with the known ids otherwise)."""
    try:
        return REGISTRY[claim_id]
    except KeyError:
        raise KeyError(f"no claim {claim_id!r} is registered; known: {sorted(REGISTRY)}") from None


def expected_claims(chapter: str) -> tuple[str, ...]:
    """The ids the chapter ``chapter`` must record, in registry order."""
    return tuple(c.id for c in REGISTRY.values() if c.chapter == chapter)


def glue_key(claim_id: str, variant: str | None = None) -> str:
    """The glue key of a verdict: ``verdict_<id>`` (``verdict_<id>_<variant>``), identifier-safe."""
    import re

    key = f"verdict_{claim_id}" + (f"_{variant}" if variant else "")
    return re.sub(r"[^A-Za-z0-9_]", "_", key)


def _number(value) -> str:
    return "not measured" if value is None else f"{value:.4g}"


def readings_words(row: Mapping) -> str:
    """A row's ``readings`` in one sentence (MyST): each reading tried with the verdict its values
    get and the headline value, the primary marked; '' when the row has none. E.g. ``Under each
    reading tried: Σ‖αᵢxᵢ − s‖ ... (primary): not reproduced (close = 32.2); ...``."""
    found = row.get("readings") or []
    if not found:
        return ""
    key = row["headline"]
    items = [f"{r['reading']}{' (primary)' if r.get('primary') else ''}: {r['verdict']} "
             f"({key} = {_number(r['values'].get(key)) if key not in r.get('intervals', {}) else with_interval(r['values'][key], r['intervals'][key], 4, **units_of(row))})"
             for r in found]
    return "Under each reading tried: " + "; ".join(items) + "."


def selection_words(row: Mapping) -> str:
    """A chosen-reading row's multiple comparison in words: ``reproduces under j of k readings
    tried: <labels>; graded on the first`` ('' for a row without ``selection``)."""
    sel = row.get("selection")
    if not sel:
        return ""
    found = sel["reproducing"]
    return (f"reproduces under {len(found)} of {sel['tried']} readings tried: {'; '.join(found)}; "
            "graded on the first (a reading chosen after trying several, not the book's primary "
            "verdict)")


@dataclass(frozen=True)
class Graded:
    """A recorded verdict: the ledger row, displayed as the rule with its values on the page."""

    row: dict

    @property
    def verdict(self) -> str:
        return self.row["verdict"]

    def _repr_html_(self) -> str:
        """The verdict, then one table row per criterion (HTML written from the row's data, so
        math holding ``|``, ``*`` or ``_`` cannot split a cell), then the rule in words."""
        row = self.row
        label = row["id"] + (f" ({row['variant']})" if row.get("variant") else "")
        verdict = row["verdict"]
        css = verdict.replace(" ", "-")
        badge = f'<span class="verdict-badge verdict-{css}">{html.escape(verdict)}</span>'
        cells = []
        for c in row["criteria"]:
            crit = Criterion(c["key"], c["statistic"], c["op"],
                             tuple(c["threshold"]) if isinstance(c["threshold"], list) else c["threshold"],
                             c["kind"])
            kind = f" ({c['kind']})" if c["kind"] != "measurement" else ""
            passed = {True: "yes", False: "no", None: "not measured"}.get(c["passed"], str(c["passed"]))
            if "decision" in c:            # decided on the whole interval (issue 31)
                passed = {"pass": "yes", "fail": "no", "undecided": "undecided"}[c["decision"]]
            cells.append([f"<code>{html.escape(c['key'])}</code>{kind}", inline_html(c["statistic"]),
                          html.escape(with_interval(c["value"], c.get("interval"), 4, **units_of(row))),
                          html.escape(crit.describe()), html.escape(passed)])
        parts = [f'<div class="graded-claim"><p><strong>{html.escape(label)}:</strong> {badge} '
                 f"{inline_html(row['claim'])}</p>",
                 html_table(("criterion", "statistic", "measured", "rule", "passes"), cells,
                            classes=("criterion-table",)),
                 f"<p><em>Rule:</em> {inline_html(row['rule'])} "
                 f"({inline_html(describe_outcomes(row['outcomes']))}.)</p>"]
        if row.get("scope"):
            parts.append(f"<p><em>Scope:</em> {inline_html(row['scope'])}.</p>")
        if row.get("reason"):
            parts.append(f"<p><em>Not testable here:</em> {inline_html(row['reason'])}</p>")
        if row.get("sensitivity"):
            parts.append(f"<p><em>Sensitivity row</em> (not counted as the claim's verdict): "
                         f"{inline_html(row['sensitivity'])}</p>")
        if row.get("unresampled"):
            parts.append(f"<p><em>No interval:</em> {inline_html(row['unresampled'])}</p>")
        if row.get("selection"):
            parts.append(f"<p><em>Chosen reading:</em> {inline_html(selection_words(row))}.</p>")
        if row.get("readings"):
            parts.append(f"<p><em>Readings:</em> {inline_html(readings_words(row))}</p>")
        return "".join(parts) + "</div>"

    def __repr__(self) -> str:
        return f"{self.row['id']}: {self.verdict} ({self.row['statistic']} = {self.row['value']})"


def make_row(claim_id: str, values: Mapping[str, object], measured: str, *, chapter: str,
             model: str, variant: str | None = None, reason: str | None = None,
             reading: str | None = None, readings: list[dict] | None = None,
             selection: Mapping | None = None, intervals: Mapping | None = None,
             corpus: str | None = None, unresampled: str | None = None,
             sensitivity: str | None = None) -> dict:
    """The ledger row of claim ``claim_id`` graded on ``values`` by its registered rule, validated
    (:func:`normlimits.claims.ledger.validate_row`) but not written anywhere.

    ``chapter``: who measured it (a chapter, or e.g. ``audit``); ``model``: the model the values
    were measured on; the other arguments as in :func:`record`. A row that is not testable because
    a scope criterion failed gets the reason from :func:`scope_reason` unless ``reason`` is given.
    """
    item = claim(claim_id)
    if not model:
        raise ValueError(f"claim {claim_id}: name the model the values were measured on (model=...)")
    if not measured.strip():
        raise ValueError(f"claim {claim_id}: say what was measured (measured=...)")
    graded = item.rule.to_row(values, intervals)
    if graded["verdict"] == "not testable" and not (reason and reason.strip()):
        missing = [c["key"] for c in graded["criteria"] if c["value"] is None]
        if missing:
            raise ValueError(f"claim {claim_id}: criteria {missing} have no value; pass reason=... "
                             "saying why they cannot be measured in this build")
        reason = scope_reason(item.rule, values, intervals)
    row = {"id": item.id, "chapter": chapter, "home": item.chapter, "section": item.section,
           "claim": item.claim, "claim_text": rules.plain_text(item.claim), "paper": item.paper,
           "paper_text": rules.plain_text(item.paper), "measured": measured,
           "measured_text": rules.plain_text(measured), "model": model, "scope": item.scope,
           "premise": item.premise, "paper_value": item.paper_value, "claim_kind": item.kind,
           "about": item.about, **graded}
    if variant:
        row["variant"] = variant
    if sensitivity is not None:
        if not sensitivity.strip() or not variant:
            raise ValueError(f"claim {claim_id}: sensitivity= says which protocol a labelled row "
                             "varies (e.g. 'one-window survey'); give it a sentence and a variant")
        row["sensitivity"] = sensitivity
    if reason:
        row["reason"] = reason
    if reading:
        row["reading"] = reading
    if readings:
        row["readings"] = [dict(r) for r in readings]
    if selection:
        row["selection"] = {"tried": int(selection["tried"]),
                            "reproducing": list(selection["reproducing"])}
    if corpus:
        row["corpus"] = corpus
    if unresampled is not None:
        if intervals or not unresampled.strip():
            raise ValueError(f"claim {claim_id}: unresampled= says why a row has no interval; give it "
                             "a sentence, and only on a row without intervals")
        row["unresampled"] = unresampled
    resampling = _resampling(claim_id, intervals)
    if resampling:
        row["resampling"] = resampling
    return ledger.validate_row(row)


def scope_reason(rule: Rule, values: Mapping[str, object], intervals: Mapping | None = None) -> str:
    """Why a claim is not testable on data outside its scope: each failing scope criterion with
    its value and the range the claim needs, e.g. "outside the claim's scope: share of rows with
    L > e^(2Δ/T) is 0 (the claim applies only where it is ≥ 0.5)"."""
    failed = rule.out_of_scope(values, intervals)
    if not failed:
        raise ValueError("no scope criterion fails: the verdict is not 'not testable' for lack of scope")
    parts = [f"{plain_text(c.statistic)} is {float(values[c.key]):.3g} (the claim applies only where "
             f"it is {c.describe()})" for c in failed]
    return "outside the claim's scope: " + "; ".join(parts) + "."


def recorded_intervals(row: Mapping) -> dict:
    """The criterion intervals a ledger row records, as :class:`normlimits.core.bootstrap.Interval`
    objects with the row's ``resampling`` (what :func:`record` takes as ``intervals``, so a row
    measured elsewhere, by the audit say, is recorded again with the uncertainty it was graded
    with); empty for a row without intervals."""
    from normlimits.core.bootstrap import Interval

    resampling = row.get("resampling")
    if not resampling:
        return {}
    how = {k: resampling[k] for k in ("unit", "n", "resamples", "level", "seed", "method")}
    return {c["key"]: Interval(c["interval"][0], c["interval"][1], **how)
            for c in row["criteria"] if "interval" in c}


def _resampling(claim_id: str, intervals: Mapping | None) -> dict | None:
    """The one ``resampling`` block of a row's intervals (every interval of a row comes from the
    same resampling: :class:`normlimits.core.bootstrap.Interval`); None without intervals."""
    if not intervals:
        return None
    blocks = []
    for key, interval in intervals.items():
        if not hasattr(interval, "resampling"):
            raise ValueError(f"claim {claim_id}: the interval of {key!r} must be a "
                             "normlimits.core.bootstrap.Interval (it says how it was computed)")
        blocks.append(interval.resampling())
    if any(b != blocks[0] for b in blocks):
        raise ValueError(f"claim {claim_id}: the intervals of one row come from different "
                         f"resamplings {blocks}; compute them over the same units and settings")
    return blocks[0]


#: why a row graded on measurements has no interval when its chapter (or the audit) ran on one
#: corpus window (``NORMLIMITS_WINDOWS=1``): :func:`record` says so by itself
ONE_WINDOW = "measured on one window: there is no unit to resample"


def why_unresampled(claim_id: str, intervals: Mapping | None, reason: str | None,
                    why: str = ONE_WINDOW) -> str | None:
    """``why`` for a row of ``claim_id`` that needs a reason for having no interval (graded, by a
    rule with a measurement criterion, without intervals), else None: what ``unresampled`` gets
    where the caller knows the cause (:func:`record` on one window; the audit)."""
    measures = any(c.kind == "measurement" for c in claim(claim_id).rule.criteria)
    return None if intervals or reason or not measures else why


def record(ctx, claim_id: str, values: Mapping[str, object], measured: str, *,
           variant: str | None = None, model: str | None = None, reason: str | None = None,
           reading: str | None = None, readings: list[dict] | None = None,
           selection: Mapping | None = None, intervals: Mapping | None = None,
           corpus: str | None = None, unresampled: str | None = None,
           sensitivity: str | None = None, glue: bool = True) -> Graded:
    """Grade ``values`` by claim ``claim_id``'s registered rule and write its ledger row.

    Args:
        ctx: the chapter context (``.chapter`` and ``.model_label``), or the chapter name.
        values: one number per criterion key of the rule (None or NaN: not measurable here; then
            ``reason`` is required and the verdict is "not testable").
        measured: what was measured, in a sentence with the numbers (MyST/``$math$`` allowed).
        variant: for several rows of one claim (e.g. one per model in the architectures chapter).
        model: the model the values were measured on (default: the chapter's).
        reading: which reading of an ambiguous formula the verdict rests on, if any.
        readings: the claim graded under each reading tried, the primary first
            (:func:`normlimits.experiments.reading_table.reading_grades`: ``[{"reading", "values", "verdict",
            "primary"}]``), so a verdict that turns on the reading shows every alternative.
        selection: only on a labelled variant graded on a reading chosen because it reproduces
            the figure: ``{"tried": k, "reproducing": [labels]}`` (the multiple comparison);
            :func:`normlimits.experiments.reading_table.gradings` gives both rows of such a claim.
        intervals: criterion key -> :class:`normlimits.core.bootstrap.Interval` of that statistic; a
            criterion then holds or fails only when its whole interval does, and a verdict an
            undecided criterion could change is "inconclusive" (:meth:`Rule.grade`).
        corpus: the text the windows came from, when it is not the book's corpus (a replication
            on another text or other windows; rows of one claim on one model are compared per
            corpus, :func:`normlimits.claims.ledger.inconsistent`).
        unresampled: on a row without intervals whose rule has measurement criteria, why there is
            none (one window, a fixed synthetic computation, a single seed): the ledger then says
            so instead of leaving the reader to guess (a book test requires one or the other).
            A chapter run on one window (``ctx.window_count == 1``) gets :data:`ONE_WINDOW` on
            such rows unless it says otherwise.
        sensitivity: on a labelled variant measured under another protocol than the claim's own
            row on the same model (a one-window survey, another aggregate), what that protocol
            is: the row is shown as a sensitivity row and never counted as the claim's verdict
            (a claim has one counted verdict per model).
        glue: also glue ``verdict_<id>`` (``verdict_<id>_<variant>``) for the chapter's prose.

    Returns the :class:`Graded` row (display it to show the rule on the page).
    """
    chapter = ctx if isinstance(ctx, str) else ctx.chapter
    model = model or (None if isinstance(ctx, str) else ctx.model_label)
    if unresampled is None and getattr(ctx, "window_count", None) == 1:
        unresampled = why_unresampled(claim_id, intervals, reason)
    row = make_row(claim_id, values, measured, chapter=chapter, model=model, variant=variant,
                   reason=reason, reading=reading, readings=readings, selection=selection,
                   intervals=intervals, corpus=corpus, unresampled=unresampled,
                   sensitivity=sensitivity)
    ledger.write_row(row)
    if glue:
        from normlimits.core.glued import glue as glue_value

        glue_value(glue_key(claim_id, variant), row["verdict"])
    return Graded(row)


def undecided_words(values: Mapping[str, Mapping], intervals: Mapping[str, Mapping],
                    half_intervals: Mapping[str, Mapping], *, on_threshold: str,
                    digits: int = 2) -> list[str]:
    """For every undecided criterion of an inconclusive claim (issue 31 item 3), a clause: its
    value and interval on all units, its interval on the first half of them, and roughly how many
    units would decide it (:func:`normlimits.core.bootstrap.units_to_decide`: the interval's reach
    towards the threshold shrinking as 1/sqrt(n)), or ``on_threshold`` when the value sits on the
    threshold itself.

    ``values``, ``intervals``, ``half_intervals``: claim id -> criterion key -> value /
    :class:`normlimits.core.bootstrap.Interval` (a claim with no intervals is skipped)."""
    import math

    from normlimits.core.bootstrap import units_to_decide

    parts = []
    for cid, ivs in intervals.items():
        v, rule = values[cid], claim(cid).rule
        if not ivs or rule.grade(v, ivs) != "inconclusive":
            continue
        for c in rule.criteria:
            if c.key not in ivs or c.decide(ivs[c.key]) != "undecided":
                continue
            iv, small = ivs[c.key], half_intervals.get(cid, {}).get(c.key)
            edge = (min(c.threshold, key=lambda t: abs(t - v[c.key])) if isinstance(c.threshold, tuple)
                    else c.threshold)
            need = units_to_decide(iv, v[c.key], edge)
            unit = iv.unit + "s"
            parts.append(
                f"{cid}'s criterion '{c.key}' is {v[c.key]:.{digits}f} [{iv.low:.{digits}f}, "
                f"{iv.high:.{digits}f}] on {iv.n} {unit}"
                + (f" and [{small.low:.{digits}f}, {small.high:.{digits}f}] on the first {small.n}; "
                   if small is not None else f" (too few {unit} for an interval on half of them); ")
                + (f"its value sits on the threshold {edge:g} itself ({on_threshold}), and no number "
                   f"of {unit} decides it under this rule" if need == math.inf else
                   f"if the interval narrows as 1/√n, about {need:.0f} {unit} would decide it"))
    return parts


def narrowing_rows(stages, undecided: Mapping[str, Sequence[str]], *, digits: int = 3) -> list[dict]:
    """How the intervals of undecided criteria narrow as units are added (issue 31 item 3): one
    row per (claim, criterion) of ``undecided`` (claim id -> criterion keys, e.g.
    :func:`undecided_criteria`), with, for every stage, the value and its interval ("v [low, high]",
    or the value alone where the stage has no interval) and the claim's verdict on that stage's
    values and intervals (by the registered rule).

    ``stages``: ``[(units, values, intervals), ...]`` in increasing ``units``; ``values`` and
    ``intervals``: claim id -> criterion key -> value / Interval, as :func:`undecided_words` takes
    them. A claim a stage did not grade (missing values) shows "-"."""
    out = []
    for cid, keys in undecided.items():
        rule = claim(cid).rule
        for key in keys:
            row = {"claim": cid, "criterion": key}
            for units, values, intervals in stages:
                v, ivs = values.get(cid), intervals.get(cid) or {}
                if v is None or v.get(key) is None:
                    row[f"{units} windows"] = row[f"verdict, {units}"] = "-"
                    continue
                iv = ivs.get(key)
                row[f"{units} windows"] = (f"{v[key]:.{digits}f}" if iv is None else
                                           f"{v[key]:.{digits}f} [{iv.low:.{digits}f}, {iv.high:.{digits}f}]")
                row[f"verdict, {units}"] = rule.grade(v, ivs)
            out.append(row)
    return out


def undecided_criteria(rows) -> dict[str, list[str]]:
    """``{claim id: [criterion keys]}``: the undecided criteria of the inconclusive rows among
    ``rows`` (ledger rows; a claim's own rows only, not its labelled variants)."""
    return {r["id"]: [c["key"] for c in r["criteria"] if c.get("decision") == "undecided"]
            for r in rows if not r.get("variant") and r["verdict"] == "inconclusive"
            and any(c.get("decision") == "undecided" for c in r["criteria"])}


def without_interval(rows) -> list[str]:
    """The rows among ``rows`` (ledger rows) that leave a reader guessing about their uncertainty:
    graded (not "not testable") by a rule with a measurement criterion, yet with no interval
    (no ``resampling``) and no ``unresampled`` reason. Returns ``"id (variant, model)"`` labels."""
    out = []
    for r in rows:
        measures = any(c["kind"] == "measurement" for c in r["criteria"])
        if measures and r["verdict"] != "not testable" and "resampling" not in r and not r.get("unresampled"):
            out.append(f"{r['id']} ({r.get('variant') or '-'}, {r['model']})")
    return out


def undecided_sentence(rows, half_intervals: Mapping[str, Mapping], *, on_threshold: str,
                       none: str) -> str:
    """:func:`undecided_words` for the inconclusive rows among ``rows`` (ledger rows), with the
    intervals they record and ``half_intervals`` (claim -> key -> Interval on the first half of the
    units), as one sentence; ``none`` when no row is inconclusive."""
    undecided = undecided_criteria(rows)
    if not undecided:
        return none
    own = {r["id"]: r for r in rows if not r.get("variant") and r["id"] in undecided}
    values = {cid: {c["key"]: c["value"] for c in r["criteria"]} for cid, r in own.items()}
    intervals = {cid: recorded_intervals(r) for cid, r in own.items()}
    parts = undecided_words(values, intervals, half_intervals, on_threshold=on_threshold)
    return "How many windows would decide it: " + "; ".join(parts) + "."


def registered_row(row: Mapping) -> dict:
    """The row the registered rule of ``row``'s claim gives for the row's own recorded values and
    criterion intervals: what a faithful recording of those statistics looks like (its rule,
    criteria with their decisions, outcomes, headline and verdict)."""
    criteria = row["criteria"]
    return claim(row["id"]).rule.to_row({c["key"]: c["value"] for c in criteria},
                                         {c["key"]: c["interval"] for c in criteria if "interval" in c})


def record_variant(chapter: str, row: Mapping, variant: str) -> dict:
    """Record ``row``, a ledger row measured elsewhere (a replica of the chapter on another model,
    :mod:`normlimits.book.replicas`), in ``chapter``'s ledger under ``variant``; returns the written row.

    The row must have been graded by its claim's registered rule: its rule, criteria, outcomes,
    headline and verdict are compared with the registered rule applied to its own values, so a
    replayed row cannot carry a verdict the registry does not give. A row that already names a
    variant keeps it, joined to ``variant`` (``"a; b"``).
    """
    if not str(variant).strip():
        raise ValueError(f"claim {row.get('id')!r}: a recorded variant needs a name")
    registered = registered_row(row)
    for name in ("rule", "criteria", "outcomes", "headline", "verdict"):
        if registered[name] != row[name]:
            raise ValueError(f"claim {row['id']}: the row's {name} is not what the registered rule "
                             "gives for its values; it was graded by another rule")
    label = f"{row['variant']}; {variant}" if row.get("variant") else variant
    return ledger.write_row({**row, "chapter": chapter, "variant": label})


def collect(directory: Path, chapters: list[str]) -> list[dict]:
    """All rows of ``chapters`` (in that order; within a chapter in registry order, then variant)."""
    order = {cid: i for i, cid in enumerate(REGISTRY)}
    rows: list[dict] = []
    for chapter in chapters:
        found = ledger.read_rows(Path(directory) / f"{chapter}.json")
        rows.extend(sorted(found, key=lambda r: (order.get(r["id"], len(order)), r.get("variant", ""))))
    return rows


def missing_claims(rows: list[dict], chapters: list[str]) -> list[str]:
    """Registered claim ids of ``chapters`` that have no row."""
    have = {(r["chapter"], r["id"]) for r in rows}
    return [f"{ch}:{cid}" for ch in chapters for cid in expected_claims(ch) if (ch, cid) not in have]
