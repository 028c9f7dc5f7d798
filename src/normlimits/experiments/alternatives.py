"""The paper's four yardsticks applied to any normaliser on fixed logits (the alternatives chapter).

The logits are the model's own (``scale * q . k`` from :mod:`normlimits.model.capture`, masked keys
``-inf``); only the normaliser that turns them into weights is swapped. Nothing here claims
anything about model quality after a swap: the model was trained with softmax.

The yardsticks, each reusing the metric of the chapter that introduced it:

1. **vanishing** (Lemma 1): largest weight and entropy of the query that sees ``L`` keys, for a
   grid of L (rows ``L - 1`` of one forward pass, :func:`normlimits.metrics.vanishing.row_logits`);
2. **distance collapse** (Theorem 1 / Corollary 2, Figure 2c): the true distance ``d~_N`` and
   the main term of its random-subset expectation against N
   (:func:`normlimits.metrics.distances.distance_profile`), and the critical N at which the two cannot be
   told apart across heads (:meth:`YardstickResults.critical_n`);
3. **separability** (Theorem 2): ``N_s / N`` against N
   (:func:`normlimits.metrics.separability.geometric_separability`, value vectors on the unit sphere);
4. **gradient** (Lemma 2 / Corollary 3): the spectral norm of the Jacobian ``d alpha / d l`` of
   ``alpha = f(l / T)`` against T (:mod:`normlimits.metrics.normalizer_jacobians`), and the norm at equal
   selectivity against softmax's (:meth:`YardstickResults.decoupling`).

Rows that need not sum to 1 (softmax_1, the sink, SA-softmax, softpick, sigmoid,
stick-breaking) enter every yardstick with their raw weights, the ones that multiply the value
vectors: the largest weight is the raw one (Lemma 1 bounds ``alpha_i`` itself), ``d~`` and
``N_s`` use ``alpha_i x_i`` and ``s = sum_{top N} alpha_i x_i`` as the head outputs them, the
Jacobian is that of the raw weights and selectivity is the raw largest weight. Only the entropy
is taken of the row renormalised to sum 1 (it is a property of the shape of the row), and the
row sum is reported beside it.

Shapes: logits ``[..., L]`` with the key dimension last; weights the same; per-row statistics
``[...]``. Units: logits in nats (GPT-2's scaled ``q.k``), T dimensionless, distances in the
units of the value vectors. Computation in float64.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, replace
from typing import Iterable, Sequence

import torch
from torch import Tensor

from normlimits.metrics import distances as D
from normlimits.metrics import jacobian as J
from normlimits.metrics import separability as S
from normlimits.metrics import vanishing as V
from normlimits.core.fits import loglog_fit
from normlimits.metrics.normalizer_jacobians import EXACT_NORMS, family, jacobian_norm, lanczos_norm
from normlimits.metrics.normalizers import (
    NORMALIZERS, Normalizer, check_temperature, get_normalizer, visible_mask)
from normlimits.core.protocol import length_grid
from normlimits.claims import claim, describe_outcomes
from normlimits.claims.alternatives import claim_id, YARDSTICKS
from normlimits.core.markup import html_table, inline_html, significant

DTYPE = torch.float64

__all__ = [
    "row_statistics",
    "YardstickConfig",
    "YardstickResults",
    "WINDOW_YARDSTICKS",
    "WINDOW_STATISTICS",
    "JACOBIAN_STATISTICS",
    "check_window_yardsticks",
    "measure_window",
    "measure",
    "critical_scale",
    "sink_matching_logit",
    "YardstickVerdict",
    "separability_support",
    "separability_share",
    "separability_shares",
    "yardstick_verdict",
    "VERDICT_MARKS",
    "summary_table",
    "sweep_table",
    "row_properties",
    "NON_ESCAPING_LOG_BOUND",
    "synthetic_exponents",
    "verdict_overview",
]


# =============================================================================== yardstick 1
def row_statistics(weights: Tensor, logits: Tensor) -> dict[str, Tensor]:
    """Per-row statistics of normalised weights: [..., L] -> dict of [...] tensors.

    ``max_weight``; ``mass`` (row sum); ``entropy`` (nats) of the row renormalised to sum 1,
    ``p = w / sum w`` over visible keys (for rows that already sum to 1 it is the usual entropy);
    ``entropy_ratio`` = entropy / log(n) (1 for a uniform row; NaN for n = 1); ``support``: the
    number of visible keys with weight > 0; ``keys``: the number of visible keys n.
    """
    visible = torch.isfinite(logits)
    w = weights.to(DTYPE)
    if bool((w < 0).any()):
        raise ValueError("row_statistics needs non-negative weights (entropy of w / sum w)")
    mass = w.sum(-1)
    p = w / mass.unsqueeze(-1).clamp_min(torch.finfo(DTYPE).tiny)
    plogp = torch.where(p > 0, p * torch.log(torch.where(p > 0, p, torch.ones_like(p))),
                        torch.zeros_like(p))
    entropy = -plogp.sum(-1)
    keys = visible.sum(-1).to(DTYPE)
    ratio = entropy / torch.log(keys)
    return {"max_weight": w.amax(-1), "mass": mass, "entropy": entropy,
            "entropy_ratio": torch.where(keys > 1, ratio, torch.full_like(ratio, float("nan"))),
            "support": ((w > 0) & visible).sum(-1).to(DTYPE), "keys": keys}


# =============================================================================== measurement
@dataclass(frozen=True)
class YardstickConfig:
    """Grids of the four yardsticks (all from one forward pass per window).

    ``lengths``: L grid of the vanishing yardstick (rows L-1); ``rows``: query positions used by
    the distance and separability yardsticks (each sees position + 1 keys); ``n_grid``: top-N
    sizes (every N below the smallest row's visible keys); ``temperatures``: T grid of the
    gradient yardstick; ``jacobian_rows``: query positions for it; ``lanczos_steps``: Lanczos
    steps for the norms without a closed form; ``sphere_radius``: M
    for separability (value vectors projected on the sphere of radius M); ``jacobian_windows``:
    how many of the first windows enter the gradient yardstick (it is the costly one);
    ``reference_temperatures``: a fine T grid on which softmax's (selectivity, norm) curve is
    traced for :meth:`YardstickResults.decoupling` (exact norms, cheap).
    """

    lengths: tuple[int, ...]
    rows: tuple[int, ...]
    n_grid: tuple[int, ...]
    temperatures: tuple[float, ...]
    jacobian_rows: tuple[int, ...]
    lanczos_steps: int = 32
    sphere_radius: float = 1.0
    jacobian_windows: int = 2
    reference_temperatures: tuple[float, ...] = tuple(
        float(t) for t in torch.logspace(-2.5, 1.5, 41, dtype=torch.float64))

    @classmethod
    def for_window(cls, length: int, *, rows: int = 16, jacobian_rows: int = 8,
                   temperatures: Sequence[float] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
                   smallest: int = 32, **options) -> "YardstickConfig":
        """Default grids for windows of ``length`` tokens.

        Lengths: powers of two from ``smallest`` to ``length``; rows: ``rows`` positions evenly
        spaced over the second half of the window; N: powers of two below the shortest row's
        keys; Jacobian rows: :func:`normlimits.metrics.jacobian.default_rows`. ``options`` set the other
        fields (``lanczos_steps``, ``jacobian_windows``, ...).
        """
        if length < 2 * smallest:
            raise ValueError(f"windows of L={length} are too short for the sweep from "
                             f"L={smallest}; use windows of at least {2 * smallest} tokens.")
        lengths = tuple(length_grid(smallest, length))
        positions = torch.linspace(length // 2 - 1, length - 1, rows).round().long().unique()
        shortest = int(positions.min()) + 1
        n_grid = tuple(2 ** k for k in range(0, int(math.log2(shortest - 1)) + 1))
        jrows = tuple(J.default_rows(length, jacobian_rows).tolist())
        return cls(lengths=lengths, rows=tuple(positions.tolist()), n_grid=n_grid,
                   temperatures=tuple(float(t) for t in temperatures), jacobian_rows=jrows, **options)


def _check_config(config: YardstickConfig, window: int) -> None:
    V.check_lengths(config.lengths, window)
    if max(config.rows) >= window or max(config.jacobian_rows) >= window:
        raise ValueError(f"query rows must lie in 0..{window - 1} (the window's positions)")
    if max(config.n_grid) >= min(config.rows) + 1:
        raise ValueError(f"every N must be below the shortest row's visible keys "
                         f"({min(config.rows) + 1}); got max N = {max(config.n_grid)}")
    for t in config.temperatures:
        check_temperature(t)


def _norms_over_temperatures(nz: Normalizer, logits: Tensor, config: YardstickConfig) -> Tensor:
    """Jacobian norms [nT, ...] for every T of the config; the autograd ones in one batch.

    ``d f(l/T) / d l = J_f(l/T) / T``, so Lanczos runs once on the stacked ``[nT, ...]``
    logits ``l / T`` at temperature 1 and is divided by T afterwards.
    """
    temps = torch.tensor(config.temperatures, dtype=DTYPE)
    if family(nz) in EXACT_NORMS:
        return torch.stack([jacobian_norm(nz, logits, t) for t in config.temperatures])
    shape = (-1,) + (1,) * logits.dim()
    stacked = logits.unsqueeze(0) / temps.reshape(shape)                 # [nT, ..., R, L]
    # one row at a time, cropped to the keys it sees (causal rows waste no work on masked keys)
    visible = torch.isfinite(stacked).reshape(-1, *stacked.shape[-2:]).any(0)   # [R, L]
    parts = []
    for r in range(stacked.shape[-2]):
        width = int(visible[r].nonzero().max()) + 1
        parts.append(lanczos_norm(nz, stacked[..., r, :width], 1.0, steps=config.lanczos_steps))
    norms = torch.stack(parts, dim=-1)
    return norms / temps.reshape((-1,) + (1,) * (norms.dim() - 1))


def _softmax_curve(logits: Tensor, temperatures: Sequence[float]) -> tuple[Tensor, Tensor]:
    """Softmax's mean exact Jacobian norm and mean largest weight over rows, per T: 2 x [nT, ...]."""
    norms, sel = [], []
    for t in temperatures:
        w = torch.softmax(logits / t, -1)
        norms.append(jacobian_norm("softmax", logits, t).mean(-1))
        sel.append(w.amax(-1).mean(-1))
    return torch.stack(norms), torch.stack(sel)


#: the yardsticks measured on every window, and the statistics each needs (the gradient
#: yardstick's, measured on the first windows only, are chosen by ``gradient``)
WINDOW_YARDSTICKS = ("vanishing", "distance", "separability")
JACOBIAN_STATISTICS = ("jacobian", "jacobian_max", "jacobian_selectivity", "reference_jacobian",
                       "reference_selectivity")
WINDOW_STATISTICS = {"vanishing": ("max_weight", "entropy", "entropy_ratio", "mass", "support"),
                     "distance": ("distance", "expected", "top_n_mass"),
                     "separability": ("separability", "separability_support")}


def check_window_yardsticks(yardsticks: Sequence[str]) -> None:
    """ValueError naming the choices unless every entry of ``yardsticks`` is a window yardstick."""
    unknown = sorted(set(yardsticks) - set(WINDOW_YARDSTICKS))
    if unknown:
        raise ValueError(f"unknown window yardstick(s) {unknown}; choose from {list(WINDOW_YARDSTICKS)}")


def measure_window(capture, normalizers: Sequence[str | Normalizer], config: YardstickConfig,
                   *, gradient: bool | Sequence[str] = True,
                   yardsticks: Sequence[str] = WINDOW_YARDSTICKS) -> dict[str, dict[str, Tensor]]:
    """The four yardsticks on one captured window, for every normaliser.

    ``capture``: a :class:`normlimits.model.capture.WindowCapture` (queries, keys, values
    [layers, heads, L, d], per-layer ``scale``). Returns ``{normaliser key: {statistic: tensor}}``:

    - ``max_weight``, ``entropy``, ``entropy_ratio``, ``mass``, ``support`` [layers, heads, G]
      (rows L-1 for every L of ``config.lengths``);
    - ``distance``, ``expected`` [layers, heads, n]: mean over ``config.rows`` of ``d~_N`` and of
      the main term of its random-subset expectation; ``top_n_mass`` likewise;
    - ``separability`` [layers, heads, n]: mean over rows of ``N_s / N``;
      ``separability_support`` [layers, heads, 1]: median over the same rows of the support (keys
      with weight > 0), which caps ``N_s`` (``N_s <= |S|`` when ``|S| <= N``);
    - ``jacobian`` [nT, layers, heads]: mean over ``config.jacobian_rows`` of the spectral norm;
      ``jacobian_max`` [nT, layers, heads]: the largest over those rows;
      ``jacobian_selectivity`` [nT, layers, heads]: mean over those rows of the largest weight
      at each T; for softmax also ``reference_jacobian`` / ``reference_selectivity``
      [nTref, layers, heads], the same on ``config.reference_temperatures`` (only with
      ``gradient``: True for every normaliser, or the keys of those that need it; the sweeps
      skip this costly yardstick).

    ``yardsticks``: the window yardsticks measured (:data:`WINDOW_STATISTICS` lists each one's
    statistics; the others are not computed, e.g. only the vanishing rows L-1 when only a
    vanishing criterion is wanted).
    """
    check_window_yardsticks(yardsticks)
    window = capture.values.shape[-2]
    _check_config(config, window)
    lengths = torch.tensor(config.lengths)
    rows = torch.tensor(config.rows)
    jrows = torch.tensor(config.jacobian_rows)
    top = int(rows.max()) + 1
    logits_v = V.row_logits(capture.queries, capture.keys, capture.scale, lengths)   # [l,h,G,K]
    logits_r = capture.logits(rows)[..., :top].to(DTYPE)                              # [l,h,R,top]
    values = capture.values[..., :top, :].to(DTYPE)
    sphere = S.project_to_sphere(values, config.sphere_radius)
    jtop = int(jrows.max()) + 1
    logits_j = capture.logits(jrows)[..., :jtop].to(DTYPE)                            # [l,h,Rj,jtop]
    out: dict[str, dict[str, Tensor]] = {}
    for name in normalizers:
        nz = get_normalizer(name)
        res = {}
        if "vanishing" in yardsticks:
            stats = row_statistics(nz(logits_v), logits_v)
            res |= {k: stats[k] for k in WINDOW_STATISTICS["vanishing"]}
        w = nz(logits_r) if {"distance", "separability"} & set(yardsticks) else None
        if "distance" in yardsticks:
            prof = D.distance_profile(w, values, list(config.n_grid), lengths=rows + 1,
                                      expectation=True, jensen=False, bounds=False)
            res["distance"] = prof.true.mean(-2)
            res["expected"] = prof.expected_main.mean(-2)
            res["top_n_mass"] = prof.top_n_mass.mean(-2)
        if "separability" in yardsticks:
            sep = S.geometric_separability(w, sphere, list(config.n_grid), rows=rows)
            res["separability"] = torch.nanmean(sep.fraction.to(DTYPE), dim=-2)
            support = ((w > 0) & torch.isfinite(logits_r)).sum(-1).to(DTYPE)          # [l,h,R]
            res["separability_support"] = support.median(-1, keepdim=True).values
        if gradient is True or (gradient and nz.key in gradient):
            norms = _norms_over_temperatures(nz, logits_j, config)                   # [nT,l,h,Rj]
            res["jacobian"] = norms.mean(-1)
            res["jacobian_max"] = norms.amax(-1)
            res["jacobian_selectivity"] = torch.stack(
                [nz.at_temperature(logits_j, t).amax(-1).mean(-1) for t in config.temperatures])
            if nz.key == "softmax":
                res["reference_jacobian"], res["reference_selectivity"] = _softmax_curve(
                    logits_j, config.reference_temperatures)
        out[nz.key] = res
    return out


@dataclass
class YardstickResults:
    """The four yardsticks for several normalisers, stacked over windows.

    ``stats[key][name]`` is a tensor with a leading window dimension [W, ...] (shapes of
    :func:`measure_window`; the ``jacobian*`` statistics have ``jacobian_windows`` rows, the first
    windows); ``config`` the grids; ``seconds`` the wall time; ``windows`` the window count.
    """

    config: YardstickConfig
    normalizers: list[str]
    stats: dict[str, dict[str, Tensor]]
    seconds: float = 0.0
    windows: int = 0

    def curve(self, key: str, name: str, reduce: str = "mean") -> Tensor:
        """A yardstick curve for one normaliser: mean over windows, then ``reduce`` over heads.

        ``reduce`` in 'mean', 'median', 'max'. Returns [G] / [n] / [nT].
        """
        x = self.stats[key][name].mean(0)
        if name.startswith(("jacobian", "reference")):
            flat = x.reshape(x.shape[0], -1)
        else:
            flat = x.reshape(-1, x.shape[-1]).T
        if reduce == "mean":
            return flat.nanmean(-1)
        if reduce == "median":
            return flat.nanmedian(-1).values
        if reduce == "max":
            return flat.amax(-1)
        raise ValueError(f"reduce must be 'mean', 'median' or 'max' (got {reduce!r})")

    def first(self, count: int) -> "YardstickResults":
        """The results of the first ``count`` windows alone (the Jacobian statistics, measured on
        the first windows only, of at most that many); ValueError unless 1 <= count <= windows."""
        if not 1 <= count <= self.windows:
            raise ValueError(f"count must lie in 1..{self.windows} (got {count})")
        return replace(self, stats={key: {name: x[:count] for name, x in by_name.items()}
                                    for key, by_name in self.stats.items()}, windows=count)

    def extended(self, other: "YardstickResults") -> "YardstickResults":
        """These results followed by ``other``'s windows (same grids; ``other``'s normalisers
        among these): the normalisers and window statistics ``other`` measured, each stacked after
        this one's, and the Jacobian statistics (measured on the first windows only) this one's.
        A window statistic ``other`` did not measure is left out (it would rest on fewer windows
        than the rest). ValueError when the grids differ or ``other`` has another normaliser."""
        if other.config != self.config or not set(other.normalizers) <= set(self.normalizers):
            raise ValueError("results of other grids or normalisers cannot be stacked: measure both "
                             "with the same YardstickConfig, the second with some of the first's "
                             "normalisers")
        stats = {}
        for key in other.normalizers:
            mine, theirs = self.stats[key], other.stats[key]
            stats[key] = {name: (torch.cat([x, theirs[name]]) if name in theirs else x)
                          for name, x in mine.items() if name in theirs or name in JACOBIAN_STATISTICS}
        return replace(self, normalizers=list(other.normalizers), stats=stats,
                       windows=self.windows + other.windows, seconds=self.seconds + other.seconds)

    def head_values(self, key: str, name: str) -> Tensor:
        """Per-head values, mean over windows: [heads_total, G/n] (or [nT, heads_total])."""
        x = self.stats[key][name].mean(0)
        if name.startswith(("jacobian", "reference")):
            return x.reshape(x.shape[0], -1)
        return x.reshape(-1, x.shape[-1])

    def max_weight_exponent(self, key: str) -> Tensor:
        """Per head: fitted exponent e of ``max weight ~ L^e`` (mean over windows; an arithmetic
        mean, so rows that are all zero, e.g. softpick's, count as 0; lengths where the mean is
        0 drop out of the fit)."""
        mw = self.stats[key]["max_weight"].mean(0)
        return loglog_fit(list(self.config.lengths), mw.reshape(-1, mw.shape[-1])).exponent

    def decoupling(self, key: str, reference: str = "softmax") -> dict:
        """Jacobian norm at equal selectivity: ``key`` against ``reference`` across the T grid.

        Each normaliser traces a curve (selectivity, norm) over T, both means over windows,
        heads and the Jacobian rows, selectivity being the mean largest weight (the reference's
        on the fine ``reference_temperatures`` grid when measured there). For every T at
        which ``key``'s selectivity lies inside the reference curve's range, the reference
        norm at that selectivity is interpolated (linear in log-norm against the logit of the
        selectivity, which resolves both the diffuse and the near-one-hot ends) and
        the ratio ``norm_key / norm_reference`` taken: below 1 means a smaller Jacobian for the
        same selectivity. Returns ``{"ratios": Tensor [m], "selectivity": Tensor [m],
        "geometric_mean": float (NaN if m = 0), "matched": m}``.
        """
        def curve(name, prefix=""):
            sel = "reference_selectivity" if prefix else "jacobian_selectivity"
            jac = "reference_jacobian" if prefix else "jacobian"
            return self.curve(name, sel), self.curve(name, jac)

        def logit(p):
            p = p.clamp(1e-15, 1 - 1e-15)
            return (p / (1 - p)).log()

        fine = "reference_jacobian" in self.stats.get(reference, {})
        sel_r, yr = curve(reference, "reference" if fine else "")
        sel_k, yk = curve(key)
        xr, xk = logit(sel_r), logit(sel_k)
        order = torch.argsort(xr)
        xr, yr = xr[order], yr[order].clamp_min(1e-300).log()
        ratios, sel = [], []
        for x, y, p in zip(xk.tolist(), yk.tolist(), sel_k.tolist()):
            if not (float(xr[0]) <= x <= float(xr[-1])) or y <= 0:
                continue
            j = int(torch.searchsorted(xr, torch.tensor(x, dtype=DTYPE)).clamp(1, len(xr) - 1))
            x0, x1 = float(xr[j - 1]), float(xr[j])
            w = 0.0 if x1 == x0 else (x - x0) / (x1 - x0)
            log_ref = (1 - w) * float(yr[j - 1]) + w * float(yr[j])
            ratios.append(y / math.exp(log_ref))
            sel.append(p)
        r = torch.tensor(ratios, dtype=DTYPE)
        gm = float(r.log().mean().exp()) if len(ratios) else float("nan")
        return {"ratios": r, "selectivity": torch.tensor(sel, dtype=DTYPE), "geometric_mean": gm,
                "matched": len(ratios)}

    def critical_n(self, key: str, alpha: float = 0.01) -> int | None:
        """Smallest N of the grid where the per-head true and expected distances cannot be told
        apart (two-sample KS, :func:`normlimits.metrics.distances.ks_critical_n`); None if none."""
        true = self.head_values(key, "distance")
        expected = self.head_values(key, "expected")
        res = D.ks_critical_n(true, expected, list(self.config.n_grid), alphas=(alpha,))
        return res.critical[float(alpha)]


def measure(captures: Iterable, normalizers: Sequence[str | Normalizer] | None = None,
            config: YardstickConfig | None = None, *,
            gradient: Sequence[str] | None = None,
            yardsticks: Sequence[str] = WINDOW_YARDSTICKS) -> YardstickResults:
    """:func:`measure_window` over windows (an iterable of captures, consumed once), stacked.

    ``normalizers`` (keys or :class:`~normlimits.metrics.normalizers.Normalizer` objects, keys unique)
    defaults to every registered one; ``config`` to :meth:`YardstickConfig.for_window` of the
    first window's length; ``gradient``: the keys that get the gradient yardstick (default all);
    ``yardsticks``: the window yardsticks measured (default all three).
    """
    start = time.perf_counter()
    objects = [get_normalizer(n) for n in (normalizers or list(NORMALIZERS))]
    names = [nz.key for nz in objects]
    if len(set(names)) != len(names):
        raise ValueError(f"normaliser keys must be unique (got {names})")
    wanted = names if gradient is None else list(gradient)
    parts: list[dict] = []
    for capture in captures:
        if config is None:
            config = YardstickConfig.for_window(capture.values.shape[-2])
        parts.append(measure_window(capture, objects, config, yardsticks=yardsticks,
                                    gradient=wanted if len(parts) < config.jacobian_windows else False))
    if not parts:
        raise ValueError("no windows were given; pass at least one captured window")
    stats = {key: {name: torch.stack([p[key][name] for p in parts if name in p[key]])
                   for name in parts[0][key]}
             for key in names}
    return YardstickResults(config=config, normalizers=names, stats=stats,
                            seconds=time.perf_counter() - start, windows=len(parts))


# =============================================================================== sweeps
def critical_scale(logits: Tensor, iterations: int = 200) -> Tensor:
    """Per row, the SSMax scale ``gamma`` at which the largest weight is exactly 1/2: [..., L] -> [...].

    SSMax with scale ``gamma`` is ``softmax(gamma log(n) z)``; its top weight is
    ``1 / (1 + sum_{j != top} n^{-gamma g_j})`` with gaps ``g_j = z_max - z_j``, decreasing in
    every gap, so ``gamma_c`` solves ``sum_{j != top} n^{-gamma g_j} = 1`` (bisection, float64).
    For the simplex rows of Chen et al. (arXiv 2510.05554), one logit 1 and ``n - 1`` logits
    ``rho``, this is ``log(n - 1) / ((1 - rho) log n)``, which tends to their critical value
    ``1/(1 - rho)``. NaN where the top logit is tied or the row has one key; 0 for two keys.
    """
    z = logits.to(DTYPE)
    visible = visible_mask(z)
    n = visible.sum(-1).to(DTYPE)
    top = torch.where(visible, z, torch.full_like(z, float("-inf"))).max(-1)
    gaps = top.values.unsqueeze(-1) - z
    others = visible.clone()
    others.scatter_(-1, top.indices.unsqueeze(-1), False)
    gaps = torch.where(others, gaps, torch.full_like(gaps, float("inf")))
    g_min = gaps.amin(-1)
    logn = torch.log(n)
    ok = (n >= 2) & (g_min > 0)
    lo = torch.zeros_like(n)
    hi = torch.where(ok, torch.log((n - 1).clamp_min(1.0)) / (logn * g_min.clamp_min(1e-300)) + 1e-12,
                     torch.ones_like(n))

    def excess(gamma):                                    # log sum_j n^{-gamma g_j}
        terms = torch.where(others, -gamma.unsqueeze(-1) * logn.unsqueeze(-1) * gaps.clamp_max(1e300),
                            torch.full_like(gaps, float("-inf")))
        return torch.logsumexp(terms, -1)

    for _ in range(iterations):
        mid = 0.5 * (lo + hi)
        above = excess(mid) > 0
        lo = torch.where(above, mid, lo)
        hi = torch.where(above, hi, mid)
    out = 0.5 * (lo + hi)
    return torch.where(ok, torch.where(n == 2, torch.zeros_like(out), out),
                       torch.full_like(out, float("nan")))


def sink_matching_logit(captures: Iterable, rows: Sequence[int]) -> Tensor:
    """Per head, the sink logit ``b*`` that plays the model's own first-token sink: [layers, heads, 1, 1].

    With ``b`` equal to a row's logit on its first key, a sink over the other keys gives them
    exactly softmax's weights over all keys (the first token acting as a key bias, the reading of
    Gu et al. 2025). ``b*`` is the median of that logit over the windows and the query ``rows``.
    """
    rows = torch.as_tensor(list(rows))
    firsts = [cap.logits(rows)[..., 0].to(DTYPE) for cap in captures]       # [layers, heads, R]
    if not firsts:
        raise ValueError("no windows were given; pass at least one captured window")
    return torch.cat(firsts, -1).median(-1).values[..., None, None]


# =============================================================================== verdict inputs
@dataclass(frozen=True)
class YardstickVerdict:
    """What one normaliser's four yardsticks give its claims.

    ``values[yardstick]``: the criterion values of the registered rule; ``measured[yardstick]``:
    a sentence with the numbers; ``reason[yardstick]``: why a value is missing (or None);
    ``numbers``: the table's numbers (exponent, critical N / L, N_s/N at N = 16, Jacobian ratio
    at equal selectivity, row sum at the longest L).
    """

    key: str
    values: dict
    measured: dict
    reason: dict
    numbers: dict


def _critical_censored(results: "YardstickResults", key: str, alpha: float) -> tuple[float, bool]:
    crit = results.critical_n(key, alpha)
    if crit is None:
        return 2.0 * max(results.config.n_grid), True
    return float(crit), False


def yardstick_verdict(results: "YardstickResults", key: str, reference: str = "softmax", *,
                      alpha: float = 0.01, margin: float = 0.02, factor: float = 0.5,
                      knee: int = 16) -> YardstickVerdict:
    """The four yardsticks of ``key`` against ``reference``, as the claims' rules read them.

    vanishing: the median head's exponent and its gain over the reference's; distance:
    ``log2`` of the critical-N ratio (no N of the grid: twice the largest N, a lower bound);
    separability: the share of ``N >= knee`` where ``N_s/N`` beats the reference's by ``margin``;
    gradient: the share of matched temperatures with a Jacobian at most ``factor`` of the
    reference's at equal selectivity (NaN when no temperature matches).
    """
    exp_k = float(results.max_weight_exponent(key).median())
    exp_r = float(results.max_weight_exponent(reference).median())
    crit_k, cens_k = _critical_censored(results, key, alpha)
    crit_r, cens_r = _critical_censored(results, reference, alpha)
    keys_mean = float(torch.tensor(results.config.rows, dtype=DTYPE).mean() + 1)
    later = math.log2(crit_k / crit_r) if not cens_r else float("nan")
    grid = list(results.config.n_grid)
    start = next((i for i, n in enumerate(grid) if n >= knee), len(grid))
    sep_k = results.curve(key, "separability")[start:]
    sep_r = results.curve(reference, "separability")[start:]
    support = separability_support(results, key)
    within = torch.tensor([n <= support for n in grid[start:]], dtype=torch.bool)
    share_sep = separability_share(sep_k, sep_r, margin, within)
    dec = results.decoupling(key, reference)
    share_j = (float((dec["ratios"] <= factor).to(DTYPE).mean()) if dec["matched"] else float("nan"))
    sep_at = float(results.curve(key, "separability")[grid.index(knee)]) if knee in grid else float("nan")
    numbers = {"exponent": exp_k, "critical_fraction": crit_k / keys_mean, "critical_censored": cens_k,
               "separability": sep_at, "jacobian_ratio": dec["geometric_mean"],
               "mass": float(results.curve(key, "mass")[-1])}
    cens = " (none on the grid: a lower bound)" if cens_k else ""
    measured = {
        "vanishing": f"largest-weight exponent {exp_k:.3f} (median head) against softmax's {exp_r:.3f}",
        "distance": (f"critical $N$ = {crit_k:g}{cens} against softmax's {crit_r:g} "
                     f"(KS, $\\alpha$ = {alpha}; rows of {keys_mean:.0f} keys on average)"),
        "separability": (f"$N_s/N$ above softmax's by {margin} at {share_sep:.0%} of the grid's "
                         f"$N \\ge {knee}$ {'within' if bool(within.any()) else 'and, none being within,'} "
                         f"the median support of {support:g} keys; at $N = {knee}$ {sep_at:.3f} against "
                         f"{float(results.curve(reference, 'separability')[grid.index(knee)]) if knee in grid else float('nan'):.3f}"),
        "gradient": (f"Jacobian at equal selectivity {dec['geometric_mean']:.3f} of softmax's (geometric "
                     f"mean), at most {factor} of it at {int((dec['ratios'] <= factor).sum())} of "
                     f"{dec['matched']} matched temperatures"),
    }
    reason = {"vanishing": None, "separability": None,
              "distance": ("softmax's true and expected distances differ at every N of the grid, so "
                           "there is no critical N to compare with" if cens_r else None),
              "gradient": (None if dec["matched"] else
                           "its selectivity never falls inside softmax's range over the temperature grid")}
    values = {"vanishing": {"exponent": exp_k, "gain": exp_k - exp_r},
              "distance": {"later": later},
              "separability": {"support": support, "every": share_sep, "some": share_sep},
              "gradient": {"every": share_j, "some": share_j}}
    return YardstickVerdict(key, values, measured, reason, numbers)


def separability_support(results: "YardstickResults", key: str) -> float:
    """The median over heads of the support of ``key``'s separability rows (each head's median
    over the rows, averaged over the windows): the largest N at which its N_s/N can be compared
    with softmax's, since N_s <= |S| when the support |S| <= N (the alternatives chapter's
    proposition on sparse normalisers)."""
    return float(results.head_values(key, "separability_support")[:, 0].nanmedian())


def separability_share(sep_k: Tensor, sep_r: Tensor, margin: float, within: Tensor) -> float:
    """The share of the compared N where ``sep_k`` (N_s/N) beats ``sep_r`` by ``margin``: over the
    N ``within`` the support when there is one, else over every N given (the scope criterion then
    fails and the share is shown, not graded); NaN for no N. Tensors [n], ``within`` bool [n]."""
    return float(separability_shares(sep_k[None], sep_r[None], margin, within[None])[0])


def separability_shares(sep_k: Tensor, sep_r: Tensor, margin: float, within: Tensor) -> Tensor:
    """:func:`separability_share` for r cases at once (e.g. bootstrap resamples): ``sep_k``,
    ``sep_r`` [r, n], ``within`` bool [r, n]; float64 [r], NaN where there is no N."""
    beats = (sep_k >= sep_r + margin).to(torch.float64)
    within = within.to(torch.float64)
    within = torch.where(within.sum(-1, keepdim=True) > 0, within, torch.ones_like(within))
    return (beats * within).sum(-1) / within.sum(-1)


#: how the summary table marks a verdict (presentation only; verdicts come from the ledger rows)
VERDICT_MARKS = {"confirmed": "yes", "corrected": "partly", "partial": "in part", "refuted": "no",
                 "not reproduced": "no",
                 "inconclusive": "?", "not testable": "n/a"}
_SCORES = {"confirmed": 1.0, "corrected": 0.5, "partial": 0.5}


def summary_table(verdicts: dict, graded: dict, labels: dict):
    """The ranked summary: one row per normaliser, its numbers and its four verdicts.

    ``verdicts``: key -> :class:`YardstickVerdict`; ``graded``: (key, yardstick) -> verdict
    string (from the recorded ledger rows); ``labels``: key -> row label. Columns: the
    largest-weight exponent, the critical N / L (">" when none on the grid), N_s/N at the knee,
    the Jacobian ratio to softmax's at equal selectivity, the four verdicts as
    :data:`VERDICT_MARKS` and the score (1 per confirmed yardstick, 1/2 per corrected or partial); rows sorted
    by score, then by the exponent. Returns a pandas DataFrame indexed by the label.
    """
    import pandas as pd

    rows = []
    for key, v in verdicts.items():
        marks = {y: VERDICT_MARKS[graded[(key, y)]] for y in ("vanishing", "distance", "separability", "gradient")}
        score = sum(_SCORES.get(graded[(key, y)], 0.0) for y in marks)
        crit = f"{'>' if v.numbers['critical_censored'] else ''}{v.numbers['critical_fraction']:.3f}"
        rows.append({"normaliser": labels[key], "exponent": round(v.numbers["exponent"], 2),
                     "N_crit/L": crit, "N_s/N": round(v.numbers["separability"], 2),
                     "J ratio": round(v.numbers["jacobian_ratio"], 2),
                     "vanishing": marks["vanishing"], "collapse": marks["distance"],
                     "separability": marks["separability"], "gradient": marks["gradient"],
                     "score": score, "_exp": v.numbers["exponent"]})
    table = pd.DataFrame(rows).sort_values(["score", "_exp"], ascending=[False, False])
    return table.drop(columns="_exp").set_index("normaliser")


def sweep_table(results: "YardstickResults", keys: Sequence[str], names: Sequence[str],
                column: str, alpha: float = 0.01, knee: int = 16):
    """One row per swept normaliser: the largest weight at the longest L, its exponent, the row
    sum, the critical N / L and N_s/N at ``knee``. ``names`` label the rows in ``column``."""
    import pandas as pd

    keys_mean = float(torch.tensor(results.config.rows, dtype=DTYPE).mean() + 1)
    grid = list(results.config.n_grid)
    rows = []
    for key, name in zip(keys, names):
        crit, censored = _critical_censored(results, key, alpha)
        rows.append({column: name, "max weight (L max)": float(results.curve(key, "max_weight")[-1]),
                     "exponent": float(results.max_weight_exponent(key).median()),
                     "row sum": float(results.curve(key, "mass")[-1]),
                     "crit. N/L": f"{'>' if censored else ''}{crit / keys_mean:.3f}",
                     f"N_s/N (N={knee})": float(results.curve(key, "separability")[grid.index(knee)])})
    return pd.DataFrame(rows).set_index(column)


# =============================================================================== small checks
def row_properties(logits: Tensor, normalizers: Sequence[Normalizer]):
    """What each normaliser does to rows of logits [..., L] (masked keys ``-inf``): whether masked
    keys get exactly 0, the smallest and largest row sum and the fraction of visible keys at
    exactly 0. Returns a pandas DataFrame indexed by label."""
    import pandas as pd

    z = logits.to(DTYPE)
    visible = torch.isfinite(z)
    rows = []
    for nz in normalizers:
        w = nz(z)
        total = w.sum(-1)
        rows.append({"normaliser": nz.label, "masked keys at 0": bool((w[~visible] == 0).all()),
                     "min row sum": float(total.min()), "max row sum": float(total.max()),
                     "visible keys at 0": float(((w == 0) & visible).sum() / visible.sum())})
    return pd.DataFrame(rows).set_index("normaliser")


#: Jacobian families (:func:`normlimits.metrics.normalizer_jacobians.family`) whose every weight is
#: proven O(1/L) on logits bounded by a, with the log of the constant C in alpha_i <= C / L (a
#: function of a and the adaptive polynomial's maximum B)
NON_ESCAPING_LOG_BOUND = {
    "softmax": lambda a, B: 2 * a, "softmax1": lambda a, B: 2 * a, "sa-softmax": lambda a, B: 2 * a,
    "sink": lambda a, B: 2 * a, "adaptive": lambda a, B: 2 * B * a, "sigmoid": lambda a, B: a,
}


def synthetic_exponents(normalizers: Sequence[Normalizer], lengths: Sequence[int], patterns: dict,
                        beta_max: float):
    """Largest-weight exponents on synthetic rows, and a check of the proven O(1/L) bounds.

    ``patterns``: name -> (logits [trials, G, L_max] with ``-inf`` beyond each length, bound a).
    Returns ``(table, outside)``: a DataFrame (normaliser x pattern: fitted exponent of the mean
    largest weight and its value at the longest L) and the number of weights above the bound
    ``exp(log C) / L`` of :data:`NON_ESCAPING_LOG_BOUND` (0 when the proofs hold).
    """
    import pandas as pd

    keys = torch.tensor(list(lengths), dtype=DTYPE)
    rows, outside = [], 0
    for name, (logits, a) in patterns.items():
        for nz in normalizers:
            w = nz(logits)
            top = w.amax(-1)                                               # [trials, G]
            fit = loglog_fit(list(lengths), top.mean(0))
            rows.append({"logits": name, "normaliser": nz.label, "exponent": float(fit.exponent),
                         "max weight at L max": float(top[:, -1].mean())})
            bound = NON_ESCAPING_LOG_BOUND.get(family(nz))
            if bound is not None:
                cap = math.exp(bound(a, beta_max)) / keys
                outside += int((top > cap * (1 + 1e-12)).sum())
    table = pd.DataFrame(rows).pivot(index="normaliser", columns="logits")
    return table.reindex([nz.label for nz in normalizers]), outside


def verdict_overview(verdicts: dict, graded: dict, labels: dict, intervals: dict | None = None) -> str:
    """The yardstick claims as HTML: per yardstick its registered rule in words (once: it is the
    same for every normaliser) and a table of each normaliser's criterion values (with their
    intervals, "value [low, high]", where ``intervals`` has them) and verdict, written from data
    (:mod:`normlimits.core.markup`), so math in a label or statistic cannot break it.

    ``verdicts``: key -> :class:`YardstickVerdict`; ``graded``: (key, yardstick) -> verdict;
    ``labels``: key -> label (MyST, ``$math$`` allowed); ``intervals``: key -> yardstick ->
    criterion -> :class:`normlimits.core.bootstrap.Interval`
    (:func:`normlimits.experiments.alternatives_windows.yardstick_intervals`).
    """
    import html as _html

    parts = []
    for y in YARDSTICKS:
        rule = claim(claim_id(next(iter(verdicts)), y)).rule
        tests = "; ".join(f"`{c.key}`: {c.statistic} {c.describe()}" for c in rule.criteria)
        parts.append(f"<p><strong>{_html.escape(y)}</strong> (claims ALT-&lt;key&gt;-{_html.escape(y)}). "
                     f"<em>Rule:</em> {inline_html(rule.text)} ({inline_html(describe_outcomes(rule.outcomes))}). "
                     f"{inline_html(tests)}.</p>")
        rows = []
        for key, v in verdicts.items():
            ivs = (intervals or {}).get(key, {}).get(y, {})
            values = [_html.escape(significant(v.values[y][c.key]) + (
                f" [{significant(ivs[c.key].low)}, {significant(ivs[c.key].high)}]" if c.key in ivs else ""))
                for c in rule.criteria]
            rows.append([inline_html(labels[key]), *values, _html.escape(graded[(key, y)])])
        parts.append(html_table(["normaliser", *(c.key for c in rule.criteria), "verdict"], rows,
                                classes=("criterion-table", "alternatives-overview")))
    return "".join(parts)
