"""Interactive figures (:mod:`normlimits.core.interactive`), the vanishing chapter's per-head
explorer, and the Sphinx extension that serves plotly.min.js (:mod:`normlimits.book.sphinx_interactive`)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from normlimits.core.interactive import (BOX_CLASS, PLOTLY_MIME, PLOTLY_SCRIPT, InteractiveFigure,
                                         InteractiveFigureError, group_picker, plotly_script)

ROOT = Path(__file__).resolve().parents[2]


def small_figure(**kw) -> InteractiveFigure:
    spec = {"data": [{"type": "scatter", "x": [1, 2], "y": [0.5, 0.25], "name": "a"}], "layout": {}}
    return InteractiveFigure(**{"name": "demo", "figure": spec, "summary": "Two points.", **kw})


# --- the figure ---------------------------------------------------------------------------------

def test_the_page_markup_holds_the_figure_and_draws_it_with_the_sites_plotly():
    fig = small_figure()
    page = fig.to_html()
    assert f'class="{BOX_CLASS}"' in page and 'id="nl-ix-demo"' in page
    spec = re.search(r'<script type="application/json" id="nl-ix-demo-spec">(.*?)</script>', page, re.S).group(1)
    assert json.loads(spec) == fig.figure
    assert "window.Plotly.newPlot" in page
    assert "http" not in page, "the markup must not fetch anything (the site is offline)"
    bundle = fig._repr_mimebundle_()
    assert bundle[PLOTLY_MIME] == fig.figure and bundle["text/plain"] == "Two points."


def test_a_closing_script_tag_in_the_data_cannot_end_the_script_element():
    spec = {"data": [{"type": "scatter", "x": [1], "y": [1], "name": "</script><b>x"}], "layout": {}}
    page = InteractiveFigure(name="tricky", figure=spec, summary="One point.").to_html()
    body = re.search(r'id="nl-ix-tricky-spec">(.*?)</script>', page, re.S).group(1)
    assert json.loads(body)["data"][0]["name"] == "</script><b>x"


@pytest.mark.parametrize("change, words", [
    ({"name": "Bad Name"}, "lowercase letters"),
    ({"figure": {"data": [], "layout": {}}}, "no traces"),
    ({"summary": "  "}, "summary"),
    ({"figure": {"data": [{"type": "scatter", "y": [float("nan")]}], "layout": {}}}, "finite floats"),
    ({"figure": {"data": [{"type": "scatter", "y": np.arange(3)}], "layout": {}}}, "not plain JSON"),
])
def test_a_figure_that_cannot_be_shown_is_refused_with_the_setting_named(change, words):
    with pytest.raises(InteractiveFigureError, match=words):
        small_figure(**change)


def test_the_wheel_ships_the_script_the_site_serves():
    path = plotly_script()
    assert path.name == PLOTLY_SCRIPT and path.stat().st_size > 1_000_000
    assert b"newPlot" in path.read_bytes()


# --- the picker -----------------------------------------------------------------------------------

def test_each_button_of_the_picker_shows_its_group_and_the_shared_lines():
    groups = ["a", "b", "a", None]
    menu = group_picker(groups, ["a", "b"], all_label="everything")
    labels = [b["label"] for b in menu["buttons"]]
    assert labels == ["everything", "a", "b"]
    visible = {b["label"]: b["args"][0]["visible"] for b in menu["buttons"]}
    assert visible == {"everything": [True] * 4, "a": [True, False, True, True], "b": [False, True, False, True]}


@pytest.mark.parametrize("groups, order, words", [
    ([None, None], ["a"], "at least one"),
    (["a", "c"], ["a", "b"], r"\['c'\]"),
    (["a"], ["a", "a"], "twice"),
])
def test_a_picker_that_would_hide_a_group_is_refused(groups, order, words):
    with pytest.raises(InteractiveFigureError, match=words):
        group_picker(groups, order)


# --- the per-head explorer ------------------------------------------------------------------------

def explorer_inputs(seed=0):
    rng = np.random.default_rng(seed)
    lengths = [16, 64, 256]
    layers = np.repeat(np.arange(3), 2)
    labels = [f"L{l}H{h}" for l in range(3) for h in range(2)]
    max_weight = rng.uniform(0.01, 1, (6, 3))
    entropy = rng.uniform(0, 1, (6, 3))
    keep = np.array([True, False, True, False, False, True])
    return lengths, max_weight, entropy, layers, labels, keep


def test_the_explorer_draws_every_head_in_both_panels_with_its_values_and_name():
    from normlimits.experiments.vanishing_figures import per_head_explorer

    lengths, max_weight, entropy, layers, labels, keep = explorer_inputs()
    fig = per_head_explorer(lengths, max_weight, entropy, layers, labels, keep)
    traces = fig.figure["data"]
    heads = {(t["yaxis"], t["name"]): t for t in traces if re.fullmatch(r"L\dH\d", t["name"])}
    assert len(heads) == 2 * 6
    for i, label in enumerate(labels):
        assert heads[("y", label)]["y"] == pytest.approx(max_weight[i].tolist(), rel=0, abs=0)
        assert heads[("y2", label)]["y"] == pytest.approx(entropy[i].tolist(), rel=0, abs=0)
        assert heads[("y", label)]["x"] == lengths
        assert label in heads[("y", label)]["hovertemplate"]
        assert ("non-vanishing" in heads[("y", label)]["hovertemplate"]) == bool(keep[i])
    medians = [t for t in traces if t["name"] == "median head"]
    assert medians[0]["y"] == pytest.approx(np.median(max_weight, 0).tolist())
    assert medians[1]["y"] == pytest.approx(np.median(entropy, 0).tolist())
    uniform = next(t for t in traces if t["name"].startswith("1/L"))
    assert uniform["y"] == pytest.approx([1 / n for n in lengths])


def test_picking_a_layer_shows_exactly_its_heads_and_the_reference_lines():
    from normlimits.experiments.vanishing_figures import per_head_explorer

    lengths, max_weight, entropy, layers, labels, keep = explorer_inputs()
    fig = per_head_explorer(lengths, max_weight, entropy, layers, labels, keep)
    traces = fig.figure["data"]
    menu = fig.figure["layout"]["updatemenus"][0]
    assert [b["label"] for b in menu["buttons"]] == ["all layers", "layer 0", "layer 1", "layer 2"]
    for button in menu["buttons"][1:]:
        layer = int(button["label"].split()[1])
        shown = {t["name"] for t, v in zip(traces, button["args"][0]["visible"]) if v}
        assert shown == {f"L{layer}H0", f"L{layer}H1", "median head", "1/L (uniform)"}


def test_the_explorer_is_a_valid_plotly_figure_and_refuses_mismatched_shapes():
    import plotly.graph_objects as go

    from normlimits.experiments.vanishing_figures import per_head_explorer

    lengths, max_weight, entropy, layers, labels, keep = explorer_inputs()
    max_weight[0, 1] = np.nan                                    # a gap, drawn as a break in the line
    fig = per_head_explorer(lengths, max_weight, entropy, layers, labels, keep)
    go.Figure(fig.figure)                                         # plotly's own schema validation
    assert None in next(t for t in fig.figure["data"] if t["name"] == "L0H0")["y"]
    with pytest.raises(ValueError, match="one layer, label and flag per head"):
        per_head_explorer(lengths, max_weight, entropy, layers, labels[:-1], keep)


# --- the site serves the script -------------------------------------------------------------------

PAGE = '''\
---
file_format: mystnb
kernelspec:
  name: python3
  display_name: Python 3
---
# An interactive figure

```{code-cell} ipython3
from normlimits.core.interactive import InteractiveFigure
InteractiveFigure(name="demo", summary="Two points.",
                  figure={"data": [{"type": "scatter", "x": [1, 2], "y": [0.5, 0.25]}], "layout": {}})
```
'''

PLAIN = "# No figure\n\nJust words.\n"

CONF = '''\
extensions = ["myst_nb", "normlimits.book.sphinx_interactive"]
exclude_patterns = ["_build"]
nb_execution_mode = "force"
nb_execution_timeout = 120
html_theme = "basic"
suppress_warnings = ["mystnb.unknown_mime_type"]
'''


def test_the_site_serves_plotly_to_the_page_that_draws_with_it_and_only_there(tmp_path, monkeypatch):
    pytest.importorskip("myst_nb")
    from sphinx.cmd.build import build_main

    source = tmp_path / "src"
    source.mkdir()
    (source / "conf.py").write_text(CONF)
    (source / "index.md").write_text(PAGE + "\n```{toctree}\nplain\n```\n")
    (source / "plain.md").write_text(PLAIN)
    monkeypatch.setenv("PYTHONPATH", str(ROOT / "src"))
    out = tmp_path / "_build" / "html"
    assert build_main(["-b", "html", "-W", "-q", str(source), str(out)]) == 0
    index, plain = (out / "index.html").read_text(), (out / "plain.html").read_text()
    assert re.search(r'<script defer="defer" src="_static/plotly\.min\.js', index), "the drawing page loads plotly"
    assert f'class="{BOX_CLASS}"' in index and "nl-ix-demo-spec" in index
    assert PLOTLY_SCRIPT not in plain, "a page with no interactive figure must not load 4.8 MB"
    served = out / "_static" / PLOTLY_SCRIPT
    assert served.read_bytes() == plotly_script().read_bytes()
    assert not list((out / "_static").glob("*.partial"))
