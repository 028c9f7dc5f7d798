"""The sweep over a model's windows (normlimits.experiments.separability_sweep) and the statistics of its
curves (normlimits.experiments.separability_curves)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normlimits.core.bootstrap import resample_indices
from normlimits.metrics import separability as S
from normlimits.experiments import separability_curves as C
from normlimits.experiments import separability_sweep as SW
from normlimits.model.capture import WindowCapture
from normlimits.metrics.multihead import head_sharing

GRID = [1, 2, 4, 8]


def fake_capture(seed, layers=2, heads=3, length=40, dim=5, width=8):
    gen = torch.Generator().manual_seed(seed)
    return WindowCapture(queries=2 * torch.randn(layers, heads, length, dim, generator=gen),
                         keys=torch.randn(layers, heads, length, dim, generator=gen),
                         values=torch.randn(layers, heads, length, dim, generator=gen),
                         hidden=torch.randn(layers, length, width, generator=gen),
                         scale=torch.full((layers,), dim**-0.5))


def direct(caps, rows=None, kind="values", temperature=1.0):
    """Per-head mean N_s/N over windows and rows, one window and layer at a time."""
    per_window = []
    for cap in caps:
        layers = []
        for layer in range(cap.values.shape[0]):
            w = SW.layer_weights(cap, layer, rows, temperature=temperature,
                                 dtype=torch.float64 if temperature != 1.0 else None)
            x = S.project_to_sphere(cap.values[layer].float()) if kind == "values" else \
                S.project_to_sphere(cap.hidden[layer].float())[None]
            res = S.geometric_separability(w, x, GRID, rows)
            layers.append(torch.nanmean(res.fraction.double(), dim=-2))
        per_window.append(torch.stack(layers))
    return torch.stack(per_window).mean(0)


def test_layer_weights_match_capture():
    cap = fake_capture(20)
    rows = torch.tensor([0, 7, 39])
    for layer in range(2):
        assert torch.allclose(SW.layer_weights(cap, layer, rows), cap.weights(rows)[layer], atol=1e-6)
        assert torch.allclose(SW.layer_weights(cap, layer), cap.weights()[layer], atol=1e-6)
        w64 = SW.layer_weights(cap, layer, rows, dtype=torch.float64)
        assert w64.dtype == torch.float64 and torch.allclose(w64.float(), cap.weights(rows)[layer], atol=1e-6)


def test_sweep_matches_direct_computation():
    caps = [fake_capture(21), fake_capture(22)]
    spaced = [5, 12, 20, 39]
    sw = SW.separability_sweep(caps, GRID, kinds=SW.VECTOR_KINDS, kind_rows={"hidden": [9, 30, 39]},
                               subsets={"spaced": spaced, "last": [39]})
    assert sw.windows == 2 and sw.kinds == SW.VECTOR_KINDS
    assert torch.allclose(sw.fraction["values"], direct(caps))
    assert torch.allclose(sw.fraction["hidden"], direct(caps, torch.tensor([9, 30, 39]), kind="hidden"))
    assert torch.allclose(sw.subsets["spaced"]["fraction"], direct(caps, torch.tensor(spaced)))
    assert torch.allclose(sw.subsets["last"]["fraction"], direct(caps, torch.tensor([39])))
    assert sw.rows["hidden"].tolist() == [9, 30, 39] and sw.rows["values"].numel() == 40
    for kind in ("values", "hidden", "uniform"):
        assert sw.sure_violations[kind] == 0 and sw.rows_checked[kind] > 0
        assert sw.lower[kind].shape == (2, 3, 4) and sw.delta[kind].shape == (2, 2, 3)
        assert torch.all(sw.lower_markov[kind] <= sw.lower[kind] + 1e-12)
        assert torch.all(sw.upper[kind] <= sw.upper_exponential[kind] + 1e-12)
        assert torch.all(sw.alignment[kind].abs() <= 1)
    assert "raw_values" not in sw.lower  # not on a sphere: no bounds
    assert sw.stderr["values"].shape == (2, 3, 4) and torch.all(sw.stderr["values"][..., 1:] > 0)
    assert sw.metric_seconds > 0 and sw.forward_seconds >= 0 and "ns_values" in sw.seconds


def test_sweep_delta_is_each_heads_minimum_distance():
    cap = fake_capture(23)
    sw = SW.separability_sweep([cap], GRID)
    for layer in range(2):
        x = S.project_to_sphere(cap.values[layer].float())
        assert torch.equal(sw.delta["values"][0, layer], S.min_pairwise_distance_reference(x))


def test_detail_rows_bounds_multihead_entropy():
    caps = [fake_capture(24), fake_capture(25)]
    detail = [10, 20, 30, 39]
    sw = SW.separability_sweep(caps, GRID, subsets={"spaced": detail}, detail_rows=detail,
                               head_sets=(2, None), entropy=True)
    assert sw.head_sets == (2, 3)
    # bounds on the detail rows only: the subset's upper bound is the upper bound itself
    assert torch.allclose(sw.subsets["spaced"]["upper"], sw.upper["values"], equal_nan=True)
    # multi-head means against head_sharing on the same rows, one window at a time
    rows = torch.tensor(detail)
    own = []
    for cap in caps:
        per_layer = []
        for layer in range(2):
            res = S.geometric_separability(SW.layer_weights(cap, layer, rows),
                                           S.project_to_sphere(cap.values[layer].float()), GRID, rows,
                                           keep_selection=True)
            share = head_sharing(res, (2, None))
            per_layer.append(torch.nanmean(share.coverage[2], dim=1))
        own.append(torch.stack(per_layer))
    assert torch.allclose(sw.sharing["coverage_2"], torch.stack(own).mean(0), atol=1e-12)
    assert sw.rank_hits.shape == (2, 3, 4, 8) and sw.rank_rows.tolist() == [8.0, 8.0, 8.0, 8.0]
    # entropy: the mean over the detail rows of H(row) / log(t + 1)
    ent = []
    for cap in caps:
        w = torch.stack([SW.layer_weights(cap, layer, rows) for layer in range(2)]).double()
        h = -(w * w.clamp_min(1e-300).log()).sum(-1) / torch.log(rows.double() + 1)
        ent.append(h.mean(-1))
    assert torch.allclose(sw.entropy, torch.stack(ent).mean(0), atol=1e-6)
    assert torch.all((sw.entropy > 0) & (sw.entropy <= 1 + 1e-9))


def test_temperatures():
    caps = [fake_capture(26)]
    rows = [12, 25, 39]
    sw = SW.separability_sweep(caps, GRID, temperatures=(0.5, 1.0), temperature_rows=rows)
    assert torch.allclose(sw.temperature[0.5], direct(caps, torch.tensor(rows), temperature=0.5))
    assert torch.allclose(sw.temperature[1.0], direct(caps, torch.tensor(rows)), atol=1e-12)
    assert sw.underflow[0.5] == 0.0
    cold = SW.separability_sweep(caps, GRID, temperatures=(1e-4,), temperature_rows=rows)
    assert cold.underflow[1e-4] > 0.5  # at T = 1e-4 the 8th weight underflows in float64
    assert sw.below_float32[0.5] == 0.0 and cold.below_float32[1e-4] >= cold.underflow[1e-4]
    for temp in (0.05, 0.02):               # the 8th weight of each (layer, head, row) from the logits
        share = SW.separability_sweep(caps, GRID, temperatures=(temp,), temperature_rows=rows).below_float32[temp]
        kth = torch.cat([SW.layer_weights(caps[0], layer, torch.tensor(rows), temperature=temp,
                                          dtype=torch.float64).topk(GRID[-1], -1).values[..., -1]
                         for layer in range(2)])
        assert share == float((kth < 2.0 ** -126).double().mean()), temp
    assert 0 < share < 1, "the case does not separate the two sides of float32's range"


def test_sweep_errors():
    cap = fake_capture(27)
    with pytest.raises(ValueError, match="unknown vector kind"):
        SW.separability_sweep([cap], [1, 2], kinds=("keys",))
    with pytest.raises(ValueError, match="'values'"):
        SW.separability_sweep([cap], [1, 2], kinds=("hidden",), head_sets=(2,))
    with pytest.raises(ValueError, match="no captures"):
        SW.separability_sweep([], [1, 2])
    with pytest.raises(ValueError, match="1..L-1"):
        SW.separability_sweep([cap], [1, 40])
    with pytest.raises(ValueError, match="kind_rows"):
        SW.separability_sweep([cap], [1, 2], kind_rows={"hidden": [3]})
    with pytest.raises(ValueError, match="subset"):
        SW.separability_sweep([cap], [1, 2], rows=[5, 9], subsets={"x": [7]})
    with pytest.raises(ValueError, match="temperatures"):
        SW.separability_sweep([cap], [1, 2], temperatures=(0.0,))
    with pytest.raises(ValueError, match="positions"):
        SW.separability_sweep([cap], [1, 2], rows=[40])


# ----------------------------------------------------------------------- curves
def test_plateau_recovers_a_hinge():
    grid = [1, 2, 4, 8, 16, 32, 64, 128]
    x = torch.log2(torch.tensor(grid, dtype=torch.float64))
    curve = 0.8 - 0.06 * (x - 4).clamp(max=0) + 0.0 * (x - 4).clamp(min=0)
    curve[0] = 1.0
    fit = C.plateau(grid, curve)
    assert fit.n_stop == 16 and fit.saturated and fit.rms < 1e-9
    assert math.isclose(fit.slope_before, -0.06, abs_tol=1e-9) and math.isclose(fit.value, 0.8)
    falling = 1.0 - 0.05 * x
    assert not C.plateau(grid, falling).saturated
    with pytest.raises(ValueError, match="same length"):
        C.plateau(grid, curve[:-1])
    with pytest.raises(ValueError, match="at least 4"):
        C.plateau([1, 2, 4], [1.0, 0.9, 0.8])
    with pytest.raises(ValueError, match="NaN"):
        C.plateau(grid, torch.cat([curve[:-1], torch.tensor([float("nan")])]))


def _noisy_hinges(count, seed=1):
    """``count`` noisy hinge curves on the grid 1, 2, ..., 2048 (N = 1 at 1)."""
    rng = np.random.default_rng(seed)
    grid = [1] + [2 ** k for k in range(1, 12)]
    for _ in range(count):
        knee = int(rng.integers(2, 10))
        yield grid, np.concatenate([[1.0], 0.9 - 0.03 * np.minimum(np.arange(11), knee)
                                    + rng.normal(0, 0.01, 11)])


def test_hinge_fits_are_the_least_squares_solution_at_every_breakpoint():
    """The closed form of the normal equations against numpy's SVD-based least squares."""
    for grid, curve in _noisy_hinges(40):
        x = torch.log2(torch.tensor(grid[1:], dtype=torch.float64))
        y = torch.tensor(curve[1:])
        coef, sse = C._hinge_fits(x, y)
        for b in range(1, len(x) - 1):
            dx = (x - x[b]).numpy()
            design = np.stack([np.ones_like(dx), np.minimum(dx, 0), np.maximum(dx, 0)], axis=1)
            want, *_ = np.linalg.lstsq(design, y.numpy(), rcond=None)
            np.testing.assert_allclose(coef[b - 1].numpy(), want, rtol=0, atol=1e-12)
            assert math.isclose(float(sse[b - 1]), float(((design @ want - y.numpy()) ** 2).sum()),
                                rel_tol=1e-9, abs_tol=1e-15)


