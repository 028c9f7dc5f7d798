"""Tests for the softmax Jacobian, its exact norm, the finite-difference sensitivity (Fig. 4) and
the sympy derivations of the gradient chapter (Lemma 2, Corollary 3, the sqrt(5) eps example)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import sympy as sp
import torch
from hypothesis import given, settings, strategies as st

from normlimits.metrics import jacobian as J
from normlimits.theory import jacobian as TJ
from test_edges import exact_g

SEEDS = st.integers(min_value=0, max_value=2**31 - 1)
SCALES = st.floats(min_value=1e-3, max_value=50.0, allow_nan=False)
TEMPS = st.floats(min_value=1e-3, max_value=1e2, allow_nan=False)
SIZES = st.integers(min_value=2, max_value=40)


def random_weights(seed: int, rows: int, size: int, scale: float, masked: bool = False) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(rows, size, dtype=torch.float64, generator=gen)
    if masked:  # causal-style: row r sees the first r % size + 1 keys
        visible = torch.arange(size)[None, :] <= (torch.arange(rows) % size)[:, None]
        logits = logits.masked_fill(~visible, float("-inf"))
    return torch.softmax(logits, -1)


def eig_top(weights: torch.Tensor) -> torch.Tensor:
    a = weights.double()
    m = torch.diag_embed(a) - a[..., :, None] * a[..., None, :]
    return torch.linalg.eigvalsh(m)[..., -1]


def _row_norm_reference(a: torch.Tensor, t: float) -> torch.Tensor:
    """||row_i|| = a_i sqrt((sum_{j!=i} a_j)^2 + sum_{j!=i} a_j^2) / T with explicit sums over the
    other keys, the root taken in log space (no squares of tiny weights)."""
    size = a.shape[-1]
    eye = torch.eye(size, dtype=torch.bool)
    others = a.unsqueeze(-2).expand(*a.shape[:-1], size, size).masked_fill(eye, 0.0)
    terms = torch.cat([others.sum(-1, keepdim=True), others], -1).log()     # log of every term
    return a * torch.exp(0.5 * torch.logsumexp(2 * terms, -1)) / t


# ----------------------------------------------------------------------------- exact Jacobian

@settings(max_examples=30, deadline=None)
@given(seed=SEEDS, size=SIZES, t=TEMPS)
def test_softmax_jacobian_matches_autograd(seed, size, t):
    gen = torch.Generator().manual_seed(seed)
    logits = 3 * torch.randn(size, dtype=torch.float64, generator=gen)
    auto = torch.autograd.functional.jacobian(lambda l: torch.softmax(l / t, -1), logits)
    analytic = J.softmax_jacobian(torch.softmax(logits / t, -1), t)
    assert torch.allclose(analytic, auto, rtol=1e-10, atol=1e-12 / t)


def test_softmax_jacobian_batched_shape_and_symmetry():
    a = random_weights(0, 12, 7, 2.0).reshape(3, 4, 7)
    jac = J.softmax_jacobian(a, 0.5)
    assert jac.shape == (3, 4, 7, 7)
    assert torch.allclose(jac, jac.transpose(-1, -2))
    assert torch.allclose(jac.sum(-1), torch.zeros(3, 4, 7, dtype=torch.float64), atol=1e-15)


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, size=SIZES)
def test_general_jacobian_matches_autograd(seed, size):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(size, dtype=torch.float64, generator=gen)
    maps = {
        "softplus": (torch.nn.functional.softplus, torch.sigmoid),
        "square+1": (lambda l: l * l + 1, lambda l: 2 * l),
        "exp/0.3": (lambda l: torch.exp(l / 0.3), lambda l: torch.exp(l / 0.3) / 0.3),
    }
    for f, df in maps.values():
        auto = torch.autograd.functional.jacobian(lambda l: f(l) / f(l).sum(), logits)
        analytic = J.general_jacobian(f(logits), df(logits))
        assert torch.allclose(analytic, auto, rtol=1e-10, atol=1e-12)


def test_general_jacobian_of_exp_is_softmax_jacobian():
    logits = torch.randn(5, 9, dtype=torch.float64)
    t = 0.7
    f = torch.exp(logits / t)
    assert torch.allclose(J.general_jacobian(f, f / t), J.softmax_jacobian(torch.softmax(logits / t, -1), t))


def test_general_jacobian_errors():
    with pytest.raises(ValueError, match="same shape"):
        J.general_jacobian(torch.ones(3), torch.ones(4))
    with pytest.raises(ValueError, match="positive"):
        J.general_jacobian(torch.tensor([1.0, 0.0]), torch.ones(2))


# ----------------------------------------------------------------------------- exact spectral norm

@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, size=SIZES, scale=SCALES, masked=st.booleans())
def test_top_eigenvalue_matches_eigvalsh(seed, size, scale, masked):
    a = random_weights(seed, 16, size, scale, masked)
    lam = J.top_eigenvalue(a)
    ref = eig_top(a)
    # eigvalsh is accurate to ~1e-16 absolutely; the secular solve is at least as accurate.
    assert torch.allclose(lam, ref, rtol=1e-9, atol=1e-14)


def test_top_eigenvalue_is_relatively_exact_for_tiny_values():
    """Nearly one-hot rows: eigvalsh cannot resolve lambda_max ~ 1e-12; compare with 50-digit mpmath."""
    import mpmath

    mpmath.mp.dps = 50
    two = torch.tensor([[1 - 1e-12, 1e-12, 0.0]], dtype=torch.float64)
    assert float(J.top_eigenvalue(two)) == pytest.approx(2e-12 * (1 - 1e-12), rel=1e-10)  # 2p(1-p)
    # denormal second weight (softmax at very low temperature): no overflow, still 2p(1-p)
    denormal = torch.tensor([[1.0, 1e-310, 3e-311, 0.0]], dtype=torch.float64)
    lam = float(J.top_eigenvalue(denormal, validate=False))
    assert math.isfinite(lam) and lam > 2e-310
    hard = torch.softmax(torch.tensor([[0.0, -0.71, -0.9, -5.0]], dtype=torch.float64) / 1e-3, -1)
    assert bool(torch.isfinite(J.top_eigenvalue(hard, validate=False)).all())
    for row in ([1 - 2e-12 - 1e-15, 2e-12, 1e-15], [1 - 3e-9, 1e-9, 1e-9, 1e-9], [0.999, 5e-4, 3e-4, 2e-4]):
        a = torch.tensor([row], dtype=torch.float64)
        a = a / a.sum()
        am = [mpmath.mpf(float(x)) for x in a[0]]
        m = mpmath.matrix([[(am[i] if i == j else 0) - am[i] * am[j] for j in range(len(am))] for i in range(len(am))])
        ref = max(mpmath.eigsy(m)[0])
        assert float(J.top_eigenvalue(a)) == pytest.approx(float(ref), rel=1e-9)


def test_top_eigenvalue_ties_one_hot_and_single_key():
    a = torch.tensor([[0.5, 0.5, 0.0], [0.4, 0.4, 0.2], [1.0, 0.0, 0.0], [0.3, 0.3, 0.4]], dtype=torch.float64)
    assert torch.allclose(J.top_eigenvalue(a), eig_top(a), atol=1e-15)
    assert float(J.top_eigenvalue(torch.ones(2, 1))[0]) == 0.0
    uniform = torch.full((1, 8), 1 / 8, dtype=torch.float64)
    assert float(J.top_eigenvalue(uniform)) == pytest.approx(1 / 8, rel=1e-12)


def test_top_eigenvalue_accepts_float32_and_renormalises():
    a = random_weights(3, 32, 50, 4.0).float()
    assert torch.allclose(J.top_eigenvalue(a), eig_top(a.double() / a.double().sum(-1, keepdim=True)),
                          rtol=1e-9, atol=1e-14)


def test_top_eigenvalue_rejects_bad_rows():
    with pytest.raises(ValueError, match="non-negative"):
        J.top_eigenvalue(torch.tensor([[0.5, -0.1, 0.6]]))
    with pytest.raises(ValueError, match="positive mass"):
        J.top_eigenvalue(torch.zeros(1, 3))


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, size=SIZES, scale=SCALES, t=TEMPS, masked=st.booleans())
def test_spectral_norm_bounds_hold(seed, size, scale, t, masked):
    """Corollary 3 corrected: a_(2)/T <= ||J|| <= min(a_(1), 2 max a(1-a))/T <= 1/(2T)."""
    a = random_weights(seed, 16, size, scale, masked)
    norm = J.softmax_jacobian_norm(a, t)
    lower, upper = J.spectral_norm_bounds(a, t)
    slack = 1e-12 / t
    assert bool((lower <= norm + slack).all())
    assert bool((norm <= upper + slack).all())
    assert bool((upper <= 1 / (2 * t) + slack).all())
    # the row norms and diagonal entries have their own tight constants
    rows = J.softmax_jacobian_row_norms(a, t)
    assert bool((rows <= math.sqrt(2) / (4 * t) + slack).all())
    assert bool((rows <= norm.unsqueeze(-1) + slack).all())       # a row norm never exceeds ||J||
    diag = torch.diagonal(J.softmax_jacobian(a, t), dim1=-2, dim2=-1)
    assert bool((diag <= 1 / (4 * t) + slack).all())
    assert torch.allclose(rows, _row_norm_reference(a, t), rtol=1e-10, atol=1e-300)
    assert torch.allclose(rows, J.softmax_jacobian(a, t).norm(dim=-1), rtol=1e-6, atol=1e-12 / t)


def test_constants_attained_at_the_two_way_tie():
    t = 0.25
    tie = torch.tensor([[0.5, 0.5, 0.0, 0.0]], dtype=torch.float64)
    assert float(J.softmax_jacobian_norm(tie, t)) == pytest.approx(1 / (2 * t), rel=1e-14)
    assert float(torch.linalg.matrix_norm(J.softmax_jacobian(tie, t), ord=2)) == pytest.approx(1 / (2 * t))
    assert float(J.softmax_jacobian_row_norms(tie, t).max()) == pytest.approx(math.sqrt(2) / (4 * t))
    assert float(torch.diagonal(J.softmax_jacobian(tie, t), dim1=-2, dim2=-1).max()) == pytest.approx(1 / (4 * t))
    # the paper's curve is not an upper bound: at this T the true norm exceeds min(1/(4T), sqrt 2)
    assert float(J.softmax_jacobian_norm(tie, t)) > float(J.paper_curve([t])[0])


def test_tie_logits_attain_the_norm_via_autograd():
    """At logits (c, c, -inf...) autograd's Jacobian has spectral norm exactly 1/(2T)."""
    t = 0.1
    logits = torch.tensor([1.3, 1.3, -2.0, -9.0], dtype=torch.float64)
    auto = torch.autograd.functional.jacobian(lambda l: torch.softmax(l / t, -1), logits)
    norm = float(torch.linalg.matrix_norm(auto, ord=2))
    assert norm == pytest.approx(float(J.softmax_jacobian_norm(torch.softmax(logits / t, -1), t)), rel=1e-12)
    assert norm == pytest.approx(1 / (2 * t), rel=1e-6)


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, size=SIZES, t=TEMPS)
def test_spectral_norm_matches_autograd_matrix_norm(seed, size, t):
    gen = torch.Generator().manual_seed(seed)
    logits = 2 * torch.randn(size, dtype=torch.float64, generator=gen)
    auto = torch.autograd.functional.jacobian(lambda l: torch.softmax(l / t, -1), logits)
    ref = float(torch.linalg.matrix_norm(auto, ord=2))
    assert float(J.softmax_jacobian_norm(torch.softmax(logits / t, -1), t)) == pytest.approx(ref, rel=1e-8, abs=1e-14 / t)


