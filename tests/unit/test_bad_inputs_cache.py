"""Damaged and unusable caches: each is named with its folder and the remedy, a complete read-only
cache is usable, training never starts without a notice, and nothing cached is altered by a failure.

No training and no full-size model: the cached stand-in here is a tiny GPT-2 saved exactly as the
real one is (:func:`normlimits.model.standin.save_standin`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re

import pytest

from conftest import make_tiny_gpt2
from normlimits.model import standin
from normlimits.experiments import temperature_training
from normlimits.core.cache import CacheError, writer_lock
from normlimits.model.corpus import Corpus
from normlimits.core.settings import SettingError, cache_dir

TEXT = "It was in July, 1805, and the speaker was the well-known Anna Pavlovna Scherer. " * 300


def _corpus(text: str = TEXT) -> Corpus:
    return Corpus(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), source="test text")


def _report() -> dict:
    bands = {"0-255": 2.0, "256-511": 2.0, "512-1023": 2.0, "all": 2.0}
    return {"model_bits_per_byte": bands, "bigram_bits_per_byte": {k: v + 1 for k, v in bands.items()},
            "train_seconds": 1.5, "corpus_sha256": _corpus().sha256}


@pytest.fixture
def no_training(monkeypatch):
    """Any attempt to train fails the test."""
    def refuse(*args, **kwargs):
        raise AssertionError("training started")

    monkeypatch.setattr(standin, "train_standin", refuse)
    monkeypatch.setattr(standin, "train_language_model", refuse)


@pytest.fixture
def cached_standin(isolated_cache):
    """A complete stand-in cache entry for :func:`_corpus` (a tiny GPT-2 in place of the trained one)."""
    directory = standin.standin_dir(_corpus())
    standin.save_standin(make_tiny_gpt2(vocab=257), _report(), directory)
    return directory


def _fingerprint(folder) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


# ------------------------------------------------------------------ the cache setting

def test_a_cache_setting_naming_a_file_is_refused(tmp_path, monkeypatch):
    target = tmp_path / "a-file"
    target.write_text("x")
    monkeypatch.setenv("NORMLIMITS_CACHE", str(target))
    with pytest.raises(SettingError, match="NORMLIMITS_CACHE=.*is a file, not a folder"):
        cache_dir()


def test_a_cache_setting_that_cannot_be_created_is_refused(tmp_path, monkeypatch):
    (tmp_path / "a-file").write_text("x")
    monkeypatch.setenv("NORMLIMITS_CACHE", str(tmp_path / "a-file" / "cache"))
    with pytest.raises(SettingError, match="cannot be created.*writable folder"):
        cache_dir()


def test_a_lock_that_cannot_be_written_names_the_folder_and_the_remedy(tmp_path):
    entry = tmp_path / "missing-folder" / "0123abcd.json"
    with pytest.raises(CacheError, match="missing-folder cannot be written.*NORMLIMITS_CACHE"):
        with writer_lock(entry, "the thing"):
            pass


# ------------------------------------------------------------------ the stand-in's cache

def test_a_complete_cached_standin_loads_and_is_verified_by_checksums(cached_standin, no_training):
    report = json.loads((cached_standin / standin.REPORT_FILE).read_text())
    assert set(report["files"]) >= {"config.json", "model.safetensors"}
    loaded = standin.load_standin(_corpus())
    assert loaded.name == "standin" and str(cached_standin) in loaded.source
    assert standin.standin_report(_corpus())["train_seconds"] == 1.5


def test_a_complete_cache_loads_without_taking_the_writer_lock(cached_standin, no_training, monkeypatch):
    """As on a read-only file system: the lock is only needed to write."""
    def read_only(entry, what):
        raise CacheError("read-only")

    monkeypatch.setattr(standin, "writer_lock", read_only)
    assert standin.load_standin(_corpus()).name == "standin"


def test_an_empty_read_only_cache_is_refused_with_the_folder(isolated_cache, no_training, monkeypatch):
    monkeypatch.setattr(standin, "writer_lock", writer_lock)
    cache_dir()
    (isolated_cache / "standin").mkdir()
    real_open, real_os_open = open, os.open

    def refuse(path):
        if str(path).startswith(str(isolated_cache)):
            raise PermissionError(13, "Permission denied", str(path))

    def read_only_open(path, mode="r", *args, **kwargs):
        if "w" in mode:
            refuse(path)
        return real_open(path, mode, *args, **kwargs)

    def read_only_os_open(path, flags, *args, **kwargs):       # the lock file is made by os.open
        if flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            refuse(path)
        return real_os_open(path, flags, *args, **kwargs)

    monkeypatch.setattr("builtins.open", read_only_open)
    monkeypatch.setattr(os, "open", read_only_os_open)
    with pytest.raises(CacheError, match=r"stand-in .* cannot be written there.*standin cannot be written \(Permission denied\)"):
        standin.load_standin(_corpus())


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _garbage(path):
    path.write_bytes(b"\x93NUMPY garbage" * 100)


def _empty(path):
    path.write_bytes(b"")


def _flip_a_byte(path):
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("name, damage, why", [
    ("model.safetensors", _truncate, "does not match the checksum"),
    ("model.safetensors", _garbage, "does not match the checksum"),
    ("model.safetensors", _empty, "does not match the checksum"),
    ("model.safetensors", _flip_a_byte, "does not match the checksum"),
    ("model.safetensors", lambda p: p.unlink(), "model.safetensors is missing"),
    (standin.REPORT_FILE, _truncate, "stand-in report .* is damaged"),
    (standin.REPORT_FILE, lambda p: p.write_text("{}"), "lacks model_bits_per_byte"),
    (standin.REPORT_FILE, lambda p: p.unlink(), "has no standin_report.json"),
    ("config.json", _truncate, "stand-in configuration .* is damaged"),
    ("config.json", lambda p: p.unlink(), "config.json is missing"),
])
def test_a_damaged_cached_standin_is_named_never_retrained_and_left_as_it_is(
        cached_standin, no_training, name, damage, why):
    damage(cached_standin / name)
    before = _fingerprint(cached_standin)
    with pytest.raises(CacheError) as info:
        standin.load_standin(_corpus())
    message = str(info.value)
    assert str(cached_standin) in message and "delete" in message, message
    assert re.search(why, message), message
    assert _fingerprint(cached_standin) == before, "a failed load altered the cache"


def test_a_report_without_checksums_is_verified_by_structure(cached_standin, no_training):
    """Stand-ins cached before checksums were recorded still load, and a damaged weight file in
    them is still named (the safetensors header is opened)."""
    path = cached_standin / standin.REPORT_FILE
    report = json.loads(path.read_text())
    del report["files"]
    path.write_text(json.dumps(report))
    assert standin.load_standin(_corpus()).name == "standin"
    _truncate(cached_standin / "model.safetensors")
    with pytest.raises(CacheError, match="stand-in in .* is damaged: the weight file .* delete the folder"):
        standin.load_standin(_corpus())


def test_training_starts_only_with_a_notice_saying_where_and_how_long(isolated_cache, monkeypatch, capsys):
    monkeypatch.setattr(standin, "train_standin", lambda corpus, recipe=None: (make_tiny_gpt2(vocab=257), _report()))
    loaded = standin.load_standin(_corpus())
    err = capsys.readouterr().err
    assert "training it now" in err and standin.TRAINING_ESTIMATE in err
    assert str(standin.standin_dir(_corpus())) in err
    assert loaded.name == "standin"
    standin.load_standin(_corpus())
    assert "training" not in capsys.readouterr().err, "a cached stand-in is loaded silently"


def test_a_corpus_too_short_to_train_on_is_refused_before_training(isolated_cache, no_training):
    tiny = _corpus("War and Peace, in 91 bytes? " * 3)
    need = f"{standin.minimum_corpus_bytes(1024):,}"
    with pytest.raises(CacheError, match=rf"NORMLIMITS_CORPUS .* holds 84 bytes: too short.*at least {need} "):
        standin.load_standin(tiny)
    assert not standin.standin_dir(tiny).exists()


def test_the_minimum_corpus_holds_one_held_out_window():
    need = standin.minimum_corpus_bytes(1024)
    ids = standin.byte_tokens("a" * need)
    train, held = standin.split_corpus(ids)
    assert standin.held_out_windows(held, length=1024).shape == (1, 1025)
    with pytest.raises(ValueError, match="shorter than one window"):
        standin.held_out_windows(standin.split_corpus(standin.byte_tokens("a" * (need - 1)))[1])


# ------------------------------------------------------------------ the temperature runs' cache

def test_a_damaged_temperature_run_is_named_and_not_retrained(isolated_cache, monkeypatch):
    corpus = _corpus()
    key = temperature_training.run_key(corpus.sha256, 1.0, 0, 3, 16, 2, 1e-3)
    from normlimits.core.cache import cache_path

    path = cache_path("temperature-training", key, ".json")
    path.write_text('{"temperature": 1.0, "seed"')
    monkeypatch.setattr(temperature_training, "train_at_temperature",
                        lambda *a, **k: pytest.fail("training started"))
    with pytest.raises(CacheError, match="temperature run .*T=1.0, seed 0.* is damaged.*delete it"):
        temperature_training.temperature_study(corpus, temperatures=(1.0,), seeds=(0,), steps=3,
                                               positions=16, batch=2, lr=1e-3)
    assert path.read_text() == '{"temperature": 1.0, "seed"'
