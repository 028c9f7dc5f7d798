"""Outputs a user asked for, written as a transaction: nothing a user owns is lost or mixed.

Two shapes of output share this machinery:

- a **folder** (``normlimits audit --out DIR``): :class:`FolderOutput` writes every file into a
  fresh temporary folder beside ``DIR`` (``.DIR.tmp-*``), writes ``manifest.json`` last (the tool,
  the time, every file with its size and sha256), and moves the folder into place as a whole
  (an earlier output is first renamed to ``DIR.previous-<time>``, then the new folder to ``DIR``;
  see :meth:`FolderOutput.commit`). Until then ``DIR`` is untouched; a failure or an interrupt
  leaves the old folder intact at ``DIR`` (or, where it cannot be moved back, at the
  ``DIR.previous-<time>`` the message names); the temporary one is removed, or, after a kill,
  left hidden beside it and removed by the next run.
- a **file** (``python -m normlimits.experiments.bench --output FILE``): :class:`FileOutput` writes a
  temporary file beside it and renames it into place.

What may be replaced: a missing or empty target; an earlier output of the same tool (a folder
whose ``manifest.json`` names the tool and whose files are exactly the ones it lists, unchanged;
a file that ``is_ours`` recognises). A folder holding anything else is refused with the remedy:
another folder, or, for an earlier output the user has since added to or edited, ``--force``,
which moves the old folder aside (``DIR.previous-<time>``) instead of deleting it. A lock file
beside the target (``.DIR.lock``) refuses a second writer while the first runs;
it is removed when the first finishes. Both classes
check that the target can be written when they are created, before any computing. Files and
folders get the permissions the user's umask gives (not mkstemp's 0600).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Callable

from normlimits.core.cache import file_sha256 as _sha256
from normlimits.core.cache import (
    DISK_FULL, DiskFullError, atomic_write_bytes, release_lock, take_lock, umask_mode)

__all__ = ["OutputError", "FolderOutput", "FileOutput", "MANIFEST", "read_manifest",
           "umask_mode", "check_target_text", "folder_argument"]

MANIFEST = "manifest.json"
#: marks a temporary folder as this module's (so a later run may remove it after a kill)
PARTIAL_MARK = ".normlimits-partial"


class OutputError(ValueError):
    """The output cannot be written as asked; the message names the option, the path and the
    remedy."""


def check_target_text(text: str, option: str) -> Path:
    """The path an option's raw text names; an empty or blank value is refused (``Path('')`` is
    the current folder, which the user did not ask for)."""
    if not str(text).strip():
        raise OutputError(f"{option} is empty: pass the path of the output "
                          f"(e.g. {option} audit-out); an empty value would mean the current folder.")
    return Path(str(text)).expanduser()


def folder_argument(option: str = "--out") -> Callable[[str], Path]:
    """The argparse ``type=`` of an output-folder option, shared by every command that writes
    one (``audit --out``, ``compare --out``): the raw text is checked by
    :func:`check_target_text` before anything turns it into a path (``Path('')`` would already
    be ``.``, the current folder)."""
    import argparse

    def parse(text: str) -> Path:
        try:
            return check_target_text(text, option)
        except OutputError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    parse.__name__ = "folder"
    return parse


def read_manifest(folder: Path) -> dict | None:
    """The folder's ``manifest.json`` as a dict, or None when absent or not a manifest."""
    path = Path(folder) / MANIFEST
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("files"), dict) or "tool" not in doc:
        return None
    return doc


def _changes(folder: Path, manifest: dict) -> list[str]:
    """Names in ``folder`` that the manifest does not list, or whose bytes differ from it."""
    listed = manifest["files"]
    changed = []
    for entry in sorted(os.listdir(folder)):
        if entry == MANIFEST:
            continue
        path = folder / entry
        info = listed.get(entry)
        if info is None or not path.is_file() or path.is_symlink():
            changed.append(entry)
        elif path.stat().st_size != info.get("bytes") or _sha256(path) != info.get("sha256"):
            changed.append(entry)
    changed += [name for name in listed if not (folder / name).exists()]
    return changed


