"""Issue 32, "exact to rounding at the edges": the seven reproducers against exact references
(``fractions`` / ``mpmath``, computed here, never typed in) and one property test per metric on
adversarial inputs (near-ties, exact duplicates, one-hot rows, tiny remaining mass,
near-duplicate vectors) against a slow exact reference written in this file."""

from __future__ import annotations

import itertools
import math
import sys
from fractions import Fraction

import mpmath
import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from normlimits.metrics import distances as D
from normlimits.metrics import jacobian as J
from normlimits.metrics import readings as RD
from normlimits.metrics import separability as S
from normlimits.core.validation import InputError

PROPERTY = settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])


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


def test_masked_keys_never_reach_expm1():
    """A causal row whose masked key sits where eps (v - v_top) / T would overflow expm1
    (v_top < 0): masked keys drop out exactly (a NaN from 0 * inf reached the audit's report)."""
    l = torch.tensor([[0.0, -1.0, float("-inf")]], dtype=torch.float64)
    v = torch.tensor([[-0.6, -0.8, 0.0]], dtype=torch.float64)
    for t in (1e-3, 5e-3, 1e-2, 1.0):
        g = J.finite_difference_sensitivity(l, [t], [1e-3, 10.0], v)[0, :, 0]
        assert bool(torch.isfinite(g).all())
        for k, e in enumerate((1e-3, 10.0)):
            assert _rel(float(g[k]), exact_g(l[0], v[0], t, e)) < 1e-13 or float(g[k]) < 1e-300
    prof = J.sensitivity_profile([l[None].expand(2, 1, 3)], [5e-3, 1.0], (10.0,))
    assert bool(torch.isfinite(prof.g).all())


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


# ------------------------------------------------------------------------ exact metric references

def _fr(x) -> Fraction:
    return Fraction(float(x))


def _sqrt(q: Fraction) -> float:
    """sqrt of a non-negative Fraction, correctly to float64 (mpmath at 50 digits)."""
    with mpmath.workdps(50):
        return float(mpmath.sqrt(mpmath.mpf(q.numerator) / q.denominator))


def _order(w) -> list[int]:
    """The book's top-N order: weight descending, ties by the earlier key."""
    return sorted(range(len(w)), key=lambda j: (-w[j], j))


def exact_profile(w, x, n):
    """d~, norm of sum... the fixed-set statistics of one row exactly: ``w`` [L] floats, ``x``
    [L][d] floats, top-N by the book's rule; distances from exact squared norms."""
    wf = [_fr(a) for a in w]
    xf = [[_fr(c) for c in row] for row in x]
    order = _order(wf)
    top, out = order[:n], order[n:]
    dim = len(xf[0])
    s = [sum(wf[i] * xf[i][k] for i in top) for k in range(dim)]
    y = [[wf[j] * xf[j][k] for k in range(dim)] for j in range(len(w))]

    def d2(a, b):
        return sum((p - q) ** 2 for p, q in zip(a, b))

    true = sum(_sqrt(d2(y[j], s)) for j in out)
    raw = sum(_sqrt(d2(xf[j], s)) for j in out)
    m_out = sum(wf[j] for j in out)
    return {"true": true, "raw": raw, "s": s, "y": y, "top": top, "out": out, "m_out": m_out}


def exact_separability(w, x, rows, n_grid, causal=True):
    """N_s/N and r exactly (squared distances as Fractions, compared exactly): [R][G] lists."""
    fracs, radii = [], []
    for ri, t in enumerate(rows):
        visible = list(range(t + 1)) if causal else list(range(len(w[ri])))
        wf = {j: _fr(w[ri][j]) for j in visible}
        order = sorted(visible, key=lambda j: (-wf[j], j))
        fr_row, r_row = [], []
        for n in n_grid:
            if len(visible) <= n:
                fr_row.append(math.nan), r_row.append(math.nan)
                continue
            dim = len(x[0])
            s = [sum(wf[i] * _fr(x[i][k]) for i in order[:n]) for k in range(dim)]

            def d2(j):
                return sum((s[k] - wf[j] * _fr(x[j][k])) ** 2 for k in range(dim))

            r2 = min(d2(j) for j in order[n:])
            fr_row.append(sum(d2(i) < r2 for i in order[:n]) / n)
            r_row.append(_sqrt(r2))
        fracs.append(fr_row)
        radii.append(r_row)
    return fracs, radii


