"""Figures of the vanishing chapter (matplotlib; every function returns the figure).

- :func:`per_head_figure`: every head's largest weight and relative entropy against L, coloured
  by its layer (a colour bar, no legend entry per head), with the median head in black.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

#: the colormap of layer index: viridis without its palest tenth (thin yellow lines vanish on white)
LAYER_CMAP_RANGE = ("viridis", 0.0, 0.9)


def layer_cmap():
    """The continuous colormap of layer index (:data:`LAYER_CMAP_RANGE`)."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import ListedColormap

    name, low, high = LAYER_CMAP_RANGE
    return ListedColormap(plt.get_cmap(name)(np.linspace(low, high, 256)), name=f"{name}_layers")


def layer_colours(layers, n_layers: int | None = None):
    """RGBA colour of each head from its layer index, ``layers`` [heads] int (0-based), on
    :func:`layer_cmap` over 0 .. ``n_layers - 1`` (default: the largest index + 1). Returns
    ``(colours [heads, 4], norm)``; ``norm`` is the matplotlib normalisation for a colour bar."""
    from matplotlib.colors import Normalize

    layers = np.asarray(layers, dtype=int)
    top = int(n_layers if n_layers is not None else layers.max() + 1) - 1
    norm = Normalize(vmin=0, vmax=max(top, 1))
    return layer_cmap()(norm(layers)), norm


def per_head_figure(lengths: Sequence[int], max_weight, entropy_ratio, layers, non_vanishing):
    """Two panels against L (log axis): top, each head's largest weight (log axis) with ``1/L``
    (dashed) and slope -1 through the median head at the first L (dotted); bottom, each head's
    entropy over log L. Heads are coloured by layer (one colour bar for both panels); heads in
    ``non_vanishing`` are drawn solid, the rest thin and faint; the median over heads is black.

    ``lengths`` [G]; ``max_weight``, ``entropy_ratio`` [heads, G]; ``layers`` [heads] (0-based
    layer of each head); ``non_vanishing`` [heads] bool. The legend holds only the summary lines.
    """
    import matplotlib.pyplot as plt
    from matplotlib.cm import ScalarMappable
    from matplotlib.ticker import MaxNLocator

    max_weight = np.asarray(max_weight, dtype=float)
    entropy_ratio = np.asarray(entropy_ratio, dtype=float)
    keep = np.asarray(non_vanishing, dtype=bool)
    if max_weight.shape != entropy_ratio.shape or max_weight.shape != (keep.size, len(lengths)):
        raise ValueError(f"expected max_weight and entropy_ratio [heads, {len(lengths)}] and one flag per "
                         f"head; got {max_weight.shape}, {entropy_ratio.shape}, {keep.shape}")
    colours, norm = layer_colours(layers)
    grid = np.asarray(lengths, dtype=float)
    # narrower than the book's widest figure: the colour bar and its label widen the saved
    # (tight) image, which must stay within 1.6 times the page column (tests/book/test_site.py)
    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(6.8, 7.4), layout="constrained")
    for i in np.argsort(keep, kind="stable"):          # the faint heads first, the solid ones on top
        style = dict(color=colours[i], lw=1.3) if keep[i] else dict(color=colours[i], lw=0.6, alpha=0.35)
        ax1.plot(grid, max_weight[i], **style)
        ax2.plot(grid, entropy_ratio[i], **style)
    for ax, values in ((ax1, max_weight), (ax2, entropy_ratio)):
        ax.plot(grid, np.median(values, 0), color="k", lw=2.4, label="median head", zorder=5)
    ax1.plot(grid, 1 / grid, "k--", lw=1.2, label="1/L (uniform)")
    ax1.plot(grid, np.median(max_weight[:, 0]) * grid[0] / grid, "k:", lw=1.2, label="slope -1")
    ax1.set(xscale="log", yscale="log", xlabel="L (keys visible)", ylabel="max weight", title="largest weight")
    ax2.set(xscale="log", xlabel="L (keys visible)", ylabel="entropy / log L", title="entropy relative to uniform")
    for ax in (ax1, ax2):
        ax.set_xticks(list(lengths), [str(n) for n in lengths])
        ax.minorticks_off()
    ax1.legend(loc="lower left")
    ax2.legend(loc="lower left")
    bar = fig.colorbar(ScalarMappable(norm=norm, cmap=layer_cmap()), ax=(ax1, ax2), label="layer", shrink=0.6)
    bar.ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    return fig
