"""Execute the book's chapters into its execution cache, side by side, before Sphinx reads them.

Jupyter Book executes the chapters one after the other, each on every thread. A chapter's many
small tensor operations do not use a second thread well (two one-thread replicas of a chapter take
32 s side by side where the same two take 56 s one after the other on two threads:
:mod:`normlimits.book.replicas`), so ``make book`` first runs this module: it executes every
notebook page that the execution cache does not hold yet, :func:`chapters_at_once` of them at a
time, each kernel with its share of ``NORMLIMITS_THREADS``, and stores each executed notebook in
the cache exactly as myst-nb would have (:func:`execute_into_cache`). Sphinx then finds every
chapter in the cache and executes nothing.

What makes the cache match: myst-nb looks a page up by jupyter-cache's hash of the notebook it
reads (the code cells' sources and metadata, the kernelspec), so the notebook is read here by
myst-nb's own MyST reader with the Markdown configuration Jupyter Book gives Sphinx
(:func:`build_settings`), never by another converter; a page this module could not match is
simply executed by Sphinx as before (slower, never wrong), and the strict build's test fails when
that happens.

Order: the longest chapters first (a greedy schedule on :func:`chapters_at_once` workers), by each
chapter's time in the last build where its timing file is left, else in the projection's
calibration build on the same model setting, else its first
(:data:`normlimits.experiments.book_projection.CALIBRATION`). The pages of
:data:`RUN_ALONE_LAST` run after all others, alone: the cost chapter times workloads for its page,
and a timing taken beside another chapter would measure the other chapter too.

The run is recorded in the ledger folder (:data:`REPORT_FILE`): how many at once, the wall time of
the whole execution and each chapter's, each chapter's slowest cells (:data:`SLOWEST_CELLS`, from
``nbclient``'s cell timing, removed again before the notebook is cached) and which pages came from
the cache, so the build's timings can set the chapters' summed time beside the time the build
actually took, and a reader can see where a chapter's time goes.

``NORMLIMITS_CHAPTERS_AT_ONCE``: how many chapters execute at once (default: one per thread of
``NORMLIMITS_THREADS``; 1 runs them one after the other, each on every thread, as Sphinx would).

Run as ``python -m normlimits execute-chapters [FOLDER]`` (the book whose folder holds ``FOLDER``,
default the current folder), after ``normlimits execution-cache``.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from normlimits.book.kernels import drop_cell_timing, run_in_kernel, slowest_cells
from normlimits.book.pages import notebook_pages
from normlimits.claims.ledger import writable_ledger_dir
from normlimits.core.cache import atomic_write_json
from normlimits.core.paths import book_root
from normlimits.core.settings import (MODEL_ENV, THREADS_ENV, SettingError, positive_int_setting,
                                      thread_count)

__all__ = ["AT_ONCE_ENV", "RUN_ALONE_LAST", "REPORT_FILE", "BuildSettings", "ChapterFailed",
           "build_settings", "read_page", "chapters_at_once", "schedule", "expected_seconds",
           "execute_into_cache", "main"]

AT_ONCE_ENV = "NORMLIMITS_CHAPTERS_AT_ONCE"
#: pages that time work for their own page: executed after every other page, alone
RUN_ALONE_LAST = ("cost",)
#: the run's record, in the ledger folder (``*.timing.json`` are the chapters' own)
REPORT_FILE = "chapters-executed.json"
#: the slowest cells the record keeps per chapter (where a chapter's time goes)
SLOWEST_CELLS = 5


class ChapterFailed(RuntimeError):
    """A chapter failed to execute; the message names the page and ends with the cell's error."""


@dataclass(frozen=True)
class BuildSettings:
    """What Jupyter Book gives myst-nb for this book: the Markdown configuration its notebook reader
    uses (``md_config``), the execution cache's folder, the cell timeout (s) and the execution
    mode (only ``cache`` reads the cache this module fills)."""

    md_config: object
    cache_path: Path
    timeout: int
    mode: str