# ------------------------------------------------------------------------ 2. near-duplicates

def test_distance_resolves_near_duplicate_vectors():
    """Reproducer 2: d~ of two vectors 3e-8 apart (the Gram form gave 0), the raw reading with
    w = [1, 0] the same."""
    w = torch.tensor([[0.5, 0.5]], dtype=torch.float64)
    x = torch.tensor([[1.0, 2, 3], [1, 2, 3 + 3e-8]], dtype=torch.float64)
    exact = exact_profile(w[0].tolist(), x.tolist(), 1)
    got = float(D.distance_profile(w, x, [1]).true[0, 0])
    assert got > 0 and _rel(got, exact["true"]) < 1e-7
    w1 = torch.tensor([[1.0, 0.0]], dtype=torch.float64)
    raw = float(RD.row_statistics(w1, x, [1], forms=("raw",), samples=0,
                                  expectations=())["raw"]["true"][0, 0])
    assert _rel(raw, exact_profile([1.0, 0.0], x.tolist(), 1)["raw"]) < 1e-7


def test_separability_radius_of_near_duplicates_and_n_one_is_one():
    """Reproducers 2 and 5 (second part): the radius of a non-selected near-duplicate of s, and
    N = 1 giving N_s/N = 1 whenever r > 0."""
    w = torch.tensor([[0.6, 0.4, 0.0]], dtype=torch.float64)
    base = [1.0, 2.0, 3.0]
    x = torch.tensor([base, [c * 1.5 for c in base[:2]] + [base[2] * 1.5 + 1e-8], [-1.0, 0, 0]],
                     dtype=torch.float64)
    res = S.geometric_separability(w, x, [1], rows=[2])
    frac, rad = exact_separability(w.tolist(), x.tolist(), [2], [1])
    assert rad[0][0] > 0 and float(res.fraction[0, 0]) == frac[0][0] == 1.0
    assert _rel(float(res.radius[0, 0]), rad[0][0]) < 1e-6


# ------------------------------------------------------------------------ 3. Cauchy >= linear

def test_cauchy_bound_never_below_the_linear_one_at_n_equal_l():
    """Reproducer 3: at N = L no key is outside, so m_out = 0 exactly and both bounds are 0."""
    w = torch.tensor([[0.40245400705635576, 0.12564143161428767, 0.47190456132935654]],
                     dtype=torch.float64)
    x = torch.tensor([[0.4515457500818628, 0.7858303626613083],
                      [-1.0884376531160616, -0.5598795172722052],
                      [-0.9336222530539188, 0.04792548697962941]], dtype=torch.float64)
    prof = D.distance_profile(w, x, [1, 2, 3])
    for k, n in enumerate((1, 2, 3)):
        m_out = float(exact_profile(w[0].tolist(), x.tolist(), n)["m_out"])
        assert float(prof.bound_linear[0, k]) <= float(prof.bound_cauchy[0, k])
        if m_out == 0:
            assert float(prof.bound_linear[0, k]) == float(prof.bound_cauchy[0, k]) == 0.0

    class Window:
        values = x[None, None]

        def weights(self, rows=None, temperature=1.0):
            return w[None, None].expand(1, 1, len(rows), 3)

    sweep = D.sweep_top_n([Window()], n_grid=(1, 2, 3))
    assert sweep.worst_linear_over_cauchy <= 1.0


# ------------------------------------------------------------------------ 4, 5. ties

