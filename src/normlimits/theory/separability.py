"""Theorem 2 (geometric separability) as proven in this book, with its sympy derivations.

The paper's exact spread ``xi_i`` is not recoverable (``paper.md`` section 2, Theorem 2), so the
book states and proves its own version. Setting: ``N >= 2`` selected tokens with fixed weights
``alpha_1..alpha_N >= 0`` (independent of the points), points ``x_1..x_N`` i.i.d. uniform on the
sphere ``S^{d-1}(M)`` (Assumption 1). For a selected token i,

    X_i = || s - alpha_i x_i || = || sum_{j != i} alpha_j x_j ||      (j over the other selected)

and with the weights of the OTHER selected tokens

    w_i = sum_{j != i} alpha_j,   q_i = sum_{j != i} alpha_j^2,   p_i = sum_{j != i} alpha_j^4,

define

    xi_i       = M sqrt(q_i)                                        (= sqrt(E X_i^2), upper bound on E X_i)
    xi_i^-     = xi_i / sqrt(1 + (2/d) (1 - p_i / q_i^2))           (lower bound on E X_i, Hoelder)
    xi_i^delta = sqrt(M^2 w_i^2 - (delta^2/2) (w_i^2 - q_i))         (sure bound on X_i, Assumption 2)

For a FIXED radius r > 0 let ``C_r = #{i : X_i < r}`` (the selected tokens inside the ball; the
paper's N_s with a fixed r is ``C_r`` times the indicator that no non-selected token is inside,
so ``N_s <= C_r``). Then

    lower:  E C_r / N >= 1 - (1/N) sum_i m_i,   m_i = min(1, xi_i^2 / r^2, c_i^+)
    upper:  E C_r / N <= (1/N) sum_i u_i,       u_i = min(1, e_i, c_i^-)
    sure:   if all selected pairs are >= delta apart, X_i <= xi_i^delta, so C_r >= #{i : xi_i^delta < r}.

with the terms
    xi_i^2 / r^2                                   Markov on X_i^2 (the paper's Markov step),
    e_i   = exp(-(xi_i^- - r)^2 / (2 M^2 q_i))     McDiarmid (Hoeffding-type; the paper's exponential
            when r < xi_i^-, else 1                 step, with bounded differences 2 M alpha_j),
    c_i^+ = v_i / (v_i + (r^2 - xi_i^2)^2)         Cantelli on X_i^2 when r^2 > xi_i^2, else 1,
    c_i^- = v_i / (v_i + (xi_i^2 - r^2)^2)         Cantelli on X_i^2 when r^2 < xi_i^2, else 1,
    v_i   = Var X_i^2 = (2 M^4 / d) (q_i^2 - p_i)  (exact, from the fourth moment).

Directions: the Markov lower bound needs an UPPER bound on E X_i^2 (``xi_i^2``); the exponential
upper bound needs a LOWER bound on E X_i (``xi_i^-``): an upper bound there (such as
``xi_i^delta``, which is what the paper's delta-argument yields) makes the exponential bound
invalid (paper.md item T6; :func:`paper_shaped_upper` is that reconstruction and the tests and the
chapter exhibit a violation).

Under both assumptions at once (the points conditioned on min separation >= delta, i.e. drawn by
rejection), every probability above is divided by ``P(E) >= 1 - eta``, ``eta = C(N,2) P(||x-y|| <
delta)`` (union bound; :func:`separation_failure_bound`), and the sure bound applies.

This module holds the sympy derivations (:func:`derive`) and the numeric bounds (torch), used by
the chapter, the tests and the model overlay.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import sympy as sp
import torch
from torch import Tensor

from .algebra import closes  # noqa: F401  (re-exported: chapters call TD.closes)

__all__ = [
    "Theorem2Derivation", "derive", "spread_terms", "Theorem2Bounds", "theorem2_bounds",
    "separation_lower_bound", "paper_shaped_upper", "pair_closer_probability",
    "separation_failure_bound", "sample_sphere", "sample_separated", "MonteCarlo",
    "monte_carlo_fraction", "monte_carlo_curve", "monte_carlo_check", "counted_inside",
]

# ----------------------------------------------------------------------------------- sympy
M = sp.Symbol("M", positive=True)          # sphere radius
d = sp.Symbol("d", positive=True)          # dimension
delta = sp.Symbol("delta", positive=True)  # minimum pairwise separation
r = sp.Symbol("r", positive=True)          # ball radius
t = sp.Symbol("t", positive=True)          # deviation below the mean
q = sp.Symbol("q", positive=True)          # sum of squared weights of the other selected tokens
p = sp.Symbol("p", positive=True)          # sum of fourth powers of those weights
w = sp.Symbol("w", positive=True)          # sum of those weights


@dataclass(frozen=True)
class Theorem2Derivation:
    """The steps of the book's Theorem 2 for ``n`` other selected tokens (sympy objects).

    ``alphas``: the weights a_1..a_n of the other selected tokens; ``gram``: the symbols
    g_jk = <x_j, x_k> (j < k); ``x_sq``: X^2 in them; ``second_moment``: E X^2 by the rules
    E g_jk = 0; ``fourth_moment``: E X^4 by E g_jk g_lm = [jk = lm] M^4/d; ``*_closed``: the
    closed forms in q, p; ``second_closes``/``fourth_closes``: sympy closed the difference to 0.
    ``variance``: m4 - m2^2 (Var X^2) and ``variance_closed``: (2 M^4/d)(q^2 - p), ``variance_closes``.
    ``holder``: sqrt(m2^3/m4) and ``holder_closed``: xi^- in closed form; ``holder_closes``.
    ``distances``: D_jk; ``sep_gap``: (xi^delta)^2 - X^2 with g_jk = M^2 - D_jk^2/2, and
    ``sep_gap_manifest``: sum_{j<k} a_j a_k (D_jk^2 - delta^2) (>= 0 term by term when D >= delta);
    ``sep_closes``: the two agree. ``mcdiarmid_exponent``: 2 t^2 / sum_j (2 M a_j)^2 and
    ``mcdiarmid_closes``: it equals t^2 / (2 M^2 q). ``markov``: E X^2 / r^2 = xi^2/r^2.
    """

    n: int
    alphas: tuple
    gram: dict
    x_sq: sp.Expr
    second_moment: sp.Expr
    second_closed: sp.Expr
    second_closes: bool
    fourth_moment: sp.Expr
    fourth_closed: sp.Expr
    fourth_closes: bool
    variance: sp.Expr
    variance_closed: sp.Expr
    variance_closes: bool
    holder: sp.Expr
    holder_closed: sp.Expr
    holder_closes: bool
    distances: dict
    sep_gap: sp.Expr
    sep_gap_manifest: sp.Expr
    sep_closes: bool
    mcdiarmid_exponent: sp.Expr
    mcdiarmid_closes: bool
    markov: sp.Expr


def _expect(poly_expr: sp.Expr, gram: dict) -> sp.Expr:
    """E[.] of a polynomial in the Gram symbols of independent uniform points on S^{d-1}(M).

    Rules (each by a sign flip x_k -> -x_k, or E[x x^T] = (M^2/d) I): E g = 0; E g_a g_b = 0 for
    distinct pairs a, b; E g_a^2 = M^4/d. The polynomials here have degree <= 2 in the g's.
    """
    symbols = list(gram.values())
    poly = sp.Poly(sp.expand(poly_expr), *symbols)
    total = sp.Integer(0)
    for monom, coeff in poly.terms():
        degree = sum(monom)
        if degree == 0:
            total += coeff
        elif degree == 2 and max(monom) == 2:
            total += coeff * M**4 / d
        elif degree in (1, 2):
            continue
        else:  # pragma: no cover - not produced by X^2 or X^4
            raise ValueError("only degree <= 2 in the Gram symbols is supported")
    return sp.expand(total)


def derive(n: int = 3) -> Theorem2Derivation:
    """Derive every step of the book's Theorem 2 for ``n`` other selected tokens (n >= 1)."""
    if n < 1:
        raise ValueError("n (the number of OTHER selected tokens, N - 1) must be >= 1.")
    alphas = sp.symbols(f"a1:{n + 1}", positive=True)
    pairs = list(itertools.combinations(range(n), 2))
    gram = {(j, k): sp.Symbol(f"g_{j + 1}{k + 1}", real=True) for j, k in pairs}
    dist = {(j, k): sp.Symbol(f"D_{j + 1}{k + 1}", positive=True) for j, k in pairs}
    q_sum = sum(a**2 for a in alphas)
    p_sum = sum(a**4 for a in alphas)
    w_sum = sum(alphas)
    x_sq = M**2 * q_sum + 2 * sum(alphas[j] * alphas[k] * gram[(j, k)] for j, k in pairs)
    m2 = _expect(x_sq, gram) if gram else sp.expand(x_sq)
    m4 = _expect(x_sq**2, gram) if gram else sp.expand(x_sq**2)
    m2_closed = M**2 * q
    m4_closed = M**4 * (q**2 + 2 * (q**2 - p) / d)
    subs_qp = {q: q_sum, p: p_sum}
    var_closed = 2 * M**4 * (q**2 - p) / d
    holder = sp.sqrt(m2_closed**3 / m4_closed)
    holder_closed = M * sp.sqrt(q) / sp.sqrt(1 + 2 * (1 - p / q**2) / d)
    x_sq_dist = x_sq.subs({gram[key]: M**2 - dist[key]**2 / 2 for key in pairs})
    xi_delta_sq = M**2 * w**2 - delta**2 / 2 * (w**2 - q)
    sep_gap = sp.expand(xi_delta_sq.subs({w: w_sum, q: q_sum}) - x_sq_dist)
    manifest = sum(alphas[j] * alphas[k] * (dist[(j, k)]**2 - delta**2) for j, k in pairs)
    exponent = 2 * t**2 / sum((2 * M * a)**2 for a in alphas)
    return Theorem2Derivation(
        n=n, alphas=alphas, gram=gram, x_sq=x_sq,
        second_moment=m2, second_closed=m2_closed,
        second_closes=closes(m2 - m2_closed.subs(subs_qp)),
        fourth_moment=m4, fourth_closed=m4_closed,
        fourth_closes=closes(m4 - m4_closed.subs(subs_qp)),
        variance=sp.expand(m4 - m2**2),
        variance_closed=var_closed,
        variance_closes=closes(m4 - m2**2 - var_closed.subs(subs_qp)),
        holder=holder, holder_closed=holder_closed,
        holder_closes=closes(holder**2 - holder_closed**2),
        distances=dist, sep_gap=sep_gap, sep_gap_manifest=manifest,
        sep_closes=closes(sep_gap - manifest),
        mcdiarmid_exponent=exponent,
        mcdiarmid_closes=closes(exponent - (t**2 / (2 * M**2 * q)).subs(q, q_sum)),
        markov=m2_closed / r**2,
    )


