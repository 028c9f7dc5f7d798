"""Jacobians of the normalisers: exact matrices, spectral norms, matrix-free products, worst cases.

For ``alpha = f(l / T)`` with ``f`` a normaliser of :mod:`normlimits.metrics.normalizers`, the Jacobian
``d alpha / d l = J_f(l / T) / T``. What is computed, per row (logits ``[..., L]``, key dim last,
masked keys ``-inf`` with zero rows and columns):

- softmax and SSMax: ``c (diag(a) - a a^T)`` with ``c = 1/T`` (softmax) or ``s log(n) / T``;
  its top eigenvalue by :func:`normlimits.metrics.jacobian.top_eigenvalue`;
- top-k softmax: the same on the kept keys (the selection is locally constant off ties);
- sparsemax: ``(diag(u) - u u^T / |S|) / T`` with ``u`` the support indicator: a projection, so
  the norm is exactly ``1/T`` when the support has at least 2 keys and 0 otherwise;
- 1.5-entmax: ``(diag(g) - g g^T / sum g) / T`` with ``g = sqrt(p)`` on the support, equal to
  ``sum(g) (diag(b) - b b^T) / T`` with ``b = g / sum g``; ASEntmax multiplies it by its scale c;
- softmax_1 and the sink logit: ``(diag(a) - a a^T) / T`` with rows summing to less than 1: top
  eigenvalue from the secular equation (:func:`substochastic_top_eigenvalue`);
- sigmoid: ``diag(sigma'(u)) / T``, norm ``max_i sigma(u_i)(1 - sigma(u_i)) / T``;
- adaptive temperature, SA-softmax, softpick and stick-breaking (no closed form for the norm):
  Lanczos on ``J^T J`` with closed-form products ``J v`` and ``J^T u`` (:func:`jacobian_products`,
  tested against forward- and reverse-mode autograd), never forming J: a lower bound that
  converges from below.

Which formula applies is decided by the normaliser's function (so variants such as
:func:`normlimits.metrics.normalizers.sink_normalizer` or an SSMax with another scale are covered).
Computation in float64.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from normlimits.metrics import jacobian as J
from normlimits.metrics import normalizers as NZ
from normlimits.metrics.normalizers import (
    Normalizer, check_temperature, get_normalizer, visible_count, visible_mask)
from normlimits.core.precision import dtype_rtol

DTYPE = torch.float64

__all__ = [
    "EXACT_NORMS",
    "PRODUCT_NORMS",
    "family",
    "exact_jacobian",
    "dense_jacobian",
    "jacobian_norm",
    "lanczos_norm",
    "jacobian_products",
    "substochastic_top_eigenvalue",
    "worst_case_jacobian",
]

_FAMILIES = {
    NZ.softmax: "softmax", NZ.scalable_softmax: "ssmax", NZ.sparsemax: "sparsemax",
    NZ.entmax15: "entmax15", NZ.softmax_one: "softmax1", NZ.adaptive_temperature_softmax: "adaptive",
    NZ.self_adjusted_softmax: "sa-softmax", NZ.softpick: "softpick",
    NZ.sigmoid_attention: "sigmoid", NZ.stick_breaking: "stickbreaking", NZ.asentmax: "asentmax",
    NZ.topk_softmax: "topk", NZ.sink_softmax: "sink",
}
#: families whose spectral norm :func:`jacobian_norm` computes from a closed form
EXACT_NORMS = ("softmax", "ssmax", "sparsemax", "entmax15", "softmax1", "sigmoid", "asentmax",
               "topk", "sink")
#: families whose norm comes from Lanczos on closed-form Jacobian-vector products
PRODUCT_NORMS = ("adaptive", "sa-softmax", "softpick", "stickbreaking")


def family(name: str | Normalizer) -> str:
    """The Jacobian family of a normaliser (``"softmax"``, ``"ssmax"``, ``"topk"``, ``"sink"``, ...),
    from the function it wraps; raises for a function this module does not know."""
    nz = get_normalizer(name)
    try:
        return _FAMILIES[nz.function]
    except KeyError:
        raise ValueError(f"no Jacobian is implemented for normaliser {nz.key!r} "
                         f"(function {nz.function.__name__})") from None


def substochastic_top_eigenvalue(weights: Tensor, iterations: int = 100) -> Tensor:
    """Largest eigenvalue of ``diag(a) - a a^T`` for non-negative rows ``a`` with ``sum a <= 1``.

    (:func:`normlimits.metrics.jacobian.top_eigenvalue` covers rows that sum to exactly 1; softmax_1's
    rows sum to less.) Interlacing puts the eigenvalue in ``[a_(2), a_(1)]``: ``a_(1)`` at a tie,
    else the root of the increasing secular function ``f(lambda) = sum_i a_i^2 / (a_i - lambda)
    - 1`` on ``(a_(2), a_(1))``, found by Newton's method safeguarded by bisection (the bracket
    shrinks every step) to a relative 1e-14. Subnormal weights count as 0 (error < 1e-307).
    Shapes: [..., L] -> [...] float64.
    """
    a = weights.to(DTYPE)
    # each weight carries its dtype's rounding (relative eps/2 per operation), so a float32 row
    # that sums to 1 exactly may sum to 1 + a few 1e-8: 1e-9, or 8 eps of the weights' dtype
    if bool((a < 0).any()) or bool((a.sum(-1) > 1 + dtype_rtol(1e-9, weights)).any()):
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


def _ssmax_factor(nz: Normalizer, logits: Tensor, n) -> Tensor:
    """SSMax's ``s log(n)`` per row, [..., 1]."""
    s = NZ.ssmax_scale(**nz.options)
    return s * torch.log(visible_count(logits, -1, n))