# ----------------------------------------------------------------------------- Lemma 2 bounds

@settings(max_examples=30, deadline=None)
@given(seed=SEEDS, size=SIZES)
def test_lemma2_and_log_derivative_bounds_hold(seed, size):
    gen = torch.Generator().manual_seed(seed)
    logits = torch.randn(8, size, dtype=torch.float64, generator=gen)
    maps = {
        "softplus": (torch.nn.functional.softplus, torch.sigmoid),
        "square+0.01": (lambda l: l * l + 0.01, lambda l: 2 * l),
        "exp/0.2": (lambda l: torch.exp(l / 0.2), lambda l: torch.exp(l / 0.2) / 0.2),
    }
    for f, df in maps.values():
        values, derivs = f(logits), df(logits)
        norm = torch.linalg.matrix_norm(J.general_jacobian(values, derivs), ord=2)
        first, second = J.lemma2_bound(values, derivs)
        sharp = J.log_derivative_bound(values, derivs)
        assert bool((norm <= first * (1 + 1e-10)).all())
        assert bool((first <= second * (1 + 1e-10)).all())
        assert bool((norm <= sharp * (1 + 1e-10) + 1e-14).all())
        assert bool((sharp <= 0.5 * (derivs / values).abs().amax(-1) * (1 + 1e-12)).all())


