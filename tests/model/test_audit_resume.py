"""Resumable audits (normlimits.audit.resume): an audit interrupted after some windows (a failure,
or the process killed) resumes from its checksummed cache and gives the same results hash as an
uninterrupted one; two audits of the same model and settings give the same hash."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import normlimits
from conftest import SHARED_CORPUS, make_tiny_gpt2
from normlimits.audit import command as audit
from normlimits.model import capture_cache
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE

pytestmark = pytest.mark.skipif(not SHARED_CORPUS.is_file(), reason="the shared corpus is absent")
#: three windows of 32 tokens: an interruption after two leaves one to compute
SETTINGS = ["--windows", "3", "--length", "32", "--quiet"]
KILLED_AFTER = 2
KILLER = """
import os, signal, sys
from normlimits.audit import command as audit
from normlimits.model import capture_cache
real, done = capture_cache.capture_window, []      # the audit's forward passes go through it
def dying(loaded, ids):
    if len(done) == int(sys.argv[1]):
        os.kill(os.getpid(), signal.SIGKILL)      # no clean-up of any kind runs
    done.append(1)
    return real(loaded, ids)
capture_cache.capture_window = dying
sys.exit(audit.main(sys.argv[2:]))
"""


def _env() -> dict:
    src = str(Path(normlimits.__file__).resolve().parents[1])
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}


@pytest.fixture(scope="module")
def model(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("resume") / "model"
    make_tiny_gpt2(n_positions=128).save_pretrained(folder)
    (folder / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    return folder


def _argv(model: Path, out: Path, *extra: str) -> list[str]:
    return ["--model", str(model), "--out", str(out), *SETTINGS, *extra]


def _doc(out: Path) -> dict:
    return json.loads((out / "audit.json").read_text())


def _differences(a, b, path="rows") -> list[str]:
    """Where two JSON values differ, as paths with both values (the first 10)."""
    if isinstance(a, dict) and isinstance(b, dict):
        keys = sorted(set(a) | set(b))
        return [d for k in keys for d in _differences(a.get(k), b.get(k), f"{path}.{k}")][:10]
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [d for i, (x, y) in enumerate(zip(a, b)) for d in _differences(x, y, f"{path}[{i}]")][:10]
    return [] if a == b else [f"{path}: {a!r} != {b!r}"]


def _resume_dirs(parent: Path) -> list[Path]:
    return sorted(p for p in parent.iterdir() if ".resume-" in p.name)


@pytest.fixture(scope="module")
def fresh(model, tmp_path_factory) -> dict:
    """An uninterrupted audit, keeping no resume cache."""
    out = tmp_path_factory.mktemp("fresh") / "out"
    assert audit.main(_argv(model, out, "--no-resume")) == 0
    assert _resume_dirs(out.parent) == []
    doc = _doc(out)
    assert doc["provenance"]["resume"] == {"cache": None, "reused_windows": [],
                                           "computed_windows": [0, 1, 2]}
    return doc


@pytest.fixture(scope="module")
def killed_then_resumed(model, tmp_path_factory) -> dict:
    """An audit killed (SIGKILL) during its third forward pass, then the same command run again,
    both in processes of their own; returns what was left after the kill and the resumed doc."""
    out = tmp_path_factory.mktemp("killed") / "out"
    killed = subprocess.run([sys.executable, "-c", KILLER, str(KILLED_AFTER), *_argv(model, out)],
                            env=_env(), capture_output=True, text=True, timeout=900)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    left = sorted(p.name for p in out.parent.iterdir())
    (cache,) = _resume_dirs(out.parent)
    stored = sorted(p.name for p in cache.iterdir())
    again = subprocess.run([sys.executable, "-m", "normlimits", "audit", *_argv(model, out)],
                           env=_env(), capture_output=True, text=True, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    return {"left": left, "stored": stored, "doc": _doc(out),
            "after": sorted(p.name for p in out.parent.iterdir())}


def test_a_killed_audit_leaves_its_finished_windows_and_no_output(killed_then_resumed):
    k = killed_then_resumed
    assert "out" not in k["left"], "a killed audit never leaves a half-written output"
    assert any(name.startswith(".out.tmp-") for name in k["left"])
    assert k["stored"] == ["key.json", "window-0000.safetensors", "window-0000.sha256",
                           "window-0001.safetensors", "window-0001.sha256"]


def test_the_rerun_reuses_the_finished_windows_and_gives_the_same_hash(killed_then_resumed, fresh):
    k = killed_then_resumed
    assert k["doc"]["provenance"]["resume"]["reused_windows"] == [0, 1]
    assert k["doc"]["provenance"]["resume"]["computed_windows"] == [2]
    assert not _differences(k["doc"]["rows"], fresh["rows"]), _differences(k["doc"]["rows"], fresh["rows"])
    assert k["doc"]["provenance"]["results_sha256"] == fresh["provenance"]["results_sha256"]
    assert k["doc"]["rows"] == fresh["rows"] and k["doc"]["statistics"] == fresh["statistics"]
    assert k["after"] == ["out"], "the killed run's temporary folder, the lock and the cache are gone"


def test_two_audits_of_the_same_model_and_settings_give_the_same_hash(killed_then_resumed, fresh):
    """Two processes (the resumed one computed every yardstick again, one window's forward pass
    too) and one uninterrupted run in this process: one results hash."""
    a, b = fresh["provenance"], killed_then_resumed["doc"]["provenance"]
    assert a["results_sha256"] == b["results_sha256"]
    assert a["windows"] == b["windows"] and a["seeds"] == b["seeds"]
    assert a["model_source"] == b["model_source"]


def test_a_failure_after_two_windows_resumes_and_a_damaged_window_is_computed_again(
        model, fresh, tmp_path, monkeypatch):
    real, calls = capture_cache.capture_window, []

    def failing(loaded, ids):
        if len(calls) == 2:
            raise RuntimeError("interrupted after two windows")
        calls.append(1)
        return real(loaded, ids)

    out = tmp_path / "out"
    monkeypatch.setattr(capture_cache, "capture_window", failing)
    with pytest.raises(RuntimeError, match="interrupted after two windows"):
        audit.main(_argv(model, out))
    (cache,) = _resume_dirs(tmp_path)
    assert not out.exists() and (cache / "window-0001.safetensors").is_file()
    # the second window's file damaged in place (same size), and a cache of other settings
    damaged = cache / "window-0001.safetensors"
    data = bytearray(damaged.read_bytes())
    data[len(data) // 2] ^= 0xFF
    damaged.write_bytes(bytes(data))
    stale = tmp_path / ".out.resume-0123456789abcdef"
    stale.mkdir()
    (stale / "key.json").write_text("{}")
    calls.clear()

    def counted(loaded, ids):
        calls.append(1)
        return real(loaded, ids)

    monkeypatch.setattr(capture_cache, "capture_window", counted)
    with pytest.warns(UserWarning, match="is damaged"):
        assert audit.main(_argv(model, out)) == 0
    doc = _doc(out)
    assert doc["provenance"]["resume"]["reused_windows"] == [0]
    assert doc["provenance"]["resume"]["computed_windows"] == [1, 2] and len(calls) == 2
    assert not _differences(doc["rows"], fresh["rows"]), _differences(doc["rows"], fresh["rows"])
    assert doc["provenance"]["results_sha256"] == fresh["provenance"]["results_sha256"]
    assert [p.name for p in tmp_path.iterdir()] == ["out"]


def test_resume_dir_is_named_by_the_key(tmp_path):
    from normlimits.audit.resume import Resume, resume_dir

    a, b = resume_dir(tmp_path / "out", {"k": 1}), resume_dir(tmp_path / "out", {"k": 2})
    assert a != b and a.parent == tmp_path and a.name.startswith(".out.resume-")
    said = []
    first = Resume(tmp_path / "out", {"k": 1}, said.append)
    assert first.enabled and first.folder.is_dir()
    Resume(tmp_path / "out", {"k": 2}, said.append)
    assert not a.exists() and b.is_dir() and "other settings" in said[0]
    off = Resume(tmp_path / "out", None)
    assert not off.enabled and off.describe() == {"cache": None, "reused_windows": [],
                                                  "computed_windows": []}
    off.finish()
    assert b.is_dir(), "a disabled resume touches no cache"
