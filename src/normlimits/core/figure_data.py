"""The data behind a figure: exactly what a matplotlib figure draws, as one long table and a CSV.

:func:`figure_table` reads a figure's artists, panel by panel, into a long table (one row per
drawn point, bar or pixel) with the columns of :data:`COLUMNS`:

* ``panel``: the axes' index among the figure's panels (``fig.axes``, each followed by its
  inset axes, colour bars left out); ``title``: its title (or, untitled, its y label);
* ``series``: the artist's legend label, or ``"<kind> <k>"`` (its index among the panel's
  artists of that kind) when it has none; ``item``: the index of the point's path within the
  series (one segment of a line collection, one polygon of a band, a bar), else 0;
* ``kind``: ``line`` (``plot``), ``hline``/``vline`` (``axhline``/``axvline`` reference lines:
  one row, the other coordinate empty), ``scatter``, ``area`` (a band's polygon vertices, e.g.
  ``fill_between``), ``segments`` (``vlines``, error bars), ``bar``/``barh`` (centre and length
  of each bar), ``image`` (``imshow``: pixel centres) and ``mesh`` (``pcolormesh``, seaborn's
  heatmap: cell centres);
* ``x``, ``y``: the drawn coordinates in data units, float64 (unchanged objects, e.g. category
  names, where they are not numbers); ``value``: the colour-mapped value of a pixel, cell or
  scatter point, else empty.

Colour bars (their axes) draw a scale, not data, and are left out; so are text, legends and
grid lines. A figure's table round-trips exactly through its CSV (:func:`figure_csv`: float64
written at full precision).

In a Jupyter kernel, :func:`install` adds a display formatter for :data:`MIME`: every figure
displayed or glued then carries its data in the executed notebook, ``{"csv": text}`` up to
:data:`INLINE_LIMIT` bytes; a larger table is written to the cache folder under its sha256
(:func:`spilled_path`) and the notebook holds only ``{"sha256", "bytes", "rows"}``, so it does not
bloat the notebook. :mod:`normlimits.book.figure_data_files` reads it back.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

#: the table's columns, in order
COLUMNS = ("panel", "title", "series", "kind", "item", "x", "y", "value")
#: the MIME type of a figure's data in a notebook output (JSON: ``csv`` inline, or a reference)
MIME = "application/vnd.normlimits.figure-data+json"
#: the most CSV bytes kept inside a notebook; larger tables go to the cache folder. Measured on
#: 2026-12-06 with synthetic data: the per-head figure (vanishing_figures.per_head_figure) of a
#: 270-head model (SmolLM2-135M, 30 x 9), the largest the book draws, gives 0.39 MB (5,984 rows)
INLINE_LIMIT = 2 * 1024 * 1024
#: the cache folder's subfolder of spilled tables
SPILL_FOLDER = "figure-data"


def _numbers(values):
    """``values`` as a float64 array, or as an object array where they are not numbers."""
    import numpy as np

    array = np.ma.filled(np.ma.asarray(values, dtype=object), np.nan) if np.ma.isMaskedArray(values) \
        else np.asarray(values, dtype=object)
    try:
        return array.astype(float)
    except (TypeError, ValueError):
        return array


def _label(artist, kind: str, index: int) -> str:
    label = artist.get_label() if hasattr(artist, "get_label") else ""
    return label if label and not str(label).startswith("_") else f"{kind} {index}"


def _rows(x, y, value=None, item=None):
    """Columns ``x``, ``y``, ``value`` and ``item`` as equal-length 1-d arrays."""
    import numpy as np

    x, y = _numbers(np.ravel(x)), _numbers(np.ravel(y))
    n = len(x)
    value = np.full(n, np.nan) if value is None else _numbers(np.ravel(value))
    item = np.zeros(n, dtype=int) if item is None else np.ravel(item).astype(int)
    return {"x": x, "y": y, "value": value, "item": item}


def _line_rows(ax, line) -> tuple[str, dict]:
    """A ``Line2D``: a data line, or an ``axhline``/``axvline`` (one row, its constant)."""
    import numpy as np

    transform = line.get_transform()
    if transform is ax.get_yaxis_transform("grid"):
        return "hline", _rows([np.nan], [line.get_ydata()[0]])
    if transform is ax.get_xaxis_transform("grid"):
        return "vline", _rows([line.get_xdata()[0]], [np.nan])
    return "line", _rows(line.get_xdata(), line.get_ydata())


def _collection_rows(collection) -> tuple[str, dict] | None:
    """A scatter (offsets, mapped values), a band (polygon vertices), segments, or a mesh."""
    import numpy as np
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection, QuadMesh

    if isinstance(collection, QuadMesh):
        corners = np.asarray(collection.get_coordinates(), dtype=float)      # [ny+1, nx+1, 2]
        centres = (corners[:-1, :-1] + corners[1:, :-1] + corners[:-1, 1:] + corners[1:, 1:]) / 4
        values = np.ma.filled(np.ma.asarray(collection.get_array(), dtype=float), np.nan)
        return "mesh", _rows(centres[..., 0], centres[..., 1], values.reshape(centres.shape[:2]))
    if isinstance(collection, PathCollection):
        offsets = np.ma.filled(np.ma.asarray(collection.get_offsets(), dtype=float), np.nan)
        mapped = collection.get_array()
        value = None if mapped is None else np.ma.filled(np.ma.asarray(mapped, dtype=float), np.nan)
        return "scatter", _rows(offsets[:, 0], offsets[:, 1], value)
    if isinstance(collection, (PolyCollection, LineCollection)):
        kind = "segments" if isinstance(collection, LineCollection) else "area"
        paths = [np.asarray(p.vertices, dtype=float) for p in collection.get_paths()]
        if not paths:
            return None
        points = np.concatenate(paths)
        items = np.concatenate([np.full(len(p), k) for k, p in enumerate(paths)])
        return kind, _rows(points[:, 0], points[:, 1], item=items)
    return None


def _image_rows(image) -> tuple[str, dict] | None:
    """An ``imshow`` of a 2-d array: each pixel's centre (from the extent and origin) and value;
    an RGB(A) image has no values to give and is left out."""
    import numpy as np

    values = np.ma.filled(np.ma.asarray(image.get_array(), dtype=float), np.nan)
    if values.ndim != 2:
        return None
    ny, nx = values.shape
    left, right, bottom, top = image.get_extent()
    y0, y1 = (top, bottom) if image.origin == "upper" else (bottom, top)
    xs = left + (np.arange(nx) + 0.5) * (right - left) / nx
    ys = y0 + (np.arange(ny) + 0.5) * (y1 - y0) / ny
    gx, gy = np.meshgrid(xs, ys)
    return "image", _rows(gx, gy, values)


def _bar_rows(container) -> tuple[str, dict]:
    """A ``BarContainer``: each bar's centre and length (``barh``: length as x, centre as y)."""
    horizontal = getattr(container, "orientation", "vertical") == "horizontal"
    bars = container.patches
    if horizontal:
        return "barh", _rows([b.get_width() for b in bars], [b.get_y() + b.get_height() / 2 for b in bars],
                             item=range(len(bars)))
    return "bar", _rows([b.get_x() + b.get_width() / 2 for b in bars], [b.get_height() for b in bars],
                        item=range(len(bars)))