def test_log_derivative_bound_is_the_softmax_norm():
    logits = torch.randn(6, 30, dtype=torch.float64)
    t = 0.3
    f = torch.exp(logits / t)
    assert torch.allclose(J.log_derivative_bound(f, f / t),
                          J.softmax_jacobian_norm(torch.softmax(logits / t, -1), t), rtol=1e-10)


def test_min_f_bound_blows_up_while_softmax_norm_vanishes():
    """L2's reading: min F -> 0 inflates the bound, yet the softmax norm goes to 0."""
    t = 1.0
    spreads = [1.0, 10.0, 40.0]
    norms, seconds = [], []
    for s in spreads:
        logits = torch.tensor([[0.0, -s, -s, -s]], dtype=torch.float64)
        f = torch.exp(logits / t)
        norms.append(float(J.softmax_jacobian_norm(torch.softmax(logits / t, -1), t)))
        seconds.append(float(J.lemma2_bound(f, f / t)[1]))
    assert norms[0] > norms[1] > norms[2] and norms[2] < 1e-15
    assert seconds[0] < seconds[1] < seconds[2] and seconds[2] > 1e30


# ----------------------------------------------------------------------------- finite differences

def test_random_unit_directions_are_unit_on_visible_keys():
    logits = torch.randn(3, 5, 9)
    logits[..., 4:] = float("-inf")
    v = J.random_unit_directions(logits, torch.Generator().manual_seed(1))
    assert torch.allclose(v.norm(dim=-1), torch.ones(3, 5, dtype=torch.float64))
    assert bool((v[..., 4:] == 0).all())