def test_plateau_bits_do_not_depend_on_where_the_curve_lies_in_memory():
    """The same curve at 16 offsets in a buffer, with the heap disturbed in between, gives the
    same fit to the last bit (torch.linalg.lstsq, the previous solver, failed this for every one
    of these curves on this machine: the audit's results hash then depended on the heap)."""
    rng = np.random.default_rng(2)
    for grid, curve in _noisy_hinges(20):
        fits = []
        for offset in range(16):
            buffer = np.empty(len(curve) + 16)
            placed = buffer[offset:offset + len(curve)]
            placed[:] = curve
            heap = [torch.empty(int(rng.integers(1, 5000)), dtype=torch.float64)
                    for _ in range(offset)]
            fits.append(C.plateau(grid, placed))
            del heap
        assert all(fit == fits[0] for fit in fits)


def test_head_plateaus_and_monitor():
    grid = np.array([1, 2, 4, 8, 16, 32, 64, 128])
    x = np.log2(grid)
    levels = np.array([0.75, 0.72, 0.5, 0.9])
    heads = np.stack([np.where(x < 4, lv + 0.05 * (4 - x), lv) for lv in levels])
    heads[3] = 1.0 - 0.05 * x  # still falling: not saturated
    heads[:, 0] = 1.0
    fits = C.head_plateaus(grid, heads)
    assert fits["saturated"].tolist() == [True, True, True, False]
    entropy = np.array([0.3, 0.4, 0.9, 0.1])
    mon = C.monitor_statistics(grid, heads, entropy, band=(0.70, 0.80), knee=16)
    assert mon["saturated"] == 3 and mon["in_band_saturated"] == 2
    assert math.isclose(mon["band_share"], 2 / 3)
    assert mon["entropy_rank"] < 0  # more entropy, less separability
    none = C.monitor_statistics(grid, heads[3:], entropy[3:], band=(0.7, 0.8), knee=16)
    assert math.isnan(none["band_share"]) and math.isnan(none["entropy_rank"])
    with pytest.raises(ValueError, match="knee"):
        C.monitor_statistics(grid, heads, entropy, band=(0.7, 0.8), knee=12)


