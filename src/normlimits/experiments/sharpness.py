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

import math
import time
from dataclasses import dataclass, replace
from typing import Iterable

import torch
from torch import Tensor

from normlimits.claims import undecided_words
from normlimits.core import bootstrap as B
from normlimits.experiments.figure4 import nearest
from normlimits.metrics.jacobian import SensitivityProfile, sensitivity_profile
from normlimits.metrics.normalizers import check_temperature
from normlimits.metrics.separability import check_n_grid, geometric_separability, project_to_sphere
from normlimits.experiments.separability_sweep import layer_weights

__all__ = ["SeparabilityAtTemperature", "sharpness_sweep", "guideline3_values", "guideline3_intervals",
           "guideline3_sentence", "guideline3_undecided_sentence"]

#: the keys of guideline 3's statistics (the claim G3's criteria)
GUIDELINE3_KEYS = ("jacobian_rise", "largest_row_rise", "separability_gain")


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
        return self.fraction[nearest(self.temperatures.numpy(), temperature)]


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


def guideline3_values(profile: SensitivityProfile, sep: SeparabilityAtTemperature, low_t: float,
                      high_t: float, counts: Tensor | None = None) -> dict[str, Tensor]:
    """Guideline 3's statistics (claim G3), from ``low_t`` against ``high_t`` (each read at the
    grid temperature closest to it on a log scale):

    - ``jacobian_rise``: the maximum over heads of the row-mean exact ``||J||_2`` at ``low_t``
      over the same at ``high_t``;
    - ``largest_row_rise``: the same ratio for the largest row's ``||J||_2``;
    - ``separability_gain``: the mean over layers, heads and N of ``N_s/N`` at ``low_t`` minus
      at ``high_t`` (NaN entries, an N no row can select, left out).

    ``counts`` None: the profile's and the sweep's own pooled values (what the ledger records).
    ``counts`` [r, W] float64: how often each of the W windows is drawn in each of r bootstrap
    resamples (:func:`normlimits.core.bootstrap.resample_counts`); the profile's per-window row
    sums and largest rows and the sweep's per-window ``N_s/N`` are pooled as the whole sweep pools
    all windows (rows summed over the drawn windows, the largest row over the drawn windows, the
    mean of ``N_s/N`` over the drawn windows where defined). Returns ``{key: Tensor [r]}`` ([1]
    for ``counts`` None).
    """
    i_lo, i_hi = (nearest(profile.temperatures.numpy(), t) for t in (low_t, high_t))
    k_lo, k_hi = (nearest(sep.temperatures.numpy(), t) for t in (low_t, high_t))
    if counts is None:
        norm = profile.norm_mean[[i_lo, i_hi]].unsqueeze(0)                        # [1, 2, *H]
        largest = profile.norm_max[[i_lo, i_hi]].unsqueeze(0)
        fraction = sep.fraction[[k_lo, k_hi]].unsqueeze(0)                          # [1, 2, L, H, G]
    else:
        if profile.norm_window_sums is None or profile.norm_window_max is None:
            raise ValueError("this profile kept no per-window Jacobian norms; compute it with "
                             "normlimits.metrics.jacobian.sensitivity_profile to resample its windows")
        counts = torch.as_tensor(counts, dtype=torch.float64)
        windows = profile.norm_window_sums.shape[0]
        if counts.dim() != 2 or counts.shape[1] != windows or sep.fraction_windows.shape[0] != windows:
            raise ValueError(f"counts must be [resamples, {windows}] for a profile and a sweep of "
                             f"{windows} windows (got {tuple(counts.shape)} and "
                             f"{sep.fraction_windows.shape[0]} sweep windows)")
        rows = counts @ profile.window_rows.double()                                # [r]
        sums = B.weighted_sum(profile.norm_window_sums[:, [i_lo, i_hi]].double(), counts)
        norm = sums / rows.reshape(-1, *([1] * (sums.dim() - 1)))
        per_window = profile.norm_window_max[:, [i_lo, i_hi]].double()             # [W, 2, *H]
        drawn = (counts > 0).reshape(*counts.shape, *([1] * (per_window.dim() - 1)))
        largest = torch.where(drawn, per_window.unsqueeze(0), -math.inf).amax(1)   # [r, 2, *H]
        x = sep.fraction_windows[:, [k_lo, k_hi]].double()                         # [W, 2, L, H, G]
        defined = ~torch.isnan(x)
        total = B.weighted_sum(torch.where(defined, x, torch.zeros_like(x)), counts)
        fraction = total / B.weighted_sum(defined.double(), counts)                 # NaN where none
    norm = norm.reshape(norm.shape[0], 2, -1).amax(-1)
    largest = largest.reshape(largest.shape[0], 2, -1).amax(-1)
    fraction = fraction.double().reshape(fraction.shape[0], 2, -1).nanmean(-1)
    return {"jacobian_rise": norm[:, 0] / norm[:, 1], "largest_row_rise": largest[:, 0] / largest[:, 1],
            "separability_gain": fraction[:, 0] - fraction[:, 1]}


