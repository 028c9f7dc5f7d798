"""The softmax Jacobian, its exact spectral norm, and the finite-difference sensitivity of Fig. 4.

Notation (paper §2.3, Lemma 2, Corollary 3, Algorithm 5): one query's logits ``l`` [L] (masked,
causal keys are ``-inf``), weights ``a = softmax(l / T)``. The Jacobian of the weights with
respect to the logits is

    J = d a / d l = (diag(a) - a a^T) / T                         (softmax)
    J = (diag(F') - a F'^T) / S,   S = sum_k F(l_k), a = F / S      (general positive map F)

For softmax ``J`` is symmetric positive semi-definite, so its spectral norm is the largest
eigenvalue of ``diag(a) - a a^T`` divided by T. That eigenvalue is computed here exactly from the
secular equation of the rank-one update (no ``[L, L]`` matrix is formed): it is the unique root in
``[a_(2), a_(1)]`` (second-largest and largest weight) of ``sum_i a_i / (lambda - a_i) = 0``,
found by a monotone Newton iteration (:func:`top_eigenvalue`). Costs O(L) per row and iteration,
typically 3-6 iterations; tested against ``torch.linalg.eigvalsh``.

Everything is vectorised over leading dimensions ([layers, heads, rows] or any other), with the
key dimension last. Units: logits in nats (GPT-2's ``q.k / sqrt(d_head)``), T dimensionless.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Sequence

import torch
from torch import Tensor

from normlimits.metrics.normalizers import check_temperature
from normlimits.core.protocol import SECULAR_TAIL
from normlimits.core.validation import attention_logits, finite_entries, finite_weights

SQRT2 = math.sqrt(2.0)

__all__ = [
    "SensitivityProfile",
    "check_epsilon",
    "default_temperatures",
    "default_rows",
    "finite_difference_sensitivity",
    "general_jacobian",
    "linearised_sensitivity",
    "log_derivative_bound",
    "lemma2_bound",
    "paper_curve",
    "random_unit_directions",
    "sensitivity_envelope",
    "sensitivity_profile",
    "adversarial_rows",
    "lemma2_table",
    "lemma2_worst_ratio",
    "sqrt_five_table",
    "softmax_jacobian",
    "softmax_jacobian_norm",
    "softmax_jacobian_row_norms",
    "spectral_norm_bounds",
    "check_tail",
    "secular_tail_error",
    "top_eigenvalue",
]


# --------------------------------------------------------------------------- checks

def _check_grid(values, what: str, check_one) -> Tensor:
    """``values`` as a float64 vector [n], each checked by ``check_one``; raises when empty."""
    grid = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if grid.numel() == 0:
        raise ValueError(f"at least one {what} is needed")
    for value in grid.tolist():
        check_one(value)
    return grid


def _check_temperatures(temperatures) -> Tensor:
    return _check_grid(temperatures, "temperature T", check_temperature)


#: the smallest perturbation whose effect float64 resolves on logits of order 1-100 (rounding of
#: such logits is ~1e-14; at 1e-10 it perturbs g by ~1e-4 of itself)
MIN_EPSILON = 1e-10


def check_epsilon(epsilon: float) -> float:
    """Return ``epsilon`` as a float, or raise a clear error when it is not a positive number."""
    e = float(epsilon)
    if not (e > 0 and math.isfinite(e)):
        raise ValueError(f"the perturbation size epsilon must be a finite number > 0 (got {epsilon!r}); "
                         "g(T, eps) divides by eps.")
    if e < MIN_EPSILON:
        raise ValueError(f"the perturbation size epsilon = {epsilon!r} is below {MIN_EPSILON:g}: added "
                         "to logits of order 1-100 it is lost to float64 rounding (1e-20 gives "
                         "g = 0), so g would measure rounding, not the Jacobian. Use epsilon >= "
                         f"{MIN_EPSILON:g}, or the exact Jacobian norm for the eps -> 0 limit.")
    return e


def _check_epsilons(epsilons) -> Tensor:
    return _check_grid(epsilons, "perturbation size epsilon", check_epsilon)


def _simplex(weights: Tensor) -> Tensor:
    """Weights as float64 rows that sum to exactly 1 (up to rounding); raises on bad rows."""
    a = weights.to(torch.float64)
    if a.shape[-1] < 1:
        raise ValueError("weights need at least one key along the last dimension")
    if bool((a < 0).any()) or not bool(torch.isfinite(a).all()):
        bad = ~torch.isfinite(a) | (a < 0)
        where = tuple(int(i) for i in bad.nonzero()[0])
        raise ValueError(f"weights must be finite and non-negative (rows of a softmax): "
                         f"{int(bad.sum()):,} of {a.numel():,} entries are not, the first "
                         f"{float(a[where]):.4g} at index {where}. Pass attention weights (e.g. "
                         "softmax_with_temperature(logits) or a capture's weights()), not logits; "
                         "a NaN usually comes from the logits or the temperature upstream.")
    total = a.sum(-1, keepdim=True)
    if bool((total <= 0).any()):
        empty = (total[..., 0] <= 0)
        where = tuple(int(i) for i in empty.nonzero()[0])
        raise ValueError(f"every row of weights must have positive mass: {int(empty.sum()):,} of "
                         f"{empty.numel():,} rows sum to 0, the first at index {where}. Drop the "
                         "rows with no visible key (all weights 0, e.g. fully masked) before the "
                         "Jacobian checks.")
    return a / total


# --------------------------------------------------------------------------- Jacobians

def softmax_jacobian(weights: Tensor, temperature: float = 1.0) -> Tensor:
    """The softmax Jacobian ``(diag(a) - a a^T) / T`` for each row ``a``.

    Shapes: ``weights`` [..., L] (rows of ``softmax(l / T)``) -> [..., L, L]. Entry ``[..., i, j]``
    is ``d a_i / d l_j``. Forms the full matrix: use for small L or tests; norms are computed
    without it by :func:`softmax_jacobian_norm`.
    """
    t = check_temperature(temperature)
    return (torch.diag_embed(weights) - weights.unsqueeze(-1) * weights.unsqueeze(-2)) / t


def general_jacobian(values: Tensor, derivatives: Tensor) -> Tensor:
    """Jacobian of ``a = F(l) / sum F(l)`` for a positive map F (paper Eq. 3, Lemma 2).

    ``values`` = F(l_j) > 0 and ``derivatives`` = F'(l_j), both [..., L]; returns [..., L, L] with
    ``[..., i, j] = (delta_ij F'_j - a_i F'_j) / S``, i.e. ``(diag(F') - a F'^T) / S``.
    """
    if values.shape != derivatives.shape:
        raise ValueError(f"values {tuple(values.shape)} and derivatives {tuple(derivatives.shape)} "
                         "must have the same shape [..., L]")
    if bool((values <= 0).any()):
        raise ValueError("F must be positive at every logit (the general normaliser's assumption)")
    s = values.sum(-1, keepdim=True)
    a = values / s
    return (torch.diag_embed(derivatives) - a.unsqueeze(-1) * derivatives.unsqueeze(-2)) / s.unsqueeze(-1)


def check_tail(tail: float) -> float:
    """Return ``tail`` as a float, or raise a clear error unless ``0 < tail <= 0.1``."""
    t = float(tail)
    if not (0 < t <= 0.1):
        raise ValueError(f"the secular tail threshold must lie in (0, 0.1] (got {tail!r}); the exact "
                         f"norm's relative error is at most tail^2 / (1 - tail), e.g. 1e-10 at 1e-5.")
    return t


def secular_tail_error(tail: float) -> float:
    """The largest relative error of :func:`top_eigenvalue` with ``tail`` (besides ``tol``):
    ``tail^2 / (1 - tail)``."""
    t = check_tail(tail)
    return t * t / (1 - t)


_TINY = torch.finfo(torch.float64).tiny


def _newton_update(mu, h, hp, ratio, mu_max, active, tol):
    """One safeguarded Newton step on ``u(mu) = 1/h + mu ratio - 1`` (numpy [N] arrays):
    ``mu - u/u' = mu - (h + h^2 (mu ratio - 1)) / (-h' + ratio h^2)``, kept in ``[1, mu_max]``;
    returns the new ``mu`` and whether every active row moved by at most ``tol`` (relative)."""
    import numpy as np

    h = np.where(active, h, 1.0)                                 # h(mu) > 0
    h2 = h * h
    step = (h + h2 * (mu * ratio - 1)) / (hp + ratio * h2)
    new = np.where(active, np.minimum(np.maximum(mu - step, 1.0), mu_max), mu)
    return new, bool((np.abs(new - mu) <= tol * new).all())


def _secular_newton(c: Tensor, ratio: Tensor, active: Tensor, *, tol: float, max_iter: int) -> Tensor:
    """Root ``mu`` in ``(1, 1/ratio]`` of ``u(mu) = 1/h(mu) + mu * ratio - 1`` for rows ``c`` [N, K],
    ``h(mu) = sum_i c_i / (mu - c_i)`` with ``0 <= c_i <= 1`` (the second-largest weight is 1).

    Newton from the harmonic mean ``2 / (1 + ratio)``, which lies left of the root, increases
    monotonically to it (``1/h`` is concave and increasing). Rows where ``active`` [N] is False
    are left at their start (ties, one-hot rows). The sums over keys run in torch (large arrays,
    possibly multi-threaded), the per-row update in numpy (small arrays, little per-call cost).
    Returns [N].
    """
    import numpy as np

    r_np, act = ratio.numpy(), active.numpy()
    mu_np = 2 / (1 + r_np)
    mu_max = 1 / np.maximum(r_np, np.finfo(np.float64).tiny)
    mu = torch.from_numpy(mu_np)
    inv, r = torch.empty_like(c), torch.empty_like(c)   # reused: no allocation per iteration
    for _ in range(max_iter):
        torch.sub(mu.unsqueeze(-1), c, out=inv).reciprocal_()   # 1/(mu - c_i) > 0 (mu > 1 >= c_i)
        h = torch.mul(c, inv, out=r).sum(-1).numpy()
        hp = r.mul_(inv).sum(-1).numpy()                        # -h'(mu)
        mu_np, done = _newton_update(mu_np, h, hp, r_np, mu_max, act, tol)
        mu = torch.from_numpy(mu_np)
        if done:
            break
    return mu


def _pooled_newton(head, ratio, weight, pole, *, tol: float, max_iter: int):
    """The same root for rows kept as a few keys ``head`` [N, k] (numpy; the second weight is
    1) plus one pole of weight ``weight`` at ``pole`` [N] standing for every other key."""
    import numpy as np

    mu_max = 1 / np.maximum(ratio, np.finfo(np.float64).tiny)
    mu = 2 / (1 + ratio)
    active = np.ones_like(mu, dtype=bool)
    for _ in range(max_iter):
        inv = 1 / (mu[:, None] - head)
        terms = head * inv
        pole_inv = 1 / (mu - pole)
        pole_term = weight * pole_inv
        h = terms.sum(-1) + pole_term
        hp = (terms * inv).sum(-1) + pole_term * pole_inv
        mu, done = _newton_update(mu, h, hp, ratio, mu_max, active, tol)
        if done:
            break
    return mu


def top_eigenvalue(weights: Tensor, *, tol: float = 1e-13, max_iter: int = 100,
                   tie_tol: float = 1e-12, validate: bool = True, tail: float | None = None) -> Tensor:
    """Largest eigenvalue of ``diag(a) - a a^T`` for every row ``a`` of a probability vector.

    Exact up to ``tol`` (relative), computed without forming the matrix. With ``a_(1) >= a_(2)`` the
    two largest weights, the eigenvalue is ``a_(1)`` at a tie and otherwise the unique root in
    ``(a_(2), a_(1))`` of the secular equation ``sum_i a_i / (lambda - a_i) = 0`` (rank-one update
    of a diagonal matrix, using ``sum_i a_i = 1``). Newton's method on the increasing, concave
    function ``u(lambda) = 1 / h(lambda) + lambda / a_(1) - 1`` with
    ``h(lambda) = sum_{i != argmax} a_i / (lambda - a_i)``, started at the harmonic mean
    ``2 a_(1) a_(2) / (a_(1) + a_(2))`` (left of the root), increases monotonically to the root;
    3-4 iterations reach 1e-13 on softmax rows at any temperature. Everything is computed in
    units of ``a_(2)`` (``c_i = a_i / a_(2)``, ``mu = lambda / a_(2)``), so nothing under- or
    overflows when ``a_(2)`` is subnormal.

    ``tail`` (optional, in (0, 0.1]): when most rows have their fourth-largest weight below
    ``tail * a_(2)`` (sharp rows, low temperature), each such row is solved over its second and
    third keys only, every other key (all below
    the threshold) entering ``h`` as ONE pole of weight ``S1 = sum c_i`` at ``S2 / S1``
    (``S2 = sum c_i^2``): no pass over its L keys per iteration. Such rows are exact to a relative
    ``tail^2 / (1 - tail)`` (:func:`secular_tail_error`; 1e-10 at ``tail = 1e-5``) on top of
    ``tol``, and never above the exact value; other rows are solved over all keys. Proof (the
    gradients chapter): with ``x = c_i / mu <= tail``, ``c_i/(mu - c_i) = sum_k x^k``; the pole
    matches the first two moments and, by Jensen, underestimates every higher one, so the pooled
    ``h`` is below the true one by at most ``tail^2/(1 - tail) * S1/mu``; since the pole's term
    falls at least as fast as ``S1/mu``, the computed root ``mu~`` and the exact ``mu*`` satisfy
    ``mu~ <= mu* <= mu~ (1 + tail^2/(1 - tail))``.

    Shapes: ``weights`` [..., L] (non-negative rows) -> [...] float64. With ``validate`` (default)
    rows are checked and renormalised to sum 1 in float64; without it they are taken as given
    (float64 softmax rows; faster). Rows with a single positive weight give 0. A relative gap
    ``(a_(1) - a_(2)) / a_(1)`` below ``tie_tol`` counts as a tie (error at most that gap).
    """
    tau = None if tail is None else check_tail(tail)
    a = _simplex(weights) if validate else weights.to(torch.float64)
    lead, length = a.shape[:-1], a.shape[-1]
    if length == 1:
        return torch.zeros(lead, dtype=torch.float64)
    a = a.reshape(-1, length)
    pooled = tail is not None and length > 4
    top = a.topk(4 if pooled else 2, dim=-1)
    a1, a2 = top.values[:, 0], top.values[:, 1]
    solve = ~(((a1 - a2) <= tie_tol * a1) | (a2 <= 0))
    mu = torch.zeros_like(a1)
    if bool(solve.any()):
        scale = torch.where(solve, a2, torch.ones_like(a2))
        ratio = scale / torch.where(solve, a1, torch.ones_like(a1))             # a_(2)/a_(1)
        others = a.scatter(-1, top.indices[:, :1], 0.0)                         # the top key removed
        # c = others / a_(2): one multiplication, unless a_(2) is subnormal (1/a_(2) overflows)
        if bool((scale < _TINY).any()):
            c = others / scale.unsqueeze(-1)
        else:
            c = others * torch.reciprocal(scale).unsqueeze(-1)
        dense = solve
        if pooled:
            # rows whose fourth weight is below the threshold: second and third key exactly, the
            # rest as one pole (numpy, a few operations per row); the other rows over all keys.
            # Only when such rows are the majority: otherwise the split costs more than it saves.
            few = solve & (top.values[:, 3] <= tau * scale)
            if 2 * int(few.sum()) >= int(solve.sum()):
                head = top.values[:, 1:3] / scale.unsqueeze(-1)                # 1 and c_(3)
                weight = (c.sum(-1) - head.sum(-1)).clamp_min(0)
                squares = (torch.linalg.vecdot(c, c) - torch.linalg.vecdot(head, head)).clamp_min(0)
                pole = torch.where(weight > 0, squares / torch.where(weight > 0, weight, 1.0), 0.0)
                f = few.numpy()
                mu_np = mu.numpy()
                mu_np[f] = _pooled_newton(head.numpy()[f], ratio.numpy()[f], weight.numpy()[f],
                                          pole.clamp(0, tau).numpy()[f], tol=tol, max_iter=max_iter)
                dense = solve & ~few
        if bool(dense.all()):
            mu = _secular_newton(c, ratio, dense, tol=tol, max_iter=max_iter)
        elif bool(dense.any()):                              # only those rows, compacted
            sub = c[dense]
            mu[dense] = _secular_newton(sub, ratio[dense], torch.ones(len(sub), dtype=torch.bool),
                                        tol=tol, max_iter=max_iter)
    lam = torch.where(solve, mu * a2, torch.where(a2 > 0, a1, torch.zeros_like(a1)))
    return lam.reshape(lead)


def softmax_jacobian_norm(weights: Tensor, temperature: float = 1.0) -> Tensor:
    """Exact spectral norm ``||(diag(a) - a a^T) / T||_2`` per row: [..., L] -> [...] (float64).

    The matrix is symmetric positive semi-definite, so its spectral norm is its largest eigenvalue
    (:func:`top_eigenvalue`) divided by T. Always in ``[a_(2)/T, min(a_(1), 1/2)/T]``.
    """
    return top_eigenvalue(weights) / check_temperature(temperature)


def _complement(a: Tensor) -> Tensor:
    """``1 - a_i`` for every weight of rows ``a`` [..., L] (sum 1), without cancellation.

    For the largest weight of a row ``1 - a_i`` is computed as the sum of the other weights
    (``1 - a_(1)`` in floating point is 0 once the rest is below 1e-16); every other weight is at
    most 1/2, so ``1 - a_i >= 1/2`` is exact to rounding. Shapes: [..., L] -> [..., L].
    """
    is_top = torch.zeros_like(a, dtype=torch.bool).scatter(-1, a.argmax(-1, keepdim=True), True)
    rest_of_top = torch.where(is_top, torch.zeros_like(a), a).sum(-1, keepdim=True)
    return torch.where(is_top, rest_of_top, 1 - a)


def spectral_norm_bounds(weights: Tensor, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """Cheap two-sided bounds on the softmax Jacobian's spectral norm, per row.

    Lower: ``a_(2) / T`` (interlacing). Upper: ``min(a_(1), 2 max_i a_i (1 - a_i)) / T``
    (interlacing, and the variance bound proven in the chapter), which is at most ``1/(2T)``;
    ``1 - a_(1)`` is the sum of the other weights (no cancellation on nearly one-hot rows).
    Shapes: [..., L] -> two tensors [...] (float64).
    """
    t = check_temperature(temperature)
    a = _simplex(weights)
    if a.shape[-1] == 1:
        zero = torch.zeros(a.shape[:-1], dtype=torch.float64)
        return zero, zero
    top = a.topk(2, dim=-1).values
    upper = torch.minimum(top[..., 0], 2 * (a * _complement(a)).amax(-1))
    return top[..., 1] / t, upper / t


def softmax_jacobian_row_norms(weights: Tensor, temperature: float = 1.0) -> Tensor:
    """Euclidean norm of each row ``i`` of the softmax Jacobian, i.e. ``||grad_l a_i||_2``.

    ``a_i sqrt((1 - a_i)^2 + sum_{j != i} a_j^2) / T``; at most ``sqrt(2)/(4T)``, attained at a
    two-way tie. Shapes: [..., L] -> [..., L] (float64).

    Computed without underflow or cancellation: ``1 - a_i`` by :func:`_complement`; for the
    largest weight the root is taken in units of the second-largest weight ``m = a_(2)``,
    ``m sqrt((rest/m)^2 + sum_j (a_j/m)^2)`` with every ratio in ``[0, L]``, so a row whose
    remaining mass is 1e-200 (squares 1e-400) keeps its norm ~1e-200 (relative accuracy ~1e-15
    while ``m`` is a normal float). For any other weight ``sum_{j != i} a_j^2 >= a_(1)^2 >= 1/L^2``
    does not underflow.
    """
    t = check_temperature(temperature)
    a = _simplex(weights)
    rest = _complement(a)
    top = a.argmax(-1, keepdim=True)
    is_top = torch.zeros_like(a, dtype=torch.bool).scatter(-1, top, True)
    # every row but the largest: sum_{j != i} a_j^2 = s2 - a_i^2 >= a_(1)^2 (no cancellation)
    sq = a * a
    others = (sq.sum(-1, keepdim=True) - sq).clamp_min(0)
    plain = (rest ** 2 + others).sqrt()
    # the largest weight's row, in units of m = a_(2) (the largest of the others)
    without_top = torch.where(is_top, torch.zeros_like(a), a)
    m = without_top.amax(-1, keepdim=True)
    safe = torch.where(m > 0, m, torch.ones_like(m))
    scaled = m * ((rest.gather(-1, top) / safe) ** 2 + ((without_top / safe) ** 2).sum(-1, keepdim=True)).sqrt()
    return a * torch.where(is_top, scaled, plain) / t


def lemma2_bound(values: Tensor, derivatives: Tensor) -> tuple[Tensor, Tensor]:
    """The two lines of the Lemma 2 bound (our reconstruction, proven in the chapter), per row.

    First line: ``max|F'| / S * (1 + sqrt(L) ||a||_2)``. Second line (only min/max of F):
    ``max|F'| / L * (1 / min F + max F / min F^2)``. Both bound ``||(diag(F') - a F'^T)/S||_2``;
    the second grows without limit as ``min F -> 0``. Shapes: [..., L] -> two tensors [...].
    """
    if bool((values <= 0).any()):
        raise ValueError("F must be positive at every logit (the general normaliser's assumption)")
    values = values.to(torch.float64)
    derivatives = derivatives.to(torch.float64)
    n = values.shape[-1]
    s = values.sum(-1)
    a = values / s.unsqueeze(-1)
    dmax = derivatives.abs().amax(-1)
    first = dmax / s * (1 + math.sqrt(n) * a.norm(dim=-1))
    fmin, fmax = values.amin(-1), values.amax(-1)
    second = dmax / n * (1 / fmin + fmax / fmin ** 2)
    return first, second


def log_derivative_bound(values: Tensor, derivatives: Tensor) -> Tensor:
    """The sharp general bound ``||J||_2 <= lambda_max(diag(a) - a a^T) * max_j |F'_j / F_j|``.

    Follows from ``J = (diag(a) - a a^T) diag(F'/F)``; at most ``max_j |F'_j/F_j| / 2``. For softmax
    ``F'/F = 1/T`` and it is an equality. Shapes: [..., L] -> [...] (float64).
    """
    if bool((values <= 0).any()):
        raise ValueError("F must be positive at every logit (the general normaliser's assumption)")
    values = values.to(torch.float64)
    rho = (derivatives.to(torch.float64) / values).abs().amax(-1)
    return top_eigenvalue(values) * rho


def adversarial_rows(keys: int = 6, starts: int = 32, steps: int = 120, seed: int = 0) -> Tensor:
    """Weight rows that make ``lambda_max(diag(a) - a a^T)`` as large as gradient ascent can.

    ``starts`` random logit vectors over ``keys`` keys (standard normal, scaled by 3) are pushed
    uphill on ``lambda_max`` of their softmax (Adam, ``steps`` steps, ``torch.linalg.eigvalsh``
    on the small matrices). A search, not a proof: what it finds is measured, and compared with
    the proven supremum 1/2 and the paper's 1/4. Returns the rows [starts, keys] (float64).
    """
    if keys < 2 or starts < 1 or steps < 0:
        raise ValueError(f"need keys >= 2, starts >= 1, steps >= 0 (got {keys}, {starts}, {steps})")
    gen = torch.Generator().manual_seed(int(seed))
    z = (3 * torch.randn(starts, keys, dtype=torch.float64, generator=gen)).requires_grad_(True)
    opt = torch.optim.Adam([z], lr=0.1)
    for _ in range(steps):
        a = torch.softmax(z, -1)
        top = torch.linalg.eigvalsh(torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2))[..., -1]
        opt.zero_grad()
        (-top.sum()).backward()
        opt.step()
    return torch.softmax(z.detach(), -1)


def lemma2_table():
    """Lemma 2's bound against the exact norm on two families (a pandas DataFrame).

    Softmax at T = 1 with one logit at 0 and seven at ``-spread`` (``min F = e^-spread`` -> 0),
    and ``F(l) = l`` on eight logits in ``[delta, 2 delta]`` (``min F = delta`` -> 0). Columns: the
    exact ``||J||_2``, the reconstructed bound's two lines (:func:`lemma2_bound`) and the sharp
    log-derivative bound ``max|F'/F| / 2``.
    """
    import pandas as pd

    rows = []
    for spread in (1.0, 5.0, 20.0, 60.0):
        logits = torch.tensor([[0.0] + [-spread] * 7], dtype=torch.float64)
        f = torch.exp(logits)
        first, second = lemma2_bound(f, f)
        rows.append({"normaliser": "softmax, T = 1", "min F": float(f.min()),
                     "‖J‖₂ exact": float(softmax_jacobian_norm(torch.softmax(logits, -1), 1.0)),
                     "Lemma 2, first line": float(first), "Lemma 2, second line": float(second),
                     "max|F'/F| / 2": 0.5})
    for delta in (1.0, 1e-1, 1e-2, 1e-3):
        values = delta * (1 + torch.linspace(0, 1, 8, dtype=torch.float64))[None]
        first, second = lemma2_bound(values, torch.ones_like(values))
        exact = torch.linalg.matrix_norm(general_jacobian(values, torch.ones_like(values)), ord=2)
        rows.append({"normaliser": "F(l) = l", "min F": delta, "‖J‖₂ exact": float(exact),
                     "Lemma 2, first line": float(first), "Lemma 2, second line": float(second),
                     "max|F'/F| / 2": 0.5 / delta})
    return pd.DataFrame(rows)


def _lemma2_maps():
    """Four positive maps ``F`` with their derivatives, for :func:`lemma2_worst_ratio`."""
    return {
        "exp(l)": (torch.exp, torch.exp),
        "softplus(l)": (torch.nn.functional.softplus, torch.sigmoid),
        "l^2 + 0.1": (lambda x: x * x + 0.1, lambda x: 2 * x),
        "1 / (1 + l^2)": (lambda x: 1 / (1 + x * x), lambda x: -2 * x / (1 + x * x) ** 2),
    }


def lemma2_worst_ratio(rows: int = 128, keys: int = 12, scales=(0.3, 1.0, 3.0, 10.0), seed: int = 0):
    """The largest ``||J||_2 / (Lemma 2's second line)`` per map, over random rows (a dict).

    For each of four positive maps ``F`` (exp, softplus, ``l^2 + 0.1``, ``1/(1 + l^2)``) and each
    logit scale, ``rows`` rows of ``keys`` standard-normal logits times the scale; ``||J||_2`` is
    the exact spectral norm of :func:`general_jacobian` (``torch.linalg.matrix_norm``), the bound
    :func:`lemma2_bound`'s second line. A value above 1 would be a counterexample to the bound.
    """
    if rows < 1 or keys < 2 or not scales:
        raise ValueError(f"need rows >= 1, keys >= 2 and a scale (got {rows}, {keys}, {scales!r})")
    gen = torch.Generator().manual_seed(int(seed))
    logits = torch.cat([float(s) * torch.randn(rows, keys, dtype=torch.float64, generator=gen)
                        for s in scales])
    out = {}
    for name, (f, df) in _lemma2_maps().items():
        values, derivatives = f(logits), df(logits)
        exact = torch.linalg.matrix_norm(general_jacobian(values, derivatives), ord=2)
        out[name] = float((exact / lemma2_bound(values, derivatives)[1]).max())
    return out


def sqrt_five_table(temperatures=(1.0, 0.1), epsilons=(1e-3, 1e-1, 10.0), others: int = 6):
    """Section 2.3's example computed: ``l1 = (1 + eps, 1, ...)``, ``l2 = (1 - eps, 1 + eps, ...)``
    with ``others`` further keys at -30, at every ``(T, eps)`` (a pandas DataFrame): the logit
    distance (sqrt(5) eps), the weight change, its first-order value ``3 sqrt(2)/4 eps/T`` and the
    gain ``||d alpha|| T / eps`` in units of ``3 sqrt(2)/4``."""
    import pandas as pd

    lead = 3 * SQRT2 / 4
    rows = []
    extra = torch.full((others,), -30.0, dtype=torch.float64)
    for t in temperatures:
        for e in epsilons:
            l1 = torch.cat([torch.tensor([1 + e, 1.0], dtype=torch.float64), extra])
            l2 = torch.cat([torch.tensor([1 - e, 1 + e], dtype=torch.float64), extra])
            change = float((torch.softmax(l1 / t, -1) - torch.softmax(l2 / t, -1)).norm())
            rows.append({"T": t, "ε": e, "ε/T": e / t, "‖Δℓ‖": float((l1 - l2).norm()), "‖Δα‖": change,
                         "3√2/4 · ε/T": lead * e / t, "gain / (3√2/4)": change * t / e / lead})
    return pd.DataFrame(rows)


# --------------------------------------------------------------------------- envelopes

def paper_curve(temperatures) -> Tensor:
    """The paper's Fig. 4 dashed curve ``min{1/(4T), sqrt 2}`` (Corollary 3 as printed)."""
    t = _check_temperatures(temperatures)
    return torch.minimum(1 / (4 * t), torch.full_like(t, SQRT2))


def sensitivity_envelope(temperatures, epsilon) -> Tensor:
    """Corrected upper envelope of ``g(T, eps)``: ``min{1/(2T), sqrt(2)/eps}``.

    ``1/(2T)`` bounds the Jacobian's spectral norm along the whole segment (mean-value theorem);
    ``sqrt 2`` is the diameter of the probability simplex, so ``||a' - a||_2 / eps <= sqrt(2)/eps``.
    Shapes: ``temperatures`` [nT] -> [nT] (float64).
    """
    t = _check_temperatures(temperatures)
    e = check_epsilon(epsilon)
    return torch.minimum(1 / (2 * t), torch.full_like(t, SQRT2 / e))


def default_temperatures(per_decade: int = 4, low: float = 1e-3, high: float = 1e2) -> Tensor:
    """Log-spaced temperature grid from ``low`` to ``high`` (inclusive), ``per_decade`` points a decade."""
    lo, hi = math.log10(check_temperature(low)), math.log10(check_temperature(high))
    if hi <= lo or per_decade < 1:
        raise ValueError("need low < high and per_decade >= 1 for a temperature grid")
    count = int(round((hi - lo) * per_decade)) + 1
    return torch.logspace(lo, hi, count, dtype=torch.float64)


# --------------------------------------------------------------------------- finite differences

def random_unit_directions(logits: Tensor, generator: torch.Generator | None = None) -> Tensor:
    """A random unit direction ``v`` per row over the row's visible (finite) keys.

    Gaussian entries on finite logits, zero on masked (``-inf``) keys, normalised to
    ``||v||_2 = 1`` along the last dimension. Shapes: [..., L] -> [..., L] float64.
    """
    finite = torch.isfinite(logits)
    v = torch.randn(logits.shape, dtype=torch.float64, generator=generator)
    v = torch.where(finite, v, torch.zeros_like(v))
    return v / v.norm(dim=-1, keepdim=True).clamp_min(1e-300)


def _softmax64(x: Tensor) -> Tensor:
    return torch.softmax(x, dim=-1)


#: the identity path of :func:`_change_norms` is used where ``eps (v_j - v_top) / T`` stays at or
#: below this on every visible key: ``expm1`` and the squares of the unnormalised changes (at most
#: ``(2 e^300)^2``) cannot overflow
IDENTITY_MAX_EXPONENT = 300.0
#: weights below this (float64's smallest normal number) are subnormal or 0 by underflow, not
#: held to full relative precision; the identity path multiplies by them, so it is used only where
#: their possible share of the change is below ``2^-60`` of it, or where the perturbation cannot
#: raise them by more than ``2^20`` (then the direct form holds them no better)
_PRECISE_WEIGHT = torch.finfo(torch.float64).tiny
_LOG_PRECISE_WEIGHT = math.log(_PRECISE_WEIGHT)
_LOG_SHARE = -60 * math.log(2.0)
_LOG_GAIN = 20 * math.log(2.0)


def _top_shift(logits: Tensor, directions: Tensor) -> tuple[Tensor, Tensor]:
    """For rows ``logits`` [..., L] (float64, masked keys ``-inf``) and ``directions`` [..., L]:
    ``w = v - v_top`` (``v_top`` the direction at the largest logit, so ``w_top = 0`` exactly),
    and the same with ``-inf`` on the masked keys (``expm1`` of it is -1, times a weight 0: the
    masked keys drop out of every sum, maximum and test without a mask). Each [..., L]."""
    top = logits.argmax(-1, keepdim=True)
    w = directions - directions.gather(-1, top)
    return w, torch.where(torch.isfinite(logits), w, float("-inf"))


def _norm(x: Tensor) -> Tensor:
    """``||x||_2`` over the last dimension [..., L] -> [...], without underflow: rows whose norm
    falls below 2^-480 (their squares lose digits or vanish) are recomputed in units of their
    largest entry."""
    norm = torch.linalg.vector_norm(x, dim=-1)
    low = norm < 2.0 ** -480
    if bool(low.any()):
        sub = x[low]
        m = sub.abs().amax(-1)
        m = torch.where(m > 0, m, 1.0)
        norm[low] = torch.linalg.vector_norm(sub / m[:, None], dim=-1) * m
    return norm


def _change_norms(logits: Tensor, w: Tensor, a: Tensor, inv_t: Tensor, epsilons: Tensor) -> Tensor:
    """``||softmax((l + eps v)/T) - softmax(l/T)||_2`` for every temperature of ``inv_t`` and every
    epsilon, without cancellation: the one code path of Figure 4 (:func:`finite_difference_sensitivity`
    and :func:`sensitivity_profile`).

    Shapes: ``logits`` [..., L] float64; ``w`` from :func:`_top_shift` (``-inf`` on masked keys); ``a``
    [g, ..., L] = ``softmax(l/T)`` at each of the ``g`` temperatures; ``inv_t`` [g, 1, ...]
    (``1/T``, one trailing 1 per dimension of ``logits``); ``epsilons`` [nE]. Returns [g, nE, ...].

    With ``z = eps w / T`` (``w = v - v_top``: softmax does not see a common shift), ``u =
    expm1(z)`` and ``<a, u> = sum_j a_j u_j``, exactly
    ``softmax((l + eps v)/T) - a = a (u - <a, u>) / (1 + <a, u>)``: no two nearly equal softmaxes
    are subtracted, and ``expm1`` keeps a ``z`` of 1e-7 to full precision. Since ``u_top = 0``,
    the top key's change is ``-a_top <a, u> / (1 + <a, u>)``, which is minus the sum of the
    others' changes (``sum_{j != top} a_j (u_j - <a, u>) = <a, u> (1 - sum_{j != top} a_j)``),
    formed from the same sum ``<a, u>`` and never as a difference of two numbers near 1 (which
    lost it at low T, where ``1 - a_top`` is below 1e-16). Where ``z`` exceeds
    :data:`IDENTITY_MAX_EXPONENT` on a visible key, or a weight that underflowed (subnormal or 0)
    could be raised by the perturbation to more than ``2^-60`` of the change (and by more than a
    factor ``2^20``), the row is computed in the stable direct form
    ``softmax((l + eps v)/T) - a`` with the top key's change as minus the sum of the others'.
    """
    nd = logits.dim()
    g = a.shape[0]
    scale = epsilons.reshape((1, -1) + (1,) * nd) * inv_t.unsqueeze(1)       # [g, nE, 1...]
    u = torch.mul(w, scale)                                                   # z, [g, nE, ..., L]
    u.expm1_()
    a1 = a.unsqueeze(1)                                                       # [g, 1, ..., L]
    num = u.mul_(a1)                                                          # a u
    au = num.sum(-1, keepdim=True)                                            # <a, u>
    num.addcmul_(a1, au, value=-1.0)                                          # a (u - <a, u>)
    norm = _norm(num)
    del num, u
    denominator = 1 + au.squeeze(-1)
    # rows the identity cannot serve: overflow of expm1, or underflowed weights that matter
    z_scale = scale.squeeze(-1)                                               # [g, nE, 1...]
    unsafe = (z_scale * w.amax(-1)) > IDENTITY_MAX_EXPONENT                   # [g, nE, ...]
    small = a < _PRECISE_WEIGHT                                               # [g, ..., L]
    if bool(small.any()):                          # (masked keys: w = -inf, never counted)
        w_small = torch.where(small, w, float("-inf")).amax(-1).unsqueeze(1)  # [g, 1, ...]
        # an underflowed weight's true value is below 2^-1022, its share of the unnormalised
        # change below 2^-1022 e^z: negligible where that is below 2^-60 of the change's norm
        z_small = z_scale * w_small
        unsafe |= (z_small > _LOG_GAIN) & (z_small + _LOG_PRECISE_WEIGHT > norm.log() + _LOG_SHARE)
    out = norm.div_(denominator)
    if bool(unsafe.any()):
        ti, ei, *ri = unsafe.nonzero(as_tuple=True)
        lg = logits[tuple(ri)]                                                # [m, L]
        vg = w[tuple(ri)]
        inv = inv_t.reshape(g)[ti][:, None]
        change = torch.softmax((lg + epsilons[ei][:, None] * vg) * inv, -1)   # w: v shifted
        change -= torch.softmax(lg * inv, -1)
        first = lg.argmax(-1, keepdim=True)                                  # the top key
        change.scatter_(-1, first, 0.0)
        change.scatter_(-1, first, -change.sum(-1, keepdim=True))             # minus the others
        out[unsafe] = _norm(change)
    return out


def finite_difference_sensitivity(logits: Tensor, temperatures, epsilons, directions: Tensor, *,
                                  chunk_elements: int = 1 << 24) -> Tensor:
    """Algorithm 5's ``g(T, eps) = ||softmax((l + eps v)/T) - softmax(l/T)||_2 / eps`` per row.

    ``logits`` [..., L] (masked keys ``-inf``), ``directions`` [..., L] (unit rows, zero on masked
    keys; see :func:`random_unit_directions`), ``temperatures`` [nT], ``epsilons`` [nE]. Returns
    [nT, nE, ...] float64. Vectorised over rows and epsilons; temperatures are processed in chunks
    so that no intermediate exceeds about ``chunk_elements`` numbers. Computed without
    cancellation (:func:`_change_norms`: the exact ``expm1`` identity, the top key's change as
    minus the sum of the others'), so exact to rounding at every T and eps, including rows whose
    top weight is within 1e-16 of 1.
    """
    t = _check_temperatures(temperatures)
    e = _check_epsilons(epsilons)
    if directions.shape != logits.shape:
        raise ValueError(f"directions {tuple(directions.shape)} must match logits {tuple(logits.shape)}")
    attention_logits(logits)
    finite_entries(directions, argument="directions", kind="directions")
    l64 = logits.to(torch.float64)
    v = directions.to(torch.float64)
    lead = l64.shape
    per_t = max(1, chunk_elements // max(1, l64.numel() * (e.numel() + 1)))
    w0, w = _top_shift(l64, v)
    out = []
    for start in range(0, t.numel(), per_t):
        inv_t = t[start:start + per_t].reciprocal().reshape((-1,) + (1,) * len(lead))
        a = _softmax64(l64.unsqueeze(0) * inv_t)                              # [nt, ..., L]
        norms = _change_norms(l64, w, a, inv_t, e)                           # [nt, nE, ...]
        out.append(norms / e.reshape((1, -1) + (1,) * (len(lead) - 1)))
    return torch.cat(out, 0)


def _linearised(a: Tensor, w: Tensor) -> Tensor:
    """``||diag(a) v - a (a . v)||_2`` for weights ``a`` [..., L] (leading shape broadcasting with
    ``w`` of :func:`_top_shift`): with ``w = v - v_top``, entry ``j`` is ``a_j (w_j - <a, w>)``, so
    the top key's is ``-a_top <a, w>``, minus the sum of the others' without a difference of
    numbers near 1. Returns [...] (not divided by T)."""
    jv = a * w
    jv.addcmul_(a, jv.sum(-1, keepdim=True), value=-1.0)
    return _norm(jv)


def linearised_sensitivity(weights: Tensor, directions: Tensor, temperature: float = 1.0) -> Tensor:
    """The eps -> 0 limit of g: ``||J v||_2 = ||a * v - a (a . v)||_2 / T`` per row.

    Shapes: ``weights``, ``directions`` [..., L] -> [...] float64. Computed relative to the key
    of largest weight (``v - v_top``; the top key's entry as minus the sum of the others'), so
    rows whose top weight is within 1e-16 of 1 keep full relative precision.
    """
    t = check_temperature(temperature)
    finite_weights(weights)
    finite_entries(directions, argument="directions", kind="directions")
    a = weights.to(torch.float64)
    v = directions.to(torch.float64)
    w, _ = _top_shift(a, v)
    return _linearised(a, w) / t


# --------------------------------------------------------------------------- sweeps

@dataclass
class SensitivityProfile:
    """Fig. 4's statistics per head, averaged over rows (query tokens) and windows.

    Shapes (``H`` = the leading head dimensions of the logits, e.g. [layers, heads]):
    ``g`` [nT, nE, *H]: mean over rows of ``g(T, eps)``; ``g_linear`` [nT, *H]: mean of
    ``||J v||`` (the eps -> 0 limit); ``norm_mean`` / ``norm_max`` [nT, *H]: mean / max over rows
    of the exact Jacobian spectral norm (relative accuracy 1e-10); ``rows``: rows averaged;
    ``g_window_sums`` [W, nT, nE, *H] and ``window_rows`` [W]: each window's own sum over its rows
    of ``g(T, eps)`` and its row count (``g`` is the sums' total over the rows' total), what a
    bootstrap over windows resamples; ``norm_window_sums`` / ``norm_window_max`` [W, nT, *H]: the
    same per window for the exact spectral norm (its sum over the window's rows, its largest row).
    """

    temperatures: Tensor
    epsilons: Tensor
    g: Tensor
    g_linear: Tensor
    norm_mean: Tensor
    norm_max: Tensor
    rows: int = 0
    windows: int = 0
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    g_window_sums: Tensor | None = None
    window_rows: Tensor | None = None
    norm_window_sums: Tensor | None = None
    norm_window_max: Tensor | None = None

    def head_max(self, name: str = "g") -> Tensor:
        """Maximum over heads (all trailing head dimensions) of a statistic: [nT, nE] or [nT]."""
        x = getattr(self, name)
        lead = 2 if name == "g" else 1
        return x.reshape(x.shape[:lead] + (-1,)).amax(-1)


class _Accumulator:
    def __init__(self, temperatures: Tensor, epsilons: Tensor):
        self.t, self.e = temperatures, epsilons
        self.sums: dict[str, Tensor] = {}
        self.maxes: dict[str, Tensor] = {}
        self.rows = 0
        self.windows = 0

    def add(self, name: str, value: Tensor, reduce_max: bool = False) -> None:
        if reduce_max:
            cur = self.maxes.get(name)
            self.maxes[name] = value if cur is None else torch.maximum(cur, value)
        else:
            cur = self.sums.get(name)
            self.sums[name] = value if cur is None else cur + value


def _row_stats(logits: Tensor, temperatures: Tensor, epsilons: Tensor, directions: Tensor, *,
               group_elements: int = 1 << 20) -> dict[str, Tensor]:
    """Per-T sums over the row dimension (-2) of every per-row statistic, for one block of rows.

    Temperatures are processed several at a time (stacked on a leading axis, about
    ``group_elements`` weights per group), so short causal rows do not pay torch's per-call cost
    once per temperature.
    """
    l64 = logits.to(torch.float64)
    v = directions.to(torch.float64)
    nd = l64.dim()
    w0, w = _top_shift(l64, v)
    inv_e = (1.0 / epsilons).reshape((1, -1) + (1,) * (nd - 1))
    group = max(1, group_elements // max(1, l64.numel() * epsilons.numel()))
    out: dict[str, list[Tensor]] = {k: [] for k in ("g", "g_linear", "norm_mean", "norm_max")}
    for start in range(0, temperatures.numel(), group):
        t = temperatures[start:start + group]
        inv_t = t.reciprocal().reshape((-1,) + (1,) * nd)                 # [g, 1, ...]
        a = _softmax64(l64.unsqueeze(0) * inv_t)                         # [g, ..., L]
        change = _change_norms(l64, w, a, inv_t, epsilons)              # [g, nE, ...]
        out["g"].append((change * inv_e).sum(-1))
        out["g_linear"].append((_linearised(a, w0) * inv_t.squeeze(-1)).sum(-1))
        norm = top_eigenvalue(a, tol=1e-10, validate=False, tail=SECULAR_TAIL) * inv_t.squeeze(-1)
        out["norm_mean"].append(norm.sum(-1))
        out["norm_max"].append(norm.amax(-1))
    return {k: torch.cat(v_) for k, v_ in out.items()}


def sensitivity_profile(logit_blocks: Iterable[Tensor], temperatures=None, epsilons=(1e-3, 1e-1, 10.0),
                        *, seed: int = 0, row_chunk: int | None = None,
                        chunk_elements: int = 1 << 18) -> SensitivityProfile:
    """Fig. 4's sweep over logit blocks (one per window): per-head means over rows and blocks.

    Each block is [*H, R, L] (e.g. [layers, heads, rows, keys], masked keys ``-inf``; every block
    the same ``*H``). One random unit direction per (head, row), drawn from ``seed``, is shared by
    all T and eps (common random numbers). Rows are processed ``row_chunk`` at a time with the key
    dimension cropped to the last visible key of the chunk, so causal rows cost what they see;
    by default a chunk holds about ``chunk_elements`` logits (cache-sized: about twice as fast as
    large chunks).
    """
    import time

    start = time.perf_counter()
    t = default_temperatures() if temperatures is None else _check_temperatures(temperatures)
    e = _check_epsilons(epsilons)
    gen = torch.Generator().manual_seed(int(seed))
    acc = _Accumulator(t, e)
    head_shape = None
    window_sums: list[Tensor] = []
    window_norms: list[Tensor] = []
    window_norm_max: list[Tensor] = []
    window_rows: list[int] = []
    for block in logit_blocks:
        if block.dim() < 2:
            raise ValueError("each logit block must be [..., rows, keys]")
        if head_shape is None:
            head_shape = block.shape[:-2]
        elif block.shape[:-2] != head_shape:
            raise ValueError(f"logit blocks differ in head shape: {tuple(block.shape[:-2])} vs "
                             f"{tuple(head_shape)}")
        attention_logits(block, argument="a logit block")
        directions = random_unit_directions(block, gen)
        finite = torch.isfinite(block)
        visible = finite.reshape(-1, *block.shape[-2:]).any(0)          # [R, L]
        rows = block.shape[-2]
        per_row = max(1, block[..., 0, :].numel())
        step = row_chunk if row_chunk is not None else max(1, chunk_elements // per_row)
        window = _Accumulator(t, e)
        for r0 in range(0, rows, step):
            r1 = min(rows, r0 + step)
            cols = visible[r0:r1].any(0).nonzero()
            width = int(cols.max()) + 1 if cols.numel() else 1
            sub = block[..., r0:r1, :width]
            stats = _row_stats(sub, t, e, directions[..., r0:r1, :width])
            for name, value in stats.items():
                acc.add(name, value, reduce_max=(name == "norm_max"))
                window.add(name, value, reduce_max=(name == "norm_max"))
        window_sums.append(window.sums["g"])
        window_norms.append(window.sums["norm_mean"])
        window_norm_max.append(window.maxes["norm_max"])
        window_rows.append(rows)
        acc.rows += rows
        acc.windows += 1
    if head_shape is None:
        raise ValueError("no logit blocks were given (need at least one window)")
    n = acc.rows
    s = acc.sums
    return SensitivityProfile(temperatures=t, epsilons=e, g=s["g"] / n, g_linear=s["g_linear"] / n,
                              norm_mean=s["norm_mean"] / n, norm_max=acc.maxes["norm_max"], rows=n,
                              windows=acc.windows, seconds=time.perf_counter() - start,
                              g_window_sums=torch.stack(window_sums),
                              window_rows=torch.tensor(window_rows, dtype=torch.float64),
                              norm_window_sums=torch.stack(window_norms),
                              norm_window_max=torch.stack(window_norm_max))


def default_rows(length: int, count: int = 64) -> Tensor:
    """``count`` query positions evenly spaced over ``[length/count - 1, length - 1]`` (LongTensor).

    An unbiased subsample of the paper's "every token t" average; position p sees p + 1 keys.
    """
    if length < 2:
        raise ValueError(f"windows need at least 2 tokens (got L={length})")
    count = max(1, min(int(count), length))
    return torch.linspace(length / count - 1, length - 1, count).round().long().clamp(0, length - 1)
