"""Sphinx extension: the site serves ``plotly.min.js`` itself, to the pages that draw with it.

A chapter's interactive figure (:class:`normlimits.core.interactive.InteractiveFigure`) reaches the
page as a box and the figure's JSON; it is drawn by ``window.Plotly``. This extension

- adds ``_static/plotly.min.js`` (loaded deferred) to every page whose body holds such a box, and
  to no other page (the file is about 4.8 MB);
- copies the file from the installed plotly wheel into the site's ``_static`` folder when an
  HTML build ends, so the site works from ``file://`` with no network, as MathJax does. It is
  copied whatever pages were rewritten: an incremental build that rewrites no chapter keeps a
  complete site, and no state has to survive between the page-writing processes.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from normlimits.core.interactive import BOX_CLASS, PLOTLY_SCRIPT, plotly_script

#: the marker of an interactive figure in a page's HTML body
_MARKER = f'class="{BOX_CLASS}"'


def page_draws_interactively(body: str) -> bool:
    """Whether a page's HTML body holds an interactive figure's box."""
    return _MARKER in body


def add_plotly_to_page(app, pagename, templatename, context, doctree):
    """``html-page-context``: load ``plotly.min.js`` on this page if it draws an interactive figure."""
    if page_draws_interactively(context.get("body", "")):
        app.add_js_file(PLOTLY_SCRIPT, loading_method="defer")


def copy_plotly(app, exception):
    """``build-finished``: copy ``plotly.min.js`` into the HTML site's ``_static`` (atomically)."""
    if exception is not None or getattr(app.builder, "format", None) != "html":
        return
    target = Path(app.outdir) / "_static" / PLOTLY_SCRIPT
    source = plotly_script()
    if target.is_file() and target.stat().st_size == source.stat().st_size:
        return
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(target.name + ".partial")
    shutil.copyfile(source, partial)
    partial.replace(target)


def setup(app):
    app.connect("html-page-context", add_plotly_to_page)
    app.connect("build-finished", copy_plotly)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
