"""Tolerances that respect the precision the values were computed in.

A comparison of floats "up to rounding" needs a slack of at least a few units of the working
precision: a relative ``1e-9`` is meaningful for float64 values (``eps = 2.2e-16``) but below the
resolution of float32 ones (``eps = 1.2e-7``), where it turns every rounding into a violation.
:func:`dtype_rtol` raises a requested relative tolerance to a multiple of the least precise
floating dtype among the values compared, and never lowers it.
"""

from __future__ import annotations

import numpy as np
import torch

__all__ = ["ROUNDING_UNITS", "working_eps", "dtype_rtol"]

#: units of the working precision's eps that a comparison of computed values allows by default:
#: a handful of roundings (each at most eps/2 relative) in the values and their bounds
ROUNDING_UNITS = 8.0


def working_eps(*values) -> float:
    """The machine epsilon of the least precise floating dtype among ``values`` (torch tensors,
    numpy arrays or numbers, torch dtypes or their names such as ``"float32"``; others are
    ignored); float64's where none is floating (Python floats are float64)."""
    eps = float(torch.finfo(torch.float64).eps)
    for value in values:
        if isinstance(value, str) and isinstance(getattr(torch, value, None), torch.dtype):
            value = getattr(torch, value)
        if isinstance(value, torch.dtype) and value.is_floating_point:
            eps = max(eps, float(torch.finfo(value).eps))
        elif isinstance(value, torch.Tensor) and value.is_floating_point():
            eps = max(eps, float(torch.finfo(value.dtype).eps))
        elif isinstance(value, (np.ndarray, np.floating)) and np.issubdtype(value.dtype, np.floating):
            eps = max(eps, float(np.finfo(value.dtype).eps))
    return eps


def dtype_rtol(rtol: float, *values, units: float = ROUNDING_UNITS) -> float:
    """``max(rtol, units * eps)``, ``eps`` of the least precise floating dtype among ``values``
    (:func:`working_eps`): the requested tolerance where the values resolve it, else the smallest
    one their dtype justifies (8 eps: 9.5e-7 for float32, 7.8e-3 for float16, 1.8e-15 for float64,
    below every tolerance the package asks for in float64)."""
    if not rtol >= 0:
        raise ValueError(f"rtol must be >= 0 (got {rtol!r}).")
    return max(float(rtol), units * working_eps(*values))
