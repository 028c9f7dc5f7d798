"""A notebook executed in a fresh Jupyter kernel with its own environment.

The book starts kernels outside Sphinx in two places: a chapter's replays on other models
(:mod:`normlimits.book.replicas`) and the chapters executed side by side before the build
(:mod:`normlimits.book.execute_chapters`). Both give each kernel its settings through the
kernel's environment alone (:func:`child_environment`), so kernels started at the same time from
one process cannot see each other's settings and the parent's environment never changes.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Mapping

__all__ = ["child_environment", "run_in_kernel"]


def child_environment(changes: Mapping[str, str | None]) -> dict[str, str]:
    """This process's environment with ``changes`` applied (None removes a variable): what a child
    kernel is started with. The parent's own environment is left as it is, so kernels started
    side by side cannot see each other's settings."""
    env = dict(os.environ)
    for name, value in changes.items():
        if value is None:
            env.pop(name, None)
        else:
            env[name] = value
    return env


def run_in_kernel(notebook, folder: Path, changes: Mapping[str, str | None], *, timeout: int,
                  record_timing: bool = True) -> float:
    """Execute ``notebook`` (an ``nbformat`` notebook, its outputs filled in place) in a new
    kernel of its kernelspec (``python3`` if it names none) started in ``folder``, with the
    environment changed by ``changes``; returns the wall time (s). ``timeout``: seconds a cell
    may run. A failing cell raises ``nbclient``'s ``CellExecutionError`` (every later cell is
    left unexecuted), a cell over ``timeout`` its ``CellTimeoutError``. ``record_timing``: whether
    each cell's metadata records when it ran (``nbclient``'s default; jupyter-cache executes
    without it)."""
    from nbclient import NotebookClient

    kernel = notebook.metadata.get("kernelspec", {}).get("name") or "python3"
    client = NotebookClient(notebook, timeout=timeout, kernel_name=kernel, allow_errors=False,
                            record_timing=record_timing, resources={"metadata": {"path": str(folder)}})
    start = time.perf_counter()
    client.execute(env=child_environment(changes))
    return time.perf_counter() - start