def test_finite_difference_matches_a_loop_reference():
    gen = torch.Generator().manual_seed(0)
    logits = 2 * torch.randn(2, 3, 11, generator=gen)
    logits[..., 7:] = float("-inf")
    v = J.random_unit_directions(logits, gen)
    temps, epss = [0.01, 0.3, 2.0], [1e-3, 0.1, 10.0]
    g = J.finite_difference_sensitivity(logits, temps, epss, v, chunk_elements=50)  # forces chunks
    assert g.shape == (3, 3, 2, 3)
    for i, t in enumerate(temps):
        for k, e in enumerate(epss):
            for h in range(2):
                for r in range(3):
                    # brute force in mpmath (tests/unit/test_edges.py): the two-softmax difference
                    # in float64 loses the top weight's change on rows like [h=1, r=1] at T = 0.01
                    ref = exact_g(logits[h, r].double(), v[h, r], t, e)
                    assert float(g[i, k, h, r]) == pytest.approx(ref, rel=1e-12, abs=1e-300)


@settings(max_examples=30, deadline=None)
@given(seed=SEEDS, size=SIZES, scale=SCALES)
def test_finite_difference_respects_the_corrected_envelope(seed, size, scale):
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(4, size, dtype=torch.float64, generator=gen)
    v = J.random_unit_directions(logits, gen)
    temps = J.default_temperatures(2)
    epss = [1e-3, 1e-1, 10.0]
    g = J.finite_difference_sensitivity(logits, temps, epss, v)
    for k, e in enumerate(epss):
        env = J.sensitivity_envelope(temps, e)
        assert bool((g[:, k] <= env[:, None] * (1 + 1e-9) + 1e-12).all())


def test_small_epsilon_converges_to_the_linearisation():
    gen = torch.Generator().manual_seed(4)
    logits = torch.randn(5, 20, dtype=torch.float64, generator=gen)
    v = J.random_unit_directions(logits, gen)
    t = 0.5
    g = J.finite_difference_sensitivity(logits, [t], [1e-6], v)[0, 0]
    lin = J.linearised_sensitivity(torch.softmax(logits / t, -1), v, t)
    assert torch.allclose(g, lin, rtol=1e-4)
    assert bool((lin <= J.softmax_jacobian_norm(torch.softmax(logits / t, -1), t) * (1 + 1e-12)).all())


def test_g_attains_the_envelope_at_the_tie_along_the_top_eigenvector():
    t = 0.05
    logits = torch.tensor([[0.0, 0.0, -50.0]], dtype=torch.float64)
    v = torch.tensor([[1.0, -1.0, 0.0]], dtype=torch.float64) / math.sqrt(2)
    g_small = float(J.finite_difference_sensitivity(logits, [t], [1e-7], v)[0, 0, 0])
    assert g_small == pytest.approx(1 / (2 * t), rel=1e-6)
    # key 2 just ahead (base weights one-hot on it); the perturbation makes key 1 win: a full swap
    ahead = torch.tensor([[0.0, 1e-3, -50.0]], dtype=torch.float64)
    g_big = float(J.finite_difference_sensitivity(ahead, [1e-6], [10.0], v)[0, 0, 0])
    assert g_big == pytest.approx(math.sqrt(2) / 10.0, rel=1e-9)  # the simplex's diameter / eps


def test_envelopes_and_grid():
    temps = J.default_temperatures(4)
    assert temps.numel() == 21 and float(temps[0]) == pytest.approx(1e-3) and float(temps[-1]) == pytest.approx(100)
    assert torch.allclose(J.paper_curve(temps), torch.minimum(1 / (4 * temps), torch.tensor(math.sqrt(2), dtype=torch.float64)))
    env = J.sensitivity_envelope(temps, 0.1)
    assert float(env[0]) == pytest.approx(math.sqrt(2) / 0.1) and float(env[-1]) == pytest.approx(1 / 200)


@pytest.mark.parametrize("bad", [0.0, -1.0, float("nan")])
def test_bad_temperature_and_epsilon_are_clear_errors(bad):
    with pytest.raises(ValueError, match="temperature T must be > 0"):
        J.softmax_jacobian_norm(torch.ones(1, 2) / 2, bad)
    with pytest.raises(ValueError, match="epsilon"):
        J.sensitivity_envelope([1.0], bad)
    with pytest.raises(ValueError, match="temperature"):
        J.finite_difference_sensitivity(torch.zeros(1, 2), [1.0, bad], [0.1], torch.ones(1, 2) / 2 ** 0.5)


