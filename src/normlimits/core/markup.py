"""Markup that cannot break: numbers with significant digits, and text with ``$math$`` as HTML.

The book's tables of criteria and verdicts hold statistics written in MyST with inline math
(``$|\\tilde d - \\mathbb E\\tilde d|$``, ``$N^*_\\tau$``). Put into a Markdown table, a ``|``
inside the math splits the row and a ``*`` or ``_`` turns into emphasis. So those tables are
written as HTML from data: :func:`inline_html` escapes the text and hands each ``$...$`` span to
MathJax untouched (as Sphinx writes inline math, ``<span class="math">\\(...\\)</span>``), and
:func:`html_table` lays the cells out with one ``data-label`` per cell (the column's title), which
the narrow-screen stylesheet shows beside each value.

:func:`significant` formats a number with significant digits, so a small value never prints as
``0.000``. :func:`with_interval` writes a value with its interval and, given the number of units
the interval rests on, that count beside it: ``0.833 [0.333, 1.00] (8 windows)``; below
:data:`RANGE_BELOW` units it names the interval a range (``(range over 3 windows)``), not a 95%
interval (:func:`count_words`).
"""

from __future__ import annotations

import html
import math
import re
from typing import Sequence

__all__ = ["RANGE_BELOW", "significant", "inline_html", "html_table", "count_words", "units_of",
           "with_interval"]

#: below this many resampled units a percentile bootstrap interval is called a range, not a 95%
#: interval: n units give only C(2n - 1, n) distinct resamples (3 for 2 windows, 10 for 3, 35 for
#: 4), so the percentile interval is little more than the spread of the units' own values, and its
#: coverage falls short of its nominal level
RANGE_BELOW = 5

# $...$ (not \$), `code`, **bold**, *emphasis*; math first, so nothing inside it is touched
_TOKENS = re.compile(r"(?<!\\)\$(?P<math>[^$]+)\$|`(?P<code>[^`]+)`|\*\*(?P<bold>[^*]+)\*\*"
                     r"|(?<![\w*])\*(?P<em>[^*\s][^*]*)\*(?![\w*])")


def significant(value, digits: int = 3) -> str:
    """``value`` with ``digits`` significant digits, in plain notation where that stays short.

    Integers print whole (``1024``); ``None`` and NaN print ``n/a``; numbers from ``1e-4`` up to
    ``10**digits`` print with as many decimals as the digits need (``0.000314`` ->
    ``0.000314``, ``0.5`` -> ``0.500``, ``12.345`` -> ``12.3``); larger ones print as the whole
    number with thousands separators (``123456.7`` -> ``123,457``); smaller ones in scientific
    notation (``3.14e-05``).
    """
    if digits < 1:
        raise ValueError(f"digits must be >= 1 (got {digits})")
    if value is None:
        return "n/a"
    if isinstance(value, bool):
        raise TypeError("significant() formats numbers, not booleans")
    if isinstance(value, int):
        return f"{value:,}" if abs(value) >= 10_000 else str(value)
    x = float(value)
    if math.isnan(x):
        return "n/a"
    if math.isinf(x):
        return "∞" if x > 0 else "−∞"
    if x == 0:
        return "0"
    magnitude = math.floor(math.log10(abs(x)))
    rounded = float(f"{x:.{digits - 1}e}")           # the magnitude may change by rounding
    if rounded != 0:
        magnitude = math.floor(math.log10(abs(rounded)))
    if magnitude >= digits:
        return f"{x:,.0f}"
    if magnitude >= -4:
        return f"{rounded:.{max(digits - 1 - magnitude, 0)}f}"
    return f"{x:.{digits - 1}e}"


def count_words(n: int, unit: str = "window") -> str:
    """How many units an interval rests on, as shown beside it: ``8 windows``, ``1 seed``; below
    :data:`RANGE_BELOW` units, ``range over 3 windows`` (too few for a 95% interval)."""
    if isinstance(n, bool) or int(n) != n or n < 1:
        raise ValueError(f"an interval rests on a whole number of units >= 1 (got {n!r})")
    n = int(n)
    text = f"{n} {unit}{'' if n == 1 else 's'}"
    return f"range over {text}" if n < RANGE_BELOW else text


