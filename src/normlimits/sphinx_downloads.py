"""Sphinx extension: offer every executed chapter as a downloadable ``.ipynb``.

sphinx-book-theme copies the executed notebook next to the page's sources, and shows its
``.ipynb`` download button, only when an online launch provider (Binder, JupyterHub, ...) is
configured. This book has none (it is read offline), so this hook does the copy itself and sets
the theme's ``ipynb_source`` before the header buttons are built.
"""

from __future__ import annotations

import shutil
from pathlib import Path


def _offer_executed_notebook(app, pagename, templatename, context, doctree):
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(executed, target)
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app):
    app.connect("html-page-context", _offer_executed_notebook, priority=100)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