# ----------------------------------------------------------------------------- profiles

def _causal_block(seed, heads=(2, 3), rows=None, length=24, scale=3.0):
    gen = torch.Generator().manual_seed(seed)
    rows = torch.arange(length) if rows is None else torch.as_tensor(rows)
    logits = scale * torch.randn(*heads, len(rows), length, generator=gen)
    future = torch.arange(length)[None, :] > rows[:, None]
    return logits.masked_fill(future, float("-inf")), rows


def test_sensitivity_profile_equals_a_direct_computation():
    blocks = [_causal_block(s, rows=[3, 10, 17, 23])[0] for s in (0, 1)]
    temps, epss = [0.01, 1.0, 30.0], [1e-3, 10.0]
    prof = J.sensitivity_profile(blocks, temps, epss, seed=5, row_chunk=3)
    gen = torch.Generator().manual_seed(5)
    g_sum = 0
    n_sum = 0
    nmax = None
    for b in blocks:
        v = J.random_unit_directions(b, gen)
        g_sum = g_sum + J.finite_difference_sensitivity(b, temps, epss, v).sum(-1)
        norms = torch.stack([J.softmax_jacobian_norm(torch.softmax(b.double() / t, -1), t) for t in temps])
        n_sum = n_sum + norms.sum(-1)
        nmax = norms.amax(-1) if nmax is None else torch.maximum(nmax, norms.amax(-1))
    assert prof.g.shape == (3, 2, 2, 3) and prof.rows == 8 and prof.windows == 2
    assert torch.allclose(prof.g, g_sum / 8, rtol=1e-10)
    assert torch.allclose(prof.norm_mean, n_sum / 8, rtol=1e-10)
    assert torch.allclose(prof.norm_max, nmax, rtol=1e-12)
    assert prof.head_max("g").shape == (3, 2) and prof.head_max("norm_mean").shape == (3,)


def test_default_rows():
    rows = J.default_rows(1024, 64)
    assert len(rows) == 64 and int(rows[-1]) == 1023 and int(rows[0]) == 15
    assert bool((rows[1:] > rows[:-1]).all())
    with pytest.raises(ValueError):
        J.default_rows(1)


# ----------------------------------------------------------------------------- sympy derivations

def test_sympy_softmax_jacobian_closes():
    d = TJ.softmax_jacobian(3)
    assert d.closes and d.symmetric


def test_sympy_general_jacobian_and_factorisation_close():
    d = TJ.general_jacobian(3)
    assert d.closes and d.factor_closes


def test_sympy_spectral_bound_certificate():
    b = TJ.spectral_bound(3)
    assert b.variance_closes and b.certificate_closes and b.quarter_closes and b.tie_vector_closes
    assert b.tie_argmax == sp.Rational(1, 2) and b.tie_max == sp.Rational(1, 2)
    assert set(b.tie_eigenvalues) == {0, sp.expand(2 * TJ.p * (1 - TJ.p))} or \
        {sp.expand(e) for e in b.tie_eigenvalues} == {0, sp.expand(2 * TJ.p * (1 - TJ.p))}
    # the certificate is a manifest sum of squares with non-negative weights
    for term in sp.Add.make_args(sp.expand(b.certificate, deep=False)):
        assert term.is_nonnegative


def test_sympy_row_and_diagonal_bounds():
    r = TJ.row_bound(4)
    assert r.gap_closes and r.argmax == sp.Rational(1, 2) and r.maximum == sp.Rational(1, 8)
    assert sp.simplify(r.norm_bound - sp.sqrt(2) / (4 * TJ.T)) == 0
    assert sp.simplify(r.tie_value - sp.sqrt(2) / 4) == 0
    d = TJ.diagonal_bound()
    assert d.argmax == sp.Rational(1, 2) and sp.simplify(d.maximum - 1 / (4 * TJ.T)) == 0


def test_sympy_lemma2_chain():
    l2 = TJ.lemma2()
    assert l2.second_closes and l2.softmax_second_closes
    assert l2.d_first_d_S.is_nonpositive and l2.d_first_d_A.is_nonnegative
    assert sp.simplify(l2.tie_first - 1 / TJ.T) == 0   # twice the true 1/(2T) at the tie


def test_sympy_sqrt_five_example():
    ex = TJ.sqrt_five_example()
    assert sp.simplify(ex.distance - sp.sqrt(5) * TJ.eps) == 0
    assert sp.simplify(ex.leading - 3 * sp.sqrt(2) * TJ.eps / (4 * TJ.T)) == 0
    assert ex.linearised_closes
    assert ex.saturation == sp.sqrt(2)
    assert float(ex.ratio * TJ.T) < 0.5      # below the sharp bound 1/(2T)
    # numeric check of the exact change against torch
    t, e = 0.2, 0.05
    l1 = torch.tensor([1 + e, 1.0], dtype=torch.float64)
    l2 = torch.tensor([1 - e, 1 + e], dtype=torch.float64)
    change = float((torch.softmax(l1 / t, -1) - torch.softmax(l2 / t, -1)).norm())
    assert change == pytest.approx(float(ex.change.subs({TJ.eps: e, TJ.T: t})), rel=1e-12)


