"""One policy for the verdicts that rest on a reading of Eq. (7) (issue 31): the claim's own row on
the primary reading, a chosen reading as a labelled variant, every reading's verdict in the row,
and a ledger that refuses two different verdicts of one claim on one model."""

from __future__ import annotations

import pytest

from normlimits import claims
from normlimits.claims import ledger
from normlimits.experiments import reading_table as RT
from normlimits.book import sphinx_ledger as S

MODEL = "standin (2.0M params)"


def _row(reading, ratio, exp_true, exp_expected, fraction, spread):
    return RT.ReadingRow(reading=reading, n=5, length=1024, ratio=ratio, ratio_mc_error=0.0,
                         exp_true=exp_true, exp_expected=exp_expected, search=None,
                         fraction={0.01: fraction}, spread={0.01: spread}, windows=1)


#: the stand-in's case of the issue: the primary reading far from Figure 2a, the raw reading close
#: (true/E 1.03) with a critical N/L of 0.001; the weighted reading reproduces both panels
PRIMARY = _row(RT.Reading("scaled"), 32.2, 1.0, 0.1, None, 1.0)
RAW = _row(RT.Reading("raw"), 1.03, 1.0, 1.0, 0.001, 1.0)
WEIGHTED = _row(RT.Reading("weighted"), 0.9, 0.9, 1.1, 0.06, 1.5)
TABLE = [PRIMARY, RAW, WEIGHTED]


def _make(claim_id, grading, chapter="distances"):
    return claims.make_row(claim_id, chapter=chapter, model=MODEL, **grading.kwargs())


def test_the_own_row_rests_on_the_primary_reading_and_a_chosen_one_is_a_labelled_variant():
    own, chosen = RT.gradings(TABLE, "F2a", paper_model=False)
    assert own.variant is None and own.selection is None and own.reading == PRIMARY.reading.label
    assert own.values["close"] == 32.2
    assert "reproduces under 2 of 3 readings tried" in own.measured
    assert chosen.variant == RT.CHOSEN_VARIANT and chosen.reading == RAW.reading.label
    assert chosen.selection == {"tried": 3, "reproducing": [RAW.reading.label, WEIGHTED.reading.label]}
    assert chosen.measured.startswith("reproduces under 2 of 3 readings tried: " + RAW.reading.label)
    rows = [_make("F2a", g) for g in (own, chosen)]
    assert [r["verdict"] for r in rows] == ["not reproduced", "confirmed"]
    assert [e["verdict"] for e in rows[0]["readings"]] == ["not reproduced", "confirmed", "confirmed"]
    assert [e["primary"] for e in rows[0]["readings"]] == [True, False, False]
    assert ledger.inconsistent(rows) == []          # they differ, but the second says why


def test_no_variant_when_the_primary_reproduces_or_none_does():
    good_primary = _row(RT.Reading("scaled"), 1.0, 1.0, 1.0, 0.06, 1.0)
    (only,) = RT.gradings([good_primary, RAW], "F2a", paper_model=False)
    assert "reproduces under 2 of 2 readings tried" in only.measured
    (only,) = RT.gradings([PRIMARY], "F2a", paper_model=True)
    assert "does not reproduce the figure under the only reading tried" in only.measured
    assert _make("F2a", only)["verdict"] == "refuted"
    assert "no reading is chosen: F2a does not reproduce" in RT.chosen_words([PRIMARY], "F2a", True)
    assert "F2a reproduces under none of the 2" in RT.chosen_words([PRIMARY, PRIMARY], "F2a", True)
    assert "the primary reading reproduces" in RT.chosen_words([good_primary, RAW], "F2a", False)
    assert 'labelled "chosen reading" is confirmed' in RT.chosen_words(TABLE, "F2a", False)


def test_the_f2c_row_shows_the_raw_readings_critical_fraction():
    own, chosen = RT.gradings(TABLE, "F2c", paper_model=False)
    row = _make("F2c", own)
    raw = next(e for e in row["readings"] if e["reading"] == RAW.reading.label)
    assert raw["values"]["fraction"] == 0.001 and raw["verdict"] == "not reproduced"
    assert "Σ‖xᵢ − s‖" in claims.readings_words(row) and "fraction = 0.001" in claims.readings_words(row)
    assert chosen.reading == WEIGHTED.reading.label and chosen.selection["reproducing"] == [WEIGHTED.reading.label]
    html = claims.Graded(_make("F2c", chosen))._repr_html_()
    assert "reproduces under 1 of 3 readings tried" in html and "Readings:" in html


