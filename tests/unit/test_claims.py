"""Grading rules, the claim registry and the ledger rows they produce (normlimits.claims, ledger)."""

from __future__ import annotations

import json
import math

import pytest

from normlimits import claims
from normlimits.claims import ledger
from normlimits.claims import Criterion, Rule


def _rule():
    return Rule(criteria=(Criterion("slope", "fitted slope", "between", (0.03, 0.12)),
                          Criterion("exponent", "fitted exponent", "between", (0.8, 1.2)),
                          Criterion("zero", "value at $N = L$", "==", 0, kind="identity")),
                outcomes=(("all", "confirmed"), ("any:slope,exponent", "corrected"), ("else", "refuted")),
                headline="slope", text="confirmed when both fits match the paper")


def test_outcomes_are_taken_in_order_and_missing_values_are_not_testable():
    rule = _rule()
    assert rule.grade({"slope": 0.06, "exponent": 1.0, "zero": 0}) == "confirmed"
    assert rule.grade({"slope": 0.3, "exponent": 1.0, "zero": 0}) == "corrected"
    assert rule.grade({"slope": 0.3, "exponent": 0.5, "zero": 0}) == "refuted"
    assert rule.grade({"slope": None, "exponent": 0.5, "zero": 0}) == "not testable"
    assert rule.grade({"slope": math.nan, "exponent": 0.5, "zero": 0}) == "not testable"
    none_rule = Rule((Criterion("a", "a", "<", 1), Criterion("b", "b", "<", 1)),
                     (("none:a,b", "refuted"), ("else", "confirmed")), "a", "t")
    assert none_rule.grade({"a": 2, "b": 2}) == "refuted"
    assert none_rule.grade({"a": 0, "b": 2}) == "confirmed"


@pytest.mark.parametrize("op, threshold, inside, outside", [
    ("<=", 1, 1.0, 1.01), ("<", 1, 0.99, 1.0), (">=", 1, 1.0, 0.99), (">", 1, 1.01, 1.0),
    ("==", 0, 0.0, 1e-12), ("between", (0, 1), 1.0, 1.01), ("outside", (0, 1), 1.01, 0.5)])
def test_each_comparison(op, threshold, inside, outside):
    c = Criterion("x", "x", op, threshold)
    assert c.passes(inside) is True and c.passes(outside) is False and c.passes(None) is None


@pytest.mark.parametrize("kwargs, match", [
    (dict(criteria=(Criterion("z", "z", "==", 0, kind="identity"),), outcomes=(("else", "confirmed"),),
          headline="z"), "measurement"),
    (dict(criteria=(Criterion("a", "a", "<", 1),), outcomes=(("all", "confirmed"),), headline="a"), "else"),
    (dict(criteria=(Criterion("a", "a", "<", 1),), outcomes=(("all:b", "confirmed"), ("else", "refuted")),
          headline="a"), "unknown criteria"),
    (dict(criteria=(Criterion("a", "a", "<", 1),), outcomes=(("else", "probably"),), headline="a"), "verdict"),
    (dict(criteria=(Criterion("a", "a", "<", 1),), outcomes=(("else", "not testable"),), headline="a"),
     "missing values"),
    (dict(criteria=(Criterion("a", "a", "<", 1),), outcomes=(("else", "refuted"),), headline="b"), "headline"),
    (dict(criteria=(Criterion("a", "a", "<", 1), Criterion("a", "a", "<", 2)), outcomes=(("else", "refuted"),),
          headline="a"), "unique"),
])
def test_malformed_rules_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        Rule(text="t", **kwargs)


def test_malformed_criteria_are_refused():
    with pytest.raises(ValueError, match="pair"):
        Criterion("a", "a", "between", 1)
    with pytest.raises(ValueError, match="one number"):
        Criterion("a", "a", "<=", (1, 2))
    with pytest.raises(ValueError, match="op"):
        Criterion("a", "a", "~", 1)
    with pytest.raises(ValueError, match="low > high"):
        Criterion("a", "a", "between", (2, 1))


def test_values_must_name_exactly_the_criteria():
    with pytest.raises(ValueError, match="unknown criteria"):
        _rule().grade({"slope": 1, "exponent": 1, "zero": 0, "extra": 1})
    with pytest.raises(ValueError, match="no value given"):
        _rule().grade({"slope": 1})


