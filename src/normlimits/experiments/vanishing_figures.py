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


def per_head_explorer(lengths: Sequence[int], max_weight, entropy_ratio, layers, labels, non_vanishing,
                      *, name: str = "vanishing-heads"):
    """The interactive twin of :func:`per_head_figure` (:class:`~normlimits.core.interactive.InteractiveFigure`):
    the same two panels, each head a line coloured by its layer; a menu picks one layer (its heads
    alone, with the median head and ``1/L`` kept in view) or all; hovering a line names the head
    (``labels``, e.g. ``L3H7``) and gives L, its largest weight and relative entropy there, and
    whether it is non-vanishing.

    ``lengths`` [G]; ``max_weight``, ``entropy_ratio`` [heads, G]; ``layers`` [heads] 0-based;
    ``labels`` [heads] str; ``non_vanishing`` [heads] bool.
    """
    from matplotlib.colors import to_hex

    from normlimits.core.interactive import InteractiveFigure, group_picker, plain_floats

    max_weight = np.asarray(max_weight, dtype=float)
    entropy_ratio = np.asarray(entropy_ratio, dtype=float)
    layers = np.asarray(layers, dtype=int)
    keep = np.asarray(non_vanishing, dtype=bool)
    labels = [str(s) for s in labels]
    heads = keep.size
    if (max_weight.shape != (heads, len(lengths)) or entropy_ratio.shape != max_weight.shape
            or layers.shape != (heads,) or len(labels) != heads):
        raise ValueError(f"expected max_weight and entropy_ratio [heads, {len(lengths)}], one layer, label and "
                         f"flag per head; got {max_weight.shape}, {entropy_ratio.shape}, {layers.shape}, "
                         f"{len(labels)} labels, {keep.shape}")
    colours, _ = layer_colours(layers)
    x = [int(n) for n in lengths]
    traces, groups = [], []
    for panel, values, yaxis in ((1, max_weight, "y"), (2, entropy_ratio, "y2")):
        quantity = "largest weight" if panel == 1 else "entropy / log L"
        for i in np.argsort(keep, kind="stable"):
            kind = "non-vanishing" if keep[i] else "vanishing"
            traces.append({
                "type": "scatter", "mode": "lines", "x": x, "y": plain_floats(values[i]),
                "xaxis": "x" if panel == 1 else "x2", "yaxis": yaxis, "name": labels[i], "showlegend": False,
                "line": {"color": to_hex(colours[i], keep_alpha=False), "width": 1.6 if keep[i] else 0.8},
                "opacity": 1.0 if keep[i] else 0.45,
                "hovertemplate": f"<b>{labels[i]}</b> (layer {layers[i]}, {kind})<br>L = %{{x}}<br>"
                                 f"{quantity} = %{{y:.4~g}}<extra></extra>"})
            groups.append(f"layer {layers[i]}")
        traces.append({"type": "scatter", "mode": "lines", "x": x, "y": plain_floats(np.median(values, 0)),
                       "xaxis": "x" if panel == 1 else "x2", "yaxis": yaxis, "name": "median head",
                       "showlegend": panel == 1, "legendgroup": "median", "line": {"color": "black", "width": 3},
                       "hovertemplate": f"median head<br>L = %{{x}}<br>{quantity} = %{{y:.4~g}}<extra></extra>"})
        groups.append(None)
    traces.append({"type": "scatter", "mode": "lines", "x": x, "y": [1.0 / n for n in x], "xaxis": "x",
                   "yaxis": "y", "name": "1/L (uniform)", "line": {"color": "black", "dash": "dash", "width": 1.4},
                   "hovertemplate": "uniform 1/L<br>L = %{x}<br>%{y:.4~g}<extra></extra>"})
    groups.append(None)
    order = [f"layer {layer}" for layer in sorted(set(layers.tolist()))]
    pad = 0.04 * max(np.log10(x[-1] / x[0]), 1e-9)      # the end ticks' labels inside the plot
    axis = {"type": "log", "tickvals": x, "ticktext": [str(n) for n in x], "title": {"text": "L (keys visible)"},
            "range": [float(np.log10(x[0]) - pad), float(np.log10(x[-1]) + pad)]}
    layout = {
        "xaxis": {**axis, "domain": [0, 1], "anchor": "y"},
        "yaxis": {"type": "log", "title": {"text": "largest weight"}, "domain": [0.56, 1.0], "anchor": "x"},
        "xaxis2": {**axis, "domain": [0, 1], "anchor": "y2"},
        "yaxis2": {"title": {"text": "entropy / log L"}, "domain": [0.0, 0.40], "anchor": "x2"},
        "updatemenus": [group_picker(groups, order, all_label="all layers", label="layer")],
        "legend": {"orientation": "h", "x": 0.25, "xanchor": "left", "y": 1.12, "yanchor": "bottom"},
        "hovermode": "closest", "margin": {"l": 60, "r": 10, "t": 50, "b": 50},
        "template": {"layout": {"font": {"family": "sans-serif", "size": 12}}},
    }
    summary = (f"Interactive: the largest weight and relative entropy against L of each of the {heads} heads; "
               f"pick a layer in the menu, hover a line for the head and its values.")
    return InteractiveFigure(name=name, figure={"data": traces, "layout": layout}, summary=summary, height=640)
