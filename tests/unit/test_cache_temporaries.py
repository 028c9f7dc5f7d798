"""A writer killed mid-write leaves a temporary beside its cache entry (a conversion: about 1 GB);
the next writer of that entry removes it when it takes the entry's lock, and nothing of another
entry (issue 50, item 9)."""

from __future__ import annotations

from normlimits.core import cache


def test_the_temporaries_of_an_entry_are_named_after_it(tmp_path, monkeypatch):
    entry = tmp_path / "gguf" / "abc123"
    seen = []
    cache.atomic_save_dir(entry, lambda tmp: (seen.append(tmp.name), (tmp / "w").write_text("x")))
    assert seen[0].startswith(".abc123.tmp-") and (entry / "w").read_text() == "x"
    cache.atomic_save_dir(entry, lambda tmp: (tmp / "w").write_text("y"))     # replaced
    written = []
    real = cache.tempfile.mkstemp

    def mkstemp(*args, **kwargs):
        written.append(kwargs["prefix"])
        return real(*args, **kwargs)

    monkeypatch.setattr(cache.tempfile, "mkstemp", mkstemp)
    cache.atomic_write_json(tmp_path / "run.json", {"a": 1})
    assert written == [".run.json.tmp-"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gguf", "run.json"]
    assert sorted(p.name for p in (tmp_path / "gguf").iterdir()) == ["abc123"]


def test_taking_the_lock_removes_the_dead_writers_temporaries_of_that_entry_only(tmp_path):
    folder = tmp_path / "gguf"
    folder.mkdir()
    entry = folder / "abc123"
    killed = folder / ".abc123.tmp-k1ll3d"              # a conversion killed by SIGKILL
    killed.mkdir()
    (killed / "model.safetensors").write_bytes(b"\0" * 4096)
    (folder / ".abc123.tmp-f1le").write_bytes(b"half a file")
    other = folder / ".def456.tmp-l1ve"                 # another entry's writer, maybe alive
    other.mkdir()
    (folder / "abc123x").mkdir()                          # another entry whose name starts alike
    with cache.writer_lock(entry, "the test entry"):
        assert not killed.exists() and not (folder / ".abc123.tmp-f1le").exists()
        assert other.is_dir() and (folder / "abc123x").is_dir()
    assert sorted(p.name for p in folder.iterdir()) == [".def456.tmp-l1ve", "abc123x"]  # no lock


def test_a_cached_folder_follows_the_umask_even_where_its_writer_used_0600(tmp_path):
    """transformers' save_pretrained writes model.safetensors with mode 0600; every other cache
    file follows the umask, so the converted weights do too."""
    import os

    def fill(tmp):
        (tmp / "model.safetensors").write_bytes(b"w")
        os.chmod(tmp / "model.safetensors", 0o600)
        (tmp / "sub").mkdir(mode=0o700)

    entry = cache.atomic_save_dir(tmp_path / "conv", fill)
    assert (entry / "model.safetensors").stat().st_mode & 0o777 == cache.umask_mode(0o666)
    assert (entry / "sub").stat().st_mode & 0o777 == cache.umask_mode(0o777)