def test_a_row_cannot_claim_a_chosen_reading_as_its_own():
    own, chosen = RT.gradings(TABLE, "F2a", paper_model=False)
    with pytest.raises(ValueError, match="not on the primary reading.*selection"):
        claims.make_row("F2a", chosen.values, chosen.measured, chapter="distances", model=MODEL,
                        reading=chosen.reading, readings=chosen.readings)
    with pytest.raises(ValueError, match="names no variant"):
        claims.make_row("F2a", **{**chosen.kwargs(), "variant": None}, chapter="distances", model=MODEL)
    bad = [dict(e) for e in own.readings]
    bad[1]["verdict"] = "refuted"
    with pytest.raises(ValueError, match="does not follow from its values"):
        claims.make_row("F2a", **{**own.kwargs(), "readings": bad}, chapter="distances", model=MODEL)


def test_two_disagreeing_rows_of_one_claim_on_one_model_fail_naming_both():
    """The issue's ledger: the distances chapter's F2a graded on the first reproducing reading
    (confirmed) and the architectures chapter's on the primary (not reproduced), same model. The
    architectures row's variant names the model, which does not say why they differ."""
    own, chosen = RT.gradings(TABLE, "F2a", paper_model=False)
    old_distances = claims.make_row("F2a", chosen.values, chosen.measured, chapter="distances",
                                    model=MODEL, reading=chosen.reading)
    architectures = _make("F2a", own, chapter="architectures")
    architectures = ledger.validate_row({**architectures, "variant": "standin"})
    found = ledger.inconsistent([old_distances, architectures])
    assert len(found) == 1
    assert "distances:F2a (no variant)" in found[0] and "architectures:F2a (standin)" in found[0]
    assert "confirmed" in found[0] and "not reproduced" in found[0]
    with pytest.raises(ValueError, match="grades a claim twice on one model"):
        ledger.ledger_document([old_distances, architectures])
    # the policy's ledger: own row, labelled variant and the architectures row pass
    rows = [_make("F2a", own), _make("F2a", chosen), architectures]
    assert ledger.inconsistent(rows) == []
    assert len(ledger.ledger_document(rows)["rows"]) == 3
    # another model may differ
    elsewhere = {**old_distances, "model": "smollm2-135m (134.5M params)"}
    assert ledger.inconsistent([elsewhere, architectures]) == []
    # and so may the same model on another text (a replication), named in the row
    other_text = claims.make_row("F2a", chosen.values, chosen.measured, chapter="architectures",
                                 model=MODEL, variant="standin on Moby-Dick", corpus="Moby-Dick")
    assert other_text["corpus"] == "Moby-Dick"
    assert ledger.inconsistent([architectures, other_text]) == []
    same_text = {**other_text, "variant": "standin on Moby-Dick, again"}
    found = ledger.inconsistent([{**architectures, "corpus": "Moby-Dick"}, same_text])
    assert len(found) == 1 and "(Moby-Dick)" in found[0]


def test_the_verdicts_page_counts_a_chosen_reading_apart():
    own, chosen = RT.gradings(TABLE, "F2a", paper_model=False)
    rows = [_make("F2a", own), _make("F2a", chosen)]
    assert [S.part_of(r) for r in rows] == ["paper", "chosen"]
    assert S.paper_rows(rows) == rows[:1]
    line = S.bottom_line(rows)
    assert "graded 1 claims" in line and "Replayed" not in line     # not a replay on a control model
    assert 'data-part="chosen" data-total="1"' in S.book_counts_html(rows)
    table = S.chapter_table_html(rows, None)
    assert '<span class="claim-variant"> · chosen reading</span>' in table and "Under each reading tried" in table
    assert S.line_label(rows[1]) == "F2a · chosen reading"


def test_an_inconclusive_row_agrees_with_the_verdicts_its_interval_leaves_open():
    """EPS on one model: the chapter's 8 windows leave `ordered` undecided (confirmed or
    corrected), the survey's single window says corrected: no disagreement. A refuted row, which
    no pass/fail of `ordered` can give, still disagrees; so do two decided rows that each agree
    with the inconclusive one but not with each other."""
    from normlimits.core.bootstrap import Interval

    def eps(ordered, extremes, chapter, intervals=None, variant=None):
        row = claims.make_row("EPS", {"ordered": ordered, "extremes": extremes}, "m", chapter=chapter,
                              model=MODEL, intervals=intervals, variant=variant)
        return row

    chapter = eps(0.83, 1.0, "gradients", {"ordered": Interval(0.33, 1.0, 8), "extremes": Interval(1.0, 1.0, 8)})
    assert chapter["verdict"] == "inconclusive"
    assert claims.rules.row_possible_verdicts(chapter) == {"confirmed", "corrected"}
    corrected = eps(0.83, 1.0, "architectures", variant="smollm2")
    confirmed = eps(0.95, 1.0, "audit")
    refuted = eps(0.5, 0.5, "audit")
    assert ledger.inconsistent([chapter, corrected]) == []
    assert ledger.inconsistent([chapter, confirmed]) == []
    assert len(ledger.inconsistent([chapter, refuted])) == 1
    found = ledger.inconsistent([chapter, corrected, confirmed])
    assert len(found) == 1 and "corrected" in found[0] and "confirmed" in found[0]
