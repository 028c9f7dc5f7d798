"""Lock files are removed when their writer lets go, and still exclude (issue 50, item 9).

A cache entry's writer holds ``<entry>.lock`` (:func:`normlimits.core.cache.writer_lock`), an output's
``.DIR.lock`` (:class:`normlimits.core.outputs.FolderOutput`); both are removed on release, while the
lock is still held, and a process granted a lock on a file removed meanwhile tries again on the
file now there. Checked here: no lock file is left after a write, failed or not; writers in
separate processes never overlap and lose no update; a dead writer's temporary is removed by the
next writer and a live writer's is not.
"""

from __future__ import annotations

import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from normlimits.core import cache
from normlimits.core.outputs import FileOutput, FolderOutput, OutputError

SRC = str(Path(cache.__file__).resolve().parents[2])


def _python(code: str, *args, **kwargs) -> subprocess.Popen:
    """A Python process running ``code`` with ``args``, this checkout's package importable and
    stdin and stdout piped (text)."""
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen([sys.executable, "-c", code, *map(str, args)], env=env, text=True,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, **kwargs)


# ------------------------------------------------------------------ removed on release

def test_the_cache_lock_file_is_gone_after_a_write_and_after_a_failed_one(tmp_path):
    entry = tmp_path / "abc123.json"
    with cache.writer_lock(entry, "the entry"):
        assert (tmp_path / "abc123.lock").is_file()
        cache.atomic_write_json(entry, {"a": 1})
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc123.json"]
    with pytest.raises(RuntimeError, match="the writer failed"):
        with cache.writer_lock(entry, "the entry"):
            raise RuntimeError("the writer failed")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc123.json"]


def test_the_output_lock_files_are_gone_after_a_commit_and_after_an_abort(tmp_path):
    output = FolderOutput(tmp_path / "out", tool="t")
    assert (tmp_path / ".out.lock").is_file()
    output.write("a.txt", b"a")
    output.commit()
    with FolderOutput(tmp_path / "out", tool="t"):
        pass                                              # left without a commit: aborted
    bench = FileOutput(tmp_path / "b.json", tool="t", option="--output", is_ours=lambda p: True)
    bench.commit(b"{}")
    FileOutput(tmp_path / "b.json", tool="t", option="--output", is_ours=lambda p: True).abort()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.json", "out"]


def test_a_lock_granted_on_a_file_its_holder_removed_is_taken_again_on_the_new_file(tmp_path,
                                                                                   monkeypatch):
    """The race the removal opens: B opens the lock file, A (the holder) removes it and lets go,
    B is granted the lock on the removed file, which excludes nobody; B must take the new one."""
    path = tmp_path / "e.lock"
    holder = cache.take_lock(path)
    waiting = threading.Event()
    real_flock = fcntl.flock

    def flock(fd, op):
        if threading.current_thread() is not threading.main_thread():
            waiting.set()                    # B has opened the holder's file and now waits on it
        return real_flock(fd, op)

    monkeypatch.setattr(fcntl, "flock", flock)
    taken = {}
    waiter = threading.Thread(target=lambda: taken.setdefault("fd", cache.take_lock(path)))
    waiter.start()
    assert waiting.wait(5)
    time.sleep(0.05)
    cache.release_lock(holder, path)
    waiter.join(5)
    fd = taken["fd"]
    assert os.fstat(fd).st_ino == os.stat(path).st_ino, "B holds a lock on a removed file"
    with pytest.raises(BlockingIOError):                  # and that lock excludes others
        cache.take_lock(path, wait=False)
    cache.release_lock(fd, path)
    assert not path.exists()


# ------------------------------------------------------------------ exclusion across processes

WORKER = """
import json, os, sys, time
from pathlib import Path
from normlimits.core import cache
entry, inside, rounds = Path(sys.argv[1]), Path(sys.argv[2]), int(sys.argv[3])
for _ in range(rounds):
    with cache.writer_lock(entry, "the counter"):
        os.close(os.open(inside, os.O_CREAT | os.O_EXCL))   # fails if another writer is inside
        count = json.loads(entry.read_text())["count"] if entry.exists() else 0
        time.sleep(0.002)
        cache.atomic_write_json(entry, {"count": count + 1})
        os.unlink(inside)
"""


def test_writers_in_separate_processes_never_overlap_and_lose_no_update(tmp_path):
    entry, inside = tmp_path / "counter.json", tmp_path / "inside"
    workers = [_python(WORKER, entry, inside, 40, stderr=subprocess.PIPE) for _ in range(3)]
    errors = [w.communicate(timeout=120)[1] for w in workers]
    assert [w.returncode for w in workers] == [0, 0, 0], errors
    assert json.loads(entry.read_text()) == {"count": 120}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["counter.json"]


HOLD_OUTPUT = """
import sys
from normlimits.core.outputs import FolderOutput
output = FolderOutput(sys.argv[1], tool="t")
output.write("who.txt", b"child")
print("ready", flush=True)
sys.stdin.readline()
output.commit()
"""


def test_a_second_output_writer_is_refused_while_the_first_runs_and_then_proceeds(tmp_path):
    target = tmp_path / "out"
    child = _python(HOLD_OUTPUT, target)
    assert child.stdout.readline().strip() == "ready"
    with pytest.raises(OutputError, match="another t is writing to this folder now"):
        FolderOutput(target, tool="t")
    assert len(list(tmp_path.glob(".out.tmp-*"))) == 1          # the live writer's, untouched
    child.communicate("go\n", timeout=60)
    assert child.returncode == 0
    output = FolderOutput(target, tool="t")
    output.write("who.txt", b"parent")
    output.commit()
    assert (target / "who.txt").read_bytes() == b"parent"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


# ------------------------------------------------------------------ temporaries of dead writers

HOLD_ENTRY = """
import os, sys
from pathlib import Path
from normlimits.core import cache
entry = Path(sys.argv[1])
with cache.writer_lock(entry, "the entry"):
    tmp = entry.with_name(cache.temporary_prefix(entry) + "live")
    tmp.write_text("being written")
    print("ready", flush=True)
    if sys.stdin.readline().strip() == "die":
        os._exit(9)                              # as SIGKILL: no clean-up, the lock dies with it
    os.replace(tmp, entry)
"""


def _holder(entry: Path) -> subprocess.Popen:
    child = _python(HOLD_ENTRY, entry)
    assert child.stdout.readline().strip() == "ready"
    return child


def test_a_live_writers_temporary_is_kept_and_a_dead_writers_is_removed_by_the_next(tmp_path):
    entry = tmp_path / "abc123"
    live = tmp_path / ".abc123.tmp-live"
    child = _holder(entry)
    taken = threading.Event()

    def next_writer():
        with cache.writer_lock(entry, "the entry"):
            taken.set()

    waiter = threading.Thread(target=next_writer)
    waiter.start()
    time.sleep(0.3)
    assert not taken.is_set() and live.read_text() == "being written"   # it waits; kept
    child.communicate("finish\n", timeout=60)
    waiter.join(10)
    assert taken.is_set() and entry.read_text() == "being written"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc123"]

    child = _holder(tmp_path / "def456")
    child.communicate("die\n", timeout=60)
    assert child.returncode == 9 and (tmp_path / ".def456.tmp-live").exists()
    with cache.writer_lock(tmp_path / "def456", "the entry"):
        assert not (tmp_path / ".def456.tmp-live").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["abc123"]
