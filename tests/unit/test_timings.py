"""Chapter timings against budgets (normlimits.book.timings)."""

from __future__ import annotations

import json

from normlimits.book import timings
from normlimits.core.protocol import CHAPTER_BUDGET_SECONDS


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

    from normlimits.book.chapter import ChapterContext

    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    monkeypatch.setattr("normlimits.core.glued.glue", lambda *a, **k: None)
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
    assert "one-time work" in capsys.readouterr().out
    import pytest

    with pytest.raises(ValueError, match="one-time seconds must be >= 0"):
        ctx.one_time(-1.0)


def test_each_replica_is_a_run_held_to_the_budget_on_its_own(tmp_path, capsys, monkeypatch):
    """A chapter that replays itself on a control model ran twice: its own run and the replica's
    are each held to the budget (the CI failure this guards against: separability's SmolLM2 run
    plus its stand-in replica, 365 s against twice 180 s, although each run was well inside)."""
    from types import SimpleNamespace

    import pytest

    from normlimits.book.chapter import ChapterContext

    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    monkeypatch.setattr("normlimits.core.glued.glue", lambda *a, **k: None)
    budget = CHAPTER_BUDGET_SECONDS["separability"]
    ctx = ChapterContext("separability", SimpleNamespace(name="smollm2-135m", n_params=1.3e8),
                         corpus=None, window_count=8)
    ctx.started -= 3 * budget                     # 1.5 budgets its own run, 1.5 the replica
    ctx.replica_ran("standin", 1.5 * budget)
    ctx.finish()
    read = timings.read_timings(tmp_path)
    assert read["separability"]["replica_seconds"] == {"standin": 1.5 * budget}
    assert abs(timings.budgeted_seconds(read["separability"]) - 1.5 * budget) < 1.0
    assert timings.over_budget(read) == {}
    read["separability"]["replica_seconds"] = {"standin": 2.5 * budget}   # the replica too slow
    assert timings.over_budget(read) == {"separability on standin": 2.5 * budget}
    read["separability"]["replica_seconds"] = {}                          # all of it its own run
    assert set(timings.over_budget(read)) == {"separability"}
    assert "OVER 2x BUDGET" in timings.format_table(read)
    timings.main([str(tmp_path)])                 # as recorded: inside, the replica's part shown
    out = capsys.readouterr().out
    assert "OVER" not in out and "replica on standin" in out
    with pytest.raises(ValueError, match="replica seconds must be >= 0"):
        ctx.replica_ran("standin", -1.0)


def test_replicas_side_by_side_are_taken_off_the_chapter_once(tmp_path, monkeypatch):
    """Two replicas that ran together for 1 budget, each taking 0.9 of it: the chapter's own run
    is its time less their wall time, not less the sum of their runs."""
    from types import SimpleNamespace

    import pytest

    from normlimits.book.chapter import ChapterContext

    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    monkeypatch.setattr("normlimits.core.glued.glue", lambda *a, **k: None)
    budget = CHAPTER_BUDGET_SECONDS["separability"]
    ctx = ChapterContext("separability", SimpleNamespace(name="smollm2-135m", n_params=1.3e8),
                         corpus=None, window_count=8)
    ctx.started -= 2 * budget                     # 1 budget its own run, 1 the replicas together
    ctx.replica_ran("standin", 0.9 * budget)
    ctx.replica_ran("gemma3-270m", 0.9 * budget)
    ctx.replicas_took(budget)
    ctx.finish()
    read = timings.read_timings(tmp_path)["separability"]
    assert read["replica_wall_seconds"] == budget
    assert abs(timings.budgeted_seconds(read) - budget) < 1.0          # not 2 - 1.8 = 0.2 budgets
    older = {k: v for k, v in read.items() if k != "replica_wall_seconds"}  # one after the other
    assert abs(timings.budgeted_seconds(older) - 0.2 * budget) < 1.0
    line = timings.format_table({"separability": read})
    assert (f"replicas, wall time {budget:.1f} s: on gemma3-270m {0.9 * budget:.1f} s, "
            f"on standin {0.9 * budget:.1f} s") in line
    with pytest.raises(ValueError, match="replica wall seconds must be >= 0"):
        ctx.replicas_took(-1.0)


