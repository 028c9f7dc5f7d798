"""Sphinx extension: what a reader can take away from the site, and how to run it.

* **The executed notebook of every chapter.** sphinx-book-theme copies the executed notebook next
  to the page's sources, and shows its ``.ipynb`` download button, only when an online launch
  provider (Binder, JupyterHub, ...) is configured. This book is read offline too, so this hook does
  the copy itself and sets the theme's ``ipynb_source`` before the header buttons are built. The
  notebook offered matches the page: stderr streams, which the page removes (``output_stderr:
  remove``), are dropped from it too (they carry warnings with the building machine's paths). Its
  first cell, added here, says how to install the package it imports (:func:`install_note`).
* **The package itself**, as a source archive next to the pages (:data:`ARCHIVE`, written at the
  end of the build: ``pyproject.toml``, ``README.md``, ``requirements.lock`` and
  ``src/normlimits``), which ``pip install`` takes as it is; ``{book-downloads}`` links to it and to
  the claims ledger from a page (the landing page).
"""

from __future__ import annotations

import html
import io
import json
import posixpath
import tarfile
from pathlib import Path

from docutils import nodes
from sphinx.util.docutils import SphinxDirective
from normlimits.book.sphinx_ledger import LEDGER_FILE
from normlimits.core.cache import atomic_write_bytes

#: the package's source archive, at the site's root
ARCHIVE = "normlimits-src.tar.gz"
#: what the archive holds, relative to the repository's root
ARCHIVE_FILES = ("pyproject.toml", "README.md", "requirements.lock", "requirements-nodeps.txt", "src/normlimits")
#: the tag of the first cell of a downloaded notebook
INSTALL_TAG = "install-normlimits"


def without_stderr(notebook: dict) -> dict:
    """The notebook with every stderr stream output removed (in place; returned for chaining)."""
    for cell in notebook.get("cells", []):
        if "outputs" in cell:
            cell["outputs"] = [o for o in cell["outputs"]
                               if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    return notebook


def install_note(repository_url: str = "", branch: str = "main") -> str:
    """The Markdown of a downloaded notebook's first cell: what it imports and how to install it
    (from the repository when the site names one; always from the archive the site offers)."""
    lines = ["**Before you run this notebook.** It imports `normlimits`, the Python package of the "
             "book *Limits of normalisation in attention, re-derived* (Python 3.11). Install it "
             "first, in the environment of this notebook's kernel:", ""]
    if repository_url:
        url = repository_url.rstrip("/")
        lines += [f'- from its repository: `pip install "normlimits @ git+{url}@{branch}"`;']
    lines += [f"- from the site: download `{ARCHIVE}` (linked on the book's first page), then "
              f"`pip install {ARCHIVE}`;",
              "- or, in a clone of the book's repository, `make install` (the pinned environment of "
              "the book).", "",
              "The settings (model, corpus, number of windows) are environment variables "
              "`NORMLIMITS_*`, described in the README; offline, point `NORMLIMITS_CORPUS` at a "
              "copy of the text."]
    return "\n".join(lines)


def with_install_note(notebook: dict, note: str) -> dict:
    """The notebook with ``note`` as its first cell (a Markdown cell tagged
    :data:`INSTALL_TAG`; an earlier such cell is replaced). In place; returned for chaining."""
    cells = [c for c in notebook.get("cells", []) if INSTALL_TAG not in c.get("metadata", {}).get("tags", [])]
    cell = {"cell_type": "markdown", "id": INSTALL_TAG, "metadata": {"tags": [INSTALL_TAG]}, "source": note}
    notebook["cells"] = [cell, *cells]
    return notebook


def _repository(app) -> tuple[str, str]:
    options = app.config.html_theme_options or {}
    return (options.get("repository_url") or "").strip(), options.get("repository_branch") or "main"


def _offer_executed_notebook(app, pagename, templatename, context, doctree):
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    notebook = without_stderr(json.loads(executed.read_text(encoding="utf-8")))
    with_install_note(notebook, install_note(*_repository(app)))
    target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    context["ipynb_source"] = f"{pagename}.ipynb"


def write_archive(root: Path, target: Path) -> Path:
    """Write the package's source archive (:data:`ARCHIVE_FILES` under ``root``) to ``target``,
    atomically; caches and compiled files are left out. Returns ``target``."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as archive:
        for name in ARCHIVE_FILES:
            path = root / name
            if not path.exists():
                continue
            files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
            for file in files:
                if "__pycache__" in file.parts or file.suffix in (".pyc", ".pyo"):
                    continue
                info = archive.gettarinfo(str(file), arcname=f"normlimits/{file.relative_to(root).as_posix()}")
                info.uid = info.gid = 0
                info.uname = info.gname = ""
                info.mtime = 0
                with file.open("rb") as handle:
                    archive.addfile(info, handle)
    atomic_write_bytes(target, buffer.getvalue())
    return target


def _write_archive(app, exception):
    if exception is None and app.builder.format == "html":
        write_archive(Path(app.confdir), Path(app.outdir) / ARCHIVE)


class BookDownloadsDirective(SphinxDirective):
    """``{book-downloads}``: links to the package's archive and the claims ledger."""

    def run(self):
        return [downloads_placeholder()]


class downloads_placeholder(nodes.General, nodes.Element):
    """Replaced by the links once the page's place in the site is known."""


def _resolve(app, doctree, fromdocname):
    page = app.builder.get_target_uri(fromdocname).split("#")[0]
    here = posixpath.dirname(page) or "."
    for node in list(doctree.findall(downloads_placeholder)):
        archive = html.escape(posixpath.relpath(ARCHIVE, here))
        ledger = html.escape(posixpath.relpath(LEDGER_FILE, here))
        text = (f'<p class="book-downloads">To take away: the book\'s package, <a href="{archive}" '
                f'download>{ARCHIVE}</a> (<code>pip install {ARCHIVE}</code>; the chapters\' '
                f"notebooks, offered on each chapter, import it), and every graded claim with its "
                f'rule and values, <a href="{ledger}" download>{LEDGER_FILE}</a>.</p>')
        node.replace_self(nodes.raw("", text, format="html"))


def setup(app):
    app.add_node(downloads_placeholder)
    app.add_directive("book-downloads", BookDownloadsDirective)
    app.connect("doctree-resolved", _resolve)
    app.connect("html-page-context", _offer_executed_notebook, priority=100)
    app.connect("build-finished", _write_archive)
    return {"version": "2", "parallel_read_safe": True, "parallel_write_safe": True}
