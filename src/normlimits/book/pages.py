"""The book's pages as files: the table of contents in reading order, and which pages are notebooks.

A page is a notebook (executed at build time, opened as a notebook in JupyterLab) when its MyST
source starts with jupytext front matter that names a kernel.
"""

from __future__ import annotations

import re
from pathlib import Path

import yaml

_FRONT_MATTER = re.compile(r"---\n(.*?)\n---", re.S)


def toc_files(toc: dict) -> list[str]:
    """Every ``file:`` entry of a jb-book table of contents (``root`` first), in reading order."""
    found: list[str] = [toc["root"]]

    def walk(node):
        if isinstance(node, dict):
            if "file" in node:
                found.append(node["file"])
            for key in ("parts", "chapters", "sections"):
                for child in node.get(key) or ():
                    walk(child)

    walk(toc)
    return found


def is_notebook(source: Path | None) -> bool:
    """Whether a MyST source is a notebook (jupytext front matter with a kernelspec)."""
    if source is None or not source.is_file():
        return False
    head = _FRONT_MATTER.match(source.read_text()[:2000])
    return bool(head and "kernelspec" in head.group(1))


def notebook_pages(root: Path) -> list[Path]:
    """The MyST sources of the book at ``root`` that are notebooks, in reading order."""
    toc = yaml.safe_load((root / "_toc.yml").read_text())
    return [path for name in toc_files(toc) if is_notebook(path := root / f"{name}.md")]
