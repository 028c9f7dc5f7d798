"""Tests of normlimits.experiments.alternatives (the four yardsticks for any normaliser) and its theory."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normlimits.experiments import alternatives as A
from normlimits.metrics import distances as D
from normlimits.metrics import jacobian as J
from normlimits.metrics import separability as S
from normlimits.metrics import vanishing as V
from normlimits.metrics.normalizers import NORMALIZERS, softmax_one
from normlimits.theory import alternatives as TA

NAMES = list(NORMALIZERS)
NEG_INF = float("-inf")


def masked_logits(rows=5, keys=8, seed=0, scale=2.0):
    gen = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(rows, keys, generator=gen, dtype=torch.float64)
    visible = torch.arange(keys)[None, :] <= (torch.arange(rows)[:, None] * 2 + 1) % keys
    return z.masked_fill(~visible, NEG_INF)


# ------------------------------------------------------------------------------- yardstick 1
def test_row_statistics_uniform_and_one_hot():
    z = torch.tensor([[0.0, 0.0, 0.0, 0.0], [0.0, 0.0, NEG_INF, NEG_INF]], dtype=torch.float64)
    w = torch.softmax(z, -1)
    stats = A.row_statistics(w, z)
    assert torch.allclose(stats["entropy"], torch.tensor([math.log(4), math.log(2)], dtype=torch.float64))
    assert torch.allclose(stats["entropy_ratio"], torch.ones(2, dtype=torch.float64))
    assert torch.equal(stats["support"], torch.tensor([4.0, 2.0], dtype=torch.float64))
    one_hot = torch.tensor([[1.0, 0.0, 0.0]], dtype=torch.float64)
    s1 = A.row_statistics(one_hot, torch.zeros(1, 3, dtype=torch.float64))
    assert float(s1["entropy"]) == 0.0 and float(s1["support"]) == 1.0
    sub = A.row_statistics(0.5 * w, z)                     # renormalised entropy, mass 0.5
    assert torch.allclose(sub["entropy"], stats["entropy"])
    assert torch.allclose(sub["mass"], 0.5 * stats["mass"])
    with pytest.raises(ValueError, match="non-negative"):
        A.row_statistics(-w, z)


# --------------------------------------------------------------------------------- theory
def test_theory_ssmax_limits():
    r = TA.ssmax_vanishing()
    assert r.limit_above == 1 and r.limit_below == 0 and r.limit_at == TA.sp.Rational(1, 2)
    assert r.scaled_limit_above == TA.sp.oo
    assert TA.closes(r.ratio - TA.L ** (2 * TA.a * TA.s))
    x = TA.sp.Symbol("x", positive=True)
    assert TA.closes((r.top_weight - r.top_weight_x.subs(x, 2 * TA.s * TA.a)).subs(
        {TA.L: 7, TA.s: TA.sp.Rational(1, 3), TA.a: 2}))


def test_theory_sparse_one_hot_and_softmax_one():
    r = TA.sparse_one_hot()
    assert r.sparsemax_top_residual == 0 and r.entmax_top_residual == 0
    assert r.sparsemax_other_at_gap == 0 and r.entmax_other_at_gap == 0
    assert TA.closes(r.sparsemax_two - (1 + TA.g) / 2)
    m = TA.softmax_one_mass()
    assert m.mass_limit == 1


def test_theory_adaptive_beta_bounds_match_numerics():
    r = TA.adaptive_beta_bounds()
    import numpy as np

    grid = np.linspace(0.5, 12, 200_001)
    poly = np.polyval(TA.VELICKOVIC_POLYNOMIAL, grid)
    assert abs(poly.max() - r.beta_max) < 1e-6 and abs(grid[poly.argmax()] - r.beta_argmax) < 1e-3
    assert r.at_log2 < 1 and r.on_interval[0] > math.log(2)      # beta = 1 at a two-way tie
    assert np.all(poly[grid > r.off_above + 1e-6] < 1)


def test_theory_jacobian_constants():
    r = TA.jacobian_constants()
    assert r.sparsemax_projection == TA.sp.zeros(4, 4)
    assert r.sparsemax_eigenvalues == {1: 3, 0: 1}
    assert r.entmax_two_argmax == TA.sp.Rational(1, 2)
    assert TA.closes(r.entmax_two_max - 1 / TA.sp.sqrt(2))
    assert r.softmax_two_max == TA.sp.Rational(1, 2)


# ------------------------------------------------------------------------ on a (tiny) model
@pytest.fixture
def tiny_capture(tiny_loaded):
    from normlimits.model.capture import capture_window

    ids = torch.arange(64) % 250
    return capture_window(tiny_loaded, ids)


def tiny_config():
    return A.YardstickConfig.for_window(64, rows=6, jacobian_rows=4, smallest=8,
                                        temperatures=(0.1, 1.0))


def test_decoupling_ssmax_is_softmax_at_another_temperature():
    """On rows with the same n, SSMax at T is softmax at T / (s log n): its (selectivity,
    norm) points lie on softmax's curve, so the interpolated ratio is close to 1."""
    gen = torch.Generator().manual_seed(3)
    logits = 2 * torch.randn(1, 1, 8, 256, generator=gen, dtype=torch.float64)
    temps = tuple(float(t) for t in torch.logspace(-1.5, 1.5, 25))
    cfg = A.YardstickConfig(lengths=(2,), rows=(6,), n_grid=(1,), temperatures=temps,
                            jacobian_rows=tuple(range(8)))
    stats = {}
    for key in ("softmax", "ssmax"):
        nz = NORMALIZERS[key]
        stats[key] = {"jacobian": A._norms_over_temperatures(nz, logits, cfg).mean(-1)[None],
                      "jacobian_selectivity": torch.stack(
                          [nz.at_temperature(logits, t).amax(-1).mean(-1) for t in temps])[None]}
    norms, sel = A._softmax_curve(logits, cfg.reference_temperatures)
    stats["softmax"].update(reference_jacobian=norms[None], reference_selectivity=sel[None])
    res = A.YardstickResults(config=cfg, normalizers=["softmax", "ssmax"], stats=stats, windows=1)
    d = res.decoupling("ssmax")
    assert d["matched"] >= 10
    assert abs(d["geometric_mean"] - 1) < 0.01
    assert bool(((d["ratios"] - 1).abs() < 0.05).all())


