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
        (folder / "vanishing.timing.json").write_text(_json.dumps({"one_time_seconds": 4.0}))
        return 10.0

    monkeypatch.setattr(replicas, "execute_chapter", fake_execute)
    monkeypatch.setattr(replicas, "chapter_source", lambda chapter: tmp_path / "vanishing.md")
    seen = {}
    ctx = SimpleNamespace(chapter="vanishing", loaded=SimpleNamespace(name="smollm2-135m"),
                          one_time=lambda s: seen.setdefault("once", s),
                          replica_ran=lambda label, s: seen.setdefault(label, s))
    runs = replicas.replicate(ctx, [replicas.Replica("standin", {"NORMLIMITS_MODEL": "standin"})],
                              record=False)
    assert [r.seconds for r in runs] == [10.0]
    assert seen == {"once": 4.0, "standin": 6.0}
