"""Figure 3 and the 80% cap layer by layer: exact duplicate value vectors (Assumption 2's
delta = 0), the statistics without layer 0 beside the full ones, and the heads above the cap.

Assumption 2 of the paper asks that a head's vectors be pairwise at least delta > 0 apart. A value
vector that equals another key's exactly (the same token in a layer whose values depend on the
token alone, such as layer 0 of a model with rotary positions, which enter the queries and keys
only) makes delta = 0 for that head and window. :func:`duplicate_share` measures, per head, the
share of a window's keys whose value vector has an exact copy among the window's other keys;
:func:`layer_table` gives it per layer with the heads' delta and N_s/N. :func:`layer_zero_apart`
recomputes Figure 3's and S80's statistics without layer 0, and :func:`heads_above` names the
heads whose N_s/N exceeds the cap at some N past the knee. Inputs: the capture's values and a
:class:`~normlimits.experiments.separability_sweep.SeparabilitySweep`; nothing is measured again.
"""

from __future__ import annotations

from typing import Iterable

import numpy as np
import torch
from torch import Tensor

from normlimits.experiments.separability_curves import F3_KEYS, figure3_statistics
from normlimits.metrics.separability import distinct_heads

__all__ = ["S80_CAP", "duplicate_share", "layer_duplicates", "layer_table", "after_knee",
           "s80_statistics", "layer_zero_apart", "heads_above", "exceedance_words"]

#: paper, Section 3.2: "no more than approximately 80%" of the selected tokens are distinguishable
S80_CAP = 0.80


def duplicate_share(values: Tensor) -> Tensor:
    """The share of the ``L`` rows of each ``[L, d]`` slice of ``values`` [..., L, d] that equal
    another row of the same slice exactly (every coordinate; +0 and -0 are equal, NaN equals
    nothing), float64 [...]. One exact ``torch.unique`` over the rows of all slices at once (each
    row tagged with its slice's index, in float64, which holds float32 and bfloat16 exactly)."""
    if values.dim() < 2:
        raise ValueError(f"expected values [..., L, d]; got shape {tuple(values.shape)}")
    *batch, length, dim = values.shape
    if length == 0:
        raise ValueError("a slice with no rows has no duplicate share")
    rows = values.reshape(-1, length, dim).to(torch.float64) + 0.0        # -0 -> +0
    slices = rows.shape[0]
    tag = torch.arange(slices, dtype=torch.float64).repeat_interleave(length)[:, None]
    flat = torch.cat([tag, rows.reshape(-1, dim)], dim=1)
    _, inverse, counts = torch.unique(flat, dim=0, return_inverse=True, return_counts=True)
    duplicated = (counts[inverse] > 1).reshape(slices, length)
    duplicated &= ~torch.isnan(rows).any(-1)                               # NaN rows are unique
    return duplicated.double().mean(-1).reshape(batch)


def layer_duplicates(captures: Iterable) -> Tensor:
    """:func:`duplicate_share` of each head's value vectors in each window, averaged over the
    windows: float64 [layers, heads] (captures: ``values`` [layers, heads, L, d] per window).
    Grouped-query copies of a key/value head (adjacent, bit-identical) are measured once
    (:func:`~normlimits.metrics.separability.distinct_heads`)."""
    total, count = None, 0
    for capture in captures:
        values = capture.values
        share = torch.stack([duplicate_share(distinct)[group] for distinct, group in
                             (distinct_heads(values[layer]) for layer in range(values.shape[0]))])
        total = share if total is None else total + share
        count += 1
    if count == 0:
        raise ValueError("no captures: pass at least one window")
    return total / count


def after_knee(per_head, n_grid, knee: int) -> np.ndarray:
    """The per-head N_s/N at N >= ``knee``: ``per_head`` [heads, G] -> [heads, G']."""
    grid = np.asarray(n_grid)
    if not (grid >= knee).any():
        raise ValueError(f"no N of the grid {grid.tolist()} is >= the knee {knee}")
    return np.asarray(per_head, dtype=np.float64)[:, grid >= knee]


def s80_statistics(per_head, n_grid, knee: int, cap: float = S80_CAP) -> dict:
    """S80's numbers from per-head means ``per_head`` [heads, G]: ``largest_head`` (the largest
    value at N >= knee), ``share_above`` (of the (head, N >= knee) values above ``cap``),
    ``median_head_largest`` (the median over heads of each head's largest value at N >= knee) and
    ``median_head_level`` (the median over heads of each head's mean over N >= knee)."""
    after = after_knee(per_head, n_grid, knee)
    return {"largest_head": float(after.max()), "share_above": float((after > cap).mean()),
            "median_head_largest": float(np.median(after.max(1))),
            "median_head_level": float(np.median(after.mean(1)))}