def test_sympy_rejects_too_few_keys():
    with pytest.raises(ValueError, match="n = 2"):
        TJ.softmax_jacobian(1)


def test_sympy_secular_tail():
    tail = TJ.secular_tail()
    assert tail.remainder_closes and tail.pole_first_two and tail.pole_gap_nonnegative
    c1, c2 = sp.symbols("c_1 c_2", positive=True)
    assert sp.simplify(tail.pole_gap - c1 * c2 * (c1 - c2) ** 2 / (c1 + c2)) == 0


# ----------------------------------------------------------------------------- underflow (issue 13, item 6)

def test_row_norms_keep_a_remaining_mass_of_1e_200():
    """The top row's norm is ~ the remaining mass; squaring it (1e-400) must not flush it to 0."""
    import mpmath

    mpmath.mp.dps = 60
    row = [1.0, 0.5e-200, 0.3e-200, 0.2e-200, 0.0]
    a = torch.tensor([row], dtype=torch.float64)
    got = J.softmax_jacobian_row_norms(a, 0.5)
    m = [mpmath.mpf(x) for x in row]            # the float row (its sum is 1 to 1e-200)
    for i in range(5):
        rest = sum(x for k, x in enumerate(m) if k != i)
        ref = m[i] * mpmath.sqrt(rest ** 2 + sum(x ** 2 for k, x in enumerate(m) if k != i)) / mpmath.mpf(0.5)
        assert float(got[0, i]) == pytest.approx(float(ref), rel=1e-12, abs=0)
    assert float(got[0, 0]) > 2e-200                          # the old code returned exactly 0 here
    # the same holds for a softmax row whose other logits sit 460 nats below the top
    logits = torch.tensor([[0.0, -460.0, -461.0, -470.0]], dtype=torch.float64)
    w = torch.softmax(logits, -1)
    assert float(J.softmax_jacobian_row_norms(w, 1.0)[0, 0]) == pytest.approx(
        float(_row_norm_reference(w, 1.0)[0, 0]), rel=1e-12)


def test_variance_bound_sees_the_mass_of_a_nearly_one_hot_row():
    """Upper bound 2 max a_i (1 - a_i): with 1 - a_(1) computed as 1 - a_(1) (= 0 below 1e-16) it
    fell below the true norm on (1 - 2r, r, r), whose lambda_max is 3 r (1 - 2 r)."""
    r = 1e-18
    a = torch.tensor([[1 - 2 * r, r, r]], dtype=torch.float64)
    exact = float(J.top_eigenvalue(a))
    assert exact == pytest.approx(3 * r, rel=1e-12)
    lower, upper = J.spectral_norm_bounds(a, 1.0)
    assert float(lower) <= exact <= float(upper)
    assert float(upper) == pytest.approx(4 * r, rel=1e-12)


# ----------------------------------------------------------------------------- the pooled tail (issue 19)

def _adversarial_weight_rows():
    """Rows that stress the pooled solve: ties and near ties with tails of every size, one-hot,
    subnormal second weights, two keys, nearly flat rows and random sharp rows."""
    rows = []
    for rest in (0.0, 1e-300, 1e-200, 1e-20, 1e-8, 1e-3, 0.3):
        for gap in (0.0, 1e-13, 1e-6, 1e-2):
            tail = [rest / 5] * 5
            top = (1 - rest) / 2
            rows.append([top + gap / 2, top - gap / 2] + tail + [0.0])
    rows.append([1.0, 1e-310, 3e-311, 2e-320, 0, 0, 0, 0])
    rows.append([1.0, 0, 0, 0, 0, 0, 0, 0])
    rows.append([0.9, 0.1 - 7e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 2e-6])
    rows.append([1 / 8 + 1e-9] + [(1 - 1 / 8 - 1e-9) / 7] * 7)
    a = torch.tensor(rows, dtype=torch.float64)
    return a / a.sum(-1, keepdim=True)


@pytest.mark.parametrize("tail", [1e-5, 1e-3, 0.1])
def test_pooled_tail_is_within_its_stated_error_on_adversarial_rows(tail):
    a = _adversarial_weight_rows()
    exact = J.top_eigenvalue(a, tol=1e-14)
    pooled = J.top_eigenvalue(a, tol=1e-14, tail=tail)
    bound = J.secular_tail_error(tail)
    assert bool((pooled <= exact * (1 + 1e-13)).all())                       # never above
    assert bool((pooled >= exact * (1 - bound - 1e-13)).all())
    ref = eig_top(a)                                                           # LAPACK, absolute 1e-16
    assert torch.allclose(pooled, ref, rtol=bound + 1e-9, atol=1e-15)