def _asentmax_factor(nz: Normalizer, logits: Tensor, n) -> Tensor:
    """ASEntmax's scale ``delta + beta log(n + 1)^gamma`` per row, [..., 1]."""
    return NZ.asentmax_scale(visible_count(logits, -1, n), **nz.options)


def _outer(a: Tensor, b: Tensor) -> Tensor:
    return a.unsqueeze(-1) * b.unsqueeze(-2)


def exact_jacobian(name: str | Normalizer, logits: Tensor, temperature: float = 1.0,
                   n=None) -> Tensor | None:
    """Closed-form Jacobian ``d alpha / d l`` of ``alpha = f(l / T)``: [..., L] -> [..., L, L].

    Entry ``[..., i, j] = d alpha_i / d l_j``; rows and columns of masked keys are 0. Returns None
    for the adaptive temperature and SA-softmax (products only). For tests and small L;
    :func:`jacobian_norm` gives norms without forming the matrix.
    """
    nz = get_normalizer(name)
    kind = family(nz)
    t = check_temperature(temperature)
    logits = logits.to(DTYPE)
    w = nz.at_temperature(logits, t, n=n)
    if kind in ("softmax", "ssmax", "softmax1", "topk", "sink"):
        base = torch.diag_embed(w) - _outer(w, w)
        if kind == "ssmax":
            base = base * _ssmax_factor(nz, logits, n).unsqueeze(-1)
        return base / t
    if kind == "sparsemax":
        u = (w > 0).to(DTYPE)
        return (torch.diag_embed(u) - _outer(u, u) / u.sum(-1)[..., None, None]) / t
    if kind in ("entmax15", "asentmax"):
        g = w.sqrt()
        base = torch.diag_embed(g) - _outer(g, g) / g.sum(-1)[..., None, None]
        if kind == "asentmax":
            base = base * _asentmax_factor(nz, logits, n).unsqueeze(-1)
        return base / t
    if kind == "sigmoid":
        return torch.diag_embed(w * (1 - w)) / t
    if kind == "softpick":
        f = _softpick_factors(logits / t, nz.options)
        return (torch.diag_embed(f["a"]) - _outer(f["w"], f["g"])) / t
    if kind == "stickbreaking":
        f = _stickbreaking_factors(logits / t, nz.options)
        size = logits.shape[-1]
        later = torch.ones(size, size, dtype=torch.bool).triu(1)         # [j, i]: i > j
        m = torch.diag_embed(f["w"] * (1 - f["beta"]))
        m = m - (f["w"].unsqueeze(-1) * f["beta"].unsqueeze(-2)) * later
        return m * f["vis"].unsqueeze(-1) * f["vis"].unsqueeze(-2) / t
    return None


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


