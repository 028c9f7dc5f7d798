"""Tests for geometric separability N_s (paper Eq. 10) and the book's Theorem 2."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from normlimits import separability as S
from normlimits.theory import separability as TS

SEEDS = st.integers(min_value=0, max_value=2**31 - 1)


# ----------------------------------------------------------------------- slow references
def reference_fraction(weights, vectors, rows, grid, causal=True):
    """Obviously correct N_s/N: loops over batch, rows and N; sorts each row by (-alpha, index)."""
    b_count, r_count, length = weights.shape
    out = torch.full((b_count, r_count, len(grid)), float("nan"), dtype=torch.float64)
    for b in range(b_count):
        x = vectors[b] if vectors.shape[0] > 1 else vectors[0]
        for ri, t in enumerate(rows):
            visible = list(range(t + 1)) if causal else list(range(length))
            order = sorted(visible, key=lambda j: (-float(weights[b, ri, j]), j))
            for g, n in enumerate(grid):
                if len(visible) <= n:
                    continue
                selected, others = order[:n], order[n:]
                s = sum(weights[b, ri, i] * x[i] for i in selected)
                r = min(float(torch.linalg.norm(weights[b, ri, j] * x[j] - s)) for j in others)
                inside = [float(torch.linalg.norm(weights[b, ri, i] * x[i] - s)) < r for i in selected]
                out[b, ri, g] = sum(inside) / n
    return out


def causal_softmax(logits):
    length = logits.shape[-1]
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    return logits.masked_fill(~mask, float("-inf")).softmax(-1)


def random_problem(seed, batch=2, length=24, dim=4, scale=2.0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(batch, length, length, generator=gen, dtype=dtype)
    vectors = torch.randn(batch, length, dim, generator=gen, dtype=dtype)
    return causal_softmax(logits), vectors


# ----------------------------------------------------------------------- N_s, vectorised
@pytest.mark.parametrize("row_chunk,block", [(5, 1), (7, 10**9), (64, 10**9)])
def test_matches_loop_reference(row_chunk, block):
    weights, vectors = random_problem(0, batch=3, length=30, dim=5)
    grid = [1, 2, 3, 5, 8, 13, 29]
    res = S.geometric_separability(weights, vectors, grid, row_chunk=row_chunk, block_elements=block)
    ref = reference_fraction(weights, vectors, list(range(30)), grid)
    assert torch.equal(res.fraction.isnan(), ref.isnan())
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=SEEDS, length=st.integers(3, 20), dim=st.integers(1, 6),
       scale=st.floats(0.1, 6.0), data=st.data())
def test_matches_loop_reference_property(seed, length, dim, scale, data):
    weights, vectors = random_problem(seed, batch=2, length=length, dim=dim, scale=scale)
    grid = sorted(data.draw(st.sets(st.integers(1, length - 1), min_size=1, max_size=4)))
    chunk = data.draw(st.integers(1, length))
    res = S.geometric_separability(weights, vectors, grid, row_chunk=chunk)
    ref = reference_fraction(weights, vectors, list(range(length)), grid)
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))


def test_rows_subset_unsorted_and_shared_vectors():
    """Rows given out of order; vectors shared by all heads (like hidden states)."""
    gen = torch.Generator().manual_seed(3)
    heads, length = 3, 26
    weights_all = causal_softmax(torch.randn(heads, length, length, generator=gen, dtype=torch.float64))
    shared = torch.randn(1, length, 4, generator=gen, dtype=torch.float64)
    rows = torch.tensor([25, 3, 17, 9, 0, 12])
    res = S.geometric_separability(weights_all[:, rows], shared, [1, 2, 4, 6], rows=rows, row_chunk=4)
    ref = reference_fraction(weights_all[:, rows], shared, rows.tolist(), [1, 2, 4, 6])
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))
    assert res.fraction.shape == (heads, 6, 4)


def test_leading_dims_and_non_causal():
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(2, 2, 5, 12, generator=gen, dtype=torch.float64).softmax(-1)  # [layers, heads, R, L]
    x = torch.randn(2, 1, 12, 3, generator=gen, dtype=torch.float64)  # shared over heads
    res = S.geometric_separability(w, x, [1, 3, 11], causal=False)
    assert res.fraction.shape == (2, 2, 5, 3)
    ref = reference_fraction(w.reshape(4, 5, 12), x.expand(2, 2, 12, 3).reshape(4, 12, 3),
                             [11] * 5, [1, 3, 11], causal=False)
    assert torch.equal(res.fraction.reshape(4, 5, 3), ref)


def test_n_equal_one_is_trivially_one_and_short_rows_are_nan():
    weights, vectors = random_problem(5, batch=2, length=16)
    res = S.geometric_separability(weights, vectors, [1, 4])
    assert torch.all(res.fraction[..., 1:, 0] == 1.0)  # N = 1, every row with >= 2 keys
    assert torch.all(res.fraction[..., 0, :].isnan())  # row 0 sees 1 key: nothing non-selected
    assert torch.all(res.fraction[..., :4, 1].isnan()) and not res.fraction[..., 4:, 1].isnan().any()


def test_zero_weights_and_radius():
    """Exact zeros among visible keys (softmax underflow) and the radius itself."""
    gen = torch.Generator().manual_seed(6)
    length = 18
    logits = torch.randn(2, length, length, generator=gen, dtype=torch.float64)
    logits[..., ::3] = -1e4  # underflows to weight 0 but stays visible
    weights = causal_softmax(logits)
    vectors = torch.randn(2, length, 3, generator=gen, dtype=torch.float64)
    grid = [1, 2, 5, 9]
    res = S.geometric_separability(weights, vectors, grid)
    ref = reference_fraction(weights, vectors, list(range(length)), grid)
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))
    # radius of one row by hand
    t, n, b = 15, 5, 1
    order = sorted(range(t + 1), key=lambda j: (-float(weights[b, t, j]), j))
    s = sum(weights[b, t, i] * vectors[b, i] for i in order[:n])
    r = min(float((weights[b, t, j] * vectors[b, j] - s).norm()) for j in order[n:])
    assert math.isclose(float(res.radius[b, t, 2]), r, rel_tol=1e-9)


def test_float32_agrees_except_near_ties():
    weights, vectors = random_problem(7, batch=4, length=64, dim=8)
    grid = [2, 4, 8, 16]
    r64 = S.geometric_separability(weights, vectors, grid)
    r32 = S.geometric_separability(weights.float(), vectors.float(), grid)
    assert r32.fraction.dtype == torch.float32
    diff = (r32.fraction.double() - r64.fraction).abs().nan_to_num(0)
    assert float((diff > 0).double().mean()) < 0.01
    assert torch.allclose(r32.radius.double(), r64.radius, rtol=1e-4, atol=1e-6, equal_nan=True)


def test_keep_selection_is_consistent():
    weights, vectors = random_problem(8, batch=2, length=20)
    grid = [1, 3, 6]
    res = S.geometric_separability(weights, vectors, grid, keep_selection=True)
    assert torch.equal(res.distinguishable.sum(-1).double(), res.count.nan_to_num(0))
    masked = weights.masked_fill(~torch.ones(20, 20, dtype=torch.bool).tril(), -1.0)
    top = masked.sort(-1, descending=True).values[..., :6].clamp_min(0)
    assert torch.allclose(res.top_weights, top)
    assert torch.allclose(torch.gather(weights, 2, res.order)[..., :, :].where(res.top_weights > 0, 0.0),
                          res.top_weights)


@pytest.mark.parametrize("grid,match", [([0, 2], "1..L-1"), ([5, 20], "1..L-1"), ([], "empty")])
def test_bad_grid(grid, match):
    weights, vectors = random_problem(9, batch=1, length=20)
    with pytest.raises(ValueError, match=match):
        S.geometric_separability(weights, vectors, grid)


def test_bad_shapes_and_rows():
    weights, vectors = random_problem(9, batch=2, length=10)
    with pytest.raises(ValueError, match="keys"):
        S.geometric_separability(weights, vectors[:, :9], [1])
    with pytest.raises(ValueError, match="rows"):
        S.geometric_separability(weights[:, :4], vectors, [1])
    with pytest.raises(ValueError, match="0..9"):
        S.geometric_separability(weights[:, :2], vectors, [1], rows=[3, 10])
    with pytest.raises(ValueError, match="broadcast|enlarge"):
        S.geometric_separability(weights, torch.randn(3, 10, 2, dtype=torch.float64), [1])


def test_projection_and_min_distance():
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(3, 15, 4, generator=gen, dtype=torch.float64)
    p = S.project_to_sphere(x, 2.0)
    assert torch.allclose(p.norm(dim=-1), torch.full((3, 15), 2.0, dtype=torch.float64))
    md = S.min_pairwise_distance(p)
    brute = torch.tensor([min(float((p[b, i] - p[b, j]).norm()) for i in range(15) for j in range(15) if i != j)
                          for b in range(3)], dtype=torch.float64)
    assert torch.allclose(md, brute)
    with pytest.raises(ValueError, match="zero vector"):
        S.project_to_sphere(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="M must be"):
        S.project_to_sphere(x, 0.0)


# ----------------------------------------------------------------------- multi-head coverage
def reference_coverage(res, head_p):
    heads, rows, g_count = res.fraction.shape
    out_cov = torch.full((heads, rows, g_count), float("nan"))
    out_ind = torch.full((heads, rows, g_count), float("nan"))
    out_sel = torch.full((heads, rows, g_count), float("nan"))
    for r in range(rows):
        for g, n in enumerate(res.n_grid.tolist()):
            if math.isnan(float(res.fraction[0, r, g])):
                continue
            top = [set(res.order[h, r, :n].tolist()) for h in range(heads)]
            dist = [{int(res.order[h, r, k]) for k in range(n) if res.distinguishable[h, r, g, k]}
                    for h in range(heads)]
            covered = set().union(*dist)
            for h in range(heads):
                out_cov[h, r, g] = len(top[h] & covered) / n
                out_sel[h, r, g] = sum(sum(j in top[o] for o in range(heads)) for j in top[h]) / n
                pred = [1 - math.prod(1 - float(head_p[o, g]) for o in range(heads) if j in top[o])
                        for j in top[h]]
                out_ind[h, r, g] = sum(pred) / n
    return out_cov, out_sel, out_ind


def test_multihead_coverage_matches_reference():
    weights, vectors = random_problem(11, batch=4, length=22, dim=3, scale=1.0)
    res = S.geometric_separability(weights, vectors, [1, 3, 7], keep_selection=True)
    cov = S.multihead_coverage(res)
    head_p = torch.nanmean(res.fraction.float(), dim=1)
    ref_cov, ref_sel, ref_ind = reference_coverage(res, head_p)
    assert torch.allclose(cov.coverage, ref_cov, equal_nan=True)
    assert torch.allclose(cov.selecting_heads, ref_sel, equal_nan=True)
    assert torch.allclose(cov.independent_given_selection, ref_ind, atol=1e-6, equal_nan=True)
    ok = ~cov.coverage.isnan()
    assert torch.all(cov.coverage[ok] >= cov.own[ok] - 1e-7)  # a head covers its own tokens
    with pytest.raises(ValueError, match="keep_selection"):
        S.multihead_coverage(S.geometric_separability(weights, vectors, [1, 3]))


# ----------------------------------------------------------------------- theory: sympy
@pytest.mark.parametrize("n", [1, 2, 3, 4])
def test_derivation_closes(n):
    der = TS.derive(n)
    assert der.second_closes and der.fourth_closes and der.variance_closes
    assert der.holder_closes and der.sep_closes and der.mcdiarmid_closes


def test_derivation_rejects_bad_n():
    with pytest.raises(ValueError):
        TS.derive(0)


def test_moment_rules_by_monte_carlo():
    """E X^2 = M^2 q and E X^4 = M^4 (q^2 + 2 (q^2 - p)/d): the rules sympy used, checked numerically."""
    gen = torch.Generator().manual_seed(12)
    a = torch.tensor([0.5, 0.3, 0.15, 0.05], dtype=torch.float64)
    for dim, m in ((3, 1.0), (10, 2.0)):
        pts = TS.sample_sphere(400_000, 4, dim, sphere_radius=m, generator=gen)
        x2 = ((a[:, None] * pts).sum(-2) ** 2).sum(-1)
        q, p = float((a**2).sum()), float((a**4).sum())
        assert math.isclose(float(x2.mean()), m**2 * q, rel_tol=0.01)
        assert math.isclose(float((x2**2).mean()), m**4 * (q * q + 2 * (q * q - p) / dim), rel_tol=0.02)


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
    b = TS.theorem2_bounds(a, [n], r, sphere_radius=m, dim=dim)
    mc = TS.monte_carlo_fraction(a, r, dim, n_samples=6000, sphere_radius=m, seed=seed % 10**6)
    tol = 5 * mc.stderr + 2e-3
    assert float(b.lower) - tol <= mc.mean <= float(b.upper) + tol
    assert float(b.lower_markov) <= float(b.lower) + 1e-12
    assert float(b.upper) <= float(b.upper_exponential) + 1e-12


@settings(max_examples=40, deadline=None)
@given(raw=WEIGHTS, dim=st.integers(1, 64), m=st.floats(0.1, 5.0), r=st.floats(1e-3, 5.0))
def test_lower_never_exceeds_upper(raw, dim, m, r):
    """Both bound the same expectation, so lower <= upper must hold for any input."""
    a = sorted_weights(raw, True)
    b = TS.theorem2_bounds(a, list(range(1, a.numel() + 1)), r, sphere_radius=m, dim=dim)
    assert torch.all(b.lower <= b.upper + 1e-12)
    assert torch.all((b.lower >= -1e-12) & (b.upper <= 1 + 1e-12))


@settings(max_examples=40, deadline=None)
@given(raw=WEIGHTS, dim=st.integers(2, 16), seed=SEEDS)
def test_separation_bound_is_sure(raw, dim, seed):
    """X_i <= xi_i^delta for EVERY configuration whose pairs are >= delta apart (no expectation)."""
    a = sorted_weights(raw, True)
    n = a.numel()
    gen = torch.Generator().manual_seed(seed)
    pts = TS.sample_sphere(50, n, dim, sphere_radius=1.3, generator=gen)
    delta = TS._min_separation(pts)  # [50], each sample's own minimum separation
    y = a[:, None] * pts
    x_i = (y.sum(-2, keepdim=True) - y).norm(dim=-1)  # [50, n]
    w_o, q_o, _, _ = TS.spread_terms(a, [n])
    xi_d = (1.3**2 * w_o**2 - delta[:, None, None] ** 2 / 2 * (w_o**2 - q_o)).sqrt()[:, 0, :]
    assert torch.all(x_i <= xi_d + 1e-12)
    radii = x_i.max(-1).values + 1e-9  # every X_i inside
    sure = TS.separation_lower_bound(a.expand(50, n), [n], radii[:, None], sphere_radius=1.3,
                                     delta=delta)
    counted = TS.counted_inside(pts, a, radii[:, None])
    assert torch.all(sure[:, 0] <= counted + 1e-12)


def test_bounds_under_rejection_model():
    """Both assumptions at once: points drawn by rejection; bounds carry the 1/(1 - eta) factor."""
    a = torch.softmax(torch.tensor([2.0, 1.5, 1.0, 0.8, 0.5, 0.2, 0.0, -0.3]), 0).double()
    dim, delta = 8, 0.5
    eta = TS.separation_failure_bound(a.numel(), dim, delta)
    assert 0 < eta < 0.5
    for r in (0.2, 0.35, 0.5, 0.7):
        mc = TS.monte_carlo_fraction(a, r, dim, n_samples=8000, delta=delta, seed=1)
        assert 1 - mc.acceptance <= eta + 0.02  # the union bound bounds the rejection rate
        b = TS.theorem2_bounds(a, [8], r, dim=dim, delta=delta, failure=eta)
        tol = 5 * mc.stderr + 2e-3
        assert float(b.lower) - tol <= mc.mean <= float(b.upper) + tol


def test_pair_probability_matches_monte_carlo():
    gen = torch.Generator().manual_seed(13)
    for dim, delta in ((3, 0.5), (8, 1.0), (5, 1.6)):
        pts = TS.sample_sphere(200_000, 2, dim, generator=gen)
        freq = float(((pts[:, 0] - pts[:, 1]).norm(dim=-1) < delta).double().mean())
        assert abs(freq - TS.pair_closer_probability(dim, delta)) < 4e-3
    assert TS.pair_closer_probability(4, 2.5) == 1.0 and TS.pair_closer_probability(4, 0.0) == 0.0
    with pytest.raises(ValueError):
        TS.pair_closer_probability(1, 0.5)


def test_paper_shaped_upper_is_violated():
    """An upper bound on E X_i in the exponent (the paper's delta-argument) breaks the bound (T6)."""
    n, dim = 16, 64
    a = torch.full((n,), 1.0 / n, dtype=torch.float64)
    r = 0.3
    mc = TS.monte_carlo_fraction(a, r, dim, n_samples=4000, seed=2)
    shaped = float(TS.paper_shaped_upper(a, [n], r, delta=0.1))
    assert mc.mean > shaped + 10 * mc.stderr + 0.05
    ours = TS.theorem2_bounds(a, [n], r, dim=dim)
    assert float(ours.upper) >= mc.mean - 5 * mc.stderr


def test_bound_input_errors():
    a = torch.tensor([0.6, 0.4], dtype=torch.float64)
    with pytest.raises(ValueError, match="M must"):
        TS.theorem2_bounds(a, [2], 0.5, sphere_radius=0.0, dim=3)
    with pytest.raises(ValueError, match="dimension"):
        TS.theorem2_bounds(a, [2], 0.5, dim=0)
    with pytest.raises(ValueError, match="eta"):
        TS.theorem2_bounds(a, [2], 0.5, dim=3, failure=1.0)
    with pytest.raises(ValueError, match="ranks"):
        TS.spread_terms(a, [3])


def test_model_check_guard_fails_on_violation():
    """The chapter's guard (normlimits.book.check_bound) raises on a violated bound."""
    from normlimits.book import check_bound

    with pytest.raises(AssertionError, match="below the lower"):
        check_bound(torch.tensor([0.2, 0.5]), lower=torch.tensor([0.3, 0.1]), name="sure bound")


# ----------------------------------------------------------------------- sweeps and plateau
def fake_capture(seed, layers=2, heads=3, length=40, dim=5, width=8):
    from normlimits.capture import WindowCapture

    gen = torch.Generator().manual_seed(seed)
    return WindowCapture(queries=2 * torch.randn(layers, heads, length, dim, generator=gen),
                         keys=torch.randn(layers, heads, length, dim, generator=gen),
                         values=torch.randn(layers, heads, length, dim, generator=gen),
                         hidden=torch.randn(layers, length, width, generator=gen),
                         scale=torch.full((layers,), dim**-0.5))


def test_layer_weights_match_capture():
    cap = fake_capture(20)
    rows = torch.tensor([0, 7, 39])
    for layer in range(2):
        assert torch.allclose(S.layer_weights(cap, layer, rows), cap.weights(rows)[layer], atol=1e-6)
        assert torch.allclose(S.layer_weights(cap, layer), cap.weights()[layer], atol=1e-6)


def test_sweep_matches_direct_computation():
    caps = [fake_capture(21), fake_capture(22)]
    grid = [1, 2, 4, 8]
    sw = S.separability_sweep(caps, grid, kinds=S.VECTOR_KINDS, multihead=True)
    assert sw.windows == 2 and sw.kinds == S.VECTOR_KINDS
    direct = []
    for cap in caps:
        per_layer = []
        for layer in range(2):
            res = S.geometric_separability(cap.weights()[layer], S.project_to_sphere(cap.values[layer]), grid)
            per_layer.append(torch.nanmean(res.fraction.double(), dim=-2))
        direct.append(torch.stack(per_layer))
    assert torch.allclose(sw.fraction["values"], torch.stack(direct).mean(0))
    assert torch.allclose(sw.fraction_windows["values"], torch.stack(direct))
    for kind in ("values", "hidden", "uniform"):
        assert sw.sure_violations[kind] == 0 and sw.rows_checked[kind] > 0
        assert sw.lower[kind].shape == (2, 3, 4) and sw.delta[kind].shape == (2, 2, 3)
        assert torch.all(sw.lower_markov[kind] <= sw.lower[kind] + 1e-12)
        assert torch.all(sw.upper[kind] <= sw.upper_exponential[kind] + 1e-12)
        assert torch.all(sw.alignment[kind].abs() <= 1)
    assert "raw_values" not in sw.lower  # not on a sphere: no bounds
    assert sw.coverage.shape == (2, 3, 4) and torch.all(sw.coverage >= sw.own.double() - 1e-6)
    assert torch.allclose(sw.own.double(), sw.fraction["values"], atol=1e-6)
    assert sw.metric_seconds > 0


def test_sweep_errors():
    with pytest.raises(ValueError, match="unknown vector kind"):
        S.separability_sweep([fake_capture(23)], [1, 2], kinds=("keys",))
    with pytest.raises(ValueError, match="multihead"):
        S.separability_sweep([fake_capture(23)], [1, 2], kinds=("hidden",), multihead=True)
    with pytest.raises(ValueError, match="no captures"):
        S.separability_sweep([], [1, 2])
    with pytest.raises(ValueError, match="1..L-1"):
        S.separability_sweep([fake_capture(23)], [1, 40])


def test_plateau_recovers_a_hinge():
    grid = [1, 2, 4, 8, 16, 32, 64, 128]
    x = torch.log2(torch.tensor(grid, dtype=torch.float64))
    curve = 0.8 - 0.06 * (x - 4).clamp(max=0) + 0.0 * (x - 4).clamp(min=0)
    curve[0] = 1.0
    fit = S.plateau(grid, curve)
    assert fit.n_stop == 16 and fit.saturated and fit.rms < 1e-9
    assert math.isclose(fit.slope_before, -0.06, abs_tol=1e-9) and math.isclose(fit.value, 0.8)
    falling = 1.0 - 0.05 * x
    assert not S.plateau(grid, falling).saturated
    with pytest.raises(ValueError, match="same length"):
        S.plateau(grid, curve[:-1])
    with pytest.raises(ValueError, match="at least 4"):
        S.plateau([1, 2, 4], [1.0, 0.9, 0.8])


def test_monte_carlo_helpers_and_summary():
    a = torch.softmax(torch.tensor([1.0, 0.5, 0.2, 0.0, -0.5]), 0).double()
    mean, se, acc = TS.monte_carlo_curve(a, [0.0, 10.0], 4, n_samples=500)
    assert mean.tolist() == [0.0, 1.0] and acc == 1.0 and se.shape == (2,)
    row = TS.monte_carlo_check(a, 0.4, 4, delta=0.3, n_samples=2000)
    assert row["ok"] and 0 < row["eta"] < 1 and row["lower"] <= row["upper"]
    with pytest.raises(ValueError, match="eta"):
        TS.monte_carlo_check(torch.full((40,), 0.02, dtype=torch.float64), 0.4, 3, delta=1.5)
    sw = S.separability_sweep([fake_capture(24)], [1, 2, 4], multihead=True)
    summ = S.multihead_summary(sw)
    assert summ["heads"] == 3 and summ["coverage"].shape == (3,)
    assert torch.all(summ["formula"] >= summ["p"] - 1e-12)
    with pytest.raises(ValueError, match="multihead"):
        S.multihead_summary(S.separability_sweep([fake_capture(24)], [1, 2]))
