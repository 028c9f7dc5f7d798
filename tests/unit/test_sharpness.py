"""Tests for the one-pass sweep behind guideline 3: Figure 4's profile and N_s/N at several T."""

from __future__ import annotations

import pytest
import torch

from normlimits.metrics import jacobian as J
from normlimits.experiments import sharpness as S
from normlimits.model.capture import iter_captures
from normlimits.metrics.separability import geometric_separability, project_to_sphere
from normlimits.experiments.separability_sweep import layer_weights


def _windows(count=2, length=40):
    return torch.randint(0, 256, (count, length), generator=torch.Generator().manual_seed(3))


def test_sharpness_sweep_equals_the_separate_measurements(tiny_loaded):
    windows = _windows()
    rows = J.default_rows(40, 10)
    temps, epss, sep_t, grid = [0.05, 1.0], [1e-3, 1.0], [0.1, 1.0], [2, 8]
    profile, sep = S.sharpness_sweep(iter_captures(tiny_loaded, windows), rows, temps, epss,
                                     separability_temperatures=sep_t, n_grid=grid, seed=4)
    # the profile is exactly sensitivity_profile on the same logits
    direct = J.sensitivity_profile((c.logits(rows) for c in iter_captures(tiny_loaded, windows)),
                                   temps, epss, seed=4)
    assert torch.equal(profile.g, direct.g) and torch.equal(profile.norm_max, direct.norm_max)
    # N_s/N is the separability module's, at the given temperature, averaged over rows then windows
    per_window = []
    for cap in iter_captures(tiny_loaded, windows):
        layers = []
        for layer in range(cap.values.shape[0]):
            w = layer_weights(cap, layer, rows, temperature=0.1)
            res = geometric_separability(w, project_to_sphere(cap.values[layer].float()), grid, rows)
            layers.append(torch.nanmean(res.fraction.double(), -2))
        per_window.append(torch.stack(layers))
    expected = torch.stack(per_window).mean(0)
    assert sep.fraction.shape == (2, 2, 4, 2) and sep.fraction_windows.shape == (2, 2, 2, 4, 2)
    assert torch.allclose(sep.fraction[0], expected, atol=1e-12)
    assert torch.allclose(sep.at(0.1), expected, atol=1e-12)
    assert sep.mean_over_heads().shape == (2, 2)
    assert bool(((sep.fraction >= 0) & (sep.fraction <= 1)).all())


def test_sharpness_sweep_errors(tiny_loaded):
    rows = J.default_rows(40, 4)
    with pytest.raises(ValueError, match="temperature"):
        S.sharpness_sweep(iter_captures(tiny_loaded, _windows(1)), rows, [1.0], [0.1],
                          separability_temperatures=[0.0], n_grid=[2])
    with pytest.raises(ValueError, match="no logit blocks|no windows"):
        S.sharpness_sweep(iter([]), rows, [1.0], [0.1], separability_temperatures=[1.0], n_grid=[2])


# ------------------------------------------------------------ guideline 3's intervals (issue 31)
TEMPS = [0.01, 0.1, 1.0]


