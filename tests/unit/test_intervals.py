"""Intervals and three-way grading (issue 31): normlimits.core.bootstrap's percentile intervals and
the rules' decisions over an interval (pass, fail, undecided), the verdict "inconclusive" where an
undecided criterion could change the verdict, and the ledger refusing a verdict its intervals do
not support."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normlimits.core import bootstrap as B
from normlimits import claims
from normlimits.claims import ledger
from normlimits.claims.rules import Criterion, Rule, regrade


# ----------------------------------------------------------------------------- bootstrap

def test_few_units_make_a_range_and_the_prose_says_so():
    assert [B.distinct_resamples(n) for n in (1, 2, 3, 4, 8)] == [1, 3, 10, 35, 6435]
    for n in (2, 3, 4, 8):               # the resamples drawn never hold more distinct multisets
        drawn = {tuple(sorted(r)) for r in B.resample_indices(n, 2000, seed=1).tolist()}
        assert len(drawn) <= B.distinct_resamples(n)
    assert len({tuple(sorted(r)) for r in B.resample_indices(3, 2000, seed=1).tolist()}) == 10
    four, eight = B.Interval(0.3, 1.0, n=4), B.Interval(0.3, 1.0, n=8)
    assert four.is_range and not eight.is_range
    assert four.count_words() == "range over 4 windows" and eight.count_words() == "8 windows"
    assert B.level_words(eight) == "95% intervals"
    assert B.level_words(eight, plural=False, method=True) == "95% percentile bootstrap interval"
    assert B.level_words(four) == "ranges (over 4 windows, too few for 95% intervals)"
    assert B.level_words(B.Interval(0, 1, n=3, unit="seed"), plural=False, method=True) == \
        "percentile bootstrap range (over 3 seeds, too few for a 95% interval)"
    assert B.resampling_sentence(2).startswith("With 2 windows there are only 3 distinct resamples, "
                                               "so each interval is the range of what they give, "
                                               "not a 95% interval")
    assert B.resampling_sentence(8).startswith("Each interval rests on 8 windows (6,435 distinct resamples)")
    with pytest.raises(ValueError, match="n must be"):
        B.distinct_resamples(0)


def test_indices_are_reproducible_and_in_range():
    a, b = B.resample_indices(8, 2000, seed=3), B.resample_indices(8, 2000, seed=3)
    assert torch.equal(a, b) and a.shape == (2000, 8)
    assert int(a.min()) == 0 and int(a.max()) == 7
    assert not torch.equal(a, B.resample_indices(8, 2000, seed=4))
    with pytest.raises(ValueError, match="at least 2 units"):
        B.resample_indices(1)


def test_interval_is_the_loop_over_resamples_done_at_once():
    """Chunked and vectorised: the same numbers as one resample at a time with numpy."""
    gen = torch.Generator().manual_seed(0)
    per_window = torch.randn(8, 12, generator=gen, dtype=torch.float64)    # windows x heads
    got = B.bootstrap_interval(per_window, B.median_of_means, resamples=500, seed=5, chunk=64)
    index = B.resample_indices(8, 500, seed=5).numpy()
    stats = np.array([np.median(per_window.numpy()[row].mean(0)) for row in index])
    want = np.quantile(stats, [0.025, 0.975])
    assert math.isclose(got.low, want[0], rel_tol=1e-12) and math.isclose(got.high, want[1], rel_tol=1e-12)
    assert (got.n, got.unit, got.resamples, got.level, got.seed) == (8, "window", 500, 0.95, 5)


def test_interval_covers_the_mean_about_as_often_as_it_says():
    """Coverage check on data with a known answer: 95% intervals of the mean of 30 normal units
    contain the true mean in about 95% of 200 repetitions (percentile bootstrap runs a little
    short at small n; 88% is the floor here)."""
    gen = torch.Generator().manual_seed(1)
    hits = 0
    for rep in range(200):
        units = torch.randn(30, generator=gen, dtype=torch.float64) + 2.0
        iv = B.bootstrap_interval(units, B.mean_of_means, resamples=1000, seed=rep)
        hits += iv.low <= 2.0 <= iv.high
    assert 0.88 <= hits / 200 <= 0.99


def _max_of_means(resampled):
    """[R, n, heads] -> [R]: the largest head's mean over the units (an extreme, biased upwards
    under resampling with repeats)."""
    return resampled.mean(1).amax(-1)


def test_an_interval_always_contains_the_estimate_widened_only_when_the_percentiles_miss_it():
    """Figure 4's statistics are maxima over heads of means over windows: with 20,000 equal heads of
    pure noise resampling with repeats inflates every head's spread, so almost every resample's
    maximum lies above the estimate (the largest head's mean over all windows): the plain
    percentile interval
    misses the estimate and is widened down to it; a mean is left alone."""
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(8, 20000, generator=gen, dtype=torch.float64)
    estimate = float(noise.mean(0).max())
    index = B.resample_indices(8, 500, seed=3)
    drawn = noise[index].mean(1).amax(-1)
    plain_low = float(torch.quantile(drawn, 0.025))
    assert plain_low > estimate                                  # the percentile interval misses it
    got = B.bootstrap_interval(noise, _max_of_means, resamples=500, seed=3)
    assert got.widened and got.low == estimate and got.high == pytest.approx(float(torch.quantile(drawn, 0.975)))
    by_values = B.bootstrap_values(8, lambda rows: {"max": float(noise[rows].mean(0).max())}, ["max"],
                                   resamples=500, seed=3)["max"]
    assert by_values.widened and by_values.low == pytest.approx(estimate, abs=1e-15)
    mean = B.bootstrap_interval(noise, B.mean_of_means, resamples=500, seed=3)
    assert not mean.widened and mean.low < float(noise.mean()) < mean.high
    assert got.resampling()["method"] == B.METHOD == "percentile bootstrap, widened to the estimate"


def test_heads_stay_inside_their_window():
    """Windows that differ only by a constant shift of every head: the interval reflects the
    spread between windows, not between heads (heads are never resampled apart)."""
    heads = torch.linspace(-5, 5, 101, dtype=torch.float64)
    same = heads[None, :].repeat(6, 1)
    iv = B.bootstrap_interval(same, B.median_of_means)
    assert abs(iv.low) < 1e-12 and abs(iv.high) < 1e-12
    shifted = same + torch.arange(6, dtype=torch.float64)[:, None]
    iv = B.bootstrap_interval(shifted, B.median_of_means)
    assert 0.0 < iv.low < 2.5 < iv.high < 5.0


def test_bad_statistics_and_units_are_refused():
    data = torch.ones(4, 3)
    with pytest.raises(ValueError, match="one value per resample"):
        B.bootstrap_interval(data, lambda x: x.mean(1))
    with pytest.raises(ValueError, match="NaN on every resample"):
        B.bootstrap_interval(data, lambda x: torch.full((x.shape[0],), float("nan")))
    with pytest.raises(ValueError, match="not one of"):
        B.Interval(0.0, 1.0, 8, unit="head")
    with pytest.raises(ValueError, match="low must be <= high"):
        B.Interval(1.0, 0.0, 8)
    with pytest.raises(ValueError, match="says nothing"):
        B.Interval(0.0, 1.0, 1)


# ------------------------------------------------------------------------ three-way grading

LE = Criterion("gap", "a gap", "<=", 0.1)
IN = Criterion("slope", "a slope", "between", (-1.2, -0.8))


@pytest.mark.parametrize("criterion, interval, decision", [
    (LE, (0.0, 0.05), "pass"), (LE, (0.0, 0.1), "pass"), (LE, (0.11, 0.3), "fail"),
    (LE, (0.05, 0.2), "undecided"),
    (IN, (-1.1, -0.9), "pass"), (IN, (-0.7, -0.5), "fail"), (IN, (-1.5, -1.3), "fail"),
    (IN, (-1.0, -0.5), "undecided"), (IN, (-1.5, -0.5), "undecided"),
    (Criterion("o", "o", "outside", (0.0, 1.0)), (1.5, 2.0), "pass"),
    (Criterion("o", "o", "outside", (0.0, 1.0)), (0.2, 0.4), "fail"),
    (Criterion("o", "o", "outside", (0.0, 1.0)), (0.5, 1.5), "undecided"),
    (Criterion("g", "g", ">", 2.0), (2.0, 3.0), "undecided"),
])
def test_a_criterion_decides_only_on_its_whole_interval(criterion, interval, decision):
    assert criterion.decide(interval) == decision


RULE = Rule((LE, IN), (("all", "confirmed"), ("any:slope", "corrected"), ("else", "refuted")),
            "slope", "the rule")


def test_a_planted_straddling_statistic_is_inconclusive():
    """The point value passes, but the interval contains the threshold and the verdict would
    change with the criterion's outcome: inconclusive, in the row and on regrading it."""
    values = {"gap": 0.05, "slope": -1.0}
    assert RULE.grade(values) == "confirmed"
    straddles = {"gap": (0.02, 0.14)}
    assert RULE.grade(values, straddles) == "inconclusive"
    row = RULE.to_row(values, straddles)
    assert row["verdict"] == "inconclusive"
    assert row["criteria"][0]["decision"] == "undecided" and row["criteria"][0]["passed"] is True
    assert "interval" not in row, "the headline (slope) has no interval here"
    assert regrade({**row, "rule": "the rule"}) == "inconclusive"


def test_an_undecided_criterion_that_cannot_change_the_verdict_leaves_it():
    """slope fails on its whole interval: refuted whatever gap does, so gap's straddling interval
    does not make the verdict inconclusive; intervals wholly on one side decide as the values."""
    values = {"gap": 0.05, "slope": -0.5}
    assert RULE.grade(values, {"gap": (0.0, 0.2), "slope": (-0.6, -0.4)}) == "refuted"
    assert RULE.grade({"gap": 0.05, "slope": -1.0},
                      {"gap": (0.0, 0.08), "slope": (-1.1, -0.9)}) == "confirmed"
    assert RULE.grade({"gap": 0.05, "slope": -1.0},
                      {"gap": (0.2, 0.3), "slope": (-1.1, -0.9)}) == "corrected", \
        "an interval decides even where the point value says otherwise"
    assert RULE.grade({"gap": None, "slope": -1.0}, {"slope": (-1.5, -0.5)}) == "not testable"


def test_identities_take_no_interval_and_outcomes_cannot_name_inconclusive():
    rule = Rule((LE, Criterion("paper", "p", "==", 1.0, "identity")),
                (("all", "confirmed"), ("else", "refuted")), "gap", "r")
    with pytest.raises(ValueError, match="identity"):
        rule.grade({"gap": 0.0, "paper": 1.0}, {"paper": (1.0, 1.0)})
    with pytest.raises(ValueError, match="unknown criteria"):
        rule.grade({"gap": 0.0, "paper": 1.0}, {"other": (0.0, 1.0)})
    with pytest.raises(ValueError, match="never from outcomes"):
        Rule((LE,), (("all", "inconclusive"), ("else", "refuted")), "gap", "r")


def _nu_values(exponent):
    """NU's values with every criterion passing but the exponent, which is ``exponent``."""
    return {"exponent": exponent, "entropy": 0.95, "regime": 0.8}


def test_a_registered_claim_with_a_straddling_interval_is_inconclusive_and_the_ledger_checks_it():
    """NU's exponent (rule: <= -0.9) with an interval across -0.9: the row says inconclusive,
    carries its resampling, and a row whose verdict does not follow from its intervals is
    refused."""
    values = _nu_values(-0.95)
    assert claims.make_row("NU", values, "m", chapter="vanishing", model="x")["verdict"] == "confirmed"
    planted = {"exponent": B.Interval(-1.0, -0.85, 8)}
    row = claims.make_row("NU", values, "m", chapter="vanishing", model="x", intervals=planted)
    assert row["verdict"] == "inconclusive"
    assert row["interval"] == [-1.0, -0.85]
    assert row["resampling"] == {"method": B.METHOD, "unit": "window", "n": 8,
                                 "resamples": B.RESAMPLES, "level": B.LEVEL, "seed": B.SEED}
    decided = {"exponent": B.Interval(-1.0, -0.92, 8)}
    assert claims.make_row("NU", values, "m", chapter="vanishing", model="x",
                           intervals=decided)["verdict"] == "confirmed"
    forged = {**row, "verdict": "confirmed"}
    with pytest.raises(ValueError, match="does not follow"):
        ledger.validate_row(forged)
    with pytest.raises(ValueError, match="different resamplings"):
        claims.make_row("NU", values, "m", chapter="vanishing", model="x",
                        intervals={"exponent": B.Interval(-1.1, -0.95, 8),
                                   "entropy": B.Interval(0.92, 0.97, 4)})
    with pytest.raises(ValueError, match="must be a normlimits.core.bootstrap.Interval"):
        claims.make_row("NU", values, "m", chapter="vanishing", model="x",
                        intervals={"exponent": (-1.1, -0.95)})


def test_a_row_with_intervals_is_what_its_registered_rule_gives_and_a_forged_decision_is_not():
    """The check the build and record_variant apply (claims.registered_row) reads the criteria's
    intervals too: without them an inconclusive row would look graded by another rule (CI failed
    on this with ALT-REM-size), and with them a row claiming 'pass' for a straddling criterion is
    caught."""
    row = claims.make_row("NU", _nu_values(-0.95), "m", chapter="vanishing", model="x",
                          intervals={"exponent": B.Interval(-1.0, -0.85, 8)})
    registered = claims.registered_row(row)
    for field in ("rule", "criteria", "outcomes", "headline", "verdict"):
        assert registered[field] == row[field], field
    assert registered["verdict"] == "inconclusive"
    criteria = [{**c, "decision": "pass"} if c["key"] == "exponent" else c for c in row["criteria"]]
    assert claims.registered_row({**row, "criteria": criteria})["criteria"] != criteria


def test_a_row_recorded_again_from_its_recorded_intervals_is_the_same_row():
    """The architectures chapter records the audit's rows again: claims.recorded_intervals gives
    back the Interval objects, so the second row keeps the first's intervals, resampling and
    verdict (without them an inconclusive audit row would be recorded as refuted)."""
    planted = {"exponent": B.Interval(-1.0, -0.85, 8, resamples=500, seed=4)}
    row = claims.make_row("NU", _nu_values(-0.95), "m", chapter="audit", model="x", intervals=planted)
    assert claims.recorded_intervals(row) == planted
    again = claims.make_row("NU", _nu_values(-0.95), "m", chapter="architectures", model="x",
                            intervals=claims.recorded_intervals(row))
    assert {k: again[k] for k in ("criteria", "verdict", "resampling", "interval")} == \
        {k: row[k] for k in ("criteria", "verdict", "resampling", "interval")}
    assert again["verdict"] == "inconclusive"
    bare = claims.make_row("NU", _nu_values(-0.95), "m", chapter="audit", model="x")
    assert claims.recorded_intervals(bare) == {}


def test_values_of_index_rows_give_the_same_interval_as_the_tensor_path():
    """bootstrap_values (one call per resample, several statistics) and bootstrap_interval (a
    tensor statistic) draw the same resamples: the same intervals; None/NaN are left out."""
    gen = torch.Generator().manual_seed(2)
    per_window = torch.randn(6, 5, generator=gen, dtype=torch.float64)

    def values_of(rows):
        chosen = per_window[rows]
        return {"median": float(chosen.mean(0).quantile(0.5)),
                "mean": float(chosen.mean()), "never": None}

    got = B.bootstrap_values(6, values_of, ["median", "mean", "never"], resamples=300, seed=9)
    assert set(got) == {"median", "mean"}, "a statistic with no number gets no interval"
    want = B.bootstrap_interval(per_window, B.median_of_means, resamples=300, seed=9)
    assert math.isclose(got["median"].low, want.low, rel_tol=1e-12)
    assert math.isclose(got["median"].high, want.high, rel_tol=1e-12)
    mean = B.bootstrap_interval(per_window, B.mean_of_means, resamples=300, seed=9)
    assert math.isclose(got["mean"].low, mean.low, rel_tol=1e-12)
    assert math.isclose(got["mean"].high, mean.high, rel_tol=1e-12) and got["mean"].n == 6


def test_the_graded_display_shows_each_interval_and_its_decision():
    """A chapter's table of a rule: the measured column carries value [low, high], the passes
    column the decision on the whole interval."""
    values = _nu_values(-0.95)
    row = claims.make_row("NU", values, "m", chapter="vanishing", model="x",
                          intervals={"exponent": B.Interval(-1.0, -0.85, 8)})
    text = claims.Graded(row)._repr_html_()
    assert "verdict-inconclusive" in text and "-0.9500 [-1.000, -0.8500] (8 windows)" in text
    few = claims.make_row("NU", values, "m", chapter="vanishing", model="x",
                          intervals={"exponent": B.Interval(-1.0, -0.85, 3)})
    assert "-0.9500 [-1.000, -0.8500] (range over 3 windows)" in claims.Graded(few)._repr_html_()
    cells = text.split("<code>exponent</code>")[1].split("</tr>")[0]
    assert "undecided" in cells and ">yes<" not in cells


def test_units_to_decide_scales_the_half_width_as_one_over_root_n():
    iv = B.Interval(0.0, 0.4, 8)                            # half-width 0.2 around 0.2
    assert B.units_to_decide(iv, 0.2, 0.1) == 32             # gap 0.1: (0.2 / 0.1)^2 * 8
    assert B.units_to_decide(iv, 0.2, 0.2) == math.inf       # on the threshold: never
    assert B.units_to_decide(iv, 0.2, -0.1) == 8             # already clear


def test_units_to_decide_uses_the_side_of_a_skewed_interval_that_faces_the_threshold():
    iv = B.Interval(-0.005, 0.102, 8)                        # skewed: 0.012 below 0.007, 0.095 above
    # towards 0.1 the interval reaches 0.095 from the value, against a gap of 0.093: more than
    # the 8 windows it has (the half-width, 0.0535, would say 3, which 8 windows already beat)
    assert B.units_to_decide(iv, 0.007, 0.1) == math.ceil(8 * (0.095 / 0.093) ** 2) == 9
    assert B.units_to_decide(B.Interval(-0.102, 0.005, 8), -0.007, -0.1) == 9


def test_a_criterion_decides_on_an_interval_object_as_on_a_pair():
    assert LE.decide(B.Interval(0.05, 0.2, 8)) == LE.decide((0.05, 0.2)) == "undecided"


def test_bootstrap_counts_is_bootstrap_values_for_a_statistic_of_the_counts():
    """The batched bootstrap draws the same resamples as bootstrap_values, evaluates each distinct
    multiset of units once, and gives the same intervals, widened to the given estimates."""
    from normlimits.core import bootstrap as B

    data = torch.tensor([0.3, 1.7, -0.4, 2.2, 0.9], dtype=torch.float64)
    seen = []

    def batched(counts):
        seen.append(counts.shape[0])
        return {"mean": counts @ data / counts.sum(1), "top": (counts > 0).double() @ (data > 1).double()}

    got = B.bootstrap_counts(5, batched, {"mean": float(data.mean()), "top": 2.0}, resamples=500, chunk=64)
    ref = B.bootstrap_values(5, lambda idx: {"mean": float(data[idx].mean()),
                                             "top": float((data[sorted(set(idx))] > 1).sum())},
                             ["mean", "top"], resamples=500)
    for key in ("mean", "top"):
        assert got[key].low == pytest.approx(ref[key].low) and got[key].high == pytest.approx(ref[key].high)
    assert sum(seen) < 500                                  # repeated multisets computed once
    counts = B.resample_counts(5, 500)
    assert torch.equal(counts.sum(1), torch.full((500,), 5.0, dtype=torch.float64))
    wide = B.bootstrap_counts(5, batched, {"mean": 10.0, "top": 2.0}, resamples=100)
    assert wide["mean"].high == 10.0 and wide["mean"].widened


def test_an_exchangeable_statistic_is_evaluated_once_per_multiset():
    data = [0.3, 1.7, -0.4]
    calls = []

    def mean(idx):
        calls.append(tuple(idx))
        return {"m": sum(data[i] for i in idx) / len(idx)}

    plain = B.bootstrap_values(3, mean, ["m"], resamples=300)
    calls.clear()
    once = B.bootstrap_values(3, mean, ["m"], resamples=300, exchangeable=True)
    assert (once["m"].low, once["m"].high) == pytest.approx((plain["m"].low, plain["m"].high))
    assert len(calls) <= 10 + 1                     # 10 multisets of 3 units, and the estimate


def test_unit_counts_and_weighted_sums_are_the_resamples_sums():
    """The one place the resampling of windows counts units and sums them (token-means, sweeps,
    separability moments and the batched distances statistics all use it)."""
    assert B.unit_counts([2, 0, 2], 4).tolist() == [1.0, 0.0, 2.0, 0.0]
    for bad in ([], [4], [-1]):
        with pytest.raises(ValueError, match="window indices"):
            B.unit_counts(bad, 4)
    per_unit = torch.arange(24, dtype=torch.float64).reshape(4, 2, 3)
    counts = B.unit_counts([2, 0, 2], 4)
    torch.testing.assert_close(B.weighted_sum(per_unit, counts), per_unit[0] + 2 * per_unit[2])
    batch = torch.stack([counts, torch.ones(4, dtype=torch.float64)])
    got = B.weighted_sum(per_unit, batch)
    assert got.shape == (2, 2, 3)
    torch.testing.assert_close(got[1], per_unit.sum(0))


def test_without_interval_names_the_graded_rows_that_neither_resample_nor_say_why():
    rule = claims.claim("NU").rule
    values = {**{c.key: 0.0 for c in rule.criteria}, "regime": 1.0}     # inside NU's scope
    bare = claims.make_row("NU", values, "x", chapter="a", model="m")
    said = claims.make_row("NU", values, "x", chapter="a", model="m", unresampled="one window")
    resampled = claims.make_row("NU", values, "x", chapter="a", model="m",
                                intervals={rule.headline: B.Interval(-1.0, 1.0, 8)})
    untestable = claims.make_row("NU", {c.key: None for c in rule.criteria}, "x", chapter="a",
                                 model="m", reason="no model")
    checks = claims.make_row("C1", {"literal_outside": 0.0, "literal_example": 2, "maxkey_outside": 0.0}, "x",
                             chapter="a", model="m")
    assert claims.without_interval([bare, said, resampled, untestable, checks]) == ["NU (-, m)"]


def test_drawn_means_keep_a_nan_only_where_a_drawn_unit_has_one():
    per_window = torch.tensor([[1.0, 2.0], [3.0, math.nan], [5.0, 6.0]], dtype=torch.float64)
    counts = torch.tensor([[1.0, 1.0, 1.0], [2.0, 0.0, 1.0], [0.0, 3.0, 0.0]], dtype=torch.float64)
    means = B.drawn_mean(per_window, counts)
    assert means[0, 0] == 3.0 and math.isnan(means[0, 1])
    assert means[1].tolist() == [7.0 / 3, 10.0 / 3]            # the NaN window was not drawn
    assert means[2, 0] == 3.0 and math.isnan(means[2, 1])
    assert torch.equal(means[0, :1], per_window.mean(0)[:1])
    # the sums behind them: an undrawn NaN unit is not seen, a drawn one is; without NaN the
    # product is the plain one, bit for bit
    sums = B.weighted_sum(per_window, counts)
    assert sums[1].tolist() == [7.0, 10.0] and math.isnan(sums[2, 1])
    finite = torch.nan_to_num(per_window, nan=4.0)
    assert torch.equal(B.weighted_sum(finite, counts), counts @ finite)
