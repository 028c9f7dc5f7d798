"""``normlimits chapter NAME``: execute one chapter of the book, as the build does, and keep what it
drew.

The chapter's MyST source (``book/<NAME>.md``) is executed in a fresh kernel started from the
book's folder (:func:`normlimits.book.replicas.execute_chapter`), with the current settings: the
``NORMLIMITS_*`` environment variables (``NORMLIMITS_MODEL`` picks the model, ...), as in the
build. The executed notebook goes to ``<folder>/<NAME>.ipynb`` (default ``_build/chapters`` under
the book) and the data of each of its figures, the same table the site offers under the figure,
to ``<folder>/<label>.csv`` (the figure's label, as on the site; ``<NAME>-figure-<k>.csv`` for
one without, ``k`` from 1 in the notebook's order). This is the
"Reproduce" command under every figure of the site (:mod:`normlimits.book.sphinx_figure_data`).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from normlimits.core.cache import atomic_write_bytes
from normlimits.core.paths import book_root

#: where the executed chapters go, under the book's folder
DEFAULT_FOLDER = Path("_build") / "chapters"


def chapter_names(root: Path) -> list[str]:
    """The chapters of the book at ``root`` that run code: ``book/<name>.md`` with a code cell."""
    return sorted(p.stem for p in (root / "book").glob("*.md") if "{code-cell}" in p.read_text(encoding="utf-8"))


def write_figure_data(notebook_path: Path, chapter: str) -> list[Path]:
    """Write the data of each figure of the executed notebook at ``notebook_path`` next to it,
    named as on the site (:func:`normlimits.book.figure_data_files.file_stem`: the figure's
    label, ``vanishing-slack.csv``, else ``<chapter>-figure-<k>.csv``); returns the files written
    (a table too large for the notebook and no longer in the cache folder is left out)."""
    from normlimits.book.figure_data_files import file_stem, notebook_figures

    figures = notebook_figures(json.loads(notebook_path.read_text(encoding="utf-8")))
    written = []
    for k, figure in enumerate(figures.values(), start=1):
        if figure.csv is not None:
            path = notebook_path.with_name(f"{file_stem(figure.label, chapter, k)}.csv")
            atomic_write_bytes(path, figure.csv)      # as the site writes it: never half-written
            written.append(path)
    return written


def main(argv: Sequence[str] | None = None) -> int:
    """Execute the chapter named on the command line; 0 when every cell ran, 2 for an unknown
    chapter or no book here (the message names the chapters), 1 when the chapter failed."""
    parser = argparse.ArgumentParser(
        prog="normlimits chapter",
        description="Execute one chapter of the book with the current settings (NORMLIMITS_MODEL, "
                    "NORMLIMITS_WINDOWS, ... from the environment) and keep the executed notebook "
                    "and its figures' data (CSV).")
    parser.add_argument("name", help="the chapter, e.g. vanishing (book/vanishing.md)")
    parser.add_argument("--output", type=Path, default=None,
                        help=f"folder for the executed notebook and the figures' data (default: "
                             f"{DEFAULT_FOLDER} under the book)")
    args = parser.parse_args(argv)
    root = book_root()
    if root is None:
        print("normlimits chapter: no book here (a folder with _config.yml and _toc.yml at or above "
              "the current folder); run it in the book's repository", file=sys.stderr)
        return 2
    names = chapter_names(root)
    if args.name not in names:
        print(f"normlimits chapter: unknown chapter {args.name!r}; the chapters are: {', '.join(names)}",
              file=sys.stderr)
        return 2
    from normlimits.book.chapter import settings_line
    from normlimits.book.replicas import ReplicaError, chapter_source, execute_chapter

    target = (args.output or root / DEFAULT_FOLDER) / f"{args.name}.ipynb"
    print(f"Executing book/{args.name}.md. {settings_line()}", flush=True)
    try:
        seconds = execute_chapter(chapter_source(args.name, root), {}, save_to=target)
    except ReplicaError as exc:
        print(f"normlimits chapter: {exc}", file=sys.stderr)
        return 1
    files = write_figure_data(target, args.name)
    print(f"Executed in {seconds:.0f} s. Notebook: {target}")
    print(f"Figure data ({len(files)} files): " + (", ".join(p.name for p in files) or "none")
          + f", in {target.parent}")
    return 0
