"""How much the distances chapter's graded statistics would move with other corpus windows.

A percentile bootstrap over the windows (:func:`normlimits.core.bootstrap.bootstrap_counts`): a
resample draws the windows with replacement, every head of a window kept together, and the
statistics of Figures 2a-c and Corollary 2 are recomputed from the drawn windows' token-means
(:attr:`normlimits.metrics.token_means.PositionStudy.per_window`) and last rows
(:attr:`normlimits.metrics.distances.SweepResult.per_window`).

The statistics are those of :func:`normlimits.experiments.figure2.figure2_numbers` and of
:func:`normlimits.experiments.reading_table.reading_rows` (Figure 2a's exponents and closeness,
Figure 2c's critical N under the paper's protocol), computed here for a batch of resamples at
once: one matrix product gives every resample's per-head means, medians over heads are taken
along one axis, the log-log fits are batched, and the KS statistics of every resample, length and
N come from one sort (:func:`normlimits.metrics.critical_n.ks_statistics`). On the resample that
draws every window once they equal the chapter's numbers (a test checks it); the intervals are
widened to the chapter's own values (:data:`normlimits.core.bootstrap.METHOD`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import torch

from normlimits.claims import undecided_criteria
from normlimits.claims import undecided_sentence as claims_undecided_sentence
from normlimits.core import bootstrap as B
from normlimits.core.fits import loglog_fit
from normlimits.core.protocol import FIXED_N, KS_ALPHA_TEXT
from normlimits.experiments import reading_table as RT
from normlimits.experiments.figure2 import figure2_numbers
from normlimits.metrics.critical_n import resampled_critical_n
from normlimits.metrics.token_means import PositionStudy

__all__ = ["RESAMPLED", "WindowIntervals", "interval_name", "window_values", "figure2_intervals",
           "undecided_sentence"]

#: claim -> criterion key -> the :func:`normlimits.experiments.figure2.figure2_numbers` key it is
#: graded on, for the criteria that are statistics of the windows' token-means (and so get an
#: interval over the windows); the other criteria count violations of proven inequalities over
#: every window, or are identities
RESAMPLED = {"T1b": {"gap": "gap"},
             "C2i": {"ratio_model": "ratio_model", "exp_expected": "exp_mc"},
             "C2ii": {"near_L": "near_L", "near_L_expected": "near_L_expected"},
             "F2b": {"elasticity": "elasticity", "tightens": "tightens", "converge": "converge"},
             "COL": {"retained": "retained", "exponent": "collapse_exp"}}


@dataclass(frozen=True)
class WindowIntervals:
    """Bootstrap intervals over the corpus windows of the distances chapter's graded statistics.

    ``intervals[claim][key]``: the :class:`normlimits.core.bootstrap.Interval` of each criterion of
    :data:`RESAMPLED`; ``readings[label][claim][key]``: those of Figure 2a's and 2c's criteria
    under each reading resampled; ``windows``: how many windows were resampled (the first ones);
    ``seconds``: the time the bootstrap took."""

    intervals: dict
    readings: dict
    windows: int
    seconds: float


def interval_name(claim_id: str, key: str, reading: str | None = None) -> str:
    """The name :func:`figure2_intervals` gives one criterion's interval (``only=``)."""
    return f"{reading}|{claim_id}.{key}" if reading else f"{claim_id}.{key}"


def _readings(readings) -> dict:
    return dict(readings) if isinstance(readings, dict) else {r: ("F2a", "F2c") for r in readings}


def _estimates(study, sweep_b, readings, paper_model) -> dict:
    """The chapter's own values (the statistic on all windows), by interval name; without
    ``sweep_b`` only the readings' (no :data:`RESAMPLED`)."""
    out = {}
    if sweep_b is not None:
        numbers = figure2_numbers(study, sweep_b, counts=False)
        out = {interval_name(cid, key): numbers[name] for cid, keys in RESAMPLED.items()
               for key, name in keys.items()}
    for reading, wanted in readings.items():
        (row,) = RT.reading_rows({"values": study}, [reading], alphas=(KS_ALPHA_TEXT,),
                                 search="F2c" in wanted)
        for cid in wanted:
            for key, value in RT.claim_values(row, cid, paper_model).items():
                if key != "paper_model":
                    out[interval_name(cid, key, reading.label)] = value
    return out


def _means(per_window: torch.Tensor, counts: torch.Tensor) -> np.ndarray:
    """[r, layers * heads, ...]: each resample's mean over its drawn windows (``counts`` [r, W])."""
    means = B.drawn_mean(per_window, counts)
    return means.reshape(counts.shape[0], -1, *per_window.shape[3:]).numpy()


def _slopes(x, y: np.ndarray) -> np.ndarray:
    """Log-log exponents of each row of ``y`` [r, G] against ``x`` [G]."""
    return loglog_fit(x, torch.from_numpy(np.ascontiguousarray(y))).exponent.numpy()


