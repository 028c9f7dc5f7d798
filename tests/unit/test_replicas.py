"""Replicas: a chapter replayed on another model in a child kernel, its rows recorded as variants."""

from __future__ import annotations

import json
import os
from types import SimpleNamespace

import pytest

from normlimits import claims
from normlimits.claims import ledger
from normlimits.book import replicas
from normlimits.core.settings import SettingError

TOY_CHAPTER = """---
jupytext:
  text_representation: {extension: .md, format_name: myst, format_version: 0.13}
kernelspec: {display_name: Python 3, language: python, name: python3}
---

# Toy

```{code-cell} ipython3
import os
from normlimits import claims
from normlimits.book import replicas
assert replicas.is_replica(), "the child must know it is a replica"
assert replicas.replicate(None) == [], "a replica never spawns replicas"
if os.environ.get("TOY_FAIL"):
    raise RuntimeError("toy failure " + os.environ["TOY_FAIL"])
claims.record("toy", "T1b", {"gap": float(os.environ["TOY_VALUE"])}, measured="toy value",
              model=os.environ["NORMLIMITS_MODEL"] + " (1.0M params)")
if os.environ.get("TOY_STRAY"):
    claims.record("toy", "L1", {"outside": 0, "exponent": -1.0}, measured="stray", model="x")
```
"""


def test_replica_models_default_list_off_and_the_primary_left_out(monkeypatch):
    monkeypatch.delenv(replicas.REPLICA_OF_ENV, raising=False)
    monkeypatch.delenv(replicas.REPLICAS_ENV, raising=False)
    assert replicas.replica_models("smollm2-135m") == ("standin", "gemma3-270m")
    assert replicas.replica_models("gemma3-270m") == ("standin", "smollm2-135m")
    assert replicas.replica_models("gpt2 (default)") == replicas.DEFAULT_REPLICAS
    monkeypatch.setenv(replicas.REPLICAS_ENV, "standin, standin-rope,standin")
    assert replicas.replica_models("smollm2-135m") == ("standin", "standin-rope")
    monkeypatch.setenv(replicas.REPLICAS_ENV, "off")
    assert replicas.replica_models("smollm2-135m") == ()
    monkeypatch.setenv(replicas.REPLICAS_ENV, "standin,,x")
    with pytest.raises(SettingError, match="NORMLIMITS_REPLICAS='standin,,x' has an empty entry"):
        replicas.replica_models("smollm2-135m")
    monkeypatch.setenv(replicas.REPLICAS_ENV, "standin")
    monkeypatch.setenv(replicas.REPLICA_OF_ENV, "distances")
    assert replicas.replica_models("smollm2-135m") == ()


def test_as_many_replicas_run_at_once_as_the_build_has_threads(monkeypatch):
    monkeypatch.setenv("NORMLIMITS_THREADS", "2")
    assert [replicas.concurrent_replicas(n) for n in (0, 1, 2, 3)] == [1, 1, 2, 2]
    monkeypatch.setenv("NORMLIMITS_THREADS", "1")
    assert replicas.concurrent_replicas(3) == 1