def test_rows_regrade_from_their_own_fields_and_survive_json():
    rule = _rule()
    row = json.loads(json.dumps(rule.to_row({"slope": 0.3, "exponent": 1.0, "zero": 0})))
    assert row["verdict"] == "corrected" and claims.regrade(row) == "corrected"
    assert row["statistic"] == "fitted slope" and row["value"] == 0.3 and row["threshold"] == [0.03, 0.12]
    tampered = dict(row, criteria=[dict(c, value=0.06) if c["key"] == "slope" else c for c in row["criteria"]])
    assert claims.regrade(tampered) == "confirmed"


def test_plain_text_twin():
    assert claims.plain_text(r"$\lVert q\rVert\max_j\lVert k_j\rVert \le \tfrac1L e^{2\Delta/T}$") \
        == "‖q‖max_j‖k_j‖ ≤ 1/L e^2Δ/T"
    assert claims.plain_text("**bold** and *it*") == "bold and it"
    assert claims.plain_text(r"$\max_{\rm heads}g(T,10^{-3})$, $\mathbb E\tilde d$, $\tilde x$") \
        == "max_heads g(T,10^-3), 𝔼d̃, x̃"


def test_every_registered_text_has_a_plain_twin_without_latex():
    """The reports without MathJax (report.md, report.html, compare.html) show the *_text twins:
    no LaTeX command, dollar or brace may be left in them."""
    import re

    for item in claims.REGISTRY.values():
        for text in (item.claim, item.paper, item.rule.text, *(c.statistic for c in item.rule.criteria)):
            plain = claims.plain_text(text)
            assert not re.search(r"\\[A-Za-z]+|[{}$]", plain), (item.id, plain)


def test_a_criterion_is_rebuilt_from_its_row_entry():
    rule = _rule()
    row = rule.to_row({"slope": 0.3, "exponent": 1.0, "zero": 0})
    for c, entry in zip(rule.criteria, json.loads(json.dumps(row["criteria"]))):
        assert claims.Criterion.from_dict(entry) == c


def test_registry_is_consistent():
    assert claims.REGISTRY, "no claims registered"
    for cid, item in claims.REGISTRY.items():
        assert item.id == cid and item.chapter in claims.CHAPTER_MODULES
        assert item.rule.headline in {c.key for c in item.rule.criteria}
    assert set(claims.expected_claims("vanishing")) >= {"L1", "C1", "C1S", "NU"}
    with pytest.raises(KeyError, match="known"):
        claims.claim("nonsense")


class _Ctx:
    chapter = "vanishing"
    model_label = "tiny (0.0M params)"


