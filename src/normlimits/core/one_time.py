"""One-time work: computations whose results are cached for every later run, such as a stand-in's
training or a GGUF file's conversion to float32.

A chapter's time budget is about what a run of it costs once the machine has its caches, so the
time spent in one-time work is counted apart. The code that does such work wraps it in
:func:`one_time_work`; :func:`spent` is the process's total so far, which a chapter reads at its
start and at its end (:class:`normlimits.book.chapter.ChapterContext`). Nested one-time work is
counted once, by its outermost block.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from typing import Iterator

__all__ = ["one_time_work", "spent", "busy"]

_state = {"seconds": 0.0, "depth": 0}


@contextmanager
def one_time_work() -> Iterator[None]:
    """Count the wall time of the block (also when it raises) as one-time work."""
    _state["depth"] += 1
    started = time.perf_counter()
    try:
        yield
    finally:
        _state["depth"] -= 1
        if _state["depth"] == 0:
            _state["seconds"] += time.perf_counter() - started


def spent() -> float:
    """Seconds of one-time work this process has done so far (outermost blocks only)."""
    return _state["seconds"]


def busy() -> bool:
    """Whether one-time work is running now (inside a :func:`one_time_work` block)."""
    return _state["depth"] > 0