def test_spearman_and_temperature_trend():
    assert math.isclose(C.spearman([1, 2, 3, 4], [10, 20, 30, 40]), 1.0)
    assert math.isclose(C.spearman([1, 2, 3, 4], [4, 3, 2, 1]), -1.0)
    assert math.isnan(C.spearman([1, 2], [3, 4])) and math.isnan(C.spearman([1, 1, 1], [1, 2, 3]))
    grid = [1, 2, 4]
    by_t = {0.1: np.array([[1, 0.9, 0.8], [1, 0.7, 0.6]]), 1.0: np.array([[1, 0.6, 0.5], [1, 0.5, 0.4]]),
            10.0: np.array([[1, 0.4, 0.3], [1, 0.3, 0.2]])}
    trend = C.temperature_trend(grid, by_t)
    assert trend["rank"] == -1.0 and math.isclose(trend["gain"], 0.75 - 0.3)
    assert trend["temperatures"].tolist() == [0.1, 1.0, 10.0]
    with pytest.raises(ValueError, match="two"):
        C.temperature_trend(grid, {1.0: by_t[1.0]})


def test_multihead_summary():
    sw = SW.separability_sweep([fake_capture(28), fake_capture(29)], GRID, head_sets=(2, None))
    summ = C.multihead_summary(sw, 3)
    assert summ["heads"] == 3 and summ["coverage"].shape == (4,)
    assert torch.all(summ["copies"] <= summ["formula"] + 1e-12)
    assert torch.allclose(summ["p"], sw.fraction["values"].mean((0, 1)), atol=1e-12)
    assert torch.all(summ["coverage"] >= summ["p"] - 1e-12)
    with pytest.raises(ValueError, match="head sets"):
        C.multihead_summary(sw, 1)


