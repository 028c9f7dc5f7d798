"""The versioned JSON Schemas (normlimits.claims.schema) and the ledger document that follows them."""

from __future__ import annotations

import copy
import json

import pytest

from conftest import with_value
from normlimits import claims
from normlimits.claims import ledger, schema
from normlimits.claims.rules import DECISIONS, KINDS, OPS, OUTCOME_VERDICTS, VERDICTS


def _passing_value(criterion) -> float:
    """A value that meets the criterion's test (so every registered rule gives a verdict)."""
    t = criterion.threshold
    if criterion.op == "between":
        return t[0]
    if criterion.op == "outside":
        return t[1] + 1.0
    return {"<=": t, "<": t - 1.0, ">=": t, ">": t + 1.0, "==": t}[criterion.op]


def _rows_for_every_claim() -> list[dict]:
    rows = []
    for item in claims.REGISTRY.values():
        values = {c.key: _passing_value(c) for c in item.rule.criteria}
        rows.append(claims.make_row(item.id, values, f"synthetic values for {item.id}",
                                    chapter=item.chapter, model="tiny (1,000 params)"))
    return rows


@pytest.fixture(scope="module")
def ledger_doc():
    return ledger.ledger_document(_rows_for_every_claim())


def before_4_0(doc: dict) -> dict:
    """``doc`` as a writer before 4.0 wrote it: no ``claim_kind``, ``about`` or ``sensitivity``,
    and "corrected" where a rule's outcomes now name "partial" (the verdict 4.0 added), and the
    criteria 4.0 calls scope criteria (NU's regime share, say) were measurements and those it calls
    proven (T1a's bound, say) were checks."""
    old = copy.deepcopy(doc)
    old["rows"] = [row_before_4_0(row) for row in old["rows"]]
    for row in old["rows"]:
        row["outcomes"] = [[cond, "corrected" if verdict == "partial" else verdict]
                           for cond, verdict in row["outcomes"]]
    return old


def row_before_4_0(row: dict) -> dict:
    """A row as a writer before 4.0 wrote it (:func:`before_4_0` for one row)."""
    out = {k: copy.deepcopy(v) for k, v in row.items() if k not in ("claim_kind", "about", "sensitivity")}
    for c in out["criteria"]:
        if c["kind"] == "scope":
            c["kind"] = "measurement"
        elif c["kind"] == "proven":
            c["kind"] = "check"
    return out


def before_3_0(doc: dict) -> dict:
    """``doc`` as a writer before 3.0 wrote it: the criteria 3.0 calls checks were measurements."""
    old = before_4_0(doc)
    for row in old["rows"]:
        for c in row["criteria"]:
            if c["kind"] == "check":
                c["kind"] = "measurement"
    return old


def test_every_schema_file_is_a_valid_draft_2020_12_schema_of_its_version():
    from jsonschema import Draft202012Validator

    assert schema.SCHEMA_VERSION in schema.versions()
    for version in schema.versions():
        for document in (*schema.DOCUMENTS, schema.ROW):
            found = schema.load_schema(document, version)
            Draft202012Validator.check_schema(found)
            assert found["$id"] == f"urn:normlimits:schema:{version}:{document}"
            if document != schema.ROW:
                assert found["properties"]["schema_version"] == {"const": version}


def test_the_closed_lists_of_the_schema_are_the_codes():
    """Verdicts, operators, criterion kinds and yardsticks: the schema's lists are the code's, so
    neither can change without the other (and, by the module's rule, a new schema version)."""
    from normlimits.audit.yardsticks import YARDSTICKS

    row = schema.load_schema("row")
    assert tuple(row["$defs"]["verdict"]["enum"]) == VERDICTS
    assert tuple(row["$defs"]["criterion"]["properties"]["op"]["enum"]) == OPS
    assert tuple(row["$defs"]["criterion"]["properties"]["kind"]["enum"]) == KINDS
    assert tuple(row["$defs"]["outcome"]["prefixItems"][1]["enum"]) == OUTCOME_VERDICTS
    assert tuple(row["$defs"]["criterion"]["properties"]["decision"]["enum"]) == DECISIONS
    audit = schema.load_schema("audit")
    assert audit["$defs"]["yardstick"]["enum"] == list(YARDSTICKS)


