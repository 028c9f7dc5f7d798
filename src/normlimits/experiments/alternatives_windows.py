"""Bootstrap intervals over the corpus windows for the alternatives' yardstick claims (issue 31).

:func:`normlimits.experiments.alternatives.yardstick_verdict` grades each normaliser on four
yardsticks from per-window statistics (``YardstickResults.stats[key][name]``, a leading window
axis [W, ...]), each averaged over the windows first. A bootstrap resample draws W windows with
repeats; its statistics are the count-weighted means over the drawn windows
(:func:`normlimits.core.bootstrap.drawn_mean`), and every criterion value is recomputed from them
as the verdict computes it, for all resamples at once (``r`` resamples, one matrix product per
statistic, batched log-log fits, one sort for every KS test):

- vanishing: the median head's fitted exponent of the mean largest weight against L, and its gain
  over the reference's exponent on the same resample;
- distance: ``log2`` of the critical N over the reference's (Figure 2c's KS test at every N of the
  grid, :func:`normlimits.metrics.critical_n.resampled_critical_n`); a resample on which the
  reference has no critical N cannot grade it and is left out (NaN), as the whole sample's value
  would be;
- separability: the median over heads of the rows' median support (keys with weight > 0; each
  head's mean over the drawn windows), and the share of the grid's N >= knee within it (all of
  them when none is) where the normaliser's N_s/N (mean over heads of the mean over windows)
  beats the reference's by the margin;
- gradient: the share of matched temperatures with a Jacobian norm at most ``factor`` of the
  reference's at equal selectivity. This yardstick runs on the first ``jacobian_windows`` windows
  only (it is the costly one), so its resampling unit is those windows; with one there is no
  interval. It is not a tensor function (an interpolation along each curve), so each distinct
  multiset of its windows is evaluated once by the verdict's own :meth:`YardstickResults.decoupling`.

The batched formulas are those of ``yardstick_verdict`` and ``YardstickResults`` written over a
resample axis; a test checks them against the verdict computed on the drawn windows themselves.
A window whose statistic is NaN for a head makes that head's mean NaN on every resample that draws
it, as it does in the mean over all windows. Shapes: ``counts`` [r, W].
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from normlimits.core import bootstrap as B
from normlimits.core.bootstrap import RESAMPLES, SEED, Interval
from normlimits.core.fits import loglog_fit
from normlimits.metrics.critical_n import resampled_critical_n
# the statistics measured on the first ``jacobian_windows`` windows only, and the yardsticks whose
# criteria are computed from the counts of every window
from normlimits.experiments.alternatives import (JACOBIAN_STATISTICS, WINDOW_YARDSTICKS,
                                                 check_window_yardsticks, separability_shares)

__all__ = ["JACOBIAN_STATISTICS", "WINDOW_YARDSTICKS", "yardstick_window_values", "yardstick_intervals",
           "window_criteria", "gamma_criteria", "interval_sentence"]


def _head_curves(results, key: str, name: str, counts: Tensor) -> Tensor:
    """[r, heads, G]: per resample, per (layer, head), the drawn windows' mean curve."""
    means = B.drawn_mean(results.stats[key][name].to(torch.float64), counts)
    return means.reshape(counts.shape[0], -1, means.shape[-1])


def _exponents(results, key: str, counts: Tensor) -> Tensor:
    """[r]: the median head's fitted exponent of the mean largest weight against L
    (``YardstickResults.max_weight_exponent(...).median()``: torch's lower median)."""
    curves = _head_curves(results, key, "max_weight", counts)
    return loglog_fit(list(results.config.lengths), curves).exponent.median(-1).values


def _critical(results, key: str, counts: Tensor, alpha: float) -> np.ndarray:
    """[r]: the critical N of each resample (NaN: none on the grid; ``YardstickResults.critical_n``)."""
    return resampled_critical_n(_head_curves(results, key, "distance", counts).numpy(),
                                _head_curves(results, key, "expected", counts).numpy(),
                                list(results.config.n_grid), alpha)


def _separability(results, key: str, counts: Tensor) -> Tensor:
    """[r, n]: N_s/N against N, the mean over heads (NaN heads left out) of the drawn windows' mean."""
    return _head_curves(results, key, "separability", counts).nanmean(1)


def _separability_share(sep_k: Tensor, sep_r: Tensor, margin: float, ns: Sequence[int],
                        support: Tensor) -> Tensor:
    """[r]: per resample the share of ``ns`` (the grid's N >= knee) where ``sep_k`` [r, n] beats
    ``sep_r`` [r, n] by ``margin``, over the N within the resample's median ``support`` [r] when
    there is one, else over every N (:func:`normlimits.experiments.alternatives.separability_share`
    for all resamples at once); NaN for no N."""
    within = torch.tensor(list(ns), dtype=torch.float64)[None, :] <= support[:, None]      # [r, n]
    return separability_shares(sep_k, sep_r, margin, within)


