"""Re-check the sympy derivations of normlimits.theory.distances, and tie them to the metric."""

from __future__ import annotations

import math

import sympy as sp
import torch

from normlimits import distances as D
from normlimits.theory import distances as T


def test_two_point_readings():
    tp = T.two_point_readings()
    assert tp.sum_of_norms_n2 == 0
    assert T.closes(tp.norm_of_sum_n2 - tp.norm_of_sum_n1)       # no collapse from N=1 to N=L
    assert T.closes(tp.norm_of_sum_n2_min - 1 / sp.sqrt(2))
    assert tp.argmin == sp.Rational(1, 2)
    # the metric agrees: a = 0.7
    w = torch.tensor([[0.7, 0.3]], dtype=torch.float64)
    x = torch.eye(2, dtype=torch.float64)
    p = D.distance_profile(w, x, [1, 2])
    val = float(tp.norm_of_sum_n2.subs(T.a, 0.7))
    assert math.isclose(float(p.true[0, 0]), val) and float(p.true[0, 1]) == 0.0
    assert math.isclose(float(p.norm_of_sum[0, 0]), val)
    assert math.isclose(float(p.norm_of_sum[0, 1]), val)


def test_subset_probabilities():
    sp_ = T.subset_probabilities()
    assert T.closes(sp_.excluded - (T.L - T.N) / T.L)
    assert T.closes(sp_.included_given_excluded - T.N / (T.L - 1))
    assert T.closes(sp_.pair_given_excluded - T.N * (T.N - 1) / ((T.L - 1) * (T.L - 2)))
    # brute force at L = 6, N = 2
    import itertools
    subs = list(itertools.combinations(range(6), 2))
    assert math.isclose(sum(0 not in s for s in subs) / len(subs),
                        float(sp_.excluded.subs({T.L: 6, T.N: 2})))


def test_without_replacement_variance():
    wr = T.without_replacement_variance()
    assert wr.difference == 0
    assert T.closes(wr.jensen_factor - T.N * (T.L - 1 - T.N) / (T.L - 2))
    # brute force on scalars: M = 5, N = 2
    import itertools
    import numpy as np
    y = np.array([0.3, -1.2, 2.0, 0.7, 0.1])
    sums = [y[list(s)].sum() for s in itertools.combinations(range(5), 2)]
    A, B = float((y ** 2).sum()), float(y.sum() ** 2)
    assert math.isclose(np.var(sums), float(wr.closed_form.subs({T.M: 5, T.N: 2, T.A: A,
                                                                  T.B: B})))


def test_fixed_set_algebra():
    fa = T.fixed_set_bound_algebra()
    assert T.closes(fa.linear_sum - ((1 - T.abar) + T.K * T.abar))
    assert T.closes(fa.lagrange_3 - fa.lagrange_3_squares)
    assert "Sum" in str(fa.square_sum) and T.K * T.abar ** 2 in fa.square_sum.args


def test_lemma1_regime_has_no_linear_growth():
    lr = T.lemma1_regime()
    assert lr.individual_slope == 0 and lr.true_slope == 0 and lr.expected_slope == 0
    assert T.closes(lr.individual_bound - T.C2 * T.X)


def test_sink_model_against_metric():
    sm = T.sink_model()
    assert sm.true_slope == T.a and sm.expected_limit == 2 * T.a
    for Lv in (8, 40):
        w = torch.full((1, Lv), 0.4 / (Lv - 1), dtype=torch.float64)
        w[0, 0] = 0.6
        x = torch.zeros(Lv, 2, dtype=torch.float64)
        x[0, 0] = 1.0
        x[1:, 1] = 1.0
        p = D.distance_profile(w, x, [1], bounds=False)
        subs = {T.a: 0.6, T.L: Lv}
        assert math.isclose(float(p.true), float(sm.true.subs(subs)), rel_tol=1e-12)
        assert math.isclose(float(p.expected_main), float(sm.expected_main.subs(subs)),
                            rel_tol=1e-12)


def test_expectation_cap():
    cap = T.expectation_cap()
    assert T.closes(cap.factor - (T.L - T.N) * (T.N + 1) / T.L)
    assert cap.factor_limit == T.N + 1 and cap.slope == 0
    w = torch.softmax(torch.randn(5, 9, dtype=torch.float64) * 3, -1)
    x = torch.randn(9, 3, dtype=torch.float64)
    for n in (1, 3, 9):
        exact = D.enumerated_expectation(w, x, n)
        prof = D.distance_profile(w, x, [n], bounds=False)
        factor = float(cap.factor.subs({T.L: 9, T.N: n}))
        assert (exact <= factor * prof.individual_sum[:, 0] + 1e-12).all()
        # true distance sandwich around (L - N) ||s_N||
        centre = (9 - n) * prof.context_norm[:, 0]
        assert ((prof.true[:, 0] - centre).abs() <= prof.individual_sum[:, 0] + 1e-12).all()