@settings(max_examples=40, deadline=None)
@given(seed=SEEDS, size=st.integers(min_value=2, max_value=300), scale=st.floats(min_value=0.1, max_value=1e4),
       tail=st.sampled_from([1e-5, 1e-2, 0.1]), masked=st.booleans())
def test_pooled_tail_matches_the_exact_solve_on_random_rows(seed, size, scale, tail, masked):
    a = random_weights(seed, 32, size, scale, masked)
    exact = J.top_eigenvalue(a, tol=1e-14)
    pooled = J.top_eigenvalue(a, tol=1e-14, tail=tail)
    rel = torch.where(exact > 0, (exact - pooled) / exact.clamp_min(1e-300), torch.zeros_like(exact))
    assert float(rel.min()) >= -1e-13 and float(rel.max()) <= J.secular_tail_error(tail) + 1e-13


def test_pooled_tail_is_used_on_sharp_rows_and_agrees_with_mpmath():
    """Sharp rows (the pooled path runs: every fourth weight is below the threshold) against a
    50-digit eigenvalue."""
    import mpmath

    mpmath.mp.dps = 50
    gen = torch.Generator().manual_seed(11)
    logits = torch.randn(3, 24, dtype=torch.float64, generator=gen)
    logits[:, 3:] = -40 + 5 * logits[:, 3:]                                  # three keys, then a far tail
    a = torch.softmax(logits, -1)
    top4 = a.topk(4, -1).values
    assert bool((top4[:, 3] <= 1e-5 * top4[:, 1]).all())                      # the pooled regime
    got = J.top_eigenvalue(a, tail=1e-5)
    for i in range(a.shape[0]):
        am = [mpmath.mpf(float(x)) for x in a[i]]
        m = mpmath.matrix([[(am[p] if p == q else 0) - am[p] * am[q] for q in range(24)] for p in range(24)])
        ref = max(mpmath.eigsy(m)[0])
        assert float(got[i]) == pytest.approx(float(ref), rel=1e-10 + 1e-12)