def test_rows_of_every_registered_claim_make_a_valid_ledger(ledger_doc):
    assert ledger_doc["schema_version"] == schema.SCHEMA_VERSION
    assert len(ledger_doc["rows"]) == len(claims.REGISTRY)
    assert schema.problems(ledger_doc, "ledger") == []
    ops = {c["op"] for r in ledger_doc["rows"] for c in r["criteria"]}
    assert {"between", "<=", ">="} <= ops, "interval and single thresholds are both exercised"


def test_a_not_testable_row_with_its_reason_is_valid():
    row = claims.make_row("NU", {"exponent": None, "entropy": 0.9, "regime": 0.5}, "x",
                          chapter="audit", model="m", reason="no lengths")
    assert row["value"] is None and row["verdict"] == "not testable"
    assert schema.problems(ledger.ledger_document([row]), "ledger") == []


@pytest.mark.parametrize("path, bad, named", [
    (("rows", 0, "value"), "0.5", "rows[0].value"),
    (("rows", 0, "criteria", 0, "passed"), "yes", "rows[0].criteria[0].passed"),
    (("rows", 0, "verdict"), "probably", "rows[0].verdict"),
    (("rows", 0, "threshold"), [1.0], "rows[0].threshold"),
    (("rows", 0, "outcomes", 0), ["all", "not testable"], "rows[0].outcomes[0][1]"),
    (("schema_version",), 1.0, "schema_version"),
])
def test_a_field_of_another_type_is_refused_naming_it(ledger_doc, path, bad, named):
    doc = with_value(ledger_doc, path, bad)
    found = schema.problems(doc, "ledger")
    assert found and any(p.startswith(named) for p in found), found
    with pytest.raises(schema.SchemaError, match="is not a valid ledger document"):
        schema.validate(doc, "ledger", source="x.json")


def test_a_field_the_version_does_not_have_is_refused(ledger_doc):
    """Issue 31's per-row interval is a new field: under 1.0 it is refused, so adding it takes a
    new schema version (a test cannot pass with it slipped in)."""
    doc = copy.deepcopy(ledger_doc)
    doc["rows"][0]["interval"] = [0.1, 0.2]
    assert any("interval" in p for p in schema.problems(doc, "ledger"))
    doc = copy.deepcopy(ledger_doc)
    doc["note"] = "extra"
    assert schema.problems(doc, "ledger")


def test_a_missing_or_unknown_version_is_named():
    assert "schema_version: missing" in schema.problems({"rows": []}, "ledger")[0]
    assert "'9.9' is not one this normlimits knows" in schema.problems(
        {"schema_version": "9.9", "rows": []}, "ledger")[0]
    with pytest.raises(schema.SchemaError, match="is not one this normlimits knows"):
        schema.load_schema("ledger", "9.9")
    with pytest.raises(ValueError, match="document='book'"):
        schema.load_schema("book")
    assert schema.problems([1, 2], "ledger")[0].startswith("(the document itself)")


def test_read_ledger_json_reads_the_written_file_and_names_an_old_one(tmp_path, ledger_doc):
    path = tmp_path / "ledger.json"
    path.write_text(json.dumps(ledger_doc))
    assert ledger.read_ledger_json(path) == ledger_doc["rows"]
    path.write_text(json.dumps(ledger_doc["rows"]))          # the format before schema versions
    with pytest.raises(schema.SchemaError, match=r"ledger.json is not a valid ledger document.*"
                                                 r"JSON object is expected.*make book"):
        ledger.read_ledger_json(path)
    path.write_text("{not json")
    with pytest.raises(schema.SchemaError, match="is not readable JSON"):
        ledger.read_ledger_json(path)
    with pytest.raises(schema.SchemaError, match="does not exist"):
        ledger.read_ledger_json(tmp_path / "missing.json")


def test_ledger_document_refuses_a_row_whose_verdict_its_rule_does_not_give():
    row = _rows_for_every_claim()[0]
    row["verdict"] = "refuted" if row["verdict"] != "refuted" else "confirmed"
    with pytest.raises(ValueError, match="does not follow from its recorded rule"):
        ledger.ledger_document([row])


