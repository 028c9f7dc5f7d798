"""Monte Carlo under Theorem 2's assumptions: uniform points on the sphere, optionally
conditioned on a minimum separation (rejection), and the fraction of selected tokens inside a
fixed ball, checked against :func:`normlimits.metrics.separability_bounds.theorem2_bounds`."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from normlimits.metrics.separability import min_pairwise_distance
from normlimits.metrics.separability_bounds import separation_failure_bound, theorem2_bounds

__all__ = ["sample_sphere", "sample_separated", "counted_inside", "MonteCarlo",
           "monte_carlo_curve", "monte_carlo_fraction", "monte_carlo_check", "monte_carlo_checks",
           "softmax_top_weights", "mean_spread", "check_table"]


def sample_sphere(n_samples: int, n_points: int, dim: int, *, sphere_radius: float = 1.0,
                  generator: torch.Generator | None = None) -> Tensor:
    """[S, n, d] i.i.d. uniform points on S^{d-1}(M) (normalised Gaussians), float64."""
    g = torch.randn(n_samples, n_points, dim, dtype=torch.float64, generator=generator)
    return g * (sphere_radius / g.norm(dim=-1, keepdim=True))


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
        ok = min_pairwise_distance(batch) >= delta
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


def monte_carlo_checks(weights, radii, dim: int, *, sphere_radius: float = 1.0,
                       delta: float | None = None, n_samples: int = 4000, seed: int = 0,
                       z: float = 4.0) -> list[dict]:
    """Monte Carlo tests of the theorem at several radii from ONE set of samples: the estimate
    against the bounds for sorted ``weights``, one flat dict (table row) per radius.

    Under rejection (``delta`` given) the bounds carry the failure bound eta of
    :func:`separation_failure_bound` and the sure bound. ``ok`` is True when
    ``lower - z se <= mean <= upper + z se``.
    """
    a = torch.as_tensor(weights, dtype=torch.float64)
    n = a.numel()
    eta = 0.0 if delta is None else separation_failure_bound(n, dim, delta, sphere_radius)
    if eta >= 1.0:
        raise ValueError(f"the union bound gives eta = {eta:.3f} >= 1 for N = {n}, d = {dim}, "
                         f"delta = {delta}: choose a smaller delta.")
    r = torch.as_tensor(radii, dtype=torch.float64).flatten()
    mean, se, acc = monte_carlo_curve(a, r, dim, n_samples=n_samples, sphere_radius=sphere_radius,
                                      delta=delta, seed=seed)
    b = theorem2_bounds(a, [n], r[:, None], sphere_radius=sphere_radius, dim=dim, delta=delta,
                        failure=eta)
    rows = []
    for i in range(r.numel()):
        lower, upper, m, s = float(b.lower[i, 0]), float(b.upper[i, 0]), float(mean[i]), float(se[i])
        rows.append({"N": n, "d": dim, "r": float(r[i]), "delta": delta, "eta": eta, "lower": lower,
                     "lower_markov": float(b.lower_markov[i, 0]), "mc": m, "se": s, "upper": upper,
                     "upper_exponential": float(b.upper_exponential[i, 0]), "acceptance": acc,
                     "ok": lower - z * s <= m <= upper + z * s})
    return rows


def monte_carlo_check(weights, radius: float, dim: int, **kwargs) -> dict:
    """One Monte Carlo test of the theorem at one radius (:func:`monte_carlo_checks`)."""
    return monte_carlo_checks(weights, [radius], dim, **kwargs)[0]


def softmax_top_weights(n: int, sigma: float, seed: int, keys: int = 256) -> Tensor:
    """The ``n`` largest weights, sorted, of a softmax over ``keys`` Gaussian logits of scale
    ``sigma`` (so they sum to less than 1, as a real row's top-N weights do), float64 [n]."""
    if not 1 <= n <= keys:
        raise ValueError(f"n must lie in 1..keys = 1..{keys} (got {n}).")
    g = torch.Generator().manual_seed(seed)
    w = torch.softmax(sigma * torch.randn(keys, dtype=torch.float64, generator=g), 0)
    return w.sort(descending=True).values[:n]


def mean_spread(weights: Tensor, sphere_radius: float = 1.0) -> float:
    """The mean over the selected tokens of ``xi_i = M sqrt(q_i)`` (the typical size of X_i)."""
    a = torch.as_tensor(weights, dtype=torch.float64)
    return sphere_radius * float(((a**2).sum() - a**2).clamp_min(0.0).sqrt().mean())


def check_table(*, sizes=(4, 16, 64), sigmas=(1.0, 3.0), dims=(8, 64),
                factors=(0.5, 0.8, 1.0, 1.25, 2.0),
                separated=((4, 8, 0.6), (8, 8, 0.45), (8, 16, 0.8)),
                separated_factors=(0.8, 1.0, 1.25), sphere_radius: float = 1.0,
                n_samples: int = 4000) -> list[dict]:
    """Theorem 2 under its assumptions over a grid of configurations, one
    :func:`monte_carlo_checks` row each (plus ``sigma`` and ``r / xi``, the radius in units of
    :func:`mean_spread`): every N of ``sizes`` x logit scale x dimension x radius factor with
    uniform points, then ``(N, d, delta)`` of ``separated`` drawn by rejection (logit scale 1).
    One set of samples serves every radius of a configuration."""
    rows, seed = [], 0
    plan = [(n, sigma, dim, None, factors, seed_w) for seed_w, (n, sigma) in
            enumerate((n, sigma) for n in sizes for sigma in sigmas) for dim in dims]
    plan += [(n, 1.0, dim, delta, separated_factors, 99) for n, dim, delta in separated]
    for n, sigma, dim, delta, radius_factors, seed_w in plan:
        a = softmax_top_weights(n, sigma, seed_w)
        xi = mean_spread(a, sphere_radius)
        seed += 1
        checks = monte_carlo_checks(a, [f * xi for f in radius_factors], dim,
                                    sphere_radius=sphere_radius, delta=delta, seed=seed,
                                    n_samples=n_samples)
        rows += [{**row, "sigma": sigma, "r / xi": f} for row, f in zip(checks, radius_factors)]
    return rows
