"""The strict book build, and the claims ledger it writes."""

from __future__ import annotations

import json

import pytest

from normlimits import claims
from normlimits.claims import ledger

pytestmark = pytest.mark.book


def test_strict_build_writes_the_site(built_book):
    assert (built_book / "html" / "index.html").is_file()
    assert (built_book / "html" / "book" / "verdicts.html").is_file()


def test_the_chapters_were_executed_ahead_and_sphinx_executed_none(built_book):
    """make book executes the chapters side by side into the execution cache; Sphinx must then find
    every one there (a page it executes itself means the cached notebook did not match)."""
    import re

    log = (built_book / "build.log").read_text()
    assert re.search(r"\d+ chapters executed in \d+ s \(\d+ at once", log), log[-3000:]
    assert "Executing notebook" not in log, "Sphinx executed a chapter the step before it had cached"
    # the record says where each executed chapter's time went: its slowest cells, within its time
    record = json.loads((built_book / "ledger" / "chapters-executed.json").read_text())
    assert record["executed_seconds"] and set(record["slowest_cells"]) == set(record["executed_seconds"])
    for name, cells in record["slowest_cells"].items():
        assert cells and sum(c["seconds"] for c in cells) <= record["executed_seconds"][name] + 0.1, name
    assert re.search(r"slowest cell \d+ \(\d+ s\)", log), log[-3000:]


def _rows(built_book):
    rows = ledger.read_ledger_json(built_book / "ledger.json")
    assert rows, "the ledger is empty"
    return rows


def test_ledger_json_has_one_valid_row_per_registered_claim(built_book):
    rows = _rows(built_book)
    for row in rows:
        ledger.validate_row(row)
    toc = (built_book.parent / "_toc.yml").read_text()
    chapters = sorted({line.split("book/")[-1].strip() for line in toc.splitlines() if "file: book/" in line})
    assert claims.missing_claims(rows, chapters) == []
    ids = [(r["chapter"], r["id"], r.get("variant", "")) for r in rows]
    assert len(ids) == len(set(ids)), "one row per claim (and variant)"


def test_a_reader_regrades_the_ledger_from_its_recorded_statistics(built_book):
    """Every verdict follows from the row's own criteria, values, intervals and outcomes, and the rule
    in the row is the registered one (a chapter cannot grade by a rule of its own, nor record a
    decision its intervals do not give)."""
    for row in _rows(built_book):
        assert claims.regrade(row) == row["verdict"], row["id"]
        registered = claims.registered_row(row)
        for field in ("rule", "criteria", "outcomes", "headline", "verdict"):
            assert registered[field] == row[field], (row["id"], field)


def test_every_graded_row_has_its_intervals_or_says_why_not(built_book):
    """Issue 31: every row graded on measurements carries intervals over its resampling unit, or
    says why it has none (one window, a fixed synthetic computation, the seed as unit)."""
    assert claims.without_interval(_rows(built_book)) == []


def test_every_chapter_recorded_its_time_and_over_budget_runs_are_reported_not_failed(built_book):
    """Budgets live in normlimits.core.protocol and are the build's report (the cost chapter,
    ``normlimits timings``), not a gate: a machine shared with other work inflates wall times
    (issue 51 measured 891 s against 165 s idle for one chapter), so a run over twice its budget is
    a warning naming it. What must hold is that every executed chapter recorded a positive time."""
    import warnings

    from normlimits.core.protocol import CHAPTER_BUDGET_SECONDS
    from normlimits.book.timings import over_budget, read_timings

    timings = read_timings(built_book / "ledger")
    assert timings, "no chapter recorded its time (ctx.finish())"
    executed = {r["chapter"] for r in _rows(built_book)} - {"audit"}
    missing = sorted(executed - set(timings))
    assert not missing, f"chapters with ledger rows but no recorded time: {missing}"
    assert all(t["seconds"] > 0 for t in timings.values()), timings
    over = over_budget(timings)
    if over:
        warnings.warn(f"runs over twice their budget (s): {over}; budgets: {CHAPTER_BUDGET_SECONDS} "
                      "(a report: time builds on an idle machine)")


def test_every_model_dependent_claim_is_graded_on_both_real_families_and_the_stand_in(built_book):
    """Issue 49: a paper claim replayed on the stand-in (a model-dependent claim of the four paper
    chapters) is graded on SmolLM2-135M and on Gemma 3 270M too, by the same registered rule, each
    on its own row (the primary's, or a replica's)."""
    from normlimits.book.sphinx_ledger import model_setting, part_of

    rows = _rows(built_book)
    on, replayed_on_standin = {}, set()
    for row in rows:
        if part_of(row) in ("paper", "control"):
            on.setdefault((row["chapter"], row["id"]), set()).add(model_setting(row["model"]))
        if part_of(row) == "control" and model_setting(row["model"]) == "standin":
            replayed_on_standin.add((row["chapter"], row["id"]))
    # the replayed chapters (the alternatives chapter runs on the stand-in itself and replays nothing)
    replayed = {key: models for key, models in on.items() if key in replayed_on_standin}
    assert len(replayed) >= 10, f"too few claims replayed on the stand-in: {sorted(replayed)}"
    missing = {key: sorted({"smollm2-135m", "gemma3-270m"} - models)
               for key, models in replayed.items() if not {"smollm2-135m", "gemma3-270m"} <= models}
    assert not missing, f"claims not graded on both real families: {missing}"
