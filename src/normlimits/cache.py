"""Atomic writes into the project's cache: nothing half-written is ever left behind.

Every writer puts its bytes under a temporary name in the destination's own folder, then renames
it into place with ``os.replace`` (atomic on POSIX); a crash leaves at most a ``.tmp-*`` file that no
reader ever opens.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Callable

from .settings import cache_dir


def key_digest(key: dict[str, Any]) -> str:
    """A short, stable hex digest of a JSON-serialisable key."""
    blob = json.dumps(key, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:16]


def cache_path(kind: str, key: dict[str, Any], suffix: str = "") -> Path:
    """The path of a cached artefact of ``kind`` (a sub-folder) named by a digest of ``key``."""
    folder = cache_dir() / kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{key_digest(key)}{suffix}"


def _atomic_file(path: Path, write: Callable[[Path], None]) -> Path:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    os.close(fd)
    try:
        write(Path(tmp))
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
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


def atomic_save_dir(directory: Path, fill: Callable[[Path], None]) -> Path:
    """Create ``directory`` atomically: ``fill(tmpdir)`` writes its content, then it is renamed.

    If ``directory`` already exists it is replaced.
    """
    directory = Path(directory)
    directory.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=directory.parent))
    try:
        fill(tmp)
        if directory.exists():
            old = Path(tempfile.mkdtemp(prefix=".old-", dir=directory.parent))
            os.replace(directory, old / "x")
            os.replace(tmp, directory)
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, directory)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return directory


def atomic_save_pretrained(model: Any, directory: Path, extra: dict[str, Any] | None = None) -> Path:
    """``model.save_pretrained`` into ``directory`` atomically; ``extra`` maps file names to JSON."""
    def fill(tmp: Path) -> None:
        model.save_pretrained(tmp)
        for name, obj in (extra or {}).items():
            (tmp / name).write_text(json.dumps(obj, indent=2, sort_keys=True) + "\n")

    return atomic_save_dir(directory, fill)
