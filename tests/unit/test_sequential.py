"""Looks fixed in advance, stopping only on the registered criteria (normlimits.core.sequential)."""

from __future__ import annotations

import numpy as np
import pytest

from normlimits.core.bootstrap import LEVEL, bootstrap_values
from normlimits.core.sequential import bonferroni_level, check_looks, run_looks

LOOKS = (2, 4, 8)
THRESHOLD = 0.0


def planted(effect: float, seed: int = 0):
    """A measure on the first ``n`` of 8 windows of a planted per-window statistic (effect plus
    small noise), graded against THRESHOLD with a bootstrap interval at the look's level; records
    every call."""
    values = effect + np.random.default_rng(seed).normal(0, 0.05, 8)
    calls = []

    def measure(n, level):
        calls.append((n, level))
        (interval,) = bootstrap_values(n, lambda rows: {"mean": float(values[rows].mean())}, ["mean"],
                                       level=level).values()
        return interval

    return measure, calls


def decided(interval) -> bool:
    return interval.low > THRESHOLD or interval.high < THRESHOLD


def test_a_clearly_decided_effect_stops_at_the_first_look():
    measure, calls = planted(effect=1.0)
    run = run_looks(LOOKS, measure, decided)
    assert run.decided and run.taken == (2,) and run.windows == 2
    assert calls == [(2, bonferroni_level(LEVEL, 3))]
    assert "stopped after 2 windows" in run.words()


def test_a_planted_null_runs_to_the_cap_and_stays_undecided():
    measure, calls = planted(effect=0.0, seed=3)
    run = run_looks(LOOKS, measure, decided)
    assert [n for n, _ in calls] == list(LOOKS)               # the pre-declared sequence, in order
    assert not run.decided and run.taken == LOOKS
    assert "inconclusive" in run.words()


def test_the_looks_are_fixed_before_any_data_and_the_decision_reads_only_the_criteria():
    """The same looks whatever the data; the decision function alone decides stopping (a measure
    whose values are extreme but whose criteria are undecided runs on)."""
    for effect in (0.0, 1.0, -1.0):
        measure, calls = planted(effect)
        run_looks(LOOKS, measure, lambda result: False)
        assert [n for n, _ in calls] == list(LOOKS)
        assert len({level for _, level in calls}) == 1        # one corrected level for every look


def test_bonferroni_level_and_bad_looks():
    assert bonferroni_level(0.95, 1) == 0.95
    assert abs(bonferroni_level(0.95, 3) - (1 - 0.05 / 3)) < 1e-15
    assert check_looks([2, 4, 8]) == (2, 4, 8)
    for bad in ([], [0, 2], [4, 2], [2, 2]):
        with pytest.raises(ValueError, match="strictly increasing"):
            check_looks(bad)
    with pytest.raises(ValueError):
        bonferroni_level(1.0, 3)