def _panel_parts(ax) -> list[tuple[str, str, dict]]:
    """``(series, kind, columns)`` of every data artist of ``ax``, in drawing order by type."""
    from matplotlib.container import BarContainer

    parts: list[tuple[object, str, dict]] = []
    for artist in ax.get_lines():
        kind, columns = _line_rows(ax, artist)
        parts.append((artist, kind, columns))
    for artist in ax.collections:
        found = _collection_rows(artist)
        if found:
            parts.append((artist, *found))
    for artist in ax.images:
        found = _image_rows(artist)
        if found:
            parts.append((artist, *found))
    for artist in ax.containers:
        if isinstance(artist, BarContainer):
            parts.append((artist, *_bar_rows(artist)))
    counts: dict[str, int] = {}
    named = []
    for artist, kind, columns in parts:
        named.append((_label(artist, kind, counts.get(kind, 0)), kind, columns))
        counts[kind] = counts.get(kind, 0) + 1
    return named


def _panels(fig) -> list:
    """The figure's axes that draw data: ``fig.axes`` in order, each followed by its inset axes
    (``child_axes``), colour bars left out."""
    panels = []

    def add(ax):
        if getattr(ax, "_colorbar", None) is None:
            panels.append(ax)
        for child in getattr(ax, "child_axes", ()):
            add(child)

    for ax in fig.axes:
        add(ax)
    return panels


