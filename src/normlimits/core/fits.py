"""The book's one log-log fit, and the fit of a line through the origin.

Every scaling law the chapters report (the largest weight against ``L``, distances against ``L``,
the Jacobian against ``T``, the cost of a workload against its size, the critical ``N`` against
``L``) is fitted here, so that "exponent" means the same thing on every page:

    log y = log prefactor + exponent * log x      (ordinary least squares in log-log)

over the points with ``low <= x <= high``, ``x > 0`` and ``y > 0`` finite. An exponent of -1 is a
``1/x`` law, 0 is flat, 1 is linear.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

__all__ = ["LogLogFit", "loglog_fit", "slope_through_origin"]


@dataclass(frozen=True)
class LogLogFit:
    """A power law ``y = prefactor * x ** exponent`` fitted in log-log.

    ``exponent`` and ``log_prefactor`` are float64 tensors of the leading shape of ``y`` (0-d for a
    single curve; ``float(fit.exponent)`` then works); NaN where fewer than ``min_points`` points
    were usable. ``points`` counts the usable points per curve (same shape).
    """

    exponent: Tensor
    log_prefactor: Tensor
    points: Tensor

    @property
    def prefactor(self) -> Tensor:
        return self.log_prefactor.exp()

    def predict(self, x) -> Tensor:
        """``prefactor * x ** exponent`` for ``x`` [G] -> [..., G]."""
        lx = torch.log(torch.as_tensor(x, dtype=torch.float64))
        return torch.exp(self.log_prefactor[..., None] + self.exponent[..., None] * lx)


def _as_float64(values) -> Tensor:
    if isinstance(values, Tensor):
        return values.detach().to(torch.float64).cpu()
    return torch.as_tensor(np.array(values, dtype=np.float64))   # a copy: pandas arrays are read-only


def loglog_fit(x, y, *, low: float | None = None, high: float | None = None,
               min_points: int = 2) -> LogLogFit:
    """Least-squares fit of ``log y`` against ``log x`` along the last dimension of ``y``.

    Args:
        x: ``[G]`` abscissae (positive where used), at least two distinct values.
        y: ``[..., G]`` ordinates; points with ``y <= 0`` or non-finite ``y`` are left out of
            their own curve (so one curve's gap does not move another curve's fit).
        low, high: keep only ``low <= x <= high`` (inclusive, up to 1e-9 relative).
        min_points: curves with fewer usable points get NaN.

    Returns a :class:`LogLogFit` whose tensors have ``y``'s leading shape.
    """
    xs = _as_float64(x).reshape(-1)
    ys = _as_float64(y)
    if ys.shape[-1] != xs.numel():
        raise ValueError(f"x has {xs.numel()} points but y's last dimension has {ys.shape[-1]}; "
                         "pass one y per x along the last dimension")
    use = (xs > 0) & torch.isfinite(xs)
    if low is not None:
        use &= xs >= low * (1 - 1e-9)
    if high is not None:
        use &= xs <= high * (1 + 1e-9)
    if torch.unique(xs[use]).numel() < 2:
        raise ValueError(f"a log-log fit needs at least two distinct positive x in range "
                         f"(got x = {xs.tolist()}, low = {low}, high = {high})")
    mask = use & (ys > 0) & torch.isfinite(ys)                               # [..., G]
    m = mask.to(torch.float64)
    lx = torch.log(torch.where(use, xs, torch.ones_like(xs)))
    ly = torch.log(torch.where(mask, ys, torch.ones_like(ys)))
    count = m.sum(-1)
    safe = count.clamp_min(1)
    mx = (m * lx).sum(-1) / safe
    my = (m * ly).sum(-1) / safe
    dx = (lx - mx[..., None]) * m
    sxx = (dx * dx).sum(-1)
    exponent = (dx * (ly - my[..., None])).sum(-1) / sxx.where(sxx > 0, torch.ones_like(sxx))
    intercept = my - exponent * mx
    bad = (count < min_points) | (sxx <= 0)
    nan = torch.full_like(exponent, float("nan"))
    return LogLogFit(exponent=torch.where(bad, nan, exponent),
                     log_prefactor=torch.where(bad, nan, intercept), points=count.long())


def slope_through_origin(x, y) -> float:
    """Least-squares slope ``c`` of ``y = c * x`` (a line through the origin), over finite pairs.

    NaN when no pair is usable. Used for "critical N is about c * L".
    """
    xs, ys = _as_float64(x).reshape(-1), _as_float64(y).reshape(-1)
    if xs.shape != ys.shape:
        raise ValueError(f"x {tuple(xs.shape)} and y {tuple(ys.shape)} must have the same length")
    keep = torch.isfinite(xs) & torch.isfinite(ys)
    den = float((xs[keep] * xs[keep]).sum())
    return float((xs[keep] * ys[keep]).sum()) / den if den > 0 else math.nan
