"""Where things are: the repository checkout the package runs from, the book a chapter runs in, and
text with the building machine's folders hidden. The one place the package finds either root."""

from __future__ import annotations

import os
import re
from pathlib import Path

from normlimits.core.settings import CACHE_ENV


def checkout_root() -> Path | None:
    """The repository checkout this package runs from (the folder holding ``pyproject.toml`` two
    levels above the package, as in ``src/normlimits``), or None for an installed copy. The
    development tools (bench output, planted faults) find the repository here; chapters find the
    book from their working folder instead (:func:`normlimits.core.paths.book_root`)."""
    root = Path(__file__).resolve().parents[3]    # src/normlimits/core/paths.py
    return root if (root / "pyproject.toml").is_file() else None


def book_root(start: Path | None = None) -> Path | None:
    """The nearest folder at or above ``start`` (default: cwd) holding the book's ``_config.yml``."""
    here = (start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "_config.yml").is_file() and (folder / "_toc.yml").is_file():
            return folder
    return None


def public_text(text: str) -> str:
    """``text`` with the building machine's folders hidden: a cache folder set by
    ``NORMLIMITS_CACHE`` becomes ``$NORMLIMITS_CACHE``, the repository's folder (the book root, or
    the current folder) ``.``, the home folder ``~``."""
    root = book_root() or Path.cwd()
    folders = [(root.resolve(), "."), (Path.home().resolve(), "~")]
    if os.environ.get(CACHE_ENV, "").strip():
        folders.insert(0, (Path(os.environ[CACHE_ENV]).expanduser().resolve(), f"${CACHE_ENV}"))
    for folder, name in folders:
        text = re.sub(re.escape(str(folder)) + r"(?=/|\b|$)", name, text)
    return text
