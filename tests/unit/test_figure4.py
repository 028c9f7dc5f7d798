"""Tests for the Figure 4 read-outs (normlimits.experiments.figure4) on profiles with known curves."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normlimits.experiments import figure4 as F4
from normlimits.metrics.jacobian import SensitivityProfile, default_temperatures


def _profile(g_of_t, heads=3):
    """A profile whose head maximum of g at every epsilon is g_of_t(t, eps); the other heads are
    half of it; the norms are 1/(4T) (mean) and 1/(2T) (largest row)."""
    t = default_temperatures(4, 1e-3, 1e2)
    eps = torch.tensor([1e-3, 1e-1, 10.0], dtype=torch.float64)
    g = torch.stack([torch.stack([g_of_t(t, float(e)) for e in eps], -1)] * heads, -1)   # [nT, nE, H]
    g[..., 1:] *= 0.5
    norm = (1 / (4 * t))[:, None].expand(-1, heads).clone()
    return SensitivityProfile(temperatures=t, epsilons=eps, g=g, g_linear=norm * 0.1,
                              norm_mean=norm, norm_max=2 * norm, rows=1, windows=1)


def test_pure_inverse_t_curves_give_the_paper_s_picture():
    c = F4.curves(_profile(lambda t, e: 0.25 / t))
    s = F4.statistics(c)
    assert s["low_slope_dev"] == pytest.approx(0.0, abs=1e-9)
    assert np.allclose(s["high_slopes"], -1)
    assert s["spread_t1"] == pytest.approx(1.0)
    assert s["drop_min"] == pytest.approx(100.0)
    assert s["ordered"] == 1.0                         # equal curves count as ordered
    assert s["ordered_extremes"] == 1.0 and s["ordered_pairs"] == [1.0, 1.0]
    assert s["closeness"] == pytest.approx(0.5)        # 1/(4T) is half of 1/(2T)


def test_flat_low_t_and_disordered_curves_are_seen():
    # flat below T = 0.1 and larger for larger epsilon
    c = F4.curves(_profile(lambda t, e: torch.where(t < 0.1, 2.5 + 0 * t, 0.25 / t) * (1 + e)))
    s = F4.statistics(c)
    assert s["low_slope_dev"] > 0.5
    assert s["ordered"] == 0.0 and s["ordered_extremes"] == 0.0 and s["ordered_pairs"] == [0.0, 0.0]
    assert s["spread_t1"] == pytest.approx(11.0 / 1.001)
    # closeness uses the smallest epsilon's curve
    t = c.t[c.t <= 0.1 + 1e-12]
    assert s["closeness"] == pytest.approx(float(np.min(2.5 * 1.001 * 2 * t)))


def test_tables_and_nearest():
    c = F4.curves(_profile(lambda t, e: 0.25 / t))
    assert c.g.shape == (21, 3) and c.g_heads.shape == (21, 3, 3)
    assert F4.nearest(c.t, 0.1) == int(np.argmin(np.abs(c.t - 0.1)))
    table = F4.summary_table(c)
    assert table.loc["g, ε = 0.001", "slope T ≤ 0.1"] == pytest.approx(-1)
    assert table.loc["‖J‖₂, largest row", "T = 1"] == pytest.approx(0.5)
    readings = F4.limit_readings(c)
    assert readings.loc[("‖J‖₂, largest row", "1/(2T), the valid bound"), "smallest ratio"] == pytest.approx(1.0)
    paper = readings.loc[("‖J‖₂, row mean", "min{1/(4T), √2}, the paper's curve")]
    assert paper["largest ratio"] == pytest.approx(0.25 / 1e-3 / math.sqrt(2))


def test_ordering_readings_separate_the_pairs():
    """Small-epsilon curves that cross (the low-T plateau) with the largest epsilon below both:
    every-pair ordering fails where they cross, the extremes stay ordered."""
    def g_of_t(t, e):
        base = torch.where(t < 0.1, 2.5 + 0 * t, 0.25 / t)
        if e == 1e-3:    # below the 0.1 curve at T < 0.01, above it elsewhere
            return base * torch.where(t < 0.01, 0.9 + 0 * t, 1.1 + 0 * t)
        return base * (0.2 if e > 1 else 1.0)
    c = F4.curves(_profile(g_of_t))
    s = F4.statistics(c)
    below = c.t < 1 - 1e-9
    crossing = float(np.mean(c.t[below] < 0.01))
    assert s["ordered_pairs"][0] == pytest.approx(1 - crossing)
    assert s["ordered_pairs"][1] == 1.0
    assert s["ordered"] == pytest.approx(1 - crossing)
    assert s["ordered_extremes"] == 1.0
    ratios = F4.ordering_ratios(c)
    assert list(ratios.index) == list(c.t[below]) and ratios.shape[1] == 2
    assert np.allclose(ratios.iloc[:, 0], np.where(c.t[below] < 0.01, 0.9, 1.1))
    assert np.allclose(ratios.iloc[:, 1], 5.0)
    assert ((ratios.iloc[:, 0] >= 1 - 1e-3).mean()) == pytest.approx(s["ordered_pairs"][0])


def test_every_band_of_figure4_names_what_it_is():
    """Issue 31 item 6: a band says what it is in the legend (the audit's report shows this
    figure without the chapter's caption)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.collections import PolyCollection

    fig = F4.plot_figure4(F4.curves(_profile(lambda t, e: 0.25 / t)))
    bands = [c for ax in fig.axes for c in ax.collections if isinstance(c, PolyCollection)]
    assert bands and all(b.get_label() == "g, range over heads (band)" for b in bands)
    legend = next(ax.get_legend() for ax in fig.axes if ax.get_legend() is not None)
    assert "g, range over heads (band)" in [t.get_text() for t in legend.get_texts()]
    plt.close(fig)


# ------------------------------------------------------------ intervals over windows (issue 31)
def _windowed_profile(windows=5, heads=4, seed=0):
    """A real sensitivity profile of random logit blocks, one per window (same rows each)."""
    from normlimits.metrics.jacobian import sensitivity_profile

    gen = torch.Generator().manual_seed(seed)
    blocks = [torch.randn(heads, 6, 16, generator=gen, dtype=torch.float64) * (1 + w)
              for w in range(windows)]
    return sensitivity_profile(blocks, default_temperatures(2, 1e-2, 1e2), seed=1)


def test_the_profile_keeps_each_windows_sum_and_pools_them():
    p = _windowed_profile()
    assert p.g_window_sums.shape == (5, *p.g.shape) and p.window_rows.tolist() == [6.0] * 5
    torch.testing.assert_close(p.g_window_sums.sum(0) / p.window_rows.sum(), p.g, rtol=1e-13, atol=0)


def test_claim_intervals_are_the_statistics_of_resampled_windows_and_hold_the_estimate():
    """Each resample's values are claim_values of the profile rebuilt from the drawn windows
    alone (pooled rows, head maximum), so the intervals are those resamples' quantiles, widened
    to the estimate where they miss it."""
    from dataclasses import replace

    from normlimits.core import bootstrap as B

    p = _windowed_profile()
    got = F4.claim_intervals(p, resamples=9, seed=4)
    values = F4.claim_values(F4.curves(p))
    assert set(got) == {"F4", "EPS", "LIM"} and set(got["F4"]) == {"low_slope", "collapse", "drop"}
    drawn = []
    for row in B.resample_indices(5, 9, 4):
        g = p.g_window_sums[row].sum(0) / p.window_rows[row].sum()
        drawn.append(F4.claim_values(F4.curves(replace(p, g=g))))
    for cid, intervals in got.items():
        for key, interval in intervals.items():
            series = torch.tensor([d[cid][key] for d in drawn], dtype=torch.float64)
            low, high = torch.quantile(series, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
            estimate = values[cid][key]
            assert interval.low == pytest.approx(min(low, estimate), abs=1e-12), (cid, key)
            assert interval.high == pytest.approx(max(high, estimate), abs=1e-12), (cid, key)
            assert interval.widened == (not low <= estimate <= high)
    sentence = F4.interval_sentence(values, got)
    assert sentence.startswith("Resampling the 5 windows (9 bootstrap resamples")
    assert "gives 95% intervals: F4's" in sentence                  # 5 windows: an interval
    one = _windowed_profile(windows=1)
    assert F4.claim_intervals(one) == {} and "single window" in F4.interval_sentence(values, {})
    assert F4.claim_intervals(_profile(lambda t, e: 0.25 / t)) == {}      # no per-window sums


def test_the_undecided_sentence_names_each_undecided_criterion_with_its_half_window_interval():
    """EPS's ordered share straddling 0.9 (built by hand on the profile's statistics): the sentence
    gives its interval on all windows and on the first half, and a window count; a profile whose
    verdicts are all decided says so."""
    from normlimits.core.bootstrap import Interval

    p = _windowed_profile(windows=6)
    values = F4.claim_values(F4.curves(p))
    intervals = F4.claim_intervals(p, resamples=200)
    decided = {cid: {k: Interval(v, v, 6) for k, v in vals.items()} for cid, vals in values.items()}
    for cid in ("F4", "LIM"):                   # their identity criterion: not the paper's GPT-2
        values[cid]["paper_model"] = 0
    for on_gpt2 in (False, True):     # F4 and LIM name GPT-2's measurements: graded either way
        assert F4.undecided_sentence(p, decided, paper_model=on_gpt2) == "No verdict of Figure 4 is inconclusive."
    straddling = {**decided, "EPS": {**decided["EPS"], "ordered": Interval(0.5, 1.0, 6)}}
    values["EPS"]["ordered"] = 0.8
    from normlimits import claims
    assert claims.claim("EPS").rule.grade(values["EPS"], straddling["EPS"]) == "inconclusive"
    words = claims.undecided_words(values, straddling, {"EPS": {"ordered": Interval(0.4, 1.0, 3)}},
                                   on_threshold="lattice")
    assert words == ["EPS's criterion 'ordered' is 0.80 [0.50, 1.00] on 6 windows and [0.40, 1.00] on "
                     "the first 3; if the interval narrows as 1/√n, about 24 windows would decide it"]
    # 24 = 6 (0.2 / 0.1)^2: the interval reaches 0.2 from 0.80 towards the threshold 0.9
    real = F4.claim_values(F4.curves(p))["EPS"]["ordered"]
    around = {**decided, "EPS": {**decided["EPS"], "ordered": Interval(min(real, 0.85), max(real, 0.95), 6)}}
    sentence = F4.undecided_sentence(p, around, paper_model=False)
    assert sentence.startswith("How many windows would decide it: EPS's criterion 'ordered' is")
    assert "on 6 windows and [" in sentence and "on the first 3" in sentence
    assert intervals["EPS"]["ordered"].n == 6