def yardstick_window_values(results, keys: Sequence[str], counts: Tensor, reference: str = "softmax", *,
                            alpha: float = 0.01, margin: float = 0.02, knee: int = 16,
                            yardsticks: Sequence[str] = WINDOW_YARDSTICKS) -> dict:
    """The vanishing, distance and separability criteria (or those of ``yardsticks``) of every
    normaliser of ``keys`` on each resample ``counts`` [r, W] of the windows:
    ``{(key, yardstick, criterion): array [r]}`` (NaN where a resample cannot grade it). With
    ``counts`` all ones these are :func:`normlimits.experiments.alternatives.yardstick_verdict`'s
    values. Only the statistics of ``yardsticks`` are read (``results`` may lack the others)."""
    grid = list(results.config.n_grid)
    start = next((i for i, n in enumerate(grid) if n >= knee), len(grid))
    exp_r = _exponents(results, reference, counts) if "vanishing" in yardsticks else None
    crit_r = _critical(results, reference, counts, alpha) if "distance" in yardsticks else None
    sep_r = _separability(results, reference, counts)[:, start:] if "separability" in yardsticks else None
    out = {}
    for key in keys:
        if exp_r is not None:
            exp_k = _exponents(results, key, counts)
            out[(key, "vanishing", "exponent")] = exp_k.numpy()
            out[(key, "vanishing", "gain")] = (exp_k - exp_r).numpy()
        if crit_r is not None:
            # no critical N on the grid counts as twice the largest N (a lower bound), as the verdict does
            crit_k = np.where(np.isnan(c := _critical(results, key, counts, alpha)), 2.0 * max(grid), c)
            out[(key, "distance", "later")] = np.log2(crit_k / crit_r)
        if sep_r is not None:
            sep_k = _separability(results, key, counts)[:, start:]
            support = _head_curves(results, key, "separability_support", counts)[..., 0].nanmedian(-1).values
            out[(key, "separability", "support")] = support.numpy()
            share = _separability_share(sep_k, sep_r, margin, grid[start:], support)
            out[(key, "separability", "every")] = share.numpy()
            out[(key, "separability", "some")] = share.numpy()
    return out


def window_criteria(results, keys: Sequence[str], yardsticks: Sequence[str], reference: str = "softmax", *,
                    alpha: float = 0.01, margin: float = 0.02, knee: int = 16, resamples: int = RESAMPLES,
                    seed: int = SEED) -> tuple[dict, dict]:
    """The criteria of the window ``yardsticks`` for the normalisers ``keys``, with their
    intervals, from ``results`` that may hold only those yardsticks' statistics (and
    ``reference``'s): what :func:`yardstick_verdict` and :func:`yardstick_intervals` give for them,
    without measuring the other yardsticks. Returns ``(values, intervals)``, each
    ``{key: {yardstick: {criterion: ...}}}``: the value on all windows (NaN where it cannot be
    graded) and its percentile interval over the windows (widened to the value; none with fewer
    than 2 windows or where every resample is NaN)."""
    check_window_yardsticks(yardsticks)
    options = dict(alpha=alpha, margin=margin, knee=knee, yardsticks=yardsticks)
    ones = torch.ones(1, results.windows, dtype=torch.float64)
    whole = {k: float(v[0]) for k, v in yardstick_window_values(results, keys, ones, reference, **options).items()}
    values: dict = {key: {y: {} for y in yardsticks} for key in keys}
    intervals: dict = {key: {y: {} for y in yardsticks} for key in keys}
    for (key, y, c), v in whole.items():
        values[key][y][c] = v
    for (key, y, c), interval in _window_intervals(results, keys, whole, reference, options,
                                                   resamples, seed).items():
        intervals[key][y][c] = interval
    return values, intervals


def _window_intervals(results, keys: Sequence[str], estimates: dict, reference: str, options: dict,
                      resamples: int, seed: int) -> dict:
    """``{(key, yardstick, criterion): Interval}`` over the windows for the criteria of
    ``estimates`` (each one's value on all windows, to which its interval is widened), each
    resample's values from :func:`yardstick_window_values` with ``options``; empty with fewer than
    2 windows."""
    if results.windows < 2:
        return {}
    return B.bootstrap_counts(
        results.windows, lambda counts: yardstick_window_values(results, keys, counts, reference, **options),
        estimates, resamples=resamples, seed=seed)


def _gradient_intervals(results, keys: Sequence[str], reference: str, factor: float,
                        resamples: int, seed: int) -> dict:
    """``{key: {"every": Interval, "some": Interval}}`` (one share, two criteria) over the Jacobian
    windows: each distinct multiset once, through ``YardstickResults.decoupling`` on the drawn
    windows (on all of them it is the verdict's own value, to which the interval is widened);
    empty with fewer than 2 of them."""
    count = min(results.config.jacobian_windows, results.windows)
    if count < 2:
        return {}

    def values_of(rows: list[int]) -> dict:
        drawn = replace(results, stats={k: {name: (x[rows] if name in JACOBIAN_STATISTICS else x)
                                            for name, x in by_name.items()}
                                        for k, by_name in results.stats.items()})
        out = {}
        for key in keys:
            dec = drawn.decoupling(key, reference)
            out[key] = float((dec["ratios"] <= factor).to(torch.float64).mean()) if dec["matched"] else None
        return out

    found = B.bootstrap_values(count, values_of, keys, resamples=resamples, seed=seed, exchangeable=True)
    return {key: {"every": interval, "some": interval} for key, interval in found.items()}


