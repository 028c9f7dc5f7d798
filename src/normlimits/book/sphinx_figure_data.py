"""Sphinx extension: under every figure, the data it draws as a CSV file, and the one command that
draws it again.

Each figure a chapter shows or glues carries its data in the executed notebook
(:mod:`normlimits.core.figure_data`); myst-nb writes the executed notebooks to
``<build>/jupyter_execute/<docname>.ipynb`` and names each figure's image file by the sha256 of
its PNG bytes. When a page is written (HTML builders only), every image whose file name is such a
hash with data (:mod:`normlimits.book.figure_data_files`, over every executed notebook of the
build and its glued outputs, ``<docname>.glue.json``, so the single-page build finds them too) gets, under its figure, the line
"Data: <name>.csv (N rows) · Reproduce: ``python -m normlimits chapter <chapter>``". The CSV is
written to ``_figure_data/<docname>/<name>.csv`` in the output, ``<name>`` the figure's label
(``vanishing-slack``: its cell's ``mystnb: figure: name``, or the ``:name:`` of the
``glue:figure`` pasting it), else ``<chapter>-figure-<k>`` (its place among the page's figures
with data), as :mod:`normlimits.book.chapter_command` names the same files.

The line is HTML with class :data:`LINE_CLASS`; the link has the ``download`` attribute.

myst-nb, while it reads a page, warns about every MIME type it cannot render, the figures' data
among them, though no page shows it; the book suppresses that warning (``suppress_warnings:
mystnb.unknown_mime_type`` in ``_config.yml``).
"""

from __future__ import annotations

import html
import json
import posixpath
from pathlib import Path

from docutils import nodes

from normlimits.book.figure_data_files import FigureData, file_stem, notebook_figures
from normlimits.core.cache import atomic_write_bytes
from normlimits.core.settings import MODEL_ENV

#: the output's folder of the figures' CSV files
DATA_FOLDER = "_figure_data"
#: the class of the line under a figure
LINE_CLASS = "figure-data"
#: the attribute on the Sphinx application caching the build's figures
_CACHE = "_normlimits_figure_data"


def chapter_command(chapter: str) -> str:
    """The command that executes ``chapter`` again (:mod:`normlimits.book.chapter_command`)."""
    return f"python -m normlimits chapter {chapter}"


def data_line(href: str | None, filename: str, figure: FigureData, chapter: str) -> str:
    """The HTML line under a figure: its data's download link (``href``; None where a table too
    large for the notebook is no longer in the cache folder) and the command that reproduces it."""
    if href is not None:
        data = (f'Data: <a class="reference download" href="{html.escape(href)}" '
                f'download="{html.escape(filename)}"><code>{html.escape(filename)}</code></a> '
                f"({figure.rows:,} rows)")
    else:
        data = f"Data: {figure.rows:,} rows, not in this build (too large for the notebook, and " \
               "no longer in the cache folder)"
    return (f'<p class="{LINE_CLASS}">{data} · Reproduce: <code>{html.escape(chapter_command(chapter))}'
            f"</code> (settings such as {MODEL_ENV} from the environment)</p>")


def build_figures(outdir: Path) -> dict[str, tuple[str, FigureData]]:
    """Every figure with data in the build whose HTML goes to ``outdir``: the sha256 of its PNG
    -> (the docname of the notebook that drew it, its data)."""
    folder = Path(outdir).parent / "jupyter_execute"
    found: dict[str, tuple[str, FigureData]] = {}
    for path in sorted(folder.rglob("*.ipynb")) if folder.is_dir() else ():
        docname = path.relative_to(folder).with_suffix("").as_posix()
        glued = path.with_name(f"{path.stem}.glue.json")
        figures = notebook_figures(json.loads(path.read_text(encoding="utf-8")),
                                   json.loads(glued.read_text(encoding="utf-8")) if glued.is_file() else None)
        for digest, figure in figures.items():
            found.setdefault(digest, (docname, figure))
    return found


def _figure_of(image: nodes.image) -> nodes.figure | None:
    parent = image.parent
    while parent is not None and not isinstance(parent, nodes.figure):
        parent = parent.parent
    return parent


def add_figure_data(app, doctree, docname) -> int:
    """``doctree-resolved`` handler: write each figure's CSV and add its line (HTML builders
    only); returns how many figures got one."""
    from sphinx.util.osutil import relative_uri

    if getattr(app.builder, "format", None) != "html":
        return 0
    if getattr(app, _CACHE, None) is None:
        setattr(app, _CACHE, build_figures(Path(app.outdir)))
    figures = getattr(app, _CACHE)
    page = app.builder.get_target_uri(docname)
    count = 0
    for image in list(doctree.findall(nodes.image)):
        digest = posixpath.splitext(posixpath.basename(image.get("uri", "")))[0]
        if digest not in figures:
            continue
        source, figure = figures[digest]
        chapter = posixpath.basename(source)
        figure_node = _figure_of(image)
        names = figure_node.get("names", []) if figure_node is not None else []
        label = figure.label or (names[0] if names else "")
        name = f"{file_stem(label, chapter, count + 1)}.csv"
        href = None
        if figure.csv is not None:
            target = f"{DATA_FOLDER}/{docname}/{name}"
            atomic_write_bytes(Path(app.outdir) / target, figure.csv)
            href = relative_uri(page, target)
        line = nodes.raw("", data_line(href, name, figure, chapter), format="html")
        if figure_node is not None:
            figure_node.append(line)
        else:
            anchor = image.parent if isinstance(image.parent, nodes.reference) else image
            anchor.parent.insert(anchor.parent.index(anchor) + 1, line)
        count += 1
    return count


def setup(app):
    app.connect("doctree-resolved", add_figure_data)
    return {"version": "1", "parallel_read_safe": True, "parallel_write_safe": True}
