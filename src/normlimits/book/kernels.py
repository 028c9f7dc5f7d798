"""A notebook executed in a fresh Jupyter kernel with its own environment.

The book starts kernels outside Sphinx in two places: a chapter's replays on other models
(:mod:`normlimits.book.replicas`) and the chapters executed side by side before the build
(:mod:`normlimits.book.execute_chapters`). Both give each kernel its settings through the
kernel's environment alone (:func:`child_environment`), so kernels started at the same time from
one process cannot see each other's settings and the parent's environment never changes.

What each cell took is read from the timing ``nbclient`` records in the cells' metadata
(:func:`slowest_cells`) and can be removed again before the notebook is stored
(:func:`drop_cell_timing`), so a notebook executed with timing is stored as one executed without.
"""

from __future__ import annotations

import os
import time
from datetime import datetime
from pathlib import Path
from typing import Mapping

__all__ = ["child_environment", "run_in_kernel", "cell_seconds", "slowest_cells", "drop_cell_timing"]

#: the two moments of ``nbclient``'s cell timing between which a cell ran: its code reached the
#: kernel, and the kernel replied that it had finished
TIMING_KEYS = ("iopub.execute_input", "shell.execute_reply")


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


def cell_seconds(notebook) -> list[tuple[int, float, str]]:
    """``(index, seconds, first line)`` of every code cell of ``notebook`` whose run was timed
    (executed with ``record_timing``), in the notebook's order: ``index`` counts every cell, the
    line is the first non-blank line of the cell's source. Cells without both timing moments are
    left out."""
    out = []
    for index, cell in enumerate(notebook.cells):
        timing = cell.get("metadata", {}).get("execution", {})
        if cell.get("cell_type") != "code" or not all(k in timing for k in TIMING_KEYS):
            continue
        start, end = (datetime.fromisoformat(timing[key]) for key in TIMING_KEYS)    # 'Z' read as UTC
        seconds = (end - start).total_seconds()
        line = next((s.strip() for s in str(cell.get("source", "")).splitlines() if s.strip()), "")
        out.append((index, seconds, line))
    return out


def slowest_cells(notebook, count: int) -> list[dict]:
    """The ``count`` timed code cells of ``notebook`` that took longest, longest first:
    ``{"cell": index, "seconds": s (0.1 s), "line": first line}`` (:func:`cell_seconds`)."""
    timed = sorted(cell_seconds(notebook), key=lambda t: (-t[1], t[0]))[:max(0, count)]
    return [{"cell": i, "seconds": round(s, 1), "line": line[:120]} for i, s, line in timed]


def drop_cell_timing(notebook) -> None:
    """Remove the timing ``nbclient`` recorded in each cell's metadata (in place), leaving the
    notebook as one executed without ``record_timing``."""
    for cell in notebook.cells:
        cell.get("metadata", {}).pop("execution", None)