# ----------------------------------------------------------------------------------- numeric
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

    def cantelli(gap2):  # v / (v + gap^2) for gap > 0, else 1
        return torch.where(gap2 > 0, var / (var + gap2 * gap2).clamp_min(1e-300), ones)

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
    this is not a valid bound (it is kept to exhibit the violation, paper.md item T6).
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


def sample_sphere(n_samples: int, n_points: int, dim: int, *, sphere_radius: float = 1.0,
                  generator: torch.Generator | None = None) -> Tensor:
    """[S, n, d] i.i.d. uniform points on S^{d-1}(M) (normalised Gaussians), float64."""
    g = torch.randn(n_samples, n_points, dim, dtype=torch.float64, generator=generator)
    return g * (sphere_radius / g.norm(dim=-1, keepdim=True))


def _min_separation(points: Tensor) -> Tensor:
    dist = torch.cdist(points, points)
    n = points.shape[-2]
    return dist.masked_fill(torch.eye(n, dtype=torch.bool), float("inf")).amin((-1, -2))


def sample_separated(n_samples: int, n_points: int, dim: int, delta: float, *,
                     sphere_radius: float = 1.0, generator: torch.Generator | None = None,
                     max_rounds: int = 200) -> tuple[Tensor, float]:
    """[S, n, d] uniform points conditioned on min pairwise distance >= delta (rejection).

    Returns the points and the measured acceptance rate (an estimate of P(E)).
    """
    kept, drawn, accepted = [], 0, 0
    for _ in range(max_rounds):
        batch = sample_sphere(max(n_samples, 256), n_points, dim, sphere_radius=sphere_radius,
                              generator=generator)
        ok = _min_separation(batch) >= delta
        drawn += batch.shape[0]
        accepted += int(ok.sum())
        kept.append(batch[ok])
        if accepted >= n_samples:
            break
    if accepted < n_samples:
        raise ValueError(f"rejection sampling accepted only {accepted} of {drawn} draws for "
                         f"delta = {delta}; lower delta or the number of points.")
    return torch.cat(kept)[:n_samples], accepted / drawn


