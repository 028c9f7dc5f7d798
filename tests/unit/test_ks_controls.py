"""normlimits.metrics.ks_controls: head subsamples of the paper's size, one sample per shared value
set, and the controls of Figure 2c's KS search on a study."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normlimits.metrics import critical_n as C
from normlimits.metrics import ks_controls as K
from normlimits.metrics import token_means as TM


def _study(true: np.ndarray, expected: np.ndarray, lengths, grid, layers: int = 1) -> TM.PositionStudy:
    """A study with given per-head values [heads_total, m, n], split into ``layers`` layers."""
    t = torch.as_tensor(true).reshape(layers, -1, *true.shape[1:])
    e = torch.as_tensor(expected).reshape(layers, -1, *expected.shape[1:])
    means = {"scaled": TM.ReadingMeans(true=t, mc=e, main=e, rms=e)}
    return TM.PositionStudy(lengths=list(lengths), n_grid=torch.tensor(grid), vectors="values",
                            per_octave=None, samples=2, mc_keys=None, windows=1,
                            positions=list(lengths), means=means, last=means)


def test_value_sets_follow_repeat_kv_order():
    assert K.value_sets(2, 6, 2).tolist() == [0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3]
    assert K.value_sets(2, 3, 3).tolist() == list(range(6))          # no grouping: a set per head
    sets = K.value_sets(30, 9, 3)                                     # SmolLM2-135M
    assert sets.size == 270 and np.bincount(sets).tolist() == [3] * 90
    with pytest.raises(ValueError, match="evenly"):
        K.value_sets(2, 6, 4)
    with pytest.raises(ValueError, match=">= 1"):
        K.value_sets(0, 6, 2)


def test_one_sample_per_value_set_from_a_planted_grouped_query_structure():
    """Three query heads per value set: the mean of each set's three rows, or its first row."""
    rng = np.random.default_rng(0)
    sets = K.value_sets(2, 6, 2)                                      # 4 sets of 3 heads
    x = rng.normal(size=(12, 5))
    mean = K.per_value_set(x, sets, "mean")
    first = K.per_value_set(x, sets, "first")
    assert mean.shape == first.shape == (4, 5)
    for s in range(4):
        np.testing.assert_allclose(mean[s], x[3 * s:3 * s + 3].mean(0))
        np.testing.assert_array_equal(first[s], x[3 * s])
    with pytest.raises(ValueError, match="one set id per head"):
        K.per_value_set(x[:5], sets)
    with pytest.raises(ValueError, match="each used"):
        K.per_value_set(x, np.where(sets == 1, 2, sets))               # set 1 left empty
    with pytest.raises(ValueError, match="how="):
        K.per_value_set(x, sets, "median")


def test_head_subsamples_are_144_distinct_heads_of_270_and_reproducible():
    index = K.head_subsamples(270, 144, 20, seed=5)
    assert index.shape == (20, 144)
    assert all(len(set(row)) == 144 for row in index.tolist())
    assert (np.diff(index, axis=1) > 0).all() and index.min() >= 0 and index.max() < 270
    assert len({tuple(row) for row in index.tolist()}) == 20            # the subsamples differ
    np.testing.assert_array_equal(index, K.head_subsamples(270, 144, 20, seed=5))
    assert not np.array_equal(index, K.head_subsamples(270, 144, 20, seed=6))
    with pytest.raises(ValueError, match="size must lie"):
        K.head_subsamples(100, 144)
    with pytest.raises(ValueError, match="count"):
        K.head_subsamples(270, 144, 0)


def test_subsampled_critical_n_is_the_search_on_each_subsample():
    rng = np.random.default_rng(1)
    heads, grid = 60, [1, 2, 4, 8, 16]
    shift = np.array([3.0, 1.0, 0.5, 0.2, 0.0])
    a = rng.normal(size=(heads, 5)) + shift
    b = rng.normal(size=(heads, 5))
    a[:, -1] += 4.0                                    # a subsample may now find none below L
    index = K.head_subsamples(heads, 30, 12, seed=0)
    got = K.subsampled_critical_n(a, b, grid, 0.01, index)
    for row, value in zip(index, got):
        c = C.ks_critical_n(a[row], b[row], grid, (0.01,)).critical[0.01]
        assert value == (np.inf if c is None else c)
    with pytest.raises(ValueError, match="subsamples, size"):
        K.subsampled_critical_n(a, b, grid, 0.01, index[0])


