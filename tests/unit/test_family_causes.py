"""The candidate-cause changes of normlimits.audit.family_causes, on synthetic captures."""

from __future__ import annotations

import pytest
import torch

from normlimits.audit import family_causes as FC
from normlimits.model.capture import WindowCapture


def capture(layers=3, heads=2, length=16, d=8, seed=0) -> WindowCapture:
    g = torch.Generator().manual_seed(seed)
    return WindowCapture(queries=torch.randn(layers, heads, length, d, generator=g),
                         keys=torch.randn(layers, heads, length, d, generator=g),
                         values=torch.randn(layers, heads, length, d, generator=g),
                         hidden=torch.randn(layers, length, 12, generator=g),
                         scale=torch.full((layers,), d ** -0.5))


def test_projecting_values_keeps_everything_but_their_size_and_never_lengthens_them():
    c = capture()
    p = FC.project_values(c, 3, seed=1)
    assert p.values.shape == (3, 2, 16, 3)
    assert torch.equal(p.queries, c.queries) and torch.equal(p.keys, c.keys)
    # coordinates in an orthonormal basis of a subspace: a projection, never longer
    assert bool((p.values.norm(dim=-1) <= c.values.norm(dim=-1) + 1e-5).all())
    # the same basis for every layer and head: inner products of projected vectors are those of
    # the vectors' projections, so a vector inside the subspace keeps its length
    again = FC.project_values(c, 3, seed=1)
    assert torch.equal(p.values, again.values)
    assert not torch.equal(p.values, FC.project_values(c, 3, seed=2).values)
    assert FC.project_values(c, 8) is c
    for bad in (0, 9):
        with pytest.raises(ValueError, match="head size is 8"):
            FC.project_values(c, bad)


def test_keeping_layers_slices_every_per_layer_field_alike():
    c = capture(layers=4)
    kept = FC.keep_layers(c, [3, 1])
    for name in ("queries", "keys", "values", "hidden"):
        assert torch.equal(getattr(kept, name), getattr(c, name)[[3, 1]])
    assert torch.equal(kept.scale, c.scale[[3, 1]])
    assert torch.allclose(kept.weights([5]), c.weights([5])[[3, 1]])
    for bad in ([], [4], [-1]):
        with pytest.raises(ValueError, match="0..3"):
            FC.keep_layers(c, bad)


def test_sink_share_is_each_heads_mean_weight_on_the_first_key():
    c = capture(layers=2, heads=2, length=10)
    # layer 1, head 0: the first key's logit dominates every row
    c.keys[1, 0, 0] = 50 * c.queries[1, 0].mean(0) / c.queries[1, 0].mean(0).norm()
    c.queries[1, 0] = c.keys[1, 0, 0]
    shares = FC.sink_shares(c)
    assert shares.shape == (2, 2)
    assert float(shares[1, 0]) > 0.99
    rows = list(range(8, 10))
    expected = c.weights(rows)[..., 0].mean(-1)
    assert torch.allclose(shares, expected)
    assert float(shares[0, 1]) < 0.9


def test_a_claim_is_graded_under_a_change_by_its_own_yardstick_and_rule():
    from normlimits.audit.yardsticks import AuditConfig

    caps = [capture(layers=2, heads=2, length=64, d=8, seed=s) for s in (0, 1)]
    config = AuditConfig(length=64)
    row = FC.graded_under(caps, config, "synthetic", "NU", "vanishing")
    assert row["id"] == "NU" and row["verdict"] in ("confirmed", "corrected", "partial", "refuted",
                                                     "not reproduced", "not testable", "inconclusive")
    # the same captures give the same row: no hidden randomness
    assert FC.graded_under(caps, config, "synthetic", "NU", "vanishing")["value"] == row["value"]
    with pytest.raises(ValueError, match="not F3"):
        FC.graded_under(caps, config, "synthetic", "F3", "vanishing")
    curve = FC.head_size_curve(caps, config, "synthetic", "F3", "separability", (2, 4, 8, 16))
    assert list(curve) == [2, 4, 8]                       # sizes above the head size are skipped
    assert all(r["id"] == "F3" for r in curve.values())


def test_the_cause_rows_change_one_thing_at_a_time_on_the_model_it_applies_to():
    from normlimits.audit.yardsticks import AuditConfig

    wide = [capture(layers=3, heads=2, length=48, d=8, seed=s) for s in (0, 1)]
    for c in wide:
        c.windows = torch.tensor([16, 0, 16])           # two local layers, one global
    narrow = [capture(layers=2, heads=2, length=48, d=4, seed=s) for s in (2, 3)]
    config = AuditConfig(length=48, separability_rows=8)
    rows = FC.cause_rows({"wide": wide, "narrow": narrow}, {"wide": config, "narrow": config}, "F3",
                         "separability")
    changes = [(r["model"], r["change"]) for r in rows]
    assert changes == [("wide", "as measured"), ("narrow", "as measured"),
                       ("wide", "values projected from 8 to 4 dimensions"),
                       ("wide", "without the first key (the sink)"), ("narrow", "without the first key (the sink)"),
                       ("wide", "its 1 global layers alone"), ("wide", "its 2 local layers alone")]
    assert FC.local_and_global(wide[0]) == ([0, 2], [1]) and FC.local_and_global(narrow[0]) == ([], [0, 1])
    # a yardstick that does not read the values gets no head-size change
    vanishing = FC.cause_rows({"wide": wide, "narrow": narrow}, {"wide": config, "narrow": config},
                              "NU", "vanishing")
    assert not any("projected" in r["change"] for r in vanishing)
    summary = FC.sink_summary(wide)
    assert 0 <= summary["heads with over half on the first key"] <= 1
    assert 0 < summary["median sink share"] < 1


