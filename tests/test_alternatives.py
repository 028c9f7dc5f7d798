"""Tests of normlimits.alternatives (the four yardsticks for any normaliser) and its theory."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normlimits import alternatives as A
from normlimits import distances as D
from normlimits import jacobian as J
from normlimits import separability as S
from normlimits import vanishing as V
from normlimits.normalizers import NORMALIZERS, softmax_one
from normlimits.theory import alternatives as TA

NAMES = list(NORMALIZERS)
NEG_INF = float("-inf")


def masked_logits(rows=5, keys=8, seed=0, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(rows, keys, generator=gen, dtype=torch.float64)
    visible = torch.arange(keys)[None, :] <= (torch.arange(rows)[:, None] * 2 + 1) % keys
    return z.masked_fill(~visible, NEG_INF)


# ------------------------------------------------------------------------------- yardstick 1
def test_row_statistics_uniform_and_one_hot():
    z = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, NEG_INF, NEG_INF]], dtype=torch.float64)
    w = torch.softmax(z, -1)
    stats = A.row_statistics(w, z)
    assert torch.allclose(stats["entropy"], torch.tensor([math.log(4), math.log(2)], dtype=torch.float64))
    assert torch.allclose(stats["entropy_ratio"], torch.ones(2, dtype=torch.float64))
    assert torch.equal(stats["support"], torch.tensor([4.0, 2.0], dtype=torch.float64))
    one_hot = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    s1 = A.row_statistics(one_hot, torch.zeros(1, 3, dtype=torch.float64))
    assert float(s1["entropy"]) == 0.0 and float(s1["support"]) == 1.0
    sub = A.row_statistics(0.5 * w, z)                     # renormalised entropy, mass 0.5
    assert torch.allclose(sub["entropy"], stats["entropy"])
    assert torch.allclose(sub["mass"], 0.5 * stats["mass"])
    with pytest.raises(ValueError, match="non-negative"):
        A.row_statistics(-w, z)


# ------------------------------------------------------------------------------- yardstick 4
@pytest.mark.parametrize("name", A.EXACT_JACOBIANS)
@pytest.mark.parametrize("temperature", [0.2, 1.0, 5.0])
def test_exact_jacobian_equals_autograd(name, temperature):
    z = masked_logits(seed=1)
    exact = A.exact_jacobian(name, z, temperature)
    dense = A.dense_jacobian(name, z, temperature)
    assert torch.allclose(exact, dense, atol=1e-12)


def test_exact_jacobian_absent_without_closed_form():
    z = masked_logits()
    assert A.exact_jacobian("adaptive", z) is None
    assert A.exact_jacobian("sa-softmax", z) is None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("temperature", [0.1, 1.0])
def test_jacobian_norm_equals_dense_spectral_norm(name, temperature):
    z = masked_logits(rows=6, keys=9, seed=2)
    dense = A.dense_jacobian(name, z, temperature)
    reference = torch.linalg.matrix_norm(dense, ord=2)
    ours = A.jacobian_norm(name, z, temperature)
    assert torch.allclose(ours, reference, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("name", ["softmax", "ssmax", "softmax1", "adaptive", "sa-softmax"])
def test_lanczos_agrees_with_exact_norms(name):
    z = masked_logits(rows=6, keys=9, seed=3)
    reference = torch.linalg.matrix_norm(A.dense_jacobian(name, z, 0.5), ord=2)
    for method in ("auto", "autograd"):
        estimate = A.lanczos_norm(name, z, 0.5, method=method)       # steps >= keys: exact
        assert bool((estimate <= reference * (1 + 1e-9)).all())
        assert torch.allclose(estimate, reference, rtol=1e-9)


@pytest.mark.parametrize("name", ["adaptive", "sa-softmax"])
def test_lanczos_converges_on_long_rows(name):
    """Long rows (300 keys), few steps: a lower bound within 1e-6 of the dense norm."""
    z = torch.cat([masked_logits(rows=4, keys=300, seed=13, scale=sc) for sc in (0.5, 2.0, 6.0)])
    reference = torch.linalg.matrix_norm(A.dense_jacobian(name, z, 1.0), ord=2)
    estimate = A.lanczos_norm(name, z, 1.0, steps=32)
    assert bool((estimate <= reference * (1 + 1e-9)).all())
    assert torch.allclose(estimate, reference, rtol=1e-6)


@pytest.mark.parametrize("name", ["adaptive", "sa-softmax"])
@pytest.mark.parametrize("temperature", [0.3, 1.0])
def test_closed_form_products_equal_autograd(name, temperature):
    gen = torch.Generator().manual_seed(9)
    # scales that put the adaptive rows in beta's active region (entropy in (0.85, 5.9))
    z = torch.cat([masked_logits(rows=6, keys=40, seed=8, scale=s) for s in (0.3, 1.0, 3.0)])
    v = torch.randn(z.shape, generator=gen, dtype=torch.float64)
    u = torch.randn(z.shape, generator=gen, dtype=torch.float64)
    exact = A.jacobian_products(name, z, temperature, method="exact")
    auto = A.jacobian_products(name, z, temperature, method="autograd")
    vis = torch.isfinite(z)
    v, u = torch.where(vis, v, 0.0), torch.where(vis, u, 0.0)
    assert torch.allclose(exact[0](v), auto[0](v), atol=1e-12)
    assert torch.allclose(exact[1](u), auto[1](u), atol=1e-12)
    if name == "adaptive":
        from normlimits.normalizers import _entropy_masked

        _, h = _entropy_masked(torch.where(vis, z, 0.0), vis, -1)
        assert bool(((h > 0.85) & (h < 5.9)).any())       # the beta' term was exercised


def test_products_method_validation():
    z = masked_logits()
    with pytest.raises(ValueError, match="method must be"):
        A.jacobian_products("adaptive", z, method="dense")
    with pytest.raises(ValueError, match="no closed-form"):
        A.jacobian_products("softmax1", z, method="exact")
    jv, _ = A.jacobian_products("softmax1", z, method="auto")       # autograd fallback
    assert torch.isfinite(jv(torch.where(torch.isfinite(z), 1.0, 0.0).double())).all()


def test_batched_temperatures_match_one_at_a_time():
    z = masked_logits(rows=4, keys=7, seed=6)
    cfg = A.YardstickConfig(lengths=(2,), rows=(6,), n_grid=(1,), temperatures=(0.1, 1.0, 3.0),
                            jacobian_rows=(6,))
    for name in ("adaptive", "sa-softmax", "softmax"):
        batched = A._norms_over_temperatures(NORMALIZERS[name], z, cfg)
        single = torch.stack([A.jacobian_norm(name, z, t) for t in cfg.temperatures])
        assert torch.allclose(batched, single, rtol=1e-9)


def test_substochastic_top_eigenvalue():
    gen = torch.Generator().manual_seed(4)
    z = 3 * torch.randn(50, 7, generator=gen, dtype=torch.float64)
    a = softmax_one(z)
    a[0] = torch.tensor([0.3, 0.3, 0.1, 0, 0, 0, 0], dtype=torch.float64)    # tie
    a[1] = torch.tensor([0.6, 0, 0, 0, 0, 0, 0], dtype=torch.float64)        # single key
    ref = torch.linalg.eigvalsh(torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2))[..., -1]
    assert torch.allclose(A.substochastic_top_eigenvalue(a), ref, atol=1e-14)
    # rows summing to 1 agree with the jacobian module's eigenvalue
    p = torch.softmax(z, -1)
    assert torch.allclose(A.substochastic_top_eigenvalue(p), J.top_eigenvalue(p), atol=1e-13)
    with pytest.raises(ValueError, match="sum <= 1"):
        A.substochastic_top_eigenvalue(torch.tensor([0.7, 0.7], dtype=torch.float64))


@pytest.mark.parametrize("scale", [0.3, 3.0, 30.0, 300.0])
def test_substochastic_top_eigenvalue_long_and_extreme_rows(scale):
    gen = torch.Generator().manual_seed(5)
    z = scale * torch.randn(20, 300, generator=gen, dtype=torch.float64)
    a = softmax_one(z)                       # includes subnormal weights at large scales
    ref = torch.linalg.eigvalsh(torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2))[..., -1]
    ours = A.substochastic_top_eigenvalue(a)
    assert torch.isfinite(ours).all()
    assert torch.allclose(ours, ref.clamp_min(0), rtol=1e-10, atol=1e-15)


# ----------------------------------------------------- worst cases: attained, never exceeded
def tie(keys=6, top=50.0):
    z = torch.zeros(keys, dtype=torch.float64)
    z[:2] = top
    return z


@pytest.mark.parametrize("temperature", [0.05, 1.0])
def test_worst_cases_are_attained(temperature):
    z = tie()
    t = temperature
    assert abs(float(A.jacobian_norm("softmax", z, t)) - 1 / (2 * t)) < 1e-9 / t
    assert abs(float(A.jacobian_norm("sparsemax", z, t)) - 1 / t) < 1e-12 / t
    assert abs(float(A.jacobian_norm("entmax15", z, t)) - 1 / (math.sqrt(2) * t)) < 1e-9 / t
    c = math.log(6) / math.log(32)
    assert abs(float(A.jacobian_norm("ssmax", z, t)) - c / (2 * t)) < 1e-9 / t
    # softmax_1 and the adaptive temperature approach 1/(2T) at a tie of large logits
    assert abs(float(A.jacobian_norm("softmax1", z, t)) - 1 / (2 * t)) < 1e-6 / t
    assert abs(float(A.jacobian_norm("adaptive", z, t)) - 1 / (2 * t)) < 1e-6 / t
    assert float(A.jacobian_norm("sa-softmax", z, t)) >= 1 / (2 * t) - 1.0
    for name in NAMES:
        bounds = A.worst_case_jacobian(name, t, n=6)
        assert bounds["lower"] <= bounds["upper"]


@given(st.integers(2, 30), st.floats(0.05, 10.0), st.integers(0, 10_000), st.floats(0.1, 20.0))
@settings(max_examples=60, deadline=None)
def test_worst_case_upper_bounds_hold(keys, temperature, seed, scale):
    gen = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(8, keys, generator=gen, dtype=torch.float64)
    for name in ("softmax", "sparsemax", "entmax15", "ssmax", "softmax1"):
        upper = A.worst_case_jacobian(name, temperature, n=keys)["upper"]
        assert float(A.jacobian_norm(name, z, temperature).max()) <= upper * (1 + 1e-9)
    # 1.5-entmax: numerically never above its two-way-tie value 1/(sqrt 2 T)
    entmax_top = float(A.jacobian_norm("entmax15", z, temperature).max())
    assert entmax_top <= (1 + 1e-9) / (math.sqrt(2) * temperature)


def test_worst_case_needs_n_for_ssmax():
    with pytest.raises(ValueError, match="pass n"):
        A.worst_case_jacobian("ssmax", 1.0)


# --------------------------------------------------------------------------------- theory
def test_theory_ssmax_limits():
    r = TA.ssmax_vanishing()
    assert r.limit_above == 1 and r.limit_below == 0 and r.limit_at == TA.sp.Rational(1, 2)
    assert r.scaled_limit_above == TA.sp.oo
    assert TA.closes(r.ratio - TA.L ** (2 * TA.a * TA.s))
    x = TA.sp.Symbol("x", positive=True)
    assert TA.closes((r.top_weight - r.top_weight_x.subs(x, 2 * TA.s * TA.a)).subs(
        {TA.L: 7, TA.s: TA.sp.Rational(1, 3), TA.a: 2}))


def test_theory_sparse_one_hot_and_softmax_one():
    r = TA.sparse_one_hot()
    assert r.sparsemax_top_residual == 0 and r.entmax_top_residual == 0
    assert r.sparsemax_other_at_gap == 0 and r.entmax_other_at_gap == 0
    assert TA.closes(r.sparsemax_two - (1 + TA.g) / 2)
    m = TA.softmax_one_mass()
    assert m.mass_limit == 1


def test_theory_adaptive_beta_bounds_match_numerics():
    r = TA.adaptive_beta_bounds()
    import numpy as np

    grid = np.linspace(0.5, 12, 200_001)
    poly = np.polyval(TA.VELICKOVIC_POLYNOMIAL, grid)
    assert abs(poly.max() - r.beta_max) < 1e-6 and abs(grid[poly.argmax()] - r.beta_argmax) < 1e-3
    assert r.at_log2 < 1 and r.on_interval[0] > math.log(2)      # beta = 1 at a two-way tie
    assert np.all(poly[grid > r.off_above + 1e-6] < 1)


def test_theory_jacobian_constants():
    r = TA.jacobian_constants()
    assert r.sparsemax_projection == TA.sp.zeros(4, 4)
    assert r.sparsemax_eigenvalues == {1: 3, 0: 1}
    assert r.entmax_two_argmax == TA.sp.Rational(1, 2)
    assert TA.closes(r.entmax_two_max - 1 / TA.sp.sqrt(2))
    assert r.softmax_two_max == TA.sp.Rational(1, 2)


# ------------------------------------------------------------------------ on a (tiny) model
@pytest.fixture
def tiny_capture(tiny_loaded):
    from normlimits.capture import capture_window

    ids = torch.arange(64) % 250
    return capture_window(tiny_loaded, ids)


def tiny_config():
    return A.YardstickConfig.for_window(64, rows=6, jacobian_rows=4, smallest=8,
                                        temperatures=(0.1, 1.0))


def test_decoupling_ssmax_is_softmax_at_another_temperature():
    """On rows with the same n, SSMax at T is softmax at T / (s log n): its (selectivity,
    norm) points lie on softmax's curve, so the interpolated ratio is close to 1."""
    gen = torch.Generator().manual_seed(3)
    logits = 2 * torch.randn(1, 1, 8, 256, generator=gen, dtype=torch.float64)
    temps = tuple(float(t) for t in torch.logspace(-1.5, 1.5, 25))
    cfg = A.YardstickConfig(lengths=(2,), rows=(6,), n_grid=(1,), temperatures=temps,
                            jacobian_rows=tuple(range(8)))
    stats = {}
    for key in ("softmax", "ssmax"):
        nz = NORMALIZERS[key]
        stats[key] = {"jacobian": A._norms_over_temperatures(nz, logits, cfg).mean(-1)[None],
                      "jacobian_selectivity": torch.stack(
                          [nz.at_temperature(logits, t).amax(-1).mean(-1) for t in temps])[None]}
    norms, sel = A._softmax_curve(logits, cfg.reference_temperatures)
    stats["softmax"].update(reference_jacobian=norms[None], reference_selectivity=sel[None])
    res = A.YardstickResults(config=cfg, normalizers=["softmax", "ssmax"], stats=stats, windows=1)
    d = res.decoupling("ssmax")
    assert d["matched"] >= 10
    assert abs(d["geometric_mean"] - 1) < 0.01
    assert bool(((d["ratios"] - 1).abs() < 0.05).all())


