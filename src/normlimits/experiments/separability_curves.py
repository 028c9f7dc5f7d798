"""Statistics of N_s/N curves: where the decline stops, per-head plateaus, the paper's monitoring
diagnostic, the temperature trend and the multi-head summary (inputs from
:class:`normlimits.experiments.separability_sweep.SeparabilitySweep`)."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from normlimits.core.bootstrap import bootstrap_values
from normlimits.metrics.multihead import bernoulli_heads, independent_copies

__all__ = ["Plateau", "plateau", "head_plateaus", "spearman", "monitor_statistics",
           "temperature_trend", "multihead_summary", "curve_statistic", "figure3_statistics",
           "largest_after", "multihead_statistics", "F3_KEYS", "figure3_by_protocol",
           "window_statistics", "separability_intervals"]


@dataclass
class Plateau:
    """A two-segment (hinge) fit of a curve against log2 N: where the decline stops.

    ``y = value_at_stop + slope_before * min(x - x*, 0) + slope_after * max(x - x*, 0)`` with
    ``x = log2 N`` and the breakpoint ``x* = log2 n_stop`` chosen among the grid points by least
    squares (N = 1 is left out: N_s/N = 1 there by definition). Slopes are changes of the curve
    per doubling of N. ``value``: the mean of the curve over N >= n_stop (the plateau level);
    ``saturated``: ``|slope_after| <= tolerance``; ``rms``: the fit's root-mean-square residual.
    """

    n_stop: int
    value: float
    value_at_stop: float
    slope_before: float
    slope_after: float
    saturated: bool
    tolerance: float
    rms: float


def plateau(n_grid, curve, tolerance: float = 0.02) -> Plateau:
    """Fit the hinge of :class:`Plateau` to ``curve`` [G] (e.g. the median over heads of N_s/N)."""
    c = np.asarray(curve, dtype=np.float64).reshape(1, -1)
    fit = _plateaus(n_grid, c, tolerance)
    return Plateau(n_stop=int(fit["n_stop"][0]), value=float(fit["value"][0]),
                   value_at_stop=float(fit["value_at_stop"][0]),
                   slope_before=float(fit["slope_before"][0]),
                   slope_after=float(fit["slope_after"][0]), saturated=bool(fit["saturated"][0]),
                   tolerance=tolerance, rms=float(fit["rms"][0]))


def _plateaus(n_grid, curves: np.ndarray, tolerance: float) -> dict:
    """The hinge of :class:`Plateau` fitted to each row of ``curves`` [C, G] at once: numpy
    arrays [C] named as Plateau's fields (``value`` the plateau level)."""
    grid = torch.as_tensor(n_grid, dtype=torch.float64).flatten()
    c = torch.as_tensor(np.asarray(curves, dtype=np.float64))
    if c.dim() != 2 or c.shape[1] != grid.numel():
        raise ValueError("curve and n_grid must have the same length.")
    if not tolerance > 0:
        raise ValueError("the plateau tolerance must be > 0 (a change per doubling of N).")
    keep = grid >= 2
    x, y = torch.log2(grid[keep]), c[:, keep]
    if x.numel() < 4:
        raise ValueError("the hinge fit needs at least 4 grid points with N >= 2.")
    if bool(torch.isnan(y).any()):
        raise ValueError("the curve has NaN at some N >= 2; measure every N of the grid first.")
    coef, sse = _hinge_fits(x, y)                 # [C, B, 3], [C, B]: breakpoint x[1], ..., x[G-2]
    best = torch.zeros(y.shape[0], dtype=torch.long)
    for k in range(1, sse.shape[1]):              # the first of (near-)equal sums of squares
        lower = sse[:, k] < sse.gather(1, best[:, None])[:, 0] - 1e-15
        best = torch.where(lower, torch.full_like(best, k), best)
    rows = torch.arange(y.shape[0])
    chosen, stop = coef[rows, best], best + 1     # breakpoint index among the points N >= 2
    after = torch.arange(x.numel())[None, :] >= stop[:, None]
    value = torch.where(after, y, 0.0).sum(1) / after.sum(1)
    return {"n_stop": torch.round(2 ** x[stop]).long().numpy(), "value": value.numpy(),
            "value_at_stop": chosen[:, 0].numpy(), "slope_before": chosen[:, 1].numpy(),
            "slope_after": chosen[:, 2].numpy(),
            "saturated": (chosen[:, 2].abs() <= tolerance).numpy(),
            "rms": torch.sqrt(sse[rows, best] / x.numel()).numpy()}


