"""Top-N selection with a stated rule for ties (the book's one definition of I_N).

The paper's I_N holds "the indices of the N largest weights". When weights tie at the boundary of
the top-N set (exact zeros of a sparse normaliser, or float underflow), the set is not defined by
the weights alone, and the choice changes the context vector s, the distance d~ and N_s on that
row. The book's rule: **among equal weights, the earlier key (the lower position) ranks first.**

``torch.topk`` does not promise any order among equal values, so :func:`top_n` uses it only where
the first ``k + 1`` sorted weights of a row contain no tie, and a stable descending sort (which
keeps equal weights in key order) on the rows that do: exact, deterministic, and as fast as
``topk`` on rows without ties.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["top_n"]


def top_n(weights: Tensor, k: int) -> tuple[Tensor, Tensor]:
    """The ``k`` largest entries of each row of ``weights`` [..., L], in the book's order.

    Returns ``(values, indices)``, each [..., k], sorted by weight descending, ties by index
    ascending. ``1 <= k <= L``.
    """
    length = weights.shape[-1]
    if not 1 <= k <= length:
        raise ValueError(f"top-N size k = {k} must lie in 1..L = {length}")
    probe = min(k + 1, length)
    values, indices = torch.topk(weights, probe, dim=-1)
    tied = (values[..., 1:] == values[..., :-1]).any(-1)                      # [...]
    if bool(tied.any()):
        rows = weights[tied]                                                   # [r, L]
        v, i = torch.sort(rows, dim=-1, descending=True, stable=True)
        values[tied] = v[..., :probe]
        indices[tied] = i[..., :probe]
    return values[..., :k], indices[..., :k]
