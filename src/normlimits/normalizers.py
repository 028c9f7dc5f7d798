"""Attention normalisers: maps from a row of logits to a row of weights.

Every function takes ``logits`` of any shape and normalises along ``dim``; masked (causal) keys
are ``-inf`` logits and receive weight exactly 0. ``n`` is the number of visible keys where a
normaliser depends on it (length-aware ones); ``None`` means "count the finite logits along dim".
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor


def check_temperature(temperature: float) -> float:
    """Return ``temperature`` as a float, or raise a clear error when it is not positive."""
    t = float(temperature)
    if not t > 0:
        raise ValueError(f"temperature T must be > 0 (got {temperature!r}); "
                         "softmax(l/T) is undefined for T <= 0. Pass a positive T.")
    return t


def softmax_with_temperature(logits: Tensor, dim: int = -1, temperature: float = 1.0) -> Tensor:
    """Softmax at temperature T (paper Eq. 2): ``exp(l_i/T) / sum_j exp(l_j/T)``.

    Shapes: ``logits`` [..., L, ...]; output the same shape, rows along ``dim`` sum to 1.
    """
    return torch.softmax(logits / check_temperature(temperature), dim=dim)


def general_normalizer(logits: Tensor, positive_map: Callable[[Tensor], Tensor],
                       dim: int = -1) -> Tensor:
    """The paper's general normaliser (Eq. 3): ``F(l_i) / sum_j F(l_j)`` for a positive map F.

    ``positive_map`` is applied elementwise and must return positive values on finite logits;
    masked keys (``-inf`` logits) get weight 0 whatever F returns there.
    Shapes: ``logits`` [..., L, ...]; output the same shape.
    """
    finite = torch.isfinite(logits)
    values = positive_map(torch.where(finite, logits, torch.zeros_like(logits)))
    if bool((values[finite] <= 0).any()):
        raise ValueError("the map F must be positive on every finite logit (Lemma 1's assumption)")
    values = torch.where(finite, values, torch.zeros_like(values))
    return values / values.sum(dim=dim, keepdim=True)