def _hinge_fits(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Least-squares hinge fits of each curve ``y`` [..., G] on ``x`` [G] (float64), one per
    breakpoint ``x[b]``, b = 1..G-2: coefficients [..., G-2, 3] (value at the breakpoint, slope
    before, slope after) and sums of squared residuals [..., G-2].

    Solved in closed form, not by LAPACK: the design's columns ``1``, ``u = min(x - x_b, 0)`` and
    ``v = max(x - x_b, 0)`` have ``u v = 0``, so the normal equations eliminate to
    ``c0 = (Sy - Su Suy/Suu - Sv Svy/Svv) / (n - Su^2/Suu - Sv^2/Svv)``,
    ``c1 = (Suy - Su c0)/Suu``, ``c2 = (Svy - Sv c0)/Svv`` (S: sums over the points; Suu, Svv > 0
    as each side of an inner breakpoint holds a point). Only elementwise products and sums: the
    bits do not depend on where the arrays lie in memory, which those of ``torch.linalg.lstsq``
    (MKL's gelsy) did: two audits of one model gave different last bits of F3's slopes, and so
    different results hashes, depending on the heap's state (measured with MKL_CBWR=AUTO and,
    about one run in eight, with it unset).
    """
    dx = x[None, :] - x[1:-1, None]                          # [B, G]
    u, v = dx.clamp(max=0.0), dx.clamp(min=0.0)
    n = float(x.numel())
    su, sv, suu, svv = u.sum(1), v.sum(1), (u * u).sum(1), (v * v).sum(1)
    yb = y.unsqueeze(-2)                                      # [..., 1, G]
    sy, suy, svy = y.sum(-1, keepdim=True), (u * yb).sum(-1), (v * yb).sum(-1)
    c0 = (sy - su * suy / suu - sv * svy / svv) / (n - su * su / suu - sv * sv / svv)
    c1 = (suy - su * c0) / suu
    c2 = (svy - sv * c0) / svv
    residual = c0[..., None] + c1[..., None] * u + c2[..., None] * v - yb
    return torch.stack([c0, c1, c2], dim=-1), (residual * residual).sum(-1)


def head_plateaus(n_grid, per_head, tolerance: float = 0.02) -> dict:
    """The hinge of :func:`plateau` fitted to every head's own curve, ``per_head`` [heads, G], all
    at once.

    Returns numpy arrays [heads]: ``n_stop``, ``level`` (mean over N >= n_stop), ``slope_after``
    and ``saturated`` (bool).
    """
    fit = _plateaus(n_grid, np.asarray(per_head, dtype=np.float64), tolerance)
    return {"n_stop": fit["n_stop"], "level": fit["value"], "slope_after": fit["slope_after"],
            "saturated": fit["saturated"]}


def spearman(x, y) -> float:
    """Spearman's rank correlation of two equal-length sequences (ties get average ranks);
    NaN when either is constant or shorter than 3."""
    from scipy.stats import spearmanr

    x, y = np.asarray(x, dtype=np.float64).ravel(), np.asarray(y, dtype=np.float64).ravel()
    if x.size != y.size:
        raise ValueError("spearman needs two sequences of the same length.")
    if x.size < 3 or np.all(x == x[0]) or np.all(y == y[0]):
        return float("nan")
    return float(spearmanr(x, y).statistic)


def curve_statistic(n_grid, per_head) -> np.ndarray:
    """Each head's mean N_s/N over N >= 2 of the grid (N = 1 is 1 by definition), [heads]."""
    grid = np.asarray(n_grid)
    return np.asarray(per_head, dtype=np.float64)[:, grid >= 2].mean(1)


def monitor_statistics(n_grid, per_head, entropy, *, band, knee: int, tolerance: float = 0.02) -> dict:
    """The paper's diagnostic, "rising entropy or N_s/N falling to 70-80% signals a saturated
    head", on per-head data: ``per_head`` [heads, G] N_s/N, ``entropy`` [heads] the heads'
    normalised attention entropy, ``band`` the (low, high) N_s/N band, ``knee`` the N where the
    paper's decline stops.

    Returns ``entropy_rank`` (Spearman correlation over heads of entropy and N_s/N at the knee;
    the diagnostic needs it negative), ``saturated`` (how many heads' own curves flatten,
    :func:`head_plateaus`), ``band_share`` (of those, the share whose plateau level lies in the
    band; NaN when none flattens), ``in_band`` (heads with a level in the band, saturated or
    not) and the per-head ``levels``, ``saturated_mask``.
    """
    grid = np.asarray(n_grid)
    if knee not in grid:
        raise ValueError(f"the knee N = {knee} is not on the grid {grid.tolist()}.")
    per_head = np.asarray(per_head, dtype=np.float64)
    fits = head_plateaus(grid, per_head, tolerance)
    low, high = band
    inside = (fits["level"] >= low) & (fits["level"] <= high)
    sat = fits["saturated"]
    return {"entropy_rank": spearman(np.asarray(entropy), per_head[:, int(np.where(grid == knee)[0][0])]),
            "saturated": int(sat.sum()), "heads": int(sat.size),
            "band_share": float(inside[sat].mean()) if sat.any() else float("nan"),
            "in_band": int(inside.sum()), "in_band_saturated": int((inside & sat).sum()),
            "levels": fits["level"], "saturated_mask": sat}


def temperature_trend(n_grid, by_temperature: dict) -> dict:
    """N_s/N against the softmax temperature: ``by_temperature`` {T: per-head [heads, G]}.

    Returns ``temperatures`` (sorted), ``median`` (per T, the median over heads of each head's
    mean N_s/N over N >= 2), ``rank`` (Spearman correlation of T and that median; -1: strictly
    better separation at smaller T) and ``gain`` (the median at the smallest T minus at the
    largest).
    """
    temps = sorted(by_temperature)
    if len(temps) < 2:
        raise ValueError("the temperature trend needs at least two temperatures.")
    median = np.array([float(np.median(curve_statistic(n_grid, by_temperature[t]))) for t in temps])
    return {"temperatures": np.array(temps), "median": median, "rank": spearman(temps, median),
            "gain": float(median[0] - median[-1])}


def multihead_summary(sweep, heads: int) -> dict:
    """Per N [G] (means over layers and heads) of the multi-head measurements of ``sweep``, for
    sets of ``heads`` heads (one of ``sweep.head_sets``).

    Keys: ``p`` (one head's N_s/N), ``other_rate`` (the other heads' rate on its top-N tokens),
    ``selecting`` (heads of the layer selecting a token of its top-N), ``coverage`` (fraction of
    its top-N distinguished by at least one head of a set of ``heads`` containing it),
    ``null`` (the same with the heads' distinguished tokens shuffled: independence given the
    rates), ``formula`` (``1 - (1 - p_h)^H`` per head, averaged), ``copies`` (H independent
    copies of the head, exact expectation, :func:`~normlimits.metrics.multihead.independent_copies`).
    """
    return _multihead_numbers(sweep, heads, knee=0)[1]


def figure3_statistics(n_grid, per_head, upper_exponential, tolerance: float) -> dict:
    """What Figure 3's claims rest on, from per-head means ``per_head`` [heads, G] and the heads'
    plug-in exponential upper bounds ``upper_exponential`` [heads, G].

    Returns ``fit`` (:func:`plateau` of the median over heads), ``median``, ``largest`` (the
    largest head per N), ``bound`` (the median exponential bound per N), and the rule's numbers:
    ``slope_after``, ``knee`` (N at the breakpoint), ``level``, ``tracks`` (mean over N >= 2 of
    |bound - largest|), ``flattening`` (|slope after| / |slope before|).
    """
    grid = np.asarray(n_grid)
    per_head = np.asarray(per_head, dtype=np.float64)
    median = np.median(per_head, 0)
    fit = plateau(grid, median, tolerance)
    largest = per_head.max(0)
    bound = np.nanmedian(np.asarray(upper_exponential, dtype=np.float64), 0)
    tracks = float(np.abs(bound - largest)[grid >= 2].mean())
    return {"fit": fit, "median": median, "largest": largest, "bound": bound,
            "slope_after": fit.slope_after, "slope_before": fit.slope_before, "knee": fit.n_stop,
            "level": fit.value, "tracks": tracks,
            "flattening": abs(fit.slope_after) / max(abs(fit.slope_before), 1e-12)}


def largest_after(n_grid, per_head, knee: int) -> float:
    """The largest per-head mean N_s/N at any N >= ``knee``."""
    grid = np.asarray(n_grid)
    return float(np.asarray(per_head, dtype=np.float64)[:, grid >= knee].max())


def multihead_statistics(sweep, heads: int, knee: int, tokens: int = 20_000, seed: int = 0) -> dict:
    """The premise and the conclusion of the multi-head formula for sets of ``heads`` heads.

    Returns ``table`` (per N, :func:`multihead_summary` plus ``bernoulli``: the sampled coverage
    of heads that distinguish every token independently with the head's p) and the rules'
    numbers over N >= ``knee``: ``rate_ratio`` (the other heads' rate on a head's top-N over its
    own), ``dependence`` (largest |coverage - shuffled|), ``gap`` (largest formula - copies),
    ``bernoulli`` (largest |sampled - formula|), and ``jensen`` (largest copies - formula over
    every N and head; at most 0 by concavity).
    """
    numbers, summ, p_head = _multihead_numbers(sweep, heads, knee)
    sampled = bernoulli_heads(p_head.nan_to_num(0.0), heads, tokens=tokens, seed=seed).mean((0, 1))
    table = {**{k: v for k, v in summ.items() if k != "heads"}, "bernoulli": sampled}
    sel = sweep.n_grid >= knee
    return {"table": table, "heads": heads, **numbers,
            "bernoulli": float((sampled - summ["formula"])[sel].abs().max())}


def _multihead_numbers(sweep, heads: int, knee: int):
    """The multi-head rules' numbers that are statistics of the windows (``rate_ratio``,
    ``dependence``, ``gap``, ``jensen``; not the sampled ``bernoulli``), the per-N summary and
    the heads' p, from one evaluation of :func:`~normlimits.metrics.multihead.independent_copies`."""
    if heads not in sweep.head_sets:
        raise ValueError(f"the sweep measured head sets {sweep.head_sets}, not {heads}; "
                         "pass head_sets=(..., heads) to separability_sweep.")
    grid = sweep.n_grid
    copies, formula, p_head = independent_copies(sweep.rank_hits, sweep.rank_rows, grid, heads)
    s = sweep.sharing
    mean = lambda t: t.double().mean((0, 1))  # noqa: E731
    summ = {"p": mean(s["own"]), "other_rate": mean(s["other_rate"]), "selecting": mean(s["selecting"]),
            "coverage": mean(s[f"coverage_{heads}"]), "null": mean(s[f"null_{heads}"]),
            "formula": mean(formula), "copies": mean(copies), "heads": heads}
    sel = grid >= knee
    numbers = {"rate_ratio": float(summ["other_rate"][sel].mean() / summ["p"][sel].mean()),
               "dependence": float((summ["coverage"] - summ["null"])[sel].abs().max()),
               "gap": float((summ["formula"] - summ["copies"])[sel].max()),
               "jensen": float(torch.nan_to_num(copies - formula, nan=-1.0).max())}
    return numbers, summ, p_head


#: the numbers Figure 3's rule (claim F3) reads from :func:`figure3_statistics`
F3_KEYS = ("slope_after", "knee", "level", "tracks", "flattening")


def figure3_by_protocol(sweep, tolerance: float) -> dict:
    """:func:`figure3_statistics` of the value vectors under each row protocol the sweep measured:
    ``"every query position (paper)"`` (its ``values`` rows), ``"<n> spaced rows"`` (subset
    ``spaced``) and ``"last row only"`` (subset ``last``), as far as the sweep has them."""
    def per_head(t):
        return t.reshape(-1, t.shape[-1]).numpy()

    out = {"every query position (paper)": figure3_statistics(
        sweep.n_grid, per_head(sweep.fraction["values"]), per_head(sweep.upper_exponential["values"]),
        tolerance)}
    for sub in ("spaced", "last"):
        s = sweep.subsets.get(sub, {})
        if "upper_exponential" in s:
            name = f"{s['rows']} spaced rows" if sub == "spaced" else "last row only"
            out[name] = figure3_statistics(sweep.n_grid, per_head(s["fraction"]),
                                           per_head(s["upper_exponential"]), tolerance)
    return out


def _heads(t) -> np.ndarray:
    """[layers, heads, G] -> numpy [all heads, G]."""
    return t.reshape(-1, t.shape[-1]).numpy()


def window_statistics(sweep, *, knee: int, tolerance: float, band, head_sets=None) -> dict:
    """The window statistics the separability chapter grades, from one sweep (all windows, or a
    bootstrap resample of them: :meth:`SeparabilitySweep.resampled`): ``{claim: {criterion key:
    value}}`` for F3 (every query position, the paper's protocol), S80, MON and TSEP, each as the
    chapter computes it (:func:`figure3_statistics`, :func:`largest_after`,
    :func:`monitor_statistics`, :func:`temperature_trend`), for the parts the sweep measured, and
    for MHP and MH (:func:`multihead_statistics`' measured numbers: not the sampled
    ``bernoulli``, a Monte Carlo check of the formula rather than a statistic of the windows, nor
    ``jensen``, an identity) for each ``head_sets`` entry
    ``{label: H}``: the claim ids ``MHP`` and ``MH`` for label None, ``MHP@label`` otherwise."""
    grid = np.asarray(sweep.n_grid)
    values = _heads(sweep.fraction["values"])
    f3 = figure3_statistics(grid, values, _heads(sweep.upper_exponential["values"]), tolerance)
    out = {"F3": {k: f3[k] for k in F3_KEYS}, "S80": {"largest_head": largest_after(grid, values, knee)}}
    if "uniform" in sweep.fraction:
        out["S80"]["largest_uniform"] = largest_after(grid, _heads(sweep.fraction["uniform"]), knee)
    if sweep.entropy is not None:
        mon = monitor_statistics(grid, values, sweep.entropy.reshape(-1).numpy(), band=band,
                                 knee=knee, tolerance=tolerance)
        out["MON"] = {"entropy_rank": mon["entropy_rank"], "band_share": mon["band_share"]}
    if len(sweep.temperature) >= 2:
        trend = temperature_trend(grid, {t: _heads(v) for t, v in sweep.temperature.items()})
        out["TSEP"] = {"rank": trend["rank"], "gain": trend["gain"]}
    for label, heads in (head_sets or {}).items():
        numbers = _multihead_numbers(sweep, heads, knee)[0]
        suffix = "" if label is None else f"@{label}"
        out["MHP" + suffix] = {k: numbers[k] for k in ("rate_ratio", "dependence")}
        out["MH" + suffix] = {"gap": numbers["gap"]}       # jensen: an identity (concavity)
    return out


def separability_intervals(sweep, *, knee: int, tolerance: float, band, head_sets=None,
                           windows: int | None = None, only=None, resamples: int | None = None) -> dict:
    """Percentile bootstrap intervals over the windows (:func:`normlimits.core.bootstrap.
    bootstrap_values`; a resample draws windows with replacement and pools their rows, every head
    of a window kept together) of :func:`window_statistics` (``head_sets`` as there):
    ``{claim: {key: Interval}}``.
    ``windows``: resample the first ``windows`` windows only (default all); ``only``: the
    ``"claim.key"`` names to compute (default all). A sweep of one window gives no interval."""
    if windows is None and sweep.windows < 2:
        return {}                                  # one window: nothing to resample
    count = sweep.windows if windows is None else int(windows)
    if not 2 <= count <= sweep.windows:
        raise ValueError(f"windows={windows}: resample between 2 and the sweep's {sweep.windows}")

    def values_of(idx):
        found = window_statistics(sweep.resampled(idx), knee=knee, tolerance=tolerance, band=band,
                                  head_sets=head_sets)
        return {f"{cid}.{k}": v for cid, got in found.items() for k, v in got.items()}

    keys = [k for k in values_of(range(count)) if only is None or k in set(only)]
    settings = {} if resamples is None else {"resamples": resamples}
    out: dict = {}
    for name, interval in bootstrap_values(count, values_of, keys, exchangeable=True, **settings).items():
        cid, key = name.rsplit(".", 1)
        out.setdefault(cid, {})[key] = interval
    return out