def test_figure3_statistics_and_protocols():
    grid = np.array([1, 2, 4, 8, 16, 32, 64, 128])
    x = np.log2(grid)
    heads = np.stack([np.where(x < 4, 0.8 + 0.05 * (4 - x), 0.8) + d for d in (-0.05, 0.0, 0.05)])
    heads[:, 0] = 1.0
    bound = heads.max(0)[None].repeat(3, 0) + 0.02
    st = C.figure3_statistics(grid, heads, bound, 0.02)
    assert st["knee"] == 16 and abs(st["slope_after"]) < 1e-9 and math.isclose(st["level"], 0.8)
    assert math.isclose(st["tracks"], 0.02) and st["flattening"] < 1e-6
    assert C.largest_after(grid, heads, 16) == pytest.approx(0.85)
    sw = SW.separability_sweep([fake_capture(30)], [1, 2, 4, 6, 8, 12], detail_rows=[19, 29, 39],
                               subsets={"spaced": [19, 29, 39], "last": [39]})
    by = C.figure3_by_protocol(sw, 0.02)
    assert list(by) == ["every query position (paper)", "3 spaced rows", "last row only"]
    assert sw.subsets["last"]["rows"] == 1
    assert all(set(C.F3_KEYS) <= set(v) for v in by.values())