def test_the_sphinx_extension_writes_the_versioned_ledger(tmp_path, monkeypatch, ledger_doc):
    from types import SimpleNamespace

    from normlimits.book import sphinx_ledger

    monkeypatch.setattr(sphinx_ledger, "_rows", lambda app: ledger_doc["rows"])
    site = tmp_path / "_build" / "html"
    site.mkdir(parents=True)
    app = SimpleNamespace(confdir=str(tmp_path), outdir=str(site), builder=SimpleNamespace(format="html"))
    sphinx_ledger._write_json(app, None)
    written = json.loads((tmp_path / "_build" / "ledger.json").read_text())
    assert written == ledger_doc
    assert json.loads((site / "ledger.json").read_text()) == ledger_doc    # offered beside the page


def test_a_1_0_ledger_stays_valid_and_1_1_adds_only_the_optional_paper_value(ledger_doc):
    """1.1 added one optional row field (``paper_value``, what the paper reports): a 1.0 file
    without it still validates against 1.0, the same field is refused under 1.0 (its objects are
    closed), and a 1.1 row may omit it."""
    assert schema.versions()[:2] == ["1.0", "1.1"]
    assert all("paper_value" in row for row in ledger_doc["rows"])
    old = before_3_0(ledger_doc)
    old["schema_version"] = "1.0"
    for row in old["rows"]:
        row.pop("paper_value")
    assert schema.problems(old, "ledger") == []
    old["rows"][0]["paper_value"] = "≈ 0.06 L"
    assert any("paper_value" in p for p in schema.problems(old, "ledger"))
    new = copy.deepcopy(ledger_doc)
    new["rows"][0].pop("paper_value")
    assert schema.problems(new, "ledger") == []


def _reading_row() -> dict:
    """An F2a row with the 1.2 fields: its verdict under two readings, and a chosen-reading
    variant's selection."""
    values = {"exp_true": 1.0, "exp_expected": 1.0, "close": 1.03, "paper_model": 0}
    readings = [{"reading": "scaled", "values": {**values, "close": 32.2},
                 "verdict": "not reproduced", "primary": True},
                {"reading": "raw", "values": values, "verdict": "confirmed", "primary": False}]
    return claims.make_row("F2a", values, "x", chapter="distances", model="m", reading="raw",
                           readings=readings, variant="chosen reading",
                           selection={"tried": 2, "reproducing": ["raw"]})


def test_1_2_adds_only_the_optional_readings_and_selection(ledger_doc):
    """1.2 added two optional row fields (issue 31's one policy for readings): a 1.1 file stays
    valid under 1.1, the new fields are refused there (closed objects), and a 1.2 row may omit
    them."""
    assert schema.versions()[:3] == ["1.0", "1.1", "1.2"]
    old = before_3_0(ledger_doc)
    old["schema_version"] = "1.1"
    assert schema.problems(old, "ledger") == []
    new = {**copy.deepcopy(ledger_doc), "rows": [_reading_row()]}
    assert schema.problems(new, "ledger") == []
    old["rows"] = [_reading_row()]
    found = schema.problems(old, "ledger")
    assert any("readings" in p for p in found) and any("selection" in p for p in found)
    bad = copy.deepcopy(new)
    bad["rows"][0]["readings"][0]["verdict"] = "probably"
    assert any(p.startswith("rows[0].readings[0].verdict") for p in schema.problems(bad, "ledger"))
    bad = copy.deepcopy(new)
    bad["rows"][0]["selection"]["tried"] = 0
    assert any(p.startswith("rows[0].selection.tried") for p in schema.problems(bad, "ledger"))


def _interval_row(verdict_low: float = 0.05) -> dict:
    """An NU row graded with a bootstrap interval on its exponent (2.0 fields)."""
    from normlimits.core.bootstrap import Interval

    rule = claims.claim("NU").rule
    key = rule.headline
    values = {c.key: 0.0 for c in rule.criteria}
    values[key] = -0.99
    interval = Interval(-1.2, -0.8, 8)
    return claims.make_row("NU", values, "x", chapter="vanishing", model="m",
                           intervals={key: interval})


