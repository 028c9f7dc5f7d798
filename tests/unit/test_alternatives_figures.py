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
