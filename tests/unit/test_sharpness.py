"""Tests for the one-pass sweep behind guideline 3: Figure 4's profile and N_s/N at several T."""

from __future__ import annotations

import pytest
import torch

from normlimits.metrics import jacobian as J
from normlimits.experiments import sharpness as S
from normlimits.model.capture import iter_captures
from normlimits.metrics.separability import geometric_separability, project_to_sphere
from normlimits.experiments.separability_sweep import layer_weights


def _windows(count=2, length=40):
    return torch.randint(0, 256, (count, length), generator=torch.Generator().manual_seed(3))


def test_sharpness_sweep_equals_the_separate_measurements(tiny_loaded):
    windows = _windows()
    rows = J.default_rows(40, 10)
    temps, epss, sep_t, grid = [0.05, 1.0], [1e-3, 1.0], [0.1, 1.0], [2, 8]
    profile, sep = S.sharpness_sweep(iter_captures(tiny_loaded, windows), rows, temps, epss,
                                     separability_temperatures=sep_t, n_grid=grid, seed=4)
    # the profile is exactly sensitivity_profile on the same logits
    direct = J.sensitivity_profile((c.logits(rows) for c in iter_captures(tiny_loaded, windows)),
                                   temps, epss, seed=4)
    assert torch.equal(profile.g, direct.g) and torch.equal(profile.norm_max, direct.norm_max)
    # N_s/N is the separability module's, at the given temperature, averaged over rows then windows
    per_window = []
    for cap in iter_captures(tiny_loaded, windows):
        layers = []
        for layer in range(cap.values.shape[0]):
            w = layer_weights(cap, layer, rows, temperature=0.1)
            res = geometric_separability(w, project_to_sphere(cap.values[layer].float()), grid, rows)
            layers.append(torch.nanmean(res.fraction.double(), -2))
        per_window.append(torch.stack(layers))
    expected = torch.stack(per_window).mean(0)
    assert sep.fraction.shape == (2, 2, 4, 2) and sep.fraction_windows.shape == (2, 2, 2, 4, 2)
    assert torch.allclose(sep.fraction[0], expected, atol=1e-12)
    assert torch.allclose(sep.at(0.1), expected, atol=1e-12)
    assert sep.mean_over_heads().shape == (2, 2)
    assert bool(((sep.fraction >= 0) & (sep.fraction <= 1)).all())


def test_sharpness_sweep_errors(tiny_loaded):
    rows = J.default_rows(40, 4)
    with pytest.raises(ValueError, match="temperature"):
        S.sharpness_sweep(iter_captures(tiny_loaded, _windows(1)), rows, [1.0], [0.1],
                          separability_temperatures=[0.0], n_grid=[2])
    with pytest.raises(ValueError, match="no logit blocks|no windows"):
        S.sharpness_sweep(iter([]), rows, [1.0], [0.1], separability_temperatures=[1.0], n_grid=[2])