def build_settings(root: Path) -> BuildSettings:
    """The settings of the book at ``root`` as ``jupyter-book build`` computes them from its
    ``_config.yml`` (``jupyter_book.config.get_final_config``), relative paths under ``root``."""
    from jupyter_book.config import get_final_config
    from myst_parser.config.main import MdParserConfig

    config, _ = get_final_config(user_yaml=root / "_config.yml", sourcedir=root,
                                 cli_config={"latex_individualpages": False})
    md_config = MdParserConfig(enable_extensions=set(config.get("myst_enable_extensions", ())))
    cache = Path(config.get("nb_execution_cache_path") or "_build/.jupyter_cache")
    return BuildSettings(md_config, cache if cache.is_absolute() else root / cache,
                         int(config.get("nb_execution_timeout", 1500) or 1500),
                         str(config.get("nb_execution_mode", "auto")))


def read_page(path: Path, md_config) -> object:
    """The notebook of a MyST page as myst-nb reads it for Sphinx (its own reader, ``path``'s
    text, the book's Markdown configuration), or None if the page is not a notebook."""
    from myst_nb.core.config import NbParserConfig
    from myst_nb.core.read import create_nb_reader

    text = path.read_text(encoding="utf-8")
    reader = create_nb_reader(str(path), md_config, NbParserConfig(), text)
    return None if reader is None else reader.read(text)


def chapters_at_once(pages: int) -> int:
    """How many of ``pages`` execute at once: ``NORMLIMITS_CHAPTERS_AT_ONCE`` if set (a positive
    integer), else one per thread (:func:`~normlimits.core.settings.thread_count`); at most
    ``pages``, at least 1."""
    return max(1, min(positive_int_setting(AT_ONCE_ENV, thread_count()), pages))


def expected_seconds(chapters: list[str], ledger: Path, model: str | None = None) -> dict[str, float]:
    """Each chapter's expected execution time (s), for the order only: its time in the last build
    (its ``<chapter>.timing.json`` in ``ledger``), else in the projection's calibration build on
    ``model`` (default ``NORMLIMITS_MODEL``) or, when none was on it, the first one, else 0."""
    from normlimits.experiments.book_projection import CALIBRATION

    model = os.environ.get(MODEL_ENV, "").strip() if model is None else model
    measured = next((b for b in CALIBRATION if b.model == model), CALIBRATION[0]).chapters
    out = {}
    for chapter in chapters:
        try:
            out[chapter] = float(json.loads((ledger / f"{chapter}.timing.json").read_text())["seconds"])
        except (OSError, ValueError, KeyError, TypeError):
            out[chapter] = float(measured.get(chapter, 0.0))
    return out


def schedule(chapters: list[str], expected: dict[str, float]) -> tuple[list[str], list[str]]:
    """``(together, last)``: the chapters run side by side, longest expected first (ties in the
    given order), and those of :data:`RUN_ALONE_LAST`, in the given order. A pool of workers
    taking ``together`` in this order is the longest-processing-time-first greedy schedule."""
    last = [c for c in chapters if c in RUN_ALONE_LAST]
    together = [c for c in chapters if c not in RUN_ALONE_LAST]
    order = {c: i for i, c in enumerate(together)}
    together.sort(key=lambda c: (-expected.get(c, 0.0), order[c]))
    return together, last