def test_replicate_records_each_replica_run_on_the_context(tmp_path, monkeypatch):
    """replicas.replicate tells the chapter's context how long each replica ran, its one-time
    training excluded."""
    import json as _json
    from types import SimpleNamespace

    from normlimits.book import replicas

    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    monkeypatch.delenv(replicas.REPLICA_OF_ENV, raising=False)
    (tmp_path / "vanishing.json").write_text("[]")

    def fake_execute(source, env):
        folder = tmp_path.__class__(env["NORMLIMITS_LEDGER_DIR"])
        (folder / "vanishing.json").write_text("[]")
        (folder / "vanishing.timing.json").write_text(_json.dumps({"one_time_seconds": 4.0,
                                                                   "forward_seconds": 2.5}))
        return 10.0

    monkeypatch.setattr(replicas, "execute_chapter", fake_execute)
    monkeypatch.setattr(replicas, "chapter_source", lambda chapter: tmp_path / "vanishing.md")
    seen = {}
    ctx = SimpleNamespace(chapter="vanishing", loaded=SimpleNamespace(name="smollm2-135m"),
                          one_time=lambda s: seen.setdefault("once", s),
                          replicas_took=lambda s: seen.setdefault("wall", s),
                          replica_ran=lambda label, s, forward: seen.setdefault(label, (s, forward)))
    runs = replicas.replicate(ctx, [replicas.Replica("standin", {"NORMLIMITS_MODEL": "standin"})],
                              record=False)
    assert [r.seconds for r in runs] == [10.0]
    assert seen.pop("wall") < 1.0          # the fake took no time; its 4 s of training left out
    assert seen == {"once": 4.0, "standin": (6.0, 2.5)}


def test_the_floor_table_divides_each_run_by_its_forward_passes():
    """Wall time less one-time work over forward seconds, per chapter and for the whole book;
    a chapter recorded before forward passes were timed is left out, not shown as zero."""
    recorded = {
        "vanishing": {"seconds": 130.0, "one_time_seconds": 30.0, "forward_seconds": 40.0, "model": "m"},
        "distances": {"seconds": 50.0, "forward_seconds": 0.0, "model": "m"},       # cached captures
        "old": {"seconds": 9.0, "model": "m"},
    }
    rows = {r["chapter"]: r for r in timings.floor_rows(recorded)}
    assert set(rows) == {"vanishing", "distances", "book"}
    assert rows["vanishing"]["seconds"] == 100.0 and rows["vanishing"]["ratio"] == 2.5
    assert rows["distances"]["ratio"] is None
    assert rows["book"]["seconds"] == 150.0 and rows["book"]["ratio"] == 150.0 / 40.0
    page = timings.floor_html(recorded)
    assert "3.75 times its forward passes" in page and "is missed" in page and "no forward pass" in page
    recorded["vanishing"]["forward_seconds"] = 140.0
    assert "is met" in timings.floor_html(recorded)
    assert "forward" in timings.format_table(recorded) and "x the floor" in timings.format_table(recorded)
    assert "No chapter" in timings.floor_html({"old": recorded["old"]})
    assert timings.floor_rows({}) == []


