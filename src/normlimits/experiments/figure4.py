"""What the gradients chapter reads off Figure 4: curves, fitted slopes and the graded statistics.

Input: a :class:`normlimits.metrics.jacobian.SensitivityProfile` (per-head means over rows and windows of
``g(T, eps)``, of its ``eps -> 0`` limit ``||J v||`` and of the exact ``||J||_2``, and the largest
row's ``||J||_2``). The paper plots the maximum over heads (Algorithm 5 keeps "the maximum of
these averages across the (head, layer) pairs"); so does everything here.

Slopes are log-log fits (:func:`normlimits.core.fits.loglog_fit`) over the grid temperatures in the
stated range; "at T" means at the grid temperature closest to T on a log scale.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import torch

from normlimits.core.fits import loglog_fit
from normlimits.metrics.jacobian import SensitivityProfile, paper_curve, sensitivity_envelope
from normlimits.core.protocol import HIGH_T, SHARP_T
from normlimits.claims import undecided_words
from normlimits.core import bootstrap as B

__all__ = ["Curves", "curves", "nearest", "slope", "summary_table", "statistics", "claim_values",
           "claim_intervals", "interval_sentence", "undecided_sentence", "limit_readings",
           "plot_figure4", "plot_anatomy"]


@dataclass(frozen=True)
class Curves:
    """Head-maximum curves of a profile, numpy arrays over the temperature grid ``t`` [nT]:
    ``g`` [nT, nE] (one column per epsilon ``eps``), ``linear`` (``||J v||``), ``norm``
    (row-mean exact ``||J||_2``), ``row_max`` (the largest row's ``||J||_2``); ``g_heads``
    [nT, nE, heads] and ``norm_heads`` [nT, heads] keep every head."""

    t: np.ndarray
    eps: np.ndarray
    g: np.ndarray
    linear: np.ndarray
    norm: np.ndarray
    row_max: np.ndarray
    g_heads: np.ndarray
    norm_heads: np.ndarray


def curves(profile: SensitivityProfile) -> Curves:
    """The maximum over heads of every statistic of ``profile``."""
    n_t, n_e = profile.g.shape[:2]
    g_heads = profile.g.reshape(n_t, n_e, -1).numpy()
    norm_heads = profile.norm_mean.reshape(n_t, -1).numpy()
    return Curves(t=profile.temperatures.numpy(), eps=profile.epsilons.numpy(), g=g_heads.max(-1),
                  linear=profile.g_linear.reshape(n_t, -1).numpy().max(-1), norm=norm_heads.max(-1),
                  row_max=profile.norm_max.reshape(n_t, -1).numpy().max(-1), g_heads=g_heads,
                  norm_heads=norm_heads)


def nearest(t: np.ndarray, value: float) -> int:
    """Index of the grid temperature closest to ``value`` on a log scale."""
    return int(np.argmin(np.abs(np.log(t) - math.log(value))))


def slope(t: np.ndarray, y: np.ndarray, low: float | None = None, high: float | None = None) -> float:
    """Log-log slope of ``y`` against ``t`` over ``low <= t <= high``."""
    return float(loglog_fit(t, y, low=low, high=high).exponent)


def summary_table(c: Curves, at=(1e-3, SHARP_T, HIGH_T, 100.0)):
    """One row per curve: slope for ``T <= SHARP_T``, slope for ``T >= HIGH_T`` and the values
    at the temperatures ``at`` (a pandas DataFrame indexed by the curve's name)."""
    import pandas as pd

    named = [(f"g, ε = {e:g}", c.g[:, k]) for k, e in enumerate(c.eps)]
    named += [("‖Jv‖ (ε → 0)", c.linear), ("‖J‖₂, row mean", c.norm), ("‖J‖₂, largest row", c.row_max)]
    rows = []
    for name, y in named:
        row = {"curve": name, f"slope T ≤ {SHARP_T:g}": slope(c.t, y, high=SHARP_T),
               f"slope T ≥ {HIGH_T:g}": slope(c.t, y, low=HIGH_T)}
        row.update({f"T = {v:g}": float(y[nearest(c.t, v)]) for v in at})
        rows.append(row)
    return pd.DataFrame(rows).set_index("curve")


def statistics(c: Curves, *, ordering_tolerance: float = 1e-3) -> dict[str, float]:
    """The numbers the Figure 4 claims are graded on (see ``normlimits/claims/gradients.py``).

    ``low_slopes`` / ``high_slopes``: slope of each epsilon's curve over ``T <= SHARP_T`` /
    ``T >= HIGH_T``; ``low_slope_dev``: the largest ``|slope + 1|`` of the former; ``spread_t1``:
    largest over smallest curve at ``HIGH_T``; ``drop_min``: the smallest fall of a curve from
    ``HIGH_T`` to 100; ``ordered``: share of grid temperatures below ``HIGH_T`` at which the curves
    are ordered by epsilon (smaller epsilon at least as large, up to ``ordering_tolerance``), every
    pair of curves; ``ordered_pairs``: the same share for each adjacent pair of epsilons (smallest
    first); ``ordered_extremes``: the same share for the smallest epsilon's curve against the
    largest's only; ``closeness``: smallest over ``T <= SHARP_T`` of the smallest epsilon's curve times ``2T``
    (its fraction of the limit ``1/(2T)``).
    """
    low = np.array([slope(c.t, c.g[:, k], high=SHARP_T) for k in range(len(c.eps))])
    high = np.array([slope(c.t, c.g[:, k], low=HIGH_T) for k in range(len(c.eps))])
    i1, i100 = nearest(c.t, HIGH_T), nearest(c.t, 100.0)
    order = np.argsort(c.eps)                                   # smallest epsilon first
    g = c.g[:, order]
    below = c.t < HIGH_T * (1 - 1e-9)
    pair_ordered = g[:, :-1] >= g[:, 1:] * (1 - ordering_tolerance)          # [T, n_eps - 1]
    ordered = np.all(pair_ordered, axis=1)
    extremes = g[:, 0] >= g[:, -1] * (1 - ordering_tolerance)
    sharp = c.t <= SHARP_T * (1 + 1e-9)
    return {"low_slopes": low, "high_slopes": high,
            "low_slope_dev": float(np.max(np.abs(low + 1))),
            "spread_t1": float(c.g[i1].max() / c.g[i1].min()),
            "drop_min": float(np.min(c.g[i1] / c.g[i100])), "drop_max": float(np.max(c.g[i1] / c.g[i100])),
            "ordered": float(ordered[below].mean()),
            "ordered_pairs": [float(v) for v in pair_ordered[below].mean(axis=0)],
            "ordered_extremes": float(extremes[below].mean()),
            "closeness": float(np.min(g[sharp, 0] * 2 * c.t[sharp]))}


def claim_values(c: Curves) -> dict[str, dict[str, float]]:
    """The values F4, EPS and LIM are graded on (claim id -> criterion key -> value), from
    :func:`statistics`: F4's ``low_slope`` (largest ``|slope + 1|`` below ``SHARP_T``),
    ``collapse`` (spread at ``HIGH_T``) and ``drop`` (log10 of the smallest fall to T = 100);
    EPS's ``ordered`` and ``extremes``; LIM's ``closeness``."""
    st = statistics(c)
    return {"F4": {"low_slope": st["low_slope_dev"], "collapse": st["spread_t1"],
                   "drop": float(np.log10(st["drop_min"]))},
            "EPS": {"ordered": st["ordered"], "extremes": st["ordered_extremes"]},
            "LIM": {"closeness": st["closeness"]}}


def claim_intervals(profile: SensitivityProfile, **bootstrap_settings) -> dict[str, dict]:
    """Bootstrap intervals over the corpus windows of every value of :func:`claim_values`
    (claim id -> criterion key -> :class:`normlimits.core.bootstrap.Interval`): each resample of
    windows (with repeats) pools its windows' rows as the profile pools all of them (``g`` = the
    drawn windows' summed ``g`` over their rows), takes the maximum over heads and reads the
    statistics as the chapter does. These are extremes (maxima over heads, minima over T), which
    resampling biases, so an interval may be widened to its estimate
    (:data:`normlimits.core.bootstrap.METHOD`). Empty with fewer than two windows or a profile without
    per-window sums. ``bootstrap_settings`` go to :func:`normlimits.core.bootstrap.bootstrap_values`."""
    sums, rows = profile.g_window_sums, profile.window_rows
    if sums is None or rows is None or sums.shape[0] < 2:
        return {}
    base = curves(profile)
    n_t, n_e = sums.shape[1:3]
    names = [f"{cid}/{key}" for cid, values in claim_values(base).items() for key in values]

    def values_of(drawn):
        index = torch.as_tensor(drawn)
        g = sums[index].sum(0) / rows[index].sum()
        values = claim_values(replace(base, g=g.reshape(n_t, n_e, -1).amax(-1).numpy()))
        return {name: values[name.split("/")[0]][name.split("/")[1]] for name in names}

    out: dict[str, dict] = {}
    for name, interval in B.bootstrap_values(int(sums.shape[0]), values_of, names,
                                             **bootstrap_settings).items():
        cid, key = name.split("/")
        out.setdefault(cid, {})[key] = interval
    return out


def interval_sentence(values: dict[str, dict[str, float]], intervals: dict[str, dict]) -> str:
    """The chapter's sentence on Figure 4's intervals (:func:`claim_intervals`), or why there are
    none."""
    if not intervals:
        return ("With a single window there is nothing to resample: F4, EPS and LIM are graded on "
                "their values and carry no interval.")
    f4, eps, lim = intervals["F4"], intervals["EPS"], intervals["LIM"]
    first = f4["low_slope"]
    widened = sorted(f"{cid} {key}" for cid, ivs in intervals.items() for key, iv in ivs.items() if iv.widened)
    words = (f"Resampling the {first.n} windows ({first.resamples:,} bootstrap resamples, each "
             f"pooling its windows' rows as the figure pools all of them) gives {B.level_words(first)}: "
             f"F4's largest distance from slope -1 {values['F4']['low_slope']:.2f} "
             f"[{f4['low_slope'].low:.2f}, {f4['low_slope'].high:.2f}], its spread at T = {HIGH_T:g} "
             f"{values['F4']['collapse']:.2f} [{f4['collapse'].low:.2f}, {f4['collapse'].high:.2f}], "
             f"its log10 fall {values['F4']['drop']:.2f} [{f4['drop'].low:.2f}, {f4['drop'].high:.2f}]; "
             f"EPS's ordered share {values['EPS']['ordered']:.2f} [{eps['ordered'].low:.2f}, "
             f"{eps['ordered'].high:.2f}]; LIM's closeness {values['LIM']['closeness']:.3g} "
             f"[{lim['closeness'].low:.3g}, {lim['closeness'].high:.3g}].")
    if widened:
        words += (" These statistics are maxima over heads and minima over temperatures, which "
                  "resampling with repeats biases; where the percentiles missed the value itself the "
                  f"interval was widened to it ({', '.join(widened)}).")
    return words


def undecided_sentence(profile: SensitivityProfile, intervals: dict[str, dict], *,
                       paper_model: bool) -> str:
    """For every undecided criterion of an inconclusive Figure 4 claim (issue 31 item 3): its
    interval on all windows and on the first half of them, and roughly how many windows would
    decide it (:func:`normlimits.claims.undecided_words`). ``paper_model``: whether the profile
    was measured on GPT-2 124M (F4's and LIM's identity criterion: they name GPT-2's
    measurements)."""
    values = claim_values(curves(profile))
    for cid in ("F4", "LIM"):
        values[cid] = {**values[cid], "paper_model": int(paper_model)}
    windows = 0 if profile.g_window_sums is None else int(profile.g_window_sums.shape[0])
    half = windows // 2
    half_intervals = (claim_intervals(replace(profile, g_window_sums=profile.g_window_sums[:half],
                                              window_rows=profile.window_rows[:half]))
                      if half >= 2 else {})
    parts = undecided_words(values, intervals, half_intervals,
                            on_threshold="a share of the grid temperatures takes values on a lattice")
    return ("How many windows would decide it: " + "; ".join(parts) + "." if parts
            else "No verdict of Figure 4 is inconclusive.")


def ordering_ratios(c: Curves):
    """Figure 4's curves against each other: for each adjacent pair of epsilons (smallest first),
    ``g(T, smaller) / g(T, larger)`` at every grid temperature below ``HIGH_T`` (the temperatures
    :func:`statistics` grades EPS on), as a pandas DataFrame indexed by T."""
    import pandas as pd

    order = np.argsort(c.eps)
    g = c.g[:, order]
    below = c.t < HIGH_T * (1 - 1e-9)
    names = [f"g(ε={c.eps[order][k]:g}) / g(ε={c.eps[order][k + 1]:g})" for k in range(len(order) - 1)]
    return pd.DataFrame(g[below, :-1] / g[below, 1:], columns=names, index=pd.Index(c.t[below], name="T"))


def limit_readings(c: Curves):
    """"Close to the theoretical limit for T < 0.1", read several ways: for each measured curve
    (``g`` at the smallest epsilon, the row-mean and the largest-row ``||J||_2``) and each limit
    (the valid ``1/(2T)``, the paper's curve ``min{1/(4T), sqrt 2}``), the smallest and largest
    ratio over ``T <= SHARP_T`` (a pandas DataFrame)."""
    import pandas as pd

    sharp = c.t <= SHARP_T * (1 + 1e-9)
    t = c.t[sharp]
    limits = {"1/(2T), the valid bound": 1 / (2 * t), "min{1/(4T), √2}, the paper's curve":
              paper_curve(torch.as_tensor(t)).numpy()}
    measured = {f"g, ε = {c.eps.min():g}": c.g[sharp, int(np.argmin(c.eps))],
                "‖J‖₂, row mean": c.norm[sharp], "‖J‖₂, largest row": c.row_max[sharp]}
    rows = [{"measured": m, "limit": name, "smallest ratio": float((y / lim).min()),
             "largest ratio": float((y / lim).max())}
            for m, y in measured.items() for name, lim in limits.items()]
    return pd.DataFrame(rows).set_index(["measured", "limit"])


# ------------------------------------------------------------------------------------- figures

def plot_figure4(c: Curves):
    """Figure 4 reproduced: one panel per epsilon, the maximum, median and range over heads of
    ``g``, the row-mean exact norm, the paper's curve and the corrected envelope."""
    import matplotlib.pyplot as plt

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    rows = (len(c.eps) + 2) // 2           # two panels a row, the legend in the last place
    fig, grid = plt.subplots(rows, 2, figsize=(7.2, 3.3 * rows), sharey=True, squeeze=False)
    axes = grid.ravel()
    tt = torch.as_tensor(c.t)
    for k, (e, ax) in enumerate(zip(c.eps, axes)):
        heads = c.g_heads[:, k]
        ax.fill_between(c.t, heads.min(-1), heads.max(-1), color=colours[k], alpha=0.2, lw=0,
                        label="g, range over heads (band)")
        ax.plot(c.t, heads.max(-1), color=colours[k], marker="o", ms=3, label="g, max over heads")
        ax.plot(c.t, np.median(heads, -1), color=colours[k], ls="--", lw=1, label="g, median head")
        ax.plot(c.t, c.norm, color="0.45", lw=1.5, label=r"$\|J\|_2$ (mean over rows)")
        ax.plot(c.t, paper_curve(tt).numpy(), "k--", lw=1.2, label=r"paper: $\min\{1/(4T),\sqrt{2}\}$")
        ax.plot(c.t, sensitivity_envelope(tt, float(e)).numpy(), "k:", lw=1.5,
                label=r"corrected: $\min\{1/(2T),\sqrt{2}/\varepsilon\}$")
        ax.set(xscale="log", yscale="log", xlabel="temperature T", title=f"ε = {e:g}")
    first = axes[0]
    for ax in grid[:, 0]:
        ax.set_ylabel(r"sensitivity $g(T,\varepsilon)$")
    first.set_ylim(max(1e-6, float(c.g_heads[c.g_heads > 0].min()) / 3), 3e3)
    handles, labels = first.get_legend_handles_labels()
    for ax in axes[len(c.eps):]:
        ax.axis("off")
    axes[-1].legend(handles, labels, loc="center", frameon=False)
    fig.tight_layout()
    return fig


def plot_anatomy(c: Curves):
    """The three epsilon curves on one axis with their caps ``sqrt(2)/eps``, the ``eps -> 0``
    limit, the exact norms (row mean and largest row) and ``1/(2T)``."""
    import matplotlib.pyplot as plt

    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, ax = plt.subplots(figsize=(7.2, 4.6))
    for k, e in enumerate(c.eps):
        ax.plot(c.t, c.g[:, k], color=colours[k], marker="o", ms=3, label=f"g, ε = {e:g}")
        ax.axhline(math.sqrt(2) / e, color=colours[k], ls=":", lw=1.2)
    ax.plot(c.t, c.linear, "k-", lw=1.2, label=r"$\|Jv\|$ (ε → 0)")
    ax.plot(c.t, c.norm, color="0.45", lw=1.5, label=r"$\|J\|_2$, mean over rows")
    ax.plot(c.t, c.row_max, color="0.45", ls="--", lw=1.2, label=r"$\|J\|_2$, largest row")
    ax.plot(c.t, 1 / (2 * c.t), color="k", lw=0.6, label="1/(2T)")
    ax.set(xscale="log", yscale="log", xlabel="temperature T", ylabel="max over heads")
    ax.set_ylim(max(1e-6, float(c.g[c.g > 0].min()) / 3), 3e3)
    ax.legend(ncol=2, loc="lower left")
    fig.tight_layout()
    return fig
