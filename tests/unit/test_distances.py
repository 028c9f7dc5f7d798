"""Tests for normlimits.metrics.distances against slow, obviously correct loop references."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from normlimits.metrics import distances as D

DT = torch.float64      # the loop references are float64; so are the inputs they check


# ------------------------------------------------------------------------------------------
# Loop references (one row, plain Python over tokens and subsets)
# ------------------------------------------------------------------------------------------


def ref_row(alpha: np.ndarray, x: np.ndarray, n: int) -> dict:
    """Every quantity of one row by direct loops. alpha [L] (visible part), x [L, d]."""
    L = len(alpha)
    order = sorted(range(L), key=lambda i: -alpha[i])
    sel = set(order[:n])
    y = [alpha[i] * x[i] for i in range(L)]
    s = sum((y[i] for i in sel), np.zeros(x.shape[1]))
    total = sum(y, np.zeros(x.shape[1]))
    true = sum(np.linalg.norm(y[i] - s) for i in range(L) if i not in sel)
    out_sum = sum((y[i] for i in range(L) if i not in sel), np.zeros(x.shape[1]))
    norm_of_sum = np.linalg.norm(out_sum - s)
    abar = sum(alpha[i] for i in sel)
    # random-subset main sum and Jensen bound
    main = 0.0
    jen = 0.0
    rms = 0.0
    for i in range(L):
        others = [j for j in range(L) if j != i]
        c = n / (L - 1) if L > 1 else 0.0
        mean_s = c * sum((y[j] for j in others), np.zeros(x.shape[1]))
        main += (L - n) / L * np.linalg.norm(y[i] - mean_s)
        var = 0.0
        if L > 2 and L - 1 - n > 0:
            ybar = sum((y[j] for j in others), np.zeros(x.shape[1])) / (L - 1)
            sigma2 = sum(np.sum((y[j] - ybar) ** 2) for j in others) / (L - 1)
            var = n * (L - 1 - n) / (L - 2) * sigma2
            jen += (L - n) / L * math.sqrt(var)
        rms += (L - n) / L * math.sqrt(np.sum((y[i] - mean_s) ** 2) + var)
    outside = [i for i in range(L) if i not in sel]
    d1 = max((np.linalg.norm(x[i] - x[j]) for i in outside for j in sel), default=0.0)
    x_max = max(np.linalg.norm(x[j]) for j in sel)
    m_out = sum(alpha[i] for i in outside)
    sq_out = sum(alpha[i] ** 2 for i in outside)
    lin = m_out * d1 + x_max * (m_out + (L - n) * abar)
    cau = m_out * d1 + x_max * math.sqrt((L - n) * (sq_out + 2 * abar * m_out
                                                    + (L - n) * abar ** 2))
    return dict(true=true, norm_of_sum=norm_of_sum, top_n_mass=abar,
                context_norm=np.linalg.norm(s),
                individual_sum=sum(np.linalg.norm(v) for v in y), expected_main=main,
                expected_rms=rms, jensen_bound=jen, d1=d1, x_max=x_max, bound_linear=lin,
                bound_cauchy=cau)


def exact_expectation(alpha: np.ndarray, x: np.ndarray, n: int) -> float:
    """E over all C(L, N) subsets, by enumeration."""
    L = len(alpha)
    y = alpha[:, None] * x
    vals = []
    for sub in itertools.combinations(range(L), n):
        s = y[list(sub)].sum(0)
        vals.append(sum(np.linalg.norm(y[i] - s) for i in range(L) if i not in sub))
    return float(np.mean(vals))


def causal_rows(lead, lengths, L, d, seed=0, scale=2.0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(*lead, len(lengths), L, generator=g, dtype=DT) * scale
    vis = torch.arange(L)[None, :] < torch.tensor(lengths)[:, None]
    w = torch.softmax(logits.masked_fill(~vis, float("-inf")), -1)
    x = torch.randn(*lead, L, d, generator=g, dtype=DT)
    return w, x


# ------------------------------------------------------------------------------------------
# distance_profile == loops
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("chunk", [D.DEFAULT_CHUNK_ELEMENTS, 50, 300])
def test_profile_matches_loops(chunk):
    lead, lengths, L, d = (2, 3), [4, 9, 12, 7], 12, 5
    w, x = causal_rows(lead, lengths, L, d, seed=1)
    grid = [1, 2, 4]
    prof = D.distance_profile(w, x, grid, lengths=lengths, chunk_elements=chunk)
    assert prof.true.shape == (*lead, len(lengths), len(grid))
    for a, b in itertools.product(range(lead[0]), range(lead[1])):
        for r, Lr in enumerate(lengths):
            alpha = w[a, b, r, :Lr].numpy()
            xs = x[a, b, :Lr].numpy()
            for j, n in enumerate(grid):
                ref = ref_row(alpha, xs, n)
                for name, value in ref.items():
                    got = float(getattr(prof, name)[a, b, r, j])
                    assert got == pytest.approx(value, rel=1e-9, abs=1e-10), (name, Lr, n)


def test_partial_sort_path_matches_loops():
    """4 * max(N) < L uses topk instead of a full sort; both must agree with the loops."""
    w, x = causal_rows((2,), [30, 40], 40, 3, seed=9)
    prof = D.distance_profile(w, x, [1, 3, 7], lengths=[30, 40])
    for r, Lr in enumerate([30, 40]):
        for j, n in enumerate([1, 3, 7]):
            ref = ref_row(w[1, r, :Lr].numpy(), x[1, :Lr].numpy(), n)
            for name, value in ref.items():
                assert float(getattr(prof, name)[1, r, j]) == pytest.approx(value, rel=1e-9,
                                                                             abs=1e-10), name


def test_unsorted_grid_with_repeats():
    w, x = causal_rows((2,), [7, 9], 9, 3, seed=7)
    grid = [4, 1, 3, 1, 7]
    prof = D.distance_profile(w, x, grid, lengths=[7, 9])
    for j, n in enumerate(grid):
        ref = ref_row(w[1, 0, :7].numpy(), x[1, :7].numpy(), n)
        for name in ("true", "d1", "bound_linear", "expected_main", "jensen_bound"):
            assert float(getattr(prof, name)[1, 0, j]) == pytest.approx(ref[name], rel=1e-9,
                                                                         abs=1e-12)


def test_broadcast_values_shared_across_rows_and_float32():
    w, x = causal_rows((3,), [6, 10], 10, 4, seed=2)
    x_shared = x[0]                                            # [L, d] broadcast over the lead
    p64 = D.distance_profile(w, x_shared, [1, 3], lengths=[6, 10])
    p32 = D.distance_profile(w.float(), x_shared.float(), [1, 3], lengths=[6, 10])
    assert p32.true.dtype == torch.float32
    torch.testing.assert_close(p32.true.double(), p64.true, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(p32.expected_main.double(), p64.expected_main, rtol=1e-4,
                               atol=1e-5)
    ref = ref_row(w[2, 1, :10].numpy(), x_shared.numpy(), 3)
    assert float(p64.true[2, 1, 1]) == pytest.approx(ref["true"], rel=1e-9)


def test_full_selection_collapses():
    """N = L: the sum-of-norms reading and E are 0; the norm-of-sum reading is ||s|| = ||T||."""
    w, x = causal_rows((), [5], 5, 3, seed=3)
    prof = D.distance_profile(w, x, [5], lengths=[5])
    assert float(prof.true) == 0.0
    assert float(prof.expected_main) == 0.0
    assert float(prof.jensen_bound) == 0.0
    assert float(prof.bound_cauchy) == pytest.approx(0.0, abs=1e-12)
    assert float(prof.norm_of_sum) == pytest.approx(float((w[0] @ x).norm()), rel=1e-12)


def test_underflowed_visible_weight_counts_in_d1():
    """A visible key with weight exactly 0 is still a non-selected token (its x enters d_1)."""
    w = torch.tensor([[0.7, 0.3, 0.0, 0.0]], dtype=DT)
    x = torch.tensor([[1.0, 0.0], [0.0, 1.0], [5.0, 5.0], [100.0, 100.0]], dtype=DT)
    prof = D.distance_profile(w, x, [1], lengths=[3])
    ref = ref_row(w[0, :3].numpy(), x[:3].numpy(), 1)
    assert float(prof.d1[0, 0]) == pytest.approx(ref["d1"])
    assert float(prof.true[0, 0]) == pytest.approx(ref["true"])


# ------------------------------------------------------------------------------------------
# errors
# ------------------------------------------------------------------------------------------


def test_errors():
    w, x = causal_rows((), [4, 6], 6, 3)
    with pytest.raises(ValueError, match="1..L"):
        D.distance_profile(w, x, [5], lengths=[4, 6])
    with pytest.raises(ValueError, match=">= 1"):
        D.distance_profile(w, x, [0], lengths=[4, 6])
    with pytest.raises(ValueError, match="exactly 0"):
        D.distance_profile(w, x, [1], lengths=[3, 6])
    with pytest.raises(ValueError, match="one visible-key count per row"):
        D.distance_profile(w, x, [1], lengths=[4])
    with pytest.raises(ValueError, match="non-negative"):
        D.distance_profile(-w, x, [1], lengths=[4, 6])
    with pytest.raises(ValueError, match="same keys"):
        D.distance_profile(w, x[:5], [1], lengths=[4, 6])
    with pytest.raises(ValueError, match="integers"):
        D.distance_profile(w, x, [1.5], lengths=[4, 6])
    with pytest.raises(ValueError, match="empty"):
        D.distance_profile(w, x, [], lengths=[4, 6])
    prof = D.distance_profile(w, x, [1], lengths=[4, 6], expectation=False)
    with pytest.raises(ValueError, match="expectation=False"):
        prof.expected_upper


# ------------------------------------------------------------------------------------------
# proven bounds: property tests
# ------------------------------------------------------------------------------------------


@st.composite
def rows(draw, max_len=7):
    L = draw(st.integers(2, max_len))
    d = draw(st.integers(1, 4))
    n = draw(st.integers(1, L))
    seed = draw(st.integers(0, 2 ** 31 - 1))
    scale = draw(st.sampled_from([0.01, 1.0, 5.0, 30.0]))
    xscale = draw(st.sampled_from([0.1, 1.0, 10.0]))
    g = torch.Generator().manual_seed(seed)
    alpha = torch.softmax(torch.randn(L, generator=g, dtype=DT) * scale, -1)
    x = torch.randn(L, d, generator=g, dtype=DT) * xscale
    if draw(st.booleans()):                                     # tied / duplicated vectors
        x[-1] = x[0]
    return alpha, x, n


@settings(max_examples=200, deadline=None)
@given(rows())
def test_fixed_set_bounds_hold(case):
    alpha, x, n = case
    p = D.distance_profile(alpha[None], x, [n])
    tol = 1e-9 * (1 + float(p.bound_linear))
    assert float(p.true) <= float(p.bound_linear) + tol
    assert float(p.bound_linear) <= float(p.bound_cauchy) + tol     # Cauchy-Schwarz


@settings(max_examples=120, deadline=None)
@given(rows(max_len=7))
def test_expectation_between_main_and_jensen_bound(case):
    alpha, x, n = case
    p = D.distance_profile(alpha[None], x, [n], bounds=False)
    exact = exact_expectation(alpha.numpy(), x.numpy(), n)
    tol = 1e-9 * (1 + exact)
    assert float(p.expected_main) <= exact + tol
    assert exact <= float(p.expected_rms) + tol
    assert float(p.expected_rms) <= float(p.expected_upper) + tol
    L = alpha.numel()
    assert exact <= (L - n) * (n + 1) / L * float(p.individual_sum) + tol     # expectation cap
    assert abs(float(p.true) - (L - n) * float(p.context_norm)) <= float(p.individual_sum) + tol


def test_enumerated_expectation_matches_loop():
    w, x = causal_rows((3,), [7], 7, 2, seed=11)
    got = D.enumerated_expectation(w[:, 0], x, 3)
    for a in range(3):
        assert float(got[a]) == pytest.approx(exact_expectation(w[a, 0].numpy(), x[a].numpy(), 3))
    with pytest.raises(ValueError, match="max_subsets"):
        D.enumerated_expectation(torch.ones(1, 40, dtype=DT) / 40, torch.ones(40, 2, dtype=DT), 20)
    with pytest.raises(ValueError, match="1..L"):
        D.enumerated_expectation(w[:, 0], x, 8)


def test_sampled_expectation_matches_enumeration():
    w, x = causal_rows((2,), [6, 8], 8, 3, seed=5)
    g = torch.Generator().manual_seed(0)
    mean, se = D.sampled_expectation(w, x, 3, 4000, lengths=[6, 8], generator=g)
    for a in range(2):
        for r, Lr in enumerate([6, 8]):
            exact = exact_expectation(w[a, r, :Lr].numpy(), x[a, :Lr].numpy(), 3)
            assert abs(float(mean[a, r]) - exact) < 5 * float(se[a, r]) + 1e-12


def test_ks_critical_n_is_reexported():
    from normlimits.metrics import critical_n

    assert D.ks_critical_n is critical_n.ks_critical_n


# ------------------------------------------------------------------------------------------
# sweeps over windows with a duck-typed capture
# ------------------------------------------------------------------------------------------


class FakeCapture:
    """Causal softmax attention from random q, k, v: [layers, heads, L, d]."""

    def __init__(self, layers=2, heads=2, L=24, d=4, seed=0):
        g = torch.Generator().manual_seed(seed)
        self.queries = torch.randn(layers, heads, L, d, generator=g, dtype=DT)
        self.keys = torch.randn(layers, heads, L, d, generator=g, dtype=DT)
        self.values = torch.randn(layers, heads, L, d, generator=g, dtype=DT)
        self.scale = d ** -0.5

    def weights(self, rows=None, temperature=1.0):
        L = self.values.shape[-2]
        rows = torch.arange(L) if rows is None else torch.as_tensor(rows)
        logits = self.scale * self.queries[..., rows, :] @ self.keys.transpose(-1, -2)
        mask = torch.arange(L)[None, :] > rows[:, None]
        return torch.softmax(logits.masked_fill(mask, float("-inf")) / temperature, -1)


def test_sweep_length_uses_rows_of_one_window():
    caps = [FakeCapture(seed=s) for s in range(3)]
    lengths = [8, 16, 24]
    res = D.sweep_length(caps, lengths, n=2)
    assert res.true.shape == (2, 2, 3, 1) and res.windows == 3
    for i, L in enumerate(lengths):
        acc = 0
        for cap in caps:
            w = cap.weights(torch.tensor([L - 1]))[..., :L]
            acc = acc + D.distance_profile(w, cap.values[..., :L, :], [2]).bound_cauchy[..., 0, 0]
        torch.testing.assert_close(res.bound_cauchy[..., i, 0], acc / 3)
    assert 0 < res.worst_true_over_bound <= 1 and 0 < res.worst_linear_over_cauchy <= 1
    assert math.isnan(D.sweep_length(caps, lengths, n=2, bounds=False).worst_true_over_bound)
    res_b = D.sweep_top_n(caps, [1, 2, 5])
    assert res_b.true.shape == (2, 2, 1, 3)
    torch.testing.assert_close(res_b.true[..., 0, 1], res.true[..., 2, 0])
    torch.testing.assert_close(res_b.expected_upper,
                               res_b.expected_main + res_b.jensen_bound)
    with pytest.raises(ValueError, match="1..24"):
        D.sweep_length(caps, [30])
    with pytest.raises(ValueError, match="no windows"):
        D.sweep_length([], [8])


# ------------------------------------------------------------------------------------------
# Tests prompted by mutation testing (make mutants): each fails on a mutant that survived
# ------------------------------------------------------------------------------------------


def replayed_draws(w, x, n, samples, lengths, seed):
    """d~ of every subset sampled_expectation draws, by loops: the same uniform numbers in the same
    order (one ``torch.rand(samples, B, R, L)`` stream), the N smallest visible ones chosen."""
    g = torch.Generator().manual_seed(seed)
    B, R, L = w.shape
    u = torch.rand(samples, B, R, L, generator=g, dtype=w.dtype)
    d = np.zeros((samples, B, R))
    for k in range(samples):
        for b in range(B):
            for r, Lr in enumerate(lengths):
                pick = set(np.argsort(u[k, b, r, :Lr].numpy(), kind="stable")[:n].tolist())
                y = w[b, r, :Lr, None].numpy() * x[b, :Lr].numpy()
                s = y[sorted(pick)].sum(0)
                d[k, b, r] = sum(np.linalg.norm(y[i] - s) for i in range(Lr) if i not in pick)
    return d


@pytest.mark.parametrize("chunk", [D.DEFAULT_CHUNK_ELEMENTS, 10, 50, 2 * 96 + 50])
def test_sampled_expectation_is_the_mean_and_standard_error_of_its_draws(chunk):
    # 2 x 2 rows of 8 keys, d = 3: 96 elements a sample, so chunks of 1 and 2 samples (7 = 2+2+2+1)
    w, x = causal_rows((2,), [6, 8], 8, 3, seed=5)
    mean, se = D.sampled_expectation(w, x, 3, 7, lengths=[6, 8], generator=torch.Generator().manual_seed(3),
                                     chunk_elements=chunk)
    d = replayed_draws(w, x, 3, 7, [6, 8], seed=3)
    np.testing.assert_allclose(mean.numpy(), d.mean(0), rtol=1e-12)
    np.testing.assert_allclose(se.numpy(), d.std(0, ddof=1) / math.sqrt(7), rtol=1e-10)
    assert D.sampled_expectation(w, x, 3, 2, lengths=[6, 8])[0].shape == (2, 2)     # two samples suffice
    with pytest.raises(ValueError, match="at least 2"):
        D.sampled_expectation(w, x, 3, 1, lengths=[6, 8])


def test_synthetic_rows_are_softmax_rows_drawn_from_the_generator():
    w, x = D.synthetic_rows(5, 7, 3, 2.0, generator=torch.Generator().manual_seed(1))
    assert w.shape == (5, 1, 7) and x.shape == (5, 7, 3) and w.dtype == x.dtype == torch.float64
    torch.testing.assert_close(w.sum(-1), torch.ones(5, 1, dtype=torch.float64))
    assert float(w.max()) < 1                               # a softmax over the 7 keys, not over size-1 axes
    torch.manual_seed(123)                                  # the global stream must not matter
    w2, x2 = D.synthetic_rows(5, 7, 3, 2.0, generator=torch.Generator().manual_seed(1))
    assert torch.equal(w, w2) and torch.equal(x, x2)
    g = torch.Generator().manual_seed(1)
    z = torch.randn(5, 1, 7, generator=g, dtype=torch.float64)
    torch.testing.assert_close(w, torch.softmax(2.0 * z, -1))
    torch.testing.assert_close(x, torch.randn(5, 7, 3, generator=g, dtype=torch.float64))


def test_enumerated_expectation_accepts_exactly_max_subsets():
    w, x = causal_rows((1,), [6], 6, 2, seed=2)
    exact = D.enumerated_expectation(w[0, 0], x[0], 3, max_subsets=math.comb(6, 3))
    assert float(exact) == pytest.approx(exact_expectation(w[0, 0].numpy(), x[0].numpy(), 3))


def test_accumulate_keeps_each_windows_fields_present_in_float64_and_skips_the_absent():
    w, x = causal_rows((2,), [5], 5, 2, seed=4)
    prof = D.distance_profile(w.float(), x.float(), [1, 2], expectation=False, bounds=True)
    acc = {}
    D._accumulate(acc, prof)
    D._accumulate(acc, prof)
    assert set(acc) == {"true", "norm_of_sum", "top_n_mass", "context_norm", "individual_sum",
                        "d1", "x_max", "bound_linear", "bound_cauchy"}
    assert all(len(v) == 2 and v[0].dtype == torch.float64 for v in acc.values())
    torch.testing.assert_close(acc["d1"][1], prof.d1.double())
    ones = torch.ones(2, dtype=torch.float64)
    torch.testing.assert_close(D._window_mean(torch.stack(acc["d1"]), ones), prof.d1.double())
    full = D.distance_profile(w, x, [1, 2])
    acc = {}
    D._accumulate(acc, full)
    torch.testing.assert_close(acc["expected_upper"][0], full.expected_main + full.jensen_bound)


def test_sweep_rows_of_length_one_and_bad_length_lists():
    caps = [FakeCapture(seed=s) for s in range(2)]
    res = D.sweep_length(caps, [1, 8], n=1)
    assert res.true.shape == (2, 2, 2, 1)
    assert torch.all(res.true[..., 0, 0] == 0)              # one key: nothing outside the top 1
    for bad in ([], [0, 8], [25]):
        with pytest.raises(ValueError, match="must lie in 1..24"):
            D.sweep_length(caps, bad)


def test_sweep_top_n_at_a_chosen_length_is_that_row_of_the_length_sweep():
    caps = [FakeCapture(seed=s) for s in range(2)]
    by_n = D.sweep_top_n(caps, [1, 2, 5], length=16)
    by_len = D.sweep_length(caps, [8, 16], n=5)
    assert by_n.true.shape == (2, 2, 1, 3) and by_n.lengths.tolist() == [16]
    torch.testing.assert_close(by_n.true[..., 0, 2], by_len.true[..., 1, 0])
    torch.testing.assert_close(by_n.expected_main[..., 0, 2], by_len.expected_main[..., 1, 0])


def test_worst_ratio_ignores_zero_denominators_unless_the_numerator_is_positive():
    t = torch.tensor
    assert D._worst_ratio(t([1.0, 0.0, 0.3]), t([2.0, 0.0, 0.5])) == pytest.approx(0.6)
    assert D._worst_ratio(t([0.25]), t([0.5])) == pytest.approx(0.5)          # denominators below 1
    assert D._worst_ratio(t([0.0, 0.0]), t([0.0, 0.0])) == 0.0
    assert D._worst_ratio(t([0.1, 0.2]), t([1.0, 0.0])) == math.inf


def test_sweep_without_bounds_computes_no_bound_fields():
    res = D.sweep_length([FakeCapture(seed=0)], [8, 16], n=2, bounds=False)
    assert "true" in res.fields and "expected_upper" in res.fields
    assert not {"d1", "x_max", "bound_linear", "bound_cauchy"} & set(res.fields)
    with pytest.raises(AttributeError):
        res.bound_linear


def test_fixed_set_bounds_for_vectors_closer_than_one():
    """d1 below 1 (all vectors within a small ball): no clamp may lift the squared distances."""
    w, x = causal_rows((2,), [6, 9], 9, 3, seed=8)
    x = 0.05 * x
    prof = D.distance_profile(w, x, [1, 3], lengths=[6, 9])
    for r, Lr in enumerate([6, 9]):
        for j, n in enumerate([1, 3]):
            ref = ref_row(w[0, r, :Lr].numpy(), x[0, :Lr].numpy(), n)
            assert ref["d1"] < 1
            for name in ("d1", "x_max", "bound_linear", "bound_cauchy"):
                assert float(getattr(prof, name)[0, r, j]) == pytest.approx(ref[name], rel=1e-9), name


def test_profile_carries_its_grid_and_row_lengths():
    w, x = causal_rows((2,), [4, 7], 7, 2, seed=6)
    prof = D.distance_profile(w, x, [3, 1], lengths=[4, 7])
    assert prof.n_grid.tolist() == [3, 1] and prof.lengths.tolist() == [4, 7]
    assert D.distance_profile(w, x, 2, lengths=[4, 7]).n_grid.tolist() == [2]      # a single int N
    assert D.distance_profile(w[:, 1:], x, 2).lengths.tolist() == [7]              # default: all keys


def test_weights_shared_by_several_value_sets_broadcast_to_their_lead():
    w, x = causal_rows((3,), [5, 8], 8, 2, seed=3)
    prof = D.distance_profile(w[0], x, [1, 2], lengths=[5, 8])      # weights [R, L], values [3, L, d]
    assert prof.true.shape == (3, 2, 2)
    for a in range(3):
        torch.testing.assert_close(prof.true[a], D.distance_profile(w[0], x[a], [1, 2], lengths=[5, 8]).true)


@pytest.mark.parametrize("w_shape, x_shape", [((8,), (8, 2)), ((1, 8), (8,))])
def test_one_dimensional_weights_or_values_are_refused(w_shape, x_shape):
    with pytest.raises(ValueError, match=r"weights must be \[\.\.\., R, L\]"):
        D.distance_profile(torch.full(w_shape, 1 / 8, dtype=DT), torch.ones(x_shape, dtype=DT), [1])


def test_dtypes_promote_like_the_inputs_and_integers_become_the_default_float():
    w, x = causal_rows((2,), [4, 6], 6, 3, seed=12)
    ref = D.distance_profile(w, x, [1, 2], lengths=[4, 6]).true
    for ww, xx in ((w.float(), x), (w, x.float())):
        got = D.distance_profile(ww, xx, [1, 2], lengths=[4, 6]).true
        assert got.dtype == torch.float64
        torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-6)
    one_hot = torch.tensor([[1, 0, 0], [0, 1, 0]])                  # integer weights and values
    prof = D.distance_profile(one_hot, torch.tensor([[1, 0], [0, 2], [3, 0]]), [1], lengths=[1, 2])
    assert prof.true.dtype == torch.get_default_dtype()
    assert prof.true[:, 0].tolist() == [0.0, 2.0] and prof.context_norm[:, 0].tolist() == [1.0, 2.0]


def test_row_lengths_from_one_key_up_are_accepted_and_zero_is_refused():
    w, x = causal_rows((1,), [1, 5], 5, 2, seed=13)
    prof = D.distance_profile(w, x, [1], lengths=[1, 5])
    assert float(prof.true[0, 0, 0]) == 0.0 and float(prof.true[0, 1, 0]) > 0
    with pytest.raises(ValueError, match="lengths must lie in 1..5"):
        D.distance_profile(w, x, [1], lengths=[0, 5])