def test_separability_uses_the_books_tie_rule():
    """Reproducer 4: four equal weights; the book's rule selects keys 0 and 1."""
    w = torch.tensor([[0.25] * 4], dtype=torch.float64)
    x = torch.tensor([[0.2], [-0.5], [-0.4], [-2.4]], dtype=torch.float64)
    res = S.geometric_separability(w, x, [2], causal=False, keep_selection=True)
    frac, _ = exact_separability(w.tolist(), x.tolist(), [3], [2], causal=False)
    assert res.order[0, :2].tolist() == [0, 1]
    assert float(res.fraction[0, 0]) == frac[0][0]


def test_exact_duplicates_are_judged_alike_inside_and_outside_the_top_n():
    """Reproducer 5: key 2 duplicates key 0 (same weight, same vector), so key 0 sits exactly on
    the radius: not inside."""
    for dtype in (torch.float32, torch.float64):
        w = torch.tensor([[1 / 3] * 3], dtype=dtype)
        x = torch.tensor([[0.5], [-0.1], [0.5]], dtype=dtype)
        res = S.geometric_separability(w, x, [2], causal=False)
        frac, _ = exact_separability(w.double().tolist(), x.double().tolist(), [2], [2], causal=False)
        assert float(res.fraction[0, 0]) == frac[0][0]


# ------------------------------------------------------------------------ 6. validation

def test_separability_accepts_masked_keys_of_any_finite_value_and_refuses_fractional_n():
    """Reproducer 6."""
    w = torch.tensor([[0.6, 0.4, -1.0], [0.5, 0.3, 0.2]], dtype=torch.float64)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]], dtype=torch.float64)
    res = S.geometric_separability(w, x, [1], rows=[1, 2])
    frac, _ = exact_separability(w.tolist(), x.tolist(), [1, 2], [1])
    assert res.fraction[:, 0].tolist() == [f[0] for f in frac]
    with pytest.raises(InputError):          # a negative weight on a visible key still refused
        S.geometric_separability(w, x, [1], rows=[2, 2])
    with pytest.raises(ValueError, match="integers"):
        S.geometric_separability(w, x, [1.5], rows=[1, 2])


# ------------------------------------------------------------------------ 7. one sample

def test_mc_var_from_one_sample_is_nan_at_every_n():
    """Reproducer 7: N at or above the chunk's longest row included."""
    gen = torch.Generator().manual_seed(0)
    w = torch.softmax(torch.randn(3, 4, generator=gen, dtype=torch.float64), -1)
    w = w * (torch.arange(4)[None, :] < torch.tensor([2, 3, 4])[:, None])
    x = torch.randn(4, 2, generator=gen, dtype=torch.float64)
    st_ = RD.row_statistics(w, x, [1, 2, 4, 5], lengths=[2, 3, 4], samples=1,
                            generator=torch.Generator().manual_seed(1))
    for form in st_:
        assert bool(torch.isnan(st_[form]["mc_var"]).all()), form
    two = RD.row_statistics(w, x, [5], lengths=[2, 3, 4], samples=2,
                            generator=torch.Generator().manual_seed(1))
    for form in two:
        assert bool((two[form]["mc_var"] == 0).all()), form      # every draw selects every key


# ------------------------------------------------------------------------ property tests, metrics

# coordinates 0 or at least 1e-3 in size: squared norms below ~1e-308 underflow in every
# float64 formula (out of scope, see normlimits.metrics.gram)
_coord = (st.sampled_from([-2.0, -1.0, -0.5, 0.0, 0.25, 0.5, 1.0, 3.0]) | st.floats(1e-3, 3)
          | st.floats(-3, -1e-3))