def _critical(true: np.ndarray, expected: np.ndarray, lengths, grid, alpha: float):
    """Figure 2c's critical N/L per resample and length under one reading: ``true``,
    ``expected`` [r, heads, m, n]; returns the fraction at the longest L (1: none below L) and
    the spread over the lengths, each [r] (as :func:`normlimits.experiments.reading_table.
    reading_rows` computes them from :func:`normlimits.metrics.critical_n.critical_n`)."""
    fractions = np.ones((true.shape[0], len(lengths)))
    for i, L in enumerate(lengths):
        cols = np.nonzero(grid < L)[0]
        found = resampled_critical_n(true[:, :, i][:, :, cols], expected[:, :, i][:, :, cols], grid[cols], alpha)
        fractions[:, i] = np.where(np.isnan(found), 1.0, found / L)
    spread = np.where(fractions.min(1) > 0, fractions.max(1) / fractions.min(1), np.inf)
    return fractions[:, -1], spread


def window_values(study: PositionStudy, sweep_b, readings, counts: torch.Tensor, *,
                  paper_model: bool, n: int = FIXED_N, rho: float = 0.25) -> dict:
    """Every statistic of :data:`RESAMPLED` and, under each reading, of Figures 2a and 2c, for
    each resample of ``counts`` (float64 [r, windows]: how often each window is drawn), by
    interval name: ``{name: array [r]}``. ``readings``: {reading: claims}, readings of the value
    vectors over every position whose forms ``study`` kept per window. ``sweep_b`` None: the
    readings' statistics only (a study without Corollary 2's closed forms, as the audit's)."""
    grid = study.n_grid.numpy()
    lengths = np.array(study.lengths, dtype=float)
    j = int(np.nonzero(grid == n)[0][0])
    cache: dict = {}

    def mean(form: str, statistic: str) -> np.ndarray:              # [r, heads, m, n], once each
        if (form, statistic) not in cache:
            cache[form, statistic] = _means(study.per_window[form][statistic], counts)
        return cache[form, statistic]

    values = {} if sweep_b is None else _resampled_values(study, sweep_b, counts, mean, grid,
                                                          lengths, j, rho)
    for reading, wanted in readings.items():
        t, e = mean(reading.form, "true"), mean(reading.form, reading.expectation)
        label = reading.label
        if "F2a" in wanted:
            values[interval_name("F2a", "exp_true", label)] = _slopes(lengths, np.median(t[..., j], 1))
            values[interval_name("F2a", "exp_expected", label)] = _slopes(lengths, np.median(e[..., j], 1))
            values[interval_name("F2a", "close", label)] = np.median(t[:, :, -1, j] / e[:, :, -1, j], 1)
        if "F2c" in wanted:
            fraction, spread = _critical(t, e, study.lengths, grid, KS_ALPHA_TEXT)
            values[interval_name("F2c", "fraction", label)] = fraction
            values[interval_name("F2c", "spread", label)] = spread
    return values


def _resampled_values(study: PositionStudy, sweep_b, counts: torch.Tensor, mean, grid, lengths,
                      j: int, rho: float) -> dict:
    """:data:`RESAMPLED`'s statistics for each resample of ``counts`` (:func:`window_values`;
    ``mean(form, statistic)`` the resamples' token-means)."""
    n = int(grid[j])
    col = {v: i for i, v in enumerate(grid.tolist())}
    scaled = study.per_window["scaled"]
    true, mc = mean("scaled", "true"), mean("scaled", "mc")                   # [r, heads, m, n]
    at = {"true": true[:, :, -1], "mc": mc[:, :, -1]}                        # [r, heads, n]
    main = _means(scaled["main"][..., j], counts)                             # [r, heads, m]
    individual = _means(scaled["individual"][..., -1, j], counts)             # [r, heads]
    med_j = {"true": np.median(true[..., j], 1), "mc": np.median(mc[..., j], 1)}   # [r, m]
    out = {"exp_true": _slopes(lengths, med_j["true"]), "exp_mc": _slopes(lengths, med_j["mc"])}
    tj, ej, mj = at["true"][..., j], at["mc"][..., j], main[..., -1]
    out["ratio"] = np.median(tj / ej, 1)
    out["gap"] = np.median((ej - mj) / mj, 1)
    out["ratio_model"] = np.median(ej / individual, 1)
    med_last = np.median(at["true"], 1)                                       # [r, n]
    out["elasticity"] = np.log(med_last[:, col[100]] / med_last[:, col[20]]) / np.log(100 / 20)
    rel = np.median(np.abs(at["true"] - at["mc"]) / at["true"], 1)
    out["converge"] = rel[:, col[100]] / rel[:, col[1]]
    b_grid = sweep_b.n_grid.tolist()
    bound = _means(sweep_b.per_window["bound_linear"], counts).reshape(counts.shape[0], -1, len(b_grid))
    last = _means(sweep_b.per_window["true"], counts).reshape(counts.shape[0], -1, len(b_grid))
    ratio_b = bound / last
    out["tightens"] = np.median(ratio_b[..., b_grid.index(100)] / ratio_b[..., b_grid.index(20)], 1)
    below = max(k for k, v in enumerate(grid.tolist()) if v < study.lengths[-1])
    for key, s in (("near_L", "true"), ("near_L_expected", "mc")):
        out[key] = np.median(at[s][..., below] / at[s].max(2), 1)
    out["retained"] = np.median(at["true"][..., col[int(rho * study.lengths[-1])]] / tj, 1)
    coll = [(L, col[int(rho * L)]) for L in study.lengths
            if float(rho * L).is_integer() and int(rho * L) in col and int(rho * L) > n]
    curve = np.stack([np.median(true[:, :, study.lengths.index(L), k], 1) for L, k in coll], 1)
    out["collapse_exp"] = _slopes([L for L, _ in coll], curve)
    return {interval_name(cid, key): out[name] for cid, keys in RESAMPLED.items()
            for key, name in keys.items()}