def figure_table(fig):
    """Everything ``fig`` draws, as a long pandas DataFrame with the columns :data:`COLUMNS`
    (one row per point, vertex, bar, pixel or mesh cell; see the module's docstring); empty,
    with those columns, for a figure that draws no data."""
    import numpy as np
    import pandas as pd

    frames = []
    for panel, ax in enumerate(_panels(fig)):
        title = ax.get_title() or ax.get_ylabel()
        for series, kind, columns in _panel_parts(ax):
            n = len(columns["x"])
            frames.append(pd.DataFrame({"panel": np.full(n, panel), "title": [title] * n,
                                        "series": [series] * n, "kind": [kind] * n, **columns},
                                       columns=list(COLUMNS)))
    if not frames:
        return pd.DataFrame({c: [] for c in COLUMNS})
    return pd.concat(frames, ignore_index=True)


def figure_csv(fig) -> str:
    """:func:`figure_table` as CSV text (a header line, then one line per row)."""
    return figure_table(fig).to_csv(index=False)


def spilled_path(sha256: str) -> Path:
    """Where a table too large for the notebook is kept: ``<cache>/figure-data/<sha256>.csv``."""
    from normlimits.core.settings import cache_dir

    return cache_dir() / SPILL_FOLDER / f"{sha256}.csv"


def figure_payload(fig, limit: int = INLINE_LIMIT) -> dict:
    """The :data:`MIME` data of ``fig``: ``{"csv": text, "rows": n}`` when the CSV is at most
    ``limit`` bytes, else ``{"sha256", "bytes", "rows"}`` with the CSV written to
    :func:`spilled_path` (atomically; an existing file, the same bytes, is kept)."""
    from normlimits.core.cache import atomic_write_bytes

    table = figure_table(fig)
    data = table.to_csv(index=False).encode("utf-8")
    if len(data) <= limit:
        return {"csv": data.decode("utf-8"), "rows": len(table)}
    digest = hashlib.sha256(data).hexdigest()
    path = spilled_path(digest)
    if not path.is_file():
        atomic_write_bytes(path, data)
    return {"sha256": digest, "bytes": len(data), "rows": len(table)}


def formatter_class():
    """An IPython display formatter class for :data:`MIME` (a JSON dictionary): a matplotlib
    ``Figure`` gives its :func:`figure_payload`, anything else nothing.

    It recognises figures itself rather than through ``for_type``: matplotlib's inline backend,
    when it is activated (at the first figure a kernel draws), removes every formatter's printer
    registered for ``Figure``. An error while reading a figure is shown as IPython shows a
    formatter's error, and the figure is still drawn."""
    from IPython.core.formatters import BaseFormatter, catch_format_error
    from matplotlib.figure import Figure
    from traitlets import ObjectName, Unicode

    class FigureDataFormatter(BaseFormatter):
        format_type = Unicode(MIME)
        print_method = ObjectName("_repr_figure_data_")
        _return_type = dict

        @catch_format_error
        def __call__(self, obj):
            return figure_payload(obj) if self.enabled and isinstance(obj, Figure) else None

    return FigureDataFormatter


def install(shell=None) -> bool:
    """Make every matplotlib figure displayed or glued in the IPython ``shell`` (default: the
    running one) carry its :func:`figure_payload` as :data:`MIME`; returns whether a shell was
    found. Installing twice keeps one formatter."""
    if shell is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return False
        shell = get_ipython()
    formatters = getattr(getattr(shell, "display_formatter", None), "formatters", None)
    if formatters is None:
        return False
    if MIME not in formatters:
        formatters[MIME] = formatter_class()(parent=shell.display_formatter)
    return True
