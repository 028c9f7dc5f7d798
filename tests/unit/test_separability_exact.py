"""N_s at the numerical edges, against exact arithmetic (issue 47, item 8).

Every expected value here is derived by hand or computed with :class:`fractions.Fraction` from the
float inputs taken exactly; none is a measured number.
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
import torch

from normlimits.metrics import separability as S


def one_row(weights, vectors):
    """One head, one query row seeing every key: weights [1, 1, L] (one row of one head), vectors [1, L, d] (float64)."""
    w = torch.tensor([[weights]], dtype=torch.float64)
    x = torch.tensor(vectors, dtype=torch.float64)[None]
    return w, x


def exact_squared_distances(weights, vectors, n):
    """||alpha_j x_j - s||^2 for every key, as Fractions of the floats themselves (keys sorted by
    (-alpha, index), s the sum of the first n)."""
    a = [Fraction(w) for w in weights]
    x = [[Fraction(c) for c in row] for row in vectors]
    order = sorted(range(len(a)), key=lambda j: (-weights[j], j))
    s = [sum(a[i] * x[i][c] for i in order[:n]) for c in range(len(x[0]))]
    return order, [sum((a[j] * x[j][c] - s[c]) ** 2 for c in range(len(s))) for j in range(len(a))]


def test_one_tie_among_tiny_weights_leaves_the_other_tiny_weights_exact():
    """Weights [1, 1e-200, 1e-250, 1e-250, 0] on 1-d vectors [1, 0.3, 0.7, 0.7, 0.2], N = 3: the
    selected keys are 0, 1, 2 (the tie at 1e-250 to the earlier key), s = 1 + 0.3e-200 + 0.7e-250.
    Key 3 (x_3 = x_2, same weight) sits exactly where key 2 does: ||s - 0.7e-250|| = 1 + 0.3e-200,
    so r = that and key 2 is on the boundary (outside). Key 1 sits at 1 + 0.7e-250 < r: inside, and
    key 0 at 0.3e-200 + 0.7e-250: inside. N_s/N = 2/3. The tie sent the whole problem to float64
    differences, which round key 1's distance to r too (1/3); 120-digit mpmath did the same."""
    weights = [1.0, 1e-200, 1e-250, 1e-250, 0.0]
    vectors = [[1.0], [0.3], [0.7], [0.7], [0.2]]
    order, d2 = exact_squared_distances(weights, vectors, 3)
    r2 = min(d2[j] for j in order[3:])
    assert [d2[i] < r2 for i in order[:3]] == [True, True, False] and d2[2] == r2   # the derivation
    w, x = one_row(weights, vectors)
    got = S.geometric_separability(w, x, [3], rows=[4], causal=False).fraction
    assert float(got) == pytest.approx(2 / 3, abs=0)
    assert float(S.reference_fraction(w, x, [4], [3], causal=False, digits=120)) == 2 / 3
    assert float(S.reference_fraction(w, x, [4], [3], causal=False)) == 1 / 3   # float64 rounds it


@pytest.mark.parametrize("zeros", [0, 5])
def test_an_exact_tie_at_the_radius_is_outside(zeros):
    """Weights 0.25 x 4, vectors [0], [-0.5], [-0.2], [-0.9] (the doubles nearest), N = 3: key 1's
    distance equals the non-selected key 3's exactly (both 0.25 |x_0 + x_2| = 0.25 |x_0 + x_2 +
    x_1 - x_3| in the doubles themselves: checked with Fractions), so key 1 is on the boundary and
    outside; keys 0 and 2 are farther. N_s = 0; the rounded comparison put key 1 inside (1/3).
    Keys of weight 0 (at distance ||s|| = 0.175, farther) change nothing."""
    weights = [0.25] * 4 + [0.0] * zeros
    vectors = [[0.0], [-0.5], [-0.2], [-0.9]] + [[float(k)] for k in range(zeros)]
    order, d2 = exact_squared_distances(weights, vectors, 3)
    assert d2[1] == d2[3] and d2[0] > d2[3] and d2[2] > d2[3]
    assert all(d2[j] > d2[3] for j in range(4, 4 + zeros))
    w, x = one_row(weights, vectors)
    res = S.geometric_separability(w, x, [3], rows=[3 + zeros], causal=False)
    assert float(res.fraction) == 0.0
    assert float(res.radius) == math.sqrt(d2[3])          # 0.05..., the exact r rounded
    assert float(S.reference_fraction(w, x, [3 + zeros], [3], causal=False, digits=120)) == 0.0