def test_config_defaults_and_validation():
    cfg = A.YardstickConfig.for_window(1024)
    assert cfg.lengths == (32, 64, 128, 256, 512, 1024)
    assert min(cfg.rows) == 511 and max(cfg.rows) == 1023
    assert max(cfg.n_grid) < min(cfg.rows) + 1
    with pytest.raises(ValueError, match="too short"):
        A.YardstickConfig.for_window(40)


def test_measure_window_reuses_the_chapters_metrics(tiny_capture):
    cfg = tiny_config()
    res = A.measure_window(tiny_capture, ["softmax", "sparsemax", "softmax1"], cfg)
    soft = res["softmax"]
    layers, heads = tiny_capture.values.shape[:2]
    assert soft["max_weight"].shape == (layers, heads, len(cfg.lengths))
    assert soft["distance"].shape == (layers, heads, len(cfg.n_grid))
    assert soft["jacobian"].shape == (2, layers, heads)
    # vanishing: softmax's max weight and entropy equal the vanishing module's statistics
    vstats = V.sweep_capture(tiny_capture, list(cfg.lengths))
    assert torch.allclose(soft["max_weight"], vstats.max_weight, atol=1e-12)
    assert torch.allclose(soft["entropy"], vstats.entropy, atol=1e-10)
    # distances/separability: the same numbers as the distance and separability modules
    rows = torch.tensor(cfg.rows)
    top = int(rows.max()) + 1
    w = tiny_capture.weights(rows)[..., :top].double()
    prof = D.distance_profile(w, tiny_capture.values[..., :top, :].double(), list(cfg.n_grid),
                              lengths=rows + 1, bounds=False, jensen=False)
    assert torch.allclose(soft["distance"], prof.true.mean(-2), rtol=1e-6)
    sep = S.geometric_separability(w, S.project_to_sphere(tiny_capture.values[..., :top, :].double()),
                                   list(cfg.n_grid), rows=rows)
    assert torch.allclose(soft["separability"], torch.nanmean(sep.fraction, -2), atol=1e-9, equal_nan=True)
    # gradient: softmax's exact norm equals the jacobian module's
    jrows = torch.tensor(cfg.jacobian_rows)
    lj = tiny_capture.logits(jrows)[..., : int(jrows.max()) + 1].double()
    expected = torch.stack([J.softmax_jacobian_norm(torch.softmax(lj / t, -1), t).mean(-1)
                            for t in cfg.temperatures])
    assert torch.allclose(soft["jacobian"], expected, rtol=1e-9)
    # sparsemax's norm is 1/T or 0 per row, so its mean lies in [0, 1/T]
    for i, t in enumerate(cfg.temperatures):
        assert bool((res["sparsemax"]["jacobian"][i] <= 1 / t + 1e-12).all())
    assert bool((res["softmax1"]["mass"] < 1).all())


