"""The figures' data in an executed notebook: which drawn image each table belongs to, as CSV bytes.

A chapter's kernel attaches to every figure it shows or glues the table of what the figure draws
(:mod:`normlimits.core.figure_data`, MIME type :data:`~normlimits.core.figure_data.MIME`), in the
same output as the figure's PNG. myst-nb writes that PNG to a file named by the sha256 of its
bytes and shows the same file wherever the figure appears (a cell's own figure, or a
``glue:figure`` pasting it, whose MIME types carry myst-nb's prefix
``application/papermill.record/``; myst-nb moves glued outputs out of the notebook it writes
into ``<docname>.glue.json``, prefix removed). So :func:`output_figures` keys each table by that sha256:
the page's image of any figure finds its data by its file's name.
"""

from __future__ import annotations

import hashlib
import re
from base64 import b64decode
from dataclasses import dataclass, replace

from normlimits.core.figure_data import MIME, spilled_path

#: the image type a figure is drawn as in the book
IMAGE_MIME = "image/png"
#: a ``glue:figure`` directive, its glue key and (among its options) its ``:name:``
GLUE_FIGURE = re.compile(r"^[`:]{3,}\{glue:figure\}\s+(\S+)[ \t]*\n((?:[ \t]*:[\w-]+:.*\n)*)", re.M)


@dataclass(frozen=True)
class FigureData:
    """One figure's data: ``rows`` rows of CSV, ``csv`` its bytes, or None where a table too large
    for the notebook (``spilled``) is no longer in the cache folder; ``label`` the figure's label
    in the chapter (``vanishing-slack``), empty where it has none."""

    rows: int
    csv: bytes | None
    spilled: bool
    label: str = ""


def payload_data(payload: dict) -> FigureData:
    """The :class:`FigureData` of one :data:`MIME` payload (inline ``csv``, or a ``sha256``
    reference to :func:`~normlimits.core.figure_data.spilled_path`, checked against its hash)."""
    rows = int(payload.get("rows", 0))
    if "csv" in payload:
        return FigureData(rows, str(payload["csv"]).encode("utf-8"), False)
    path = spilled_path(str(payload.get("sha256", "")))
    data = path.read_bytes() if path.is_file() else None
    if data is not None and hashlib.sha256(data).hexdigest() != payload.get("sha256"):
        data = None
    return FigureData(rows, data, True)


def output_figures(outputs, labels=lambda output: "") -> dict[str, FigureData]:
    """Every figure among notebook ``outputs`` (nbformat 4 output dictionaries; MIME types with
    or without myst-nb's glue prefix) that carries its data: the sha256 of its PNG bytes (the
    name of myst-nb's image file) -> its :class:`FigureData`, labelled ``labels(output)``."""
    found: dict[str, FigureData] = {}
    for output in outputs:
        data = output.get("data") or {}
        for key, image in data.items():
            if not key.endswith(IMAGE_MIME):
                continue
            payload = data.get(key[:-len(IMAGE_MIME)] + MIME)
            if isinstance(payload, dict):
                png = b64decode("".join(image) if isinstance(image, list) else image)
                found[hashlib.sha256(png).hexdigest()] = replace(payload_data(payload), label=labels(output))
    return found


def glue_figure_labels(notebook: dict) -> dict[str, str]:
    """Glue key -> the ``:name:`` of the ``glue:figure`` directive that pastes it, from the
    notebook's Markdown cells."""
    labels = {}
    for cell in notebook.get("cells", []):
        if cell.get("cell_type") == "markdown":
            source = "".join(cell.get("source", ""))
            for key, options in GLUE_FIGURE.findall(source if source.endswith("\n") else source + "\n"):
                name = re.search(r":name:\s*(\S+)", options)
                if name:
                    labels[key] = name.group(1)
    return labels


def notebook_figures(notebook: dict, glued: dict | None = None) -> dict[str, FigureData]:
    """:func:`output_figures` of every cell of an executed notebook (nbformat 4, a dictionary) and
    of its ``glued`` outputs (glue key -> output, as myst-nb keeps them apart), in that order.
    A figure is labelled by its cell's ``mystnb: figure: name``, a glued one by the ``:name:`` of
    the ``glue:figure`` that pastes it."""
    pasted = glue_figure_labels(notebook)

    def glue_label(output) -> str:
        return pasted.get(((output.get("metadata") or {}).get("scrapbook") or {}).get("name", ""), "")

    found: dict[str, FigureData] = {}
    for cell in notebook.get("cells", []):
        figure = ((cell.get("metadata") or {}).get("mystnb") or {}).get("figure") or {}
        found.update(output_figures(cell.get("outputs", []) or [],
                                    lambda output: glue_label(output) or str(figure.get("name", ""))))
    found.update(output_figures((glued or {}).values(), glue_label))
    return found


def file_stem(label: str, chapter: str, index: int) -> str:
    """The name (without ``.csv``) of a figure's data file: its ``label`` made safe for a file
    name, or ``<chapter>-figure-<index>`` for a figure without one."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", label).strip("-.")
    return stem or f"{chapter}-figure-{index}"