def test_multihead_statistics_numbers():
    sw = SW.separability_sweep([fake_capture(31), fake_capture(32)], GRID, head_sets=(2, None))
    st = C.multihead_statistics(sw, 2, knee=4, tokens=4000)
    tab = st["table"]
    sel = sw.n_grid >= 4
    assert st["jensen"] <= 1e-12 and st["gap"] >= -1e-12
    assert math.isclose(st["rate_ratio"], float(tab["other_rate"][sel].mean() / tab["p"][sel].mean()))
    assert math.isclose(st["dependence"], float((tab["coverage"] - tab["null"])[sel].abs().max()))
    assert st["bernoulli"] < 0.05


LONG_GRID = [1, 2, 3, 4, 6, 8, 12, 16]


@pytest.fixture(scope="module")
def three_windows():
    caps = [fake_capture(s, length=40) for s in (31, 32, 33)]
    sweep = SW.separability_sweep(caps, LONG_GRID, kinds=("values", "uniform"), entropy=True, head_sets=(2,),
                                  subsets={"last": [39]}, temperatures=(0.5, 1.0, 2.0),
                                  temperature_rows=[10, 20, 39], detail_rows=[5, 20, 39])
    return caps, sweep


def test_a_sweep_keeps_each_windows_moments_and_resamples_them(three_windows):
    """The means are pooled over every (window, row) sample; a resample pools the drawn windows'
    samples (a window drawn twice counts twice), and drawing every window once is the sweep."""
    caps, sweep = three_windows
    same = sweep.resampled(range(3))
    for name in ("fraction", "upper_exponential", "temperature"):
        for key, value in getattr(sweep, name).items():
            assert torch.equal(getattr(same, name)[key], value), (name, key)
    assert torch.equal(same.entropy, sweep.entropy)
    assert torch.equal(same.subsets["last"]["fraction"], sweep.subsets["last"]["fraction"])
    alone = SW.separability_sweep(caps[2:], LONG_GRID, kinds=("values",), entropy=True,
                                  detail_rows=[5, 20, 39])
    twice = sweep.resampled([2, 2])
    torch.testing.assert_close(twice.entropy, alone.entropy)
    torch.testing.assert_close(twice.fraction["values"], alone.fraction["values"])
    torch.testing.assert_close(twice.upper_exponential["values"], alone.upper_exponential["values"])
    assert torch.equal(sweep.resampled([0, 2]).delta["values"], sweep.delta["values"][[0, 2]])
    assert torch.equal(same.rank_hits, sweep.rank_hits) and torch.equal(same.rank_rows, sweep.rank_rows)
    alone_hits = SW.separability_sweep(caps[1:2], LONG_GRID, kinds=("values",), head_sets=(2,),
                                       detail_rows=[5, 20, 39])
    assert torch.equal(sweep.resampled([1, 1]).rank_hits, 2 * alone_hits.rank_hits)
    assert torch.equal(sweep.resampled([1, 1]).rank_rows, 2 * alone_hits.rank_rows)
    for key in ("own", "other_rate"):
        torch.testing.assert_close(sweep.resampled([1]).sharing[key], alone_hits.sharing[key])
    with pytest.raises(ValueError, match="window indices"):
        sweep.resampled([3])
    with pytest.raises(ValueError, match="no per-window moments"):
        SW.SeparabilitySweep(n_grid=sweep.n_grid, kinds=("values",), windows=1).resampled([0])


