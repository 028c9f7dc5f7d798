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
