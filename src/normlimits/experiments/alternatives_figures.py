"""Figures of the alternatives chapter (matplotlib; every function returns the figure).

- :func:`yardstick_figure`: the normalisers on the four yardsticks (from
  :class:`normlimits.experiments.alternatives.YardstickResults`);
- :func:`sweep_figure`: SSMax across its critical scale and the sink logit swept;
- :func:`removal_figure`: attention with tokens removed (from
  :class:`normlimits.experiments.removal.RemovalResult`) next to Figure 2c's critical N.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np


#: the reference normaliser, drawn black, thickest and on top of the others
REFERENCE = "softmax"
#: colours of the other normalisers: matplotlib's tab10 without its grey (kept for references)
_COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
            "#17becf")
#: markers cycled with the colours (7 against 9 colours: no two of 63 normalisers look alike)
_MARKERS = ("o", "s", "^", "D", "v", "P", "X")


def normaliser_styles(keys: Sequence[str], dashed: Sequence[str] = ()) -> dict:
    """Line keyword arguments per normaliser key, for ``plot``: :data:`REFERENCE` black, width 2.6,
    above the others (z-order 4), small round markers; every other key a (colour, marker) pair no other key has, so
    neighbours differ in colour and in marker, width 1.2; ``dashed`` keys (rows that need not sum
    to 1) dashed, the rest solid."""
    styles, k = {}, 0
    for key in keys:
        ls = "--" if key in dashed else "-"
        if key == REFERENCE:
            styles[key] = dict(color="k", lw=2.6, ls=ls, marker="o", ms=3.5, zorder=4)
            continue
        styles[key] = dict(color=_COLOURS[k % len(_COLOURS)], marker=_MARKERS[k % len(_MARKERS)],
                           ms=3.5, lw=1.2, ls=ls, zorder=2)
        k += 1
    return styles


def yardstick_figure(results, keys: Sequence[str], labels: dict, dashed: Sequence[str] = ()):
    """Five panels: (a) largest weight against L, (b) d~_N / d~_1 against N, (c) N_s/N against N,
    (d) mean Jacobian norm against T, (e) the norm against the selectivity it buys. ``dashed``:
    keys drawn dashed (rows that need not sum to 1)."""
    import matplotlib.pyplot as plt

    cfg = results.config
    style = normaliser_styles(keys, dashed)
    fig, grid = plt.subplots(3, 2, figsize=(7.2, 10.5))
    # panels (a)-(e) in reading order, the legend in the sixth place
    axes = np.array([[grid[0, 0], grid[0, 1], grid[1, 0]], [grid[1, 1], grid[2, 0], grid[2, 1]]])
    lengths = np.array(cfg.lengths, dtype=float)
    n_grid = list(cfg.n_grid)
    temps = np.array(cfg.temperatures)
    for key in keys:
        kw = style[key]
        axes[0, 0].plot(lengths, results.curve(key, "max_weight").numpy(), label=labels[key], **kw)
        d = results.curve(key, "distance").numpy()
        axes[0, 1].plot(n_grid, d / d[0], **kw)
        axes[0, 2].plot(n_grid, results.curve(key, "separability").numpy(), **kw)
        if "jacobian" in results.stats[key]:
            axes[1, 0].plot(temps, results.curve(key, "jacobian").numpy(), **kw)
            axes[1, 1].plot(results.curve(key, "jacobian_selectivity").numpy(),
                            results.curve(key, "jacobian").numpy(), **kw)
    axes[0, 0].plot(lengths, 1 / lengths, "k:", lw=1, label="1/L")
    axes[0, 0].set(xscale="log", yscale="log", xlabel="L (keys visible)", ylabel="largest weight",
                   title="(a) vanishing")
    axes[0, 0].set_xticks(cfg.lengths, [str(n) for n in cfg.lengths])
    axes[0, 1].set(xscale="log", xlabel="N (top-N selected)", ylabel=r"$\tilde d_N / \tilde d_1$",
                   title="(b) distance")
    axes[0, 2].set(xscale="log", xlabel="N (top-N selected)", ylabel=r"$N_s/N$", ylim=(0, 1.05),
                   title="(c) geometric separability")
    for ax in axes[0, 1], axes[0, 2]:
        ax.set_xticks(n_grid[::2], [str(n) for n in n_grid[::2]])
    axes[1, 0].plot(temps, 1 / (2 * temps), "k--", lw=1, label="1/(2T)")
    axes[1, 0].plot(temps, 1 / temps, "k:", lw=1, label="1/T")
    axes[1, 0].set(xscale="log", yscale="log", xlabel="T", ylabel=r"mean $\|\partial\alpha/\partial\ell\|_2$",
                   title="(d) gradient sensitivity")
    axes[1, 0].legend()
    ref = REFERENCE
    if "reference_jacobian" in results.stats.get(ref, {}):
        axes[1, 1].plot(results.curve(ref, "reference_selectivity").numpy(),
                        results.curve(ref, "reference_jacobian").numpy(), color="k", lw=1, zorder=4)
    axes[1, 1].set(yscale="log", xlabel="mean largest weight (selectivity)",
                   ylabel=r"mean $\|\partial\alpha/\partial\ell\|_2$", title="(e) gradient at equal selectivity")
    handles, names = axes[0, 0].get_legend_handles_labels()
    axes[1, 2].axis("off")
    axes[1, 2].legend(handles, names, loc="center", ncol=1, title="normaliser", frameon=False)
    fig.tight_layout()
    return fig


def sweep_figure(gamma_table, gamma_factors: Sequence[float], sink_table, sink_values: Sequence[float],
                 b_star: float, knee: int = 16):
    """Two panels: the largest weight at the longest L and N_s/N at ``knee`` against
    gamma / gamma_c (left) and against the sink logit b with the matched b* marked (right)."""
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(2, 1, figsize=(7.2, 6.4))
    sep = f"N_s/N (N={knee})"
    for ax, table, x in ((ax1, gamma_table, list(gamma_factors)), (ax2, sink_table, list(sink_values))):
        ax.plot(x, table["max weight (L max)"].to_numpy(), "o-", label="largest weight, L = 1024")
        ax.plot(x, table[sep].to_numpy(), "s-", label=f"$N_s/N$ at $N = {knee}$")
        ax.plot(x, table["row sum"].to_numpy(), "^:", label="row sum")
        ax.set(ylim=(0, 1.05))
    ax1.axvline(1.0, color="k", ls="--", lw=1)
    ax1.set(xscale="log", xlabel=r"$\gamma / \gamma_c$", title="SSMax across the critical scale")
    ax1.set_xticks(list(gamma_factors), [f"{g:g}" for g in gamma_factors])
    ax2.axvline(b_star, color="k", ls="--", lw=1, label=r"$b^*$ (median head)")
    ax2.set(xlabel="sink logit b", title="a sink logit per head")
    ax2.legend()
    fig.tight_layout()
    return fig


def removal_figure(removal, critical: dict, tau: float):
    """Three panels: (a) the loss increase against N per length (solid: delete, dashed: delete
    and renormalise; dotted line: tau); (b) N*_tau / L against L for both modes next to the
    critical N / L of Figure 2c (``critical``: L -> critical N or None); (c) the relative change
    of the layer output against N."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(3, 1, figsize=(7.2, 10.5))
    colours = plt.get_cmap("viridis")(np.linspace(0, 0.9, len(removal.lengths)))
    for c, L in zip(colours, removal.lengths):
        grid = removal.grids[L]
        axes[0].plot(grid, np.clip(removal.increase["delete"][L], 1e-5, None), "-o", ms=3, color=c, label=f"L = {L}")
        axes[0].plot(grid, np.clip(removal.increase["renormalise"][L], 1e-5, None), "--", color=c)
        if removal.output_change["delete"]:
            axes[2].plot(grid, removal.output_change["delete"][L], "-o", ms=3, color=c, label=f"L = {L}")
            axes[2].plot(grid, removal.output_change["renormalise"][L], "--", color=c)
    axes[0].axhline(tau, color="k", ls=":", lw=1, label=rf"$\tau$ = {tau:g}")
    axes[0].set(xscale="log", yscale="log", xlabel="N kept per head and query",
                ylabel="loss increase (nats/token)", title="(a) next-token loss")
    axes[0].legend()
    lengths = np.array(removal.lengths, dtype=float)
    for mode, marker in (("delete", "o-"), ("renormalise", "s--")):
        axes[1].plot(lengths, removal.fraction(tau, mode), marker, label=rf"$N^*_\tau/L$, {mode}")
    crit = [(L, n / L) for L, n in critical.items() if n is not None]
    if crit:
        axes[1].plot(*zip(*crit), "k^:", label="critical N / L (Fig. 2c)")
    axes[1].set(xscale="log", yscale="log", xlabel="context length L", ylabel="fraction of the context",
                title=r"(b) tokens needed vs Fig. 2c")
    axes[1].set_xticks(removal.lengths, [str(L) for L in removal.lengths])
    axes[1].legend()
    axes[2].set(xscale="log", yscale="log", xlabel="N kept per head and query",
                ylabel="relative change of the layer output", title="(c) attention output")
    fig.tight_layout()
    return fig