def test_a_twin_key_one_unit_apart_in_weight_has_a_positive_radius():
    """N = 1, keys 0 and 1 the same vector with weights one unit in the last place apart: the
    exact radius is (a_0 - a_1) ||x|| ~ 3.4e-17 > 0, so the selected key (at distance 0) is inside,
    N_s/N = 1. float64 differences round a_0 x and a_1 x to the same vector here (r = 0, N_s = 0)."""
    a0 = 0.445315501912919
    a1 = math.nextafter(a0, 0.0)
    twin = [0.5702508456879002, 0.16274089844223252, -0.17890213289201318]
    other = [0.6034750975530231, 0.027849005356327994, 0.9549026377744916]
    weights = [a0, a1, 1.0 - a0 - a1]
    vectors = [twin, twin, other]
    assert all(a0 * c == a1 * c for c in twin)            # what float64 differences see: r = 0
    order, d2 = exact_squared_distances(weights, vectors, 1)
    r2 = min(d2[j] for j in order[1:])
    assert r2 == d2[1] > 0
    w, x = one_row(weights, vectors)
    res = S.geometric_separability(w, x, [1], rows=[2], causal=False)
    assert float(res.fraction) == 1.0
    exact_r = math.sqrt(r2)                               # Fraction -> float, then sqrt: 1 ulp or so
    assert float(res.radius) == pytest.approx(exact_r, rel=1e-15)
    assert 1e-17 < exact_r < 1e-16


def real_shaped_rows(seed, temperature, length=64, dim=16, vocab=12, n_rows=8):
    """Softmax rows of scaled logits over a window of repeated tokens (vectors and keys depend on
    the token alone, so repeated tokens have duplicate vectors and equal logits): weights [1, R, L],
    vectors [1, L, d], rows [R]."""
    gen = torch.Generator().manual_seed(seed)
    tokens = torch.randint(0, vocab, (length,), generator=gen)
    table = torch.randn(vocab, dim, generator=gen, dtype=torch.float64)
    vectors = table[tokens]
    query = torch.randn(n_rows, dim, generator=gen, dtype=torch.float64)
    logits = (query @ vectors.T) / dim ** 0.5
    rows = torch.linspace(length // 4, length - 1, n_rows).long()
    hidden = torch.arange(length)[None, :] > rows[:, None]
    weights = (logits / temperature).masked_fill(hidden, float("-inf")).softmax(-1)
    return weights[None], vectors[None], rows


@pytest.mark.parametrize("temperature", [0.01, 0.03])
def test_real_shaped_rows_with_repeated_tokens_match_exact_arithmetic(temperature, monkeypatch):
    """240 (row, N) problems per temperature; every one equals the exact reference. Some go to the
    exact refinement (the case tests it), and on some float64 distances decide otherwise (the
    case is not one that rounding gets right anyway)."""
    grid = [1, 2, 4, 8, 16]
    refined = []
    original = S._exact_problems
    monkeypatch.setattr(S, "_exact_problems", lambda a, *rest: refined.append(a.shape[0]) or original(a, *rest))
    problems = differ = 0
    for seed in range(6):
        weights, vectors, rows = real_shaped_rows(seed, temperature)
        exact = S.reference_fraction(weights, vectors, rows.tolist(), grid, digits=120)
        got = S.geometric_separability(weights, vectors, grid, rows=rows).fraction
        assert torch.equal(got.nan_to_num(-1), exact.nan_to_num(-1)), seed
        rounded = S.reference_fraction(weights, vectors, rows.tolist(), grid)
        problems += int((~exact.isnan()).sum())
        differ += int((rounded.nan_to_num(-1) != exact.nan_to_num(-1)).sum())
    assert problems == 240
    assert sum(refined) > 0 and differ > 0


@pytest.mark.parametrize("vectors, n, expected", [
    ([[1.0], [2.0], [1.0]], 2, 1.0),
    ([[1.0], [1.0], [2.0]], 2, 0.5),
    ([[1.0], [1.0], [2.0]], 1, 1.0),
])
def test_subnormal_weights_are_taken_exactly(vectors, n, expected):
    """Weights [1, a, a] with a = 5e-324 (the smallest subnormal), 1-d vectors. N = 2 selects keys
    0 and 1: s = x_0 + a x_1; key 0 sits at a |x_1|, key 1 at |x_0| = 1, the non-selected key 2 at
    |x_0 + a (x_1 - x_2)| = |1 + a (x_1 - x_2)|. With x = (1, 2, 1) that is 1 + a > 1: key 1
    inside, N_s/N = 1; with x = (1, 1, 2) it is 1 - a < 1: key 1 outside, 1/2. N = 1: key 0 at 0,
    both others at |1 - a x_j| > 0: 1. 120-digit arithmetic rounded 1 +- a to 1 (a tie: 1/2)."""
    w, x = one_row([1.0, 5e-324, 5e-324], vectors)
    assert float(S.reference_fraction(w, x, [2], [n], causal=False, digits=120)) == expected
    assert float(S.geometric_separability(w, x, [n], rows=[2], causal=False).fraction) == expected


def test_the_exact_reference_refuses_a_bad_digits():
    w, x = one_row([0.5, 0.5], [[1.0], [2.0]])
    for bad in (0, -3, 2.5, True):
        with pytest.raises(ValueError, match="digits must be a positive integer"):
            S.reference_fraction(w, x, [1], [1], causal=False, digits=bad)


def test_dyadic_integers_are_the_floats_exactly():
    values = np.array([[1.0, -5e-324, 0.0], [1e300, -0.1, 2.2250738585072014e-308]])
    ints, exponent = S._dyadic(values)
    assert ints.shape == values.shape
    for v, i in zip(values.ravel(), ints.ravel()):
        assert Fraction(i) * Fraction(2) ** exponent == Fraction(float(v))
    zeros, _ = S._dyadic(np.zeros(3))
    assert zeros.tolist() == [0, 0, 0]
