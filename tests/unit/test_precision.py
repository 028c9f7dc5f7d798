"""Tolerances raised to the working precision of float32 values, never lowered (issue 47 item 8)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normlimits.book.chapter import check_bound
from normlimits.core.precision import ROUNDING_UNITS, dtype_rtol, working_eps
from normlimits.experiments.figure2 import _count_outside
from normlimits.metrics.normalizer_jacobians import substochastic_top_eigenvalue

EPS32 = float(torch.finfo(torch.float32).eps)


def test_dtype_rtol_raises_a_tolerance_below_the_values_precision_and_never_lowers_one():
    f32, f64 = torch.ones(3), torch.ones(3, dtype=torch.float64)
    assert dtype_rtol(1e-9, f32) == ROUNDING_UNITS * EPS32 > 1e-9
    assert dtype_rtol(1e-9, f64) == 1e-9                       # float64 resolves 1e-9
    assert dtype_rtol(1e-9, f64, f32, None, 2.0) == ROUNDING_UNITS * EPS32   # the least precise
    assert dtype_rtol(1e-9, np.ones(2, dtype=np.float32)) == ROUNDING_UNITS * EPS32
    assert dtype_rtol(1e-3, f32) == 1e-3                       # a looser request stays
    assert dtype_rtol(1e-9, torch.ones(2, dtype=torch.float16)) == ROUNDING_UNITS * float(torch.finfo(torch.float16).eps)
    assert working_eps(torch.arange(3), "text", 1.0) == float(torch.finfo(torch.float64).eps)
    with pytest.raises(ValueError, match="rtol must be >= 0"):
        dtype_rtol(-1.0, f32)


def float32_third():
    """float32(1/3) lies 1/3 * 3e-8 above 1/3: one rounding, 30 times a relative 1e-9."""
    value = torch.tensor([1 / 3], dtype=torch.float32)
    bound = torch.tensor([1 / 3], dtype=torch.float64)
    assert float(value) > float(bound) * (1 + 1e-9)
    return value, bound


def test_check_bound_does_not_count_float32_rounding_as_a_violation():
    value, bound = float32_third()
    assert check_bound(value, upper=bound, name="rounded", rtol=1e-9) == 1
    with pytest.raises(AssertionError, match="1 of 1 values lie above"):
        check_bound(value.double(), upper=bound, name="float64 is held to 1e-9", rtol=1e-9)
    with pytest.raises(AssertionError, match="above the upper bound"):
        check_bound(value * (1 + 100 * EPS32), upper=bound, name="beyond 8 eps", rtol=1e-9)


def test_count_outside_does_not_count_float32_rounding():
    value, bound = float32_third()
    assert _count_outside(value, upper=bound, rtol=1e-9) == 0
    assert _count_outside(value.double(), upper=bound, rtol=1e-9) == 1
    assert _count_outside(value * (1 + 100 * EPS32), upper=bound, rtol=1e-9) == 1
    assert _count_outside(bound, lower=value, rtol=1e-9) == 0


def test_float32_rows_summing_to_one_up_to_rounding_are_accepted():
    """Float32 softmax rows sum to 1 up to float32 rounding, more than 1e-9 above it on some rows:
    the check refused them as "sum > 1". Their eigenvalue lies where interlacing puts it, in
    [a_(2), a_(1)]; a row that exceeds 1 by more than the rounding is still refused."""
    gen = torch.Generator().manual_seed(0)
    rows = torch.softmax(torch.randn(200, 50, generator=gen), -1)            # float32
    over = rows.double().sum(-1) > 1 + 1e-9
    assert bool(over.any())                                                 # the case exists
    got = substochastic_top_eigenvalue(rows[over])
    top2 = rows[over].double().topk(2, -1).values
    assert bool(((got >= top2[:, 1]) & (got <= top2[:, 0])).all())
    with pytest.raises(ValueError, match="sum <= 1"):
        substochastic_top_eigenvalue(rows[:1] * (1 + 100 * EPS32))