def test_separability_intervals_bootstrap_the_chapters_statistics(three_windows):
    _, sweep = three_windows
    kw = dict(knee=4, tolerance=0.02, band=(0.7, 0.8))
    values = C.window_statistics(sweep, **kw)
    assert set(values) == {"F3", "S80", "MON", "TSEP"} and set(values["F3"]) == set(C.F3_KEYS)
    got = C.separability_intervals(sweep, resamples=200, **kw)
    for cid, keys in got.items():
        for key, iv in keys.items():
            assert iv.low <= values[cid][key] <= iv.high and iv.n == 3 and iv.unit == "window"
    largest = got["S80"]["largest_head"]
    draws = []
    for row in resample_indices(3, 200).tolist():
        per_head = sweep.resampled(row).fraction["values"].reshape(-1, len(LONG_GRID)).numpy()
        draws.append(C.largest_after(LONG_GRID, per_head, 4))
    low, high = np.quantile(draws, [0.025, 0.975])
    assert largest.low == pytest.approx(min(low, values["S80"]["largest_head"]))
    assert largest.high == pytest.approx(max(high, values["S80"]["largest_head"]))
    multi = C.separability_intervals(sweep, head_sets={None: 2, "pairs": 2}, resamples=40,
                                     only=["MH.gap", "MHP@pairs.rate_ratio"], **kw)
    full = C.multihead_statistics(sweep, 2, 4)
    assert multi["MH"]["gap"].low <= full["gap"] <= multi["MH"]["gap"].high
    assert multi["MHP@pairs"]["rate_ratio"].low <= full["rate_ratio"] <= multi["MHP@pairs"]["rate_ratio"].high
    numbers = C.window_statistics(sweep, head_sets={None: 2}, **kw)
    assert numbers["MH"] == {"gap": full["gap"]}
    assert numbers["MHP"] == {k: full[k] for k in ("rate_ratio", "dependence")}
    part = C.separability_intervals(sweep, windows=2, only=["F3.level"], resamples=50, **kw)
    assert list(part) == ["F3"] and list(part["F3"]) == ["level"] and part["F3"]["level"].n == 2
    with pytest.raises(ValueError, match="between 2"):
        C.separability_intervals(sweep, windows=4, **kw)


def test_a_moment_first_seen_in_a_later_window_counts_nothing_in_the_earlier_ones():
    moments = SW._Moments()
    moments.add("a", 0, 1, torch.ones(2, 3, 1))
    moments.end_window()
    moments.add("a", 0, 1, 3 * torch.ones(2, 3, 1))
    moments.add("b", 0, 1, 5 * torch.ones(2, 3, 1))
    moments.end_window()
    stacks = moments.window_stacks()
    assert stacks["b"][0].shape[0] == 2 and float(stacks["b"][0][0].sum()) == 0.0
    torch.testing.assert_close(moments.mean("a"), torch.full((1, 2, 1), 2.0, dtype=torch.float64))
    torch.testing.assert_close(moments.mean("b"), torch.full((1, 2, 1), 5.0, dtype=torch.float64))


def test_the_intervals_are_only_on_measured_criteria(three_windows):
    """Every interval separability_intervals gives belongs to a measured criterion of its claim's
    rule (an identity takes none: the ledger refuses it)."""
    from normlimits import claims

    _, sweep = three_windows
    got = C.separability_intervals(sweep, knee=4, tolerance=0.02, band=(0.7, 0.8),
                                   head_sets={None: 2, "pairs": 2}, resamples=20)
    for cid, keys in got.items():
        rule = claims.claim(cid.split("@")[0]).rule
        kinds = {c.key: c.kind for c in rule.criteria}
        assert all(kinds[k] == "measurement" for k in keys), (cid, keys)


def test_a_sweep_of_one_window_gives_no_interval():
    sweep = SW.separability_sweep([fake_capture(41, length=40)], LONG_GRID, kinds=("values",))
    assert C.separability_intervals(sweep, knee=4, tolerance=0.02, band=(0.7, 0.8)) == {}
