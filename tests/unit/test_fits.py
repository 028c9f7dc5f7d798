"""The book's one log-log fit and the line through the origin (normlimits.core.fits)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

from normlimits.core.fits import loglog_fit, slope_through_origin

LENGTHS = [32, 64, 128, 256, 512, 1024]


def test_recovers_exponents_and_prefactors_of_a_batch():
    x = torch.tensor(LENGTHS, dtype=torch.float64)
    y = torch.stack([3.0 * x ** p for p in (-1.0, -0.5, 0.0, 1.0)])
    fit = loglog_fit(LENGTHS, y)
    torch.testing.assert_close(fit.exponent, torch.tensor([-1.0, -0.5, 0.0, 1.0], dtype=torch.float64))
    torch.testing.assert_close(fit.prefactor, torch.full((4,), 3.0, dtype=torch.float64))
    torch.testing.assert_close(fit.predict(LENGTHS), y)
    assert fit.points.tolist() == [6, 6, 6, 6]


def test_single_curve_gives_a_zero_dimensional_fit_and_accepts_numpy_and_lists():
    fit = loglog_fit(np.array(LENGTHS), [5e-4 * v ** 1.5 for v in LENGTHS])
    assert fit.exponent.dim() == 0
    assert float(fit.exponent) == pytest.approx(1.5) and float(fit.prefactor) == pytest.approx(5e-4)


def test_range_and_non_positive_points_are_left_out_per_curve():
    x = torch.tensor(LENGTHS, dtype=torch.float64)
    clean = 2.0 / x
    dirty = clean.clone()
    dirty[2] = 0.0                   # skipped, only in its own curve
    dirty[3] = float("nan")
    fit = loglog_fit(LENGTHS, torch.stack([clean, dirty]))
    assert fit.points.tolist() == [6, 4]
    torch.testing.assert_close(fit.exponent, torch.tensor([-1.0, -1.0], dtype=torch.float64))
    # a kink outside [64, 256] does not move the fit inside it
    kinked = torch.where(x > 256, x ** 2, 1 / x)
    assert float(loglog_fit(LENGTHS, kinked, low=64, high=256).exponent) == pytest.approx(-1.0)


def test_too_few_points_give_nan_and_no_distinct_x_is_an_error():
    fit = loglog_fit(LENGTHS, torch.tensor([1.0, 0, 0, 0, 0, 0]))
    assert math.isnan(float(fit.exponent))
    with pytest.raises(ValueError, match="two distinct"):
        loglog_fit([8, 8], [1.0, 2.0])
    with pytest.raises(ValueError, match="last dimension"):
        loglog_fit(LENGTHS, torch.ones(5))


@settings(max_examples=50, deadline=None)
@given(st.floats(-3, 3), st.floats(0.01, 100))
def test_any_exact_power_law_is_recovered(p, c):
    y = [c * v ** p for v in LENGTHS]
    fit = loglog_fit(LENGTHS, y)
    assert float(fit.exponent) == pytest.approx(p, abs=1e-9)
    assert float(fit.prefactor) == pytest.approx(c, rel=1e-9)


def test_slope_through_origin():
    assert slope_through_origin([32, 64, 128], [2, 4, 8]) == pytest.approx(1 / 16)
    assert slope_through_origin([32, 64, float("nan")], [2, 4, 100]) == pytest.approx(1 / 16)
    assert math.isnan(slope_through_origin([], []))