def counted_inside(points: Tensor, weights: Tensor, radius) -> Tensor:
    """C_r / N per sample: the fraction of the N points with ||s - alpha_i x_i|| < r, [S]."""
    a = torch.as_tensor(weights, dtype=points.dtype)
    y = a[:, None] * points  # [S, N, d]
    s = y.sum(-2, keepdim=True)
    x_i = (s - y).norm(dim=-1)  # [S, N]
    return (x_i < torch.as_tensor(radius, dtype=points.dtype)).to(points.dtype).mean(-1)


@dataclass
class MonteCarlo:
    """Monte Carlo estimate of E C_r / N: ``mean``, its ``stderr``, the sample count, and the
    acceptance rate of the rejection sampler (1.0 without delta)."""

    mean: float
    stderr: float
    samples: int
    acceptance: float


def monte_carlo_curve(weights, radii, dim: int, *, n_samples: int = 20_000,
                      sphere_radius: float = 1.0, delta: float | None = None,
                      seed: int = 0) -> tuple[Tensor, Tensor, float]:
    """Estimate E C_r / N for fixed weights [N] at every radius of ``radii`` [R] from ONE set of
    samples under Assumption 1 (and Assumption 2 by rejection when ``delta`` is given).

    Returns ``(mean [R], stderr [R], acceptance)``.
    """
    gen = torch.Generator().manual_seed(seed)
    a = torch.as_tensor(weights, dtype=torch.float64)
    n = a.numel()
    if delta is None:
        pts, acc = sample_sphere(n_samples, n, dim, sphere_radius=sphere_radius, generator=gen), 1.0
    else:
        pts, acc = sample_separated(n_samples, n, dim, delta, sphere_radius=sphere_radius,
                                    generator=gen)
    y = a[:, None] * pts
    x_i = (y.sum(-2, keepdim=True) - y).norm(dim=-1)  # [S, N]
    r = torch.as_tensor(radii, dtype=torch.float64).flatten()
    frac = (x_i[:, :, None] < r).to(torch.float64).mean(1)  # [S, R]
    return frac.mean(0), frac.std(0) / math.sqrt(n_samples), acc


