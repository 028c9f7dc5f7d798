"""Colab notebooks of the chapters: what the site's Colab buttons open.

Colab opens ``.ipynb`` files from a GitHub repository, not MyST Markdown, and starts without this
package. ``python -m normlimits.book.colab [OUT]`` (``make colab``) therefore writes, for every notebook
page of the table of contents, ``OUT/<page>.ipynb`` (default ``_build/colab``): the chapter as
jupytext reads it, unexecuted, with one cell in front that installs the book from the repository
named by ``repository.url`` in ``_config.yml``. The publishing workflow pushes ``OUT`` to the
repository's ``colab`` branch, where :func:`normlimits.book.sphinx_publish.colab_url` points. With the
setting empty there are no Colab buttons, and nothing is written.
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

from normlimits.book.pages import notebook_pages
from normlimits.book.sphinx_publish import github_parts

DEFAULT_OUT = Path("_build/colab")
TAG = "colab-install"


def install_source(url: str, branch: str) -> str:
    """The cell that installs the book (its pinned requirements and the package) in Colab."""
    owner, repo = github_parts(url)
    return (f"# Colab starts without this book's package: install it from {owner}/{repo}@{branch}.\n"
            f'%pip install --quiet "normlimits @ git+https://github.com/{owner}/{repo}@{branch}"')


def write_notebooks(root: Path, out: Path) -> list[Path]:
    """Write one Colab notebook per notebook page of the book at ``root``; returns their paths."""
    import jupytext
    from nbformat.v4 import new_code_cell

    config = yaml.safe_load((root / "_config.yml").read_text()) or {}
    repository = config.get("repository") or {}
    url = (repository.get("url") or "").strip()
    if not url:
        return []
    install = install_source(url, repository.get("branch") or "main")
    written = []
    for source in notebook_pages(root):
        notebook = jupytext.read(source)
        notebook.cells.insert(0, new_code_cell(install, metadata={"tags": [TAG]}))
        target = out / source.relative_to(root).with_suffix(".ipynb")
        target.parent.mkdir(parents=True, exist_ok=True)
        jupytext.write(notebook, target, fmt="ipynb")
        written.append(target)
    return written


def main(argv: list[str]) -> int:
    out = Path(argv[0]) if argv else DEFAULT_OUT
    written = write_notebooks(Path.cwd(), out)
    if not written:
        print("repository.url in _config.yml is empty: the site has no Colab buttons, so no Colab "
              "notebooks were written.")
    else:
        print(f"Colab notebooks: {len(written)} in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