#: matplotlib markers -> Plotly marker symbols (for the interactive twin of a figure)
_PLOTLY_SYMBOLS = {"o": "circle", "s": "square", "^": "triangle-up", "D": "diamond", "v": "triangle-down",
                   "P": "cross", "X": "x"}
#: the interactive yardstick figure's panels: (letter, x axis title, y axis title, log x, log y),
#: placed two to a row, as in :func:`yardstick_figure`
_PANELS = (("a", "L (keys visible)", "largest weight", True, True),
           ("b", "N (top-N selected)", "d̃ₙ / d̃₁", True, False),
           ("c", "N (top-N selected)", "Nₛ / N", True, False),
           ("d", "T", "mean ‖∂α/∂ℓ‖₂", True, True),
           ("e", "mean largest weight (selectivity)", "mean ‖∂α/∂ℓ‖₂", False, True))
_PANEL_TITLES = {"a": "(a) vanishing", "b": "(b) distance", "c": "(c) geometric separability",
                 "d": "(d) gradient sensitivity", "e": "(e) gradient at equal selectivity"}


def yardstick_explorer(results, keys: Sequence[str], labels: dict, dashed: Sequence[str] = (),
                       *, name: str = "alternatives-yardsticks"):
    """The interactive twin of :func:`yardstick_figure` (an
    :class:`~normlimits.core.interactive.InteractiveFigure`): the same five panels and curves, in the
    same colours and markers; a menu picks one normaliser, shown beside softmax (and the reference
    lines), or all; hovering a point names the normaliser and gives its value; clicking a legend
    entry hides or shows that normaliser in every panel."""
    from normlimits.core.interactive import InteractiveFigure, group_picker, plain_floats

    cfg = results.config
    style = normaliser_styles(keys, dashed)
    lengths = [int(n) for n in cfg.lengths]
    n_grid = [int(n) for n in cfg.n_grid]
    temps = [float(t) for t in cfg.temperatures]
    traces, groups = [], []

    def add(panel: int, key: str | None, x, y, *, label: str, hover_x: str, hover_y: str, line: dict,
            marker: dict | None = None, legend: bool = False):
        axis = "" if panel == 1 else str(panel)
        trace = {"type": "scatter", "mode": "lines+markers" if marker else "lines", "x": plain_floats(x),
                 "y": plain_floats(y), "xaxis": f"x{axis}", "yaxis": f"y{axis}", "name": label,
                 "legendgroup": label, "showlegend": legend, "line": line,
                 "hovertemplate": f"<b>{label}</b><br>{hover_x} = %{{x:.4~g}}<br>{hover_y} = %{{y:.4~g}}<extra></extra>"}
        if marker:
            trace["marker"] = marker
        traces.append(trace)
        groups.append(None if key is None or key == REFERENCE else labels[key])

    for key in keys:
        kw = style[key]
        colour = "#000000" if kw["color"] == "k" else kw["color"]
        line = {"color": colour, "width": kw["lw"] * 1.2, "dash": "dash" if kw["ls"] == "--" else "solid"}
        marker = {"symbol": _PLOTLY_SYMBOLS[kw["marker"]], "size": 6, "color": colour}
        label = labels[key]
        add(1, key, lengths, results.curve(key, "max_weight"), label=label, hover_x="L",
            hover_y="largest weight", line=line, marker=marker, legend=True)
        d = results.curve(key, "distance").numpy()
        add(2, key, n_grid, d / d[0], label=label, hover_x="N", hover_y="d̃ₙ / d̃₁", line=line, marker=marker)
        add(3, key, n_grid, results.curve(key, "separability"), label=label, hover_x="N", hover_y="Nₛ / N",
            line=line, marker=marker)
        if "jacobian" in results.stats[key]:
            add(4, key, temps, results.curve(key, "jacobian"), label=label, hover_x="T", hover_y="mean ‖J‖₂",
                line=line, marker=marker)
            add(5, key, results.curve(key, "jacobian_selectivity"), results.curve(key, "jacobian"), label=label,
                hover_x="selectivity", hover_y="mean ‖J‖₂", line=line, marker=marker)
    reference = {"color": "#000000", "width": 1}
    add(1, None, lengths, [1 / n for n in lengths], label="1/L", hover_x="L", hover_y="1/L",
        line={**reference, "dash": "dot"}, legend=True)
    add(4, None, temps, [1 / (2 * t) for t in temps], label="1/(2T)", hover_x="T", hover_y="1/(2T)",
        line={**reference, "dash": "dash"}, legend=True)
    add(4, None, temps, [1 / t for t in temps], label="1/T", hover_x="T", hover_y="1/T",
        line={**reference, "dash": "dot"}, legend=True)
    if "reference_jacobian" in results.stats.get(REFERENCE, {}):
        add(5, None, results.curve(REFERENCE, "reference_selectivity"),
            results.curve(REFERENCE, "reference_jacobian"), label=f"{labels[REFERENCE]}, finer T",
            hover_x="selectivity", hover_y="mean ‖J‖₂", line=reference, legend=True)

    columns = ((0.0, 0.44), (0.56, 1.0))
    rows = ((0.78, 1.0), (0.43, 0.65), (0.08, 0.30))          # room for each x title under its panel
    layout = {"hovermode": "closest", "margin": {"l": 60, "r": 10, "t": 60, "b": 40},
              "legend": {"x": 0.56, "xanchor": "left", "y": 0.32, "yanchor": "top", "title": {"text": "normaliser"},
                         "font": {"size": 11}},
              "template": {"layout": {"font": {"family": "sans-serif", "size": 12}}}, "annotations": []}
    for i, (letter, xtitle, ytitle, logx, logy) in enumerate(_PANELS):
        axis = "" if i == 0 else str(i + 1)
        column, row = columns[i % 2], rows[i // 2]
        layout[f"xaxis{axis}"] = {"domain": list(column), "anchor": f"y{axis}", "title": {"text": xtitle},
                                  "type": "log" if logx else "linear"}
        layout[f"yaxis{axis}"] = {"domain": list(row), "anchor": f"x{axis}", "title": {"text": ytitle},
                                  "type": "log" if logy else "linear"}
        layout["annotations"].append({"text": _PANEL_TITLES[letter], "showarrow": False, "x": sum(column) / 2,
                                      "xref": "paper", "xanchor": "center", "y": row[1], "yref": "paper",
                                      "yanchor": "bottom", "font": {"size": 13}})
    layout["xaxis"].update(tickvals=lengths, ticktext=[str(n) for n in lengths])
    for axis in ("xaxis2", "xaxis3"):
        layout[axis].update(tickvals=n_grid[::2], ticktext=[str(n) for n in n_grid[::2]])
    layout["yaxis3"]["range"] = [0, 1.05]
    order = [labels[k] for k in keys if k != REFERENCE]
    layout["updatemenus"] = [group_picker(groups, order, all_label="all normalisers", label="normaliser")]
    layout["updatemenus"][0].update(y=1.06)
    summary = (f"Interactive: the four yardsticks for {labels[REFERENCE]} and {len(order)} other normalisers; "
               f"pick one normaliser in the menu to see it beside {labels[REFERENCE]}, hover a point for its value.")
    return InteractiveFigure(name=name, figure={"data": traces, "layout": layout}, summary=summary, height=1100)
