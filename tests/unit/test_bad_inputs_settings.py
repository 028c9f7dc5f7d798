"""Bad settings and corpora: a clear error naming the setting, the value and the remedy."""

from __future__ import annotations

import os
import warnings

import pytest

from normlimits.model import corpus as C
from normlimits.core import settings
from normlimits.core.settings import SettingError


def test_a_corpus_of_nul_bytes_is_not_a_text(tmp_path, monkeypatch):
    path = tmp_path / "zeros.txt"
    path.write_bytes(b"\x00" * 5000)
    with pytest.raises(C.CorpusError, match=r"NORMLIMITS_CORPUS=.*control characters.*NUL"):
        C.load_corpus(str(path))
    prose = tmp_path / "prose.txt"
    prose.write_text("Well, Prince, so Genoa and Lucca are now just family estates.\n\tTab.\n" * 50)
    assert C.load_corpus(str(prose)).n_bytes > 0          # tabs and newlines are text


@pytest.mark.parametrize("control", ["\x00", "\x0b", "\x1b", "\x1f"])
def test_the_control_character_count_is_the_per_character_rule_at_the_one_percent_line(control):
    """Every character below U+0020 but tab, line feed, form feed and carriage return counts
    (vertical tab and escape too); 1% of the text is allowed, one more is refused."""
    assert set(C.CONTROL_CHARACTERS) == {chr(c) for c in range(32)} - set("\t\n\f\r")
    prose = "Natás\t\r\n\f " * 10                          # 100 characters, none counted
    C.check_is_text(prose * 99 + control * 99)             # 99 of 9,999: under 1%
    with pytest.raises(C.CorpusError, match=r"101 of its 10,001 characters"):
        C.check_is_text(prose * 99 + control * 101)


def test_an_explicit_url_offline_is_named_as_set(isolated_cache):
    url = "http://127.0.0.1:9/war-and-peace.txt"          # nothing listens on the discard port
    with pytest.raises(C.CorpusError) as info:
        C.load_corpus(url)
    assert f"NORMLIMITS_CORPUS is {url!r}" in str(info.value) and "unset" not in str(info.value)


def test_more_windows_than_the_corpus_holds_are_refused_with_the_number_that_fits(tiny_loaded, tmp_path):
    path = tmp_path / "short.txt"
    path.write_text("abcdefghij" * 100)                    # 1,000 byte tokens
    corpus = C.load_corpus(str(path))
    assert C.token_windows(tiny_loaded, corpus, 64, 15).shape == (15, 64)
    with pytest.raises(SettingError, match=r"1,000,000,000 windows of L=64.*at most 15.*NORMLIMITS_WINDOWS"):
        C.token_windows(tiny_loaded, corpus, 64, 1_000_000_000)


def test_pinned_threads_hold_inside_and_restore_the_count_after(monkeypatch):
    """Inside, torch runs on exactly the pinned count, even where the setting asks for one thread
    and configure_torch (which a training loop calls) is called; after, the count before."""
    import torch

    monkeypatch.setenv("NORMLIMITS_THREADS", "1")
    torch.set_num_threads(1)
    with settings.pinned_threads(3):
        settings.configure_torch()
        assert torch.get_num_threads() == 3 and os.environ["NORMLIMITS_THREADS"] == "1"
        with settings.pinned_threads(2):
            settings.configure_torch()
            assert torch.get_num_threads() == 2
        settings.configure_torch()
        assert torch.get_num_threads() == 3
    assert torch.get_num_threads() == 1
    settings.configure_torch()
    assert torch.get_num_threads() == 1
    with pytest.raises(RuntimeError, match="inside"):
        with settings.pinned_threads(2):
            raise RuntimeError("inside")
    assert torch.get_num_threads() == 1
    with pytest.raises(ValueError, match="threads must be >= 1"):
        with settings.pinned_threads(0):
            pass
    monkeypatch.delenv("NORMLIMITS_THREADS")
    settings.configure_torch()


def test_threads_beyond_the_cores_are_capped_with_a_warning(monkeypatch):
    cores = settings.available_cores()
    monkeypatch.setenv("NORMLIMITS_THREADS", str(cores + 5))
    with pytest.warns(UserWarning, match=f"exceeds the {cores} CPU cores"):
        assert settings.thread_count() == cores
    monkeypatch.delenv("NORMLIMITS_THREADS")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert settings.thread_count() == min(settings.DEFAULT_THREADS, cores)
    monkeypatch.setenv("NORMLIMITS_THREADS", "two")
    with pytest.raises(SettingError, match="NORMLIMITS_THREADS='two' is not an integer"):
        settings.thread_count()
