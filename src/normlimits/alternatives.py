"""The paper's four yardsticks applied to any normaliser on fixed logits (the alternatives chapter).

The logits are the model's own (``scale * q . k`` from :mod:`normlimits.capture`, masked keys
``-inf``); only the normaliser that turns them into weights is swapped. Nothing here claims
anything about model quality after a swap: the model was trained with softmax.

The yardsticks, each reusing the metric of the chapter that introduced it:

1. **vanishing** (Lemma 1): largest weight and entropy of the query that sees ``L`` keys, for a
   grid of L (rows ``L - 1`` of one forward pass, :func:`normlimits.vanishing.row_logits`);
2. **distance collapse** (Theorem 1 / Corollary 2): the true distance ``d~_N`` and the main term
   of its random-subset expectation against N (:func:`normlimits.distances.distance_profile`);
3. **separability** (Theorem 2): ``N_s / N`` against N
   (:func:`normlimits.separability.geometric_separability`, value vectors on the unit sphere);
4. **gradient** (Lemma 2 / Corollary 3): the spectral norm of the Jacobian ``d alpha / d l`` of
   ``alpha = f(l / T)`` against T. Exact where a closed form exists (:func:`jacobian_norm`):

   - softmax and SSMax: ``c (diag(a) - a a^T)`` with ``c = 1/T`` (softmax) or ``s log(n) / T``;
     its top eigenvalue by :func:`normlimits.jacobian.top_eigenvalue`;
   - sparsemax: ``(diag(u) - u u^T / |S|) / T`` with ``u`` the support indicator: a projection,
     so the norm is exactly ``1/T`` when the support has at least 2 keys and 0 otherwise;
   - 1.5-entmax: ``(diag(g) - g g^T / sum g) / T`` with ``g = sqrt(p)`` on the support, equal to
     ``sum(g) (diag(b) - b b^T) / T`` with ``b = g / sum g``: ``top_eigenvalue`` again;
   - softmax_1: ``(diag(a) - a a^T) / T`` with rows summing to less than 1: top eigenvalue from
     the secular equation ``sum_i a_i^2 / (a_i - lambda) = 1`` on ``(a_(2), a_(1))``
     (:func:`substochastic_top_eigenvalue`, safeguarded Newton);
   - adaptive temperature and SA-softmax (no closed form for the norm): Lanczos on ``J^T J``
     with closed-form products ``J v`` and ``J^T u`` (:func:`jacobian_products`; tested against
     forward- and reverse-mode autograd), never forming J; a lower bound converging from below.

Shapes: logits ``[..., L]`` with the key dimension last; weights the same; per-row statistics
``[...]``. Units: logits in nats (GPT-2's scaled ``q.k``), T dimensionless, distances in the
units of the value vectors. Computation in float64.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Iterable, Sequence

import torch
from torch import Tensor

from normlimits import distances as D
from normlimits import jacobian as J
from normlimits import separability as S
from normlimits import vanishing as V
from normlimits.fits import loglog_fit
from normlimits.protocol import length_grid
from normlimits.normalizers import (NORMALIZERS, Normalizer, check_temperature, get_normalizer,
                                    ssmax_scale, visible_count, visible_mask)

DTYPE = torch.float64

__all__ = [
    "EXACT_JACOBIANS",
    "row_statistics",
    "exact_jacobian",
    "dense_jacobian",
    "jacobian_norm",
    "lanczos_norm",
    "jacobian_products",
    "substochastic_top_eigenvalue",
    "worst_case_jacobian",
    "YardstickConfig",
    "YardstickResults",
    "measure_window",
    "measure",
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


# =============================================================================== yardstick 4
def substochastic_top_eigenvalue(weights: Tensor, iterations: int = 100) -> Tensor:
    """Largest eigenvalue of ``diag(a) - a a^T`` for non-negative rows ``a`` with ``sum a <= 1``.

    (:func:`normlimits.jacobian.top_eigenvalue` covers rows that sum to exactly 1; softmax_1's
    rows sum to less.) Interlacing puts the eigenvalue in ``[a_(2), a_(1)]``: ``a_(1)`` at a tie,
    else the root of the increasing secular function ``f(lambda) = sum_i a_i^2 / (a_i - lambda)
    - 1`` on ``(a_(2), a_(1))``, found by Newton's method safeguarded by bisection (the bracket
    shrinks every step) to a relative 1e-14. Subnormal weights count as 0 (error < 1e-307).
    Shapes: [..., L] -> [...] float64.
    """
    a = weights.to(DTYPE)
    if bool((a < 0).any()) or bool((a.sum(-1) > 1 + 1e-9).any()):
        raise ValueError("rows must be non-negative with sum <= 1 (softmax_1 weights)")
    a = a.masked_fill(a < torch.finfo(DTYPE).tiny, 0.0)
    if a.shape[-1] == 1:
        return (a * (1 - a)).squeeze(-1)
    top = a.topk(2, dim=-1).values
    lo, hi = top[..., 1].clone(), top[..., 0].clone()
    solve = hi > lo
    lam = 0.5 * (lo + hi)
    positive = a > 0
    sq = a * a
    for _ in range(iterations):
        diff = a - lam.unsqueeze(-1)
        ok = positive & (diff != 0)
        safe = torch.where(ok, diff, torch.ones_like(diff))
        terms = torch.where(ok, sq / safe, torch.zeros_like(a))
        f = terms.sum(-1) - 1
        fp = torch.where(ok, terms / safe, torch.zeros_like(a)).sum(-1)
        above = f > 0
        hi = torch.where(above, lam, hi)
        lo = torch.where(above, lo, lam)
        newton = lam - f / fp.clamp_min(1e-300)
        inside = (newton > lo) & (newton < hi)
        new = torch.where(inside, newton, 0.5 * (lo + hi))
        done = ~solve | ((new - lam).abs() <= 1e-14 * new.abs()) | (hi - lo <= 1e-14 * hi)
        lam = torch.where(solve, new, lam)
        if bool(done.all()):
            break
    return torch.where(solve, lam, top[..., 0])


def exact_jacobian(name: str | Normalizer, logits: Tensor, temperature: float = 1.0,
                   n=None) -> Tensor | None:
    """Closed-form Jacobian ``d alpha / d l`` of ``alpha = f(l / T)``: [..., L] -> [..., L, L].

    Entry ``[..., i, j] = d alpha_i / d l_j``; rows and columns of masked keys are 0. Returns None
    for normalisers without a closed form here (adaptive temperature, SA-softmax). For tests and
    small L; :func:`jacobian_norm` gives norms without forming the matrix.
    """
    nz = get_normalizer(name)
    t = check_temperature(temperature)
    logits = logits.to(DTYPE)
    w = nz.at_temperature(logits, t, n=n)
    if nz.key in ("softmax", "ssmax", "softmax1"):
        base = torch.diag_embed(w) - w.unsqueeze(-1) * w.unsqueeze(-2)
        if nz.key == "ssmax":
            s = ssmax_scale(**nz.options)
            c = s * torch.log(visible_count(logits, -1, n))          # [..., 1]
            base = base * c.unsqueeze(-1)
        return base / t
    if nz.key == "sparsemax":
        u = (w > 0).to(DTYPE)
        return (torch.diag_embed(u) - u.unsqueeze(-1) * u.unsqueeze(-2)
                / u.sum(-1)[..., None, None]) / t
    if nz.key == "entmax15":
        g = w.sqrt()
        return (torch.diag_embed(g) - g.unsqueeze(-1) * g.unsqueeze(-2)
                / g.sum(-1)[..., None, None]) / t
    return None


#: Normalisers whose Jacobian norm :func:`jacobian_norm` computes from a closed form.
EXACT_JACOBIANS = ("softmax", "sparsemax", "entmax15", "ssmax", "softmax1")


def dense_jacobian(name: str | Normalizer, logits: Tensor, temperature: float = 1.0,
                   n=None) -> Tensor:
    """Reference Jacobian by reverse-mode autograd, one output key at a time: [..., L] -> [..., L, L].

    Slow (L backward passes); for tests and small L only. Masked keys get zero rows and columns.
    """
    nz = get_normalizer(name)
    t = check_temperature(temperature)
    x = logits.to(DTYPE).detach().requires_grad_(True)
    out = nz.at_temperature(x, t, n=n)
    rows = []
    for i in range(out.shape[-1]):
        (grad,) = torch.autograd.grad(out[..., i].sum(), x, retain_graph=True)
        rows.append(torch.where(torch.isfinite(logits), grad, torch.zeros_like(grad)))
    return torch.stack(rows, dim=-2)


def _a_times(q: Tensor, v: Tensor) -> Tensor:
    """``(diag(q) - q q^T) v`` row-wise."""
    return q * v - q * (q * v).sum(-1, keepdim=True)


def _adaptive_factors(logits: Tensor, options: dict) -> dict[str, Tensor]:
    """Per-row factors of the adaptive-temperature Jacobian at T = 1.

    ``w = softmax(beta z)``, ``beta = beta(H(softmax(z)))``: with ``A_q = diag(q) - q q^T``,
    ``J = A_w (beta I + z g^T)`` and ``g = -beta'(H) A_p log p`` (``dH = -(A_p log p) . dz``).
    """
    from normlimits.normalizers import VELICKOVIC_POLYNOMIAL, _entropy_masked, adaptive_beta

    coefficients = options.get("coefficients", VELICKOVIC_POLYNOMIAL)
    threshold = options.get("threshold", 0.5)
    visible = visible_mask(logits)
    z = torch.where(visible, logits, torch.zeros_like(logits))
    p, entropy = _entropy_masked(z, visible, -1)
    beta = adaptive_beta(entropy, coefficients, threshold)                      # [..., 1]
    poly = torch.zeros_like(entropy)
    slope = torch.zeros_like(entropy)
    for c in coefficients:                       # Horner for poly and its derivative
        slope = slope * entropy + poly
        poly = poly * entropy + c
    active = (entropy > threshold) & (poly > 1)
    dbeta = torch.where(active, slope, torch.zeros_like(slope))
    w = torch.softmax(torch.where(visible, beta * z, torch.full_like(z, float("-inf"))), -1)
    log_p = torch.where(visible, torch.log(torch.where(p > 0, p, torch.ones_like(p))),
                        torch.zeros_like(p))
    return {"w": w, "z": z, "beta": beta, "g": -dbeta * _a_times(p, log_p)}


def _adaptive_jv(f: dict, v: Tensor) -> Tensor:
    return _a_times(f["w"], f["beta"] * v + f["z"] * (f["g"] * v).sum(-1, keepdim=True))


def _adaptive_jtu(f: dict, u: Tensor) -> Tensor:
    awu = _a_times(f["w"], u)
    return f["beta"] * awu + f["g"] * (f["z"] * awu).sum(-1, keepdim=True)


def _sa_softmax_factors(logits: Tensor, options: dict) -> dict[str, Tensor]:
    """Per-row factors of the (normalised) SA-softmax Jacobian at T = 1.

    ``w = c * p``: ``J = diag(c) A_p + diag(p / span) (I - 1 m_lo^T - c (m_hi - m_lo)^T)`` with
    ``m_lo`` / ``m_hi`` the derivatives of ``min(z_min, 0)`` / ``max(z_max, 0)`` (split evenly
    over tied keys, as torch's ``amin`` / ``amax`` do; the clamps pass the derivative at 0).
    """
    if not options.get("normalized", True):
        raise ValueError("exact products are implemented for the normalised SA-softmax only")
    visible = visible_mask(logits)
    z = torch.where(visible, logits, torch.zeros_like(logits))
    p = torch.softmax(torch.where(visible, z, torch.full_like(z, float("-inf"))), -1)
    z_min = torch.where(visible, z, torch.full_like(z, float("inf"))).amin(-1, keepdim=True)
    z_max = torch.where(visible, z, torch.full_like(z, float("-inf"))).amax(-1, keepdim=True)
    low, high = z_min.clamp_max(0.0), z_max.clamp_min(0.0)
    span = high - low
    live = span > 0
    safe = torch.where(live, span, torch.ones_like(span))
    at_min = (visible & (z == z_min)).to(z.dtype)
    at_max = (visible & (z == z_max)).to(z.dtype)
    return {"p": p, "c": torch.where(live, (z - low) / safe, torch.zeros_like(z)),
            "m_lo": at_min / at_min.sum(-1, keepdim=True) * (z_min <= 0).to(z.dtype),
            "m_hi": at_max / at_max.sum(-1, keepdim=True) * (z_max >= 0).to(z.dtype),
            "ps": torch.where(live, p / safe, torch.zeros_like(p)), "vis": visible.to(z.dtype)}


def _sa_softmax_jv(f: dict, v: Tensor) -> Tensor:
    lo_v = (f["m_lo"] * v).sum(-1, keepdim=True)
    hi_v = (f["m_hi"] * v).sum(-1, keepdim=True)
    return f["vis"] * (f["c"] * _a_times(f["p"], v) + f["ps"] * (v - lo_v - f["c"] * (hi_v - lo_v)))


def _sa_softmax_jtu(f: dict, u: Tensor) -> Tensor:
    u = f["vis"] * u
    q = f["ps"] * u
    return f["vis"] * (_a_times(f["p"], f["c"] * u) + q - f["m_lo"] * q.sum(-1, keepdim=True)
                       - (f["m_hi"] - f["m_lo"]) * (f["c"] * q).sum(-1, keepdim=True))


#: Normalisers with exact (closed-form) Jacobian-vector products: (factors, J v, J^T u).
_EXACT_PRODUCTS = {"adaptive": (_adaptive_factors, _adaptive_jv, _adaptive_jtu),
                   "sa-softmax": (_sa_softmax_factors, _sa_softmax_jv, _sa_softmax_jtu)}


def _check_method(nz: Normalizer, method: str) -> bool:
    """True when the closed-form products are to be used."""
    if method not in ("auto", "exact", "autograd"):
        raise ValueError(f"method must be 'auto', 'exact' or 'autograd' (got {method!r})")
    if method == "exact" and nz.key not in _EXACT_PRODUCTS:
        raise ValueError(f"no closed-form products for {nz.key!r}; use method='autograd'")
    return method == "exact" or (method == "auto" and nz.key in _EXACT_PRODUCTS)


def jacobian_products(name: str | Normalizer, logits: Tensor, temperature: float = 1.0,
                      n=None, *, method: str = "auto"):
    """Functions ``(v -> J v, u -> J^T u)`` for ``J = d f(l/T) / d l`` at ``logits`` [..., L].

    ``method='exact'``: closed-form products (adaptive temperature, SA-softmax);
    ``'autograd'``: forward-mode ``torch.func.jvp`` and reverse-mode ``torch.func.vjp``;
    ``'auto'``: exact where available. Masked keys: zero in and out.
    """
    nz = get_normalizer(name)
    t = check_temperature(temperature)
    x = logits.to(DTYPE).detach()
    visible = visible_mask(x)
    if _check_method(nz, method):
        make, jv1, jtu1 = _EXACT_PRODUCTS[nz.key]
        factors = make(x / t, nz.options)
        return (lambda v: jv1(factors, v) / t), (lambda u: jtu1(factors, u) / t)

    def f(z):
        return nz.at_temperature(z, t, n=n)

    _, vjp_fn = torch.func.vjp(f, x)

    def jv(v):
        return torch.func.jvp(f, (x,), (torch.where(visible, v, torch.zeros_like(v)),))[1]

    def jtu(u):
        return torch.where(visible, vjp_fn(u)[0], torch.zeros_like(u))

    return jv, jtu


def lanczos_norm(name: str | Normalizer, logits: Tensor, temperature: float = 1.0, n=None, *,
                 steps: int = 32, seed: int = 0, method: str = "auto") -> Tensor:
    """Spectral norm of ``d alpha / d l`` by Lanczos on ``J^T J`` (matrix-free, all rows at once).

    Products from :func:`jacobian_products` (closed form for the adaptive temperature and
    SA-softmax, autograd otherwise or with ``method='autograd'``). ``steps`` Lanczos steps with
    full reorthogonalisation from a seeded random unit vector on the visible keys (capped at the
    number of keys); the square root of the largest Ritz value of the tridiagonal matrix is a
    lower bound on the norm that converges fast (exact once ``steps`` reaches the number of
    visible keys). Shapes: [..., L] -> [...] float64.
    """
    x = logits.to(DTYPE).detach()
    visible = visible_mask(x)
    jv_fn, jtu_fn = jacobian_products(name, x, temperature, n, method=method)
    length = x.shape[-1]
    lead = x.shape[:-1]
    gen = torch.Generator().manual_seed(int(seed))
    q = torch.randn(x.shape, dtype=DTYPE, generator=gen)
    q = torch.where(visible, q, torch.zeros_like(q))
    q = (q / q.norm(dim=-1, keepdim=True)).reshape(-1, length)
    rows = q.shape[0]
    steps = max(1, min(int(steps), length))
    basis = torch.zeros(rows, steps, length, dtype=DTYPE)
    alphas = torch.zeros(rows, steps, dtype=DTYPE)
    betas = torch.zeros(rows, max(steps - 1, 1), dtype=DTYPE)
    scale = None
    for j in range(steps):
        basis[:, j] = q
        w = jtu_fn(jv_fn(q.reshape(x.shape))).reshape(rows, length)        # J^T J q
        alphas[:, j] = (w * q).sum(-1)
        if scale is None:
            scale = alphas[:, 0].abs().clamp_min(1e-300)
        span = basis[:, : j + 1]                                          # [rows, j+1, L]
        for _ in range(2):                                                # full reorthogonalisation
            coef = torch.bmm(span, w.unsqueeze(-1))                       # [rows, j+1, 1]
            w = w - torch.bmm(coef.transpose(1, 2), span).squeeze(1)
        if j == steps - 1:
            break
        b = w.norm(dim=-1)
        alive = b > 1e-13 * scale
        betas[:, j] = torch.where(alive, b, torch.zeros_like(b))
        q = torch.where(alive.unsqueeze(-1), w / b.clamp_min(1e-300).unsqueeze(-1), torch.zeros_like(w))
    tri = torch.diag_embed(alphas)
    if steps > 1:
        off = torch.diag_embed(betas[:, : steps - 1], offset=1)
        tri = tri + off + off.transpose(-1, -2)
    top = torch.linalg.eigvalsh(tri)[..., -1]
    return top.clamp_min(0.0).sqrt().reshape(lead)


def jacobian_norm(name: str | Normalizer, logits: Tensor, temperature: float = 1.0, n=None, *,
                  steps: int = 32, seed: int = 0) -> Tensor:
    """Spectral norm ``||d alpha / d l||_2`` of ``alpha = f(l / T)`` per row: [..., L] -> [...].

    Exact (closed forms in the module docstring) for the normalisers in
    :data:`EXACT_JACOBIANS`; :func:`lanczos_norm` (``steps`` Lanczos steps on closed-form
    Jacobian-vector products) for the others.
    """
    nz = get_normalizer(name)
    t = check_temperature(temperature)
    logits = logits.to(DTYPE)
    if nz.key not in EXACT_JACOBIANS:
        return lanczos_norm(nz, logits, t, n, steps=steps, seed=seed)
    w = nz.at_temperature(logits, t, n=n)
    # Flush subnormal weights to 0 (changes the norm by < 1e-307): J.top_eigenvalue returns NaN
    # when the second-largest weight is subnormal.
    w = w.masked_fill(w < torch.finfo(DTYPE).tiny, 0.0)
    if nz.key == "softmax":
        return J.top_eigenvalue(w) / t
    if nz.key == "ssmax":
        s = ssmax_scale(**nz.options)
        c = s * torch.log(visible_count(logits, -1, n)).squeeze(-1)
        return c.expand(w.shape[:-1]) * J.top_eigenvalue(w) / t
    if nz.key == "sparsemax":
        return ((w > 0).sum(-1) >= 2).to(DTYPE) / t
    if nz.key == "entmax15":
        g = w.sqrt()
        return g.sum(-1) * J.top_eigenvalue(g) / t
    return substochastic_top_eigenvalue(w) / t                     # softmax1


def worst_case_jacobian(name: str | Normalizer, temperature, n: int | None = None) -> dict:
    """What is proven about ``sup_l ||d alpha / d l||_2`` at temperature T (chapter's theorems).

    Returns ``{"lower": float, "upper": float or inf, "attained": bool, "note": str}`` for one T.
    Softmax ``1/(2T)`` (two-way tie); sparsemax exactly ``1/T``; 1.5-entmax between
    ``1/(sqrt 2 T)`` (two-way tie) and ``1/T``; SSMax ``s log(n) / (2T)``; softmax_1 ``1/(2T)``
    (approached, not attained); adaptive temperature at least ``1/(2T)``; SA-softmax at least
    ``1/(2T)`` asymptotically (no finite upper bound proven here).
    """
    nz = get_normalizer(name)
    t = check_temperature(temperature)
    if nz.key == "softmax":
        return {"lower": 1 / (2 * t), "upper": 1 / (2 * t), "attained": True, "note": "two-way tie"}
    if nz.key == "sparsemax":
        return {"lower": 1 / t, "upper": 1 / t, "attained": True, "note": "any support of 2+ keys"}
    if nz.key == "entmax15":
        return {"lower": 1 / (math.sqrt(2) * t), "upper": 1 / t, "attained": True,
                "note": "lower bound attained at a two-way tie"}
    if nz.key == "ssmax":
        if n is None:
            raise ValueError("SSMax's worst case depends on the number of keys: pass n")
        s = ssmax_scale(**nz.options)
        c = s * math.log(n)
        return {"lower": c / (2 * t), "upper": c / (2 * t), "attained": True, "note": "two-way tie"}
    if nz.key == "softmax1":
        return {"lower": 1 / (2 * t), "upper": 1 / (2 * t), "attained": False,
                "note": "approached by two tied logits -> +inf"}
    return {"lower": 1 / (2 * t), "upper": float("inf"), "attained": False,
            "note": "approached at a two-way tie of large logits"}


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
        float(t) for t in torch.logspace(-2.5, 1.5, 81, dtype=torch.float64))

    @classmethod
    def for_window(cls, length: int, *, rows: int = 16, jacobian_rows: int = 8,
                   temperatures: Sequence[float] = (0.01, 0.03, 0.1, 0.3, 1.0, 3.0, 10.0),
                   smallest: int = 32) -> "YardstickConfig":
        """Default grids for windows of ``length`` tokens.

        Lengths: powers of two from ``smallest`` to ``length``; rows: ``rows`` positions evenly
        spaced over the second half of the window; N: powers of two below the shortest row's
        keys; Jacobian rows: :func:`normlimits.jacobian.default_rows`.
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
                   temperatures=tuple(float(t) for t in temperatures), jacobian_rows=jrows)


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
    if nz.key in EXACT_JACOBIANS:
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


def measure_window(capture, normalizers: Sequence[str | Normalizer], config: YardstickConfig,
                   *, gradient: bool = True) -> dict[str, dict[str, Tensor]]:
    """The four yardsticks on one captured window, for every normaliser.

    ``capture``: a :class:`normlimits.capture.WindowCapture` (queries, keys, values
    [layers, heads, L, d], per-layer ``scale``). Returns ``{normaliser key: {statistic: tensor}}``:

    - ``max_weight``, ``entropy``, ``entropy_ratio``, ``mass``, ``support`` [layers, heads, G]
      (rows L-1 for every L of ``config.lengths``);
    - ``distance``, ``expected`` [layers, heads, n]: mean over ``config.rows`` of ``d~_N`` and of
      the main term of its random-subset expectation; ``top_n_mass`` likewise;
    - ``separability`` [layers, heads, n]: mean over rows of ``N_s / N``;
    - ``jacobian`` [nT, layers, heads]: mean over ``config.jacobian_rows`` of the spectral norm;
      ``jacobian_max`` [nT, layers, heads]: the largest over those rows;
      ``jacobian_selectivity`` [nT, layers, heads]: mean over those rows of the largest weight
      at each T; for softmax also ``reference_jacobian`` / ``reference_selectivity``
      [nTref, layers, heads], the same on ``config.reference_temperatures`` (only with
      ``gradient``).
    """
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
        stats = row_statistics(nz(logits_v), logits_v)
        res = {k: stats[k] for k in ("max_weight", "entropy", "entropy_ratio", "mass", "support")}
        w = nz(logits_r)
        prof = D.distance_profile(w, values, list(config.n_grid), lengths=rows + 1,
                                  expectation=True, jensen=False, bounds=False)
        res["distance"] = prof.true.mean(-2)
        res["expected"] = prof.expected_main.mean(-2)
        res["top_n_mass"] = prof.top_n_mass.mean(-2)
        sep = S.geometric_separability(w, sphere, list(config.n_grid), rows=rows)
        res["separability"] = torch.nanmean(sep.fraction.to(DTYPE), dim=-2)
        if gradient:
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

    def head_values(self, key: str, name: str) -> Tensor:
        """Per-head values, mean over windows: [heads_total, G/n] (or [nT, heads_total])."""
        x = self.stats[key][name].mean(0)
        if name.startswith(("jacobian", "reference")):
            return x.reshape(x.shape[0], -1)
        return x.reshape(-1, x.shape[-1])

    def max_weight_exponent(self, key: str) -> Tensor:
        """Per head: fitted exponent e of ``max weight ~ L^e`` (geometric mean over windows)."""
        mw = self.stats[key]["max_weight"].clamp_min(1e-300).log().mean(0).exp()
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
        apart (two-sample KS, :func:`normlimits.distances.ks_critical_n`); None if none."""
        true = self.head_values(key, "distance")
        expected = self.head_values(key, "expected")
        res = D.ks_critical_n(true, expected, list(self.config.n_grid), alphas=(alpha,))
        return res.critical[float(alpha)]


def measure(captures: Iterable, normalizers: Sequence[str | Normalizer] | None = None,
            config: YardstickConfig | None = None) -> YardstickResults:
    """:func:`measure_window` over windows (an iterable of captures, consumed once), stacked.

    ``normalizers`` defaults to every registered one; ``config`` to
    :meth:`YardstickConfig.for_window` of the first window's length.
    """
    start = time.perf_counter()
    names = [get_normalizer(n).key for n in (normalizers or list(NORMALIZERS))]
    parts: list[dict] = []
    for capture in captures:
        if config is None:
            config = YardstickConfig.for_window(capture.values.shape[-2])
        parts.append(measure_window(capture, names, config,
                                    gradient=len(parts) < config.jacobian_windows))
    if not parts:
        raise ValueError("no windows were given; pass at least one captured window")
    stats = {key: {name: torch.stack([p[key][name] for p in parts if name in p[key]])
                   for name in parts[0][key]}
             for key in names}
    return YardstickResults(config=config, normalizers=names, stats=stats,
                            seconds=time.perf_counter() - start, windows=len(parts))
