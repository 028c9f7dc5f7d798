"""The project's settings: one environment variable each, read at call time.

Every setting can also be passed as a parameter in code; the environment variable is only the
default. Names:

- ``NORMLIMITS_MODEL``: which model (see :mod:`normlimits.model.pretrained`). Unset means "GPT-2 if it can
  be had, else the stand-in".
- ``NORMLIMITS_CORPUS``: path or URL of the corpus (see :mod:`normlimits.model.corpus`). Unset means
  Project Gutenberg's eBook #2600, downloaded once and cached.
- ``NORMLIMITS_CACHE``: folder for downloaded text and trained checkpoints
  (default ``~/.cache/normlimits``).
- ``NORMLIMITS_WINDOWS``: how many corpus windows a chapter averages over (default 8).
- ``NORMLIMITS_THREADS``: torch CPU threads (default 2, the machines' core count).
- ``NORMLIMITS_DEVICE``, ``NORMLIMITS_DTYPE``: where the forward pass runs and in which precision
  (see :mod:`normlimits.core.devices`; default the CPU, float32).
- ``NORMLIMITS_CAPTURE_CACHE``: where forward passes shared between chapters are kept (see
  :mod:`normlimits.model.capture_cache`; default the book's ``_build/captures``).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Iterator

MODEL_ENV = "NORMLIMITS_MODEL"
CORPUS_ENV = "NORMLIMITS_CORPUS"
CACHE_ENV = "NORMLIMITS_CACHE"
WINDOWS_ENV = "NORMLIMITS_WINDOWS"
THREADS_ENV = "NORMLIMITS_THREADS"

DEFAULT_WINDOWS = 8
DEFAULT_THREADS = 2


class SettingError(ValueError):
    """A setting has a value the project cannot use; the message names the setting and the remedy."""


def cache_dir() -> Path:
    """The cache folder (created if missing and the parent is writable).

    Raises :class:`SettingError` when ``NORMLIMITS_CACHE`` names a file, or a folder that does not
    exist and cannot be created. A read-only folder that exists is returned: reading a complete
    cache needs no write access (writers say so when they need it).
    """
    raw = os.environ.get(CACHE_ENV, "").strip()
    path = Path(raw or Path.home() / ".cache" / "normlimits").expanduser()
    named = f"{CACHE_ENV}={raw!r}" if raw else f"the default cache folder {path}"
    if path.exists() and not path.is_dir():
        raise SettingError(f"{named} is a file, not a folder; point {CACHE_ENV} at a folder "
                           "(it is created if missing) or unset it.")
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingError(f"{named}: the folder {path} does not exist and cannot be created "
                           f"({exc.strerror}); point {CACHE_ENV} at a writable folder.") from None
    return path


def positive_int_setting(env: str, default: int) -> int:
    """The positive integer the environment variable ``env`` holds, ``default`` when it is unset or
    empty; anything else is a :class:`SettingError` naming the setting, its value and the remedy."""
    raw = os.environ.get(env)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SettingError(f"{env}={raw!r} is not an integer; set it to a positive integer "
                           f"(default {default}) or unset it.") from None
    if value < 1:
        raise SettingError(f"{env}={raw!r} must be at least 1; set it to a positive integer "
                           f"(default {default}) or unset it.")
    return value


def window_count(count: int | None = None) -> int:
    """The number of corpus windows: ``count`` if given, else ``NORMLIMITS_WINDOWS``, else 8."""
    if count is not None:
        if count < 1:
            raise SettingError(f"the window count must be at least 1 (got {count}); "
                               f"pass a positive count or set {WINDOWS_ENV}.")
        return count
    return positive_int_setting(WINDOWS_ENV, DEFAULT_WINDOWS)


def available_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def thread_count() -> int:
    """torch CPU threads from ``NORMLIMITS_THREADS`` (default 2), capped at the cores available
    (more threads than cores only slows torch down; a warning says so)."""
    requested = positive_int_setting(THREADS_ENV, DEFAULT_THREADS)
    cores = available_cores()
    if requested > cores and os.environ.get(THREADS_ENV, "").strip():
        import warnings

        warnings.warn(f"{THREADS_ENV}={requested} exceeds the {cores} CPU cores available; using "
                      f"{cores} threads.", stacklevel=2)
    return min(requested, cores)


#: the thread count :func:`pinned_threads` holds, None outside it
_PINNED: int | None = None


@contextlib.contextmanager
def pinned_threads(count: int) -> Iterator[None]:
    """Run with exactly ``count`` torch threads, whatever ``NORMLIMITS_THREADS`` and the cores say
    (:func:`configure_torch` keeps them inside), then restore the count before. For work whose
    numbers depend on the thread count (a training's reductions), so that it gives the same result
    in whichever process, and beside whatever else, it runs."""
    global _PINNED
    import torch

    if count < 1:
        raise ValueError(f"threads must be >= 1 (got {count})")
    previous, outer = torch.get_num_threads(), _PINNED
    _PINNED = count
    torch.set_num_threads(count)
    try:
        yield
    finally:
        _PINNED = outer
        torch.set_num_threads(previous)


def configure_torch() -> None:
    """Fix torch's thread count so timings and training are repeatable (inside
    :func:`pinned_threads`, its count)."""
    import torch

    torch.set_num_threads(_PINNED if _PINNED is not None else thread_count())
