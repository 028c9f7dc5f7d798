"""The alternatives chapter's 14-normaliser figure: softmax set apart, the others told apart."""

from __future__ import annotations

from types import SimpleNamespace

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
import torch
from matplotlib.colors import to_rgba

from normlimits.core.plotting import figure_problems
from normlimits.experiments.alternatives_figures import REFERENCE, normaliser_styles, yardstick_figure

KEYS = ["softmax"] + [f"alt{i}" for i in range(13)]
DASHED = ["alt3", "alt7"]


def _results(keys=KEYS):
    """A stand-in for YardstickResults: ``config`` grids and ``curve(key, name)`` [grid] tensors."""
    config = SimpleNamespace(lengths=[32, 64, 128], n_grid=[1, 2, 4, 8], temperatures=[0.1, 1.0, 10.0])
    sizes = {"max_weight": 3, "distance": 4, "separability": 4, "jacobian": 3, "jacobian_selectivity": 3,
             "reference_jacobian": 5, "reference_selectivity": 5}
    stats = {k: {"jacobian": None} for k in keys}
    stats[REFERENCE]["reference_jacobian"] = None

    def curve(key, name):
        seed = keys.index(key) + 1
        return torch.linspace(0.1, 1.0, sizes[name], dtype=torch.float64) * seed

    return SimpleNamespace(config=config, stats=stats, curve=curve)


def test_softmax_is_black_thickest_and_on_top_and_no_two_others_look_alike():
    styles = normaliser_styles(KEYS, DASHED)
    soft = styles[REFERENCE]
    others = [styles[k] for k in KEYS if k != REFERENCE]
    assert to_rgba(soft["color"]) == to_rgba("k")
    assert soft["lw"] > max(s["lw"] for s in others) and soft["zorder"] > max(s["zorder"] for s in others)
    looks = {(to_rgba(s["color"]), s["marker"], s["ls"]) for s in others}
    assert len(looks) == len(others)
    for a, b in zip(others, others[1:]):                 # neighbours differ in colour and marker
        assert to_rgba(a["color"]) != to_rgba(b["color"]) and a["marker"] != b["marker"]
    assert all(to_rgba(s["color"]) != to_rgba("k") for s in others)
    assert [k for k in KEYS if styles[k]["ls"] == "--"] == DASHED


def test_the_yardstick_figure_draws_softmax_black_thickest_and_labelled():
    import matplotlib.pyplot as plt

    labels = {k: k.upper() for k in KEYS}
    fig = yardstick_figure(_results(), KEYS, labels, DASHED)
    first = fig.axes[0]
    soft = [l for l in first.get_lines() if l.get_label() == labels[REFERENCE]]
    assert len(soft) == 1 and to_rgba(soft[0].get_color()) == to_rgba("k")
    assert soft[0].get_linewidth() == max(l.get_linewidth() for l in first.get_lines())
    assert soft[0].get_zorder() == max(l.get_zorder() for l in first.get_lines())
    legend = [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None and
              any(t.get_text() == labels[REFERENCE] for t in ax.get_legend().get_texts())]
    assert len(legend) == 1
    assert not figure_problems(fig)
    plt.close(fig)


def test_the_yardstick_explorer_draws_the_figures_curves_and_picks_one_normaliser_beside_softmax():
    import plotly.graph_objects as go

    from normlimits.experiments.alternatives_figures import yardstick_explorer

    labels = {k: k.upper() for k in KEYS}
    results = _results()
    fig = yardstick_explorer(results, KEYS, labels, DASHED)
    go.Figure(fig.figure)                                            # plotly's own schema validation
    traces = fig.figure["data"]
    # every normaliser: its five curves, the values of the static figure's
    for key in KEYS:
        mine = [t for t in traces if t["name"] == labels[key]]
        assert [t["xaxis"] for t in mine] == ["x", "x2", "x3", "x4", "x5"]
        assert mine[0]["y"] == pytest.approx(results.curve(key, "max_weight").tolist())
        d = results.curve(key, "distance").numpy()
        assert mine[1]["y"] == pytest.approx((d / d[0]).tolist())
        assert mine[3]["x"] == [0.1, 1.0, 10.0] and mine[3]["y"] == pytest.approx(results.curve(key, "jacobian").tolist())
        assert all(labels[key] in t["hovertemplate"] for t in mine)
        assert [t["showlegend"] for t in mine] == [True, False, False, False, False]
        assert all((t["line"]["dash"] == "dash") == (key in DASHED) for t in mine)
    assert all(t["line"]["color"] == "#000000" for t in traces if t["name"] == labels[REFERENCE])
    menu = fig.figure["layout"]["updatemenus"][0]
    assert [b["label"] for b in menu["buttons"]] == ["all normalisers"] + [labels[k] for k in KEYS[1:]]
    pick = next(b for b in menu["buttons"] if b["label"] == "ALT4")
    shown = {t["name"] for t, v in zip(traces, pick["args"][0]["visible"]) if v}
    assert shown == {"ALT4", labels[REFERENCE], "1/L", "1/(2T)", "1/T", f"{labels[REFERENCE]}, finer T"}