def test_measure_stacks_windows_and_summarises(tiny_loaded):
    from normlimits.model.capture import iter_captures

    windows = torch.stack([torch.arange(64) % 250, (7 * torch.arange(64)) % 250])
    cfg = tiny_config()
    res = A.measure(iter_captures(tiny_loaded, windows), ["softmax", "ssmax", "adaptive"], cfg)
    assert res.windows == 2 and res.normalizers == ["softmax", "ssmax", "adaptive"]
    assert res.stats["ssmax"]["max_weight"].shape[0] == 2
    assert res.stats["ssmax"]["jacobian"].shape[0] == 2
    assert res.curve("softmax", "max_weight").shape == (len(cfg.lengths),)
    assert res.curve("softmax", "jacobian", "max").shape == (2,)
    assert res.head_values("softmax", "distance").shape[1] == len(cfg.n_grid)
    assert res.max_weight_exponent("softmax").numel() == 2 * 4
    # decoupling: softmax against itself is 1 at every T; SSMax traces softmax's own curve
    same = res.decoupling("softmax")
    assert same["matched"] == 2 and torch.allclose(same["ratios"], torch.ones(2, dtype=torch.float64),
                                                   rtol=0.05)
    assert res.stats["ssmax"]["jacobian_selectivity"].shape == (2, 2, 2, 4)
    crit = res.critical_n("softmax")
    assert crit is None or crit in cfg.n_grid
    with pytest.raises(ValueError, match="reduce"):
        res.curve("softmax", "max_weight", "mode")
    with pytest.raises(ValueError, match="no windows"):
        A.measure(iter([]), ["softmax"], cfg)
    # the gradient yardstick on the first window only
    import dataclasses

    one = A.measure(iter_captures(tiny_loaded, windows), ["softmax"],
                    dataclasses.replace(cfg, jacobian_windows=1))
    assert one.stats["softmax"]["jacobian"].shape[0] == 1
    assert one.stats["softmax"]["max_weight"].shape[0] == 2


def test_measure_window_rejects_bad_grids(tiny_capture):
    bad = A.YardstickConfig(lengths=(8, 16), rows=(10, 20), n_grid=(1, 16), temperatures=(1.0,),
                            jacobian_rows=(5,))
    with pytest.raises(ValueError, match="below the shortest row"):
        A.measure_window(tiny_capture, ["softmax"], bad)
    bad_t = A.YardstickConfig(lengths=(8, 16), rows=(30,), n_grid=(1, 2), temperatures=(0.0,),
                              jacobian_rows=(5,))
    with pytest.raises(ValueError, match="T must be > 0"):
        A.measure_window(tiny_capture, ["softmax"], bad_t)


