"""A matplotlib figure as files: PNG for screens, SVG and PDF for papers, and SVG inline in HTML.

:func:`render` writes the same figure in the three formats, reproducibly: no creation date in the
SVG and PDF metadata and a fixed salt for the SVG's element ids, so the same figure gives the same
bytes (the output folder's manifest then changes only when a figure does). SVG text stays text
(``svg.fonttype: none``): it is searchable and selectable, in a file and inline in a page. PDF
fonts are embedded as TrueType (``pdf.fonttype: 42``), which journals accept.

:func:`inline_svg` turns an SVG file's bytes into markup for an HTML page that holds several
figures: the XML prolog dropped, every element id and every reference to one prefixed with the
figure's name (matplotlib numbers ids per figure, so two inline figures would otherwise share
clip paths and markers), and an accessible title.
"""

from __future__ import annotations

import html
import io
import re

__all__ = ["FORMATS", "render", "inline_svg"]

#: the formats :func:`render` writes, in the order they are listed
FORMATS = ("png", "svg", "pdf")
_RC = {"svg.fonttype": "none", "svg.hashsalt": "normlimits", "pdf.fonttype": 42}
_METADATA = {"svg": {"Date": None}, "pdf": {"CreationDate": None, "ModDate": None}, "png": {}}


def render(fig, dpi: int = 110, close: bool = True) -> dict[str, bytes]:
    """``fig`` as ``{"png": bytes, "svg": bytes, "pdf": bytes}`` (PNG at ``dpi``); closes the
    figure unless ``close`` is False."""
    import matplotlib
    import matplotlib.pyplot as plt

    out = {}
    with matplotlib.rc_context(_RC):
        for kind in FORMATS:
            buffer = io.BytesIO()
            fig.savefig(buffer, format=kind, dpi=dpi, metadata=_METADATA[kind])
            out[kind] = buffer.getvalue()
    if close:
        plt.close(fig)
    return out


_PROLOG = re.compile(r"^\s*(<\?xml[^>]*\?>\s*)?(<!DOCTYPE[^>]*>\s*)?(<!--.*?-->\s*)*", re.S)


def inline_svg(svg: bytes | str, name: str, title: str = "") -> str:
    """The SVG ``svg`` as markup to place in an HTML page: ids prefixed with ``name`` (letters,
    digits, ``-`` and ``_``), ``role="img"``, ``data-figure="name"`` and a ``<title>`` (default:
    the name)."""
    if not re.fullmatch(r"[A-Za-z][A-Za-z0-9_-]*", name):
        raise ValueError(f"figure name {name!r}: use letters, digits, '-' and '_', starting with a letter")
    text = svg.decode("utf-8") if isinstance(svg, bytes) else svg
    text = _PROLOG.sub("", text, count=1)
    if not text.startswith("<svg"):
        raise ValueError(f"figure {name!r} is not an SVG document (it starts {text[:40]!r})")
    text = re.sub(r'\bid="([^"]+)"', rf'id="{name}-\1"', text)
    text = re.sub(r'href="#([^"]+)"', rf'href="#{name}-\1"', text)
    text = re.sub(r"url\(#([^)]+)\)", rf"url(#{name}-\1)", text)
    label = html.escape(title or name)
    return re.sub(r"^<svg\b", f'<svg role="img" aria-label="{label}" data-figure="{name}"', text,
                  count=1).replace(">", f"><title>{label}</title>", 1)
