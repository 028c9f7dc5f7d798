"""NaN and +-inf inputs are refused by every metric, with the one message of
:func:`normlimits.core.validation.finite_entries` (issue 47, item 8): ``<argument> has <n> NaN or
infinite entries; <remedy>``, the message :func:`distance_profile` gives.

Before, ``row_statistics``, ``enumerated_expectation``, ``linearised_sensitivity``,
``finite_difference_sensitivity``, ``sensitivity_profile`` and ``ks_critical_n`` returned numbers
(a -inf direction entry gave a finite g of 327 above its envelope) or NaN."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normlimits.core.validation import FINITE_REMEDIES, InputError, finite_entries
from normlimits.metrics import jacobian as J
from normlimits.metrics.critical_n import ks_critical_n
from normlimits.metrics.distances import distance_profile, enumerated_expectation
from normlimits.metrics.readings import row_statistics

BAD = [float("nan"), float("inf"), float("-inf")]
MESSAGE = r"has 1 NaN or infinite entries; "


def weights_and_vectors(keys=6, rows=3, dim=4):
    gen = torch.Generator().manual_seed(0)
    weights = torch.softmax(torch.randn(2, rows, keys, generator=gen, dtype=torch.float64), -1)
    vectors = torch.randn(2, keys, dim, generator=gen, dtype=torch.float64)
    return weights, vectors


def same_message_as_distance_profile(call, weights, vectors):
    """``call(weights, vectors)`` raises exactly what distance_profile raises on those inputs."""
    with pytest.raises(InputError, match=MESSAGE) as reference:
        distance_profile(weights, vectors, [1, 2])
    with pytest.raises(InputError, match=MESSAGE) as got:
        call(weights, vectors)
    assert str(got.value).split(";")[1:] == str(reference.value).split(";")[1:]
    assert str(got.value).split(" has ")[0] in ("weights", "vectors", "values")


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("where", ["weights", "vectors"])
def test_row_statistics_refuses_non_finite_inputs(where, bad):
    weights, vectors = weights_and_vectors()
    (weights if where == "weights" else vectors)[1, 2, 3] = bad
    same_message_as_distance_profile(lambda w, x: row_statistics(w, x, [1, 2]), weights, vectors)


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("where", ["weights", "vectors"])
def test_enumerated_expectation_refuses_non_finite_inputs(where, bad):
    weights, vectors = weights_and_vectors()
    (weights if where == "weights" else vectors)[1, 2, 3] = bad
    same_message_as_distance_profile(lambda w, x: enumerated_expectation(w[:, 2], x, 2), weights, vectors)


def logits_and_directions(rows=3, keys=5):
    gen = torch.Generator().manual_seed(1)
    logits = torch.randn(rows, keys, generator=gen, dtype=torch.float64)
    logits[0, 3:] = float("-inf")                          # masked keys are legitimate
    return logits, J.random_unit_directions(logits, gen)


@pytest.mark.parametrize("bad", BAD)
def test_the_sensitivities_refuse_non_finite_directions(bad):
    logits, directions = logits_and_directions()
    directions[1, 2] = bad
    weights = torch.softmax(logits, -1)
    for call in (lambda: J.linearised_sensitivity(weights, directions),
                 lambda: J.finite_difference_sensitivity(logits, [1.0], [1e-3], directions)):
        with pytest.raises(InputError, match="directions " + MESSAGE + FINITE_REMEDIES["directions"][:30]):
            call()


@pytest.mark.parametrize("bad", BAD)
def test_linearised_sensitivity_refuses_non_finite_weights(bad):
    logits, directions = logits_and_directions()
    weights = torch.softmax(logits, -1)
    weights[2, 1] = bad
    with pytest.raises(InputError, match="weights " + MESSAGE + FINITE_REMEDIES["weights"][:30]):
        J.linearised_sensitivity(weights, directions)


@pytest.mark.parametrize("bad, message", [(float("nan"), r"NaN or \+inf"), (float("inf"), r"NaN or \+inf"),
                                          (float("-inf"), "every key masked")])
def test_the_sensitivities_refuse_bad_logits(bad, message):
    """Logits: NaN and +inf are refused; -inf is a masked key, refused only where it masks a
    whole row (the logits' own check, :func:`normlimits.core.validation.attention_logits`)."""
    logits, directions = logits_and_directions()
    if bad == float("-inf"):
        logits[2] = bad
        directions[2] = 0.0
    else:
        logits[2, 1] = bad
    with pytest.raises(InputError, match=message):
        J.finite_difference_sensitivity(logits, [1.0], [1e-3], directions)
    with pytest.raises(InputError, match=message):
        J.sensitivity_profile([logits[None]], [1.0], [1e-3])


def test_masked_logits_still_pass():
    logits, directions = logits_and_directions()
    g = J.finite_difference_sensitivity(logits, [1.0], [1e-3], directions)
    assert bool(torch.isfinite(g).all())
    assert bool(torch.isfinite(J.sensitivity_profile([logits[None]], [1.0], [1e-3]).g).all())


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("where", ["true_by_head", "expected_by_head"])
def test_ks_critical_n_refuses_non_finite_samples(where, bad):
    gen = np.random.default_rng(0)
    true, expected = gen.normal(size=(20, 3)), gen.normal(size=(20, 3))
    (true if where == "true_by_head" else expected)[4, 1] = bad
    with pytest.raises(InputError, match=where + " " + MESSAGE + FINITE_REMEDIES["samples"][:30]):
        ks_critical_n(true, expected, [1, 2, 4])


def test_finite_entries_counts_and_names_the_kind():
    x = torch.zeros(3, 4)
    assert finite_entries(x, argument="x", kind="vectors") is x
    x[0, 1], x[2, 3] = float("nan"), float("-inf")
    with pytest.raises(InputError, match="x has 2 NaN or infinite entries; the distances"):
        finite_entries(x, argument="x", kind="vectors")
    with pytest.raises(ValueError, match="kind must be one of"):
        finite_entries(x, argument="x", kind="logits")
