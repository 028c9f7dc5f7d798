"""One-time work (normlimits.core.one_time): counted once, and recorded by the chapter that did it."""

from __future__ import annotations

import hashlib
import time
from types import SimpleNamespace

import pytest

from conftest import make_tiny_gpt2
from normlimits.core import one_time


def test_a_block_is_counted_once_even_when_nested_or_raising():
    before = one_time.spent()
    with one_time.one_time_work():
        time.sleep(0.02)
        with one_time.one_time_work():            # inner work is part of the outer block's time
            time.sleep(0.02)
    first = one_time.spent() - before
    assert 0.04 <= first < 1.0
    with pytest.raises(RuntimeError):
        with one_time.one_time_work():
            time.sleep(0.01)
            raise RuntimeError("training failed")
    assert one_time.spent() - before >= first + 0.01      # a failed training still took its time
    with one_time.one_time_work():                  # the depth is back to 0 after the exception
        pass
    assert one_time._state["depth"] == 0


def test_a_chapter_records_the_one_time_work_done_while_it_ran(tmp_path, monkeypatch):
    """A cold build trains the rope stand-in inside the architectures chapter (its first user):
    the chapter's timing counts that training as one-time work without the chapter saying so."""
    from normlimits.book import timings
    from normlimits.book.chapter import ChapterContext

    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    monkeypatch.setattr("normlimits.core.glued.glue", lambda *a, **k: None)
    with one_time.one_time_work():               # before the chapter: not its work
        time.sleep(0.05)
    ctx = ChapterContext("architectures", SimpleNamespace(name="standin", n_params=2e6), corpus=None,
                         window_count=2)
    with one_time.one_time_work():
        time.sleep(0.03)
    ctx.one_time(1.0)                            # what the chapter declares itself is added
    ctx.finish()
    recorded = timings.read_timings(tmp_path)["architectures"]
    assert 1.03 <= recorded["one_time_seconds"] < 1.03 + 0.5
    assert recorded["one_time_seconds"] - 1.0 < 0.05   # the work before the chapter is not counted


def test_training_a_standin_is_timed_as_one_time_work(isolated_cache, monkeypatch):
    """load_standin's training branch runs inside one_time_work (a fake training: a tiny GPT-2)."""
    from normlimits.model import standin
    from normlimits.model.corpus import Corpus

    text = "It was in July, 1805, and the speaker was the well-known Anna Pavlovna Scherer. " * 300
    corpus = Corpus(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), source="test text")

    def fake_training(corpus, recipe=None):
        time.sleep(0.05)
        return make_tiny_gpt2(vocab=257), {"train_seconds": 0.05, "bpb": {}, "steps": 1}

    monkeypatch.setattr(standin, "train_standin", fake_training)
    monkeypatch.setattr(standin, "verify_standin_dir", lambda directory: {"train_seconds": 0.05})
    monkeypatch.setattr(standin, "load_pretrained", lambda path, setting=None: SimpleNamespace(notes=[]))
    monkeypatch.setattr(standin, "save_standin", lambda model, report, directory: directory.mkdir(parents=True))
    before = one_time.spent()
    standin.load_standin(corpus)
    assert one_time.spent() - before >= 0.05
    again = one_time.spent()
    standin.load_standin(corpus)                 # cached now: nothing one-time
    assert one_time.spent() == again
