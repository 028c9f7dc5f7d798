"""The corpus setting, its errors, and deterministic windows."""

from __future__ import annotations

import hashlib

import pytest
import torch

from normlimits.model.corpus import (
    CorpusError, load_corpus, strip_gutenberg, token_windows, window_starts)
from normlimits.core.settings import SettingError


def test_shared_corpus_loads_with_its_published_sha256():
    corpus = load_corpus()
    assert corpus.sha256 == "89897de6dc9745e452b9b1f274ca304bd46612b0cac670d59ff8278f487eb3c3"
    assert corpus.text.startswith("\u201cWell, Prince, so Genoa and Lucca")


def test_sha256_is_of_the_text_used(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("héllo\n", encoding="utf-8")
    assert load_corpus(str(path)).sha256 == hashlib.sha256("héllo\n".encode()).hexdigest()


def test_gutenberg_header_and_footer_are_stripped():
    raw = ("The Project Gutenberg eBook\n*** START OF THE PROJECT GUTENBERG EBOOK 2600 ***\n\n"
           "BOOK ONE\nText.\n*** END OF THE PROJECT GUTENBERG EBOOK 2600 ***\nlicence")
    assert strip_gutenberg(raw) == "BOOK ONE\nText.\n"
    assert strip_gutenberg("plain text") == "plain text"


def test_missing_file_names_the_setting(tmp_path):
    with pytest.raises(CorpusError, match="NORMLIMITS_CORPUS"):
        load_corpus(str(tmp_path / "absent.txt"))


def test_non_utf8_file_names_the_setting(tmp_path):
    path = tmp_path / "latin1.txt"
    path.write_bytes("Pierre Bézukhov".encode("latin-1"))
    with pytest.raises(CorpusError, match="NORMLIMITS_CORPUS.*not UTF-8"):
        load_corpus(str(path))


def test_offline_download_names_the_setting(monkeypatch, isolated_cache):
    import urllib.request

    def refuse(*args, **kwargs):
        raise OSError("network unreachable")

    monkeypatch.setattr(urllib.request, "urlopen", refuse)
    with pytest.raises(CorpusError, match="NORMLIMITS_CORPUS.*offline"):
        load_corpus("")
    assert not any((isolated_cache / "corpus").glob("*.txt")), "nothing half-written is cached"


def test_window_starts_are_deterministic_and_in_range():
    starts = window_starts(10_000, 1024, 8)
    assert torch.equal(starts, window_starts(10_000, 1024, 8))
    assert int(starts.min()) == 0 and int(starts.max()) <= 10_000 - 1024
    assert bool((starts[1:] > starts[:-1]).all())


def test_shifted_windows_lie_between_the_default_ones():
    """shift = 0.5 moves every window by half the spacing: other parts of the text, disjoint from
    the default windows when the spacing exceeds twice the length."""
    default, shifted = window_starts(100_000, 1024, 8), window_starts(100_000, 1024, 8, shift=0.5)
    assert torch.equal(window_starts(100_000, 1024, 8, shift=0.0), default)
    spacing = (100_000 - 1024) / 8
    assert ((shifted - default).double() - spacing / 2).abs().max() <= 1
    assert int(shifted.max()) <= 100_000 - 1024
    ends = default + 1024
    assert bool((shifted >= ends).all()) and bool((shifted[:-1] + 1024 <= default[1:]).all())
    with pytest.raises(ValueError, match="in \\[0, 1\\)"):
        window_starts(100_000, 1024, 8, shift=1.0)


def test_token_windows_cut_the_tokenised_text(tiny_loaded):
    corpus = load_corpus()
    windows = token_windows(tiny_loaded, corpus, 64, 3)
    assert windows.shape == (3, 64) and windows.dtype == torch.long
    assert bytes(windows[0].tolist()) == corpus.text.encode()[:64]
    assert torch.equal(windows, token_windows(tiny_loaded, corpus, 64, 3))


def test_window_length_beyond_context_is_refused(tiny_loaded):
    with pytest.raises(SettingError, match="beyond the model's context"):
        token_windows(tiny_loaded, load_corpus(), tiny_loaded.max_positions + 1, 2)


def test_corpus_shorter_than_a_window(tmp_path, tiny_loaded):
    path = tmp_path / "short.txt"
    path.write_text("tiny")
    with pytest.raises(CorpusError, match="fewer than one window"):
        token_windows(tiny_loaded, load_corpus(str(path)), 32, 1)
