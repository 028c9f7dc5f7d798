"""The reading-sensitivity table: each plausible reading of the paper's Eq. (7) against Figure 2.

A *reading* fixes everything the paper leaves open about its distance (:class:`Reading`): the
form (:data:`normlimits.metrics.readings.FORMS`: sum of norms of ``alpha_i x_i - s``, of ``x_i - s``,
weighted by ``alpha_i``, or the norm of the sum), what ``x_i`` is
(:data:`normlimits.metrics.readings.VECTORS`), the aggregation over query positions (the paper's
token-mean over every position, or the last row alone) and the expectation (Monte Carlo, or the
closed-form main sum, a lower bound). For each reading, :func:`reading_rows` reads from the
:class:`~normlimits.metrics.token_means.PositionStudy` of its vectors the numbers Figure 2 is judged by:
the ratio true/expected at ``N = 5`` and the longest L (Fig. 2a's "close"), the log-log exponents
in L of both (Fig. 2a's "linear"), and the KS critical N at every length (Fig. 2c), whence the
critical N/L at the longest L and its spread over the lengths.

:func:`choose` picks, for a claim, the first reading of the table (the book's primary reading
first) under which the claim's registered criteria hold.

One policy for the verdicts that rest on a reading (issue 31), applied by the chapter, the audit
and the architectures chapter alike: :func:`gradings` gives the claim's own row, always graded on
the book's primary reading (the table's first row), and, only when another reading reproduces the
figure and the primary does not, a second row labelled :data:`CHOSEN_VARIANT` whose ``selection``
and text say "reproduces under j of k readings tried: ..." (choosing among k readings is a multiple
comparison, so that verdict is shown apart and never counted as the claim's). Both rows carry
``readings`` (:func:`reading_grades`): the verdict and values under every reading tried.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from normlimits.metrics.critical_n import CriticalN, critical_n
from normlimits.core.fits import loglog_fit
from normlimits.core.protocol import FIXED_N, KS_ALPHA_TEXT, KS_ALPHAS
from normlimits.metrics.readings import FORMS, VECTORS
from normlimits.metrics.token_means import PositionStudy
from normlimits.claims import claim

__all__ = ["FORM_LABELS", "VECTOR_LABELS", "Reading", "readings_tried", "ReadingRow",
           "reading_rows", "table_frame", "reproducing", "choose", "claim_values", "CHOSEN_VARIANT",
           "reading_grades", "Grading", "gradings", "measured_words", "chosen_words"]

#: the ledger variant of a claim graded on a reading chosen because it reproduces the figure
CHOSEN_VARIANT = "chosen reading"

FORM_LABELS = {"scaled": "Σ‖αᵢxᵢ − s‖", "raw": "Σ‖xᵢ − s‖", "weighted": "Σαᵢ‖xᵢ − s‖",
               "norm_of_sum": "‖Σαᵢxᵢ − s‖"}
VECTOR_LABELS = {"values": "value vectors", "hidden": "hidden states",
                 "values_sphere": "value vectors on the sphere",
                 "hidden_sphere": "hidden states on the sphere"}
AGGREGATE_LABELS = {"paper": "every position", "last_row": "last row"}
EXPECTATION_LABELS = {"mc": "Monte Carlo", "main": "main sum"}


@dataclass(frozen=True)
class Reading:
    """One reading of Eq. (7) and of the paper's protocol."""

    form: str
    vectors: str = "values"
    aggregate: str = "paper"
    expectation: str = "mc"

    def __post_init__(self) -> None:
        for name, value, allowed in (("form", self.form, FORMS), ("vectors", self.vectors, VECTORS),
                                     ("aggregate", self.aggregate, tuple(AGGREGATE_LABELS)),
                                     ("expectation", self.expectation, tuple(EXPECTATION_LABELS))):
            if value not in allowed:
                raise ValueError(f"{name}={value!r}: choose one of {allowed}")

    @property
    def label(self) -> str:
        """E.g. ``Σ‖xᵢ − s‖ on value vectors, every position, Monte Carlo 𝔼``."""
        return (f"{FORM_LABELS[self.form]} on {VECTOR_LABELS[self.vectors]}, "
                f"{AGGREGATE_LABELS[self.aggregate]}, {EXPECTATION_LABELS[self.expectation]} 𝔼")