def execute_into_cache(root: Path, *, at_once: int | None = None, settings: BuildSettings | None = None,
                       log=print) -> dict:
    """Execute every notebook page of the book at ``root`` that its execution cache does not hold,
    ``at_once`` at a time (default :func:`chapters_at_once`), and cache each as myst-nb would.
    ``settings``: the book's :func:`build_settings`, if already read.
    Returns the run's record (also written to the ledger folder as :data:`REPORT_FILE`).

    Raises :class:`ChapterFailed` when a chapter fails (or its kernel dies), once the chapters
    already running have finished; a failed chapter is not cached (Sphinx would execute it again
    and fail the same way), and the pages of :data:`RUN_ALONE_LAST` are not executed.
    """
    from jupyter_cache import get_cache
    from jupyter_cache.base import CacheBundleIn
    from jupyter_cache.cache.db import NbProjectRecord
    from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

    root = Path(root).resolve()
    settings = settings or build_settings(root)
    if settings.mode != "cache":
        raise SettingError(f"execute.execute_notebooks is {settings.mode!r} in {root / '_config.yml'}; "
                           "chapters are executed ahead of the build only into a cache (set it to "
                           "cache), or build without this step.")
    cache = get_cache(str(settings.cache_path))
    database = threading.Lock()          # jupyter-cache's database, one writer at a time
    pages = {p.stem: p for p in notebook_pages(root)}
    notebooks, cached = {}, []
    for name, path in pages.items():
        notebook = read_page(path, settings.md_config)
        if notebook is None:
            continue
        try:
            cache.match_cache_notebook(notebook)
            cached.append(name)
        except KeyError:
            notebooks[name] = notebook
    ledger = writable_ledger_dir(root / "book")
    width = chapters_at_once(len(notebooks)) if at_once is None else max(1, min(at_once, len(notebooks) or 1))
    expected = expected_seconds(list(notebooks), ledger)
    together, last = schedule(list(notebooks), expected)
    threads = {THREADS_ENV: str(max(1, thread_count() // width))} if width > 1 else {}
    seconds: dict[str, float] = {}
    cells: dict[str, list[dict]] = {}

    def run(name: str, changes: dict) -> None:
        notebook, path = notebooks[name], pages[name]
        with database:
            stage = cache.add_nb_to_project(str(path), read_data={"name": "myst_nb_md", "type": "plugin"})
            NbProjectRecord.remove_tracebacks([stage.pk], cache.db)
        log(f"executing {name} ({', '.join(f'{k}={v}' for k, v in changes.items()) or 'every thread'})")
        try:
            took = run_in_kernel(notebook, path.parent, changes, timeout=settings.timeout,
                                 record_timing=True)
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
            raise ChapterFailed(f"{path.relative_to(root)} failed to execute:\n{str(exc)[-3000:]}") from None
        cells[name] = slowest_cells(notebook, SLOWEST_CELLS)
        drop_cell_timing(notebook)          # stored as myst-nb stores it: without the timing
        with database:
            cache.cache_notebook_bundle(CacheBundleIn(notebook, stage.uri, data={"execution_seconds": took}),
                                        check_validity=False, overwrite=True)
        seconds[name] = took
        log(f"executed {name} in {took:.1f} s")

    start = time.perf_counter()
    failures = []
    with ThreadPoolExecutor(max_workers=width) as pool:        # waits for every chapter
        futures = {name: pool.submit(run, name, threads) for name in together}
    failures += [f.exception() for f in futures.values() if f.exception() is not None]
    together_wall = time.perf_counter() - start
    if not failures:
        for name in last:
            try:
                run(name, {})
            except ChapterFailed as exc:
                failures.append(exc)
    record = {"chapters_at_once": width, "threads_each": int(threads.get(THREADS_ENV, thread_count())),
              "wall_seconds": round(time.perf_counter() - start, 1),
              "side_by_side_wall_seconds": round(together_wall, 1), "side_by_side": together,
              "alone_last": last, "executed_seconds": {k: round(v, 1) for k, v in seconds.items()},
              "from_cache": cached, "slowest_cells": {k: cells[k] for k in seconds}}
    if notebooks:           # a run that executed nothing keeps the record of the one that did
        atomic_write_json(ledger / REPORT_FILE, record)
    if failures:
        raise failures[0]
    return record


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args and args[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    root = book_root(Path(args[0]).resolve() if args else None)      # the book's folder or below
    if root is None:
        print("normlimits execute-chapters: no book (a folder with _config.yml and _toc.yml) above "
              "the current folder; run it from the book's folder", file=sys.stderr)
        return 2
    settings = build_settings(root)
    mode = settings.mode
    if mode != "cache":       # the book asks Sphinx to execute (force, auto) or not at all (off)
        print(f"normlimits execute-chapters: nothing executed ahead: {root / '_config.yml'} sets "
              f"execute.execute_notebooks to {mode!r}, so the build executes the chapters as that "
              "says (one after the other); set it to cache to have them executed side by side first")
        return 0
    try:
        record = execute_into_cache(root, settings=settings)
    except SettingError as exc:
        print(f"normlimits execute-chapters: {exc}", file=sys.stderr)
        return 2
    except ChapterFailed as exc:
        print(f"normlimits execute-chapters: {exc}", file=sys.stderr)
        return 1
    executed = record["executed_seconds"]
    print(f"{len(executed)} chapters executed in {record['wall_seconds']:.0f} s "
          f"({record['chapters_at_once']} at once; their own times add up to "
          f"{sum(executed.values()):.0f} s); {len(record['from_cache'])} taken from the cache")
    for name, took in sorted(executed.items(), key=lambda item: -item[1]):
        top = record["slowest_cells"].get(name)
        slowest = f"; slowest cell {top[0]['cell']} ({top[0]['seconds']:.0f} s): {top[0]['line']}" if top else ""
        print(f"  {name}: {took:.0f} s{slowest}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
