"""Numerical bad inputs at the public boundary: a clear error or the correct limit, never NaN.

Each case was a silently wrong result before (NaN weights, NaN spread through a profile, a NaN
logit treated as a masked key, an overflowed exp)."""

import math

import pytest
import torch

from normlimits.metrics.distances import distance_profile
from normlimits.metrics.normalizers import general_normalizer, softmax_with_temperature
from normlimits.metrics.separability import geometric_separability
from normlimits.core.validation import InputError

NEG = float("-inf")


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_tiny_temperature_gives_the_arg_max_row_with_ties_shared(dtype):
    logits = torch.tensor([[1.0, 3.0, 3.0, NEG], [0.5, -2.0, 0.25, 0.0]], dtype=dtype)
    weights = softmax_with_temperature(logits, temperature=1e-50)
    expected = torch.tensor([[0, 0.5, 0.5, 0], [1, 0, 0, 0]], dtype=dtype)
    assert torch.equal(weights, expected)


def test_shifted_softmax_equals_the_plain_one_at_ordinary_temperatures():
    logits = torch.randn(4, 3, 9, dtype=torch.float64)
    for t in (0.05, 1.0, 30.0):
        for dim in (-1, 0, 1):
            torch.testing.assert_close(softmax_with_temperature(logits, dim=dim, temperature=t),
                                       torch.softmax(logits / t, dim=dim))


def test_large_logits_do_not_overflow_in_softmax():
    weights = softmax_with_temperature(torch.tensor([[1e3, 0.0, 999.0]]))
    assert torch.isfinite(weights).all()
    assert weights[0, 0] == pytest.approx(1 / (1 + math.exp(-1)))


@pytest.mark.parametrize("temperature,match", [(float("inf"), "limit"), (0.0, "> 0"),
                                               (-1.0, "> 0"), (float("nan"), "> 0")])
def test_bad_temperatures_are_refused_by_name(temperature, match):
    with pytest.raises(ValueError, match=match):
        softmax_with_temperature(torch.zeros(1, 3), temperature=temperature)


@pytest.mark.parametrize("bad", [float("nan"), float("inf")])
def test_nan_or_positive_infinite_logits_are_refused_not_masked(bad):
    logits = torch.tensor([[0.0, bad, 1.0]])
    with pytest.raises(InputError, match="NaN or \\+inf"):
        softmax_with_temperature(logits)
    with pytest.raises(InputError, match="NaN or \\+inf"):
        general_normalizer(logits, torch.exp)


def test_a_fully_masked_row_is_refused():
    with pytest.raises(InputError, match="every key masked"):
        softmax_with_temperature(torch.full((2, 3), NEG))


def test_masked_keys_still_get_weight_zero_in_the_general_normaliser():
    w = general_normalizer(torch.tensor([[0.0, NEG, 1.0]]), torch.exp)
    assert w[0, 1] == 0 and w.sum() == pytest.approx(1.0)


def test_an_overflowing_map_is_named_with_the_remedy():
    with pytest.raises(ValueError, match="overflowed.*softmax_with_temperature"):
        general_normalizer(torch.tensor([[1e3, 0.0]]), torch.exp)


def _weights_and_values():
    torch.manual_seed(0)
    w = torch.softmax(torch.randn(2, 3, 8, 8, dtype=torch.float64), -1)
    x = torch.randn(2, 3, 8, 4, dtype=torch.float64)
    return w, x


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), -0.1])
@pytest.mark.parametrize("metric", ["distance_profile", "geometric_separability"])
def test_bad_weights_are_refused_before_any_statistic(metric, bad):
    w, x = _weights_and_values()
    w[1, 2, 5, 3] = bad
    fn = {"distance_profile": distance_profile, "geometric_separability": geometric_separability}[metric]
    with pytest.raises(InputError, match="weights has"):
        fn(w, x, [1, 2])


@pytest.mark.parametrize("metric", ["distance_profile", "geometric_separability"])
def test_nan_vectors_are_refused(metric):
    w, x = _weights_and_values()
    x[0, 0, 2, 1] = float("nan")
    fn = {"distance_profile": distance_profile, "geometric_separability": geometric_separability}[metric]
    with pytest.raises(InputError, match="NaN or infinite"):
        fn(w, x, [1, 2])


@pytest.mark.parametrize("epsilon", [1e-20, 1e-11])
def test_a_perturbation_lost_to_rounding_is_refused(epsilon):
    from normlimits.metrics.jacobian import check_epsilon

    with pytest.raises(ValueError, match="float64 rounding"):
        check_epsilon(epsilon)
    assert check_epsilon(1e-3) == 1e-3


def test_all_finite_decides_every_case_of_the_fast_sum():
    from normlimits.core.validation import all_finite

    big = torch.finfo(torch.float32).max
    assert all_finite(torch.randn(4, 5))
    assert all_finite(torch.tensor([big, big]))                   # the sum overflows; every entry is finite
    assert all_finite(torch.tensor([60000.0, 60000.0], dtype=torch.float16))
    assert all_finite(torch.empty(0)) and all_finite(torch.arange(5))
    for bad in (float("nan"), float("inf"), float("-inf")):
        for dtype in (torch.float32, torch.float64, torch.float16):
            x = torch.zeros(3, 7, dtype=dtype)
            x[2, 6] = bad
            assert not all_finite(x)
    assert not all_finite(torch.tensor([float("inf"), float("-inf")]))   # the sum is NaN
    assert not all_finite(torch.tensor([big, float("nan")]))


def test_attention_logits_decides_from_the_row_maxima_at_any_rank():
    from normlimits.core.validation import attention_logits

    assert attention_logits(torch.tensor(1.5)) is not None            # one row of one key
    assert attention_logits(torch.empty(0, 4)).numel() == 0
    for bad, message in ((float("nan"), "NaN or \\+inf"), (float("inf"), "NaN or \\+inf"),
                         (float("-inf"), "every key masked")):
        with pytest.raises(InputError, match=message):
            attention_logits(torch.tensor(bad))
        rows = torch.zeros(2, 3, 5)
        rows[1, 2] = float("-inf") if bad == float("-inf") else 0.0
        rows[0, 1, 3] = bad if bad != float("-inf") else 0.0
        with pytest.raises(InputError, match=message):
            attention_logits(rows)