def test_without_the_first_key_every_row_is_the_softmax_over_the_other_keys():
    c = capture(layers=2, heads=2, length=12)
    dropped = FC.drop_first_key(c)
    assert dropped.length == 11
    full = c.weights([11])                                # [layers, H, 1, 12]
    rest = full[..., 1:] / full[..., 1:].sum(-1, keepdim=True)
    assert torch.allclose(dropped.weights([10]), rest, atol=1e-6)


def test_guideline3_is_graded_as_the_gradients_chapter_computes_it_and_follows_a_sharper_head():
    from normlimits.audit.yardsticks import AuditConfig
    from normlimits.claims import claim
    from normlimits.core import protocol as P
    from normlimits.experiments import sharpness as SH
    from normlimits.metrics.jacobian import default_rows

    caps = [capture(layers=2, heads=2, length=64, d=8, seed=s) for s in (0, 1)]
    config = AuditConfig(length=64)
    row = FC.graded_under(caps, config, "synthetic", "G3", "guideline3")
    # the chapter's own path, at the chapter's settings
    low, high = P.SHARP_T / 10, P.SHARP_T
    profile, sep = SH.sharpness_sweep(caps, default_rows(64, P.JACOBIAN_ROWS), (low, high), P.EPSILONS[:1],
                                      separability_temperatures=(low, high),
                                      n_grid=[n for n in P.GUIDELINE_N_GRID if n < 64], seed=0)
    expected = {k: float(v[0]) for k, v in SH.guideline3_values(profile, sep, low, high).items()}
    assert row["id"] == "G3" and row["value"] == pytest.approx(expected["jacobian_rise"])
    assert row["verdict"] == claim("G3").rule.grade(expected)
    # logits ten times sharper put the rows near one-hot at T = 0.1 already: the row-mean norm can
    # only fall from there, so the rise drops
    sharp = [WindowCapture(queries=c.queries * 10, keys=c.keys, values=c.values, hidden=c.hidden, scale=c.scale)
             for c in caps]
    assert FC.graded_under(sharp, config, "synthetic", "G3", "guideline3")["value"] < row["value"]
    # without the first key the measure reads the captures at L - 1
    dropped = FC.graded_under([FC.drop_first_key(c) for c in caps], config, "synthetic", "G3", "guideline3")
    assert dropped["id"] == "G3" and dropped["value"] is not None
    with pytest.raises(ValueError, match="no yardstick or claim measure named 'nonsense'"):
        FC.graded_under(caps, config, "synthetic", "G3", "nonsense")


def test_keeping_the_first_positions_is_the_capture_of_the_shorter_window():
    c = capture(layers=2, heads=2, length=16)
    cut = FC.keep_first(c, 10)
    assert cut.length == 10 and cut.hidden.shape == (2, 10, 12)
    # causal rows: row q of the cut sees the same keys with the same weights
    assert torch.allclose(cut.weights([3, 9]), c.weights([3, 9])[..., :10])
    for bad in (1, 17):
        with pytest.raises(ValueError, match="2..16"):
            FC.keep_first(c, bad)


def test_models_captured_at_different_lengths_get_the_longer_cut_to_the_shorter():
    from normlimits.audit.yardsticks import AuditConfig

    long = [capture(layers=2, heads=2, length=64, d=8, seed=s) for s in (0, 1)]
    short = [capture(layers=2, heads=2, length=32, d=8, seed=s) for s in (2, 3)]
    rows = FC.cause_rows({"long": long, "short": short},
                         {"long": AuditConfig(length=64), "short": AuditConfig(length=32)}, "NU", "vanishing")
    cut = [r for r in rows if r["change"].startswith("cut to")]
    assert [(r["model"], r["change"]) for r in cut] == [("long", "cut to its first 32 positions (the other's L)")]
    as_short = FC.graded_under([FC.keep_first(c, 32) for c in long], AuditConfig(length=32), "long", "NU", "vanishing")
    assert cut[0]["value"] == as_short["value"]


def test_rows_already_measured_are_reused_for_the_as_measured_lines():
    from normlimits.audit.yardsticks import AuditConfig

    caps = {name: [capture(layers=2, heads=2, length=32, d=8, seed=s)] for s, name in enumerate(("a", "b"))}
    configs = {name: AuditConfig(length=32) for name in caps}
    fresh = FC.cause_rows(caps, configs, "NU", "vanishing")
    given = {name: FC.graded_under(caps[name], configs[name], name, "NU", "vanishing") for name in caps}
    assert FC.cause_rows(caps, configs, "NU", "vanishing", measured=given) == fresh
    # the given rows are what the table shows (not measured again)
    marked = {name: {**row, "value": -1.0} for name, row in given.items()}
    reused = FC.cause_rows(caps, configs, "NU", "vanishing", measured=marked)
    assert [r["value"] for r in reused if r["change"] == "as measured"] == [-1.0, -1.0]
    assert reused[2:] == fresh[2:]
