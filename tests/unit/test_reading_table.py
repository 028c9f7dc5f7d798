"""normlimits.experiments.reading_table: the numbers of each reading, and the choice of the reading a verdict rests on."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normlimits.metrics import critical_n as C
from normlimits.experiments import reading_table as RT
from normlimits.metrics import token_means as TM
from normlimits.metrics.readings import FORMS

from test_readings import FakeCapture


def test_readings_tried_start_with_the_primary_and_cover_every_axis():
    rows = RT.readings_tried()
    assert rows[0] == RT.Reading("scaled", "values", "paper", "mc")
    assert {r.form for r in rows} == set(FORMS)
    assert {r.vectors for r in rows} == {"values", "hidden", "values_sphere", "hidden_sphere"}
    assert {r.aggregate for r in rows} == {"paper", "last_row"}
    assert {r.expectation for r in rows} == {"mc", "main"}
    assert len(set(rows)) == len(rows)
    assert "Σ‖xᵢ − s‖ on value vectors" in RT.Reading("raw").label
    with pytest.raises(ValueError, match="vectors"):
        RT.Reading("raw", "keys")


def test_rows_match_the_studies_they_read():
    caps = [FakeCapture(seed=s, L=32, heads=3) for s in range(2)]
    grid = [1, 2, 5, 8, 12]
    specs = {"values": TM.StudySpec(grid, forms=FORMS, samples=2,
                                    expectations={"scaled": ("main",)}),
             "hidden": TM.StudySpec(grid, vectors="hidden", forms=FORMS, samples=2, expectations=())}
    studies = TM.position_studies(iter(caps), [16, 24, 32], specs)
    readings = [RT.Reading("scaled"), RT.Reading("scaled", aggregate="last_row", expectation="main"),
                RT.Reading("raw", "hidden")]
    rows = RT.reading_rows(studies, readings)
    for row, r in zip(rows, readings):
        st = studies[r.vectors]
        t = st.per_head(r.form, "true", 32, r.aggregate)[:, 2].numpy()
        e = st.per_head(r.form, r.expectation, 32, r.aggregate)[:, 2].numpy()
        assert row.ratio == pytest.approx(float(np.median(t / e)))
        ref = C.critical_n(st, form=r.form, expectation=r.expectation, aggregate=r.aggregate)
        assert row.search.critical == ref.critical
        frac = ref.fraction(0.01)
        assert row.fraction[0.01] == frac[-1]
        filled = [1.0 if f is None else f for f in frac]
        assert row.spread[0.01] == pytest.approx(max(filled) / min(filled))
        assert row.length == 32 and row.windows == 2
    assert rows[1].ratio_mc_error == 0.0 and rows[0].ratio_mc_error > 0
    frame = RT.table_frame(rows)
    assert len(frame) == 3 and "critical N/L (α=0.01)" in frame.columns
    with pytest.raises(ValueError, match="no study"):
        RT.reading_rows(studies, [RT.Reading("raw", "values_sphere")])
    with pytest.raises(ValueError, match="grid"):
        RT.reading_rows(studies, readings[:1], n=3)


def _row(reading, ratio, exp_true, exp_expected, fraction, spread):
    return RT.ReadingRow(reading=reading, n=5, length=1024, ratio=ratio, ratio_mc_error=0.0,
                         exp_true=exp_true, exp_expected=exp_expected, search=None,
                         fraction={0.01: fraction}, spread={0.01: spread}, windows=1)


def test_choose_takes_the_first_reading_that_reproduces_and_else_the_primary():
    primary = _row(RT.Reading("scaled"), 20.0, 1.0, 0.1, None, 1.0)
    raw = _row(RT.Reading("raw"), 1.02, 1.0, 1.0, 0.001, 1.0)
    weighted = _row(RT.Reading("weighted"), 0.5, 1.0, 1.0, 0.06, 1.5)
    assert RT.choose([primary, raw, weighted], "F2a", paper_model=False) is raw
    assert RT.choose([primary, raw, weighted], "F2c", paper_model=False) is weighted
    assert RT.choose([primary, raw], "F2c", paper_model=True) is primary
    values = RT.claim_values(primary, "F2c", paper_model=True)
    assert values == {"fraction": 1.0, "spread": 1.0, "paper_model": 1}     # none below L -> 1
    from normlimits import claims
    assert claims.claim("F2c").rule.grade(values) == "refuted"
    assert claims.claim("F2c").rule.grade({**values, "paper_model": 0}) == "not reproduced"
    assert claims.claim("F2c").rule.grade(RT.claim_values(weighted, "F2c", False)) == "confirmed"
    with pytest.raises(ValueError, match="F2a"):
        RT.claim_values(primary, "T1a", paper_model=False)


def test_reproducing_lists_every_passing_reading_in_order():
    primary = _row(RT.Reading("scaled"), 20.0, 1.0, 0.1, None, 1.0)
    raw = _row(RT.Reading("raw"), 1.02, 1.0, 1.0, 0.001, 1.0)
    weighted = _row(RT.Reading("weighted"), 0.9, 0.9, 1.1, 0.06, 1.5)
    assert RT.reproducing([primary, raw, weighted], "F2a", False) == [raw, weighted]
    assert RT.reproducing([primary], "F2a", False) == []
    with pytest.raises(ValueError, match="no reading rows"):
        RT.choose([], "F2a", False)