@pytest.mark.parametrize("sharp_share", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_pooled_tail_in_mixed_calls_stays_within_its_error(sharp_share):
    """A call mixing sharp rows (pooled when they are at least half of the call) with flat,
    uniform and duplicate-weight rows (always solved over every key), in float32 and float64:
    each row, solved in the mixed call or alone, is never above the full solve and at most the
    stated relative error below it (a row written to the wrong place would fail); the uniform
    row gives 1/L. Short rows (L = 1..6): up to four keys the tail changes nothing; exact ties
    give the tie's value."""
    gen = torch.Generator().manual_seed(int(sharp_share * 100))
    n_rows, keys = 16, 40
    n_sharp = int(round(sharp_share * n_rows))
    logits = torch.randn(n_rows, keys, dtype=torch.float64, generator=gen)
    logits[:n_sharp, 3:] -= 60                                   # sharp: a far tail after three keys
    logits[n_sharp:, :] *= 0.01                                  # flat rows
    if n_sharp < n_rows:
        logits[-1] = 0.0                                         # uniform: lambda = 1/L exactly
    if n_sharp < n_rows - 1:
        logits[-2, 10:] = logits[-2, :10].repeat(3)              # duplicate weights
    a = torch.softmax(logits, -1)
    bound = J.secular_tail_error(1e-5)
    for dtype in (torch.float64, torch.float32):
        rows = a.to(dtype)
        together = J.top_eigenvalue(rows, tol=1e-14, tail=1e-5)
        alone = torch.cat([J.top_eigenvalue(rows[i:i + 1], tol=1e-14, tail=1e-5) for i in range(n_rows)])
        exact = J.top_eigenvalue(rows, tol=1e-14)
        assert bool((together <= exact * (1 + 1e-13)).all())
        assert bool((together >= exact * (1 - bound - 1e-13)).all())
        assert bool((alone <= exact * (1 + 1e-13)).all()) and bool((alone >= exact * (1 - bound - 1e-13)).all())
        if n_sharp < n_rows:
            assert float(together[-1]) == pytest.approx(1 / keys, rel=1e-12)
    for length in range(1, 7):                  # up to four keys nothing is pooled: the full solve
        w = torch.softmax(torch.randn(3, length, dtype=torch.float64, generator=gen) * 30, -1)
        pooled, full = J.top_eigenvalue(w, tail=1e-5), J.top_eigenvalue(w)
        if length <= 4:
            assert torch.equal(pooled, full)
        assert bool((pooled <= full * (1 + 1e-13)).all()) and bool((pooled >= full * (1 - bound - 1e-13)).all())
    tie = torch.tensor([[0.4, 0.4, 1e-9, 1e-9, 1e-9, 0.2 - 3e-9]], dtype=torch.float64)
    assert float(J.top_eigenvalue(tie, tail=1e-5)) == pytest.approx(float(eig_top(tie)), rel=1e-12)


def test_bad_tail_is_a_clear_error():
    with pytest.raises(ValueError, match="tail threshold must lie in"):
        J.top_eigenvalue(torch.ones(1, 6) / 6, tail=0.5)
    with pytest.raises(ValueError, match="tail"):
        J.secular_tail_error(0.0)


def test_row_stats_in_temperature_groups_equal_one_temperature_at_a_time():
    block, _ = _causal_block(3, rows=[5, 12, 23])
    gen = torch.Generator().manual_seed(2)
    v = J.random_unit_directions(block, gen)
    temps = J.default_temperatures(2)
    eps = torch.tensor([1e-3, 10.0], dtype=torch.float64)
    together = J._row_stats(block, temps, eps, v)
    one_by_one = J._row_stats(block, temps, eps, v, group_elements=1)
    for name in together:
        assert torch.allclose(together[name], one_by_one[name], rtol=1e-12, atol=0)


# ----------------------------------------------------------------------------- chapter helpers

def test_adversarial_rows_approach_but_never_pass_one_half():
    a = J.adversarial_rows(keys=4, starts=8, steps=80, seed=1)
    lam = J.top_eigenvalue(a)
    dense = torch.linalg.matrix_norm(J.softmax_jacobian(a, 1.0), ord=2)
    assert torch.allclose(lam, dense, atol=1e-12)
    assert float(lam.max()) > 0.45 and float(lam.max()) <= 0.5 + 1e-12
    with pytest.raises(ValueError, match="keys"):
        J.adversarial_rows(keys=1)


def test_lemma2_and_sqrt_five_tables():
    table = J.lemma2_table()
    assert bool((table["‖J‖₂ exact"] <= table["Lemma 2, first line"] * (1 + 1e-12)).all())
    assert bool((table["Lemma 2, first line"] <= table["Lemma 2, second line"] * (1 + 1e-12)).all())
    assert bool((table["‖J‖₂ exact"] <= table["max|F'/F| / 2"] * (1 + 1e-12)).all())
    soft = table[table["normaliser"].str.startswith("softmax")]["‖J‖₂ exact"].to_numpy()
    assert soft[0] > soft[-1]                                          # softmax's norm falls
    ex = J.sqrt_five_table()
    assert ex["‖Δℓ‖"].to_numpy() == pytest.approx(math.sqrt(5) * ex["ε"].to_numpy())
    small = ex[ex["ε/T"] <= 0.01]
    assert (small["gain / (3√2/4)"] - 1).abs().max() < 1e-3
    assert ex["gain / (3√2/4)"].max() <= 1 + 1e-9


def test_lemma2_worst_ratio_stays_below_one_and_catches_a_broken_bound(monkeypatch):
    worst = J.lemma2_worst_ratio(rows=32, keys=6, seed=2)
    assert set(worst) == {"exp(l)", "softplus(l)", "l^2 + 0.1", "1 / (1 + l^2)"}
    assert all(0 < v <= 1 + 1e-12 for v in worst.values())
    # a bound a hundred times too small is caught (ratios above 1)
    real = J.lemma2_bound
    monkeypatch.setattr(J, "lemma2_bound", lambda v, d: tuple(x / 100 for x in real(v, d)))
    assert max(J.lemma2_worst_ratio(rows=32, keys=6, seed=2).values()) > 1
    with pytest.raises(ValueError, match="rows"):
        J.lemma2_worst_ratio(rows=0)


def test_zero_temperature_sensitivity_is_flat_in_small_eps_and_capped_at_large():
    from normlimits.theory import jacobian as TJ

    z = TJ.zero_temperature_sensitivity()
    lam, sigma = (next(s for s in z.g.free_symbols if s.name == n) for n in ("lambda", "sigma"))
    assert z.small_eps_general and z.decreasing
    assert sp.simplify(z.small_eps - lam * sigma / sp.sqrt(sp.pi)) == 0
    assert sp.simplify(z.large_eps - sp.sqrt(2) / 2) == 0
    # the closed form against a direct Monte Carlo estimate of sqrt(2) P(D < eps w) / eps
    rng = np.random.default_rng(0)
    gaps, w = rng.exponential(1.0, 400_000), rng.normal(0.0, 1.0, 400_000)
    for e in (0.05, 1.0, 5.0):
        mc = math.sqrt(2) * np.mean(gaps < e * w) / e
        exact = float(z.g.subs({lam: 1, sigma: 1, TJ.eps: e}))
        assert mc == pytest.approx(exact, rel=0.03)
