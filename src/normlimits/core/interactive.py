"""Interactive figures that work on the static site with no kernel and no network.

An :class:`InteractiveFigure` holds a Plotly figure as plain JSON (``{"data": [...], "layout":
{...}}``, every number a list, never a base64 array, so the JSON can be read and tested) and
shows itself two ways:

- on the site (``text/html``): a box, the figure's JSON in a ``<script type="application/json">``
  and a few lines that draw it with ``window.Plotly``; the book's Sphinx extension
  (:mod:`normlimits.book.sphinx_interactive`) serves ``plotly.min.js`` from the site's
  ``_static`` folder, as MathJax is, on the pages that hold such a box;
- in JupyterLab (``application/vnd.plotly.v1+json``), drawn by the JupyterLab extension that the
  plotly wheel installs.

Why Plotly: its JavaScript ships inside the Python wheel the project already installs from
PyPI (``plotly/package_data/plotly.min.js``), so the site carries it with no npm and no network;
pickers (``updatemenus``), hover labels and legend toggles are part of the figure's JSON, so no
JavaScript is written per figure; it is maintained (plotly.py 7, plotly.js 3) under the MIT
licence. Weighed against it: Vega-Lite through Altair (a cleaner grammar, but its runtime is not in
the Altair wheel: the 33 MB vl-convert-python wheel bundles it) and Bokeh (a smaller runtime,
but a picker needs a hand-written ``CustomJS`` callback). The cost is size: ``plotly.min.js`` is
about 4.8 MB, loaded (deferred) only by the pages that show an interactive figure.

:func:`group_picker` builds the one kind of picker the book uses: a menu that shows one group of
traces (a layer's heads, one model) or all of them, keeping the reference lines in view.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

#: the MIME type of a Plotly figure (JupyterLab's plotly extension renders it)
PLOTLY_MIME = "application/vnd.plotly.v1+json"
#: the class of an interactive figure's box on the page (the Sphinx extension looks for it)
BOX_CLASS = "normlimits-interactive"
#: the file the site serves from ``_static`` and every interactive figure draws with
PLOTLY_SCRIPT = "plotly.min.js"
#: a figure's name: it becomes the box's id on the page
_NAME = re.compile(r"^[a-z][a-z0-9-]*$")
#: Plotly's own options: responsive to the column's width, no logo linking out, no cloud export
PLOT_CONFIG = {"responsive": True, "displaylogo": False, "showLink": False,
               "modeBarButtonsToRemove": ["sendDataToCloud", "lasso2d", "select2d"]}


class InteractiveFigureError(ValueError):
    """An interactive figure that cannot be shown as asked (bad name, empty figure, bad menu)."""


@dataclass(frozen=True)
class InteractiveFigure:
    """A Plotly figure shown on the site and in the lab.

    ``name``: lowercase letters, digits and hyphens (the box's id is ``nl-ix-<name>``);
    ``figure``: ``{"data": [trace, ...], "layout": {...}}`` holding only JSON types;
    ``summary``: one sentence saying what the figure shows (the box's label for screen readers,
    the text shown where the figure cannot be drawn); ``height``: the plot's height in pixels.
    """

    name: str
    figure: dict
    summary: str
    height: int = 560

    def __post_init__(self):
        if not _NAME.match(self.name):
            raise InteractiveFigureError(f"interactive figure name {self.name!r}: use lowercase letters, "
                                         f"digits and hyphens, starting with a letter (it becomes an id)")
        if not self.figure.get("data"):
            raise InteractiveFigureError(f"interactive figure {self.name!r} has no traces: pass "
                                         f"figure={{'data': [...], 'layout': {{...}}}}")
        if not self.summary.strip():
            raise InteractiveFigureError(f"interactive figure {self.name!r} needs a summary sentence")
        try:                                            # only JSON types, no NaN: fails here, not on the page
            json.dumps(self.figure, allow_nan=False)
        except (TypeError, ValueError) as exc:
            raise InteractiveFigureError(f"interactive figure {self.name!r} is not plain JSON ({exc}): pass "
                                         f"lists of finite floats (None for a gap), not arrays or NaN") from exc

    @property
    def box_id(self) -> str:
        return f"nl-ix-{self.name}"

    def to_json(self) -> str:
        """The figure as JSON, safe inside a ``<script>`` element (``</`` escaped)."""
        return json.dumps(self.figure, allow_nan=False, separators=(",", ":")).replace("</", "<\\/")

    def to_html(self) -> str:
        """The site's markup: the box, the figure's JSON and the lines that draw it once the page
        is parsed (``plotly.min.js`` is loaded deferred, so it runs before ``DOMContentLoaded``)."""
        box, summary = self.box_id, html.escape(self.summary.strip())
        config = json.dumps(PLOT_CONFIG)
        return (
            f'<div class="{BOX_CLASS}" id="{box}" role="figure" aria-label="{summary}">'
            f'<div class="{BOX_CLASS}-plot" style="width:100%;height:{int(self.height)}px"></div>'
            f'<p class="{BOX_CLASS}-missing" hidden>{summary} (This interactive view is drawn by '
            f'plotly.js, which the book\'s site serves; open the page from the built site.)</p>'
            f'</div>\n'
            f'<script type="application/json" id="{box}-spec">{self.to_json()}</script>\n'
            f'<script>(function () {{\n'
            f'  function draw() {{\n'
            f'    var box = document.getElementById("{box}");\n'
            f'    var spec = JSON.parse(document.getElementById("{box}-spec").textContent);\n'
            f'    if (!window.Plotly) {{ box.querySelector(".{BOX_CLASS}-missing").hidden = false; return; }}\n'
            f'    window.Plotly.newPlot(box.querySelector(".{BOX_CLASS}-plot"), spec.data, spec.layout, {config});\n'
            f'  }}\n'
            f'  if (document.readyState === "loading") document.addEventListener("DOMContentLoaded", draw);\n'
            f'  else draw();\n'
            f'}})();</script>\n')

    def _repr_mimebundle_(self, include=None, exclude=None) -> dict:
        return {"text/html": self.to_html(), PLOTLY_MIME: self.figure, "text/plain": self.summary}


def plain_floats(values) -> list:
    """Floats (a list, array or tensor [n]) as a plain list for a figure's JSON, every non-finite
    value as None (a gap in a Plotly line)."""
    import numpy as np

    array = np.asarray(values.numpy() if hasattr(values, "numpy") else values, dtype=float).reshape(-1)
    return [float(v) if np.isfinite(v) else None for v in array]


def plotly_script() -> Path:
    """``plotly.min.js`` as shipped by the installed plotly wheel; a clear error when it is missing."""
    try:
        import plotly
    except ImportError as exc:
        raise FileNotFoundError(f"the plotly package is missing ({exc}), so the site cannot serve "
                                f"{PLOTLY_SCRIPT}; `make install` installs it from requirements.lock") from exc
    path = Path(plotly.__file__).parent / "package_data" / PLOTLY_SCRIPT
    if not path.is_file():
        raise FileNotFoundError(f"the plotly wheel has no {path}; reinstall it with `make install`")
    return path


def group_picker(groups: Sequence[str | None], order: Sequence[str], *, all_label: str = "all",
                 label: str = "show") -> dict:
    """A Plotly ``updatemenus`` entry: a dropdown whose first button shows every trace and each
    next button one group's traces.

    ``groups`` [traces]: the group of each trace of the figure, in trace order, or None for a
    trace shown whatever is picked (reference lines, the median); ``order``: the groups in the
    menu's order (every group named in ``groups`` must be in it). Each button sets ``visible``
    [traces] and names the group in the menu.
    """
    named = {g for g in groups if g is not None}
    if not named:
        raise InteractiveFigureError("group_picker needs at least one trace with a group")
    if missing := named - set(order):
        raise InteractiveFigureError(f"group_picker: groups {sorted(missing)} are not in the menu's order")
    if len(set(order)) != len(order):
        raise InteractiveFigureError("group_picker: the menu's order names a group twice")
    buttons = [{"label": all_label, "method": "restyle", "args": [{"visible": [True] * len(groups)}]}]
    for name in order:
        visible = [g is None or g == name for g in groups]
        buttons.append({"label": str(name), "method": "restyle", "args": [{"visible": visible}]})
    return {"buttons": buttons, "direction": "down", "showactive": True, "active": 0,
            "x": 0.0, "xanchor": "left", "y": 1.12, "yanchor": "bottom", "pad": {"r": 4, "t": 0},
            "name": label}
