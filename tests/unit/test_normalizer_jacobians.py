"""Tests of normlimits.metrics.normalizer_jacobians: exact Jacobians, spectral norms, products, worst cases."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normlimits.experiments import alternatives as A
from normlimits.metrics import jacobian as J
from normlimits.metrics import normalizer_jacobians as NJ
from normlimits.metrics.normalizers import (
    NORMALIZERS, sink_normalizer, softmax_one, ssmax_gamma_normalizer)

NEG_INF = float("-inf")
#: every registered normaliser plus the variants the chapter builds (a sink, another SSMax scale)
VARIANTS = {**NORMALIZERS, "sink": sink_normalizer(0.7, key="sink"), "ssmax-g": ssmax_gamma_normalizer(0.6)}
NAMES = list(VARIANTS)


def masked_logits(rows=5, keys=8, seed=0, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(rows, keys, generator=gen, dtype=torch.float64)
    visible = torch.arange(keys)[None, :] <= (torch.arange(rows)[:, None] * 2 + 1) % keys
    return z.masked_fill(~visible, NEG_INF)


# ------------------------------------------------------------------------------- yardstick 4
@pytest.mark.parametrize("name", [k for k in NAMES if k not in ("adaptive", "sa-softmax")])
@pytest.mark.parametrize("temperature", [0.2, 1.0, 5.0])
def test_exact_jacobian_equals_autograd(name, temperature):
    z = masked_logits(seed=1)
    exact = NJ.exact_jacobian(VARIANTS[name], z, temperature)
    dense = NJ.dense_jacobian(VARIANTS[name], z, temperature)
    assert torch.allclose(exact, dense, atol=1e-12)


def test_exact_jacobian_absent_without_closed_form():
    z = masked_logits()
    assert NJ.exact_jacobian("adaptive", z) is None
    assert NJ.exact_jacobian("sa-softmax", z) is None


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("temperature", [0.1, 1.0])
def test_jacobian_norm_equals_dense_spectral_norm(name, temperature):
    z = masked_logits(rows=6, keys=9, seed=2)
    dense = NJ.dense_jacobian(VARIANTS[name], z, temperature)
    reference = torch.linalg.matrix_norm(dense, ord=2)
    ours = NJ.jacobian_norm(VARIANTS[name], z, temperature)
    assert torch.allclose(ours, reference, rtol=1e-7, atol=1e-12)


@pytest.mark.parametrize("name", ["softmax", "ssmax", "softmax1", "adaptive", "sa-softmax",
                                  "softpick", "stickbreaking", "sigmoid"])
def test_lanczos_agrees_with_exact_norms(name):
    z = masked_logits(rows=6, keys=9, seed=3)
    reference = torch.linalg.matrix_norm(NJ.dense_jacobian(name, z, 0.5), ord=2)
    for method in ("auto", "autograd"):
        estimate = NJ.lanczos_norm(name, z, 0.5, method=method)       # steps >= keys: exact
        assert bool((estimate <= reference * (1 + 1e-9)).all())
        assert torch.allclose(estimate, reference, rtol=1e-9)


@pytest.mark.parametrize("name", ["adaptive", "sa-softmax", "softpick", "stickbreaking"])
def test_lanczos_converges_on_long_rows(name):
    """Long rows (300 keys), few steps: a lower bound within 1e-6 of the dense norm."""
    z = torch.cat([masked_logits(rows=4, keys=300, seed=13, scale=sc) for sc in (0.5, 2.0, 6.0)])
    reference = torch.linalg.matrix_norm(NJ.dense_jacobian(name, z, 1.0), ord=2)
    estimate = NJ.lanczos_norm(name, z, 1.0, steps=32)
    assert bool((estimate <= reference * (1 + 1e-9)).all())
    assert torch.allclose(estimate, reference, rtol=1e-6)


@pytest.mark.parametrize("name", ["adaptive", "sa-softmax", "softpick", "stickbreaking"])
@pytest.mark.parametrize("temperature", [0.3, 1.0])
def test_closed_form_products_equal_autograd(name, temperature):
    gen = torch.Generator().manual_seed(9)
    # scales that put the adaptive rows in beta's active region (entropy in (0.85, 5.9))
    z = torch.cat([masked_logits(rows=6, keys=40, seed=8, scale=s) for s in (0.3, 1.0, 3.0)])
    v = torch.randn(z.shape, generator=gen, dtype=torch.float64)
    u = torch.randn(z.shape, generator=gen, dtype=torch.float64)
    exact = NJ.jacobian_products(name, z, temperature, method="exact")
    auto = NJ.jacobian_products(name, z, temperature, method="autograd")
    vis = torch.isfinite(z)
    v, u = torch.where(vis, v, 0.0), torch.where(vis, u, 0.0)
    assert torch.allclose(exact[0](v), auto[0](v), atol=1e-12)
    assert torch.allclose(exact[1](u), auto[1](u), atol=1e-12)
    if name == "adaptive":
        from normlimits.metrics.normalizers import _entropy_masked

        _, h = _entropy_masked(torch.where(vis, z, 0.0), vis, -1)
        assert bool(((h > 0.85) & (h < 5.9)).any())       # the beta' term was exercised


def test_products_method_validation():
    z = masked_logits()
    with pytest.raises(ValueError, match="method must be"):
        NJ.jacobian_products("adaptive", z, method="dense")
    with pytest.raises(ValueError, match="no closed-form"):
        NJ.jacobian_products("softmax1", z, method="exact")
    jv, _ = NJ.jacobian_products("softmax1", z, method="auto")       # autograd fallback
    assert torch.isfinite(jv(torch.where(torch.isfinite(z), 1.0, 0.0).double())).all()


def test_batched_temperatures_match_one_at_a_time():
    z = masked_logits(rows=4, keys=7, seed=6)
    cfg = A.YardstickConfig(lengths=(2,), rows=(6,), n_grid=(1,), temperatures=(0.1, 1.0, 3.0),
                            jacobian_rows=(6,))
    for name in ("adaptive", "sa-softmax", "softmax", "softpick", "stickbreaking"):
        batched = A._norms_over_temperatures(NORMALIZERS[name], z, cfg)
        single = torch.stack([NJ.jacobian_norm(name, z, t) for t in cfg.temperatures])
        assert torch.allclose(batched, single, rtol=1e-9)


def test_substochastic_top_eigenvalue():
    gen = torch.Generator().manual_seed(4)
    z = 3 * torch.randn(50, 7, generator=gen, dtype=torch.float64)
    a = softmax_one(z)
    a[0] = torch.tensor([0.3, 0.3, 0.1, 0, 0, 0, 0], dtype=torch.float64)    # tie
    a[1] = torch.tensor([0.6, 0, 0, 0, 0, 0, 0], dtype=torch.float64)        # single key
    ref = torch.linalg.eigvalsh(torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2))[..., -1]
    assert torch.allclose(NJ.substochastic_top_eigenvalue(a), ref, atol=1e-14)
    # rows summing to 1 agree with the jacobian module's eigenvalue
    p = torch.softmax(z, -1)
    assert torch.allclose(NJ.substochastic_top_eigenvalue(p), J.top_eigenvalue(p), atol=1e-13)
    with pytest.raises(ValueError, match="sum <= 1"):
        NJ.substochastic_top_eigenvalue(torch.tensor([0.7, 0.7], dtype=torch.float64))


@pytest.mark.parametrize("scale", [0.3, 3.0, 30.0, 300.0])
def test_substochastic_top_eigenvalue_long_and_extreme_rows(scale):
    gen = torch.Generator().manual_seed(5)
    z = scale * torch.randn(20, 300, generator=gen, dtype=torch.float64)
    a = softmax_one(z)                       # includes subnormal weights at large scales
    ref = torch.linalg.eigvalsh(torch.diag_embed(a) - a.unsqueeze(-1) * a.unsqueeze(-2))[..., -1]
    ours = NJ.substochastic_top_eigenvalue(a)
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
    assert abs(float(NJ.jacobian_norm("softmax", z, t)) - 1 / (2 * t)) < 1e-9 / t
    assert abs(float(NJ.jacobian_norm("sparsemax", z, t)) - 1 / t) < 1e-12 / t
    assert abs(float(NJ.jacobian_norm("entmax15", z, t)) - 1 / (math.sqrt(2) * t)) < 1e-9 / t
    c = math.log(6) / math.log(32)
    assert abs(float(NJ.jacobian_norm("ssmax", z, t)) - c / (2 * t)) < 1e-9 / t
    # softmax_1 and the adaptive temperature approach 1/(2T) at a tie of large logits
    assert abs(float(NJ.jacobian_norm("softmax1", z, t)) - 1 / (2 * t)) < 1e-6 / t
    assert abs(float(NJ.jacobian_norm("adaptive", z, t)) - 1 / (2 * t)) < 1e-6 / t
    assert float(NJ.jacobian_norm("sa-softmax", z, t)) >= 1 / (2 * t) - 1.0
    assert abs(float(NJ.jacobian_norm("topk-sqrt", z, t)) - 1 / (2 * t)) < 1e-9 / t
    assert abs(float(NJ.jacobian_norm(VARIANTS["sink"], z, t)) - 1 / (2 * t)) < 1e-6 / t
    c = float(NJ.NZ.asentmax_scale(torch.tensor(6.0)))
    assert abs(float(NJ.jacobian_norm("asentmax", z, t)) - c / (math.sqrt(2) * t)) < 1e-9 / t
    # sigmoid: 1/(4T) at a logit of log n; stick-breaking: 1/(4T) for one key at 0
    at_log_n = torch.tensor([math.log(3) * t, -40.0, -40.0], dtype=torch.float64)
    assert abs(float(NJ.jacobian_norm("sigmoid", at_log_n, t)) - 1 / (4 * t)) < 1e-9 / t
    one = torch.tensor([0.0, NEG_INF], dtype=torch.float64)
    assert abs(float(NJ.jacobian_norm("stickbreaking", one, t)) - 1 / (4 * t)) < 1e-9 / t
    for name in NAMES:
        bounds = NJ.worst_case_jacobian(VARIANTS[name], t, n=6)
        assert bounds["lower"] <= bounds["upper"]


@pytest.mark.parametrize("eps", [1e-1, 1e-2, 1e-3])
def test_softpick_jacobian_is_unbounded(eps):
    """Two keys tied at a logit eps > 0: the norm grows like 1/(2 eps) (theory: d w_1/d z_1 =
    (eps + 2)/(8 eps)), so softpick has no worst case."""
    z = torch.tensor([eps, eps], dtype=torch.float64)
    norm = float(NJ.jacobian_norm("softpick", z, 1.0))
    assert norm >= (eps + 2) / (8 * eps) * (1 - 1e-6)
    assert NJ.worst_case_jacobian("softpick", 1.0)["lower"] == float("inf")


@given(st.integers(2, 30), st.floats(0.05, 10.0), st.integers(0, 10_000), st.floats(0.1, 20.0))
@settings(max_examples=60, deadline=None)
def test_worst_case_upper_bounds_hold(keys, temperature, seed, scale):
    gen = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(8, keys, generator=gen, dtype=torch.float64)
    for name in ("softmax", "sparsemax", "entmax15", "ssmax", "softmax1", "sigmoid", "topk-sqrt",
                 "topk-log2", "asentmax", "sink"):
        upper = NJ.worst_case_jacobian(VARIANTS[name], temperature, n=keys)["upper"]
        assert float(NJ.jacobian_norm(VARIANTS[name], z, temperature).max()) <= upper * (1 + 1e-9)
    # 1.5-entmax: numerically never above its two-way-tie value 1/(sqrt 2 T)
    entmax_top = float(NJ.jacobian_norm("entmax15", z, temperature).max())
    assert entmax_top <= (1 + 1e-9) / (math.sqrt(2) * temperature)


def test_worst_case_needs_n_for_length_aware_ones_and_unknown_functions_are_refused():
    with pytest.raises(ValueError, match="pass n"):
        NJ.worst_case_jacobian("ssmax", 1.0)
    with pytest.raises(ValueError, match="pass n"):
        NJ.worst_case_jacobian("asentmax", 1.0)
    from normlimits.metrics.normalizers import Normalizer

    odd = Normalizer("odd", "odd", lambda z, dim=-1, n=None: z, "x", "x", True, False, False)
    with pytest.raises(ValueError, match="no Jacobian"):
        NJ.family(odd)


