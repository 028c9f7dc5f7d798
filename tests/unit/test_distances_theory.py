"""Re-check the sympy derivations of normlimits.theory.distances, and tie them to the metric."""

from __future__ import annotations

import math

import pytest
import sympy as sp
import torch
from hypothesis import given, settings, strategies as st

from normlimits.metrics import distances as D
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


# ------------------------------------------------------------------------------------------
# Every reading's expectation, and the corrected Corollary 2(i)
# ------------------------------------------------------------------------------------------


def test_reading_expectations():
    r = T.reading_expectations()
    assert T.closes(r.family_mean - T.N / (T.L - 1))
    assert T.closes(r.family_variance - T.N * (T.L - 1 - T.N) / (T.L - 2))
    assert T.closes(r.norm_sum_mean - (1 - 2 * T.N / T.L))
    assert T.closes(r.norm_sum_variance - 4 * T.N * (T.L - T.N) / (T.L - 1))
    assert r.bias_variance == 0


def test_second_moment_sum_closes_and_matches_enumeration():
    sm = T.second_moment_sum()
    assert all(c == 0 for c in sm.checks)
    assert T.closes(sm.scaled_limit - ((T.N + 1) * T.L * T.Q + T.N * (T.N - 3) * T.Tn ** 2))
    # numerically, on vectors: sum_i E[||y_i - s||^2 | i not in I] by enumeration
    import itertools
    import numpy as np
    rng = np.random.default_rng(0)
    y = rng.normal(size=(6, 3))
    for n in (1, 2, 4):
        brute = 0.0
        for i_ in range(6):
            others = [j for j in range(6) if j != i_]
            subs = list(itertools.combinations(others, n))
            brute += np.mean([np.sum((y[i_] - y[list(s)].sum(0)) ** 2) for s in subs])
        val = float(sm.closed_form.subs({T.L: 6, T.N: n, T.Q: float((y ** 2).sum()),
                                         T.Tn: float(np.linalg.norm(y.sum(0)))}))
        assert math.isclose(val, brute, rel_tol=1e-10)


def test_flat_gaussian_limits():
    fg = T.flat_gaussian()
    assert T.closes(fg.ratio - (T.L - T.N) * sp.sqrt(T.N + 1) / T.L)
    assert fg.ratio_limit == sp.sqrt(T.N + 1)
    assert T.closes(fg.allowance - T.N / sp.sqrt(T.L))
    assert fg.gap_over_allowance_limit == sp.oo
    ml = T.main_sum_limits()
    assert ml.s_factor == 1 and ml.t_factor == T.N


def _flat_gaussian_case(L=1024, d=16, n=5, samples=256, seed=0):
    from normlimits.experiments.figure2 import flat_gaussian_case

    return flat_gaussian_case(L=L, d=d, n=n, samples=samples, seed=seed)


def test_counterexample_breaks_the_old_corollary_2i_statement():
    """Flat weights, Gaussian x, d = 16, N = 5, L = 1024: E/S is about sqrt(N + 1) = 2.45, while the
    old statement allowed E - S only O(N ||T||), here about 0.16 S. It fails even with constant 5;
    the corrected statement (main <= E <= upper) holds, and the main sum obeys the old one."""
    fg = _flat_gaussian_case()
    assert 2.3 < fg.ratio < 2.55 and fg.ratio_se < 0.015 * fg.ratio
    assert fg.allowance < 0.25
    old_statement_holds = abs(fg.ratio - 1) <= 5 * fg.allowance
    assert not old_statement_holds
    assert fg.main_ratio <= fg.ratio + 5 * fg.ratio_se and fg.ratio <= fg.upper_ratio + 5 * fg.ratio_se
    assert abs(fg.main_ratio - 1) <= fg.allowance + 0.01           # the main sum does obey it
    ratio = float(T.flat_gaussian().ratio.subs({T.L: 1024, T.N: 5}))
    assert ratio == pytest.approx(fg.limit)
    assert abs(fg.ratio - ratio) < 0.05 * ratio                    # d = 16: within 5% of the limit




@settings(max_examples=80, deadline=None)
@given(L=st.integers(3, 8), d=st.integers(1, 16), n=st.integers(1, 6), seed=st.integers(0, 10 ** 6),
       flat=st.booleans())
def test_corrected_corollary_2i_holds_on_flat_and_random_rows(L, d, n, seed, flat):
    """The corrected Corollary 2(i) on exactly enumerated rows: (1) the main sum within
    (L-N)/L ((1+c) S -+ c L ||T||); (2) main <= E <= min((L-N)(N+1)/L S, (L-N)/L sqrt(L R2))."""
    from normlimits.metrics import readings as R
    from normlimits.experiments.figure2 import corrected_violations

    n = min(n, L - 1)
    g = torch.Generator().manual_seed(seed)
    logits = torch.zeros(L, dtype=torch.float64) if flat else torch.randn(L, generator=g, dtype=torch.float64) * 2
    w = torch.softmax(logits, -1)
    x = torch.randn(L, d, generator=g, dtype=torch.float64)
    exact = float(D.enumerated_expectation(w, x, n))
    got = R.row_statistics(w[None], x, [n], samples=0, expectations=("main", "upper"))["scaled"]
    tol = 1e-9 * (1 + exact)
    assert float(got["main"]) <= exact + tol
    assert exact <= float(got["upper"]) + tol
    S, T_norm, c = float(got["individual"]), float((w @ x).norm()), n / (L - 1)
    keep = (L - n) / L
    assert keep * ((1 + c) * S - c * L * T_norm) - tol <= float(got["main"])
    assert float(got["main"]) <= keep * ((1 + c) * S + c * L * T_norm) + tol
    assert corrected_violations(w[None], x, n, torch.tensor([exact], dtype=torch.float64)) == 0


def test_corrected_violations_counts_a_broken_row():
    from normlimits.experiments.figure2 import corrected_violations

    w = torch.softmax(torch.randn(1, 6, dtype=torch.float64), -1)
    x = torch.randn(6, 3, dtype=torch.float64)
    exact = D.enumerated_expectation(w[0], x, 2)
    assert corrected_violations(w, x, 2, exact[None]) == 0
    assert corrected_violations(w, x, 2, 10 * exact[None] + 10) == 1      # above the cap
    assert corrected_violations(w, x, 2, 0 * exact[None]) == 1            # below the main sum


@settings(max_examples=15, deadline=None)
@given(L=st.sampled_from([256, 512]), d=st.sampled_from([4, 16, 64]), n=st.integers(1, 8),
       seed=st.integers(0, 10 ** 6))
def test_corrected_corollary_2i_on_long_flat_gaussian_rows(L, d, n, seed):
    """On the counterexample's family at long L (Monte Carlo): E stays in [main, upper], and E/S
    stays near sqrt(N+1) (L-N)/L, far from the old statement's 1 + O(N/sqrt(L))."""
    fg = _flat_gaussian_case(L=L, d=d, n=n, samples=32, seed=seed)
    assert fg.main_ratio <= fg.ratio + 5 * fg.ratio_se + 1e-12
    assert fg.ratio <= fg.upper_ratio + 5 * fg.ratio_se
    if n >= 3 and d >= 16:
        assert fg.ratio > 1 + 0.5 * (math.sqrt(n + 1) - 1)
