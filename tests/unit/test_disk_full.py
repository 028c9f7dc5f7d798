"""A full disk (ENOSPC) is one message naming the folder and the setting or option that chose it,
never a raw ``OSError``/``SafetensorError`` traceback, and nothing half-written is kept (issue 50,
item 6)."""

from __future__ import annotations

import errno
import os

import pytest

from normlimits.core import cache, outputs
from normlimits.core.outputs import FileOutput, FolderOutput, OutputError

FULL = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _raise(exc):
    def fail(*args, **kwargs):
        raise exc
    return fail


def test_a_full_cache_names_the_folder_and_the_cache_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_CACHE", str(tmp_path / "cache"))
    entry = tmp_path / "cache" / "gguf" / "abc.json"
    with pytest.raises(cache.DiskFullError) as exc:
        cache._atomic_file(entry, _raise(FULL))
    message = str(exc.value)
    assert f"the disk holding the folder {entry.parent} is full (no space left on device) while " \
           "writing abc.json" in message and "set NORMLIMITS_CACHE to a folder" in message, message
    with pytest.raises(cache.DiskFullError, match="set NORMLIMITS_CACHE"):
        cache.atomic_save_dir(tmp_path / "cache" / "gguf" / "conv", _raise(FULL))
    # safetensors raises its own error type, quoting the system's words
    from safetensors import SafetensorError

    monkeypatch.setattr("safetensors.torch.save_file",
                        _raise(SafetensorError("Error while serializing: IoError(Os { code: 28, "
                                               "kind: StorageFull, message: \"No space left on "
                                               "device\" })")))
    with pytest.raises(cache.DiskFullError, match="while writing w.safetensors"):
        cache.atomic_save_safetensors({}, tmp_path / "cache" / "w.safetensors")
    assert [p.name for p in (tmp_path / "cache").rglob("*") if ".tmp-" in p.name] == []


def test_a_full_capture_cache_names_its_own_setting(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("NORMLIMITS_CAPTURE_CACHE", str(tmp_path / "caps"))
    with pytest.raises(cache.DiskFullError, match="set NORMLIMITS_CAPTURE_CACHE to a folder"):
        cache._atomic_file(tmp_path / "caps" / "k" / "window-0000.safetensors", _raise(FULL))


def test_a_full_disk_for_out_names_the_option_and_keeps_the_earlier_folder(tmp_path, monkeypatch):
    target = tmp_path / "out"
    first = FolderOutput(target, tool="t")
    first.write("a.txt", b"old")
    first.commit()
    output = FolderOutput(target, tool="t")
    monkeypatch.setattr(outputs, "open", _raise(FULL), raising=False)
    with pytest.raises(OutputError) as exc:
        output.write("a.txt", b"new")
    assert str(exc.value) == (f"--out {str(target)!r}: the disk holding {tmp_path} is full (no space "
                              "left on device) while writing a.txt; nothing was changed there. "
                              "Free space there, or pass another --out.")
    monkeypatch.undo()
    assert (target / "a.txt").read_bytes() == b"old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_a_full_disk_for_bench_output_names_the_option(tmp_path, monkeypatch):
    output = FileOutput(tmp_path / "bench.json", tool="bench", option="--output",
                        is_ours=lambda path: True)
    monkeypatch.setattr(cache.Path, "write_bytes", _raise(FULL))
    with pytest.raises(OutputError, match=r"--output .*bench.json'?: the disk holding .* is full .* "
                                          r"pass another --output"):
        output.commit(b"{}")
    monkeypatch.undo()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