def _blocks(windows=5, heads=3, rows=6, keys=12, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return [torch.randn(heads, rows, keys, generator=gen, dtype=torch.float64) * (1 + w)
            for w in range(windows)]


def _separability(windows=5, seed=1):
    """A SeparabilityAtTemperature over ``windows`` windows of 2 T x 2 layers x 3 heads x 3 N,
    with the N = 64 column undefined (NaN) everywhere, as for an N no row can select."""
    gen = torch.Generator().manual_seed(seed)
    per_window = torch.rand(windows, 2, 2, 3, 3, generator=gen, dtype=torch.float64)
    per_window[..., 2] = float("nan")
    return S.SeparabilityAtTemperature(torch.tensor([0.01, 0.1], dtype=torch.float64),
                                       torch.tensor([2, 4, 64]), torch.nanmean(per_window, 0), per_window)


def test_the_profile_keeps_each_windows_norm_sum_and_largest_row():
    blocks = _blocks()
    p = J.sensitivity_profile(blocks, TEMPS, [1e-3], seed=2)
    assert p.norm_window_sums.shape == (5, 3, 3) and p.norm_window_max.shape == (5, 3, 3)
    torch.testing.assert_close(p.norm_window_sums.sum(0) / p.window_rows.sum(), p.norm_mean,
                               rtol=1e-13, atol=0)
    assert torch.equal(p.norm_window_max.amax(0), p.norm_max)
    alone = J.sensitivity_profile(blocks[3:4], TEMPS, [1e-3], seed=2)
    torch.testing.assert_close(p.norm_window_sums[3] / 6, alone.norm_mean, rtol=1e-13, atol=0)
    assert torch.equal(p.norm_window_max[3], alone.norm_max)


def test_guideline3_values_pool_exactly_the_drawn_windows():
    """A resample's values are those of the profile and the sweep computed from the drawn windows
    alone (the exact norms do not depend on the random directions, so the profile of the drawn
    blocks can be recomputed), and the resample that draws every window once gives the estimate."""
    from normlimits.core import bootstrap as B

    blocks, sep = _blocks(), _separability()
    p = J.sensitivity_profile(blocks, TEMPS, [1e-3], seed=2)
    estimate = S.guideline3_values(p, sep, 0.01, 0.1)
    once = S.guideline3_values(p, sep, 0.01, 0.1, torch.ones(1, 5, dtype=torch.float64))
    for key in S.GUIDELINE3_KEYS:
        torch.testing.assert_close(once[key], estimate[key], rtol=1e-12, atol=1e-15)
    # the estimate is what the chapter read before: maxima over heads of the pooled curves
    norm = p.norm_mean.reshape(3, -1).amax(-1)
    assert float(estimate["jacobian_rise"]) == pytest.approx(float(norm[0] / norm[1]), rel=1e-15)
    gain = float(torch.nanmean(sep.at(0.01)) - torch.nanmean(sep.at(0.1)))
    assert float(estimate["separability_gain"]) == pytest.approx(gain, rel=1e-13)
    index = B.resample_indices(5, 6, seed=7)
    counts = B.resample_counts(5, 6, seed=7)
    got = S.guideline3_values(p, sep, 0.01, 0.1, counts)
    for r, drawn in enumerate(index.tolist()):
        own = J.sensitivity_profile([blocks[w] for w in drawn], TEMPS, [1e-3], seed=2)
        x = sep.fraction_windows[drawn]
        own_sep = S.SeparabilityAtTemperature(sep.temperatures, sep.n_grid, torch.nanmean(x, 0), x)
        want = S.guideline3_values(own, own_sep, 0.01, 0.1)
        for key in S.GUIDELINE3_KEYS:
            assert float(got[key][r]) == pytest.approx(float(want[key][0]), rel=1e-12), (key, drawn)


def test_guideline3_intervals_hold_the_estimate_and_grade_g3():
    from normlimits import claims

    blocks, sep = _blocks(), _separability()
    p = J.sensitivity_profile(blocks, TEMPS, [1e-3], seed=2)
    values = {k: float(v[0]) for k, v in S.guideline3_values(p, sep, 0.01, 0.1).items()}
    got = S.guideline3_intervals(p, sep, 0.01, 0.1, resamples=200)
    assert set(got) == set(S.GUIDELINE3_KEYS)
    for key, interval in got.items():
        assert interval.low <= values[key] <= interval.high and interval.n == 5
        assert interval.high > interval.low, key        # five different windows move every value
    assert claims.claim("G3").rule.grade(values, got) in claims.VERDICTS
    sentence = S.guideline3_sentence(values, got)
    assert f"{values['jacobian_rise']:.2f} [{got['jacobian_rise'].low:.2f}" in sentence
    assert "gives 95% intervals: " in sentence                     # 5 windows: an interval
    assert "$" not in sentence, "glued text is not typeset: no TeX in it"
    # one window: nothing to resample, and the sentence says so
    single = J.sensitivity_profile(blocks[:1], TEMPS, [1e-3], seed=2)
    assert S.guideline3_intervals(single, sep, 0.01, 0.1) == {}
    assert "single window" in S.guideline3_sentence(values, {})


def test_a_straddling_separability_gain_makes_g3_inconclusive_and_says_how_many_windows():
    """Planted: windows whose N_s/N gain is spread around the rule's threshold 0.01 (mean 0.012),
    with Jacobian norms that clearly rise: G3 is inconclusive, and the sentence names the
    criterion and a window count."""
    from normlimits import claims

    blocks = [b * 1e-3 for b in _blocks(windows=8)]       # near-uniform rows: ||J|| grows ~ 1/T
    p = J.sensitivity_profile(blocks, TEMPS, [1e-3], seed=2)
    per_window = torch.full((8, 2, 1, 1, 1), 0.5, dtype=torch.float64)
    per_window[:, 0, 0, 0, 0] += torch.tensor([0.05, -0.04, 0.06, -0.03, 0.04, -0.05, 0.03, 0.036],
                                                    dtype=torch.float64)
    sep = S.SeparabilityAtTemperature(torch.tensor([0.01, 0.1], dtype=torch.float64), torch.tensor([2]),
                                      per_window.mean(0), per_window)
    values = {k: float(v[0]) for k, v in S.guideline3_values(p, sep, 0.01, 0.1).items()}
    assert values["separability_gain"] == pytest.approx(0.012, abs=1e-12)
    intervals = S.guideline3_intervals(p, sep, 0.01, 0.1)
    assert intervals["separability_gain"].low < 0.01 < intervals["separability_gain"].high
    assert values["jacobian_rise"] > 1.5 and intervals["jacobian_rise"].low > 1.5
    assert claims.claim("G3").rule.grade(values, intervals) == "inconclusive"
    sentence = S.guideline3_undecided_sentence(p, sep, 0.01, 0.1, intervals)
    assert "G3's criterion 'separability_gain' is 0.0120" in sentence and "windows would decide it" in sentence


def test_guideline3_values_refuse_counts_of_another_window_count():
    p = J.sensitivity_profile(_blocks(), TEMPS, [1e-3], seed=2)
    with pytest.raises(ValueError, match=r"counts must be \[resamples, 5\]"):
        S.guideline3_values(p, _separability(), 0.01, 0.1, torch.ones(2, 4, dtype=torch.float64))