def figure2_intervals(study: PositionStudy, sweep_b, readings, *, paper_model: bool,
                      windows: int | None = None, only=None,
                      resamples: int | None = None) -> WindowIntervals:
    """Percentile bootstrap intervals over the windows of :data:`RESAMPLED`'s statistics and,
    under each of ``readings``, of Figures 2a and 2c's criteria.

    ``readings``: a list (both figures under each) or {reading: claims wanted under it}, e.g.
    Figure 2c only under the reading a chosen F2c row rests on; readings of the value vectors
    over every position whose forms ``study`` kept per window (``StudySpec(window_forms=...)``);
    ``sweep_b``: the last-row sweep at the longest L, or None for the readings' criteria only
    (``intervals`` then empty: the audit's Figure 2 rows); ``windows``: resample the first
    ``windows`` windows only (default all; e.g. half of them, to show how an interval narrows);
    ``only``: the names (:func:`interval_name`) to compute, default all. A study of one window
    has no interval (empty results)."""
    started = time.perf_counter()
    readings = _readings(readings)
    if windows is None and study.windows < 2:
        return WindowIntervals({}, {}, study.windows, 0.0)
    count = study.windows if windows is None else int(windows)
    if not 2 <= count <= study.windows:
        raise ValueError(f"windows={windows}: resample between 2 and the study's {study.windows}")
    first = range(count)
    sub = study.resampled(first)
    sub.per_window.update({f: {s: v[:count] for s, v in st.items()} for f, st in study.per_window.items()})
    sub_b = None if sweep_b is None else sweep_b.resampled(first)
    if sub_b is not None:
        sub_b.per_window.update({k: v[:count] for k, v in sweep_b.per_window.items()})
    estimates = _estimates(sub, sub_b, readings, paper_model)
    if only is not None:
        estimates = {k: v for k, v in estimates.items() if k in set(only)}
    settings = {} if resamples is None else {"resamples": resamples}
    found = B.bootstrap_counts(count, lambda c: window_values(sub, sub_b, readings, c,
                                                              paper_model=paper_model),
                               estimates, **settings)
    plain, by_reading = {}, {}
    for name, interval in found.items():
        label, _, rest = name.rpartition("|")
        cid, key = rest.split(".")
        (by_reading.setdefault(label, {}) if label else plain).setdefault(cid, {})[key] = interval
    return WindowIntervals(plain, by_reading, count, time.perf_counter() - started)


def undecided_sentence(rows, study: PositionStudy, sweep_b, primary, *, paper_model: bool,
                       resamples: int | None = None) -> str:
    """For every undecided criterion of the chapter's inconclusive rows (``rows``: the recorded
    ledger rows, the claims' own on the ``primary`` reading), its interval on all windows and on
    the first half of them, and roughly how many windows would decide it
    (:func:`normlimits.claims.undecided_sentence`)."""
    undecided = undecided_criteria(rows)
    half = {}
    if undecided and study.windows >= 4:
        names = [interval_name(cid, k, primary.label if cid in ("F2a", "F2c") else None)
                 for cid, keys in undecided.items() for k in keys]
        found = figure2_intervals(study, sweep_b, {primary: ("F2a", "F2c")}, paper_model=paper_model,
                                  windows=study.windows // 2, only=names, resamples=resamples)
        half = {**found.intervals, **found.readings.get(primary.label, {})}
    return claims_undecided_sentence(rows, half, on_threshold="the statistic takes values on a lattice",
                                     none="No verdict of this chapter rests on an undecided window statistic.")
