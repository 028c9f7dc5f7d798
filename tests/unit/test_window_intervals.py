"""Intervals over the corpus windows for the distances chapter (issue 31): per-window token-means
and sweeps, their bootstrap resamples, the vectorised KS statistic and its early stop, and the
intervals carried into the ledger rows of Figures 2a-c and Corollary 2."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import ks_2samp

from normlimits import claims
from normlimits.claims import ledger
from normlimits.core import bootstrap as B
from normlimits.experiments import figure2 as F2
from normlimits.experiments import figure2_windows as FW
from normlimits.experiments import reading_table as RT
from normlimits.metrics import critical_n as C
from normlimits.metrics import distances as D
from normlimits.metrics import token_means as TM

from test_readings import FakeCapture

GRID = [1, 2, 5, 8, 16, 20, 24, 32, 64, 100, 112]
LENGTHS = [64, 96, 128]
SWEEP_GRID = [1, 20, 100]
FORMS = ("scaled", "raw")


@pytest.fixture(scope="module")
def kept():
    """Four windows of a small causal attention (2 layers x 3 heads, 128 keys), every row's
    token-means kept per window for two readings, and the last-row sweep at L = 128."""
    caps = [FakeCapture(seed=s, L=128, heads=3) for s in range(4)]
    spec = TM.StudySpec(GRID, forms=FORMS, samples=3, per_octave=8, window_forms=FORMS,
                        expectations={"scaled": ("main", "rms", "upper")})
    study = TM.position_studies(iter(caps), LENGTHS, {"values": spec})["values"]
    sweep = D.sweep_top_n(iter(caps), SWEEP_GRID, 128)
    return caps, study, sweep


def test_per_window_token_means_average_to_the_study_and_resample_exactly(kept):
    caps, study, _ = kept
    plain = TM.position_study(iter(caps), LENGTHS, GRID, forms=FORMS, samples=0, per_octave=8,
                              expectations={"scaled": ("main",)})
    kept = study.per_window["scaled"]
    assert kept["true"].shape == (4, 2, 3, len(LENGTHS), len(GRID))
    torch.testing.assert_close(study.means["scaled"].true, plain.means["scaled"].true)
    torch.testing.assert_close(study.means["scaled"].main, plain.means["scaled"].main)
    again = study.resampled(range(4))
    for s in ("true", "mc", "main", "rms", "upper", "individual", "mc_se"):
        a = getattr(again.means["scaled"], s)
        assert torch.equal(a, getattr(study.means["scaled"], s)), s     # bit for bit
    one = study.resampled([3, 3, 3])
    single = TM.position_study(iter(caps[3:4]), LENGTHS, GRID, forms=("scaled",), samples=0,
                               per_octave=8, expectations=("main",))
    torch.testing.assert_close(one.means["scaled"].true, single.means["scaled"].true)
    torch.testing.assert_close(one.means["scaled"].main, single.means["scaled"].main)
    mixed = study.resampled([0, 0, 3])
    torch.testing.assert_close(mixed.means["scaled"].mc, (2 * kept["mc"][0] + kept["mc"][3]) / 3)
    assert set(mixed.means) == set(FORMS) and mixed.windows == 3
    with pytest.raises(ValueError, match="window indices"):
        study.resampled([4])
    with pytest.raises(ValueError, match="kept no per-window"):
        plain.resampled([0])
    with pytest.raises(ValueError, match="not among the study's forms"):
        TM.StudySpec([1], forms=("scaled",), window_forms=("raw",))


def test_sweeps_keep_each_window_and_resample_exactly(kept):
    caps, _, sweep = kept
    assert sweep.per_window["true"].shape[0] == 4
    assert torch.equal(sweep.resampled(range(4)).true, sweep.true)
    first = D.sweep_top_n(iter(caps[1:2]), SWEEP_GRID, 128)
    torch.testing.assert_close(sweep.resampled([1, 1]).bound_linear, first.bound_linear)


def test_ks_statistics_equal_scipys_with_and_without_ties():
    rng = np.random.default_rng(3)
    for trial in range(60):
        h, n = int(rng.integers(2, 30)), int(rng.integers(1, 5))
        a, b = rng.normal(size=(h, n)), rng.normal(size=(h + int(rng.integers(0, 3)), n))
        if trial % 2:
            a, b = np.round(a, 1), np.round(b, 1)       # many ties, inside and across samples
        ref = [ks_2samp(a[:, j], b[:, j]).statistic for j in range(n)]
        np.testing.assert_allclose(C.ks_statistics(a, b), ref, rtol=0, atol=1e-12)


def test_figure2_intervals_are_the_bootstrap_of_the_chapters_numbers(kept):
    """One statistic by hand: the median over heads of true/E at N = 5 and the longest L, for the
    same resamples of the windows; the interval is their percentile interval, hulled with the
    value on all windows, which is what the chapter records."""
    _, study, sweep = kept
    primary = RT.Reading("scaled")
    got = FW.figure2_intervals(study, sweep, [primary], paper_model=False, resamples=300)
    close = got.readings[primary.label]["F2a"]["close"]
    per = study.per_window["scaled"]
    j, L = GRID.index(5), len(LENGTHS) - 1
    draws = []
    for row in B.resample_indices(4, 300).tolist():
        t = per["true"][row].mean(0)[..., L, j].reshape(-1)
        e = per["mc"][row].mean(0)[..., L, j].reshape(-1)
        draws.append(float(np.median((t / e).numpy())))
    low, high = np.quantile(draws, [0.025, 0.975])
    value = RT.reading_rows({"values": study}, [primary])[0].ratio
    assert close.low == pytest.approx(min(low, value), rel=1e-9)
    assert close.high == pytest.approx(max(high, value), rel=1e-9)
    assert close.n == 4 and close.unit == "window" and close.resamples == 300
    numbers = F2.figure2_numbers(study, sweep)
    for cid, keys in FW.RESAMPLED.items():
        for key, name in keys.items():
            iv = got.intervals[cid][key]
            assert iv.low <= numbers[name] <= iv.high, (cid, key)
    for found in (got.intervals, *got.readings.values()):       # measured criteria only
        for cid, keys in found.items():
            kinds = {c.key: c.kind for c in claims.claim(cid).rule.criteria}
            assert all(kinds[k] == "measurement" for k in keys), (cid, keys)
    fraction = got.readings[primary.label]["F2c"]["fraction"]
    assert 0 < fraction.low <= fraction.high <= 1
    raw = RT.Reading("raw")
    only_2a = FW.figure2_intervals(study, sweep, {primary: ("F2a", "F2c"), raw: ("F2a",)},
                                   paper_model=False, resamples=20)
    assert set(only_2a.readings[raw.label]) == {"F2a"}
    assert set(only_2a.readings[primary.label]) == {"F2a", "F2c"}
    raw_close = RT.reading_rows({"values": study}, [raw], search=False)[0].ratio
    assert only_2a.readings[raw.label]["F2a"]["close"].low <= raw_close
    half = FW.figure2_intervals(study, sweep, [primary], paper_model=False, windows=2,
                                only=[FW.interval_name("COL", "retained")], resamples=50)
    assert half.windows == 2 and list(half.intervals) == ["COL"] and half.readings == {}
    with pytest.raises(ValueError, match="between 2"):
        FW.figure2_intervals(study, sweep, [primary], paper_model=False, windows=1)


def test_the_batched_statistics_are_the_chapters_on_every_resample(kept):
    """window_values computes every resample at once (matrix products, medians along an axis,
    one sort for every KS test); on the resample drawing every window once it gives the chapter's
    own numbers (figure2_numbers, reading_rows), and on any resample the numbers of the study of
    the drawn windows."""
    _, study, sweep = kept
    readings = {RT.Reading("scaled"): ("F2a", "F2c"), RT.Reading("raw"): ("F2a", "F2c")}
    draws = [[0, 1, 2, 3], [2, 2, 0, 3], [1, 1, 1, 1]]
    counts = torch.stack([torch.bincount(torch.tensor(d), minlength=4).double() for d in draws])
    batched = FW.window_values(study, sweep, readings, counts, paper_model=False)
    for r, drawn in enumerate(draws):
        sub, sub_b = study.resampled(drawn), sweep.resampled(drawn)
        sub.per_window.update(study.per_window)
        expected = FW._estimates(sub, sub_b, readings, False)
        assert set(expected) == set(batched)
        for name, value in expected.items():
            assert batched[name][r] == pytest.approx(value, rel=1e-9, abs=1e-12), (draws[r], name)


def test_without_the_sweep_only_the_readings_are_resampled_with_the_same_intervals(kept):
    """The audit's Figure 2 rows (no last-row sweep): figure2_intervals with sweep_b=None resamples
    the readings' criteria alone and gives them exactly the intervals of the chapter's full call."""
    _, study, sweep = kept
    readings = {RT.Reading("scaled"): ("F2a", "F2c"), RT.Reading("raw"): ("F2a",)}
    full = FW.figure2_intervals(study, sweep, readings, paper_model=False, resamples=200)
    alone = FW.figure2_intervals(study, None, readings, paper_model=False, resamples=200)
    assert alone.intervals == {} and full.intervals
    assert alone.readings == full.readings
    counts = torch.stack([torch.bincount(torch.tensor(d), minlength=4).double()
                          for d in ([0, 1, 2, 3], [3, 3, 1, 0])])
    batched = FW.window_values(study, sweep, readings, counts, paper_model=False)
    only = FW.window_values(study, None, readings, counts, paper_model=False)
    assert set(only) == {k for k in batched if "|" in k}
    for name, values in only.items():
        np.testing.assert_array_equal(values, batched[name])


def _grading_rows():
    row = RT.ReadingRow(reading=RT.Reading("scaled"), n=5, length=1024, ratio=1.9,
                        ratio_mc_error=0.0, exp_true=1.0, exp_expected=1.0, search=None,
                        fraction={0.01: 0.06}, spread={0.01: 1.0}, windows=8)
    return [row]


def test_an_interval_straddling_the_closeness_band_makes_f2a_inconclusive_in_the_row_and_its_readings():
    rows = _grading_rows()
    label = rows[0].reading.label
    straddle = {label: {"F2a": {"close": B.Interval(1.5, 2.5, 8)}}}
    (own,) = RT.gradings(rows, "F2a", paper_model=False, intervals=straddle)
    row = claims.make_row("F2a", chapter="distances", model="m", **own.kwargs())
    assert row["verdict"] == "inconclusive"
    assert row["readings"][0]["verdict"] == "inconclusive"
    assert row["readings"][0]["intervals"] == {"close": [1.5, 2.5]}
    assert "close = 1.900 [1.500, 2.500]" in claims.readings_words(row)
    tampered = {**row, "readings": [{**row["readings"][0], "verdict": "confirmed"}]}
    with pytest.raises(ValueError, match="does not follow"):
        ledger.validate_row(tampered)
    inside = {label: {"F2a": {"close": B.Interval(1.8, 1.95, 8)}}}
    (own,) = RT.gradings(rows, "F2a", paper_model=False, intervals=inside)
    assert claims.make_row("F2a", chapter="distances", model="m", **own.kwargs())["verdict"] == "confirmed"
    (plain,) = RT.gradings(rows, "F2a", paper_model=False, intervals={})
    assert "no interval over the windows" in plain.measured and plain.intervals is None


def test_one_window_gives_no_interval(kept):
    caps, _, _ = kept
    spec = TM.StudySpec(GRID, forms=FORMS, samples=2, per_octave=8, window_forms=FORMS,
                        expectations={"scaled": ("main", "rms", "upper")})
    study = TM.position_studies(iter(caps[:1]), LENGTHS, {"values": spec})["values"]
    sweep = D.sweep_top_n(iter(caps[:1]), SWEEP_GRID, 128)
    got = FW.figure2_intervals(study, sweep, [RT.Reading("scaled")], paper_model=False)
    assert got.intervals == {} and got.readings == {} and got.windows == 1
