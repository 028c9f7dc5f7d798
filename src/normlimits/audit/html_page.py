"""Self-contained HTML pages: one file, no external asset, readable offline and without scripts.

Used by ``normlimits audit``'s ``report.html`` (:mod:`normlimits.audit.report`) and by
``normlimits compare``'s ``compare.html`` (:mod:`normlimits.audit.compare`). Styles are inline, figures
are inline SVG (:func:`normlimits.audit.figure_files.inline_svg`), and mathematics is plain Unicode text
(the rows' ``*_text`` fields, :func:`normlimits.claims.plain_text`), so nothing is fetched from a
CDN. Numbers are shown by :func:`number` (four significant digits) and, where a row or criterion
carries an ``interval`` ([low, high]), ``n`` and a resampling ``unit``, by :func:`value_text`.
"""

from __future__ import annotations

import html
from typing import Iterable, Mapping, Sequence

from normlimits.core.markup import RANGE_BELOW

__all__ = ["CSS", "esc", "number", "value_text", "table", "page", "definition_list"]

CSS = """
body { font-family: "DejaVu Sans", Helvetica, Arial, sans-serif; max-width: 1100px;
       margin: 2em auto; padding: 0 1em; color: #1d1d1d; line-height: 1.45; }
h1 { font-size: 1.6em; } h2 { font-size: 1.25em; margin-top: 1.8em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 1em 0; font-size: 0.92em; width: 100%; }
th, td { border: 1px solid #ccc; padding: 0.3em 0.5em; vertical-align: top; text-align: left; }
th { background: #f2f2f2; }
td.number { font-family: "DejaVu Sans Mono", monospace; white-space: nowrap; }
code, .hash { font-family: "DejaVu Sans Mono", monospace; font-size: 0.9em; word-break: break-all; }
.verdict { font-weight: bold; white-space: nowrap; }
.verdict-confirmed { color: #1a7f37; } .verdict-corrected { color: #9a6700; }
.verdict-refuted { color: #cf222e; } .verdict-not-reproduced { color: #bc4c00; } .verdict-inconclusive { color: #6e7781; }
.verdict-not-testable { color: #57606a; }
tr.differs td { background: #fff4e5; }
.honesty { border-left: 4px solid #bc4c00; background: #fff8f0; padding: 0.6em 1em; }
figure { margin: 1.5em 0; } figure svg { max-width: 100%; height: auto; }
figcaption { font-size: 0.9em; color: #444; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: 0.2em 1em; }
dt { font-weight: bold; } dd { margin: 0; }
details summary { cursor: pointer; color: #0969da; }
"""


def esc(value) -> str:
    """``value`` as HTML-escaped text (None as an empty string)."""
    return "" if value is None else html.escape(str(value))


def number(value) -> str:
    """A number as shown in reports: four significant digits, ``n/a`` for a missing value."""
    return "n/a" if value is None else f"{value:.4g}"


def value_text(item: Mapping) -> str:
    """``item["value"]`` as text, with its interval (``[low, high]``) and its ``n`` and resampling
    ``unit`` when the item has them (a row or a criterion); an interval over fewer than
    :data:`~normlimits.core.markup.RANGE_BELOW` units is marked a range."""
    text = number(item.get("value"))
    interval = item.get("interval")
    if interval is not None:
        low, high = interval
        text += f" [{number(low)}, {number(high)}]"
    if item.get("n") is not None:
        few = interval is not None and item["n"] < RANGE_BELOW      # a range, not a 95% interval
        text += (f" ({'range: ' if few else ''}n = {item['n']}"
                 + (f", resampled by {item['unit']}" if item.get("unit") else "") + ")")
    return text


def table(header: Sequence[str], rows: Iterable[Sequence[str]], *, row_attrs: Iterable[str] | None = None,
          cls: str = "") -> str:
    """An HTML table: ``header`` (plain text, escaped here) and ``rows`` of cells that are already
    HTML; ``row_attrs`` (optional) gives each ``<tr>`` its attributes (HTML)."""
    head = "".join(f"<th>{esc(h)}</th>" for h in header)
    rows = list(rows)
    attrs = list(row_attrs) if row_attrs is not None else [""] * len(rows)
    body = "".join(f"<tr{(' ' + a) if a else ''}>" + "".join(f"<td>{c}</td>" for c in row) + "</tr>"
                   for row, a in zip(rows, attrs))
    cls_attr = f' class="{esc(cls)}"' if cls else ""
    return f"<table{cls_attr}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def definition_list(items: Iterable[tuple[str, str]], cls: str = "") -> str:
    """A ``<dl>`` of (term, HTML description) pairs."""
    body = "".join(f"<dt>{esc(term)}</dt><dd>{desc}</dd>" for term, desc in items)
    return f'<dl class="{esc(cls)}">{body}</dl>' if cls else f"<dl>{body}</dl>"


def page(title: str, body: str) -> str:
    """A whole HTML document: ``title`` (plain text) and ``body`` (HTML), styles inline."""
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{CSS}</style></head>\n<body>\n{body}\n</body></html>\n")
