"""A disk without room is refused before the writing starts where the size is known, and a full
disk while writing is the same kind of message: the folder, the bytes needed and free, the setting
or option that chose the folder and the remedy; nothing half-written is left (issue 50, item 6)."""

from __future__ import annotations

import collections
import errno
import hashlib
import os
import shutil
from pathlib import Path
from types import SimpleNamespace

import pytest

from normlimits.audit.resume import Resume
from normlimits.core import cache
from normlimits.model import capture_cache as cc
from normlimits.model import gguf
from normlimits.model.corpus import Corpus, token_windows

USAGE = collections.namedtuple("usage", "total used free")
TEXT = "Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. " * 8


def _free(monkeypatch, free: int) -> None:
    """Make every disk report ``free`` bytes free."""
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: USAGE(10**12, 10**12 - free, free))


def _corpus() -> Corpus:
    return Corpus(text=TEXT, sha256=hashlib.sha256(TEXT.encode()).hexdigest(), source="test")


def _left(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.rglob("*"))


# ------------------------------------------------------------------ the helper

def test_check_free_space_refuses_with_the_folder_both_sizes_and_the_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_CACHE", str(tmp_path / "cache"))
    folder = tmp_path / "cache" / "gguf"
    folder.mkdir(parents=True)
    _free(monkeypatch, 2 * 10**9)
    cache.check_free_space(folder, 2 * 10**9, "writing it")          # exactly enough: passes
    with pytest.raises(cache.DiskFullError) as exc:
        cache.check_free_space(folder, 3_500_000_000, "writing it")
    assert str(exc.value) == (f"writing it needs about 3.50 GB in the folder {folder}, whose disk "
                              "has 2.00 GB free; free space there, or set NORMLIMITS_CACHE to a "
                              "folder on a disk with room.")
    with pytest.raises(cache.DiskFullError, match=r"free; free space there, or pass another --x\.$"):
        cache.check_free_space(folder, 3 * 10**9, "writing it", "pass another --x")
    with pytest.raises(cache.DiskFullError, match=r"GB free; free space there\.$"):
        cache.check_free_space(tmp_path, 3 * 10**9, "writing it")   # a folder no setting chose


def test_check_free_space_does_not_refuse_where_the_free_space_cannot_be_read(tmp_path, monkeypatch):
    def unreadable(folder):
        raise OSError(errno.ENOSYS, "no statvfs")

    monkeypatch.setattr(shutil, "disk_usage", unreadable)
    cache.check_free_space(tmp_path, 10**15, "writing it")


def test_the_conversion_check_keeps_its_message(tmp_path, monkeypatch):
    info = SimpleNamespace(n_values=10_000_000, path=Path("tiny.gguf"))
    directory = tmp_path / "cache" / "gguf" / "abc"
    directory.parent.mkdir(parents=True)
    _free(monkeypatch, 1000)
    with pytest.raises(gguf.CacheError) as exc:
        gguf.check_room_for_conversion(info, directory)
    assert str(exc.value) == (f"converting tiny.gguf to float32 needs about 0.11 GB in the cache "
                              f"folder {directory.parent}, whose disk has 0.00 GB free; free space "
                              "there, or set NORMLIMITS_CACHE to a folder on a disk with room.")
    gguf.check_room_for_conversion(SimpleNamespace(n_values=0, path=Path("x.gguf")), directory)


def test_disk_full_error_names_a_given_remedy_in_place_of_the_setting(tmp_path):
    message = str(cache.disk_full_error(tmp_path / "w.bin", None, "pass another --out"))
    assert message == (f"the disk holding the folder {tmp_path} is full (no space left on device) "
                       "while writing w.bin; nothing half-written was kept. Free space there, or "
                       "pass another --out.")


# ------------------------------------------------------------------ the capture cache

def test_a_capture_cache_without_room_is_refused_before_the_first_window_is_stored(
        tiny_loaded, tmp_path, monkeypatch):
    monkeypatch.setenv(cc.CAPTURE_CACHE_ENV, str(tmp_path / "captures"))
    _free(monkeypatch, 1000)
    with pytest.raises(cache.DiskFullError) as exc:
        list(cc.cached_captures(tiny_loaded, _corpus(), 32, 3))
    message = str(exc.value)
    entry = next((tmp_path / "captures").iterdir())
    assert message.startswith("caching the forward passes of 3 windows (")
    assert f" MB each) needs about 0.00 GB in the folder {entry}, whose disk has 0.00 GB free; " \
           "free space there, or set NORMLIMITS_CAPTURE_CACHE to a folder on a disk with room, " \
           "or to off (no caching)." in message, message
    assert _left(tmp_path / "captures") == [entry.name, cc.KEY_FILE]      # no window, no temporary


def test_check_room_counts_only_the_windows_not_yet_stored(tmp_path, monkeypatch):
    for index in (0, 1):
        cc.window_path(tmp_path, index).write_bytes(b"stored")
    _free(monkeypatch, 1000)
    cc.check_room(tmp_path, 900, 0, 3, "R")                  # one window of 900 bytes to store
    with pytest.raises(cache.DiskFullError, match="forward passes of 2 windows"):
        cc.check_room(tmp_path, 900, 0, 4, "R")


def test_a_full_disk_while_caching_names_the_setting_and_leaves_no_temporary(tiny_loaded, tmp_path,
                                                                             monkeypatch):
    monkeypatch.setenv(cc.CAPTURE_CACHE_ENV, str(tmp_path / "captures"))
    real = cache.Path.write_bytes

    def full(path, data):
        if path.name.startswith(".window-"):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        return real(path, data)

    monkeypatch.setattr(cache.Path, "write_bytes", full)
    with pytest.raises(cache.DiskFullError, match=r"while writing window-0000.safetensors; nothing "
                       r"half-written was kept. Free space there, or set NORMLIMITS_CAPTURE_CACHE "
                       r"to a folder on a disk with room, or to off \(no caching\)\.$"):
        list(cc.cached_captures(tiny_loaded, _corpus(), 32, 2))
    assert [name for name in _left(tmp_path / "captures") if "window" in name] == []


# ------------------------------------------------------------------ audit --out's resume cache

def test_a_resume_cache_without_room_names_out_and_no_resume(tiny_loaded, tmp_path, monkeypatch):
    windows = token_windows(tiny_loaded, _corpus(), 32, 2)
    resume = Resume(tmp_path / "out", {"k": 1})
    _free(monkeypatch, 1000)
    with pytest.raises(cache.DiskFullError) as exc:
        list(resume.captures(tiny_loaded, windows))
    assert f"in the folder {resume.folder}, whose disk has 0.00 GB free; free space there, or pass " \
           "an --out on a disk with room, or --no-resume to keep no resume cache beside it." \
           in str(exc.value), str(exc.value)
    assert _left(resume.folder) == [cc.KEY_FILE]


def test_a_full_disk_while_keeping_the_resume_cache_names_out(tiny_loaded, tmp_path, monkeypatch):
    windows = token_windows(tiny_loaded, _corpus(), 32, 2)
    resume = Resume(tmp_path / "out", {"k": 1})
    monkeypatch.setattr(cache.Path, "write_bytes", lambda path, data: (_ for _ in ()).throw(
        OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))))
    with pytest.raises(cache.DiskFullError, match=r"Free space there, or pass an --out on a disk "
                                                  r"with room, or --no-resume"):
        list(resume.captures(tiny_loaded, windows))
    assert _left(resume.folder) == []        # key.json was the first write, and nothing was kept