def guideline3_intervals(profile: SensitivityProfile, sep: SeparabilityAtTemperature, low_t: float,
                         high_t: float, **bootstrap_settings) -> dict[str, B.Interval]:
    """Bootstrap intervals over the windows of :func:`guideline3_values` (key -> Interval), the
    resamples of every other interval over windows (same seed and count by default;
    ``bootstrap_settings`` go to :func:`normlimits.core.bootstrap.bootstrap_counts`). Empty with
    fewer than two windows or a profile without per-window norms. ``largest_row_rise`` is a ratio
    of extremes (a maximum over rows, windows and heads), which resampling biases; its interval may
    be widened to the estimate (:data:`normlimits.core.bootstrap.METHOD`)."""
    windows = 0 if profile.norm_window_sums is None else int(profile.norm_window_sums.shape[0])
    if windows < 2:
        return {}
    estimates = {k: float(v[0]) for k, v in guideline3_values(profile, sep, low_t, high_t).items()}
    return B.bootstrap_counts(windows, lambda c: guideline3_values(profile, sep, low_t, high_t, c),
                              estimates, **bootstrap_settings)


def guideline3_sentence(values: dict[str, float], intervals: dict[str, B.Interval]) -> str:
    """The chapter's sentence on G3's intervals (:func:`guideline3_intervals`), or why there are
    none."""
    if not intervals:
        return ("With a single window there is nothing to resample: G3 is graded on its values and "
                "carries no interval.")
    first = next(iter(intervals.values()))
    shown = {"jacobian_rise": ("the row-mean norm's rise", ".2f"),
             "largest_row_rise": ("the largest row's", ".2f"),
             "separability_gain": ("the change in N_s/N", "+.4f")}
    parts = [f"{words} {values[k]:{fmt}} [{intervals[k].low:{fmt}}, {intervals[k].high:{fmt}}]"
             for k, (words, fmt) in shown.items() if k in intervals]
    return (f"Resampling the {first.n} windows ({first.resamples:,} bootstrap resamples, each "
            f"pooling its windows' rows as the sweep pools all of them) gives {B.level_words(first)}: "
            f"{'; '.join(parts)}.")


def guideline3_undecided_sentence(profile: SensitivityProfile, sep: SeparabilityAtTemperature,
                                  low_t: float, high_t: float, intervals: dict[str, B.Interval]) -> str:
    """For every undecided criterion of G3 when it is inconclusive (issue 31 item 3): its interval
    on all windows and on the first half of them, and roughly how many windows would decide it
    (:func:`normlimits.claims.undecided_words`); a sentence saying so when G3 is decided."""
    values = {k: float(v[0]) for k, v in guideline3_values(profile, sep, low_t, high_t).items()}
    half = 0 if profile.norm_window_sums is None else int(profile.norm_window_sums.shape[0]) // 2
    half_intervals = {}
    if half >= 2:
        first = replace(profile, norm_window_sums=profile.norm_window_sums[:half],
                        norm_window_max=profile.norm_window_max[:half],
                        window_rows=profile.window_rows[:half])
        first_sep = replace(sep, fraction_windows=sep.fraction_windows[:half])
        half_intervals = guideline3_intervals(first, first_sep, low_t, high_t)
    parts = undecided_words({"G3": values}, {"G3": intervals}, {"G3": half_intervals},
                            on_threshold="a ratio of two grid points", digits=4)
    return ("How many windows would decide it: " + "; ".join(parts) + "." if parts
            else "G3 is decided by its intervals.")