@st.composite
def adversarial_weights_vectors(draw, max_keys=6):
    """One row of weights [L] and vectors [L][d]: near-ties, exact duplicates (same weight and
    vector), one-hot rows with remaining mass down to 1e-200, near-duplicate vectors (y_j within
    1e-9..1e-6 of y_i or of a context vector) and random ones."""
    keys = draw(st.integers(2, max_keys))
    dim = draw(st.integers(1, 3))
    w = draw(st.lists(st.floats(0.01, 1.0), min_size=keys, max_size=keys))
    x = [draw(st.lists(_coord, min_size=dim, max_size=dim)) for _ in range(keys)]
    kinds = draw(st.sets(st.sampled_from(["near_tie", "duplicate", "one_hot", "near_vector",
                                          "near_context"]), max_size=2))
    delta = draw(st.sampled_from([1e-9, 1e-8, 1e-6]))
    if "one_hot" in kinds:
        tiny = draw(st.sampled_from([1e-200, 1e-30, 1e-12]))
        w = [1.0] + [tiny * wi for wi in w[1:]]
    if "near_tie" in kinds:
        w[1] = w[0] * (1 - draw(st.sampled_from([1e-15, 1e-12, 1e-9])))
    if "duplicate" in kinds:
        w[-1], x[-1] = w[0], list(x[0])
    if "near_vector" in kinds and w[0] <= 1e6 * w[1]:   # y_1 within delta of y_0
        x[1] = [c * w[0] / w[1] for c in x[0]]
        x[1][0] += delta
    if "near_context" in kinds and keys > 2 and w[0] <= 1e6 * w[2]:   # y_2 near y_0 + y_1
        x[2] = [(w[0] * a + w[1] * b) / w[2] for a, b in zip(x[0], x[1])]
        x[2][-1] += delta
    total = sum(w)
    return [wi / total for wi in w], x


@PROPERTY
@given(row=adversarial_weights_vectors())
def test_property_distances_and_readings_match_exact_references(row):
    """d~, the raw reading and the fixed-set bounds on adversarial rows against rational
    arithmetic: exact to rounding of the inputs' magnitudes, down to the floor of squared norms
    (the metrics expand squared distances, and a distance below sqrt of float64's smallest normal,
    about 1.5e-154, squares to 0: found by Hypothesis with weights of 1e-200, whose distances of
    4e-200 came out 0; no softmax row in float32 or float64 of a real model reaches it)."""
    w, x = row
    keys = len(w)
    wt = torch.tensor([w], dtype=torch.float64)
    xt = torch.tensor(x, dtype=torch.float64)
    grid = list(range(1, keys + 1))
    prof = D.distance_profile(wt, xt, grid)
    reads = RD.row_statistics(wt, xt, grid, forms=("scaled", "raw"), samples=0, expectations=())
    x_max = max(math.sqrt(sum(c * c for c in r)) for r in x)
    for k, n in enumerate(grid):
        ex = exact_profile(w, x, n)
        s_norm = _sqrt(sum(c * c for c in ex["s"]))
        y_max = max(_sqrt(sum(c * c for c in y)) for y in ex["y"])
        floor = keys * math.sqrt(sys.float_info.min)
        tol_scaled = 1e-12 * keys * (s_norm + y_max) + floor
        tol_raw = 1e-12 * keys * (s_norm + x_max) + floor
        assert abs(float(prof.true[0, k]) - ex["true"]) <= tol_scaled, (n, float(prof.true[0, k]), ex["true"])
        assert abs(float(reads["scaled"]["true"][0, k]) - ex["true"]) <= tol_scaled
        assert abs(float(reads["raw"]["true"][0, k]) - ex["raw"]) <= tol_raw
        assert float(prof.bound_linear[0, k]) <= float(prof.bound_cauchy[0, k])
        assert float(prof.true[0, k]) <= float(prof.bound_linear[0, k]) * (1 + 1e-12) + tol_scaled
        if not ex["out"]:
            assert float(prof.bound_linear[0, k]) == 0.0
        # E over uniform N-subsets, by enumeration: main <= E <= min(upper, rms)
        e_exact = _exact_expectation(w, x, n)
        assert float(prof.expected_main[0, k]) <= e_exact + tol_scaled
        assert e_exact <= float(prof.expected_upper[0, k]) + tol_scaled
        assert e_exact <= float(prof.expected_rms[0, k]) + tol_scaled


