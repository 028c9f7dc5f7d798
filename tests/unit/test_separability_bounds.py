"""The book's Theorem 2 as numbers (normlimits.metrics.separability_bounds) and its Monte Carlo checks."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from normlimits.metrics import separability_bounds as B
from normlimits.metrics import separability_mc as MC
from normlimits.metrics.separability import min_pairwise_distance

SEEDS = st.integers(min_value=0, max_value=2**31 - 1)


def reference_bounds(top_weights, n_grid, radius, *, m=1.0, dim, delta=None, failure=0.0, sure_rtol=0.0):
    """The bounds one N at a time, every term written out (the slow path of theorem2_bounds)."""
    a = top_weights.double()
    out = {k: [] for k in ("lower", "upper", "lower_markov", "upper_exponential", "separation")}
    r_all = torch.broadcast_to(torch.as_tensor(radius, dtype=torch.float64), (*a.shape[:-1], len(n_grid)))
    scale = 1 / (1 - failure)
    for g, n in enumerate(n_grid):
        sel = a[..., :n]
        w = sel.sum(-1, keepdim=True) - sel
        q = (sel**2).sum(-1, keepdim=True) - sel**2
        p = (sel**4).sum(-1, keepdim=True) - sel**4
        r = r_all[..., g:g + 1]
        xi2 = m**2 * q
        xi_m = torch.where(q > 0, (xi2 / (1 + 2 / dim * (1 - p / q.where(q > 0, 1.0) ** 2))).sqrt(), 0.0)
        var = 2 * m**4 / dim * (q * q - p).clamp_min(0)
        cant_hi = torch.where(r**2 > xi2, var / (var + (r**2 - xi2) ** 2).clamp_min(1e-300), 1.0)
        cant_lo = torch.where(r**2 < xi2, var / (var + (xi2 - r**2) ** 2).clamp_min(1e-300), 1.0)
        markov = (xi2 / r**2).clamp(max=1)
        miss = torch.minimum(markov, cant_hi)
        expo = torch.where(r < xi_m, torch.exp(-(xi_m - r) ** 2 / (2 * m**2 * q.where(q > 0, 1.0))), 1.0)
        hit = torch.minimum(expo, cant_lo)
        markov, miss, expo, hit = ((v * scale).clamp(max=1) for v in (markov, miss, expo, hit))
        if delta is not None:
            d = torch.as_tensor(delta, dtype=torch.float64)[..., None]
            sure = (m**2 * w**2 - d**2 / 2 * (w**2 - q)).clamp_min(0).sqrt() < r * (1 - sure_rtol)
            miss, markov = miss.where(~sure, 0.0), markov.where(~sure, 0.0)
            out["separation"].append(sure.double().mean(-1))
        out["lower"].append(1 - miss.mean(-1))
        out["upper"].append(hit.mean(-1))
        out["lower_markov"].append(1 - markov.mean(-1))
        out["upper_exponential"].append(expo.mean(-1))
    return {k: torch.stack(v, -1) if v else None for k, v in out.items()}


@settings(max_examples=30, deadline=None)
@given(seed=SEEDS, heads=st.integers(1, 3), rows=st.integers(1, 5), dim=st.integers(1, 64),
       m=st.floats(0.3, 3.0), failure=st.sampled_from([0.0, 0.2]), with_delta=st.booleans())
def test_bounds_match_the_reference(seed, heads, rows, dim, m, failure, with_delta):
    gen = torch.Generator().manual_seed(seed)
    grid = [1, 2, 3, 5, 8, 13]
    a = torch.softmax(3 * torch.randn(heads, rows, 40, generator=gen, dtype=torch.float64), -1)
    a = a.sort(-1, descending=True).values[..., :13]
    r = m * 0.4 * torch.rand(heads, rows, len(grid), generator=gen, dtype=torch.float64)
    delta = 1.2 * torch.rand(heads, rows, generator=gen, dtype=torch.float64) if with_delta else None
    got = B.theorem2_bounds(a, grid, r, sphere_radius=m, dim=dim, delta=delta, failure=failure, sure_rtol=1e-5)
    ref = reference_bounds(a, grid, r, m=m, dim=dim, delta=delta, failure=failure, sure_rtol=1e-5)
    # Var X^2 = (2 M^4 / d)(q^2 - p) cancels when one other weight dominates: the two summation
    # orders (cumulative totals minus a_i here, slices in the reference) agree to ~1e-7 there
    for name in ("lower", "upper", "lower_markov", "upper_exponential"):
        assert torch.allclose(getattr(got, name), ref[name], rtol=1e-6, atol=1e-9), name
    if with_delta:
        assert torch.allclose(got.separation, ref["separation"])
    else:
        assert got.separation is None


# ----------------------------------------------------------------------- theory: bounds
WEIGHTS = st.lists(st.floats(0.01, 1.0), min_size=2, max_size=10)


def sorted_weights(raw, normalise):
    a = torch.tensor(sorted(raw, reverse=True), dtype=torch.float64)
    return a / a.sum() if normalise else a


@settings(max_examples=30, deadline=None)
@given(raw=WEIGHTS, normalise=st.booleans(), dim=st.integers(2, 24), m=st.floats(0.5, 3.0),
       r_frac=st.floats(0.05, 1.5), seed=SEEDS)
def test_bounds_hold_by_monte_carlo(raw, normalise, dim, m, r_frac, seed):
    a = sorted_weights(raw, normalise)
    n = a.numel()
    r = r_frac * m * float(a.sum())  # radii across the range of X_i (0 <= X_i <= M sum alpha)
    b = B.theorem2_bounds(a, [n], r, sphere_radius=m, dim=dim)
    mc = MC.monte_carlo_fraction(a, r, dim, n_samples=6000, sphere_radius=m, seed=seed % 10**6)
    tol = 5 * mc.stderr + 2e-3
    assert float(b.lower) - tol <= mc.mean <= float(b.upper) + tol
    assert float(b.lower_markov) <= float(b.lower) + 1e-12
    assert float(b.upper) <= float(b.upper_exponential) + 1e-12


def test_a_radius_on_an_atom_of_x_is_not_sure_by_rounding():
    """Two selected tokens: X_1 = alpha_2 M and X_2 = alpha_1 M exactly (no spread). With r equal to
    that value (up to rounding: hypothesis found r = 0.5 M (alpha_1 + alpha_2) for alpha = 0.75,
    0.75) no token is inside (X_i < r is false), so the lower bound must be 0, not 1 from a
    rounded Cantelli gap; the Monte Carlo agrees."""
    a = sorted_weights([0.75, 0.75], False)
    m = 1.7453747976929481
    r = 0.5 * m * float(a.sum())
    b = B.theorem2_bounds(a, [2], r, sphere_radius=m, dim=2)
    mc = MC.monte_carlo_fraction(a, r, 2, n_samples=6000, sphere_radius=m, seed=0)
    assert float(b.lower) - (5 * mc.stderr + 2e-3) <= mc.mean <= float(b.upper) + 5 * mc.stderr + 2e-3
    assert float(b.lower) <= 1e-12 and float(b.upper) == 1.0     # Markov: 1 - xi^2/r^2, 0 up to rounding
    # away from the atom the bounds are sure again: r above alpha M holds both tokens
    assert float(B.theorem2_bounds(a, [2], 1.01 * r, sphere_radius=m, dim=2).lower) == 1.0


@settings(max_examples=40, deadline=None)
@given(raw=WEIGHTS, dim=st.integers(1, 64), m=st.floats(0.1, 5.0), r=st.floats(1e-3, 5.0))
def test_lower_never_exceeds_upper(raw, dim, m, r):
    """Both bound the same expectation, so lower <= upper must hold for any input."""
    a = sorted_weights(raw, True)
    b = B.theorem2_bounds(a, list(range(1, a.numel() + 1)), r, sphere_radius=m, dim=dim)
    assert torch.all(b.lower <= b.upper + 1e-12)
    assert torch.all((b.lower >= -1e-12) & (b.upper <= 1 + 1e-12))


@settings(max_examples=40, deadline=None)
@given(raw=WEIGHTS, dim=st.integers(2, 16), seed=SEEDS)
def test_separation_bound_is_sure(raw, dim, seed):
    """X_i <= xi_i^delta for EVERY configuration whose pairs are >= delta apart (no expectation)."""
    a = sorted_weights(raw, True)
    n = a.numel()
    gen = torch.Generator().manual_seed(seed)
    pts = MC.sample_sphere(50, n, dim, sphere_radius=1.3, generator=gen)
    delta = min_pairwise_distance(pts)  # [50], each sample's own minimum separation
    y = a[:, None] * pts
    x_i = (y.sum(-2, keepdim=True) - y).norm(dim=-1)  # [50, n]
    w_o, q_o, _, _ = B.spread_terms(a, [n])
    xi_d = (1.3**2 * w_o**2 - delta[:, None, None] ** 2 / 2 * (w_o**2 - q_o)).sqrt()[:, 0, :]
    assert torch.all(x_i <= xi_d + 1e-12)
    radii = x_i.max(-1).values + 1e-9  # every X_i inside
    sure = B.separation_lower_bound(a.expand(50, n), [n], radii[:, None], sphere_radius=1.3,
                                     delta=delta)
    counted = MC.counted_inside(pts, a, radii[:, None])
    assert torch.all(sure[:, 0] <= counted + 1e-12)


def test_bounds_under_rejection_model():
    """Both assumptions at once: points drawn by rejection; bounds carry the 1/(1 - eta) factor."""
    a = torch.softmax(torch.tensor([2.0, 1.5, 1.0, 0.8, 0.5, 0.2, 0.0, -0.3]), 0).double()
    dim, delta = 8, 0.5
    eta = B.separation_failure_bound(a.numel(), dim, delta)
    assert 0 < eta < 0.5
    for r in (0.2, 0.35, 0.5, 0.7):
        mc = MC.monte_carlo_fraction(a, r, dim, n_samples=8000, delta=delta, seed=1)
        assert 1 - mc.acceptance <= eta + 0.02  # the union bound bounds the rejection rate
        b = B.theorem2_bounds(a, [8], r, dim=dim, delta=delta, failure=eta)
        tol = 5 * mc.stderr + 2e-3
        assert float(b.lower) - tol <= mc.mean <= float(b.upper) + tol


def test_pair_probability_matches_monte_carlo():
    gen = torch.Generator().manual_seed(13)
    for dim, delta in ((3, 0.5), (8, 1.0), (5, 1.6)):
        pts = MC.sample_sphere(200_000, 2, dim, generator=gen)
        freq = float(((pts[:, 0] - pts[:, 1]).norm(dim=-1) < delta).double().mean())
        assert abs(freq - B.pair_closer_probability(dim, delta)) < 4e-3
    assert B.pair_closer_probability(4, 2.5) == 1.0 and B.pair_closer_probability(4, 0.0) == 0.0
    with pytest.raises(ValueError):
        B.pair_closer_probability(1, 0.5)


def test_paper_shaped_upper_is_violated():
    """An upper bound on E X_i in the exponent (the paper's delta-argument) breaks the bound (T6)."""
    n, dim = 16, 64
    a = torch.full((n,), 1.0 / n, dtype=torch.float64)
    r = 0.3
    mc = MC.monte_carlo_fraction(a, r, dim, n_samples=4000, seed=2)
    shaped = float(B.paper_shaped_upper(a, [n], r, delta=0.1))
    assert mc.mean > shaped + 10 * mc.stderr + 0.05
    ours = B.theorem2_bounds(a, [n], r, dim=dim)
    assert float(ours.upper) >= mc.mean - 5 * mc.stderr


def test_bound_input_errors():
    a = torch.tensor([0.6, 0.4], dtype=torch.float64)
    with pytest.raises(ValueError, match="M must"):
        B.theorem2_bounds(a, [2], 0.5, sphere_radius=0.0, dim=3)
    with pytest.raises(ValueError, match="dimension"):
        B.theorem2_bounds(a, [2], 0.5, dim=0)
    with pytest.raises(ValueError, match="eta"):
        B.theorem2_bounds(a, [2], 0.5, dim=3, failure=1.0)
    with pytest.raises(ValueError, match="ranks"):
        B.spread_terms(a, [3])


def test_model_check_guard_fails_on_violation():
    """The chapter's guard (normlimits.book.chapter.check_bound) raises on a violated bound."""
    from normlimits.book.chapter import check_bound

    with pytest.raises(AssertionError, match="below the lower"):
        check_bound(torch.tensor([0.2, 0.5]), lower=torch.tensor([0.3, 0.1]), name="sure bound")



def test_monte_carlo_helpers():
    a = torch.softmax(torch.tensor([1.0, 0.5, 0.2, 0.0, -0.5]), 0).double()
    mean, se, acc = MC.monte_carlo_curve(a, [0.0, 10.0], 4, n_samples=500)
    assert mean.tolist() == [0.0, 1.0] and acc == 1.0 and se.shape == (2,)
    row = MC.monte_carlo_check(a, 0.4, 4, delta=0.3, n_samples=2000)
    assert row["ok"] and 0 < row["eta"] < 1 and row["lower"] <= row["upper"]
    with pytest.raises(ValueError, match="eta"):
        MC.monte_carlo_check(torch.full((40,), 0.02, dtype=torch.float64), 0.4, 3, delta=1.5)