def test_config_defaults_and_validation():
    cfg = A.YardstickConfig.for_window(1024)
    assert cfg.lengths == (32, 64, 128, 256, 512, 1024)
    assert min(cfg.rows) == 511 and max(cfg.rows) == 1023
    assert max(cfg.n_grid) < min(cfg.rows) + 1
    with pytest.raises(ValueError, match="too short"):
        A.YardstickConfig.for_window(40)


def test_measure_window_reuses_the_chapters_metrics(tiny_capture):
    cfg = tiny_config()
    res = A.measure_window(tiny_capture, ["softmax", "sparsemax", "softmax1"], cfg)
    soft = res["softmax"]
    layers, heads = tiny_capture.values.shape[:2]
    assert soft["max_weight"].shape == (layers, heads, len(cfg.lengths))
    assert soft["distance"].shape == (layers, heads, len(cfg.n_grid))
    assert soft["jacobian"].shape == (2, layers, heads)
    # vanishing: softmax's max weight and entropy equal the vanishing module's statistics
    vstats = V.sweep_capture(tiny_capture, list(cfg.lengths))
    assert torch.allclose(soft["max_weight"], vstats.max_weight, atol=1e-12)
    assert torch.allclose(soft["entropy"], vstats.entropy, atol=1e-10)
    # distances/separability: the same numbers as the distance and separability modules
    rows = torch.tensor(cfg.rows)
    top = int(rows.max()) + 1
    w = tiny_capture.weights(rows)[..., :top].double()
    prof = D.distance_profile(w, tiny_capture.values[..., :top, :].double(), list(cfg.n_grid),
                              lengths=rows + 1, bounds=False, jensen=False)
    assert torch.allclose(soft["distance"], prof.true.mean(-2), rtol=1e-6)
    sep = S.geometric_separability(w, S.project_to_sphere(tiny_capture.values[..., :top, :].double()),
                                   list(cfg.n_grid), rows=rows)
    assert torch.allclose(soft["separability"], torch.nanmean(sep.fraction, -2), atol=1e-9, equal_nan=True)
    # gradient: softmax's exact norm equals the jacobian module's
    jrows = torch.tensor(cfg.jacobian_rows)
    lj = tiny_capture.logits(jrows)[..., : int(jrows.max()) + 1].double()
    expected = torch.stack([J.softmax_jacobian_norm(torch.softmax(lj / t, -1), t).mean(-1)
                            for t in cfg.temperatures])
    assert torch.allclose(soft["jacobian"], expected, rtol=1e-9)
    # sparsemax's norm is 1/T or 0 per row, so its mean lies in [0, 1/T]
    for i, t in enumerate(cfg.temperatures):
        assert bool((res["sparsemax"]["jacobian"][i] <= 1 / t + 1e-12).all())
    assert bool((res["softmax1"]["mass"] < 1).all())