def readings_tried(vectors: Sequence[str] = VECTORS) -> list[Reading]:
    """The table's readings, the book's primary reading first: on value vectors every form (every
    position, Monte Carlo), the primary form with the main sum and with the last row; then every
    form on each of the other ``vectors``."""
    primary = Reading("scaled")
    rows = [primary, Reading("scaled", expectation="main"), Reading("scaled", aggregate="last_row"),
            Reading("scaled", aggregate="last_row", expectation="main")]
    rows += [Reading(f) for f in FORMS if f != "scaled"]
    rows += [Reading(f, v) for v in vectors if v != "values" for f in FORMS]
    return rows


@dataclass(frozen=True)
class ReadingRow:
    """One reading's numbers. ``ratio``: median over heads of true/expected at ``n`` and the
    longest L; ``ratio_mc_error``: the median relative Monte Carlo standard error of the expected
    values in that ratio (0 for the main sum); ``exp_true``, ``exp_expected``: log-log exponents
    in L of the median head at ``n``; ``search``: the KS search at every length;
    ``fraction``: critical N / L at the longest L for each alpha (None: none below L);
    ``spread``: largest over smallest critical N / L over the lengths, none below L counted as 1;
    ``windows``: how many windows the study averaged."""

    reading: Reading
    n: int
    length: int
    ratio: float
    ratio_mc_error: float
    exp_true: float
    exp_expected: float
    search: CriticalN
    fraction: dict
    spread: dict
    windows: int


def _median_over_heads(study: PositionStudy, form: str, statistic: str, aggregate: str,
                       column: int) -> np.ndarray:
    """[m] the median over heads of one statistic at one N, for every length of the study."""
    return np.array([float(np.median(study.per_head(form, statistic, L, aggregate)[:, column]))
                     for L in study.lengths])


def reading_rows(studies: Mapping[str, PositionStudy], readings: Sequence[Reading], *,
                 n: int = FIXED_N, alphas: Sequence[float] = KS_ALPHAS,
                 search: bool = True) -> list[ReadingRow]:
    """The table's numbers for each reading, from the study of its vectors (``studies[vectors]``
    must hold its form, expectation and aggregation, and ``n`` in its N grid); ``search=False``:
    no KS search (Figure 2a's numbers only; the rows' ``search`` is None and ``fraction``,
    ``spread`` are empty)."""
    rows = []
    for r in readings:
        if r.vectors not in studies:
            raise ValueError(f"no study for vectors {r.vectors!r}; studies: {list(studies)}")
        study = studies[r.vectors]
        grid = study.n_grid.tolist()
        if n not in grid:
            raise ValueError(f"N = {n} is not in the study's grid {grid}")
        j, L = grid.index(n), study.lengths[-1]
        true = study.per_head(r.form, "true", L, r.aggregate)[:, j].numpy()
        expected = study.per_head(r.form, r.expectation, L, r.aggregate)[:, j].numpy()
        error = 0.0
        if r.expectation == "mc":
            se = study.per_head(r.form, "mc_se", L, r.aggregate)[:, j].numpy()
            error = float(np.median(se / expected))
        found = (critical_n(study, form=r.form, expectation=r.expectation, aggregate=r.aggregate,
                            alphas=alphas) if search else None)
        fraction, spread = {}, {}
        for a in (found.critical if found is not None else ()):
            fr = [1.0 if f is None else f for f in found.fraction(a)]
            fraction[a] = found.fraction(a)[-1]
            spread[a] = max(fr) / min(fr) if min(fr) > 0 else math.inf
        lengths = np.array(study.lengths, dtype=float)
        exps = [float(loglog_fit(lengths, _median_over_heads(study, r.form, s, r.aggregate, j)).exponent)
                for s in ("true", r.expectation)]
        rows.append(ReadingRow(reading=r, n=n, length=L, ratio=float(np.median(true / expected)),
                               ratio_mc_error=error, exp_true=exps[0], exp_expected=exps[1],
                               search=found, fraction=fraction, spread=spread,
                               windows=study.windows))
    return rows


def claim_values(row: ReadingRow, claim_id: str, paper_model: bool,
                 alpha: float = KS_ALPHA_TEXT) -> dict:
    """The values of ``row`` for the criteria of Figure 2a (``F2a``) or 2c (``F2c``)."""
    if claim_id == "F2a":
        values = {"exp_true": row.exp_true, "exp_expected": row.exp_expected, "close": row.ratio}
    elif claim_id == "F2c":
        frac = row.fraction[alpha]
        values = {"fraction": 1.0 if frac is None else frac, "spread": row.spread[alpha]}
    else:
        raise ValueError(f"claim_id={claim_id!r}: the reading table grades 'F2a' and 'F2c'")
    return {**values, "paper_model": int(paper_model)}


