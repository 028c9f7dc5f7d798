"""The separability chapter's registered rules grade as their text says."""

from __future__ import annotations

import math

import pytest

from normlimits import claims
from normlimits.core.protocol import SEPARABILITY_FLAT_SLOPE, SEPARABILITY_PLATEAU


def grade(claim_id, **values):
    return claims.claim(claim_id).rule.grade(values)


def test_the_chapter_registers_its_claims_with_the_premise_linked():
    assert claims.expected_claims("separability") == ("T2", "F3", "S80", "MHP", "MH", "MON", "TSEP")
    assert claims.claim("MH").premise == "MHP"
    for cid in claims.expected_claims("separability"):
        rule = claims.claim(cid).rule
        assert any(c.kind == "measurement" for c in rule.criteria)


def test_premise_fails_while_the_formula_holds_under_independence():
    """The issue's case: graded as exactly that, not as a refutation of the formula."""
    assert grade("MHP", rate_ratio=0.2, dependence=0.01) == "refuted"
    assert grade("MH", gap=0.01, bernoulli=0.002, jensen=0.0, arithmetic=0.992) == "confirmed"
    assert grade("MHP", rate_ratio=0.95, dependence=0.02) == "confirmed"
    assert grade("MHP", rate_ratio=0.95, dependence=0.2) == "refuted"  # dependent heads
    assert grade("MH", gap=0.12, bernoulli=0.002, jensen=0.0, arithmetic=0.992) == "corrected"


def test_figure3_rule_is_the_multipart_rule():
    low, high = SEPARABILITY_PLATEAU
    ok = dict(slope_after=0.0, knee=16, level=(low + high) / 2, tracks=0.01, flattening=0.1, paper_model=1)
    assert grade("F3", **ok) == "confirmed"
    assert grade("F3", **{**ok, "paper_model": 0}) == "confirmed"
    assert grade("F3", **{**ok, "level": 0.3}) == "partial"            # flattens at another level
    assert grade("F3", **{**ok, "slope_after": -2 * SEPARABILITY_FLAT_SLOPE, "flattening": 0.9}) == "refuted"
    assert grade("F3", **{**ok, "slope_after": -2 * SEPARABILITY_FLAT_SLOPE, "flattening": 0.9,
                          "paper_model": 0}) == "not reproduced"      # GPT-2's figure, another model
    assert grade("F3", **{**ok, "knee": 64}) == "partial"


def test_other_rules():
    assert grade("T2", proven_violations=0, paper_shaped_excess=300, derivation=1) == "corrected"
    assert grade("T2", proven_violations=0, paper_shaped_excess=1, derivation=1) == "confirmed"
    with pytest.raises(claims.rules.ProvenStatementError, match="proven_violations"):
        grade("T2", proven_violations=2, paper_shaped_excess=300, derivation=1)   # a bug, not a verdict
    assert grade("S80", largest_head=0.8, largest_uniform=0.5) == "confirmed"
    assert grade("S80", largest_head=0.8, largest_uniform=0.95) == "refuted"     # a cap: no repair
    assert grade("S80", largest_head=0.95, largest_uniform=0.5) == "refuted"
    assert grade("MON", checkpoints=3, entropy_rank=-0.8, band_share=0.6) == "confirmed"
    assert grade("MON", checkpoints=3, entropy_rank=-0.8, band_share=0.1) == "partial"
    assert grade("MON", checkpoints=3, entropy_rank=0.3, band_share=0.1) == "refuted"
    assert grade("MON", checkpoints=3, entropy_rank=-0.8, band_share=math.nan) == "not testable"
    assert grade("TSEP", rank=-1.0, gain=0.3) == "confirmed"
    assert grade("TSEP", rank=-0.5, gain=0.3) == "partial"
    assert grade("TSEP", rank=0.5, gain=-0.1) == "refuted"


def test_identities_cannot_carry_a_verdict_alone():
    rule = claims.claim("MH").rule
    kinds = {c.key: c.kind for c in rule.criteria}
    assert kinds["jensen"] == kinds["arithmetic"] == "identity"
    assert kinds["gap"] == kinds["bernoulli"] == "measurement"
    with pytest.raises(ValueError, match="no value"):
        claims.record("separability", "MON", {"checkpoints": 1, "entropy_rank": -0.8, "band_share": None},
                      "m", model="x")


def test_mon_on_one_trained_checkpoint_is_not_testable_whatever_the_heads_say():
    """MON is a diagnostic during training: measured on one checkpoint its scope criterion
    fails, so even heads that would confirm it across one model leave it not testable, and the
    row's reason names the checkpoints."""
    assert grade("MON", checkpoints=1, entropy_rank=-0.8, band_share=0.6) == "not testable"
    assert grade("MON", checkpoints=1, entropy_rank=0.3, band_share=0.1) == "not testable"
    row = claims.make_row("MON", {"checkpoints": 1, "entropy_rank": 0.3, "band_share": 0.1}, "m",
                          chapter="separability", model="x")
    assert row["verdict"] == "not testable"
    assert "outside the claim's scope" in row["reason"] and "checkpoints" in row["reason"]
