"""What a sharper softmax buys and what it costs, measured in one pass over the windows.

The paper's guideline 3 says that pushing the temperature below 0.1 "raises Jacobian norms
without improving separability". Both halves are measured here on the same windows and query
rows: the Jacobian side by :func:`normlimits.metrics.jacobian.sensitivity_profile` (Figure 4's
finite differences and the exact spectral norms), the separability side by the separability
chapter's own functions (:func:`normlimits.experiments.separability_sweep.layer_weights` at temperature T,
:func:`normlimits.metrics.separability.geometric_separability` on the head's value vectors projected
to the unit sphere), so N_s/N means exactly what it means in Figure 3.

Shapes: ``layers``, ``heads`` of the model; ``G`` the N grid; ``nT`` the separability
temperatures.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

import torch
from torch import Tensor

from normlimits.metrics.jacobian import SensitivityProfile, sensitivity_profile
from normlimits.metrics.normalizers import check_temperature
from normlimits.metrics.separability import check_n_grid, geometric_separability, project_to_sphere
from normlimits.experiments.separability_sweep import layer_weights

__all__ = ["SeparabilityAtTemperature", "sharpness_sweep"]


@dataclass
class SeparabilityAtTemperature:
    """N_s/N of the value vectors (on the unit sphere) with weights ``softmax(l / T)``.

    ``fraction``: [nT, layers, heads, G], mean over windows of the mean over the rows where N_s is
    defined (rows that see more than N keys); ``fraction_windows``: [W, nT, layers, heads, G];
    ``temperatures`` [nT]; ``n_grid`` [G]; ``seconds``: time spent on it.
    """

    temperatures: Tensor
    n_grid: Tensor
    fraction: Tensor
    fraction_windows: Tensor
    seconds: float = 0.0

    def mean_over_heads(self) -> Tensor:
        """[nT, G]: the mean over layers and heads."""
        return self.fraction.reshape(self.fraction.shape[0], -1, self.fraction.shape[-1]).mean(1)

    def at(self, temperature: float) -> Tensor:
        """[layers, heads, G] at the grid temperature closest to ``temperature`` (log scale)."""
        k = int((self.temperatures.log() - torch.log(torch.tensor(float(temperature)))).abs().argmin())
        return self.fraction[k]


class _SeparabilityAccumulator:
    def __init__(self, temperatures, n_grid, rows: Tensor, radius: float):
        self.temperatures = torch.as_tensor([check_temperature(t) for t in temperatures],
                                            dtype=torch.float64)
        if self.temperatures.numel() == 0:
            raise ValueError("at least one separability temperature is needed")
        self.n_grid = n_grid
        self.rows = rows
        self.radius = radius
        self.windows: list[Tensor] = []
        self.seconds = 0.0
        self.grid: Tensor | None = None

    def add(self, cap) -> None:
        start = time.perf_counter()
        n_layers = cap.values.shape[0]
        if self.grid is None:
            self.grid = check_n_grid(self.n_grid, cap.values.shape[-2])
        per_t = []
        for t in self.temperatures.tolist():
            layers = []
            for layer in range(n_layers):
                vectors = project_to_sphere(cap.values[layer].float(), self.radius)
                weights = layer_weights(cap, layer, self.rows, temperature=t)
                res = geometric_separability(weights, vectors, self.grid, self.rows)
                layers.append(torch.nanmean(res.fraction.double(), dim=-2))      # [heads, G]
            per_t.append(torch.stack(layers))                                      # [layers, heads, G]
        self.windows.append(torch.stack(per_t))                                    # [nT, layers, heads, G]
        self.seconds += time.perf_counter() - start

    def result(self) -> SeparabilityAtTemperature:
        if not self.windows:
            raise ValueError("no windows were captured (need at least one)")
        stacked = torch.stack(self.windows)
        return SeparabilityAtTemperature(self.temperatures, self.grid, torch.nanmean(stacked, 0),
                                         stacked, self.seconds)


def sharpness_sweep(captures: Iterable, rows, temperatures, epsilons, *, separability_temperatures,
                    n_grid, seed: int = 0, sphere_radius: float = 1.0,
                    ) -> tuple[SensitivityProfile, SeparabilityAtTemperature]:
    """Figure 4's profile and N_s/N at ``separability_temperatures``, one capture per window.

    Args:
        captures: iterable of window captures (``ctx.captures(L)``), each consumed once.
        rows: query positions [R] used by both measurements.
        temperatures, epsilons: Figure 4's grids (:func:`normlimits.metrics.jacobian.sensitivity_profile`).
        separability_temperatures: the T at which N_s/N is measured.
        n_grid: the N values of N_s/N (each below the window length).

    Returns ``(profile, separability)``; ``profile.seconds`` covers the whole sweep (forward
    passes included), ``separability.seconds`` the N_s/N part alone.
    """
    start = time.perf_counter()
    rows = torch.as_tensor(rows, dtype=torch.long).reshape(-1)
    sep = _SeparabilityAccumulator(separability_temperatures, n_grid, rows, sphere_radius)

    def blocks():
        for cap in captures:
            sep.add(cap)
            yield cap.logits(rows)

    profile = sensitivity_profile(blocks(), temperatures, epsilons, seed=seed)
    profile.seconds = time.perf_counter() - start
    profile.extra["row_positions"] = rows
    return profile, sep.result()