def test_2_0_adds_inconclusive_and_the_intervals(ledger_doc):
    """2.0 (issue 31): intervals on criteria and rows, their resampling, and the verdict
    inconclusive (a new value in a closed list, hence a major version). A 1.2 document stays
    valid under 1.2 and refuses the new fields there."""
    assert "2.0" in schema.versions()
    row = _interval_row()
    head = next(c for c in row["criteria"] if c["key"] == row["headline"])
    assert head["interval"] == [-1.2, -0.8] and head["decision"] in ("pass", "fail", "undecided")
    assert row["interval"] == [-1.2, -0.8] and row["resampling"]["unit"] == "window"
    new = {**copy.deepcopy(ledger_doc), "schema_version": "2.0", "rows": [row_before_4_0(row)]}
    assert schema.problems(new, "ledger") == []
    old = {**copy.deepcopy(new), "schema_version": "1.2"}
    found = schema.problems(old, "ledger")
    assert any("interval" in p for p in found) and any("resampling" in p for p in found)
    bad = copy.deepcopy(new)
    bad["rows"][0].pop("resampling")
    assert any("resampling" in p for p in schema.problems(bad, "ledger"))
    bad = copy.deepcopy(new)
    bad["rows"][0]["criteria"][0].pop("decision", None)
    bad["rows"][0]["criteria"][0]["interval"] = [0.0, 1.0]
    assert any("decision" in p for p in schema.problems(bad, "ledger"))
    bad = copy.deepcopy(new)
    bad["rows"][0]["verdict"] = "inconclusive"
    assert schema.problems(bad, "ledger") == [], "inconclusive is a verdict of 2.0"
    bad["schema_version"] = "1.2"
    assert any("verdict" in p for p in schema.problems(bad, "ledger"))


def test_2_1_adds_intervals_to_the_readings_entries_and_the_rows_corpus(ledger_doc):
    """2.1 (issue 31): an entry of ``readings`` may carry its criteria's intervals, its verdict
    graded on them, and a row may name the text its windows came from (``corpus``); new optional
    fields, so a minor version, both refused by 2.0."""
    from normlimits.core.bootstrap import Interval
    from normlimits.experiments import reading_table as RT

    assert "2.1" in schema.versions()
    reading = RT.Reading("scaled")
    table = [RT.ReadingRow(reading=reading, n=5, length=1024, ratio=1.9, ratio_mc_error=0.0,
                           exp_true=1.0, exp_expected=1.0, search=None, fraction={0.01: 0.06},
                           spread={0.01: 1.0}, windows=8)]
    (own,) = RT.gradings(table, "F2a", paper_model=False,
                         intervals={reading.label: {"F2a": {"close": Interval(1.5, 2.5, 8)}}})
    row = claims.make_row("F2a", chapter="distances", model="m", **own.kwargs())
    assert row["readings"][0]["intervals"] == {"close": [1.5, 2.5]}
    new = {**copy.deepcopy(ledger_doc), "schema_version": "2.1", "rows": [row_before_4_0(row)]}
    assert schema.problems(new, "ledger") == []
    old = {**copy.deepcopy(new), "schema_version": "2.0"}
    assert any("intervals" in p for p in schema.problems(old, "ledger"))
    elsewhere = claims.make_row("F2a", chapter="architectures", model="m", corpus="Moby-Dick",
                                **{**own.kwargs(), "variant": "m on Moby-Dick"})
    new = {**copy.deepcopy(ledger_doc), "schema_version": "2.1", "rows": [row_before_4_0(elsewhere)]}
    assert schema.problems(new, "ledger") == []
    assert any("corpus" in p for p in schema.problems({**new, "schema_version": "2.0"}, "ledger"))