def test_controls_on_a_study_with_270_heads_sharing_90_value_sets():
    """30 layers x 9 heads on 3 key/value heads each, every query head a copy of its set's
    values: one sample per set gives the same statistic on 90 values, so the test has less power
    and cannot find its critical N later than on all 270 heads; the subsamples have 144 heads."""
    rng = np.random.default_rng(3)
    lengths, grid = [32, 64], [1, 2, 4, 8, 16, 32]
    shift = np.array([2.0, 0.8, 0.5, 0.35, 0.25, 0.0])
    base_true = rng.normal(size=(90, 2, 6)) + shift
    base_expected = rng.normal(size=(90, 2, 6))
    true, expected = np.repeat(base_true, 3, axis=0), np.repeat(base_expected, 3, axis=0)
    ctl = K.ks_controls(_study(true, expected, lengths, grid, layers=30), layers=30, heads=9,
                        kv_heads=3, subsamples=8, seed=2, alpha=0.01)
    assert ctl.heads == 270 and ctl.sets == 90 and ctl.group == 3 and ctl.size == 144
    assert ctl.subsampled.shape == (8, 2)
    np.testing.assert_array_equal(ctl.set_mean, ctl.set_first)        # copies: mean = first head
    for i, L in enumerate(lengths):
        keep = [j for j, n in enumerate(grid) if n < L]
        g = [grid[j] for j in keep]
        direct = C.ks_critical_n(base_true[:, i, keep], base_expected[:, i, keep], g, (0.01,)).critical[0.01]
        assert ctl.set_mean[i] == (np.inf if direct is None else direct)
        everything = C.ks_critical_n(true[:, i, keep], expected[:, i, keep], g, (0.01,)).critical[0.01]
        assert ctl.all_heads[i] == (np.inf if everything is None else everything)
        assert ctl.all_heads[i] >= ctl.set_mean[i]                    # more samples, more power
    assert np.median(ctl.subsampled[:, -1]) <= ctl.all_heads[-1]
    summary = ctl.subsample_summary()
    np.testing.assert_allclose(summary["median"], np.median(ctl.subsampled / np.array(lengths), 0))
    assert (summary["low"] <= summary["median"]).all() and (summary["median"] <= summary["high"]).all()
    frame = ctl.frame()
    assert list(frame.index) == lengths and "144 heads: median of 8" in frame.columns
    words = K.power_words(ctl)
    assert "more power than on the paper's 144" in words and "90 value sets" in words
    assert f"{summary['median'][-1]:.3f}" in words and "3 query heads" in words
    with pytest.raises(ValueError, match="layers x heads"):
        K.ks_controls(_study(true, expected, lengths, grid, layers=30), layers=10, heads=9, kv_heads=3)


def test_controls_without_grouping_or_more_heads_than_the_paper():
    rng = np.random.default_rng(4)
    true = rng.normal(size=(16, 1, 3)) + np.array([3.0, 0.0, 0.0])
    expected = rng.normal(size=(16, 1, 3))
    study = _study(true, expected, [8], [1, 2, 4], layers=4)
    ctl = K.ks_controls(study, layers=4, heads=4, kv_heads=4)
    assert ctl.subsampled is None and ctl.set_mean is None and ctl.subsample_summary() is None
    assert list(ctl.frame().columns) == ["all 16 heads"]
    words = K.power_words(ctl)
    assert "fewer than the paper's 144" in words and "no grouped-query attention" in words
    grouped = K.ks_controls(study, layers=4, heads=4, kv_heads=2)
    assert grouped.sets == 8 and "2 query heads share each of 8 value sets" in K.power_words(grouped)
    assert "the paper's sample size" in K.power_words(K.ks_controls(study, layers=4, heads=4, kv_heads=4,
                                                                       size=16), paper_heads=16)


def test_none_below_L_is_reported_in_words():
    """Samples that differ at every N below L: no critical N, said as "none below L"."""
    rng = np.random.default_rng(5)
    true = rng.normal(size=(16, 1, 3)) + 10.0
    expected = rng.normal(size=(16, 1, 3))
    ctl = K.ks_controls(_study(true, expected, [8], [1, 2, 4], layers=4), layers=4, heads=4, kv_heads=2)
    assert np.isinf(ctl.all_heads).all() and np.isinf(ctl.set_mean).all()
    assert ctl.frame().iloc[0].tolist() == ["none below L"] * 3
    assert K.power_words(ctl).count("none below L") == 3
    # 4 values per sample: even samples that never overlap cannot reach p <= 0.01 (p = 2/70)
    few = K.ks_controls(_study(true[:8], expected[:8], [8], [1, 2, 4], layers=2), layers=2, heads=4,
                        kv_heads=1)
    assert np.isinf(few.all_heads).all() and (few.set_mean == 1).all()