def test_a_chapter_records_its_forward_passes_and_its_replicas(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from normlimits.book.chapter import ChapterContext
    from normlimits.core import forward_clock

    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    monkeypatch.setattr("normlimits.core.glued.glue", lambda *a, **k: None)
    ctx = ChapterContext("vanishing", SimpleNamespace(name="standin", n_params=2e6), corpus=None, window_count=2)
    monkeypatch.setitem(forward_clock._state, "seconds", forward_clock.spent() + 3.0)   # 3 s of passes
    ctx.replica_ran("standin-rope", 5.0, forward_seconds=2.0)
    ctx.finish()
    recorded = timings.read_timings(tmp_path)["vanishing"]
    assert abs(recorded["forward_seconds"] - 5.0) < 1e-9


def _timing(chapter: str, seconds: float, forward: float, once: float = 0.0) -> dict:
    return {"chapter": chapter, "seconds": seconds, "forward_seconds": forward,
            "one_time_seconds": once, "model": "standin (2.0M params)", "windows": 8}


def test_the_wall_time_of_chapters_run_side_by_side_is_the_books_last_row(tmp_path, capsys):
    """Chapters executed two at a time overlap: the book's summed row stays, and the run's wall
    time (less one-time work) becomes the last row, on which the goal is judged."""
    for chapter, seconds, forward, once in (("a", 100.0, 10.0, 20.0), ("b", 60.0, 10.0, 0.0)):
        (tmp_path / f"{chapter}.timing.json").write_text(json.dumps(_timing(chapter, seconds, forward, once)))
    read = timings.read_timings(tmp_path)
    assert timings.read_execution(tmp_path) is None
    assert [r["chapter"] for r in timings.floor_rows(read)] == ["a", "b", "book"]
    record = {"chapters_at_once": 2, "threads_each": 1, "wall_seconds": 110.0, "alone_last": [],
              "executed_seconds": {"a": 100.0, "b": 60.0}}
    (tmp_path / "chapters-executed.json").write_text(json.dumps(record))
    execution = timings.read_execution(tmp_path)
    rows = timings.floor_rows(read, execution)
    assert rows[-2] == {"chapter": "book", "seconds": 140.0, "forward_seconds": 20.0, "ratio": 7.0}
    assert rows[-1]["seconds"] == 90.0 and rows[-1]["ratio"] == 4.5 and "2 chapters at once" in rows[-1]["chapter"]
    html = timings.floor_html(read, execution)
    assert "4.50 times its forward passes" in html and "executed 2 at a time" in html
    timings.main([str(tmp_path)])
    assert "wall time" in capsys.readouterr().out
    # a run that executed only some of the chapters cannot time the book: the sum is judged
    partial = {**record, "executed_seconds": {"a": 100.0}}
    assert timings.wall_row(read, partial) is None
    assert "7.00 times its forward passes" in timings.floor_html(read, partial)
    assert "are summed" in timings.floor_html(read, partial)
    (tmp_path / "chapters-executed.json").write_text("{not json")
    assert timings.read_execution(tmp_path) is None


def test_the_table_says_where_each_chapter_spent_its_time_when_the_record_kept_its_cells():
    recorded = {"vanishing": {"seconds": 130.0, "model": "m"}, "distances": {"seconds": 50.0, "model": "m"}}
    execution = {"chapters_at_once": 2, "threads_each": 1, "wall_seconds": 140.0, "executed_seconds":
                 {"vanishing": 130.0, "distances": 50.0},
                 "slowest_cells": {"vanishing": [{"cell": 7, "seconds": 90.5, "line": "sweep = V.sweep()"},
                                                 {"cell": 3, "seconds": 20.0, "line": "x = 1"},
                                                 {"cell": 9, "seconds": 4.3, "line": "y = 2"}],
                                   "other": [{"cell": 1, "seconds": 1.0, "line": "z"}]}}
    lines = timings.slowest_cell_lines(recorded, execution)
    assert lines[0].startswith("slowest cells") and len(lines) == 2       # only the table's chapters
    assert "vanishing" in lines[1] and "cell 7: 90.5 s (sweep = V.sweep())" in lines[1]
    assert lines[1].endswith("next: 20.0, 4.3 s")
    assert lines[1] in timings.format_table(recorded, execution).splitlines()
    assert timings.slowest_cell_lines(recorded, {**execution, "slowest_cells": {}}) == []
    assert timings.slowest_cell_lines(recorded, None) == []
    assert "slowest cells" not in timings.format_table(recorded)



def test_one_time_work_lowers_the_wall_time_by_what_it_added_to_the_schedule(tmp_path):
    """Two at once: one-time work on the chapter that ends last shortens the run by that much; on
    the chapter that ends first it shortened nothing (the other worker set the wall time)."""
    def row(once_a, once_b, wall):
        read = {"a": _timing("a", 100.0, 10.0, once_a), "b": _timing("b", 60.0, 10.0, once_b),
                "c": _timing("c", 30.0, 5.0, 0.0)}
        record = {"chapters_at_once": 2, "threads_each": 1, "wall_seconds": wall, "side_by_side": ["a", "b"],
                  "alone_last": ["c"], "executed_seconds": {"a": 100.0, "b": 60.0, "c": 30.0}}
        return timings.wall_row(read, record)

    assert timings.replayed_wall({"a": 100.0, "b": 60.0, "c": 30.0}, ["a", "b"], 2, ["c"]) == 130.0
    assert timings.replayed_wall({"a": 10.0, "b": 20.0, "d": 5.0}, ["a", "b", "d"], 2, []) == 20.0
    assert timings.replayed_wall({"a": 10.0, "b": 20.0}, ["a", "b"], 1, []) == 30.0
    assert row(0.0, 0.0, 135.0)["seconds"] == 135.0                 # measured, nothing to take off
    assert row(30.0, 0.0, 135.0)["seconds"] == 105.0                # a: 100 -> 70, b's 60 is not the end
    assert row(0.0, 40.0, 135.0)["seconds"] == 135.0                # b ended first: the wall is a's
    assert row(50.0, 0.0, 135.0)["seconds"] == 95.0                 # a: 100 -> 50, now b (60) ends last
    assert row(50.0, 0.0, 135.0)["ratio"] == 95.0 / 25.0
