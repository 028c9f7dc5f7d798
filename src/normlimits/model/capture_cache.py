"""The shared capture cache: forward passes computed once per build, reused by every chapter.

Every chapter captures the same corpus windows on the same model; :func:`cached_captures` serves
them from disk when an earlier chapter of the build already ran the forward pass. An entry is
keyed by everything the captures depend on:

- the model: its name, a sha256 of its configuration and of every weight tensor (as it is in
  memory, so a model changed after loading gets its own entry), the factor each layer puts on
  ``q.k``, the device type and the dtype of the forward pass;
- the corpus's sha256, the window length L and the window count (which fix the windows);
- the versions of torch and transformers, and a digest of this package's sources;
- the entry format, :data:`FORMAT` (2 since entries hold each layer's sliding window: an entry
  of format 1 has none, and is never read as one).

Whether the capture was opened with ``sliding="measure"`` is not in the key: below the sliding
window both settings capture the same tensors, and above it only ``"measure"`` captures at all.

Each window is one safetensors file holding ``queries``, ``keys``, ``values``, ``hidden``,
``scale``, ``windows`` (each layer's sliding window, 0 for none) and the window's token ``ids`` (keys and values of grouped-query attention once per
key-value head, with the repeat in ``kv_repeat``, and expanded again on loading to the same
bits: SmolLM2's 1024-token window takes 189 MB instead of 283 MB), written atomically (a temporary file renamed into place),
in the dtype of the forward pass (float32 by default: the cache returns bit-identical tensors, so
no result changes). Beside it, ``window-NNNN.sha256`` records the sha256 of the file's bytes when it
was written; a read checks it (the file is read once, hashed and decoded from the same bytes), so a
file altered since (same size, a block overwritten) is never served. A file that cannot be read,
has no or another checksum, or whose ids or shapes do not match, is computed again and replaced,
with a warning naming it.

Stale entries: an entry keyed by another package digest can never be served again, so when an
entry is written, the folder's entries of other package digests are deleted
(:func:`prune_other_packages`; chapters run by hand, outside ``make book``, left one entry per
commit, 21 GB on one machine). A folder shared by two versions of the package keeps the entries of
the one that wrote last.

Where: ``NORMLIMITS_CAPTURE_CACHE`` (a folder, or ``off``); unset, ``_build/captures`` of the book
the current folder belongs to, which ``python -m normlimits.book.execution_cache`` (the first step of
``make book``) drops together with the executed chapters whenever the settings, the package or
the corpus change; outside a book (no ``_config.yml`` above the current folder), nothing is
cached.

Disk: once the first window to store is computed, its size times the windows still to store is
checked against the disk's free space, and a disk without room is refused before anything is
stored (:func:`check_room`), as a full disk while writing is: one
:class:`~normlimits.core.cache.DiskFullError` naming the folder and the setting.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from importlib import metadata
from pathlib import Path
from typing import Callable, Iterator

import torch
from torch import Tensor

from normlimits.core.cache import (
    CAPTURE_CACHE_ENV, DiskFullError, atomic_write_bytes, atomic_write_json, check_free_space, disk_full_error,
    key_digest, package_digest, room_remedy)
from normlimits.model.capture import WindowCapture, capture_window, input_device, layer_scales
from normlimits.core.paths import book_root
from normlimits.model.corpus import token_windows

#: the folder under the build directory (``execution_cache.DERIVED`` drops it)
BUILD_SUBDIR = "captures"
FIELDS = ("queries", "keys", "values", "hidden", "scale", "windows")
#: the entry format (2: ``windows`` stored); part of every key
FORMAT = 2
KEY_FILE = "key.json"


def capture_cache_dir() -> Path | None:
    """The cache folder: ``NORMLIMITS_CAPTURE_CACHE``, else the book's ``_build/captures``, else
    None (no caching). ``off`` (or ``0``, ``none``) disables it."""
    raw = os.environ.get(CAPTURE_CACHE_ENV, "").strip()
    if raw.lower() in ("off", "0", "none", "false"):
        return None
    if raw:
        return Path(raw).expanduser()

    root = book_root()
    return None if root is None else root / "_build" / BUILD_SUBDIR


def _tensor_bytes(tensor: Tensor) -> memoryview:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return memoryview(flat.view(torch.uint8).numpy()).cast("B")


def model_fingerprint(model: torch.nn.Module) -> str:
    """sha256 of the configuration and every distinct parameter and buffer (names, dtypes,
    shapes, bytes). About 1 s for GPT-2 124M on one core; tied weights are hashed once. Tensors
    that Accelerate offloaded (on the ``meta`` device) count by name, dtype and shape only."""
    digest = hashlib.sha256(model.config.to_json_string(use_diff=False).encode())
    seen: set[tuple[int, int]] = set()
    for name, tensor in list(model.named_parameters()) + list(model.named_buffers()):
        ident = (tensor.data_ptr(), tensor.numel())
        if ident in seen:
            continue
        seen.add(ident)
        digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}\0".encode())
        if tensor.device.type != "meta":
            digest.update(_tensor_bytes(tensor))
    return digest.hexdigest()


def capture_key(loaded, corpus, length: int, count: int, shift: float = 0.0) -> dict:
    """Everything the captures of ``count`` windows of ``length`` tokens depend on (``shift``, the
    windows' offset as a fraction of their spacing, only when it is not 0: the keys of unshifted
    windows stay what they were)."""
    model = loaded.model
    parameter = next(model.parameters())
    key = {
        "format": FORMAT,
        "model": loaded.name,
        "model_sha256": model_fingerprint(model),
        "scales": [round(float(s), 12) for s in layer_scales(model)],
        "device": parameter.device.type,
        "dtype": str(parameter.dtype).removeprefix("torch."),
        "corpus_sha256": corpus.sha256,
        "prefix": [int(i) for i in getattr(loaded, "prefix", ())],
        "length": int(length),
        "count": int(count),
        "torch": torch.__version__,
        "transformers": metadata.version("transformers"),
        "package": package_digest(),
    }
    if shift:
        key["shift"] = float(shift)
    return key


def checksum_path(path: Path) -> Path:
    """The sidecar holding the sha256 of the entry ``path`` (``window-0000.sha256``)."""
    return path.with_suffix(".sha256")


def kv_repeat(keys: Tensor, values: Tensor) -> int:
    """The largest r such that ``keys`` and ``values`` [..., H, L, d] hold each head r times in a
    row (heads r*g .. r*g + r - 1 equal, exactly): grouped-query attention's keys and values as
    the capture expands them per query head. 1 when no two neighbouring heads are equal."""
    heads = keys.shape[-3]
    for repeat in range(heads, 1, -1):
        if heads % repeat:
            continue
        if all(torch.equal(t.unflatten(-3, (heads // repeat, repeat)),
                           t.unflatten(-3, (heads // repeat, repeat))[..., :1, :, :].expand(
                               *t.shape[:-3], heads // repeat, repeat, *t.shape[-2:]))
               for t in (keys, values)):
            return repeat
    return 1


def _entry_bytes(capture: WindowCapture, ids: Tensor) -> bytes:
    """The safetensors bytes of one window's entry: the capture and its ``ids``, grouped keys and
    values once per group (with ``kv_repeat``)."""
    from safetensors.torch import save

    tensors = {name: getattr(capture, name) for name in FIELDS}
    if tensors["windows"] is None:          # a capture made by hand: every layer sees every key
        tensors["windows"] = torch.zeros(capture.scale.shape[-1], dtype=torch.long)
    repeat = kv_repeat(capture.keys, capture.values)
    if repeat > 1:
        for name in ("keys", "values"):
            tensors[name] = tensors[name][..., ::repeat, :, :]
        tensors["kv_repeat"] = torch.tensor(repeat)
    cpu = {name: t.detach().to("cpu").contiguous() for name, t in {**tensors, "ids": ids}.items()}
    return save(cpu)


def _store(path: Path, data: bytes) -> None:
    """The entry, then its checksum (a crash between them leaves an entry without one, which is
    recomputed, never served)."""
    checksum_path(path).unlink(missing_ok=True)
    atomic_write_bytes(path, data)
    atomic_write_bytes(checksum_path(path), (hashlib.sha256(data).hexdigest() + "\n").encode())


def window_path(folder: Path, index: int) -> Path:
    """The entry of window ``index`` in ``folder``."""
    return folder / f"window-{index:04d}.safetensors"


def check_room(folder: Path, entry_bytes: int, first: int, count: int, remedy: str) -> None:
    """Refuse, before the first window is stored, a disk without room for every window from
    ``first`` to ``count - 1`` not yet in ``folder``, at ``entry_bytes`` each (all windows of an
    entry have the same shapes): :func:`~normlimits.core.cache.check_free_space`."""
    missing = sum(not window_path(folder, i).is_file() for i in range(first, count))
    what = f"caching the forward passes of {missing} windows ({entry_bytes / 1e6:.1f} MB each)"
    check_free_space(folder, entry_bytes * missing, what, remedy)


def _named(path: Path, remedy: str, write: Callable[[], None]) -> None:
    """Run ``write``; a full disk is raised as one message naming ``path``'s folder and
    ``remedy``."""
    try:
        write()
    except DiskFullError as exc:
        raise disk_full_error(path, exc, remedy) from None


def _load(path: Path, ids: Tensor, device: torch.device) -> WindowCapture | None:
    """The capture stored at ``path`` if its checksum verifies, it is readable and is of ``ids``;
    else None (warned)."""
    if not path.is_file():
        return None
    from safetensors.torch import load

    try:
        data = path.read_bytes()
        recorded = checksum_path(path).read_text(encoding="ascii").strip()
    except FileNotFoundError:
        warnings.warn(f"capture cache: {path} has no checksum ({checksum_path(path).name} is "
                      "missing), so its contents cannot be verified; computing that window again "
                      "and replacing the file.", stacklevel=3)
        return None
    except (OSError, UnicodeDecodeError) as exc:
        warnings.warn(f"capture cache: {path} or its checksum is unreadable ({exc}); computing "
                      "that window again and replacing the file.", stacklevel=3)
        return None
    actual = hashlib.sha256(data).hexdigest()
    if actual != recorded:
        warnings.warn(f"capture cache: {path} is damaged: its sha256 is {actual[:16]}..., not the "
                      f"{recorded[:16]}... recorded when it was written; it is not used. Computing "
                      "that window again and replacing the file.", stacklevel=3)
        return None
    try:
        # copied into memory of torch's own allocator (64-byte aligned), as a fresh capture is:
        # safetensors' tensors lie in the loaded bytes at offsets that vary from load to load
        # (16 or 48 mod 64, measured), and some CPU kernels' last bits depend on alignment
        # (measured: a float64 batched product x @ x.mT of shape [3, 17, 9], at 8 of 15 offsets),
        # so a reused window would not always give the bits of a computed one
        tensors = {name: t.to(device, copy=True) for name, t in load(data).items()}
        if "kv_repeat" in tensors:
            repeat = int(tensors.pop("kv_repeat"))
            for name in ("keys", "values"):
                tensors[name] = tensors[name].repeat_interleave(repeat, dim=-3)
        capture = WindowCapture(**{name: tensors[name] for name in FIELDS})
        same = torch.equal(tensors["ids"].to(ids.device), ids)
        shapes = (capture.queries.shape[-2] == len(ids) == capture.hidden.shape[-2]
                  and capture.keys.shape[-3] == capture.queries.shape[-3] == capture.values.shape[-3])
    except Exception as exc:   # a damaged file: safetensors and torch raise various types
        warnings.warn(f"capture cache: {path} is unreadable ({type(exc).__name__}: {exc}); "
                      "computing that window again and replacing the file.", stacklevel=3)
        return None
    if not (same and shapes):
        warnings.warn(f"capture cache: {path} holds another window than the one asked for; "
                      "computing it again and replacing the file.", stacklevel=3)
        return None
    return capture


def prune_other_packages(root: Path, package: str) -> list[Path]:
    """Delete the entries of ``root`` whose ``key.json`` names another ``package`` digest than
    ``package``; returns the folders deleted. Folders without a readable key (another tool's, or
    an entry whose key is being written) are left alone."""
    import json
    import shutil

    removed = []
    try:
        entries = [d for d in root.iterdir() if d.is_dir()]
    except OSError:
        return removed
    for entry in entries:
        try:
            other = json.loads((entry / KEY_FILE).read_text(encoding="utf-8")).get("package")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(other, str) and other != package:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
    return removed


#: what to do when the capture cache's disk has no room
ROOM_REMEDY = f"{room_remedy(CAPTURE_CACHE_ENV)}, or to off (no caching)"


def serve(loaded, windows: Tensor, folder: Path | None, key: dict | None = None,
          on_window: Callable[[int, bool], None] | None = None,
          remedy: str = ROOM_REMEDY, sliding: str = "cap") -> Iterator[WindowCapture]:
    """One capture per row of ``windows`` [W, L]: loaded from ``folder`` when stored there,
    else computed (one forward pass) and stored. ``folder`` None: computed, nothing stored.
    ``on_window(index, reused)``, if given, is told for each window whether it came from
    ``folder`` (before the capture is yielded). Before the first window is stored, a disk
    without room for all the windows still to store is refused (:func:`check_room`); that and a
    full disk while writing raise :class:`~normlimits.core.cache.DiskFullError` naming the
    folder and ``remedy`` (the setting or option that chose the folder). ``sliding``: as in
    :func:`normlimits.model.capture.capture_window`."""
    writable = folder is not None
    if writable and key is not None:
        if "package" in key and not (folder / KEY_FILE).is_file():   # a new entry: drop stale ones
            prune_other_packages(folder.parent, key["package"])
        try:
            _named(folder / KEY_FILE, remedy, lambda: atomic_write_json(folder / KEY_FILE, key))
        except OSError as exc:
            warnings.warn(f"capture cache: cannot write to {folder} ({exc}); captures are computed "
                          f"without caching. Set {CAPTURE_CACHE_ENV} to a writable folder, or off.",
                          stacklevel=2)
            writable = False
    device = input_device(loaded.model)
    checked = False
    for index, ids in enumerate(windows):
        path = None if folder is None else window_path(folder, index)
        capture = _load(path, ids, device) if path is not None else None
        if capture is None:
            capture = (capture_window(loaded, ids) if sliding == "cap"
                       else capture_window(loaded, ids, sliding=sliding))
            if writable:
                data = _entry_bytes(capture, ids)
                if not checked:
                    check_room(folder, len(data), index, len(windows), remedy)
                    checked = True
                try:
                    _named(path, remedy, lambda: _store(path, data))
                except OSError as exc:
                    warnings.warn(f"capture cache: cannot write {path} ({exc}); continuing "
                                  "without caching.", stacklevel=2)
                    writable = False
            if on_window is not None:
                on_window(index, False)
        elif on_window is not None:
            on_window(index, True)
        yield capture


def cached_captures(loaded, corpus, length: int, count: int, shift: float = 0.0,
                    sliding: str = "cap") -> Iterator[WindowCapture]:
    """Captures of ``token_windows(loaded, corpus, length, count, shift=shift)``, one per window,
    in order, through the shared cache (:func:`capture_cache_dir`): a drop-in replacement for
    ``iter_captures(loaded, token_windows(...))`` that runs each forward pass once per build.
    Memory-flat: one window at a time. ``sliding="measure"`` allows windows beyond the model's
    sliding window (:func:`normlimits.model.capture.capture_window`)."""
    windows = token_windows(loaded, corpus, length, count, shift=shift, sliding=sliding)
    root = capture_cache_dir()
    if root is None:
        return serve(loaded, windows, None, sliding=sliding)
    key = capture_key(loaded, corpus, length, count, shift)
    return serve(loaded, windows, root / key_digest(key), key, sliding=sliding)


def entry_bytes(folder: Path | None = None) -> int:
    """Disk bytes held by the capture cache (all entries)."""
    folder = folder if folder is not None else capture_cache_dir()
    if folder is None or not folder.is_dir():
        return 0
    return sum(p.stat().st_size for p in folder.rglob("*.safetensors"))
