"""The vanishing chapter's per-head figure: heads coloured by layer on a colour bar, no legend per head."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import numpy as np
import pytest
from matplotlib.colors import to_rgba

from normlimits.core.plotting import figure_problems
from normlimits.experiments.vanishing_figures import layer_colours, per_head_figure

LENGTHS = [32, 64, 128, 256, 512, 1024]


def _heads(layers=30, per_layer=9, seed=0):
    rng = np.random.default_rng(seed)
    n = layers * per_layer
    exponent = rng.uniform(-1.0, -0.1, n)
    grid = np.array(LENGTHS, float)
    max_w = np.clip(0.5 * (grid / grid[0])[None, :] ** exponent[:, None], 1e-4, 1)
    ent = np.clip(rng.uniform(0.3, 1.0, (n, 1)) + 0 * grid, 0, 1)
    return max_w, ent, np.repeat(np.arange(layers), per_layer), exponent > -0.5


@pytest.fixture
def figure():
    import matplotlib.pyplot as plt

    max_w, ent, layers, keep = _heads()
    fig = per_head_figure(LENGTHS, max_w, ent, layers, keep)
    yield fig, layers, keep
    plt.close(fig)


def test_heads_have_a_colour_bar_of_layers_and_no_legend_entry_each(figure):
    fig, layers, keep = figure
    bars = [ax for ax in fig.axes if ax.get_label() == "<colorbar>"]
    assert len(bars) == 1 and bars[0].get_ylabel() == "layer"
    low, high = bars[0].get_ylim()
    assert (low, high) == (0, layers.max())
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            names = [t.get_text() for t in legend.get_texts()]
            assert len(names) <= 4 and "median head" in names
    assert not fig.legends and not figure_problems(fig)


def test_a_head_takes_its_layers_colour_and_the_median_is_black(figure):
    fig, layers, keep = figure
    top = fig.axes[0]
    colours, _ = layer_colours(layers)
    head_lines = [l for l in top.get_lines() if not l.get_label() or l.get_label().startswith("_")]
    assert len(head_lines) == layers.size
    drawn = {tuple(np.round(to_rgba(l.get_color()), 6)) for l in head_lines}
    assert tuple(np.round(colours[0], 6)) in drawn and tuple(np.round(colours[-1], 6)) in drawn
    assert tuple(np.round(colours[0], 6)) != tuple(np.round(colours[-1], 6))
    median = [l for l in top.get_lines() if l.get_label() == "median head"]
    assert len(median) == 1 and to_rgba(median[0].get_color()) == to_rgba("k")
    assert median[0].get_linewidth() > max(l.get_linewidth() for l in head_lines)


def test_shapes_are_checked():
    max_w, ent, layers, keep = _heads(layers=2, per_layer=2)
    with pytest.raises(ValueError, match="heads"):
        per_head_figure(LENGTHS, max_w[:, :-1], ent, layers, keep)


def test_the_saved_image_is_not_wider_than_the_book_allows(figure):
    """The PNG the book shows (saved tight at the book's resolution) is at most 1,075 px wide: the
    site shows figures in a 672 px column and fails an image more than 1.6 times wider (its text
    would be shrunk below legibility; a CI build found 1,095 px with the colour bar)."""
    from io import BytesIO

    from PIL import Image

    from normlimits.core.plotting import checked_png

    fig, _, _ = figure
    width, _ = Image.open(BytesIO(checked_png(fig))).size
    assert width <= int(1.6 * 672), width