def test_record_grades_by_the_registered_rule_and_upserts(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    graded = claims.record(_Ctx(), "C1", {"literal_outside": 0.02, "literal_example": 2, "maxkey_outside": 0.0},
                           "2% of weights break the literal reading", glue=False)
    assert graded.verdict == "corrected"
    assert "<code>literal_outside</code>" in graded._repr_html_()
    claims.record(_Ctx(), "C1", {"literal_outside": 0.0, "literal_example": 2, "maxkey_outside": 0.0},
                  "the literal bound holds on the model", glue=False)
    with pytest.raises(claims.rules.ProvenStatementError, match="maxkey_outside"):
        claims.record(_Ctx(), "C1", {"literal_outside": 0.0, "literal_example": 2, "maxkey_outside": 0.1},
                      "the max-key bound broken: a bug, not a verdict", glue=False)
    claims.record(_Ctx(), "L1", {"outside": 0, "exponent": -1.0}, "m", glue=False)
    rows = json.loads((tmp_path / "vanishing.json").read_text())
    assert [(r["id"], r["verdict"], r["value"]) for r in rows] == [("C1", "corrected", 0.0),
                                                                   ("L1", "confirmed", 0.0)]
    collected = claims.collect(tmp_path, ["vanishing"])
    assert [r["id"] for r in collected] == ["L1", "C1"], "registry order"
    assert claims.missing_claims(collected, ["vanishing"]) == ["vanishing:C1S", "vanishing:NU",
                                                             "vanishing:VAR"]


def test_record_requires_a_reason_when_not_testable(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    values = {"exponent": None, "entropy": 0.5, "regime": 0.1}
    with pytest.raises(ValueError, match="reason"):
        claims.record(_Ctx(), "NU", values, "m", glue=False)
    row = claims.record(_Ctx(), "NU", values, "m", reason="no model here", glue=False).row
    assert row["verdict"] == "not testable" and ledger.validate_row(row)


def test_a_row_whose_verdict_does_not_follow_from_its_rule_is_invalid(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    row = claims.record(_Ctx(), "C1S", {"outside": 0.0}, "m", glue=False).row
    with pytest.raises(ValueError, match="does not follow"):
        ledger.validate_row(dict(row, verdict="refuted"))
    with pytest.raises(ValueError, match="not one of"):
        ledger.validate_row(dict(row, verdict="probably"))
    with pytest.raises(ValueError, match="lacks"):
        ledger.validate_row({k: v for k, v in row.items() if k != "rule"})


def test_variants_are_separate_rows(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    for variant in ("a", "b"):
        claims.record(_Ctx(), "C1S", {"outside": 0.0}, "m", variant=variant, glue=False)
    rows = json.loads((tmp_path / "vanishing.json").read_text())
    assert sorted(r["variant"] for r in rows) == ["a", "b"]
    assert claims.glue_key("NU", "standin-rope") == "verdict_NU_standin_rope"


def test_alternatives_claims_are_generated_per_normaliser_and_yardstick():
    from normlimits.claims import alternatives as CA

    ids = claims.expected_claims("alternatives")
    assert len(ids) == len(CA.ALTERNATIVES) * len(CA.YARDSTICKS) + 5
    assert CA.claim_id("topk-sqrt", "gradient") in ids and "ALT-TOPK" in ids
    rule = claims.claim("ALT-sigmoid-vanishing").rule
    assert rule.grade({"exponent": -0.05, "gain": 0.4}) == "confirmed"
    assert rule.grade({"exponent": -0.5, "gain": 0.2}) == "partial"
    assert rule.grade({"exponent": -0.95, "gain": -0.1}) == "refuted"
    assert claims.claim("ALT-ssmax-distance").rule.grade({"later": 1.0}) == "confirmed"
    assert claims.claim("ALT-ssmax-distance").rule.grade({"later": 0.0}) == "refuted"
    sep = claims.claim("ALT-ssmax-separability").rule
    assert [sep.grade({"every": s, "some": s, "support": 64}) for s in (1.0, 0.4, 0.0)] == ["confirmed", "partial", "refuted"]
    assert claims.claim("ALT-ssmax-gradient").rule.grade({"every": math.nan, "some": math.nan}) == "not testable"
    assert "guideline 3" in claims.claim("ALT-sparsemax-gradient").paper
    assert "book's question" in claims.claim("ALT-softpick-gradient").paper
    assert claims.claim("ALT-TOPK").rule.grade({"sqrt_loss": 0.01, "exponent": 0.5}) == "confirmed"
    assert claims.claim("ALT-TOPK").rule.grade({"sqrt_loss": 0.5, "exponent": 0.5}) == "partial"
    assert claims.claim("ALT-REM-renorm").rule.grade({"halves": 0.7, "reduces": 0.7}) == "partial"


def test_model_labels_and_the_papers_model():
    """short_model drops the parameter count; only the model setting gpt2 is the paper's model
    (the Verdicts page's layout is tested in tests/unit/test_verdicts_page.py)."""
    from normlimits.book.sphinx_ledger import on_paper_model, short_model

    assert short_model("gpt2 (default) (124.4M params)") == "gpt2 (default)"
    assert on_paper_model({"model": "gpt2 (default) (124.4M params)"})
    assert not on_paper_model({"model": "gpt2-random (124.4M params)"})
    assert not on_paper_model({"model": "smollm2-135m (134.5M params)"})

def test_a_chapter_on_one_window_says_why_its_rows_have_no_interval(tmp_path, monkeypatch):
    """record() fills schema 3.0's unresampled with ONE_WINDOW for a row graded on measurements
    when the chapter ran on one window, so claims.without_interval finds nothing missing; a
    reason the chapter gives itself, a check-only rule and a not-testable row are left alone."""
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))

    class OneWindow(_Ctx):
        window_count = 1

    class EightWindows(_Ctx):
        window_count = 8

    values = {"exponent": -1.0, "entropy": 0.5, "regime": 0.9}   # inside NU's scope: graded
    row = claims.record(OneWindow(), "NU", values, "m", glue=False).row
    assert row["unresampled"] == claims.ONE_WINDOW and claims.without_interval([row]) == []
    own = claims.record(OneWindow(), "NU", values, "m", unresampled="a fixed computation", glue=False).row
    assert own["unresampled"] == "a fixed computation"
    many = claims.record(EightWindows(), "NU", values, "m", glue=False).row
    assert "unresampled" not in many and claims.without_interval([many]) != []
    untestable = claims.record(OneWindow(), "NU", dict(values, exponent=None), "m", reason="none",
                               glue=False).row
    assert "unresampled" not in untestable
    check_only = claims.record(OneWindow(), "C1S", {"outside": 0.0}, "m", glue=False).row
    assert "unresampled" not in check_only


def test_why_unresampled_is_given_only_to_a_graded_measured_row_without_intervals():
    from normlimits.core.bootstrap import Interval

    assert claims.why_unresampled("NU", None, None) == claims.ONE_WINDOW
    assert claims.why_unresampled("NU", None, None, "a fixed computation") == "a fixed computation"
    assert claims.why_unresampled("NU", {"exponent": Interval(-1.1, -0.9, 8)}, None) is None
    assert claims.why_unresampled("NU", None, "no model here") is None
    assert claims.why_unresampled("C1S", None, None) is None        # checks only


def _scoped_rule():
    return Rule(criteria=(Criterion("regime", "share of rows in the claim's regime", ">=", 0.5,
                                    kind="scope"),
                          Criterion("exponent", "fitted exponent", "between", (-1.2, -0.8)),
                          Criterion("level", "plateau level", "between", (0.7, 0.85))),
                outcomes=(("all", "confirmed"), ("all:exponent", "partial"), ("else", "refuted")),
                headline="exponent", text="confirmed when both hold; partial when the trend holds")


def test_a_failed_scope_criterion_makes_the_verdict_not_testable_whatever_the_outcomes():
    """Issue 47 item 5: data outside a claim's scope cannot refute (or confirm) it."""
    rule = _scoped_rule()
    assert rule.grade({"regime": 0.9, "exponent": -1.0, "level": 0.8}) == "confirmed"
    assert rule.grade({"regime": 0.9, "exponent": -1.0, "level": 0.4}) == "partial"
    assert rule.grade({"regime": 0.9, "exponent": 0.0, "level": 0.4}) == "refuted"
    assert rule.grade({"regime": 0.0, "exponent": 0.0, "level": 0.4}) == "not testable"
    assert rule.grade({"regime": 0.0, "exponent": -1.0, "level": 0.8}) == "not testable"
    assert [c.key for c in rule.out_of_scope({"regime": 0.0, "exponent": 0.0, "level": 0.4})] == ["regime"]
    assert rule.out_of_scope({"regime": 0.6, "exponent": 0.0, "level": 0.4}) == []
    # a scope criterion takes an interval: straddling its threshold, a verdict it changes is open
    values = {"regime": 0.55, "exponent": 0.0, "level": 0.4}
    assert rule.grade(values, {"regime": (0.4, 0.7)}) == "inconclusive"
    assert rule.possible_verdicts(values, {"regime": (0.4, 0.7)}) == {"refuted", "not testable"}
    assert rule.grade(values, {"regime": (0.51, 0.7)}) == "refuted"
    assert rule.grade(values, {"regime": (0.1, 0.3)}) == "not testable"


def test_a_broken_proven_criterion_stops_grading_instead_of_refuting():
    """Issue 47 item 2: a statement the book proves is a check on the implementation. Its breach
    raises, naming the criterion; it never turns into a verdict, and it takes no interval."""
    rule = Rule(criteria=(Criterion("bound", "largest ratio to the proven bound", "<=", 1.0,
                                    kind="proven"),
                          Criterion("level", "plateau level", "between", (0.7, 0.85))),
                outcomes=(("all", "confirmed"), ("else", "partial")), headline="level",
                text="confirmed when the level is in the band")
    assert rule.grade({"bound": 0.99, "level": 0.8}) == "confirmed"
    assert rule.grade({"bound": 0.99, "level": 0.5}) == "partial"
    assert rule.grade({"bound": None, "level": 0.5}) == "not testable"
    with pytest.raises(claims.rules.ProvenStatementError, match=r"'bound' .*= 1\.5 breaks <= 1\.0"):
        rule.grade({"bound": 1.5, "level": 0.8})
    with pytest.raises(claims.rules.ProvenStatementError):
        rule.to_row({"bound": 1.5, "level": 0.8})
    with pytest.raises(ValueError, match="takes no interval"):
        rule.grade({"bound": 0.9, "level": 0.8}, {"bound": (0.8, 1.0)})


@pytest.mark.parametrize("claim_id, key", [("T1a", "worst_model"), ("L1", "outside"),
                                           ("C1S", "outside"), ("C1", "maxkey_outside"),
                                           ("L2", "bound_holds"), ("C3", "corrected_constant"),
                                           ("T2", "proven_violations")])
def test_the_registry_marks_the_books_proven_statements_as_proven(claim_id, key):
    """Each statement its chapter proves is a ``proven`` criterion, so no row is refuted by it."""
    rule = claims.REGISTRY[claim_id].rule
    assert next(c for c in rule.criteria if c.key == key).kind == "proven"


def test_a_row_out_of_scope_says_why_from_its_scope_criterion(monkeypatch):
    item = claims.Claim("XSCOPE", "vanishing", "Sec. 0", "a claim", "the paper's words", _scoped_rule())
    monkeypatch.setitem(claims.REGISTRY, "XSCOPE", item)
    row = claims.make_row("XSCOPE", {"regime": 0.0, "exponent": 0.0, "level": 0.4}, "measured x",
                          chapter="vanishing", model="m")
    assert row["verdict"] == "not testable"
    assert row["reason"].startswith("outside the claim's scope: share of rows in the claim's regime is 0")
    assert "≥ 0.5" in row["reason"]
    given = claims.make_row("XSCOPE", {"regime": 0.0, "exponent": 0.0, "level": 0.4}, "measured x",
                            chapter="vanishing", model="m", reason="no row reaches the regime")
    assert given["reason"] == "no row reaches the regime"
    with pytest.raises(ValueError, match="no value"):
        claims.make_row("XSCOPE", {"regime": None, "exponent": 0.0, "level": 0.4}, "x",
                        chapter="vanishing", model="m")
    assert row["claim_kind"] == "paper" and row["about"] == "general"


def test_claim_kind_and_about_take_only_their_registered_values():
    with pytest.raises(ValueError, match="kind 'opinion'"):
        claims.Claim("X", "vanishing", "s", "c", "p", _scoped_rule(), kind="opinion")
    with pytest.raises(ValueError, match="about 'llama'"):
        claims.Claim("X", "vanishing", "s", "c", "p", _scoped_rule(), about="llama")
    assert {c.kind for c in claims.REGISTRY.values()} <= set(claims.CLAIM_KINDS)
    assert {c.about for c in claims.REGISTRY.values()} <= set(claims.ABOUT)


def test_a_claim_about_gpt2_cannot_be_refuted_off_gpt2():
    """Issue 47 item 3: one policy for claims naming GPT-2's measurements, checked on the rule."""
    paper_model = Criterion("paper_model", "1 on GPT-2 124M", "==", 1, kind="identity")
    level = Criterion("level", "plateau level", "between", (0.7, 0.85))
    good = Rule((level, paper_model), (("all:level", "confirmed"), ("all:paper_model", "refuted"),
                                       ("else", "not reproduced")), "level", "t")
    claims.check_gpt2_policy(claims.Claim("G", "vanishing", "s", "c", "p", good, about="gpt2"))
    bad = Rule((level, paper_model), (("all:level", "confirmed"), ("else", "refuted")), "level", "t")
    with pytest.raises(ValueError, match="gives 'refuted'"):
        claims.check_gpt2_policy(claims.Claim("G", "vanishing", "s", "c", "p", bad, about="gpt2"))
    without = Rule((level,), (("all", "confirmed"), ("else", "not reproduced")), "level", "t")
    with pytest.raises(ValueError, match="no 'paper_model' criterion"):
        claims.check_gpt2_policy(claims.Claim("G", "vanishing", "s", "c", "p", without, about="gpt2"))
    claims.check_gpt2_policy(claims.Claim("G", "vanishing", "s", "c", "p", bad))   # general: no check
    for item in claims.REGISTRY.values():
        claims.check_gpt2_policy(item)


def test_a_sensitivity_row_is_a_labelled_variant_and_says_so():
    rule = claims.claim("NU").rule
    values = {c.key: 0.0 for c in rule.criteria}
    row = claims.make_row("NU", values, "x", chapter="architectures", model="m", variant="survey",
                          sensitivity="one-window survey", unresampled="one window")
    assert row["sensitivity"] == "one-window survey"
    assert "Sensitivity row" in claims.Graded(row)._repr_html_()
    with pytest.raises(ValueError, match="sensitivity"):
        claims.make_row("NU", values, "x", chapter="a", model="m", sensitivity="survey",
                        unresampled="one window")


# --- issue 47 items 3, 4 and 6: whose claim, one GPT-2 policy, partial holds ------------------

def _all_pass(cid, **values):
    """Values for claim ``cid`` that pass every criterion (its threshold), overridden by ``values``."""
    out = {}
    for c in claims.claim(cid).rule.criteria:
        t = c.threshold
        out[c.key] = (t[0] + t[1]) / 2 if isinstance(t, tuple) else t
    return {**out, **values}


def test_the_registry_separates_the_papers_claims_from_premises_the_books_and_cited_ones():
    kinds = {cid: c.kind for cid, c in claims.REGISTRY.items()}
    assert kinds["MHP"] == "premise" and claims.claim("MH").premise == "MHP"
    assert kinds["C1S"] == "book" and kinds["ARCH"] == "book"
    assert {kinds[c] for c in ("ALT-gamma", "ALT-REM-size", "ALT-REM-renorm")} == {"cited"}
    # an alternative in the paper's own words is the paper's; one it does not discuss the book's
    assert kinds["ALT-sparsemax-gradient"] == "paper" and kinds["ALT-softpick-gradient"] == "book"
    for cid, item in claims.REGISTRY.items():     # a premise is some claim's premise
        if item.kind == "premise":
            assert any(c.premise == cid for c in claims.REGISTRY.values()), cid


def test_claims_naming_gpt2s_measurements_are_never_refuted_off_gpt2():
    """The one policy: every claim marked gpt2 carries paper_model, passes the registry check,
    and real failing values give "not reproduced" off GPT-2, "refuted" only on it. Universal
    claims (S80's cap, C3's bound) are not marked gpt2 and can be refuted anywhere."""
    gpt2 = {cid for cid, c in claims.REGISTRY.items() if c.about == "gpt2"}
    assert {"F2a", "F2b", "F2c", "F3", "F4", "LIM"} <= gpt2
    assert not {"S80", "C3", "C1", "NU"} & gpt2
    for cid in gpt2:
        claims.check_gpt2_policy(claims.claim(cid))
    lim = claims.claim("LIM").rule
    assert lim.grade({"closeness": 0.0003, "paper_model": 0}) == "not reproduced"
    assert lim.grade({"closeness": 0.0003, "paper_model": 1}) == "refuted"
    assert lim.grade({"closeness": 0.9, "paper_model": 0}) == "confirmed"
    s80 = claims.claim("S80").rule
    assert s80.grade({"largest_head": 0.95, "largest_uniform": 0.5}) == "refuted"
    assert s80.grade({"largest_head": 0.5, "largest_uniform": 0.95}) == "refuted"   # a cap: no repair


def test_partial_holds_are_partial_and_proven_repairs_corrected():
    """F3's plateau at 0.42 (flattening but the wrong level) and F4's low-temperature slopes far
    from -1 with the high-T half holding are partial holds; F2b's plateau with its other parts
    failing too. C3 over 1/(4T) but under the proven 1/(2T) stays corrected."""
    f3 = _all_pass("F3", level=0.42, paper_model=0)
    assert claims.claim("F3").rule.grade(f3) == "partial"
    assert claims.claim("F3").rule.grade({**f3, "flattening": 0.9}) == "not reproduced"
    assert claims.claim("F3").rule.grade({**f3, "flattening": 0.9, "paper_model": 1}) == "refuted"
    f4 = _all_pass("F4", low_slope=0.84, paper_model=0)            # slope -0.16 against -1
    assert claims.claim("F4").rule.grade(f4) == "partial"
    assert claims.claim("F4").rule.grade({**f4, "low_slope": 0.0, "drop": 0.1}) == "partial"
    assert claims.claim("F4").rule.grade({**f4, "drop": 0.1}) == "not reproduced"
    assert claims.claim("F4").rule.grade(_all_pass("F4", paper_model=0)) == "confirmed"
    f2b = _all_pass("F2b", elasticity=-0.06, tightens=1.2, converge=0.9, paper_model=0)
    assert claims.claim("F2b").rule.grade(f2b) == "partial"
    assert claims.claim("C3").rule.grade({"paper_constant": 0.5, "corrected_constant": 0.5}) == "corrected"
    for cid in ("TSEP", "G3", "ARCH"):
        assert "partial" in {o for _, o in claims.claim(cid).rule.outcomes}, cid


def test_the_literal_corollary_1_is_never_confirmed_on_any_model():
    """C1 read literally is false on paper (the exact three-key example), so a model without a
    counterexample of its own gives "corrected" (the max-key form C1S proves), never "confirmed"."""
    from normlimits.theory.vanishing import literal_counterexample

    example = literal_counterexample()
    assert example.outside == (1, 2)
    assert literal_counterexample(keys=(2, 2, 2)).outside == ()      # a flat row obeys it
    with pytest.raises(ValueError, match="temperature"):
        literal_counterexample(temperature=0)
    rule = claims.claim("C1").rule
    values = {"literal_outside": 0.0, "literal_example": len(example.outside), "maxkey_outside": 0.0}
    assert rule.grade(values) == "corrected"
    with pytest.raises(claims.rules.ProvenStatementError):     # C1S proves the max-key form
        rule.grade({**values, "maxkey_outside": 1e-6})


def test_a_sensitivity_row_never_disagrees_with_the_claims_own_row():
    """Item 6: EPS inconclusive in its chapter and corrected in a one-window survey on the same
    model is one verdict and a sensitivity row, not an inconsistency; unlabelled it would be."""
    own = claims.make_row("EPS", {"ordered": 0.0, "extremes": 0.0}, "x", chapter="gradients",
                          model="m (1M params)")
    survey = claims.make_row("EPS", {"ordered": 0.5, "extremes": 0.95}, "x", chapter="architectures",
                             model="m (1M params)", variant="m", sensitivity="one-window survey",
                             unresampled="one window")
    assert (own["verdict"], survey["verdict"]) == ("refuted", "corrected")
    assert ledger.inconsistent([own, survey]) == []
    unlabelled = {k: v for k, v in survey.items() if k != "sensitivity"}
    assert len(ledger.inconsistent([own, unlabelled])) == 1


def test_every_verdict_has_one_definition():
    from normlimits.claims.rules import VERDICT_DEFINITIONS

    assert list(VERDICT_DEFINITIONS) == list(claims.VERDICTS)
    assert "scope" in VERDICT_DEFINITIONS["not testable"]
    assert "interval" in VERDICT_DEFINITIONS["inconclusive"]


def test_the_architectures_survey_labels_its_rows_as_another_protocol():
    """Item 6: the survey's rows carry a sensitivity label naming their protocol (windows, length,
    text), which make_row requires to come with a variant."""
    from normlimits.audit.architectures import survey_protocol

    one = survey_protocol(1, 1024)
    assert "(1 window of 1024 tokens, the audit's grids)" in one and "own chapter" in one
    assert "3 windows of 512 tokens of Moby-Dick" in survey_protocol(3, 512, text="Moby-Dick")
    with pytest.raises(ValueError, match="at least one window"):
        survey_protocol(0, 1024)
    row = claims.make_row("EPS", {"ordered": 0.5, "extremes": 0.95}, "x", chapter="architectures",
                          model="m", variant="m", sensitivity=one, unresampled="one window")
    assert row["sensitivity"] == one


def test_a_bare_any_speaks_of_the_claims_criteria_not_of_its_scope():
    """A passing scope criterion alone never satisfies a bare ``any`` (issue 47: MON's
    'corrected' would otherwise follow from its checkpoint count)."""
    rule = Rule(criteria=(Criterion("checkpoints", "checkpoints measured", ">=", 2, kind="scope"),
                          Criterion("rank", "rank correlation", ">=", 0.5),
                          Criterion("band", "share in band", ">=", 0.5)),
                outcomes=(("all", "confirmed"), ("any", "corrected"), ("else", "refuted")),
                headline="rank", text="t")
    assert rule.grade({"checkpoints": 3, "rank": 0.0, "band": 0.0}) == "refuted"
    assert rule.grade({"checkpoints": 3, "rank": 0.9, "band": 0.0}) == "corrected"
    assert rule.grade({"checkpoints": 3, "rank": 0.9, "band": 0.9}) == "confirmed"
    assert rule.grade({"checkpoints": 1, "rank": 0.9, "band": 0.9}) == "not testable"