# ------------------------------------------------------------------- sweeps and verdict inputs
def test_critical_scale_reproduces_the_simplex_value_and_halves_the_top_weight():
    n, rho = 500, 0.2
    z = torch.full((n,), rho, dtype=torch.float64)
    z[3] = 1.0
    assert abs(float(A.critical_scale(z)) - math.log(n - 1) / ((1 - rho) * math.log(n))) < 1e-10
    gen = torch.Generator().manual_seed(2)
    rows = 2 * torch.randn(6, 200, generator=gen, dtype=torch.float64)
    rows[2, 150:] = NEG_INF
    gamma = A.critical_scale(rows)
    n_vis = torch.isfinite(rows).sum(-1)
    for r in range(rows.shape[0]):
        w = NORMALIZERS["ssmax"].function(rows[r], s=float(gamma[r]))
        assert abs(float(w.max()) - 0.5) < 1e-9, (r, int(n_vis[r]))
    two = torch.tensor([1.0, 0.0], dtype=torch.float64)
    tied = torch.tensor([1.0, 1.0, 0.0], dtype=torch.float64)
    assert float(A.critical_scale(two)) == 0.0 and math.isnan(float(A.critical_scale(tied)))


def test_sink_matching_logit_is_the_median_first_key_logit_and_matches_softmax(tiny_loaded):
    from normlimits.model.capture import capture_window
    from normlimits.metrics.normalizers import sink_softmax

    caps = [capture_window(tiny_loaded, (torch.arange(64) * k) % 250) for k in (1, 3)]
    rows = [20, 40, 63]
    b = A.sink_matching_logit(caps, rows)
    layers, heads = caps[0].values.shape[:2]
    assert b.shape == (layers, heads, 1, 1)
    firsts = torch.cat([c.logits(torch.tensor(rows))[..., 0].double() for c in caps], -1)
    assert torch.allclose(b[..., 0, 0], firsts.median(-1).values)
    logits = caps[0].logits(torch.tensor(rows)).double()             # the identity it rests on
    sink = sink_softmax(logits[..., 1:], sink=logits[..., :1])
    assert torch.allclose(sink, torch.softmax(logits, -1)[..., 1:], atol=1e-14)
    with pytest.raises(ValueError, match="no windows"):
        A.sink_matching_logit([], rows)


def _tiny_results(tiny_loaded, keys=("softmax", "ssmax", "sparsemax", "softmax1")):
    from normlimits.model.capture import iter_captures

    windows = torch.stack([torch.arange(64) % 250, (7 * torch.arange(64)) % 250])
    return A.measure(iter_captures(tiny_loaded, windows), list(keys), tiny_config())


def test_yardstick_verdict_values_follow_their_definitions(tiny_loaded):
    res = _tiny_results(tiny_loaded)
    v = A.yardstick_verdict(res, "ssmax", knee=4, margin=0.0)
    e_k = float(res.max_weight_exponent("ssmax").median())
    e_r = float(res.max_weight_exponent("softmax").median())
    assert v.values["vanishing"] == {"exponent": e_k, "gain": e_k - e_r}
    grid = list(res.config.n_grid)
    sep_k = res.curve("ssmax", "separability")[grid.index(4):]
    sep_r = res.curve("softmax", "separability")[grid.index(4):]
    assert v.values["separability"]["every"] == float((sep_k >= sep_r).double().mean())
    dec = res.decoupling("ssmax")
    assert v.values["gradient"]["every"] == pytest.approx(float((dec["ratios"] <= 0.5).double().mean()))
    crit_k, crit_r = res.critical_n("ssmax"), res.critical_n("softmax")
    if crit_r is not None:
        expected = math.log2((crit_k or 2 * max(grid)) / crit_r)
        assert v.values["distance"]["later"] == pytest.approx(expected)
    else:
        assert math.isnan(v.values["distance"]["later"]) and v.reason["distance"]
    same = A.yardstick_verdict(res, "softmax", knee=4)
    assert same.values["vanishing"]["gain"] == 0.0 and same.values["separability"]["some"] == 0.0
    assert set(v.measured) == {"vanishing", "distance", "separability", "gradient"}