def reproducing(rows: Sequence[ReadingRow], claim_id: str, paper_model: bool) -> list[ReadingRow]:
    """The rows whose values pass every measured criterion of the registered rule of
    ``claim_id`` (the readings under which the paper's panel comes out), in table order."""
    rule = claim(claim_id).rule
    measured = [c.key for c in rule.criteria if c.kind == "measurement"]
    return [row for row in rows
            if all(rule.results(claim_values(row, claim_id, paper_model))[k] for k in measured)]


def choose(rows: Sequence[ReadingRow], claim_id: str, paper_model: bool) -> ReadingRow:
    """The first reproducing row (:func:`reproducing`; primary reading first), or the primary
    row when none reproduces."""
    if not rows:
        raise ValueError("no reading rows to choose from")
    found = reproducing(rows, claim_id, paper_model)
    return found[0] if found else rows[0]


def _json_number(value):
    """A value for JSON: a float, or None for a missing one (None or NaN)."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    return float(value)


def reading_grades(rows: Sequence[ReadingRow], claim_id: str, paper_model: bool,
                   intervals: Mapping | None = None) -> list[dict]:
    """The claim graded by its registered rule under each reading of ``rows`` (the table, primary
    first): ``[{"reading": label, "values": {criterion key: value or None}, "verdict",
    "primary": bool}]``, one per row, the ledger's ``readings`` field. ``primary`` marks the
    book's primary reading (:func:`readings_tried`'s first) wherever it is in ``rows``. A reading
    with intervals (``intervals[label][claim_id]``, as in :func:`gradings`) records them
    (``"intervals": {key: [low, high]}``) and is graded on them."""
    rule, primary = claim(claim_id).rule, readings_tried()[0]
    out = []
    for row in rows:
        values = {k: _json_number(v) for k, v in claim_values(row, claim_id, paper_model).items()}
        found = ((intervals or {}).get(row.reading.label) or {}).get(claim_id) or {}
        entry = {"reading": row.reading.label, "values": values,
                 "verdict": rule.grade(values, found or None), "primary": row.reading == primary}
        if found:
            entry["intervals"] = {k: [float(iv.low), float(iv.high)] for k, iv in found.items()}
        out.append(entry)
    return out


def measured_words(row: ReadingRow, claim_id: str, paper_model: bool) -> str:
    """The numbers of one reading a claim is graded on, in a phrase: for F2a the exponents and
    true/𝔼 at N = 5 and the longest L; for F2c the critical N/L at the longest L and its spread."""
    v = claim_values(row, claim_id, paper_model)
    if claim_id == "F2a":
        return (f"exponents true {v['exp_true']:.2f}, E {v['exp_expected']:.2f}; true/E "
                f"{v['close']:.3g} at N = {row.n}, L = {row.length}")
    return (f"critical N/L {v['fraction']:.3f} at L = {row.length} (1: none below L); spread "
            f"{v['spread']:.2f} over the lengths")


@dataclass(frozen=True)
class Grading:
    """One ledger row to record for a claim graded on the reading table (the keyword arguments of
    :func:`normlimits.claims.record` / ``make_row``): ``values`` one per criterion key,
    ``measured`` the text, ``reading`` the label it rests on, ``variant`` None for the claim's own
    row or :data:`CHOSEN_VARIANT`, ``readings`` (:func:`reading_grades`) and ``selection`` (None,
    or ``{"tried": k, "reproducing": [labels]}``) and ``intervals`` (criterion key ->
    :class:`normlimits.core.bootstrap.Interval` over the windows, or None)."""

    values: dict
    measured: str
    reading: str
    readings: list
    variant: str | None = None
    selection: dict | None = None
    intervals: dict | None = None

    def kwargs(self) -> dict:
        """The arguments of ``claims.record``/``make_row`` after the claim id."""
        return {"values": self.values, "measured": self.measured, "reading": self.reading,
                "readings": self.readings, "variant": self.variant, "selection": self.selection,
                "intervals": self.intervals}


def _tally(found: Sequence[ReadingRow], tried: int) -> str:
    """How many of the ``tried`` readings reproduce the figure, naming them."""
    if tried == 1:
        return f"{'reproduces' if found else 'does not reproduce'} the figure under the only reading tried"
    if not found:
        return f"reproduces under none of the {tried} readings tried"
    return (f"reproduces under {len(found)} of {tried} readings tried: "
            + "; ".join(r.reading.label for r in found))


def gradings(rows: Sequence[ReadingRow], claim_id: str, paper_model: bool,
             words=measured_words, note: str = "", intervals: Mapping | None = None) -> list[Grading]:
    """The rows to record for ``claim_id`` (``F2a`` or ``F2c``) from the reading table ``rows``
    (primary first), by the one policy of this module: first the claim's own row, graded on
    ``rows[0]`` (the book's primary reading); then, when some other reading reproduces the figure
    and the primary does not, the :data:`CHOSEN_VARIANT` row graded on the first that does, its
    ``selection`` and text naming all j of the k tried. ``words(row, claim_id, paper_model)``
    phrases one reading's numbers; ``note`` is appended to the own row's text (e.g. the audit's
    "only the primary reading was tried"). ``intervals[reading label][claim_id]``: the criteria's
    intervals over the windows under that reading (:func:`normlimits.experiments.figure2.
    figure2_intervals`), given to the row graded on it; a reading without them is graded on its
    point values (its text says so)."""
    if not rows:
        raise ValueError(f"claim {claim_id}: no reading rows to grade on")
    grades = reading_grades(rows, claim_id, paper_model, intervals)
    found = reproducing(rows, claim_id, paper_model)
    primary = rows[0]
    which = ("the book's primary reading" if primary.reading == readings_tried()[0]
             else primary.reading.label)
    text = (f"{words(primary, claim_id, paper_model)} under {which}; "
            f"{_tally(found, len(rows))}" + (f"; {note}" if note else ""))
    def interval_of(row):
        return ((intervals or {}).get(row.reading.label) or {}).get(claim_id) or None

    if intervals is not None and interval_of(primary) is None:
        text += "; no interval over the windows under this reading"
    own = Grading(claim_values(primary, claim_id, paper_model), text, primary.reading.label, grades,
                  intervals=interval_of(primary))
    if not found or found[0] is primary:
        return [own]
    chosen = found[0]
    labels = [r.reading.label for r in found]
    text = (f"{_tally(found, len(rows))}; graded on the first, {chosen.reading.label}: "
            f"{words(chosen, claim_id, paper_model)} (a reading chosen after trying {len(rows)}, "
            "shown apart from the claim's own verdict"
            + ("; no interval over the windows under this reading)" if intervals is not None
               and interval_of(chosen) is None else ")"))
    return [own, Grading(claim_values(chosen, claim_id, paper_model), text, chosen.reading.label,
                         grades, CHOSEN_VARIANT, {"tried": len(rows), "reproducing": labels},
                         interval_of(chosen))]


def chosen_words(rows: Sequence[ReadingRow], claim_id: str, paper_model: bool) -> str:
    """For a chapter's prose (plain text, for a ``glue:text`` role): the :data:`CHOSEN_VARIANT`
    row of ``claim_id`` in a phrase, or why :func:`gradings` records none (the primary reading
    reproduces the panel, or no reading tried does)."""
    found = reproducing(rows, claim_id, paper_model)
    if not found:
        return f"no reading is chosen: {claim_id} {_tally(found, len(rows))}"
    if found[0] is rows[0]:
        return f"no reading is chosen: the primary reading reproduces the panel ({_tally(found, len(rows))})"

    verdict = claim(claim_id).rule.grade(claim_values(found[0], claim_id, paper_model))
    return (f"the row labelled \"{CHOSEN_VARIANT}\" is {verdict} under {found[0].reading.label}: the "
            f"claim {_tally(found, len(rows))}, a verdict chosen after trying {len(rows)} readings, "
            "counted apart from the claim's own")


def _fmt_fraction(value) -> str:
    return "none below L" if value is None else f"{value:.3f}"


def table_frame(rows: Sequence[ReadingRow], alphas: Sequence[float] = KS_ALPHAS):
    """The table as a DataFrame: one line per reading with the numbers the verdicts use."""
    import pandas as pd

    data = []
    for row in rows:
        r = row.reading
        line = {"reading": f"{FORM_LABELS[r.form]}, {VECTOR_LABELS[r.vectors]}",
                "protocol": f"{AGGREGATE_LABELS[r.aggregate]}, {EXPECTATION_LABELS[r.expectation]}",
                f"true/𝔼 (N={row.n})": round(row.ratio, 3),
                "exponents (true, 𝔼)": f"{row.exp_true:.2f}, {row.exp_expected:.2f}"}
        for a in alphas:
            line[f"critical N/L (α={a:g})"] = _fmt_fraction(row.fraction[a])
        data.append(line)
    return pd.DataFrame(data)
