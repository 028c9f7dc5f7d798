"""The output folder's commit loses nothing at any step (issue 50, items 1 and 2).

``--force`` replaces an earlier output by moving it aside to ``DIR.previous-<time>``; every step of
that commit (the move aside, the move into place, the move back after a failure, the clean-up) is
made to fail here (an ``OSError`` such as EIO, or a ``KeyboardInterrupt`` landing before or after
the step) and after each: the earlier folder, with the user's notes, is whole at ``DIR`` or at a
``DIR.previous-*`` folder; ``DIR`` is the earlier folder or the complete new one; a message that
says "nothing was changed there" is true; nothing is left beside it but those.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from pathlib import Path

import pytest

from normlimits.audit import compare, command
from normlimits.core import outputs
from normlimits.core.outputs import MANIFEST, FolderOutput, OutputError, folder_argument, read_manifest

TOOL = "normlimits test"


def _fingerprint(folder: Path) -> dict:
    return {p.relative_to(folder).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(folder.rglob("*")) if p.is_file()}


def _write(target: Path, text: str, *, force: bool = False) -> FolderOutput:
    output = FolderOutput(target, tool=TOOL, force=force)
    output.write("result.txt", text.encode())
    output.write("figure.png", b"figure of " + text.encode())
    return output


@pytest.fixture
def earlier(tmp_path):
    """An earlier output with the user's notes added (so only --force replaces it): (target, its
    fingerprint)."""
    target = tmp_path / "out"
    _write(target, "old").commit()
    (target / "notes.txt").write_text("my notes on the old run")
    return target, _fingerprint(target)


class Faults:
    """Counts the folder moves (``os.rename``/``os.replace``) and the clean-ups (``shutil.rmtree``)
    of the commit, and makes the chosen ones fail: ``"error"`` (EIO, nothing done), ``"before"``
    (KeyboardInterrupt, nothing done) or ``"after"`` (done, then KeyboardInterrupt)."""

    def __init__(self, monkeypatch, moves: dict[int, str] | None = None,
                 removals: dict[int, str] | None = None):
        self.moves, self.removals = moves or {}, removals or {}
        self.n_moves = self.n_removals = 0
        real_rename, real_replace, real_rmtree = os.rename, os.replace, shutil.rmtree

        def wrap(real, counter, plan):
            def call(*args, **kwargs):
                setattr(self, counter, getattr(self, counter) + 1)
                mode = plan.get(getattr(self, counter))
                if mode == "error":
                    raise OSError(errno.EIO, os.strerror(errno.EIO), str(args[0]))
                if mode == "before":
                    raise KeyboardInterrupt
                result = real(*args, **kwargs)
                if mode == "after":
                    raise KeyboardInterrupt
                return result
            return call

        monkeypatch.setattr(outputs.os, "rename", wrap(real_rename, "n_moves", self.moves))
        monkeypatch.setattr(outputs.os, "replace", wrap(real_replace, "n_moves", self.moves))
        monkeypatch.setattr(outputs.shutil, "rmtree", wrap(real_rmtree, "n_removals", self.removals))


def _check_nothing_lost(target: Path, old: dict, raised: BaseException | None) -> str:
    """The invariant after any commit, failed or not; returns where the old folder is
    (``"target"`` or ``"aside"``)."""
    parent = target.parent
    asides = sorted(p for p in parent.iterdir() if p.name.startswith(f"{target.name}.previous-"))
    hidden = [p.name for p in parent.iterdir() if p.name.startswith(".")]
    assert hidden == [], f"temporary folders or lock files left: {hidden}"
    assert target.is_dir(), "the target folder is gone"
    now = _fingerprint(target)
    if now == old:
        where = "target"
        assert asides == [], "the old folder is at DIR and a copy was left aside"
    else:
        manifest = read_manifest(target)
        assert manifest is not None and sorted(manifest["files"]) == ["figure.png", "result.txt"]
        assert (target / "result.txt").read_text() == "new", "DIR is neither the old nor the new"
        assert [_fingerprint(a) for a in asides] == [old], "the old folder was not kept aside whole"
        where = "aside"
    if isinstance(raised, OutputError) and "nothing was changed there" in str(raised):
        assert where == "target", f"the message is false: {raised}"
    if isinstance(raised, OutputError) and where == "aside":
        assert str(asides[0]) in str(raised), f"the message does not say where the old folder is: {raised}"
    return where


def _commit(target: Path, faults_setup, *, force: bool = True):
    output = _write(target, "new", force=force)
    faults = faults_setup()
    raised = None
    try:
        with output:
            output.commit()
    except (OutputError, KeyboardInterrupt) as exc:
        raised = exc
    return output, faults, raised


STEPS = [(step, mode) for step in (1, 2) for mode in ("error", "before", "after")]


@pytest.mark.parametrize("step,mode", STEPS)
def test_a_failure_or_interrupt_at_any_move_keeps_the_earlier_folder(earlier, monkeypatch, step, mode):
    """Move 1 takes the old folder aside, move 2 the new one into place."""
    target, old = earlier
    _, faults, raised = _commit(target, lambda: Faults(monkeypatch, moves={step: mode}))
    assert faults.n_moves >= step, "the commit has fewer moves than the test injects into"
    monkeypatch.undo()
    where = _check_nothing_lost(target, old, raised)
    if mode == "error":
        assert isinstance(raised, OutputError), raised
        assert where == "target" and "nothing was changed there" in str(raised), str(raised)
    if mode == "before":
        assert isinstance(raised, KeyboardInterrupt) and where == "target"


@pytest.mark.parametrize("mode", ["error", "before"])
def test_when_the_move_back_fails_too_the_message_says_where_the_old_folder_is(earlier, monkeypatch,
                                                                              mode):
    target, old = earlier
    _, _, raised = _commit(target, lambda: Faults(monkeypatch, moves={2: "error", 3: mode}))
    monkeypatch.undo()
    asides = [p for p in target.parent.iterdir() if p.name.startswith("out.previous-")]
    if mode == "error":
        assert isinstance(raised, OutputError)
        assert "the earlier folder is kept at" in str(raised) and str(asides[0]) in str(raised)
        assert "nothing was changed" not in str(raised)
    assert [_fingerprint(a) for a in asides] == [old]
    assert not target.exists() or _fingerprint(target) == old


@pytest.mark.parametrize("mode", ["error", "before", "after"])
def test_a_failing_clean_up_never_touches_the_earlier_folder(earlier, monkeypatch, mode):
    """The move into place fails, then so does the clean-up of the temporary folder."""
    target, old = earlier
    _, _, raised = _commit(target, lambda: Faults(monkeypatch, moves={2: "error"},
                                                  removals={1: mode}))
    monkeypatch.undo()
    assert _fingerprint(target) == old
    assert not [p for p in target.parent.iterdir() if p.name.startswith("out.previous-")]


@pytest.mark.parametrize("mode", ["error", "before"])
def test_an_unchanged_earlier_output_that_cannot_be_deleted_is_kept_and_named(tmp_path, monkeypatch,
                                                                              mode):
    target = tmp_path / "out"
    _write(target, "old").commit()
    old = _fingerprint(target)
    output, _, raised = _commit(target, lambda: Faults(monkeypatch, removals={1: mode}), force=False)
    monkeypatch.undo()
    assert (target / "result.txt").read_text() == "new"
    asides = [p for p in tmp_path.iterdir() if p.name.startswith("out.previous-")]
    if mode == "error":                 # the commit succeeded; the old folder is kept and named
        assert raised is None and output.aside == asides[0] and _fingerprint(asides[0]) == old
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_force_moves_the_earlier_folder_aside_and_says_where(earlier):
    target, old = earlier
    output, _, raised = _commit(target, lambda: None)
    assert raised is None
    assert _check_nothing_lost(target, old, None) == "aside"
    assert output.aside is not None and _fingerprint(output.aside) == old


def test_a_kill_between_the_moves_is_cleaned_up_by_the_next_run(earlier, monkeypatch):
    """A kill after the old folder was moved aside: DIR is missing, the old folder is visible at
    DIR.previous-*, the complete new one hidden; the next run removes the hidden one only."""
    target, old = earlier
    output = _write(target, "new", force=True)
    Faults(monkeypatch, moves={2: "before"})
    monkeypatch.setattr(FolderOutput, "_put_back", lambda self, aside: False)   # as a kill: no handler
    monkeypatch.setattr(FolderOutput, "abort", lambda self: self._lock.release())
    with pytest.raises(KeyboardInterrupt):
        output.commit()
    monkeypatch.undo()
    [aside] = [p for p in target.parent.iterdir() if p.name.startswith("out.previous-")]
    assert _fingerprint(aside) == old and not target.exists()
    _write(target, "newer").commit()
    assert (target / "result.txt").read_text() == "newer"
    assert _fingerprint(aside) == old
    assert not [p.name for p in target.parent.iterdir() if p.name.startswith(".")]


# ------------------------------------------------------------------ item 2: --out '' everywhere

@pytest.mark.parametrize("main", [command.main, compare.main], ids=["audit", "compare"])
@pytest.mark.parametrize("blank", ["", "  "])
def test_an_empty_out_is_refused_by_every_command_with_one_message(main, blank, tmp_path, monkeypatch,
                                                                   capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "mine.txt").write_text("mine")
    argv = (["--model", "gpt2-random", "--out", blank] if main is command.main
            else [str(tmp_path / "a"), str(tmp_path / "b"), "--out", blank])
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "usage:" in err and "--out is empty: pass the path of the output" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"]
    assert Path.cwd() == tmp_path


def test_the_out_check_is_one_function_shared_by_both_commands():
    for p in (command.parser(), compare.parser()):
        [action] = [a for a in p._actions if "--out" in a.option_strings]
        assert action.type.__qualname__ == folder_argument("--out").__qualname__
        assert action.type.__module__ == outputs.__name__


@pytest.mark.parametrize("out", [".", "", "sub/.."])
def test_the_current_folder_is_never_an_output(out, tmp_path, monkeypatch):
    """Even given as ``.`` (or a ``Path('')``, which is ``.``), an output folder that is the
    current folder, or holds it, would be replaced under the shell: refused."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    with pytest.raises(OutputError, match="is the current folder"):
        FolderOutput(Path(out), tool=TOOL)
    with pytest.raises(OutputError, match="is the current folder"):
        compare.run([tmp_path / "a", tmp_path / "b"], Path(out))
    with pytest.raises(OutputError, match="is the current folder"):
        FolderOutput(tmp_path.parent, tool=TOOL)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sub"]
