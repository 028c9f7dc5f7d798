"""The book's Theorem 2 as numbers: bounds on the expected fraction of distinguishable tokens.

The statement and proof are on the book's separability page, the sympy steps in
:mod:`normlimits.theory.separability`. Setting: ``N >= 2`` selected tokens with fixed weights
``alpha`` (sorted, descending), points i.i.d. uniform on ``S^{d-1}(M)``. With the sums over the
OTHER selected tokens ``w_i = sum_{j != i} alpha_j``, ``q_i = sum alpha_j^2``, ``p_i = sum
alpha_j^4``:

    xi_i       = M sqrt(q_i)                                        (= sqrt(E X_i^2), upper bound on E X_i)
    xi_i^-     = xi_i / sqrt(1 + (2/d) (1 - p_i / q_i^2))           (lower bound on E X_i, Hoelder)
    xi_i^delta = sqrt(M^2 w_i^2 - (delta^2/2) (w_i^2 - q_i))         (sure bound on X_i, Assumption 2)

For a FIXED radius r > 0 and ``C_r = #{i : X_i < r}`` (the paper's N_s with a fixed r is at most
``C_r``):

    lower:  E C_r / N >= 1 - (1/N) sum_i min(1, xi_i^2 / r^2, c_i^+)
    upper:  E C_r / N <= (1/N) sum_i min(1, e_i, c_i^-)
    sure:   if all selected pairs are >= delta apart, C_r >= #{i : xi_i^delta < r}

with ``e_i = exp(-(xi_i^- - r)^2 / (2 M^2 q_i))`` when ``r < xi_i^-`` (else 1; McDiarmid with
bounded differences ``2 M alpha_j``), ``c_i^+-`` Cantelli's one-sided bounds on ``X_i^2`` with
``v_i = Var X_i^2 = (2 M^4 / d)(q_i^2 - p_i)``. The exponential upper bound needs a LOWER bound
on ``E X_i`` (``xi_i^-``); the paper's delta-argument gives an upper one (``xi_i^delta``), and
:func:`paper_shaped_upper` is that reconstruction, kept to exhibit its violation.

Under both assumptions at once (points conditioned on a minimum separation delta, drawn by
rejection), every probability is divided by ``P(E) >= 1 - eta``, ``eta = C(N,2) P(||x-y|| <
delta)`` (:func:`separation_failure_bound`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

__all__ = ["spread_terms", "Theorem2Bounds", "theorem2_bounds", "separation_lower_bound",
           "paper_shaped_upper", "pair_closer_probability", "separation_failure_bound"]


def spread_terms(top_weights: Tensor, n_grid) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """Per selected token: sums over the OTHER selected tokens' weights, for every N of the grid.

    ``top_weights`` [..., K] sorted (descending) weights, K >= max N. Returns ``(w, q, p, mask)``
    each [..., G, K]: ``w = sum_{j != i} alpha_j``, ``q = sum alpha_j^2``, ``p = sum alpha_j^4`` over
    the selected j < N, j != i, at rank i; ``mask`` is True where rank i < N (zeros elsewhere).
    """
    grid = torch.as_tensor(n_grid, dtype=torch.long)
    k = top_weights.shape[-1]
    if int(grid.max()) > k:
        raise ValueError(f"top_weights hold {k} ranks but the grid asks for N = {int(grid.max())}.")
    a = top_weights.to(torch.float64)
    mask = torch.arange(k)[None, :] < grid[:, None]  # [G, K]
    mask_f = mask.to(a.dtype)
    out = []
    for power in (1, 2, 4):
        v = a**power  # [..., K]
        totals = (v[..., None, :] * mask_f).sum(-1, keepdim=True)  # [..., G, 1]
        out.append(((totals - v[..., None, :]) * mask_f).clamp_min(0.0))
    return out[0], out[1], out[2], mask.expand(out[0].shape)


@dataclass
class Theorem2Bounds:
    """Bounds on E C_r / N, each [..., G].

    ``lower`` / ``upper``: the theorem (every term combined); ``lower_markov`` /
    ``upper_exponential``: the paper's two steps alone (Markov on X^2; McDiarmid with xi^-);
    ``separation``: the sure bound (None without delta).
    """

    lower: Tensor
    upper: Tensor
    lower_markov: Tensor
    upper_exponential: Tensor
    separation: Tensor | None


def _terms_one_n(n: int, powers, totals, r: Tensor, m: float, dim: int, dl: Tensor | None,
                 scale: float, sure_rtol: float = 0.0):
    """Bounds for one N from the selected weights' powers ``(a, a^2, a^4)`` [..., K] and their
    cumulative sums ``totals``; ``r`` [...]. Returns (lower, upper, lower_markov, upper_exp, sure)."""
    a1, a2, a4 = (v[..., :n] for v in powers)
    w_o, q_o, p_o = ((t[..., n - 1:n] - v).clamp_min(0.0) for t, v in zip(totals, (a1, a2, a4)))
    r = r[..., None]
    r2 = r * r
    ones = torch.ones_like(q_o)
    positive = q_o > 0
    safe_q = torch.where(positive, q_o, ones)
    xi2 = m**2 * q_o
    xi_minus = torch.where(positive, (xi2 / (1.0 + (2.0 / dim) * (1.0 - p_o / (safe_q * safe_q)))).sqrt(),
                           torch.zeros_like(q_o))
    var = (2.0 * m**4 / dim) * (q_o * q_o - p_o).clamp_min(0.0)  # Var X_i^2

    # a gap within the rounding of r^2 and xi^2 counts as none: where X_i^2 has no spread (two
    # selected tokens, v = 0) and r^2 = E X_i^2 exactly, a rounded gap of either sign would make
    # Cantelli's bound 0 for an event of probability 1
    resolution = 8.0 * torch.finfo(q_o.dtype).eps * (r2 + xi2)

    def cantelli(gap2):  # v / (v + gap^2) for gap > 0, else 1
        return torch.where(gap2 > resolution, var / (var + gap2 * gap2).clamp_min(1e-300), ones)

    markov = (xi2 / r2).clamp(max=1.0)
    miss = torch.minimum(markov, cantelli(r2 - xi2))  # bounds on P(X_i >= r)
    gap = (xi_minus - r).clamp_min(0.0)
    expo = torch.where(r < xi_minus, torch.exp(-(gap * gap) / (2 * m**2 * safe_q)), ones)
    hit = torch.minimum(expo, cantelli(xi2 - r2))  # bounds on P(X_i < r)
    if scale != 1.0:
        markov, miss, expo, hit = ((v * scale).clamp(max=1.0) for v in (markov, miss, expo, hit))
    sure = None
    if dl is not None:
        w2 = w_o * w_o
        xi_d2 = m**2 * w2 - (dl[..., None] ** 2 / 2) * (w2 - q_o)
        sure = xi_d2.clamp_min(0.0).sqrt() < r * (1.0 - sure_rtol)
        zero = torch.zeros((), dtype=miss.dtype)
        miss = torch.where(sure, zero, miss)
        markov = torch.where(sure, zero, markov)
        sure = sure.to(a1.dtype).mean(-1)
    return (1.0 - miss.mean(-1), hit.mean(-1), 1.0 - markov.mean(-1), expo.mean(-1), sure)


def theorem2_bounds(top_weights: Tensor, n_grid, radius, *, sphere_radius: float = 1.0,
                    dim: int, delta: float | Tensor | None = None,
                    failure: float = 0.0, sure_rtol: float = 0.0) -> Theorem2Bounds:
    """The book's Theorem 2 bounds on E C_r / N for every row and N (float64).

    Args:
        top_weights: [..., K] the selected weights in decreasing order (K >= max N).
        n_grid: the N values [G].
        radius: r, a number or a tensor [..., G] (e.g. the measured radius per row and N);
            leading dims broadcast with those of ``top_weights``.
        sphere_radius: M. dim: d (the points' dimension).
        delta: minimum pairwise separation of the selected points (Assumption 2), a number or a
            tensor broadcasting with the leading dims; optional.
        failure: eta in [0, 1), a bound on P(separation fails) under the rejection model; the
            probabilistic terms are divided by 1 - eta (use 0 for independent points).
        sure_rtol: count a token in the sure bound only when xi^delta < r (1 - sure_rtol): a
            weaker, still valid bound, robust to rounding in an r measured in float32.
    """
    if not sphere_radius > 0:
        raise ValueError(f"the sphere radius M must be > 0 (got {sphere_radius}).")
    if dim < 1:
        raise ValueError(f"the dimension d must be >= 1 (got {dim}).")
    if not 0.0 <= failure < 1.0:
        raise ValueError(f"the separation failure bound eta must lie in [0, 1) (got {failure}).")
    if not 0.0 <= sure_rtol < 1.0:
        raise ValueError(f"sure_rtol must lie in [0, 1) (got {sure_rtol}).")
    grid = torch.as_tensor(n_grid, dtype=torch.long).flatten()
    k = top_weights.shape[-1]
    if int(grid.max()) > k:
        raise ValueError(f"top_weights hold {k} ranks but the grid asks for N = {int(grid.max())}.")
    a = top_weights.to(torch.float64)
    r_t = torch.as_tensor(radius, dtype=torch.float64)
    d_t = None if delta is None else torch.as_tensor(delta, dtype=torch.float64)
    try:
        lead = torch.broadcast_shapes(a.shape[:-1], r_t.shape[:-1] if r_t.dim() else (),
                                      d_t.shape if d_t is not None else ())
    except RuntimeError:
        raise ValueError(f"top_weights {tuple(a.shape)}, radius {tuple(r_t.shape)} and delta "
                         "do not broadcast: radius must be [..., G] or a number, delta [...].") from None
    a = a.expand(*lead, k)
    r_all = torch.broadcast_to(r_t, (*lead, len(grid)))
    dl = None if d_t is None else torch.broadcast_to(d_t, lead)
    scale = 1.0 / (1.0 - failure)
    powers = (a, a * a, (a * a) ** 2)
    totals = tuple(v.cumsum(-1) for v in powers)
    parts = [_terms_one_n(n, powers, totals, r_all[..., g], float(sphere_radius), dim, dl, scale,
                          sure_rtol)
             for g, n in enumerate(grid.tolist())]
    lower, upper, lower_markov, upper_exp, sure = (
        None if parts[0][i] is None else torch.stack([part[i] for part in parts], dim=-1)
        for i in range(5))
    return Theorem2Bounds(lower=lower, upper=upper, lower_markov=lower_markov,
                          upper_exponential=upper_exp, separation=sure)


def separation_lower_bound(top_weights: Tensor, n_grid, radius, *, sphere_radius: float = 1.0,
                           delta) -> Tensor:
    """The sure bound #{i : xi_i^delta < r} / N, [..., G] (Assumption 2 alone, no expectation)."""
    return theorem2_bounds(top_weights, n_grid, radius, sphere_radius=sphere_radius, dim=1,
                           delta=delta).separation


def paper_shaped_upper(top_weights: Tensor, n_grid, radius, *, sphere_radius: float = 1.0,
                       delta: float) -> Tensor:
    """The digest's reconstruction of the paper's upper bound, [..., G]:
    ``(1/N) sum_i exp(-(xi_i^delta - r)^2 / (2 M^2))`` for r < xi_i^delta, else 1.

    Its xi_i^delta is an UPPER bound on E X_i, while the Hoeffding step needs a lower bound, so
    this is not a valid bound (it is kept to exhibit the violation).
    """
    grid = torch.as_tensor(n_grid, dtype=torch.long)
    w_o, q_o, _, mask = spread_terms(top_weights, grid)
    m = float(sphere_radius)
    r_t = torch.as_tensor(radius, dtype=torch.float64)
    if r_t.dim() > 0:
        r_t = r_t[..., None]
    xi_d = (m**2 * w_o**2 - delta**2 / 2 * (w_o**2 - q_o)).clamp_min(0.0).sqrt()
    term = torch.where(r_t < xi_d, torch.exp(-(xi_d - r_t)**2 / (2 * m**2)),
                       torch.ones_like(xi_d))
    return (term * mask).sum(-1) / grid.to(torch.float64)


def pair_closer_probability(dim: int, delta: float, sphere_radius: float = 1.0) -> float:
    """P(||x - y|| < delta) for x, y independent uniform on S^{d-1}(M) (exact, d >= 2).

    With c = 1 - delta^2/(2 M^2) the cosine threshold, P(<x,y>/M^2 > c) is
    ``I_{1-c^2}((d-1)/2, 1/2) / 2`` for c >= 0 and ``1 - I_{1-c^2}((d-1)/2, 1/2) / 2`` for c < 0.
    """
    from scipy.special import betainc

    if dim < 2:
        raise ValueError("the cap formula needs d >= 2.")
    c = 1.0 - delta**2 / (2.0 * sphere_radius**2)
    if c <= -1.0:
        return 1.0
    if c >= 1.0:
        return 0.0
    tail = 0.5 * float(betainc((dim - 1) / 2.0, 0.5, 1.0 - c * c))
    return tail if c >= 0 else 1.0 - tail


def separation_failure_bound(n_points: int, dim: int, delta: float,
                             sphere_radius: float = 1.0) -> float:
    """eta = min(1, C(n,2) P(||x-y|| < delta)) >= P(some pair of n i.i.d. points is < delta apart)."""
    return min(1.0, math.comb(n_points, 2) * pair_closer_probability(dim, delta, sphere_radius))
