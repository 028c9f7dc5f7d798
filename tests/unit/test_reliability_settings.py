"""Bad settings refused up front with a clear message (issue 50, item 8): ``NORMLIMITS_THREADS=abc``
for ``normlimits audit`` (exit 2, no traceback, before any model is loaded) and a window count the
corpus cannot hold at a chapter's start."""

from __future__ import annotations

import hashlib

import pytest

from conftest import make_tiny_gpt2
from normlimits.audit import command as audit
from normlimits.book.chapter import check_window_count
from normlimits.core.settings import SettingError
from normlimits.model.corpus import Corpus
from normlimits.model.pretrained import LoadedModel, byte_encode


def test_a_bad_thread_count_is_an_audit_usage_error_before_the_model_loads(tmp_path, monkeypatch,
                                                                         capsys):
    import normlimits.model.load

    def refuse(*args, **kwargs):
        raise AssertionError("the model was loaded before the setting was checked")

    monkeypatch.setattr(normlimits.model.load, "load_model", refuse)
    monkeypatch.setenv("NORMLIMITS_THREADS", "abc")
    with pytest.raises(SystemExit) as exc:
        audit.main(["--model", "gpt2-random", "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "NORMLIMITS_THREADS='abc' is not an integer" in err, err
    assert not (tmp_path / "out").exists() and list(tmp_path.iterdir()) == []


def _tiny(text: str):
    loaded = LoadedModel(model=make_tiny_gpt2(n_positions=64), name="tiny", source="test",
                         encode=byte_encode, tokenizer_kind="bytes", is_paper_model=False)
    corpus = Corpus(text, hashlib.sha256(text.encode()).hexdigest(), "test text")
    return loaded, corpus


def test_a_window_count_the_corpus_cannot_hold_is_refused_at_the_start():
    loaded, corpus = _tiny("x" * 640)              # 640 byte tokens: 10 windows of the context 64
    check_window_count(loaded, corpus, 10)
    with pytest.raises(SettingError) as exc:
        check_window_count(loaded, corpus, 1_000_000_000)
    message = str(exc.value)
    assert message.startswith("NORMLIMITS_WINDOWS=1000000000: 1,000,000,000 windows of L=64 tokens")
    assert "(640 tokens): at most 10 distinct windows fit. Set NORMLIMITS_WINDOWS to 10 or fewer" in message
    with pytest.raises(SettingError, match="^the window count 11: "):
        check_window_count(loaded, corpus, 11, from_setting=False)


def test_a_chapter_start_refuses_a_window_count_the_corpus_cannot_hold(monkeypatch, tmp_path):
    from normlimits.book import chapter

    loaded, corpus = _tiny("x" * 640)
    monkeypatch.setattr(chapter, "load_model", lambda *args, **kwargs: loaded)
    monkeypatch.setattr(chapter, "load_corpus", lambda *args, **kwargs: corpus)
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    monkeypatch.setenv("NORMLIMITS_WINDOWS", "1000000000")
    with pytest.raises(SettingError, match="^NORMLIMITS_WINDOWS=1000000000: .* at most 10 distinct"):
        chapter.start_chapter("vanishing", show=False)
    monkeypatch.setenv("NORMLIMITS_WINDOWS", "10")
    assert chapter.start_chapter("vanishing", show=False).window_count == 10
