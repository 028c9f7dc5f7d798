"""The Student t interval over few units (issue 47, items 5 and 7): its formula, its coverage at
n = 3 where a percentile bootstrap is only the range, its refusals, and its passage through a
ledger row (schema 4.0 names the method)."""

from __future__ import annotations

import math

import pytest
import torch

from normlimits import claims
from normlimits.core import bootstrap as B


def test_t_interval_is_the_mean_plus_minus_t_times_the_standard_error():
    iv = B.t_interval([1.0, 2.0, 3.0])
    half = 4.302652729911275 / math.sqrt(3)            # t_{0.975, 2} * sd 1 / sqrt 3
    assert (iv.low, iv.high) == pytest.approx((2 - half, 2 + half), rel=1e-9)
    assert iv.n == 3 and iv.unit == "seed" and iv.method == B.T_METHOD and iv.resamples == 0
    geo = B.t_interval([1.0, 4.0], log=True, unit="window")
    half2 = 12.706204736174698 * math.log(4) / math.sqrt(2) / math.sqrt(2)
    assert (geo.low, geo.high) == pytest.approx((2 * math.exp(-half2), 2 * math.exp(half2)), rel=1e-9)


def test_t_interval_covers_the_mean_at_three_units_where_the_bootstrap_does_not():
    """Normal samples of 3: the t interval covers the true mean about 95% of the time; the
    percentile bootstrap over the same 3 values, at most their range, far less often."""
    gen = torch.Generator().manual_seed(5)
    samples = torch.randn(1500, 3, generator=gen, dtype=torch.float64)
    t_cover = sum(B.t_interval(s).low <= 0 <= B.t_interval(s).high for s in samples) / len(samples)
    boot_cover = sum(float(s.min()) <= 0 <= float(s.max()) for s in samples) / len(samples)
    assert 0.93 <= t_cover <= 0.97
    assert boot_cover < 0.8                           # the range of 3 covers 1 - 2 (1/2)^3 = 75%


def test_t_interval_refuses_what_it_cannot_do():
    with pytest.raises(ValueError, match="at least 2"):
        B.t_interval([1.0])
    with pytest.raises(ValueError, match="non-finite"):
        B.t_interval([1.0, float("nan")])
    with pytest.raises(ValueError, match="positive"):
        B.t_interval([1.0, -1.0], log=True)
    with pytest.raises(ValueError, match="method"):
        B.Interval(0.0, 1.0, n=3, method="guess")


def test_a_row_with_t_intervals_records_the_method_and_reads_back_the_same():
    values = {"exponent": -0.5, "entropy": 0.6, "regime": 0.9}
    ivs = {"exponent": B.t_interval([-0.6, -0.5, -0.4], unit="window"),
           "entropy": B.t_interval([0.5, 0.6, 0.7], unit="window")}
    row = claims.make_row("NU", values, "m", chapter="vanishing", model="x", intervals=ivs)
    assert row["resampling"]["method"] == B.T_METHOD and row["resampling"]["resamples"] == 0
    assert claims.recorded_intervals(row) == ivs
