"""Squared distances from inner products, and where they must be computed directly instead.

The metrics form ``||a - b||^2`` as ``||a||^2 + ||b||^2 - 2 <a, b>`` (one matrix product serves
every key and every N). In floating point that expansion's error is about
``(d + 2) u (||a||^2 + ||b||^2)`` (``u`` the unit roundoff, ``d`` the dimension), whatever the
distance: for near-duplicate vectors (``||a - b||`` below ~1e-8 of their norms in float64) it is
all rounding, and clamping at 0 returns 0. :func:`refine_squared` keeps the expansion where its
error bound is small against the result, ``||a - b||^2 >= GRAM_FLOOR (||a||^2 + ||b||^2)``
(relative error of the distance then at most ``(d + 2) u / GRAM_FLOOR``, 3.7e-12 for d = 64 in
float64), and recomputes every other entry from the direct difference ``a - b``. Vectors whose
squared norms underflow (below about 1e-300 in float64) are out of its scope, as of every
formula here that squares them.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

__all__ = ["GRAM_FLOOR", "refine_squared"]

#: below this fraction of ``||a||^2 + ||b||^2`` a squared distance is recomputed directly
GRAM_FLOOR = 2.0 ** -9


def refine_squared(d2: Tensor, scale: Tensor, needed: Tensor | Callable[[], Tensor] | None,
                   direct: Callable[[tuple[Tensor, ...]], Tensor]) -> Tensor:
    """Replace, in place, the entries of the squared distances ``d2`` (any shape) that the
    expansion cannot resolve.

    ``scale`` (broadcasting to ``d2``) bounds ``||a||^2 + ||b||^2`` of each entry from above;
    ``needed`` (bool, broadcasting; None: all) marks the entries that are used, or is a function
    that returns that mask, called only when some entry cannot be resolved (most calls: none).
    ``direct`` gets the index tuple of the entries to redo (as ``nonzero(as_tuple=True)`` gives it)
    and returns their squared distances from the difference of the vectors. Returns ``d2``.
    """
    delicate = d2 < scale * GRAM_FLOOR
    if not bool(delicate.any()):
        return d2
    if needed is not None:
        delicate &= needed() if callable(needed) else needed
    if bool(delicate.any()):
        index = delicate.nonzero(as_tuple=True)
        d2[index] = direct(index).to(d2.dtype)
    return d2