class _Lock:
    """An exclusive, non-blocking lock on the file ``path`` (created; removed when released), by
    :func:`~normlimits.core.cache.take_lock` and :func:`~normlimits.core.cache.release_lock`:
    ``busy()`` is raised when another process holds it, ``cannot(exc)`` when it cannot be made."""

    def __init__(self, path: Path, busy: Callable[[], OutputError],
                 cannot: Callable[[OSError], OutputError]):
        try:
            fd = take_lock(path, wait=False)
        except BlockingIOError:
            raise busy() from None
        except OSError as exc:
            raise cannot(exc) from None
        self.fd, self.path = fd, path
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())

    def release(self) -> None:
        """Remove the lock file and let go (once; later calls do nothing)."""
        if self.fd is None:
            return
        fd, self.fd = self.fd, None
        release_lock(fd, self.path)


def _stamp() -> str:
    return time.strftime("%Y%m%d-%H%M%S")


class FolderOutput:
    """A folder written as one transaction (see the module docstring).

    ``option`` names the command-line option in messages (``--out``), ``tool`` the program (it
    goes into the manifest and decides what counts as an earlier output). Creating one takes the
    lock and makes the temporary folder (so an unwritable place is refused before any work);
    :meth:`write` adds a file; :meth:`commit` writes the manifest and moves the folder into
    place; :meth:`abort` (or leaving a ``with`` block by an exception) removes it.
    """

    def __init__(self, target: Path, *, tool: str, option: str = "--out", force: bool = False):
        self.tool, self.option, self.force = tool, option, force
        self.shown = str(target)
        self.target = Path(os.path.abspath(Path(target).expanduser()))
        if self.target.is_symlink():
            self.target = self.target.resolve()
        self.aside: Path | None = None
        self.files: dict[str, dict] = {}
        self._tmp: Path | None = None
        self._check_shape()
        parent = self.target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error(f"its folder {parent} cannot be created ({exc.strerror}); pass a "
                              "writable place") from None
        self._keep_old = False
        if not os.access(parent, os.W_OK | os.X_OK):
            raise self._unwritable(PermissionError(errno.EACCES, "not writable"))
        self._lock = _Lock(parent / f".{self.target.name}.lock", self._busy, self._unwritable)
        try:
            self._check_replaceable()
            self._remove_stale()
            try:
                self._tmp = Path(tempfile.mkdtemp(prefix=f".{self.target.name}.tmp-", dir=parent))
                os.chmod(self._tmp, umask_mode(0o777))
                (self._tmp / PARTIAL_MARK).touch()
            except OSError as exc:
                raise self._unwritable(exc) from None
        except BaseException:
            self._lock.release()
            raise

    # ------------------------------------------------------------------ checks
    def _error(self, what: str) -> OutputError:
        return OutputError(f"{self.option} {self.shown!r}: {what}.")

    def _unwritable(self, exc: OSError) -> OutputError:
        return self._error(f"cannot be written: the folder {self.target.parent} is not writable "
                           f"({exc.strerror}); pass a writable place")

    def _busy(self) -> OutputError:
        return self._error(f"another {self.tool} is writing to this folder now (lock file "
                           f"{self.target.parent / ('.' + self.target.name + '.lock')}); wait for it "
                           f"to finish, or pass another {self.option}")

    def _check_shape(self) -> None:
        try:
            here = Path(os.getcwd()).resolve()
        except OSError:                     # the current folder was removed: nothing to protect
            here = None
        if here is not None and (here == self.target.resolve() or self.target.resolve() in here.parents):
            raise self._error("is the current folder (or holds it), which the output would replace; "
                              f"pass a new folder, e.g. {self.option} "
                              f"{Path(self.shown or '.') / 'out'}")
        if self.target.exists() and not self.target.is_dir():
            raise self._error(f"is a file, not a folder; pass a folder path ({self.option} "
                              "is created if missing)")

    def _check_replaceable(self) -> None:
        t = self.target
        if not t.exists() or not any(os.scandir(t)):
            if t.exists() and not os.access(t, os.W_OK):
                raise self._error("is not writable; pass a writable folder")
            return
        manifest = read_manifest(t)
        if manifest is None or manifest.get("tool") != self.tool:
            whose = ("it holds files this tool did not write" if manifest is None
                     else f"it holds the output of {manifest.get('tool')!r}")
            raise self._error(f"the folder is not empty and {whose}, which would be lost; pass "
                              f"another {self.option} (a new or empty folder). --force replaces "
                              f"only an earlier output of {self.tool}")
        if not os.access(t, os.W_OK):
            raise self._error("is not writable; pass a writable folder")
        changed = _changes(t, manifest)
        if changed and not self.force:
            shown = ", ".join(changed[:5]) + (", ..." if len(changed) > 5 else "")
            raise self._error(f"holds an earlier output of {self.tool} that was changed since "
                              f"(added, edited or removed: {shown}); pass another {self.option}, "
                              f"or --force to replace it (the old folder is moved aside to "
                              f"{t.name}.previous-<time>, not deleted)")
        self._keep_old = bool(changed) or self.force

    def _remove_stale(self) -> None:
        """Temporary folders of earlier runs that were killed (we hold the lock): marked as
        partial, or complete outputs of this tool that a kill stopped before they were moved into
        place (their files exactly as their manifest lists them; anything else is kept)."""
        for entry in self.target.parent.glob(f".{self.target.name}.tmp-*"):
            if not entry.is_dir() or entry.is_symlink():
                continue
            manifest = read_manifest(entry)
            if (entry / PARTIAL_MARK).is_file() or (
                    manifest is not None and manifest.get("tool") == self.tool
                    and not _changes(entry, manifest)):
                shutil.rmtree(entry, ignore_errors=True)

    # ------------------------------------------------------------------ writing
    @property
    def folder(self) -> Path:
        """The temporary folder being filled (not the target)."""
        assert self._tmp is not None, "the output was committed or aborted"
        return self._tmp

    def write(self, name: str, data: bytes) -> Path:
        """Add the file ``name`` (no folders) with ``data``."""
        if "/" in name or name in (MANIFEST, PARTIAL_MARK, "", ".", ".."):
            raise ValueError(f"not a plain output file name: {name!r}")
        path = self.folder / name
        try:
            with open(path, "wb") as handle:
                handle.write(data)
        except OSError as exc:
            self.abort()                       # the partial output is removed, the target kept
            if exc.errno in DISK_FULL:
                raise self._error(f"the disk holding {self.target.parent} is full (no space left "
                                  f"on device) while writing {name}; nothing was changed there. "
                                  f"Free space there, or pass another {self.option}") from None
            raise self._error(f"{name} cannot be written in {self.target.parent} "
                              f"({exc.strerror}); nothing was changed there") from None
        self.files[name] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        return self.target / name

    def commit(self) -> Path:
        """Write the manifest last and move the folder into place; returns the target.

        Replacing a folder that holds an earlier output takes two renames: the old folder to
        ``DIR.previous-<time>`` first, then the new one to ``DIR``. The old folder is therefore
        never at a path the clean-up removes (the temporary folder only ever holds the new
        output), whatever fails or is interrupted: a failure of the first rename leaves
        everything as it was; a failure or interrupt after it moves the old folder back to
        ``DIR``, or, where that fails too, says where it is. Only an unchanged earlier output
        (its own files, exactly as its manifest lists them) is deleted, and only after the new
        output is in place.
        """
        tmp = self.folder
        manifest = {"tool": self.tool, "format": 1,
                    "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "files": self.files}
        try:
            with open(tmp / MANIFEST, "w", encoding="utf-8") as handle:
                json.dump(manifest, handle, indent=2, sort_keys=True)
                handle.write("\n")
            (tmp / PARTIAL_MARK).unlink()
            self._check_shape()
            self._check_replaceable()          # again: the target may have changed meanwhile
        except OSError as exc:
            self.abort()
            raise self._error(f"cannot be written ({exc.strerror}); nothing was changed there") from None
        except BaseException:
            self.abort()
            raise
        if self.target.exists() and any(os.scandir(self.target)):
            self._replace(tmp)
            return self.target
        else:
            try:
                os.replace(tmp, self.target)   # onto a missing or empty folder
            except OSError as exc:
                self.abort()
                raise self._error(f"cannot be moved into place ({exc.strerror}); nothing was "
                                  "changed there") from None
            except BaseException:
                self.abort()
                raise
        self._tmp = None
        self._lock.release()
        return self.target

    def _aside_path(self) -> Path:
        aside = self.target.with_name(f"{self.target.name}.previous-{_stamp()}")
        n = 1
        while aside.exists():
            aside = self.target.with_name(f"{self.target.name}.previous-{_stamp()}-{n}")
            n += 1
        return aside

    def _replace(self, tmp: Path) -> None:
        """Move the earlier output aside, then ``tmp`` into place (see :meth:`commit`)."""
        aside = self._aside_path()
        try:
            os.rename(self.target, aside)
        except OSError as exc:                      # nothing moved: the old folder is at DIR
            self.abort()
            raise self._error(f"the earlier folder cannot be moved aside to {aside.name} "
                              f"({exc.strerror}); nothing was changed there") from None
        except BaseException:
            self._put_back(aside)                   # an interrupt may land after the rename
            self.abort()
            raise
        try:
            os.rename(tmp, self.target)
        except BaseException as exc:               # the old folder is at ``aside``: put it back
            back = self._put_back(aside)
            self.abort()
            if not isinstance(exc, OSError):
                raise
            if back:
                raise self._error(f"cannot be moved into place ({exc.strerror}); nothing was "
                                  "changed there") from None
            raise self._error(f"cannot be moved into place ({exc.strerror}); the earlier folder "
                              f"is kept at {aside} (it could not be moved back)") from None
        self._tmp = None                           # committed: nothing is cleaned up from here on
        self._lock.release()
        if self._keep_old:
            self.aside = aside
            return
        try:                                       # an unchanged earlier output: its own files
            shutil.rmtree(aside)
        except OSError:
            self.aside = aside                     # kept, and said so, rather than half-deleted

    def _put_back(self, aside: Path) -> bool:
        """Move the old folder from ``aside`` back to the target (after a failed or interrupted
        commit); True when the target holds it again (or it never left)."""
        if not aside.exists():
            return self.target.exists()
        try:
            if self.target.exists() and not any(os.scandir(self.target)):
                os.rmdir(self.target)
            os.rename(aside, self.target)
            return True
        except OSError:
            return False

    def abort(self) -> None:
        """Remove the temporary folder and release the lock; the target is as it was."""
        tmp, self._tmp = self._tmp, None
        try:
            if tmp is not None:             # only ever the new output, never the earlier folder
                shutil.rmtree(tmp, ignore_errors=True)
        except OSError:                     # left hidden; the next run removes it (_remove_stale)
            pass
        finally:
            self._lock.release()

    def __enter__(self) -> "FolderOutput":
        return self

    def __exit__(self, kind, value, tb) -> None:
        if kind is not None or self._tmp is not None:
            self.abort()


class FileOutput:
    """A single file written as a transaction: locked, checked writable up front, an existing file
    replaced only if ``is_ours(path)`` says it is an earlier output of the same tool."""

    def __init__(self, target: Path, *, tool: str, option: str,
                 is_ours: Callable[[Path], bool]):
        self.tool, self.option, self.shown = tool, option, str(target)
        self.target = Path(os.path.abspath(Path(target).expanduser()))
        if self.target.is_dir():
            raise self._error("is a folder; pass the path of a file (e.g. "
                              f"{Path(self.shown) / 'bench.json'})")
        parent = self.target.parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise self._error(f"its folder {parent} cannot be created ({exc.strerror}); pass a "
                              "writable place") from None
        if not parent.is_dir():
            raise self._error(f"{parent} is not a folder; pass a path in a folder")
        self._lock = _Lock(parent / f".{self.target.name}.lock", lambda: self._error(
            f"another {tool} is writing this file now; wait for it to finish, or pass another "
            f"{option}"), lambda exc: self._error(
            f"cannot be written: its folder {parent} is not writable ({exc.strerror}); pass a "
            "writable place"))
        try:
            if self.target.exists() and not is_ours(self.target):
                raise self._error(f"exists and is not an earlier output of {tool}, so it would be "
                                  f"lost; pass another {option}, or move the file away")
            if self.target.exists() and not os.access(self.target, os.W_OK):
                raise self._error("is not writable; pass another path")
            if not os.access(parent, os.W_OK | os.X_OK):
                raise self._error(f"cannot be written: its folder {parent} is not writable; pass "
                                  "a writable place")
        except BaseException:
            self._lock.release()
            raise

    def _error(self, what: str) -> OutputError:
        return OutputError(f"{self.option} {self.shown!r}: {what}.")

    def commit(self, data: bytes) -> Path:
        """Write ``data`` atomically into place and release the lock; returns the path."""
        try:
            return atomic_write_bytes(self.target, data)
        except DiskFullError:
            raise self._error(f"the disk holding {self.target.parent} is full (no space left on "
                              f"device); nothing was written. Free space there, or pass another "
                              f"{self.option}") from None
        except OSError as exc:
            raise self._error(f"cannot be written ({exc.strerror})") from None
        finally:
            self._lock.release()

    def abort(self) -> None:
        self._lock.release()