# ----------------------------------------------------------------- closed-form J v and J^T u
def _a_times(q: Tensor, v: Tensor) -> Tensor:
    """``(diag(q) - q q^T) v`` row-wise."""
    return q * v - q * (q * v).sum(-1, keepdim=True)


def _adaptive_factors(logits: Tensor, options: dict) -> dict[str, Tensor]:
    """Per-row factors of the adaptive-temperature Jacobian at T = 1.

    ``w = softmax(beta z)``, ``beta = beta(H(softmax(z)))``: with ``A_q = diag(q) - q q^T``,
    ``J = A_w (beta I + z g^T)`` and ``g = -beta'(H) A_p log p`` (``dH = -(A_p log p) . dz``).
    """
    coefficients = options.get("coefficients", NZ.VELICKOVIC_POLYNOMIAL)
    threshold = options.get("threshold", 0.5)
    visible = visible_mask(logits)
    z = torch.where(visible, logits, torch.zeros_like(logits))
    p, entropy = NZ._entropy_masked(z, visible, -1)
    beta = NZ.adaptive_beta(entropy, coefficients, threshold)                     # [..., 1]
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


def _softpick_factors(logits: Tensor, options: dict) -> dict[str, Tensor]:
    """Per-row factors of the softpick Jacobian at T = 1: ``J = diag(a) - w g^T``.

    With ``E_j = e^{z_j - c}``, ``e_j = E_j - e^{-c}`` (``c = max(z_max, 0)``) and
    ``D = sum_j |e_j|``: ``a_i = [e_i > 0] E_i / D`` and ``g_j = sign(e_j) E_j / D``.
    """
    visible = visible_mask(logits)
    z = torch.where(visible, logits, torch.zeros_like(logits))
    top = torch.where(visible, z, torch.full_like(z, float("-inf"))).amax(-1, keepdim=True)
    shift = top.clamp_min(0.0)
    big = torch.where(visible, torch.exp(z - shift), torch.zeros_like(z))
    e = torch.where(visible, torch.where(shift > 0, big - torch.exp(-shift),
                                         torch.expm1(z.clamp_max(0.0))), torch.zeros_like(z))
    den = e.abs().sum(-1, keepdim=True)
    safe = torch.where(den > 0, den, torch.ones_like(den))
    live = (den > 0).to(z.dtype)
    return {"w": live * torch.relu(e) / safe, "a": live * (e > 0).to(z.dtype) * big / safe,
            "g": live * torch.sign(e) * big / safe}


def _softpick_jv(f: dict, v: Tensor) -> Tensor:
    return f["a"] * v - f["w"] * (f["g"] * v).sum(-1, keepdim=True)


def _softpick_jtu(f: dict, u: Tensor) -> Tensor:
    return f["a"] * u - f["g"] * (f["w"] * u).sum(-1, keepdim=True)


def _stickbreaking_factors(logits: Tensor, options: dict) -> dict[str, Tensor]:
    """Per-row factors of the stick-breaking Jacobian at T = 1.

    ``log w_j = log b_j + sum_{i > j} log(1 - b_i)``, ``b = sigmoid(z)``, so
    ``d w_j / d z_i = w_j ([i = j] (1 - b_j) - [i > j] b_i)`` (visible keys only).
    """
    visible = visible_mask(logits)
    vis = visible.to(logits.dtype)
    w = NZ.stick_breaking(logits)
    beta = vis * torch.sigmoid(torch.where(visible, logits, torch.zeros_like(logits)))
    return {"w": w, "beta": beta, "vis": vis}