def yardstick_intervals(results, verdicts: dict, reference: str = "softmax", *, alpha: float = 0.01,
                        margin: float = 0.02, factor: float = 0.5, knee: int = 16,
                        resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, dict[str, dict[str, Interval]]]:
    """Percentile bootstrap intervals over the windows of every criterion the yardstick claims
    grade: ``verdicts`` maps each normaliser's key to its
    :class:`~normlimits.experiments.alternatives.YardstickVerdict` (the values recorded, to which each
    interval is widened, and the reasons: a yardstick with a reason is not graded and gets none).
    Returns ``{key: {yardstick: {criterion: Interval}}}``, an empty dict where there is none
    (fewer than 2 windows; the gradient yardstick with fewer than 2 Jacobian windows)."""
    keys = list(verdicts)
    out: dict = {key: {y: {} for y in (*WINDOW_YARDSTICKS, "gradient")} for key in keys}
    estimates = {(key, y, c): v.values[y][c] for key, v in verdicts.items()
                 for y in WINDOW_YARDSTICKS if v.reason.get(y) is None for c in v.values[y]}
    for (key, y, c), interval in _window_intervals(results, keys, estimates, reference,
                                                   dict(alpha=alpha, margin=margin, knee=knee),
                                                   resamples, seed).items():
        out[key][y][c] = interval
    graded = [key for key, v in verdicts.items() if v.reason.get("gradient") is None]
    for key, ivs in _gradient_intervals(results, graded, reference, factor, resamples, seed).items():
        out[key]["gradient"] = ivs
    return out


def gamma_criteria(results, below: str, above: str) -> tuple[dict, dict]:
    """ALT-gamma's criteria from the vanishing yardstick of SSMax at half (``below``) and twice
    (``above``) the critical scale, measured on W windows (``results.stats[key]["max_weight"]``
    [W, layers, heads, G] over ``results.config.lengths``), with Student t intervals over the
    windows (the claim is asymptotic: the levels at the longest L and the trends over L together).

    Per window the mean over heads of the largest weight at each L, [W, G]; then:
    ``below`` / ``above``: its value at the longest L (mean over windows: the number the sweep
    table shows for all windows); ``falls``: the fitted exponent against L of that curve at
    ``below`` (negative: the rows move toward uniform as L grows); ``rises``: the fitted exponent
    of one minus that curve at ``above`` (negative: toward one key). Values are means over the
    windows of the per-window numbers (NaN where a window's number is), intervals
    (:func:`normlimits.core.bootstrap.t_interval`, unit window) given for finite criteria with
    W >= 2. Returns ``(values, intervals)``."""
    lengths = list(results.config.lengths)

    def curves(key: str) -> Tensor:                                            # [W, G]
        weights = results.stats[key]["max_weight"].to(torch.float64)
        return weights.reshape(weights.shape[0], -1, weights.shape[-1]).nanmean(1)

    low, high = curves(below), curves(above)
    series = {"below": low[:, -1], "above": high[:, -1],
              "falls": loglog_fit(lengths, low).exponent, "rises": loglog_fit(lengths, 1 - high).exponent}
    values = {k: float(v.mean()) for k, v in series.items()}
    intervals = {k: B.t_interval(v, unit="window") for k, v in series.items()
                 if v.numel() >= 2 and bool(torch.isfinite(v).all())}
    return values, intervals


def interval_sentence(intervals: dict, windows: int, jacobian_windows: int) -> str:
    """The chapter's sentence on how the yardstick claims' intervals were computed (or why some
    rows have none)."""
    given = [iv for by_y in intervals.values() for ivs in by_y.values() for iv in ivs.values()]
    if not given:
        return (f"With {windows} window(s) no interval can be given: these claims are graded on the "
                "windows' values, and their rows carry no interval.")
    first = given[0]
    gradient = ("The gradient yardstick runs on the first window only, so its rows carry no "
                "interval." if jacobian_windows < 2 else
                f"The gradient yardstick runs on the first {jacobian_windows} windows, which are "
                "its resampling unit.")
    return (f"Each yardstick criterion gets a {B.level_words(first, plural=False, method=True)} over the "
            f"windows ({first.resamples:,} resamples of the {windows} windows, drawn with repeats, "
            "each measured as the pooled sweep is: means over the drawn windows, then the exponents, "
            "the KS tests and the shares). " + gradient)
