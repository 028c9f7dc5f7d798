"""Tests for the vanishing-attention bounds (Lemma 1, Corollary 1, sharpened) and measurements."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
import sympy as sp
import torch
from hypothesis import given, settings, strategies as st

from normlimits.metrics import vanishing as V
from normlimits.core.fits import loglog_fit
from normlimits.core.protocol import length_grid
from normlimits.metrics.normalizers import general_normalizer
from normlimits.theory import vanishing as TV

DELTAS = st.floats(min_value=0.0, max_value=50.0, allow_nan=False)
TEMPS = st.floats(min_value=1e-3, max_value=1e3, allow_nan=False)
LENGTHS = st.integers(min_value=1, max_value=400)
SEEDS = st.integers(min_value=0, max_value=2**31 - 1)


# ----------------------------------------------------------------------------------- sympy
def test_lemma1_monotonicity_and_corners():
    lem = TV.lemma1()
    assert lem.d_alpha_d_numerator.is_positive
    assert lem.d_alpha_d_rest.is_negative
    # r-form equals the F-form.
    assert TV.closes(lem.exact_max - lem.exact_max_r.subs(TV.r, TV.F_max / TV.F_min))
    assert TV.closes(lem.exact_min - lem.exact_min_r.subs(TV.r, TV.F_max / TV.F_min))
    assert TV.closes(lem.c1 * lem.c2 - 1)


def test_lemma1_sharpened_implies_paper_constants():
    lem = TV.lemma1()
    assert lem.upper_gap_u.is_nonnegative is True
    assert lem.lower_gap_u.is_nonnegative is True
    # The gaps really are C2/L - max and min - C1/L.
    assert TV.closes(lem.upper_gap - (lem.c2 / TV.L - lem.exact_max))
    assert TV.closes(lem.lower_gap - (lem.exact_min - lem.c1 / TV.L))
    # and vanish when F is constant (r = 1): then every weight is exactly 1/L.
    assert lem.upper_gap_u.subs(TV.u, 0) == 0 and lem.lower_gap_u.subs(TV.u, 0) == 0
    assert sp.simplify(lem.exact_max_r.subs(TV.r, 1) - 1 / TV.L) == 0


def test_corollary1_closed_forms():
    cor = TV.corollary1()
    e = sp.exp(2 * TV.Delta / TV.T)
    assert TV.closes(cor.ratio - e)
    assert TV.closes(cor.paper_upper - e / TV.L)
    assert TV.closes(cor.paper_lower - 1 / (e * TV.L))
    assert TV.closes(cor.sharp_max - e / (e + TV.L - 1))
    # the brief's form of the minimum: e^{-2D/T} / (e^{-2D/T} + L - 1)
    assert TV.closes(cor.sharp_min - (1 / e) / (1 / e + TV.L - 1))
    # attained at the corners
    assert TV.closes(cor.attained_max - cor.sharp_max)
    assert TV.closes(cor.attained_min - cor.sharp_min)
    # looseness: exactly 1 + (e - 1)/L for the upper bound, -> 1 as L -> oo
    assert TV.closes(cor.looseness_upper - (1 + (e - 1) / TV.L))
    assert cor.looseness_limit_upper == 1 and cor.looseness_limit_lower == 1
    assert TV.closes(cor.vacuous_below - e)


def test_entropy_floor_form():
    floor = TV.entropy_floor()
    target = sp.log(1 + (TV.L - 1) * sp.exp(-2 * TV.Delta / TV.T))
    vals = {TV.L: 37, TV.Delta: sp.Rational(3, 2), TV.T: sp.Rational(7, 10)}
    assert abs(float((floor - target).subs(vals))) < 1e-12


@settings(max_examples=60, deadline=None)
@given(delta=DELTAS, length=LENGTHS, temperature=TEMPS)
def test_numeric_bounds_match_sympy(delta, length, temperature):
    cor = TV.corollary1()
    # evaluate sympy in log form to avoid overflow: compare with mpmath precision
    vals = {TV.Delta: sp.Float(delta, 30), TV.L: length, TV.T: sp.Float(temperature, 30)}
    lo, hi = V.sharpened_log_bounds(delta, length, temperature)
    ref_hi = sp.N(sp.log(cor.sharp_max.subs(vals)), 30)
    ref_lo = sp.N(sp.log(cor.sharp_min.subs(vals)), 30)
    assert abs(float(hi) - float(ref_hi)) <= 1e-9 * (1 + abs(float(ref_hi)))
    assert abs(float(lo) - float(ref_lo)) <= 1e-9 * (1 + abs(float(ref_lo)))


# ---------------------------------------------------------------------- bounds: properties
@settings(max_examples=150, deadline=None)
@given(delta=DELTAS, length=LENGTHS, temperature=TEMPS, seed=SEEDS)
def test_sharpened_and_paper_bounds_hold_on_random_bounded_logits(delta, length, temperature, seed):
    gen = torch.Generator().manual_seed(seed)
    # mixture of interior points and corner values, to stress the extremes
    u = torch.rand(length, generator=gen, dtype=torch.float64)
    corners = torch.rand(length, generator=gen) < 0.3
    u = torch.where(corners, (u > 0.5).to(torch.float64), u)
    logits = (2 * u - 1) * delta
    log_w = torch.log_softmax(logits / temperature, dim=0)
    lo, hi = V.sharpened_log_bounds(delta, length, temperature)
    plo, phi = V.paper_log_bounds(delta, length, temperature)
    tol = 1e-9 * (1 + 2 * delta / temperature)
    assert bool((log_w <= hi + tol).all()) and bool((log_w >= lo - tol).all())
    assert bool((log_w <= phi + tol).all()) and bool((log_w >= plo - tol).all())
    stats = V.row_statistics(logits[None, :], torch.tensor([delta], dtype=torch.float64), [length], temperature)
    assert stats.violations("sharp") == 0 and stats.violations("paper") == 0
    assert stats.violations("entropy") == 0


@settings(max_examples=100, deadline=None)
@given(delta=DELTAS, length=LENGTHS, temperature=TEMPS)
def test_sharpened_bounds_are_attained(delta, length, temperature):
    lo, hi = V.sharpened_log_bounds(delta, length, temperature)
    tol = 1e-9 * (1 + 2 * delta / temperature)
    top = torch.log_softmax(V.corner_logits(delta, length, "max") / temperature, 0)[0]
    bottom = torch.log_softmax(V.corner_logits(delta, length, "min") / temperature, 0)[0]
    assert abs(float(top - hi)) <= tol
    assert abs(float(bottom - lo)) <= tol
    stats = V.row_statistics(V.corner_logits(delta, length)[None, :], torch.tensor([delta], dtype=torch.float64),
                             [length], temperature)
    assert abs(float(stats.sharp_upper_slack[0])) <= tol


@settings(max_examples=100, deadline=None)
@given(delta=DELTAS, length=LENGTHS, temperature=TEMPS)
def test_sharpened_bounds_imply_paper_bounds(delta, length, temperature):
    lo, hi = V.sharpened_log_bounds(delta, length, temperature)
    plo, phi = V.paper_log_bounds(delta, length, temperature)
    assert float(hi) <= float(phi) + 1e-12 and float(lo) >= float(plo) - 1e-12
    assert float(hi) <= 1e-12  # a weight never exceeds 1, unlike the paper's upper bound
    # looseness of the paper's upper bound: exactly log(1 + (e^{2D/T} - 1)/L)
    two = 2 * delta / temperature
    expected = math.log1p(math.expm1(two) / length) if two < 700 else two - math.log(length) - float(hi)
    assert abs(float(phi - hi) - expected) <= 1e-9 * (1 + abs(expected))


@settings(max_examples=80, deadline=None)
@given(length=LENGTHS, seed=SEEDS, log_r=st.floats(min_value=0.0, max_value=20.0))
def test_general_normaliser_within_lemma1(length, seed, log_r):
    """Any positive F with F_max/F_min = r on the box: weights within [1/(1+(L-1)r), r/(r+L-1)]."""
    gen = torch.Generator().manual_seed(seed)
    f_values = torch.exp(torch.rand(length, generator=gen, dtype=torch.float64) * log_r)  # [1, r]
    weights = general_normalizer(torch.log(f_values), torch.exp, dim=0)
    lo, hi = V.general_log_bounds(log_r, length)
    c1, c2 = V.lemma1_log_constants(log_r)
    lw = torch.log(weights)
    tol = 1e-9 * (1 + log_r)
    assert bool((lw <= hi + tol).all()) and bool((lw >= lo - tol).all())
    assert bool((lw <= c2 - math.log(length) + tol).all())
    assert bool((lw >= c1 - math.log(length) - tol).all())


def test_bounds_do_not_overflow():
    lo, hi = V.sharpened_log_bounds(1e4, 1024, 1e-2)
    assert torch.isfinite(lo) and float(hi) == pytest.approx(0.0, abs=1e-12)
    assert float(lo) == pytest.approx(-2e6 - math.log(1023), rel=1e-12)


# --------------------------------------------------------------------- extraction + stats
def _reference_statistics(queries, keys, scale, lengths, temperature):
    """Slow loop reference: one row, one key at a time, in float64."""
    out = {"max": [], "min": [], "entropy": [], "delta": [], "sharp_out": [], "literal_out": []}
    q = queries.to(torch.float64)
    k = keys.to(torch.float64)
    for length in lengths:
        row = length - 1
        qn = float(q[row].norm())
        kn = [float(k[j].norm()) for j in range(length)]
        delta = scale * qn * max(kn)
        logits = [scale * float(q[row] @ k[j]) for j in range(length)]
        m = max(logits)
        z = sum(math.exp((x - m) / temperature) for x in logits)
        w = [math.exp((x - m) / temperature) / z for x in logits]
        e = math.exp(2 * delta / temperature)
        hi, lo = e / (e + length - 1), 1 / (1 + (length - 1) * e)
        out["max"].append(max(w))
        out["min"].append(min(w))
        out["entropy"].append(-sum(x * math.log(x) for x in w if x > 0))
        out["delta"].append(delta)
        out["sharp_out"].append(sum(1 for x in w if x > hi * (1 + 1e-9) or x < lo * (1 - 1e-9)))
        lit = 0
        for j, x in enumerate(w):
            ej = math.exp(2 * scale * qn * kn[j] / temperature)
            lit += x > ej / length * (1 + 1e-9) or x < 1 / (ej * length) * (1 - 1e-9)
        out["literal_out"].append(lit)
    return {key: torch.tensor(val, dtype=torch.float64) for key, val in out.items()}


@pytest.mark.parametrize("temperature", [0.5, 1.0, 3.0])
def test_sweep_matches_loop_reference(temperature):
    gen = torch.Generator().manual_seed(1)
    queries = torch.randn(2, 24, 5, generator=gen) * 2
    keys = torch.randn(2, 24, 5, generator=gen) * 2
    keys[:, 3] *= 0.01  # a key with a tiny norm (matters for the literal reading)
    lengths = [1, 2, 5, 11, 24]
    stats = V.sweep_queries_keys(queries, keys, 0.4, lengths, temperature)
    for h in range(2):
        ref = _reference_statistics(queries[h], keys[h], 0.4, lengths, temperature)
        torch.testing.assert_close(stats.max_weight[h], ref["max"], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(stats.min_weight[h], ref["min"], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(stats.entropy[h], ref["entropy"], rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(stats.delta[h], ref["delta"], rtol=1e-10, atol=1e-12)
        assert stats.sharp_outside[h].tolist() == ref["sharp_out"].long().tolist()
        assert stats.literal_outside[h].tolist() == ref["literal_out"].long().tolist()


def test_row_logits_are_the_causal_rows_of_the_full_matrix():
    gen = torch.Generator().manual_seed(2)
    queries = torch.randn(3, 2, 16, 4, generator=gen)
    keys = torch.randn(3, 2, 16, 4, generator=gen)
    full = 0.5 * queries.double() @ keys.double().transpose(-1, -2)
    full = full.masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(), float("-inf"))
    lengths = [4, 9, 16]
    rows = V.row_logits(queries, keys, 0.5, lengths)
    for g, length in enumerate(lengths):
        torch.testing.assert_close(rows[..., g, :], full[..., length - 1, :])


def test_literal_reading_of_delta_fails_where_max_reading_holds():
    """Delta = ||q|| ||k_i|| per key is not a valid bound: a zero key can take almost all weight."""
    length = 8
    queries = torch.zeros(length, 2)
    queries[-1, 0] = 1.0
    keys = torch.zeros(length, 2)
    keys[1:, 0] = -10.0         # key 0 is the zero vector: its literal Delta_0 is 0
    stats = V.sweep_queries_keys(queries, keys, 1.0, [length])
    assert float(stats.first_key_weight[0]) > 0.99     # far above the literal bound 1/L
    assert int(stats.literal_outside[0]) >= 1
    assert stats.violations("paper") == 0 and stats.violations("sharp") == 0


def test_stack_and_fraction():
    gen = torch.Generator().manual_seed(3)
    parts = [V.sweep_queries_keys(torch.randn(2, 3, 32, 4, generator=gen),
                                  torch.randn(2, 3, 32, 4, generator=gen), 0.5, [8, 16, 32])
             for _ in range(4)]
    stacked = V.stack_statistics(parts)
    assert stacked.max_weight.shape == (4, 2, 3, 3)
    assert stacked.fraction_inside("sharp") == 1.0 and stacked.fraction_inside("paper") == 1.0
    table = V.head_summary(stacked)
    assert len(table) == 6 and set(table["layer"]) == {0, 1}
    assert {"exponent", "two_delta_over_t_last", "non_vanishing"} <= set(table.columns)


# ------------------------------------------------------------------------ scaling and synthetic
def test_synthetic_bounded_logits_vanish_as_one_over_l():
    lengths = length_grid(32, 1024)
    logits = V.synthetic_bounded_logits(lengths, bound=1.0, trials=64, seed=0)
    assert bool((logits[torch.isfinite(logits)].abs() <= 1.0).all())
    stats = V.row_statistics(logits, torch.ones(64, len(lengths)), lengths)
    assert stats.violations("sharp") == 0 and stats.violations("paper") == 0
    exponent = loglog_fit(lengths, stats.max_weight.mean(0)).exponent
    assert -1.05 < float(exponent) < -0.95
    # deterministic
    again = V.synthetic_bounded_logits(lengths, bound=1.0, trials=64, seed=0)
    assert torch.equal(torch.nan_to_num(logits), torch.nan_to_num(again))


def test_doubling_grid():
    assert length_grid(32, 1024) == [32, 64, 128, 256, 512, 1024]
    assert length_grid(5, 5) == [5]


# -------------------------------------------------------------------------------- errors
@pytest.mark.parametrize("bad_t", [0.0, -1.0])
def test_bad_temperature_is_rejected(bad_t):
    with pytest.raises(ValueError, match="temperature"):
        V.sharpened_log_bounds(1.0, 10, bad_t)
    with pytest.raises(ValueError, match="temperature"):
        V.row_statistics(torch.zeros(1, 3), torch.ones(1), [3], bad_t)


def test_bad_lengths_are_rejected():
    with pytest.raises(ValueError, match="at least 1"):
        V.sharpened_log_bounds(1.0, 0)
    with pytest.raises(ValueError, match="1..16"):
        V.row_logits(torch.randn(16, 2), torch.randn(16, 2), 1.0, [8, 32])
    with pytest.raises(ValueError, match="empty"):
        V.check_lengths([], 8)
    with pytest.raises(ValueError, match="Delta"):
        V.paper_log_bounds(-1.0, 4)
    with pytest.raises(ValueError, match="kind"):
        V.corner_logits(1.0, 4, "middle")


def test_unmasked_rows_are_rejected():
    with pytest.raises(ValueError, match="-inf"):
        V.row_statistics(torch.zeros(1, 4), torch.ones(1), [2])


# -------------------------------------------------------------- the chapter's assertion helper
def test_violated_bound_is_detected_and_check_fails():
    """An understated Delta makes the data break the bound: the counts see it, check raises."""
    book = pytest.importorskip("normlimits.book.chapter")
    logits = V.corner_logits(3.0, 64)[None, :]
    honest = V.row_statistics(logits, torch.tensor([3.0]), [64])
    book.check(honest.violations("sharp") == 0, "sharpened bound violated")
    lying = V.row_statistics(logits, torch.tensor([1.0]), [64])    # |l| reaches 3 > 1
    assert lying.violations("sharp") > 0 and lying.violations("paper") > 0
    with pytest.raises(AssertionError, match="sharpened bound violated"):
        book.check(lying.violations("sharp") == 0, "sharpened bound violated")


# -------------------------------------------------------------------- per-layer scale, capture
def test_per_layer_scale_broadcasts_like_separate_layers():
    gen = torch.Generator().manual_seed(4)
    queries = torch.randn(2, 3, 20, 4, generator=gen)
    keys = torch.randn(2, 3, 20, 4, generator=gen)
    scales = torch.tensor([0.5, 0.25])
    both = V.sweep_queries_keys(queries, keys, scales, [5, 20])
    for layer in range(2):
        one = V.sweep_queries_keys(queries[layer], keys[layer], float(scales[layer]), [5, 20])
        torch.testing.assert_close(both.max_weight[layer], one.max_weight)
        torch.testing.assert_close(both.delta[layer], one.delta)
    with pytest.raises(ValueError, match="scale"):
        V.row_logits(queries[0, 0], keys[0, 0], scales, [5])


def test_sweep_capture_matches_the_models_own_weights():
    """Rows L-1 of one pass: the recomputed weights equal the capture's (= the model's) weights."""
    from transformers import GPT2Config, GPT2LMHeadModel

    from normlimits.model.capture import capture_window
    from normlimits.model.pretrained import LoadedModel

    torch.manual_seed(0)
    cfg = GPT2Config(n_layer=2, n_head=2, n_embd=16, n_positions=64, vocab_size=50,
                     bos_token_id=49, eos_token_id=49, attn_implementation="eager")
    model = GPT2LMHeadModel(cfg).eval()
    loaded = LoadedModel(model=model, name="tiny", source="test", encode=lambda s: [],
                         tokenizer_kind="none", is_paper_model=False)
    ids = torch.randint(0, 50, (64,))
    capture = capture_window(loaded, ids)
    lengths = [8, 16, 32, 64]
    stats = V.sweep_capture(capture, lengths)
    weights = capture.weights(torch.tensor(lengths) - 1).double()          # [layers, H, G, 64]
    torch.testing.assert_close(stats.max_weight, weights.amax(-1), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(stats.first_key_weight, weights[..., 0], rtol=1e-5, atol=1e-6)
    # causality: row L-1 of the long window equals the last row of the window cut to L tokens
    short = V.sweep_capture(capture_window(loaded, ids[:16]), [16])
    torch.testing.assert_close(short.max_weight[..., 0], stats.max_weight[..., 1],
                               rtol=1e-5, atol=1e-6)
    assert stats.violations("sharp") == 0 and stats.violations("paper") == 0


def test_synthetic_sink_keeps_a_constant_weight_until_l_is_large():
    lengths = length_grid(32, 1024)
    logits = V.synthetic_sink_logits(lengths, bound=8.0, trials=16, seed=0)
    finite = logits[torch.isfinite(logits)]
    assert float(finite.max()) == 8.0 and float(finite.min()) >= -8.0
    stats = V.row_statistics(logits, torch.full((16, len(lengths)), 8.0, dtype=torch.float64), lengths)
    assert stats.violations("sharp") == 0
    assert bool((stats.argmax_key == 0).all())
    exponent = loglog_fit(lengths, stats.first_key_weight.mean(0)).exponent
    assert float(exponent) > -0.1          # far from -1 at L <= 1024 ...
    # ... and the predicted weight 1/(1 + (L-1)(1-e^-a)/(a e^a)) matches within sampling noise
    a = 8.0
    pred = 1 / (1 + (torch.tensor(lengths, dtype=torch.float64) - 1) * (1 - math.exp(-a)) / (a * math.exp(a)))
    torch.testing.assert_close(stats.first_key_weight.mean(0), pred, rtol=2e-3, atol=0)


def test_head_summary_argmax_distance():
    """A head that always attends to key 0 has distance L-1; one on its own token has 0."""
    lengths = [4, 8]
    logits = torch.full((3, 2, 1, 2, 8), -1.0, dtype=torch.float64)   # [W, layers, heads, G, K]
    logits[..., 0, 0, :, 0] = 5.0                                     # layer 0: key 0
    logits[:, 1, 0, 0, 3] = 5.0                                       # layer 1: own token (L-1)
    logits[:, 1, 0, 1, 7] = 5.0
    visible = torch.arange(8)[None, :] < torch.tensor(lengths)[:, None]
    logits = logits.masked_fill(~visible, float("-inf"))
    stats = V.row_statistics(logits, torch.full((3, 2, 1, 2), 5.0, dtype=torch.float64), lengths)
    table = V.head_summary(stats)
    assert table["argmax_first_key"].tolist() == [1.0, 0.0]
    assert table["argmax_distance"].tolist() == [3.0, 0.0]   # median of (3, 7) is the lower, 3


# ------------------------------------------------------------------- chapter-level helpers
def test_synthetic_families_obey_the_bounds_and_the_table_reads_them():
    lengths = length_grid(32, 512)
    families = V.synthetic_families(lengths, bounds=(0.5, 5.0), sink_bound=8.0, trials=32)
    assert list(families) == ["uniform, a = 0.5", "uniform, a = 5", "sink, a = 8"]
    table = V.family_table(families)
    assert (table["outside"] == 0).all()
    assert -1.1 < table.loc["uniform, a = 0.5", "exponent of max alpha"] < -0.9
    assert table.loc["sink, a = 8", "exponent of max alpha"] > -0.2      # the sink does not vanish
    assert table.loc["uniform, a = 5", "e^(2a)"] == pytest.approx(math.exp(10))


def test_general_normalizer_check_counts_violations_of_a_wrong_ratio():
    lengths = length_grid(32, 256)
    good = V.general_normalizer_check(lengths, torch.nn.functional.softplus, 2.0, trials=16)
    assert good["outside"] == 0 and good["weights"] == 16 * sum(lengths)
    assert good["ratio"] == pytest.approx(math.log1p(math.exp(2)) / math.log1p(math.exp(-2)))
    decreasing = V.general_normalizer_check(lengths, lambda l: torch.exp(-l), 2.0, trials=8)
    assert decreasing["ratio"] == pytest.approx(math.exp(4)) and decreasing["outside"] == 0
    bowl = V.general_normalizer_check(lengths, lambda l: l * l + 0.1, 2.0, trials=8)
    assert bowl["ratio"] == pytest.approx(4.1 / 0.1) and bowl["outside"] == 0
    with pytest.raises(ValueError, match="positive"):
        V.general_normalizer_check(lengths, lambda l: l, 2.0, trials=2)


def test_sweep_captures_stacks_windows_and_checks_parity(tiny_loaded):
    from normlimits.model.capture import iter_captures

    windows = torch.randint(0, 256, (2, 32), generator=torch.Generator().manual_seed(0))
    stats, parity = V.sweep_captures(iter_captures(tiny_loaded, windows), [8, 16, 32])
    assert stats.max_weight.shape == (2, 2, 4, 3)
    assert parity < 1e-5
    room = V.bound_room_table(stats)
    assert room.iloc[:2, 0].tolist() == [1.0, 1.0]          # proven bounds hold on every weight
    assert (room.iloc[:2, 1] >= 0).all() and (room.iloc[:2, 2] >= 0).all()
    with pytest.raises(ValueError, match="zero windows"):
        V.sweep_captures(iter([]), [8])


def test_non_vanishing_report_names_sinks_and_handles_empty_groups(tiny_loaded):
    from normlimits.model.capture import iter_captures

    windows = torch.randint(0, 256, (2, 64), generator=torch.Generator().manual_seed(1))
    stats, _ = V.sweep_captures(iter_captures(tiny_loaded, windows), [8, 16, 32, 64])
    heads = V.head_summary(stats)
    heads["head"] = [f"L{l}H{h}" for l, h in zip(heads["layer"], heads["head"])]
    for flags, word in ((True, "every head is non-vanishing"), (False, "no head is non-vanishing")):
        heads["non_vanishing"] = flags
        report = V.non_vanishing_report(heads, stats)
        assert word in report["vanish_compare"] and len(report["table"]) == len(heads)
    heads["non_vanishing"] = [True] + [False] * (len(heads) - 1)
    heads["argmax_first_key"] = [0.9] + [0.0] * (len(heads) - 1)
    report = V.non_vanishing_report(heads, stats)
    assert report["sink_sentence"].startswith("1 of the 1 non-vanishing heads")
    assert 0.0 <= report["bite_fraction"] <= 1.0 and len(report["table"]) == 1


# ------------------------------------------------------------------------ NU's intervals (issue 31)
def _random_stacked(windows: int, seed: int = 3):
    gen = torch.Generator().manual_seed(seed)
    return V.stack_statistics([V.sweep_queries_keys(torch.randn(2, 3, 32, 4, generator=gen) * 2,
                                                    torch.randn(2, 3, 32, 4, generator=gen), 0.5,
                                                    [8, 16, 32]) for _ in range(windows)])


def _windows_of(stats, rows):
    """The statistics of the windows ``rows`` (repeats allowed), [len(rows), layers, heads, G]."""
    picked = {f.name: getattr(stats, f.name) for f in fields(V.RowStatistics)}
    return V.RowStatistics(**{name: value[torch.as_tensor(rows)] if torch.is_tensor(value) and value.dim() == 4
                              else value for name, value in picked.items()})


def _nu_values(stats):
    heads = V.head_summary(stats)
    heads["head"] = [f"L{l}H{h}" for l, h in zip(heads["layer"], heads["head"])]
    return {"exponent": float(heads["exponent"].median()),
            "entropy": float(heads["entropy_ratio_last"].median()),
            "regime": V.non_vanishing_report(heads, stats)["bite_fraction"]}


def test_nu_intervals_are_the_chapters_statistics_over_resampled_windows():
    """Each resample's statistic is what head_summary and non_vanishing_report give on the windows
    drawn (with repeats): the quantiles of 7 resamples computed one by one equal the intervals."""
    from normlimits.core import bootstrap as B

    stats = _random_stacked(5)
    got = V.nu_intervals(stats, resamples=7, seed=11)
    per_resample = [_nu_values(_windows_of(stats, row)) for row in B.resample_indices(5, 7, 11)]
    for key, interval in got.items():
        drawn = torch.tensor([v[key] for v in per_resample], dtype=torch.float64)
        low, high = torch.quantile(drawn, torch.tensor([0.025, 0.975], dtype=torch.float64)).tolist()
        assert interval.low == pytest.approx(low, abs=1e-12) and interval.high == pytest.approx(high, abs=1e-12), key
        assert interval.n == 5 and interval.unit == "window" and interval.resamples == 7


def test_nu_intervals_of_identical_windows_are_the_value_and_one_window_has_none():
    one = _random_stacked(1)
    assert V.nu_intervals(one) == {}
    assert "single corpus window" in V.nu_interval_sentence(_nu_values(one), {})
    same = _windows_of(one, [0, 0, 0, 0])
    values = _nu_values(same)
    for key, interval in V.nu_intervals(same, resamples=50).items():
        assert interval.low == pytest.approx(values[key], abs=1e-12)
        assert interval.high == pytest.approx(values[key], abs=1e-12)
    spread = _random_stacked(6)
    sentence = V.nu_interval_sentence(_nu_values(spread), V.nu_intervals(spread, resamples=200))
    assert sentence.startswith("Resampling the 6 corpus windows (200 percentile bootstrap resamples) gives 95% intervals: ")
    assert "median exponent" in sentence and "[" in sentence
    with pytest.raises(ValueError, match="stacked over windows"):
        V.nu_intervals(V.sweep_queries_keys(torch.randn(3, 32, 4), torch.randn(3, 32, 4), 0.5, [8, 16, 32]))


def test_max_weight_rest_removes_key_zero_and_renormalises():
    """The sink pattern keeps its weight on key 0; without key 0 the rest (uniform logits on
    [-a, 0]) spread about evenly, so that largest weight falls about as 1/L; every finite row
    is checked against a loop over its keys 1..L-1."""
    lengths = length_grid(32, 1024)
    logits = V.synthetic_sink_logits(lengths, bound=8.0, trials=8, seed=0)
    stats = V.row_statistics(logits, torch.full((8, len(lengths)), 8.0, dtype=torch.float64), lengths)
    for trial in (0, 5):
        for g, length in enumerate(lengths):
            rest = logits[trial, g, 1:length]
            expected = float(torch.softmax(rest, -1).max())
            assert float(stats.max_weight_rest[trial, g]) == pytest.approx(expected, rel=1e-12)
    assert float(loglog_fit(lengths, stats.first_key_weight.mean(0)).exponent) > -0.1
    assert float(loglog_fit(lengths, stats.max_weight_rest.mean(0)).exponent) < -0.8
    one = V.row_statistics(torch.tensor([[[0.5, float("-inf")], [0.5, 1.0]]], dtype=torch.float64),
                           torch.ones(1, 2, dtype=torch.float64), [1, 2])
    assert math.isnan(float(one.max_weight_rest[0, 0])) and float(one.max_weight_rest[0, 1]) == 1.0


def test_head_summary_reports_the_exponent_without_key_zero():
    lengths = length_grid(32, 256)
    logits = V.synthetic_sink_logits(lengths, bound=8.0, trials=4, seed=2)
    stats = V.stack_statistics([V.row_statistics(logits.reshape(2, 2, len(lengths), -1),
                                                 torch.full((2, 2, len(lengths)), 8.0, dtype=torch.float64),
                                                 lengths)] * 2)
    heads = V.head_summary(stats)
    assert list(heads["exponent"] > -0.1) == [True] * 4
    assert list(heads["exponent_rest"] < -0.6) == [True] * 4      # one row per head: noisy, far from 0


def test_nu_is_not_testable_outside_the_regime_and_graded_inside():
    """NU's regime criterion is a scope criterion: with no row where L > e^(2 Delta/T) the claim
    is not testable whatever the exponent says (the reason names the regime); inside the regime
    the exponent and entropy grade it."""
    from normlimits import claims

    outside = {"exponent": -0.3, "entropy": 0.6, "regime": 0.0}
    row = claims.make_row("NU", outside, "test", chapter="vanishing", model="test")
    assert row["verdict"] == "not testable"
    assert "outside the claim's scope" in row["reason"] and "L > e^2Δ/T" in row["reason"]
    assert claims.claim("NU").rule.grade({**outside, "regime": 0.9}) == "refuted"
    assert claims.claim("NU").rule.grade({"exponent": -0.95, "entropy": 0.95, "regime": 0.9}) == "confirmed"
    # a regime share whose interval straddles the threshold leaves the verdict open
    assert claims.claim("NU").rule.grade({**outside, "regime": 0.55},
                                         {"regime": (0.3, 0.7)}) == "inconclusive"