def _suffix_exclusive(x: Tensor) -> Tensor:
    """``sum_{i > j} x_i`` along the last dim."""
    return torch.flip(torch.cumsum(torch.flip(x, [-1]), -1), [-1]) - x


def _prefix_exclusive(x: Tensor) -> Tensor:
    """``sum_{j < i} x_j`` along the last dim."""
    return torch.cumsum(x, -1) - x


def _stickbreaking_jv(f: dict, v: Tensor) -> Tensor:
    v = f["vis"] * v
    return f["w"] * ((1 - f["beta"]) * v - _suffix_exclusive(f["beta"] * v))


def _stickbreaking_jtu(f: dict, u: Tensor) -> Tensor:
    uw = f["vis"] * u * f["w"]
    return f["vis"] * (uw * (1 - f["beta"]) - f["beta"] * _prefix_exclusive(uw))


#: families with exact (closed-form) Jacobian-vector products: (factors, J v, J^T u)
_EXACT_PRODUCTS = {"adaptive": (_adaptive_factors, _adaptive_jv, _adaptive_jtu),
                   "sa-softmax": (_sa_softmax_factors, _sa_softmax_jv, _sa_softmax_jtu),
                   "softpick": (_softpick_factors, _softpick_jv, _softpick_jtu),
                   "stickbreaking": (_stickbreaking_factors, _stickbreaking_jv, _stickbreaking_jtu)}


def _check_method(kind: str, method: str) -> bool:
    """True when the closed-form products are to be used."""
    if method not in ("auto", "exact", "autograd"):
        raise ValueError(f"method must be 'auto', 'exact' or 'autograd' (got {method!r})")
    if method == "exact" and kind not in _EXACT_PRODUCTS:
        raise ValueError(f"no closed-form products for {kind!r}; use method='autograd'")
    return method == "exact" or (method == "auto" and kind in _EXACT_PRODUCTS)