def units_of(row) -> dict:
    """``{"n": ..., "unit": ...}`` of the ``resampling`` block a ledger row's intervals rest on,
    the keywords :func:`with_interval` takes; ``{}`` for a row without one."""
    how = row.get("resampling") or {}
    return {"n": how["n"], "unit": how.get("unit", "window")} if how.get("n") is not None else {}


def with_interval(value, interval=None, digits: int = 3, *, n: int | None = None,
                  unit: str = "window") -> str:
    """``value [low, high]`` when an interval is given (a pair), else the value alone; with ``n``
    (the units the interval rests on, of kind ``unit``) the count beside it,
    ``value [low, high] (8 windows)`` or, below :data:`RANGE_BELOW`, ``(range over 3 windows)``."""
    text = significant(value, digits)
    if interval is None:
        return text
    low, high = interval
    text = f"{text} [{significant(low, digits)}, {significant(high, digits)}]"
    return text if n is None else f"{text} ({count_words(n, unit)})"


def inline_html(text: str) -> str:
    """MyST-like text as safe HTML: ``$math$`` becomes a MathJax span with its TeX intact (``|``,
    ``*``, ``_`` and ``<`` inside it included), ```code``` a ``<code>``, ``**bold**`` and
    ``*emphasis*`` their tags; everything else is escaped (``\\$`` gives a dollar sign)."""
    out: list[str] = []
    pos = 0
    for match in _TOKENS.finditer(text):
        out.append(html.escape(text[pos:match.start()].replace("\\$", "$")))
        if match.group("math") is not None:
            out.append('<span class="math notranslate nohighlight">\\('
                       + html.escape(match.group("math")) + "\\)</span>")
        elif match.group("code") is not None:
            out.append(f'<code class="docutils literal notranslate">{html.escape(match.group("code"))}</code>')
        elif match.group("bold") is not None:
            out.append(f"<strong>{inline_html(match.group('bold'))}</strong>")
        else:
            out.append(f"<em>{inline_html(match.group('em'))}</em>")
        pos = match.end()
    out.append(html.escape(text[pos:].replace("\\$", "$")))
    return "".join(out)


def html_table(header: Sequence[str], rows: Sequence[Sequence[str]], *, classes: Sequence[str] = (),
               header_html: bool = False, column_classes: Sequence[str] | None = None) -> str:
    """An HTML table from cells that are already HTML (``rows``) under plain-text titles
    (``header``; HTML if ``header_html``). Every row must have one cell per title; each cell
    carries its column's title as ``data-label`` (the narrow-screen layout shows it), and the
    table its column count as ``data-columns``. ``column_classes``: a class per column for its
    title cell ('' for none)."""
    width = len(header)
    for i, row in enumerate(rows):
        if len(row) != width:
            raise ValueError(f"row {i} has {len(row)} cells, the header {width}")
    if column_classes is not None and len(column_classes) != width:
        raise ValueError(f"{len(column_classes)} column classes for {width} columns")
    labels = [re.sub(r"<[^>]+>", "", h) if header_html else h for h in header]
    kinds = [f' class="{html.escape(c, quote=True)}"' if c else "" for c in (column_classes or [""] * width)]
    head = "".join(f"<th{k}>{h if header_html else html.escape(h)}</th>" for k, h in zip(kinds, header))
    body = "".join("<tr>" + "".join(f'<td data-label="{html.escape(label, quote=True)}">{cell}</td>'
                                    for label, cell in zip(labels, row)) + "</tr>" for row in rows)
    names = " ".join(["docutils", *classes])
    return (f'<table class="{html.escape(names, quote=True)}" data-columns="{width}">'
            f"<thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