def test_3_0_adds_the_check_kind_and_the_reason_a_row_has_no_interval(ledger_doc):
    """3.0 (issue 31): a criterion may be a ``check`` (an extreme or a count of violations over
    everything measured: one counterexample decides it, and it takes no interval), a new value in
    a closed list, hence a major version; a row may say why it has no interval (``unresampled``).
    Both are refused by 2.1."""
    from normlimits.core.bootstrap import Interval

    assert "3.0" in schema.versions()
    checks = claims.make_row("C1", {"literal_outside": 0.0, "literal_example": 2, "maxkey_outside": 0.0}, "x",
                             chapter="vanishing", model="m")
    assert {c["kind"] for c in row_before_4_0(checks)["criteria"]} == {"check"}
    assert "resampling" not in checks
    new = {**copy.deepcopy(ledger_doc), "schema_version": "3.0", "rows": [row_before_4_0(checks)]}
    assert schema.problems(new, "ledger") == []
    assert any("kind" in p for p in schema.problems({**new, "schema_version": "2.1"}, "ledger"))
    with pytest.raises(ValueError, match="is an check|is a check|takes no interval"):
        claims.make_row("C1", {"literal_outside": 0.0, "literal_example": 2, "maxkey_outside": 0.0}, "x", chapter="vanishing",
                        model="m", intervals={"literal_outside": Interval(0.0, 0.1, 8)})
    rule = claims.claim("NU").rule
    values = {c.key: 0.0 for c in rule.criteria}
    alone = claims.make_row("NU", values, "x", chapter="architectures", model="m",
                            unresampled="one window: there is no unit to resample")
    new = {**copy.deepcopy(ledger_doc), "schema_version": "3.0", "rows": [row_before_4_0(alone)]}
    assert schema.problems(new, "ledger") == []
    assert any("unresampled" in p for p in schema.problems({**new, "schema_version": "2.1"}, "ledger"))
    assert "No interval:" in claims.Graded(alone)._repr_html_()
    assert "(check)" in claims.Graded(checks)._repr_html_()
    with pytest.raises(ValueError, match="unresampled"):
        claims.make_row("NU", values, "x", chapter="a", model="m", unresampled=" ")
    with pytest.raises(ValueError, match="unresampled"):
        claims.make_row("NU", values, "x", chapter="a", model="m", unresampled="one window",
                        intervals={rule.headline: Interval(-1.0, 1.0, 8)})


def test_4_0_adds_partial_scope_and_whose_claim_it_is(ledger_doc):
    """4.0 (issue 47): the verdict ``partial`` and the criterion kinds ``scope`` and ``proven`` (new values in
    closed lists, hence a major version) and the optional row fields ``claim_kind``, ``about`` and
    ``sensitivity``; each refused by 3.0, and a 3.0 file stays valid under 3.0."""
    assert schema.SCHEMA_VERSION == "4.0" and "4.0" in schema.versions()
    assert {"claim_kind", "about"} <= set(ledger_doc["rows"][0])
    assert schema.problems(ledger_doc, "ledger") == []
    old = before_4_0(ledger_doc)
    old["schema_version"] = "3.0"
    assert schema.problems(old, "ledger") == []
    assert any("claim_kind" in p for p in schema.problems({**ledger_doc, "schema_version": "3.0"}, "ledger"))
    for field, bad in (("claim_kind", "opinion"), ("about", "llama")):
        doc = copy.deepcopy(ledger_doc)
        doc["rows"][0][field] = bad
        assert any(p.startswith(f"rows[0].{field}") for p in schema.problems(doc, "ledger"))
    doc = copy.deepcopy(ledger_doc)
    doc["rows"][0]["verdict"] = "partial"
    assert schema.problems(doc, "ledger") == [], "partial is a verdict of 4.0"
    assert any("verdict" in p for p in schema.problems({**before_4_0(doc), "schema_version": "3.0"}, "ledger"))
    doc = copy.deepcopy(ledger_doc)
    doc["rows"][0]["criteria"][0]["kind"] = "scope"
    assert schema.problems(doc, "ledger") == []
    kept = copy.deepcopy(doc)              # 4.0's row fields dropped, the scope kind kept
    kept["rows"] = [{k: v for k, v in row.items() if k not in ("claim_kind", "about", "sensitivity")}
                    for row in kept["rows"]]
    assert any("kind" in p for p in schema.problems({**kept, "schema_version": "3.0"}, "ledger"))
    doc = copy.deepcopy(ledger_doc)        # the proven kind (a breach stops the build) is 4.0's too
    doc["rows"][0]["criteria"][0]["kind"] = "proven"
    assert schema.problems(doc, "ledger") == []
    kept["rows"] = [row_before_4_0(row) for row in doc["rows"]]
    kept["rows"][0]["criteria"][0]["kind"] = "proven"
    assert any("kind" in p for p in schema.problems({**kept, "schema_version": "3.0"}, "ledger"))