def layer_zero_apart(sweep, *, tolerance: float, knee: int, cap: float = S80_CAP, drop=(0,)):
    """F3's rule numbers (:data:`~normlimits.experiments.separability_curves.F3_KEYS`, every query
    position) and :func:`s80_statistics` on the value vectors, over every layer and without the
    layers ``drop``: a DataFrame, one column each, one row per statistic."""
    import pandas as pd

    fraction = sweep.fraction["values"].numpy()                  # [layers, heads, G]
    upper = sweep.upper_exponential["values"].numpy()
    layers = fraction.shape[0]
    keep = [layer for layer in range(layers) if layer not in set(drop)]
    if not keep or len(keep) == layers:
        raise ValueError(f"drop={tuple(drop)} must leave some of the {layers} layers out, not all")
    grid = np.asarray(sweep.n_grid)
    columns = {}
    for label, chosen in (("every layer", list(range(layers))),
                          ("without layer " + ", ".join(str(d) for d in drop), keep)):
        heads = fraction[chosen].reshape(-1, grid.size)
        f3 = figure3_statistics(grid, heads, upper[chosen].reshape(-1, grid.size), tolerance)
        columns[label] = {**{k: float(f3[k]) for k in F3_KEYS}, **s80_statistics(heads, grid, knee, cap),
                          "heads": float(heads.shape[0])}
    return pd.DataFrame(columns)


def layer_table(sweep, duplicates: Tensor, *, knee: int):
    """Per layer: the share of keys with an exact duplicate value vector (``duplicates``
    [layers, heads], :func:`layer_duplicates`; mean over heads), the share of (window, head)
    pairs whose exact minimum pairwise distance delta on the sphere is 0 (``sweep.delta``), and
    the median and largest head's mean N_s/N over N >= ``knee``: a DataFrame indexed by layer."""
    import pandas as pd

    fraction = sweep.fraction["values"].numpy()
    grid = np.asarray(sweep.n_grid)
    if tuple(duplicates.shape) != fraction.shape[:2]:
        raise ValueError(f"duplicates has shape {tuple(duplicates.shape)}; the sweep's heads are "
                         f"{fraction.shape[:2]}")
    delta_zero = (sweep.delta["values"] == 0).double().mean(0)          # [layers, heads]
    level = np.stack([after_knee(f, grid, knee).mean(1) for f in fraction])   # [layers, heads]
    return pd.DataFrame({"keys duplicated": duplicates.double().mean(1).numpy(),
                         "heads with delta = 0": delta_zero.mean(1).numpy(),
                         f"median head, N >= {knee}": np.median(level, 1),
                         f"largest head, N >= {knee}": level.max(1)},
                        index=pd.Index(range(fraction.shape[0]), name="layer"))


def heads_above(sweep, *, knee: int, cap: float = S80_CAP):
    """The heads whose N_s/N (value vectors, every query position) exceeds ``cap`` at some
    N >= ``knee``, largest first: a DataFrame with the layer, the head, the largest value, the N
    where it is reached and the head's mean over N >= knee."""
    import pandas as pd

    fraction = sweep.fraction["values"].numpy()
    layers, heads, size = fraction.shape
    grid = np.asarray(sweep.n_grid)
    after = after_knee(fraction.reshape(-1, size), grid, knee)
    largest = after.max(1)
    order = [i for i in np.argsort(-largest, kind="stable") if largest[i] > cap]
    return pd.DataFrame({"layer": [int(i // heads) for i in order], "head": [int(i % heads) for i in order],
                         "largest N_s/N": largest[order],
                         "at N": [int(grid[grid >= knee][after[i].argmax()]) for i in order],
                         f"mean over N >= {knee}": after[order].mean(1)})


def exceedance_words(table, stats, *, cap: float = S80_CAP, high: float = 0.85, heads: int,
                     knee: int, apart: int = 0) -> str:
    """S80's exceedance in words (plain text, for glue), from :func:`heads_above`'s ``table`` (all
    heads above ``cap``) and :func:`s80_statistics`' ``stats`` over all ``heads`` heads: how many
    heads exceed ``cap`` and ``high``, how many of them outside layer ``apart``, the largest
    inside and outside it, and the median head's level."""
    outside = table[table["layer"] != apart]
    def name(row):
        return f"layer {int(row['layer'])} head {int(row['head'])} ({row['largest N_s/N']:.3f} at N = {int(row['at N'])})"
    text = (f"{len(table)} of {heads} heads exceed {cap:.2f} at some N >= {knee} ({len(outside)} of them "
            f"outside layer {apart}), {int((table['largest N_s/N'] > high).sum())} exceed {high:.2f} "
            f"({int((outside['largest N_s/N'] > high).sum())} outside layer {apart})")
    if len(table):
        text += f"; the largest is {name(table.iloc[0])}"
    if len(outside) and (not len(table) or outside.index[0] != table.index[0]):
        text += f", the largest outside layer {apart} {name(outside.iloc[0])}"
    return (text + f". The median head's largest N_s/N at N >= {knee} is "
            f"{stats['median_head_largest']:.3f}, its mean over those N {stats['median_head_level']:.3f}.")