def jacobian_products(name: str | Normalizer, logits: Tensor, temperature: float = 1.0,
                      n=None, *, method: str = "auto"):
    """Functions ``(v -> J v, u -> J^T u)`` for ``J = d f(l/T) / d l`` at ``logits`` [..., L].

    ``method='exact'``: closed-form products (adaptive temperature, SA-softmax, softpick,
    stick-breaking); ``'autograd'``: forward-mode ``torch.func.jvp`` and reverse-mode
    ``torch.func.vjp``; ``'auto'``: exact where available. Masked keys: zero in and out.
    """
    nz = get_normalizer(name)
    t = check_temperature(temperature)
    x = logits.to(DTYPE).detach()
    visible = visible_mask(x)
    kind = _FAMILIES.get(nz.function, nz.key)
    if _check_method(kind, method):
        make, jv1, jtu1 = _EXACT_PRODUCTS[kind]
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

    Products from :func:`jacobian_products` (closed form where available, autograd otherwise or
    with ``method='autograd'``). ``steps`` Lanczos steps with full reorthogonalisation from a
    seeded random unit vector on the visible keys (capped at the number of keys); the square root
    of the largest Ritz value of the tridiagonal matrix is a lower bound on the norm that
    converges fast (exact once ``steps`` reaches the number of visible keys).
    Shapes: [..., L] -> [...] float64.
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

    Exact (closed forms in the module docstring) for the families in :data:`EXACT_NORMS`;
    :func:`lanczos_norm` (``steps`` Lanczos steps on closed-form products) for the others.
    """
    nz = get_normalizer(name)
    kind = family(nz)
    t = check_temperature(temperature)
    logits = logits.to(DTYPE)
    if kind not in EXACT_NORMS:
        return lanczos_norm(nz, logits, t, n, steps=steps, seed=seed)
    w = nz.at_temperature(logits, t, n=n)
    # Flush subnormal weights to 0 (changes the norm by < 1e-307): J.top_eigenvalue returns NaN
    # when the second-largest weight is subnormal.
    w = w.masked_fill(w < torch.finfo(DTYPE).tiny, 0.0)
    if kind in ("softmax", "topk"):
        return J.top_eigenvalue(w) / t
    if kind == "ssmax":
        return _ssmax_factor(nz, logits, n).squeeze(-1).expand(w.shape[:-1]) * J.top_eigenvalue(w) / t
    if kind == "sparsemax":
        return ((w > 0).sum(-1) >= 2).to(DTYPE) / t
    if kind in ("entmax15", "asentmax"):
        g = w.sqrt()
        norm = g.sum(-1) * J.top_eigenvalue(g) / t
        if kind == "asentmax":
            norm = _asentmax_factor(nz, logits, n).squeeze(-1).expand(w.shape[:-1]) * norm
        return norm
    if kind == "sigmoid":
        return (w * (1 - w)).amax(-1) / t
    return substochastic_top_eigenvalue(w) / t                     # softmax1, sink


def worst_case_jacobian(name: str | Normalizer, temperature, n: int | None = None) -> dict:
    """What is proven about ``sup_l ||d alpha / d l||_2`` at temperature T (the chapter's theorems).

    Returns ``{"lower": float, "upper": float or inf, "attained": bool, "note": str}`` for one T.
    Softmax and top-k (k >= 2) ``1/(2T)`` (two-way tie); sparsemax exactly ``1/T``; 1.5-entmax
    between ``1/(sqrt 2 T)`` (two-way tie) and ``1/T``, ASEntmax the same times its scale at n
    keys; SSMax ``s log(n) / (2T)``; softmax_1 and the sink ``1/(2T)`` (approached, not
    attained); sigmoid exactly ``1/(4T)``; adaptive temperature at least ``1/(2T)``; SA-softmax at
    least ``1/(2T)`` asymptotically; stick-breaking at least ``1/(4T)`` (one key at logit 0);
    softpick unbounded (``n`` tied logits ``eps -> 0+``: the norm is about ``1/(n eps T)``).
    ``inf`` where no upper bound is proven here.
    """
    nz = get_normalizer(name)
    kind = family(nz)
    t = check_temperature(temperature)
    if kind in ("ssmax", "asentmax") and n is None:
        raise ValueError(f"{nz.label}'s worst case depends on the number of keys: pass n")
    if kind == "softmax" or kind == "topk":
        return {"lower": 1 / (2 * t), "upper": 1 / (2 * t), "attained": True,
                "note": "two-way tie" + (" inside the kept set (k >= 2)" if kind == "topk" else "")}
    if kind == "sparsemax":
        return {"lower": 1 / t, "upper": 1 / t, "attained": True, "note": "any support of 2+ keys"}
    if kind in ("entmax15", "asentmax"):
        c = 1.0 if kind == "entmax15" else float(NZ.asentmax_scale(torch.tensor(float(n)), **nz.options))
        return {"lower": c / (math.sqrt(2) * t), "upper": c / t, "attained": True,
                "note": "lower bound attained at a two-way tie"}
    if kind == "ssmax":
        c = NZ.ssmax_scale(**nz.options) * math.log(n)
        return {"lower": c / (2 * t), "upper": c / (2 * t), "attained": True, "note": "two-way tie"}
    if kind in ("softmax1", "sink"):
        return {"lower": 1 / (2 * t), "upper": 1 / (2 * t), "attained": False,
                "note": "approached by two tied logits -> +inf"}
    if kind == "sigmoid":
        return {"lower": 1 / (4 * t), "upper": 1 / (4 * t), "attained": True,
                "note": "a logit at log n (sigma' = 1/4)"}
    if kind == "softpick":
        return {"lower": float("inf"), "upper": float("inf"), "attained": False,
                "note": "unbounded: n tied logits eps -> 0+ give a norm of about 1/(n eps T)"}
    if kind == "stickbreaking":
        return {"lower": 1 / (4 * t), "upper": float("inf"), "attained": True,
                "note": "one key at logit 0 (no upper bound proven)"}
    return {"lower": 1 / (2 * t), "upper": float("inf"), "attained": False,
            "note": "approached at a two-way tie of large logits"}