def _exact_expectation(w, x, n):
    """E_{I ~ U(L, N)} sum_{i not in I} ||y_i - s_I||, every subset, exact squared norms."""
    keys, dim = len(w), len(x[0])
    y = [[_fr(w[j]) * _fr(c) for c in x[j]] for j in range(keys)]
    total, count = 0.0, 0
    for subset in itertools.combinations(range(keys), n):
        s = [sum(y[i][c] for i in subset) for c in range(dim)]
        total += sum(_sqrt(sum((y[j][c] - s[c]) ** 2 for c in range(dim)))
                     for j in range(keys) if j not in subset)
        count += 1
    return total / count


@PROPERTY
@given(row=adversarial_weights_vectors(max_keys=6), dtype=st.sampled_from([torch.float64]))
def test_property_separability_matches_exact_references(row, dtype):
    """N_s/N and r on adversarial rows against exact rational distances, both inner-product
    methods; near-ties of distances that float64 cannot decide (within 1e-9 of the scale) are
    not graded, exact ties are (they must come out "not inside")."""
    w, x = row
    keys = len(w)
    wt = torch.tensor([w], dtype=dtype)
    xt = torch.tensor(x, dtype=dtype)
    grid = list(range(1, keys))
    frac, rad = exact_separability([w], x, [keys - 1], grid, causal=False)
    for method in ("direct", "gram"):
        res = S.geometric_separability(wt, xt, grid, causal=False, method=method)
        for g, n in enumerate(grid):
            wf = [_fr(a) for a in w]
            order = _order(wf)
            dim = len(x[0])
            s = [sum(wf[i] * _fr(x[i][c]) for i in order[:n]) for c in range(dim)]
            d2 = [sum((s[c] - wf[j] * _fr(x[j][c])) ** 2 for c in range(dim)) for j in range(keys)]
            r2 = min(d2[j] for j in order[n:])
            scale = sum(c * c for c in s) + max(d2)
            ambiguous = any(0 < abs(d2[i] - r2) <= Fraction(1, 10 ** 9) * scale for i in order[:n])
            if not ambiguous:
                assert float(res.fraction[0, g]) == frac[0][g], (method, n)
            assert abs(float(res.radius[0, g]) - rad[0][g]) <= 1e-11 * rad[0][g] + 1e-13 * keys * _sqrt(scale)


def test_refine_squared_asks_for_the_mask_only_when_an_entry_cannot_be_resolved():
    """``needed`` may be a function: it is called only when some entry falls below the floor, and
    then refines exactly the entries the mask itself would (the Monte Carlo's terms pass it so,
    most of their calls resolving every entry)."""
    from normlimits.metrics.gram import GRAM_FLOOR, refine_squared

    scale = torch.full((2, 3), 4.0, dtype=torch.float64)
    calls = []

    def mask():
        calls.append(1)
        return torch.tensor([[True, False, True], [True, True, False]])

    resolved = torch.full((2, 3), 1.0, dtype=torch.float64)
    refine_squared(resolved, scale, mask, lambda index: pytest.fail("nothing to refine"))
    assert calls == [] and bool((resolved == 1.0).all())
    tiny = 4.0 * GRAM_FLOOR / 2
    as_tensor = mask()
    calls.clear()
    for needed in (mask, as_tensor):
        d2 = torch.tensor([[tiny, tiny, 1.0], [1.0, tiny, tiny]], dtype=torch.float64)
        refine_squared(d2, scale, needed, lambda index: torch.full((len(index[0]),), 7.0))
        assert d2.tolist() == [[7.0, tiny, 1.0], [1.0, 7.0, tiny]]
    assert calls == [1], "the function was called once, for the call that had entries to refine"