def monte_carlo_fraction(weights, radius: float, dim: int, *, n_samples: int = 20_000,
                         sphere_radius: float = 1.0, delta: float | None = None,
                         seed: int = 0) -> MonteCarlo:
    """Estimate E C_r / N for fixed weights [N] under Assumption 1 (and 2 by rejection)."""
    mean, se, acc = monte_carlo_curve(weights, [radius], dim, n_samples=n_samples,
                                      sphere_radius=sphere_radius, delta=delta, seed=seed)
    return MonteCarlo(mean=float(mean[0]), stderr=float(se[0]), samples=n_samples, acceptance=acc)


def monte_carlo_check(weights, radius: float, dim: int, *, sphere_radius: float = 1.0,
                      delta: float | None = None, n_samples: int = 4000, seed: int = 0,
                      z: float = 4.0) -> dict:
    """One Monte Carlo test of the theorem: the estimate against the bounds for sorted ``weights``.

    Under rejection (``delta`` given) the bounds carry the failure bound eta of
    :func:`separation_failure_bound` and the sure bound. ``ok`` is True when
    ``lower - z se <= mean <= upper + z se``. Returns a flat dict (one table row).
    """
    a = torch.as_tensor(weights, dtype=torch.float64)
    n = a.numel()
    eta = 0.0 if delta is None else separation_failure_bound(n, dim, delta, sphere_radius)
    if eta >= 1.0:
        raise ValueError(f"the union bound gives eta = {eta:.3f} >= 1 for N = {n}, d = {dim}, "
                         f"delta = {delta}: choose a smaller delta.")
    mc = monte_carlo_fraction(a, radius, dim, n_samples=n_samples, sphere_radius=sphere_radius,
                              delta=delta, seed=seed)
    b = theorem2_bounds(a, [n], radius, sphere_radius=sphere_radius, dim=dim, delta=delta,
                        failure=eta)
    lower, upper = float(b.lower[0]), float(b.upper[0])
    return {"N": n, "d": dim, "r": float(radius), "delta": delta, "eta": eta,
            "lower": lower, "lower_markov": float(b.lower_markov[0]), "mc": mc.mean,
            "se": mc.stderr, "upper": upper, "upper_exponential": float(b.upper_exponential[0]),
            "acceptance": mc.acceptance,
            "ok": lower - z * mc.stderr <= mc.mean <= upper + z * mc.stderr}