def test_summary_table_ranks_by_confirmed_yardsticks(tiny_loaded):
    res = _tiny_results(tiny_loaded)
    verdicts = {k: A.yardstick_verdict(res, k, knee=4) for k in ("ssmax", "sparsemax", "softmax1")}
    ys = ("vanishing", "distance", "separability", "gradient")
    graded = {("ssmax", y): "confirmed" for y in ys} | {("sparsemax", y): "corrected" for y in ys} \
        | {("softmax1", y): "refuted" for y in ys}
    graded[("softmax1", "gradient")] = "not testable"
    labels = {"ssmax": "SSMax", "sparsemax": "sparsemax", "softmax1": "softmax_1"}
    table = A.summary_table(verdicts, graded, labels)
    assert list(table.index) == ["SSMax", "sparsemax", "softmax_1"]
    assert list(table["score"]) == [4.0, 2.0, 0.0]
    assert table.loc["softmax_1", "gradient"] == A.VERDICT_MARKS["not testable"]
    text = A.verdict_overview(verdicts, graded, labels)
    assert all(label in text for label in labels.values()) and text.count("<em>Rule:</em>") == 4
    assert "all:" not in text and "any:" not in text, "the rule in words, not its internal strings"
    assert text.count('data-columns="') == 4
    sweep = A.sweep_table(res, ["softmax", "ssmax"], [1, 2], "x", knee=4)
    assert list(sweep.index) == [1, 2] and "crit. N/L" in sweep.columns


def test_synthetic_exponents_check_the_proven_bounds():
    from normlimits.metrics.normalizers import sink_normalizer

    lengths = [32, 64, 128]
    logits = V.synthetic_bounded_logits(lengths, 2.0, 64, seed=0)
    nzs = [NORMALIZERS["softmax"], NORMALIZERS["sigmoid"], sink_normalizer(1.0), NORMALIZERS["ssmax"]]
    table, outside = A.synthetic_exponents(nzs, lengths, {"u": (logits, 2.0)}, beta_max=2.42)
    assert outside == 0 and list(table.index) == [nz.label for nz in nzs]
    assert table[("exponent", "u")].loc["softmax"] < -0.8
    _, wrong = A.synthetic_exponents(nzs[:1], lengths, {"u": (logits, 0.05)}, beta_max=2.42)
    assert wrong > 0                                   # an understated bound is caught


def test_row_properties(tiny_loaded):
    from normlimits.model.capture import capture_window

    cap = capture_window(tiny_loaded, torch.arange(64) % 250)
    table = A.row_properties(cap.logits(torch.arange(0, 64, 8)), [NORMALIZERS["softmax"],
                                                                  NORMALIZERS["softpick"]])
    assert bool(table["masked keys at 0"].all())
    assert abs(table.loc["softmax", "min row sum"] - 1) < 1e-9
    assert table.loc["softpick", "visible keys at 0"] > 0


