"""Sphinx extension: offer every executed chapter as a downloadable ``.ipynb``.

sphinx-book-theme copies the executed notebook next to the page's sources, and shows its
``.ipynb`` download button, only when an online launch provider (Binder, JupyterHub, ...) is
configured. This book has none (it is read offline), so this hook does the copy itself and sets
the theme's ``ipynb_source`` before the header buttons are built. The notebook offered matches
the page: stderr streams, which the page removes (``output_stderr: remove``), are dropped from
it too (they carry warnings with the building machine's paths).
"""

from __future__ import annotations

import json
from pathlib import Path


def without_stderr(notebook: dict) -> dict:
    """The notebook with every stderr stream output removed (in place; returned for chaining)."""
    for cell in notebook.get("cells", []):
        if "outputs" in cell:
            cell["outputs"] = [o for o in cell["outputs"]
                               if not (o.get("output_type") == "stream" and o.get("name") == "stderr")]
    return notebook


def _offer_executed_notebook(app, pagename, templatename, context, doctree):
    executed = Path(app.outdir).parent / "jupyter_execute" / f"{pagename}.ipynb"
    if not executed.is_file():
        return
    target = Path(app.outdir) / "_sources" / f"{pagename}.ipynb"
    target.parent.mkdir(parents=True, exist_ok=True)
    notebook = without_stderr(json.loads(executed.read_text(encoding="utf-8")))
    target.write_text(json.dumps(notebook, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    context["ipynb_source"] = f"{pagename}.ipynb"


def setup(app):
    app.connect("html-page-context", _offer_executed_notebook, priority=100)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
