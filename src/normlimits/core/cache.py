"""Atomic writes into the project's cache: nothing half-written is ever left behind.

Every writer puts its bytes under a temporary name in the destination's own folder, then renames
it into place with ``os.replace`` (atomic on POSIX); a crash leaves at most a ``.NAME.tmp-*`` file or
folder that no reader ever opens, and the next writer of that entry removes it when it takes the
entry's lock (:func:`remove_stale_temporaries`). So an entry that exists is complete, and readers need no lock; writers hold
:func:`writer_lock`, which on a read-only cache refuses with the folder's name, and whose lock file
is removed when it is released (:func:`take_lock`, :func:`release_lock`). A damaged entry (a
file altered after it was written) is named by :func:`read_json_entry` or by its owner's verifier
(the stand-in's checksums), with the remedy: delete it to recompute it.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Callable, Iterator

from normlimits.core.settings import CACHE_ENV, SettingError, cache_dir


class CacheError(SettingError):
    """A cache entry is damaged, or the cache cannot be written where a write is needed; the
    message names the file or folder and the remedy."""


#: the errors of a full disk (or quota)
DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
#: the setting of the capture cache's folder (:mod:`normlimits.model.capture_cache`)
CAPTURE_CACHE_ENV = "NORMLIMITS_CAPTURE_CACHE"


def is_disk_full(exc: BaseException) -> bool:
    """Whether ``exc`` says the disk (or the quota) is full: an ``OSError`` with ENOSPC/EDQUOT, or
    another library's error quoting the system's words (safetensors raises its own type)."""
    if isinstance(exc, OSError) and exc.errno in DISK_FULL:
        return True
    return any(os.strerror(code) in str(exc) for code in DISK_FULL)


class DiskFullError(CacheError):
    """The disk (or quota) filled up while a file was written, or has too little room for what is
    about to be written (:func:`check_free_space`); the message names the folder and the setting
    that chose it."""


def _setting_of(path: Path) -> str | None:
    """The setting that chose the folder of ``path`` (the capture cache's, the ledger's or the
    cache's), or None for a folder no setting chose."""
    path = Path(os.path.abspath(path))
    folders = {CAPTURE_CACHE_ENV: os.environ.get(CAPTURE_CACHE_ENV, ""),
               "NORMLIMITS_LEDGER_DIR": os.environ.get("NORMLIMITS_LEDGER_DIR", ""),
               CACHE_ENV: os.environ.get(CACHE_ENV, "") or str(Path.home() / ".cache" / "normlimits")}
    for setting, raw in folders.items():
        if raw.strip() and Path(os.path.abspath(Path(raw.strip()).expanduser())) in path.parents:
            return setting
    if "captures" in path.parts:               # the capture cache's default, _build/captures
        return CAPTURE_CACHE_ENV
    return None


def room_remedy(setting: str) -> str:
    """The remedy for a disk without room under a folder that ``setting`` chose."""
    return f"set {setting} to a folder on a disk with room"


def _remedy_for(path: Path, remedy: str | None) -> str | None:
    """``remedy``, else the one of the setting that chose the folder of ``path`` (None if none)."""
    setting = _setting_of(path)
    return remedy or (room_remedy(setting) if setting else None)


def disk_full_error(path: Path, exc: BaseException | None = None,
                    remedy: str | None = None) -> DiskFullError:
    """One message for a full disk: the folder, what was being written, and the remedy:
    ``remedy`` (e.g. the option that chose the folder), else the setting that chose the folder
    (where one did)."""
    path = Path(path)
    remedy = _remedy_for(path, remedy)
    where = f", or {remedy}" if remedy else ""
    return DiskFullError(f"the disk holding the folder {path.parent} is full (no space left on "
                         f"device) while writing {path.name}; nothing half-written was kept. "
                         f"Free space there{where}.")


def check_free_space(folder: Path, needed: int, what: str, remedy: str | None = None,
                     place: str = "the folder") -> None:
    """Refuse, before ``what`` writes about ``needed`` bytes into ``folder``, a disk with less
    free space: a :class:`DiskFullError` naming the folder, both sizes and the remedy (as
    :func:`disk_full_error` chooses it). Nothing is refused where the free space cannot be read."""
    try:
        free = shutil.disk_usage(folder).free
    except OSError:
        return
    if free >= needed:
        return
    remedy = _remedy_for(Path(folder) / "entry", remedy)
    raise DiskFullError(f"{what} needs about {needed / 1e9:.2f} GB in {place} {folder}, whose disk "
                        f"has {free / 1e9:.2f} GB free; free space there"
                        + (f", or {remedy}." if remedy else "."))


def key_digest(key: dict[str, Any]) -> str:
    """A short, stable hex digest of a JSON-serialisable key."""
    blob = json.dumps(key, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cache_path(kind: str, key: dict[str, Any], suffix: str = "") -> Path:
    """The path of a cached artefact of ``kind`` (a sub-folder) named by a digest of ``key``.

    The sub-folder is created when the cache is writable; on a read-only cache the path is returned
    all the same (a reader finds the entry or not; a writer is refused by :func:`writer_lock`).
    """
    folder = cache_dir() / kind
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError:
        pass
    return folder / f"{key_digest(key)}{suffix}"


def take_lock(path: Path, *, wait: bool = True) -> int:
    """A descriptor holding an exclusive ``flock`` on the lock file ``path`` (created with the
    umask's mode when missing); with ``wait`` False, ``BlockingIOError`` when another holds it.

    A holder removes the file when it lets go (:func:`release_lock`), so the file this call opened
    may have been unlinked by its previous holder before the lock was granted: a lock on a file no
    longer at ``path`` excludes nobody, so the call then tries again on the file now there. An
    ``OSError`` from creating the file (a read-only or missing folder) is raised as it is."""
    import fcntl

    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, umask_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            if _is_at(fd, path):
                return fd
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)


def _is_at(fd: int, path: Path) -> bool:
    """Whether the open file ``fd`` is still the file at ``path`` (not unlinked or replaced)."""
    try:
        return os.fstat(fd).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def release_lock(fd: int, path: Path) -> None:
    """Remove the lock file ``path`` and let go of ``fd`` (:func:`take_lock`'s), in that order: the
    file is removed while the lock is still held, so no other holder's file is ever removed, and a
    waiter that was granted the removed file tries again (:func:`take_lock`)."""
    try:
        os.unlink(path)
    except OSError:
        pass                         # a read-only folder: the empty file stays, harmless
    finally:
        os.close(fd)


@contextmanager
def writer_lock(entry: Path, what: str) -> Iterator[None]:
    """Hold an exclusive lock on ``entry`` (a file ``<entry>.lock`` beside it) while it is written;
    the lock file is removed again when the lock is released (:func:`release_lock`).

    Only writers lock: a complete entry is read without it (entries appear atomically), so a
    read-only cache that holds what is needed is usable. Raises :class:`CacheError` naming the
    folder when the lock cannot be created (read-only or missing folder): ``what`` is not cached
    there and cannot be. Once it holds the lock it removes the temporaries that killed writers of
    ``entry`` left (:func:`remove_stale_temporaries`).
    """
    lock_path = entry.with_name(entry.name.split(".")[0] + ".lock")
    try:
        fd = take_lock(lock_path)
    except OSError as exc:
        raise CacheError(f"{what} is not in the cache and cannot be written there: the folder "
                         f"{entry.parent} cannot be written ({exc.strerror}). Set {CACHE_ENV} to a "
                         "writable folder, or fill this one where it is writable.") from None
    try:
        remove_stale_temporaries(entry)
        yield
    finally:
        release_lock(fd, lock_path)


def temporary_prefix(entry: Path) -> str:
    """The name every temporary of ``entry`` starts with (``.NAME.tmp-``), beside it: a writer's
    file or folder before it is renamed into place."""
    return f".{Path(entry).name}.tmp-"


def remove_stale_temporaries(entry: Path) -> list[Path]:
    """Remove the temporaries of ``entry`` (:func:`temporary_prefix`) that writers killed before
    they finished left behind (a killed conversion leaves a folder of about 1 GB); called by
    :func:`writer_lock` once it holds the entry's lock, when no live writer of it can exist.
    Returns what was removed."""
    entry = Path(entry)
    removed = []
    for stale in entry.parent.glob(f"{glob_escape(temporary_prefix(entry))}*"):
        try:
            if stale.is_dir() and not stale.is_symlink():
                shutil.rmtree(stale)
            else:
                stale.unlink()
            removed.append(stale)
        except OSError:
            pass                     # another user's, or a read-only folder: left as it is
    return removed


def glob_escape(text: str) -> str:
    """``text`` with glob's special characters escaped."""
    import glob

    return glob.escape(text)


def read_json_entry(path: Path, what: str, remedy: str = "delete it to recompute it") -> Any:
    """The JSON content of the cache file ``path``; a damaged file raises :class:`CacheError`
    naming it, ``what`` it holds, and the remedy."""
    try:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise CacheError(f"the cached {what} {path} is damaged ({type(exc).__name__}: {exc}); "
                         f"{remedy}.") from None


def file_sha256(path: Path) -> str:
    """The sha256 hex digest of a file's bytes (read in 1 MiB blocks)."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def umask_mode(base: int = 0o666) -> int:
    """``base`` less the process's umask: the mode ``open`` (0o666) or ``mkdir`` (0o777) would
    give, which ``mkstemp`` and ``mkdtemp`` (0o600, 0o700) do not. The umask is read from
    ``/proc/self/status`` where there is one (setting it to read it is not thread-safe)."""
    try:
        with open("/proc/self/status", encoding="ascii") as status:
            mask = next(int(line.split()[1], 8) for line in status if line.startswith("Umask:"))
    except (OSError, StopIteration, ValueError, IndexError):
        mask = os.umask(0o022)
        os.umask(mask)
    return base & ~mask


def _atomic_file(path: Path, write: Callable[[Path], None]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=temporary_prefix(path), dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.chmod(tmp, umask_mode(0o666))      # readable as the umask says, not mkstemp's 0600
        os.replace(tmp, path)
    except BaseException as exc:
        Path(tmp).unlink(missing_ok=True)
        if is_disk_full(exc):
            raise disk_full_error(path, exc) from None
        raise
    return path


def atomic_write_bytes(path: Path, data: bytes) -> Path:
    """Write ``data`` to ``path`` atomically."""
    return _atomic_file(path, lambda tmp: tmp.write_bytes(data))


def atomic_write_json(path: Path, obj: Any) -> Path:
    """Write ``obj`` as indented JSON to ``path`` atomically."""
    return atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def atomic_save_torch(obj: Any, path: Path) -> Path:
    """``torch.save`` to ``path`` atomically."""
    import torch

    return _atomic_file(path, lambda tmp: torch.save(obj, tmp))


def atomic_save_safetensors(tensors: dict[str, Any], path: Path) -> Path:
    """Tensors (any device) to a safetensors file at ``path`` atomically, copied to the CPU."""
    from safetensors.torch import save_file

    cpu = {name: tensor.detach().to("cpu").contiguous() for name, tensor in tensors.items()}
    return _atomic_file(path, lambda tmp: save_file(cpu, str(tmp)))


def _follow_umask(folder: Path) -> None:
    """Give every file and folder under ``folder`` the mode the umask gives (``fill`` may write
    with 0600, as transformers' ``save_pretrained`` does for ``model.safetensors``)."""
    for path in Path(folder).rglob("*"):
        if not path.is_symlink():
            os.chmod(path, umask_mode(0o777 if path.is_dir() else 0o666))


def atomic_save_dir(directory: Path, fill: Callable[[Path], None]) -> Path:
    """Create ``directory`` atomically: ``fill(tmpdir)`` writes its content, then it is renamed.

    If ``directory`` already exists it is replaced.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=temporary_prefix(directory), dir=directory.parent))
    try:
        os.chmod(tmp, umask_mode(0o777))      # as mkdir would make it, not mkdtemp's 0700
        fill(tmp)
        _follow_umask(tmp)
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=temporary_prefix(directory), dir=directory.parent))
            os.replace(directory, old / "x")
            os.replace(tmp, directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, directory)
    except BaseException as exc:
        shutil.rmtree(tmp, ignore_errors=True)
        if is_disk_full(exc):
            raise disk_full_error(directory, exc) from None
        raise
    return directory


def sources_digest(root: Path, paths) -> str:
    """sha256 over ``paths`` (files under ``root``), in the order given: each one's path relative
    to ``root`` and its contents."""
    digest = hashlib.sha256()
    for path in paths:
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(path.read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def package_digest(root: Path | None = None) -> str:
    """sha256 over the package's Python sources (paths and contents, in sorted order)."""
    root = root or Path(__file__).resolve().parents[1]    # the package: normlimits/core/cache.py
    return sources_digest(root, sorted(root.rglob("*.py")))