# ------------------------------------------------------------------- theory of the newcomers
def test_theory_newcomers():
    nv = TA.newcomer_vanishing()
    assert nv.sigmoid_scaled_limit == TA.sp.exp(TA.a) and nv.softpick_zero_row == 1
    assert nv.stick_sum_check == 0 and nv.asentmax_gap_limit == 0
    b = TA.sp.Symbol("b", positive=True)
    assert TA.closes(nv.softpick_scaled_limit - (TA.sp.exp(TA.a) - 1) / (1 - TA.sp.exp(-b)))
    nj = TA.newcomer_jacobians()
    assert nj.sigmoid_max == TA.sp.Rational(1, 4) and nj.stick_one == TA.sp.Rational(1, 4)
    assert nj.softpick_tie_limit == TA.sp.oo
    cs = TA.critical_scaling()
    rho = TA.sp.Symbol("rho", positive=True)
    assert TA.closes(cs.gamma_c - 1 / (1 - rho)) and cs.below == 0 and cs.above == 1
    assert TA.sink_match().difference == 0


def test_separability_support_is_the_rows_support_and_caps_the_compared_n(tiny_capture, tiny_loaded):
    """measure_window records each head's median support over the separability rows (keys with
    non-zero weight); the verdict compares N_s/N only at the grid's N >= knee within the median
    support, and records that support for the rule's scope criterion."""
    cfg = tiny_config()
    res = A.measure_window(tiny_capture, ["softmax", "sparsemax"], cfg)
    rows = torch.tensor(cfg.rows)
    top = int(rows.max()) + 1
    logits = tiny_capture.logits(rows)[..., :top].double()
    w = NORMALIZERS["sparsemax"](logits)
    by_hand = ((w > 0) & torch.isfinite(logits)).sum(-1).double().median(-1, keepdim=True).values
    assert torch.equal(res["sparsemax"]["separability_support"], by_hand)
    assert torch.equal(res["softmax"]["separability_support"],
                       (rows + 1).double().median().expand_as(by_hand))      # every visible key
    results = _tiny_results(tiny_loaded)
    v = A.yardstick_verdict(results, "sparsemax", knee=4, margin=0.0)
    support = A.separability_support(results, "sparsemax")
    assert v.values["separability"]["support"] == support
    grid = list(results.config.n_grid)
    ns = [n for n in grid if n >= 4]
    sep_k = results.curve("sparsemax", "separability")[grid.index(4):]
    sep_r = results.curve("softmax", "separability")[grid.index(4):]
    within = torch.tensor([n <= support for n in ns])
    beats = (sep_k >= sep_r).double()
    expected = float(beats[within].mean()) if bool(within.any()) else float(beats.mean())
    assert v.values["separability"]["every"] == expected


def test_separability_share_counts_only_the_n_within_the_support():
    sep_k = torch.tensor([0.9, 0.5, 0.2, 0.1], dtype=torch.float64)
    sep_r = torch.tensor([0.5, 0.6, 0.3, 0.3], dtype=torch.float64)
    assert A.separability_share(sep_k, sep_r, 0.0, torch.tensor([True, True, False, False])) == 0.5
    assert A.separability_share(sep_k, sep_r, 0.0, torch.tensor([False] * 4)) == 0.25   # shown, not graded
    assert math.isnan(A.separability_share(sep_k[:0], sep_r[:0], 0.0, torch.tensor([], dtype=torch.bool)))


def test_a_sparse_normaliser_above_its_support_is_not_testable_on_separability():
    """The issue's case: sparsemax's median support is 3 keys, the rule compares at N >= 16. The
    chapter's proposition caps N_s/N at |S|/N there, so the claim is not testable (the reason
    names the support), whatever the share says; with a support of 64 keys it is graded."""
    from normlimits import claims
    from normlimits.claims.alternatives import claim_id

    cid = claim_id("sparsemax", "separability")
    row = claims.make_row(cid, {"support": 3.0, "every": 0.0, "some": 0.0}, "m", chapter="alternatives",
                          model="x")
    assert row["verdict"] == "not testable" and "support" in row["reason"]
    assert "outside the claim's scope" in row["reason"]
    assert claims.claim(cid).rule.grade({"support": 64.0, "every": 0.0, "some": 0.0}) == "refuted"
    assert claims.claim(cid).rule.grade({"support": 64.0, "every": 1.0, "some": 1.0}) == "confirmed"