@pytest.fixture
def toy_book(tmp_path, monkeypatch):
    (tmp_path / "_config.yml").write_text("title: toy\n")
    (tmp_path / "_toc.yml").write_text("format: jb-book\nroot: book/toy\n")
    (tmp_path / "book").mkdir()
    (tmp_path / "book" / "toy.md").write_text(TOY_CHAPTER)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv(ledger.LEDGER_ENV, str(tmp_path / "ledger"))
    monkeypatch.delenv(replicas.REPLICA_OF_ENV, raising=False)
    monkeypatch.setenv("NORMLIMITS_CAPTURE_CACHE", "off")
    for name in ("TOY_FAIL", "TOY_STRAY"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TOY_VALUE", "0")
    ctx = SimpleNamespace(chapter="toy", loaded=SimpleNamespace(name="primary"))
    claims.record("toy", "T1b", {"gap": 0.0}, measured="own value", model="primary (1.0M params)",
                  glue=False)
    return tmp_path, ctx


def test_a_replica_replays_the_chapter_and_records_its_rows_as_variants(toy_book):
    root, ctx = toy_book
    runs = replicas.replicate(ctx, [replicas.Replica("other", {"NORMLIMITS_MODEL": "other",
                                                               "TOY_VALUE": "0.5"})])
    assert len(runs) == 1 and runs[0].seconds > 0
    rows = json.loads((root / "ledger" / "toy.json").read_text())
    by_variant = {r.get("variant", ""): r for r in rows}
    assert set(by_variant) == {"", "other"}
    replayed = by_variant["other"]
    assert replayed["model"] == "other (1.0M params)" and replayed["chapter"] == "toy"
    assert replayed["criteria"][0]["value"] == 0.5
    assert replayed["verdict"] == claims.claim("T1b").rule.grade({"gap": 0.5})
    assert replayed["verdict"] != by_variant[""]["verdict"], "the toy values must grade differently"
    ledger.validate_row(replayed)
    words = replicas.agreement_words(ledger.read_rows(root / "ledger" / "toy.json"), runs)
    assert "on other, 0 of 1 verdicts are the same" in words and "T1b" in words
    frame = replicas.agreement_frame(ledger.read_rows(root / "ledger" / "toy.json"), runs)
    assert list(frame.columns) == ["primary", "other", "same verdict"]
    assert frame.loc["T1b", "same verdict"] == "no"


def test_two_replicas_side_by_side_each_see_their_own_settings(toy_book, monkeypatch):
    """Two real child kernels at once (two threads): each is started with its own model and
    value, and with one thread, and the parent's environment is not changed."""
    root, ctx = toy_book
    monkeypatch.setenv("NORMLIMITS_THREADS", "2")
    monkeypatch.setattr(replicas, "thread_count", lambda: 2)     # whatever this machine's cores
    before = dict(os.environ)
    runs = replicas.replicate(ctx, [
        replicas.Replica("a", {"NORMLIMITS_MODEL": "a", "TOY_VALUE": "0.5"}),
        replicas.Replica("b", {"NORMLIMITS_MODEL": "b", "TOY_VALUE": "0.25"})])
    assert dict(os.environ) == before
    rows = {r.get("variant", ""): r for r in json.loads((root / "ledger" / "toy.json").read_text())}
    assert [r.replica.label for r in runs] == ["a", "b"]
    assert rows["a"]["model"] == "a (1.0M params)" and rows["a"]["criteria"][0]["value"] == 0.5
    assert rows["b"]["model"] == "b (1.0M params)" and rows["b"]["criteria"][0]["value"] == 0.25


def test_replicas_run_together_with_a_share_of_the_threads_and_a_failure_waits(toy_book, monkeypatch):
    """With 2 threads two replicas start before either ends, each with NORMLIMITS_THREADS=1; the
    chapter records their wall time together; a failing one fails the chapter once the other has
    finished; with 1 thread they run one after the other with the setting as it was."""
    import threading
    import time

    _, ctx = toy_book
    events, barrier = [], threading.Barrier(2, timeout=10)

    def fake_execute(source, env):
        events.append(("start", env["NORMLIMITS_MODEL"], env.get("NORMLIMITS_THREADS")))
        if together:
            barrier.wait()                  # both must be running at once to pass
        time.sleep(0.05)
        if env["NORMLIMITS_MODEL"] == "bad":
            raise replicas.ReplicaError("bad replica")
        folder = root_of(env)
        (folder / "toy.json").write_text("[]")
        events.append(("end", env["NORMLIMITS_MODEL"]))
        return 1.0

    def root_of(env):
        from pathlib import Path
        return Path(env["NORMLIMITS_LEDGER_DIR"])

    monkeypatch.setattr(replicas, "execute_chapter", fake_execute)
    took = []
    ctx.replicas_took = took.append
    together = True
    monkeypatch.setattr(replicas, "thread_count", lambda: 2)
    pair = [replicas.Replica("a", {"NORMLIMITS_MODEL": "a"}), replicas.Replica("b", {"NORMLIMITS_MODEL": "b"})]
    replicas.replicate(ctx, pair, record=False)
    assert sorted(e for e in events if e[0] == "start") == [("start", "a", "1"), ("start", "b", "1")]
    assert events[0][0] == events[1][0] == "start"
    assert len(took) == 1 and 0.05 <= took[0] < 1.0
    events.clear()
    with pytest.raises(replicas.ReplicaError, match="bad replica"):
        replicas.replicate(ctx, [replicas.Replica("bad", {"NORMLIMITS_MODEL": "bad"}), pair[1]],
                           record=False)
    assert ("end", "b") in events, "the other replica finishes before the failure is raised"
    events.clear()
    together = False
    monkeypatch.setattr(replicas, "thread_count", lambda: 1)
    monkeypatch.delenv("NORMLIMITS_THREADS", raising=False)
    replicas.replicate(ctx, pair, record=False)
    assert events == [("start", "a", None), ("end", "a"), ("start", "b", None), ("end", "b")]


def test_a_failing_replica_fails_the_chapter_with_its_error(toy_book, monkeypatch):
    _, ctx = toy_book
    monkeypatch.setenv("TOY_FAIL", "42")
    with pytest.raises(replicas.ReplicaError, match="toy failure 42"):
        replicas.replicate(ctx, [replicas.Replica("other", {"NORMLIMITS_MODEL": "other"})])


def test_a_replica_may_not_record_claims_the_chapter_did_not(toy_book, monkeypatch):
    _, ctx = toy_book
    monkeypatch.setenv("TOY_STRAY", "1")
    with pytest.raises(replicas.ReplicaError, match=r"recorded \['L1'\], which the chapter did not"):
        replicas.replicate(ctx, [replicas.Replica("other", {"NORMLIMITS_MODEL": "other"})])


def test_record_variant_refuses_a_row_graded_by_another_rule(toy_book):
    root, _ = toy_book
    row = ledger.read_rows(root / "ledger" / "toy.json")[0]
    forged = {**row, "outcomes": [["else", "confirmed"]]}
    with pytest.raises(ValueError, match="not what the registered rule gives"):
        claims.record_variant("toy", forged, "other")
    again = claims.record_variant("toy", {**row, "variant": "a"}, "b")
    assert again["variant"] == "a; b"


def test_record_variant_takes_a_row_graded_with_intervals(toy_book):
    """A replica's row graded with bootstrap intervals (an inconclusive one here) is the registered
    rule's row for its values and intervals, so it is recorded; its decisions forged are not."""
    from normlimits.core.bootstrap import Interval

    root, _ = toy_book
    row = claims.make_row("NU", {"exponent": -0.95, "entropy": 0.95, "regime": 0.8}, "m",
                          chapter="toy", model="x", intervals={"exponent": Interval(-1.0, -0.85, 8)})
    assert row["verdict"] == "inconclusive"
    assert claims.record_variant("toy", row, "other")["verdict"] == "inconclusive"
    criteria = [{**c, "decision": "pass"} if c["key"] == "exponent" else c for c in row["criteria"]]
    with pytest.raises(ValueError, match="not what the registered rule gives"):
        claims.record_variant("toy", {**row, "criteria": criteria, "verdict": "confirmed"}, "other")


def test_a_replica_whose_prose_pastes_an_unglued_key_fails(toy_book, monkeypatch):
    """A reader re-executing the chapter would see a hole in the prose: the replica says which key."""
    import jupytext

    root, _ = toy_book
    source = root / "book" / "toy.md"
    source.write_text(TOY_CHAPTER + "\nThe value is {glue:text}`toy_never_glued:.2f`.\n")
    monkeypatch.setenv(replicas.REPLICA_OF_ENV, "toy")
    with pytest.raises(replicas.ReplicaError, match=r"never glued: \['toy_never_glued'\]"):
        replicas.execute_chapter(source, {"NORMLIMITS_MODEL": "other"})
    assert replicas.glue_keys_used(jupytext.read(source)) == {"toy_never_glued"}
