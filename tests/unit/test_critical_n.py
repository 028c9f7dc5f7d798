"""normlimits.metrics.critical_n: the grid, the KS search, the fit, and both protocols end to end."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

from normlimits.metrics import critical_n as C
from normlimits.metrics import readings as R
from normlimits.metrics import token_means as TM
from normlimits.core.protocol import TOP_N_GRID

from test_readings import FakeCapture


def test_critical_grid_stays_below_L_and_is_nested():
    for L in (2, 10, 32, 48, 1024):
        grid = C.critical_grid(L)
        assert grid == sorted(set(grid)) and max(grid) < L and min(grid) == 1
    assert set(n for n in TOP_N_GRID if n < 1024) <= set(C.critical_grid(1024))
    assert C.critical_grid(10) == list(range(1, 10))
    assert set(C.critical_grid(96)) <= set(C.critical_grid(1024))
    assert 1024 not in C.critical_grid(1024)
    with pytest.raises(ValueError, match="L >= 2"):
        C.critical_grid(1)


def test_ks_matches_scipy_and_critical_is_first_pass():
    rng = np.random.default_rng(0)
    heads, grid = 40, [1, 2, 3, 5, 8]
    shift = np.array([3.0, 1.5, 0.0, 0.8, 0.0])
    a = rng.normal(size=(heads, len(grid))) + shift
    b = rng.normal(size=(heads, len(grid)))
    res = C.ks_critical_n(a, b, grid, alphas=(0.01, 0.05))
    for j in range(len(grid)):
        ref = ks_2samp(a[:, j], b[:, j])
        assert res.statistic[j] == pytest.approx(ref.statistic)
        assert res.pvalue[j] == pytest.approx(ref.pvalue)
    for alpha in (0.01, 0.05):
        assert res.critical[alpha] == next((n for n, p in zip(grid, res.pvalue) if p > alpha), None)
    with pytest.raises(ValueError, match="heads"):
        C.ks_critical_n(a, b[:, :2], grid)
    with pytest.raises(ValueError, match="levels"):
        C.ks_critical_n(a, b, grid, alphas=(1.5,))


def test_each_level_gets_its_own_critical_n():
    """Samples whose p-values fall between the two levels: the levels' critical N differ, each is
    the first N passing at that level, and the stricter level (0.01, smaller) comes first."""
    rng = np.random.default_rng(0)
    heads, grid = 40, [1, 4, 16]
    a = rng.normal(size=(heads, 3)) + np.array([3.0, 0.6, 0.0])
    b = rng.normal(size=(heads, 3))
    p = [ks_2samp(a[:, j], b[:, j]).pvalue for j in range(3)]
    assert p[0] < 0.01 < p[1] < 0.05 < p[2], "the samples no longer separate the levels"
    res = C.ks_critical_n(a, b, grid, alphas=(0.01, 0.05))
    assert res.critical == {0.01: 4, 0.05: 16}
    assert C.ks_critical_n(a, b, grid, alphas=(0.05, 0.01)).critical == {0.01: 4, 0.05: 16}


def test_samples_that_differ_below_L_report_none_below_L():
    """The audit's case: true and expected differ at every N < L, and at N = L both are all 0.
    The old grid included N = L, where the KS test returns p = 1 and "found" a critical N = L;
    the search must say "none below L" and keep the length out of the fit."""
    rng = np.random.default_rng(1)
    heads, L = 30, 64
    old_grid = list(range(1, 33)) + [48, 64]                       # the old default reached N = L
    true = 10 + rng.random((heads, len(old_grid)))
    expected = rng.random((heads, len(old_grid)))
    true[:, -1] = expected[:, -1] = 0.0                           # N = L: both sums are empty
    res = C.ks_critical_n(true, expected, old_grid)
    assert res.identical[-1] and np.isnan(res.pvalue[-1])
    assert res.critical == {0.01: None, 0.05: None}                # the old code reported 64
    assert C.critical_grid(L)[-1] < L
    fit = C.fit_critical_n([32, 48, 64, 96], [4, 6, None, 12])
    assert fit.points == 3 and fit.censored == 1 and fit.slope == pytest.approx(0.125)
    assert fit.exponent == pytest.approx(1.0)
    assert C.fit_critical_n([32, 64], [None, 8]) is None
    with pytest.raises(ValueError, match="critical values"):
        C.fit_critical_n([32, 64], [8])


def _study(true: np.ndarray, expected: np.ndarray, lengths, grid) -> TM.PositionStudy:
    """A study with given per-head values [heads, m, n] (one layer)."""
    t = torch.as_tensor(true)[None]
    e = torch.as_tensor(expected)[None]
    means = {"scaled": TM.ReadingMeans(true=t, mc=e, main=e, rms=e)}
    return TM.PositionStudy(lengths=list(lengths), n_grid=torch.tensor(grid), vectors="values",
                           per_octave=None, samples=2, mc_keys=None, windows=1,
                           positions=list(lengths), means=means, last=means)


def test_critical_n_on_a_study_reports_none_below_L_and_fits_the_rest():
    rng = np.random.default_rng(2)
    heads, lengths, grid = 25, [16, 32, 64], [1, 2, 4, 8, 16, 32]
    true = rng.random((heads, 3, 6)) + 5.0
    expected = rng.random((heads, 3, 6))
    true[:, 1, 3:] = expected[:, 1, 3:]                            # L = 32: equal from N = 8 on
    true[:, 2, 4:] = expected[:, 2, 4:] + 1e-3 * rng.random((heads, 2))   # L = 64: from N = 16
    res = C.critical_n(_study(true, expected, lengths, grid))
    assert res.critical[0.01] == [None, None, 16]                  # at 32 the equal columns are
    assert res.found(0.01) == 1 and res.fraction(0.01) == [None, None, 0.25]   # identical: no test
    assert [t.n_grid.tolist() for t in res.tests] == [[1, 2, 4, 8], [1, 2, 4, 8, 16], grid]
    assert res.fits[0.01] is None
    with pytest.raises(ValueError, match="below L"):
        C.critical_n(_study(true[:, :1], expected[:, :1], [1], grid))


def test_search_both_protocols_match_a_manual_computation():
    caps = [FakeCapture(seed=s, L=32, heads=4) for s in range(3)]
    grid = [1, 2, 4, 8]
    paper = C.critical_n_search(iter(caps), [16, 32], n_grid=grid, samples=0, expectation="main")
    last = C.critical_n_search(iter(caps), [16, 32], protocol="last_row", n_grid=grid)
    for i, L in enumerate([16, 32]):
        t_mean = e_mean = t_last = e_last = 0
        for cap in caps:
            rows = []
            for t in range(L):
                w = cap.weights(torch.tensor([t]))[..., :t + 1]
                rows.append(R.row_statistics(w, cap.values[..., :t + 1, :], grid, samples=0,
                                             expectations=("main",))["scaled"])
            t_mean = t_mean + torch.stack([r["true"][..., 0, :] for r in rows]).mean(0)
            e_mean = e_mean + torch.stack([r["main"][..., 0, :] for r in rows]).mean(0)
            t_last, e_last = t_last + rows[-1]["true"][..., 0, :], e_last + rows[-1]["main"][..., 0, :]
        ref = C.ks_critical_n((t_mean / 3).reshape(-1, 4), (e_mean / 3).reshape(-1, 4), grid)
        assert paper.critical[0.01][i] == ref.critical[0.01]
        np.testing.assert_allclose(paper.tests[i].pvalue, ref.pvalue, rtol=1e-9)
        ref_l = C.ks_critical_n((t_last / 3).reshape(-1, 4), (e_last / 3).reshape(-1, 4), grid)
        np.testing.assert_allclose(last.tests[i].statistic, ref_l.statistic)
    assert paper.aggregate == "paper" and last.aggregate == "last_row" and last.expectation == "main"
    with pytest.raises(ValueError, match="protocol"):
        C.critical_n_search(iter(caps), [16], protocol="every")


def test_trivial_rows_do_not_change_the_ks_test():
    """Rows t with t + 1 <= N give 0 in both samples: they scale every head's token-mean by the same
    factor (L - N)/L, and the KS test is invariant under a common scale."""
    caps = [FakeCapture(seed=s, L=20, heads=5) for s in range(2)]
    grid = [2, 6]
    study = TM.position_study(iter(caps), [20], grid, samples=0, expectations=("main",))
    res = C.critical_n(study, expectation="main")
    for j, n in enumerate(grid):
        t_sum = e_sum = 0
        for cap in caps:
            for t in range(n, 20):                                  # non-trivial rows only
                w = cap.weights(torch.tensor([t]))[..., :t + 1]
                st = R.row_statistics(w, cap.values[..., :t + 1, :], [n], samples=0,
                                      expectations=("main",))["scaled"]
                t_sum, e_sum = t_sum + st["true"][..., 0, 0], e_sum + st["main"][..., 0, 0]
        ref = ks_2samp(t_sum.reshape(-1).numpy(), e_sum.reshape(-1).numpy())
        assert res.tests[0].pvalue[j] == pytest.approx(ref.pvalue)


def test_resampled_critical_n_is_ks_critical_n_on_each_resample():
    from normlimits.metrics.critical_n import ks_critical_n, resampled_critical_n

    gen = np.random.default_rng(4)
    grid = [1, 2, 4, 8, 16]
    # per resample: true and expected drift together as N grows, so the critical N varies
    true = gen.normal(size=(7, 12, 5)) + np.linspace(3, 0, 5) * gen.uniform(0.5, 1.5, size=(7, 1, 1))
    expected = gen.normal(size=(7, 12, 5))
    expected[2] = true[2]                            # identical samples never count as a critical N
    true[3] = np.round(true[3])                      # ties
    expected[3] = np.round(expected[3])
    got = resampled_critical_n(true, expected, grid, 0.05)
    for r in range(7):
        want = ks_critical_n(true[r], expected[r], grid, alphas=(0.05,)).critical[0.05]
        assert (np.isnan(got[r]) and want is None) or got[r] == want, r
    assert np.isnan(got[2])
    assert len({x for x in got.tolist() if x == x}) >= 2, "the planted resamples should differ"
    with pytest.raises(ValueError, match="resamples, heads"):
        resampled_critical_n(true[0], expected[0], grid, 0.05)
