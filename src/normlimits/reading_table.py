"""The reading-sensitivity table: each plausible reading of the paper's Eq. (7) against Figure 2.

A *reading* fixes everything the paper leaves open about its distance (:class:`Reading`): the
form (:data:`normlimits.readings.FORMS`: sum of norms of ``alpha_i x_i - s``, of ``x_i - s``,
weighted by ``alpha_i``, or the norm of the sum), what ``x_i`` is
(:data:`normlimits.readings.VECTORS`), the aggregation over query positions (the paper's
token-mean over every position, or the last row alone) and the expectation (Monte Carlo, or the
closed-form main sum, a lower bound). For each reading, :func:`reading_rows` reads from the
:class:`~normlimits.token_means.PositionStudy` of its vectors the numbers Figure 2 is judged by:
the ratio true/expected at ``N = 5`` and the longest L (Fig. 2a's "close"), the log-log exponents
in L of both (Fig. 2a's "linear"), and the KS critical N at every length (Fig. 2c), whence the
critical N/L at the longest L and its spread over the lengths.

:func:`choose` picks, for a claim, the first reading of the table (the book's primary reading
first) under which the claim's registered criteria hold; the verdict then names that reading.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

from .critical_n import CriticalN, critical_n
from .fits import loglog_fit
from .protocol import FIXED_N, KS_ALPHA_TEXT, KS_ALPHAS
from .readings import FORMS, VECTORS
from .token_means import PositionStudy

__all__ = ["FORM_LABELS", "VECTOR_LABELS", "Reading", "readings_tried", "ReadingRow",
           "reading_rows", "table_frame", "reproducing", "choose", "claim_values"]

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
                 n: int = FIXED_N, alphas: Sequence[float] = KS_ALPHAS) -> list[ReadingRow]:
    """The table's numbers for each reading, from the study of its vectors (``studies[vectors]``
    must hold its form, expectation and aggregation, and ``n`` in its N grid)."""
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
        search = critical_n(study, form=r.form, expectation=r.expectation, aggregate=r.aggregate,
                            alphas=alphas)
        fraction, spread = {}, {}
        for a in search.critical:
            fr = [1.0 if f is None else f for f in search.fraction(a)]
            fraction[a] = search.fraction(a)[-1]
            spread[a] = max(fr) / min(fr) if min(fr) > 0 else math.inf
        lengths = np.array(study.lengths, dtype=float)
        exps = [float(loglog_fit(lengths, _median_over_heads(study, r.form, s, r.aggregate, j)).exponent)
                for s in ("true", r.expectation)]
        rows.append(ReadingRow(reading=r, n=n, length=L, ratio=float(np.median(true / expected)),
                               ratio_mc_error=error, exp_true=exps[0], exp_expected=exps[1],
                               search=search, fraction=fraction, spread=spread,
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
    from .claims import claim

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
