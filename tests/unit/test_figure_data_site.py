"""The line under every figure of the site (:mod:`normlimits.book.sphinx_figure_data`): a throwaway
Sphinx and myst-nb build of a tiny notebook, executed in a real kernel, with a figure drawn by a
cell (its caption from the cell's metadata) and a glued one (``glue:figure``)."""

from __future__ import annotations

import io
import re
import textwrap
from html.parser import HTMLParser
from pathlib import Path

import pandas as pd
import pytest

ROOT = Path(__file__).resolve().parents[2]

PAGE = '''\
---
file_format: mystnb
kernelspec:
  name: python3
  display_name: Python 3
---
# Two figures

```{code-cell} ipython3
import matplotlib.pyplot as plt
from myst_nb import glue
from normlimits.core import figure_data
assert figure_data.install()
```

```{code-cell} ipython3
---
mystnb:
  figure:
    caption: A plain line.
    name: plain-line
---
fig, ax = plt.subplots(figsize=(3, 2))
ax.plot([1.0, 2.0, 4.0], [0.1, 1 / 3, 2 / 7], label="drawn")
fig.tight_layout()
```

```{code-cell} ipython3
fig, ax = plt.subplots(figsize=(3, 2))
ax.scatter([1.5, 2.5], [1 / 9, 5 / 11])
glue("glued_scatter", fig, display=False)
plt.close(fig)
```

```{code-cell} ipython3
fig, ax = plt.subplots(figsize=(3, 2))
ax.bar([0.0, 1.0], [2.5, 1 / 3])
fig.tight_layout()
```

```{glue:figure} glued_scatter
:name: glued-scatter

A glued scatter.
```
'''

CONF = '''\
extensions = ["myst_nb", "normlimits.book.sphinx_figures", "normlimits.book.sphinx_figure_data"]
exclude_patterns = ["_build"]
nb_execution_mode = "force"
nb_execution_timeout = 120
html_theme = "basic"
suppress_warnings = {suppress!r}
'''


def book_suppressed_warnings() -> list[str]:
    """The warnings the book's own build suppresses (``_config.yml``)."""
    import yaml

    return yaml.safe_load((ROOT / "_config.yml").read_text())["sphinx"]["config"]["suppress_warnings"]


class Figures(HTMLParser):
    """Each ``<figure>`` of a page: its id and the href of its data link; ``links``: every data
    link of the page, in or out of a figure."""

    def __init__(self):
        super().__init__()
        self.figures: list[dict] = []
        self.links: list[str] = []
        self.depth = 0

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "figure":
            self.depth += 1
            self.figures.append({"id": attrs.get("id"), "href": None, "download": None})
        elif tag == "a" and "download" in attrs:
            self.links.append(attrs["download"])
            if self.depth:
                self.figures[-1].update(href=attrs["href"], download=attrs["download"])

    def handle_endtag(self, tag):
        if tag == "figure":
            self.depth -= 1


def test_every_figure_of_a_built_page_links_its_data_and_the_command(tmp_path, monkeypatch):
    pytest.importorskip("myst_nb")
    from sphinx.cmd.build import build_main

    source = tmp_path / "src"
    source.mkdir()
    # myst-nb warns, while it reads a page, about every MIME type it cannot render (the figure's
    # data among them), even those no page shows; the book suppresses that warning, as here
    suppress = book_suppressed_warnings()
    assert "mystnb.unknown_mime_type" in suppress
    (source / "conf.py").write_text(CONF.format(suppress=suppress))
    (source / "index.md").write_text(PAGE)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))            # the kernel imports this package
    monkeypatch.setenv("MPLBACKEND", "module://matplotlib_inline.backend_inline")
    out = tmp_path / "_build" / "html"
    assert build_main(["-b", "html", "-W", "-q", str(source), str(out)]) == 0
    page = (out / "index.html").read_text()
    parser = Figures()
    parser.feed(page)
    assert [f["id"] for f in parser.figures] == ["plain-line", "glued-scatter"]
    drawn = {"plain-line": ([1.0, 2.0, 4.0], [0.1, 1 / 3, 2 / 7]), "glued-scatter": ([1.5, 2.5], [1 / 9, 5 / 11])}
    for figure in parser.figures:
        assert figure["download"] == f"{figure['id']}.csv"
        table = pd.read_csv(io.StringIO((out / figure["href"]).read_text()))
        xs, ys = drawn[figure["id"]]
        assert list(table["x"]) == xs and list(table["y"]) == ys
    # a figure shown without a caption (no <figure>) gets its line too, named by its place
    assert parser.links == ["plain-line.csv", "index-figure-2.csv", "glued-scatter.csv"]
    bars = pd.read_csv(out / "_figure_data" / "index" / "index-figure-2.csv")
    assert list(bars["kind"]) == ["bar", "bar"] and list(bars["y"]) == [2.5, 1 / 3]
    assert page.count("python -m normlimits chapter index") == 3
    assert len(re.findall(r'<p class="figure-data">', page)) == 3
