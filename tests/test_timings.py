"""Chapter timings against budgets (normlimits.timings)."""

from __future__ import annotations

import json

from normlimits import timings
from normlimits.protocol import CHAPTER_BUDGET_SECONDS


def test_reads_flags_and_prints(tmp_path, capsys):
    budget = CHAPTER_BUDGET_SECONDS["vanishing"]
    for chapter, seconds in (("vanishing", 2.5 * budget), ("distances", 10.0), ("extra", 1e6)):
        (tmp_path / f"{chapter}.timing.json").write_text(json.dumps(
            {"chapter": chapter, "seconds": seconds, "model": "standin (2.0M params)", "windows": 8}))
    read = timings.read_timings(tmp_path)
    assert set(read) == {"vanishing", "distances", "extra"}
    assert timings.over_budget(read) == {"vanishing": 2.5 * budget}   # no budget: never over
    timings.main([str(tmp_path)])
    out = capsys.readouterr().out
    assert "OVER 2x BUDGET" in out and out.count("OVER") == 1 and "total" in out
    assert timings.main([str(tmp_path / "none")]) == 0


def test_one_time_training_is_recorded_and_not_held_against_the_budget(tmp_path, capsys, monkeypatch):
    """A cold build trains the temperature runs inside the gradients chapter (minutes, once per
    machine); that part is recorded but the budget is about the rest."""
    from types import SimpleNamespace

    from normlimits.book import ChapterContext

    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    monkeypatch.setattr("normlimits.book._glue", lambda *a, **k: None)
    budget = CHAPTER_BUDGET_SECONDS["gradients"]
    loaded = SimpleNamespace(name="standin", n_params=2e6)
    ctx = ChapterContext("gradients", loaded, corpus=None, window_count=8)
    ctx.started -= 3 * budget                     # the chapter ran 3 budgets ...
    ctx.one_time(2.5 * budget)                    # ... of which 2.5 trained what is now cached
    ctx.finish()
    read = timings.read_timings(tmp_path)
    assert read["gradients"]["one_time_seconds"] == 2.5 * budget
    assert timings.over_budget(read) == {}
    assert abs(timings.budgeted_seconds(read["gradients"]) - 0.5 * budget) < 1.0
    ctx.one_time(0.0)
    read["gradients"]["one_time_seconds"] = 0.0   # without the one-time part it is over
    assert "gradients" in timings.over_budget(read)
    timings.main([str(tmp_path)])
    assert "one-time training" in capsys.readouterr().out
    import pytest

    with pytest.raises(ValueError, match="one-time seconds must be >= 0"):
        ctx.one_time(-1.0)