def test_measure_stacks_windows_and_summarises(tiny_loaded):
    from normlimits.capture import iter_captures

    windows = torch.stack([torch.arange(64) % 250, (7 * torch.arange(64)) % 250])
    cfg = tiny_config()
    res = A.measure(iter_captures(tiny_loaded, windows), ["softmax", "ssmax", "adaptive"], cfg)
    assert res.windows == 2 and res.normalizers == ["softmax", "ssmax", "adaptive"]
    assert res.stats["ssmax"]["max_weight"].shape[0] == 2
    assert res.stats["ssmax"]["jacobian"].shape[0] == 2
    assert res.curve("softmax", "max_weight").shape == (len(cfg.lengths),)
    assert res.curve("softmax", "jacobian", "max").shape == (2,)
    assert res.head_values("softmax", "distance").shape[1] == len(cfg.n_grid)
    assert res.max_weight_exponent("softmax").numel() == 2 * 4
    # decoupling: softmax against itself is 1 at every T; SSMax traces softmax's own curve
    same = res.decoupling("softmax")
    assert same["matched"] == 2 and torch.allclose(same["ratios"], torch.ones(2, dtype=torch.float64),
                                                   rtol=0.05)
    assert res.stats["ssmax"]["jacobian_selectivity"].shape == (2, 2, 2, 4)
    crit = res.critical_n("softmax")
    assert crit is None or crit in cfg.n_grid
    with pytest.raises(ValueError, match="reduce"):
        res.curve("softmax", "max_weight", "mode")
    with pytest.raises(ValueError, match="no windows"):
        A.measure(iter([]), ["softmax"], cfg)
    # the gradient yardstick on the first window only
    import dataclasses

    one = A.measure(iter_captures(tiny_loaded, windows), ["softmax"],
                    dataclasses.replace(cfg, jacobian_windows=1))
    assert one.stats["softmax"]["jacobian"].shape[0] == 1
    assert one.stats["softmax"]["max_weight"].shape[0] == 2


def test_measure_window_rejects_bad_grids(tiny_capture):
    bad = A.YardstickConfig(lengths=(8, 16), rows=(10, 20), n_grid=(1, 16), temperatures=(1.0,),
                            jacobian_rows=(5,))
    with pytest.raises(ValueError, match="below the shortest row"):
        A.measure_window(tiny_capture, ["softmax"], bad)
    bad_t = A.YardstickConfig(lengths=(8, 16), rows=(30,), n_grid=(1, 2), temperatures=(0.0,),
                              jacobian_rows=(5,))
    with pytest.raises(ValueError, match="T must be > 0"):
        A.measure_window(tiny_capture, ["softmax"], bad_t)
