"""Issue 32, "exact to rounding at the edges": the seven reproducers against exact references
(``fractions`` / ``mpmath``, computed here, never typed in) and one property test per metric on
adversarial inputs (near-ties, exact duplicates, one-hot rows, tiny remaining mass,
near-duplicate vectors) against a slow exact reference written in this file."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import mpmath
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from normlimits import distances as D
from normlimits import jacobian as J
from normlimits import readings as RD
from normlimits import separability as S
from normlimits.validation import InputError

PROPERTY = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# ------------------------------------------------------------------------ exact references

def _softmax_mp(x):
    """softmax of a list of mpf (``-inf`` masked) at the current precision."""
    finite = [xi for xi in x if xi != -mpmath.inf]
    top = max(finite)
    ex = [mpmath.exp(xi - top) if xi != -mpmath.inf else mpmath.mpf(0) for xi in x]
    total = mpmath.fsum(ex)
    return [e / total for e in ex]


def exact_g(logits, direction, temperature, epsilon):
    """``||softmax((l + eps v)/T) - softmax(l/T)|| / eps`` by brute force in mpmath, every input
    taken as the float64 it is, at a precision that resolves the smallest weight of the row
    against the largest (so 1 - a_max is not lost)."""
    l = [float(x) for x in logits]
    v = [float(x) for x in direction]
    finite = [x for x in l if math.isfinite(x)]
    spread = (max(finite) - min(finite) + 2 * epsilon * max(abs(x) for x in v)) / temperature
    with mpmath.workdps(int(60 + spread / math.log(10))):
        t, e = mpmath.mpf(temperature), mpmath.mpf(epsilon)
        lm = [mpmath.mpf(x) if math.isfinite(x) else -mpmath.inf for x in l]
        a = _softmax_mp([x / t for x in lm])
        # softmax ignores a common shift: v - v_0 (exact here) keeps a constant v's change 0
        b = _softmax_mp([(x + e * (mpmath.mpf(y) - mpmath.mpf(v[0]))) / t if x != -mpmath.inf
                         else x for x, y in zip(lm, v)])
        return float(mpmath.sqrt(mpmath.fsum((p - q) ** 2 for p, q in zip(a, b))) / e)


def exact_jv(logits, direction, temperature):
    """``||J v||`` with ``J = (diag(a) - a a^T)/T``, ``a = softmax(l/T)``, in mpmath."""
    l = [float(x) for x in logits]
    spread = (max(l) - min(l)) / temperature
    with mpmath.workdps(int(60 + spread / math.log(10))):
        t = mpmath.mpf(temperature)
        a = _softmax_mp([mpmath.mpf(x) / t for x in l])
        v = [mpmath.mpf(float(x)) - mpmath.mpf(float(direction[0])) for x in direction]
        av = mpmath.fsum(p * q for p, q in zip(a, v))       # J v is the same for v - v_0
        return float(mpmath.sqrt(mpmath.fsum((p * (q - av)) ** 2 for p, q in zip(a, v))) / t)


def _rel(x, ref):
    return abs(x - ref) / abs(ref) if ref else abs(x)


# ------------------------------------------------------------------------ 1. Figure 4's g

def test_g_on_a_one_hot_row_is_exact_at_low_temperature():
    """Reproducer 1: the issue's row (l = [0, -.5, -1, -2], v = [.5, -.5, .5, -.5]) at T = 0.01,
    where 1 - a_max is about 1e-22, and the linearisation there (the issue: 1.9288e-20 before,
    exactly 2.7277e-20)."""
    l = torch.tensor([[0.0, -0.5, -1.0, -2.0]], dtype=torch.float64)
    v = torch.tensor([[0.5, -0.5, 0.5, -0.5]], dtype=torch.float64)
    for t in (0.01, 0.03):
        for e in (1e-3, 1e-1, 10.0):
            g = float(J.finite_difference_sensitivity(l, [t], [e], v)[0, 0, 0])
            assert _rel(g, exact_g(l[0], v[0], t, e)) < 1e-13, (t, e)
    jv = float(J.linearised_sensitivity(torch.softmax(l / 0.01, -1), v, 0.01)[0])
    assert _rel(jv, exact_jv(l[0], v[0], 0.01)) < 1e-13


def test_g_where_one_other_key_carries_the_change_is_not_low_by_root_two():
    """The 29 % case: one key far ahead, one other key carries the whole change (the top
    weight's change, a difference near 1, used to be lost: g low by exactly 1/sqrt(2))."""
    l = torch.tensor([[0.0, -0.4, -9.0]], dtype=torch.float64)
    v = torch.tensor([[0.0, 1.0, 0.0]], dtype=torch.float64)
    for t in (0.01, 0.02, 0.03):
        g = float(J.finite_difference_sensitivity(l, [t], [1e-3], v)[0, 0, 0])
        assert _rel(g, exact_g(l[0], v[0], t, 1e-3)) < 1e-13, t


def test_g_at_high_temperature_has_no_cancellation():
    """The T/eps cancellation (1e-11 at T = 100, eps = 1e-3 before)."""
    gen = torch.Generator().manual_seed(3)
    l = 3 * torch.randn(4, 64, dtype=torch.float64, generator=gen)
    v = J.random_unit_directions(l, gen)
    g = J.finite_difference_sensitivity(l, [100.0], [1e-3], v)[0, 0]
    for r in range(4):
        assert _rel(float(g[r]), exact_g(l[r], v[r], 100.0, 1e-3)) < 1e-14


def test_the_direct_form_serves_rows_where_expm1_overflows():
    """eps = 10 at T = 0.01 moves eps v / T past exp's range: the stable direct form, and a key
    whose weight underflowed to 0 but whose perturbed weight is 1/2 (the identity would miss it)."""
    l = torch.tensor([[0.0, -10.0, -0.2]], dtype=torch.float64)
    v = torch.tensor([[-0.5, 0.5, 0.0]], dtype=torch.float64) * math.sqrt(2)
    for t in (1e-2, 1e-3):
        g = float(J.finite_difference_sensitivity(l, [t], [10.0], v)[0, 0, 0])
        assert _rel(g, exact_g(l[0], v[0], t, 10.0)) < 1e-13, t


_temperatures = st.sampled_from([1e-2, 0.02, 0.05, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0])


@st.composite
def adversarial_logit_rows(draw):
    """Rows of 2..9 keys: near-ties (gaps of 1e-12..1e-3), exact duplicates, one-hot rows (a key
    far ahead: remaining mass down to e^-2000) and random ones; a masked key sometimes."""
    keys = draw(st.integers(2, 9))
    kind = draw(st.sampled_from(["random", "near_tie", "duplicate", "one_hot"]))
    base = draw(st.lists(st.floats(-3, 3), min_size=keys, max_size=keys))
    if kind == "near_tie":
        gap = draw(st.sampled_from([1e-12, 1e-9, 1e-6, 1e-3]))
        base[1] = base[0] - gap
    elif kind == "duplicate":
        base[1] = base[0]
    elif kind == "one_hot":
        base[0] = max(base) + draw(st.sampled_from([0.5, 2.0, 5.0, 20.0]))
    entry = st.one_of(st.just(0.0), st.floats(1e-3, 1), st.floats(-1, -1e-3))
    v = draw(st.lists(entry, min_size=keys, max_size=keys))
    if draw(st.booleans()) and keys > 2:
        base[-1] = float("-inf")
        v[-1] = 0.0
    if not any(v):
        v[0] = 1.0
    norm = math.sqrt(sum(x * x for x in v))
    return base, [x / norm for x in v]


@PROPERTY
@given(row=adversarial_logit_rows(), t=_temperatures)
def test_property_g_matches_mpmath_on_adversarial_rows(row, t):
    """Figure 4's g against mpmath on near-ties, duplicates and one-hot rows, T in 1e-2..1e2,
    every epsilon of the chapter, and the eps -> 0 limit ||J v||."""
    l = torch.tensor([row[0]], dtype=torch.float64)
    v = torch.tensor([row[1]], dtype=torch.float64)
    eps = [1e-3, 1e-1, 10.0]
    g = J.finite_difference_sensitivity(l, [t], eps, v)[0, :, 0]
    finite = [x for x in row[0] if math.isfinite(x)]
    # l / T is rounded once on entry: relative error up to u * spread / T in each weight
    tol = 1e-14 + 4e-16 * (max(finite) - min(finite) + 20) / t
    for k, e in enumerate(eps):
        ref = exact_g(row[0], row[1], t, e)
        assert _rel(float(g[k]), ref) <= tol or abs(float(g[k]) - ref) < 1e-300, (e, float(g[k]), ref)
    # the linearisation, on the same rows (unmasked keys only: its weights carry no -inf)
    vis = [i for i, x in enumerate(row[0]) if math.isfinite(x)]
    a = torch.softmax(l[:, vis] / t, -1)
    jv = float(J.linearised_sensitivity(a, v[:, vis], t)[0])
    ref = exact_jv([row[0][i] for i in vis], [row[1][i] for i in vis], t)
    assert _rel(jv, ref) <= tol or abs(jv - ref) < 1e-300


def test_sensitivity_profile_uses_the_same_path():
    """The chapter's sweep (temperature groups, causal crops) gives the same g as the public
    function, to the last bits that grouping can change."""
    gen = torch.Generator().manual_seed(8)
    block = 4 * torch.randn(2, 6, 16, dtype=torch.float64, generator=gen)
    block = block.masked_fill(torch.arange(16)[None, :] > torch.arange(10, 16)[:, None], float("-inf"))
    temps = [0.01, 0.1, 1.0, 100.0]
    prof = J.sensitivity_profile([block], temps, (1e-3, 10.0), seed=1)
    v = J.random_unit_directions(block, torch.Generator().manual_seed(1))
    direct = J.finite_difference_sensitivity(block, temps, (1e-3, 10.0), v).mean(-1)
    assert torch.allclose(prof.g, direct, rtol=1e-13, atol=0)
