"""Tests of normlimits.metrics.normalizers: every normaliser's defining properties, masks and gradients."""

from __future__ import annotations

import math

import entmax
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from normlimits.metrics import normalizers as N
from normlimits.metrics.normalizers import NORMALIZERS

NAMES = list(NORMALIZERS)
NEG_INF = float("-inf")


def random_masked(rows=6, keys=9, seed=0, scale=2.0, causal=True):
    """Float64 logits [rows, keys] with a causal-like mask: row r sees keys 0..(r mod keys)."""
    gen = torch.Generator().manual_seed(seed)
    z = scale * torch.randn(rows, keys, generator=gen, dtype=torch.float64)
    if causal:
        visible = torch.arange(keys)[None, :] <= (torch.arange(rows)[:, None] + 2) % keys
        z = z.masked_fill(~visible, NEG_INF)
    return z


# ------------------------------------------------------------------------ slow references
def sparsemax_reference(z: list[float]) -> list[float]:
    """Sparsemax by the sort-based algorithm of Martins & Astudillo (2016), Algorithm 1, in loops."""
    zs = sorted(z, reverse=True)
    cumulative, k_max = 0.0, 0
    for k, value in enumerate(zs, start=1):
        cumulative += value
        if 1 + k * value > cumulative:
            k_max, tau_sum = k, cumulative
    tau = (tau_sum - 1) / k_max
    return [max(v - tau, 0.0) for v in z]


def entmax15_reference(z: list[float]) -> list[float]:
    """1.5-entmax by bisection on tau in plain Python: p_i = max(z_i/2 - tau, 0)^2, sum p = 1."""
    half = [v / 2 for v in z]
    lo, hi = max(half) - 1.0, max(half)
    for _ in range(200):
        tau = (lo + hi) / 2
        total = sum(max(v - tau, 0.0) ** 2 for v in half)
        if total > 1:
            lo = tau
        else:
            hi = tau
    tau = (lo + hi) / 2
    return [max(v - tau, 0.0) ** 2 for v in half]


def adaptive_reference(z: list[float]) -> list[float]:
    """Velickovic et al.'s snippet, transcribed with numpy for one row (exact entropy)."""
    x = np.array(z)
    p = np.exp(x - x.max())
    p /= p.sum()
    entropy = float(-(p * np.log(p)).sum())
    beta = max(np.polyval(N.VELICKOVIC_POLYNOMIAL, entropy), 1.0) if entropy > 0.5 else 1.0
    q = np.exp(beta * (x - x.max()))
    return list(q / q.sum())


def sa_reference(z: list[float]) -> list[float]:
    x = np.array(z)
    p = np.exp(x - x.max())
    p /= p.sum()
    low, high = min(x.min(), 0.0), max(x.max(), 0.0)
    return list((x - low) / (high - low) * p)


# ------------------------------------------------------------------------------- the basics
def test_registry_order_and_lookup():
    assert NAMES[0] == "softmax"
    assert set(NAMES) == {"softmax", "sparsemax", "entmax15", "ssmax", "softmax1", "adaptive",
                          "sa-softmax", "softpick", "sigmoid", "stickbreaking", "asentmax",
                          "topk-sqrt", "topk-log2"}
    assert N.get_normalizer("sparsemax") is NORMALIZERS["sparsemax"]
    assert N.get_normalizer(NORMALIZERS["ssmax"]) is NORMALIZERS["ssmax"]
    with pytest.raises(KeyError, match="registered: softmax"):
        N.get_normalizer("relu")


def test_registry_entries_cite_the_bibliography():
    from pathlib import Path

    bib = (Path(__file__).resolve().parents[2] / "book" / "references.bib").read_text()
    for nz in NORMALIZERS.values():
        assert "{" + nz.cite + "," in bib, nz.cite
        assert nz.formula and nz.label


@pytest.mark.parametrize("name", NAMES)
def test_masked_keys_get_exact_zeros(name):
    z = random_masked()
    w = NORMALIZERS[name](z)
    assert torch.all(w[~torch.isfinite(z)] == 0)
    assert torch.isfinite(w).all()


@pytest.mark.parametrize("name", NAMES)
def test_rows_sum_to_one_where_they_should(name):
    nz = NORMALIZERS[name]
    z = random_masked(rows=20, keys=30, seed=3)
    total = nz(z).sum(-1)
    if nz.sums_to_one:
        assert torch.allclose(total, torch.ones_like(total), atol=1e-12)
    elif name == "sigmoid":                                   # no competition: any sum
        assert bool((total >= 0).all()) and bool((total > 1).any())
    else:
        assert bool((total <= 1 + 1e-12).all()) and bool((total >= 0).all())
        assert bool((total < 1 - 1e-6).any())


@pytest.mark.parametrize("name", NAMES)
def test_mask_equals_normalising_the_visible_keys_alone(name):
    """Masked keys are invisible: the visible part equals the normaliser on the sub-vector."""
    nz = NORMALIZERS[name]
    z = random_masked(rows=8, keys=12, seed=5)
    w = nz(z)
    for r in range(z.shape[0]):
        vis = torch.isfinite(z[r])
        assert torch.allclose(w[r, vis], nz(z[r, vis]), atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_dim_argument(name):
    nz = NORMALIZERS[name]
    z = random_masked(rows=5, keys=7, seed=2)
    assert torch.allclose(nz(z.T.contiguous(), dim=0).T, nz(z, dim=-1), atol=1e-12)
    z3 = z.reshape(5, 1, 7).expand(5, 3, 7)
    assert torch.allclose(nz(z3)[:, 1], nz(z), atol=1e-12)


@pytest.mark.parametrize("name", NAMES)
def test_float32_inputs_work(name):
    z = random_masked().float()
    w = NORMALIZERS[name](z)
    assert w.dtype == torch.float32
    assert torch.allclose(w.double(), NORMALIZERS[name](z.double()), atol=1e-5)


@pytest.mark.parametrize("name", NAMES)
def test_bad_inputs_raise(name):
    nz = NORMALIZERS[name]
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        nz(torch.tensor([0.0, float("nan")]))
    with pytest.raises(ValueError, match="NaN or \\+inf"):
        nz(torch.tensor([0.0, float("inf")]))
    with pytest.raises(ValueError, match="at least one visible"):
        nz(torch.tensor([[0.0, 1.0], [NEG_INF, NEG_INF]]))


def test_visible_count_and_bad_n():
    z = random_masked(rows=4, keys=6)
    counts = N.visible_count(z)
    assert counts.shape == (4, 1)
    assert torch.equal(counts.squeeze(-1), torch.isfinite(z).sum(-1).double())
    with pytest.raises(ValueError, match="n must be >= 1"):
        N.scalable_softmax(z, n=0)


def test_check_temperature_and_at_temperature():
    with pytest.raises(ValueError, match="T must be > 0"):
        N.check_temperature(0)
    z = random_masked()
    nz = NORMALIZERS["sparsemax"]
    assert torch.allclose(nz.at_temperature(z, 0.5), nz(z / 0.5))
    with pytest.raises(ValueError):
        nz.at_temperature(z, -1.0)


# ------------------------------------------------------------------------- each normaliser
def test_softmax_matches_softmax_with_temperature():
    z = random_masked()
    assert torch.allclose(N.softmax(z), N.softmax_with_temperature(z), atol=0)


@pytest.mark.parametrize("temperature", [0.1, 0.5, 3.0])
def test_softmax_with_temperature_divides_the_logits_by_t(temperature):
    z = random_masked()
    expected = torch.softmax(z / temperature, dim=-1)
    assert torch.allclose(N.softmax_with_temperature(z, temperature=temperature), expected, atol=1e-15)
    assert torch.allclose(N.get_normalizer("softmax").at_temperature(z, temperature), expected, atol=1e-15)


@given(st.lists(st.floats(-20, 20), min_size=1, max_size=12))
@settings(max_examples=150, deadline=None)
def test_sparsemax_agrees_with_reference_and_entmax(values):
    z = torch.tensor(values, dtype=torch.float64)
    ours = N.sparsemax(z)
    assert torch.allclose(ours, torch.tensor(sparsemax_reference(values), dtype=torch.float64),
                          atol=1e-9)
    assert torch.allclose(ours, entmax.sparsemax(z), atol=0)
    assert torch.allclose(ours, entmax.sparsemax_bisect(z), atol=1e-6)
    assert abs(float(ours.sum()) - 1) < 1e-12


@given(st.lists(st.floats(-20, 20), min_size=1, max_size=12))
@settings(max_examples=150, deadline=None)
def test_entmax15_agrees_with_reference_and_bisection(values):
    z = torch.tensor(values, dtype=torch.float64)
    ours = N.entmax15(z)
    assert torch.allclose(ours, torch.tensor(entmax15_reference(values), dtype=torch.float64),
                          atol=1e-9)
    assert torch.allclose(ours, entmax.entmax_bisect(z, alpha=1.5, n_iter=100), atol=1e-6)
    assert abs(float(ours.sum()) - 1) < 1e-12


def test_sparse_normalisers_give_exact_zeros_and_one_hot_rows():
    z = torch.tensor([[3.0, 2.0, 1.5, -1.0], [5.0, 4.0, 3.0, 3.0], [1.0, 0.9, 0.8, 0.7]],
                     dtype=torch.float64)
    sp_w, ent_w = N.sparsemax(z), N.entmax15(z)
    assert sp_w[0, 3] == 0 and ent_w[0, 3] == 0          # exact zeros below the threshold
    assert torch.equal(sp_w[1], torch.tensor([1.0, 0, 0, 0], dtype=torch.float64))  # gap 1
    assert 0.5 < float(ent_w[1, 0]) < 1                  # 1.5-entmax needs a gap of 2, not 1
    assert bool((sp_w[2] > 0).all())                     # logits within 1: full support
    # 1.5-entmax is one-hot once the top gap reaches 2
    z2 = torch.tensor([6.0, 4.0, 3.9, -2.0], dtype=torch.float64)
    assert torch.equal(N.entmax15(z2), torch.tensor([1.0, 0, 0, 0], dtype=torch.float64))


@given(st.integers(1, 200), st.floats(0.0, 3.0))
@settings(max_examples=60, deadline=None)
def test_ssmax_is_softmax_of_scaled_logits(keys, s):
    gen = torch.Generator().manual_seed(keys)
    z = torch.randn(keys, generator=gen, dtype=torch.float64)
    expected = torch.softmax(s * math.log(keys) * z, -1)
    assert torch.allclose(N.scalable_softmax(z, s=s), expected, atol=1e-12)


def test_ssmax_defaults_and_explicit_n():
    z = random_masked(rows=40, keys=40, seed=1)
    counts = torch.isfinite(z).sum(-1)
    row = int((counts == 32).nonzero()[0])
    assert torch.allclose(N.scalable_softmax(z[row]), torch.softmax(z[row], -1), atol=1e-12)
    assert abs(N.ssmax_scale() - 1 / math.log(32)) < 1e-15
    # n given explicitly overrides the count (broadcast per row)
    n = torch.full((40, 1), 1024.0, dtype=torch.float64)
    w = N.scalable_softmax(z, n=n)
    factor = math.log(1024) / math.log(32)
    assert torch.allclose(w, torch.softmax(factor * z, -1), atol=1e-12)
    # n = 1: factor 0 -> uniform over the visible keys (no NaN from 0 * -inf)
    w1 = N.scalable_softmax(z, n=1)
    assert torch.allclose(w1, torch.softmax(torch.zeros_like(z).masked_fill(~torch.isfinite(z), NEG_INF), -1))
    with pytest.raises(ValueError, match="s must be >= 0"):
        N.scalable_softmax(z, s=-1.0)
    with pytest.raises(ValueError, match="reference_length"):
        N.scalable_softmax(z, reference_length=1)


def test_softmax_one_equals_softmax_with_an_extra_zero_logit():
    z = random_masked(rows=10, keys=8, seed=4, scale=5.0)
    extended = torch.cat([z, torch.zeros(10, 1, dtype=torch.float64)], -1)
    expected = torch.softmax(extended, -1)[:, :-1]
    assert torch.allclose(N.softmax_one(z), expected, atol=1e-14)
    # huge logits: no overflow, mass -> 1; very negative: mass -> 0
    big = torch.tensor([800.0, 799.0, NEG_INF], dtype=torch.float64)
    assert torch.allclose(N.softmax_one(big).sum(), torch.tensor(1.0, dtype=torch.float64))
    small = torch.tensor([-800.0, -790.0], dtype=torch.float64)
    assert float(N.softmax_one(small).sum()) < 1e-300 or float(N.softmax_one(small).sum()) == 0.0


@given(st.lists(st.floats(-8, 8), min_size=1, max_size=40))
@settings(max_examples=150, deadline=None)
def test_adaptive_temperature_matches_the_snippet(values):
    z = torch.tensor(values, dtype=torch.float64)
    ours = N.adaptive_temperature_softmax(z)
    assert torch.allclose(ours, torch.tensor(adaptive_reference(values), dtype=torch.float64),
                          atol=1e-10)


def test_adaptive_temperature_never_raises_entropy_and_is_softmax_when_sharp():
    z = random_masked(rows=30, keys=50, seed=7, scale=1.0)
    soft, ada = N.softmax(z), N.adaptive_temperature_softmax(z)

    def entropy(w):
        return -(torch.where(w > 0, w * w.clamp_min(1e-300).log(), torch.zeros_like(w))).sum(-1)

    assert bool((entropy(ada) <= entropy(soft) + 1e-12).all())
    sharp = torch.tensor([10.0, 0.0, -1.0], dtype=torch.float64)   # entropy < 0.5
    assert torch.allclose(N.adaptive_temperature_softmax(sharp), torch.softmax(sharp, -1), atol=0)
    h = torch.tensor([0.2, 0.6, 4.4, 7.0], dtype=torch.float64)
    beta = N.adaptive_beta(h)
    assert float(beta[0]) == 1.0 and float(beta[3]) == 1.0 and float(beta[2]) > 2.4


@given(st.lists(st.floats(-10, 10), min_size=1, max_size=20))
@settings(max_examples=150, deadline=None)
def test_sa_softmax_matches_formula(values):
    z = torch.tensor(values, dtype=torch.float64)
    ours = N.self_adjusted_softmax(z)
    if max(abs(v) for v in values) == 0:
        assert torch.equal(ours, torch.zeros_like(z))
        return
    assert torch.allclose(ours, torch.tensor(sa_reference(values), dtype=torch.float64), atol=1e-12)
    assert bool((ours >= 0).all()) and float(ours.sum()) <= 1 + 1e-12
    plain = N.self_adjusted_softmax(z, normalized=False)
    assert torch.allclose(plain, z * torch.softmax(z, -1), atol=1e-12)


# --------------------------------------------------------------------------------- gradients
@pytest.mark.parametrize("name", NAMES)
def test_gradients_finite_and_zero_at_masked_keys(name):
    z = random_masked(rows=7, keys=9, seed=11).requires_grad_(True)
    w = NORMALIZERS[name](z)
    gen = torch.Generator().manual_seed(0)
    (w * torch.randn(w.shape, generator=gen, dtype=torch.float64)).sum().backward()
    assert torch.isfinite(z.grad).all()
    assert torch.all(z.grad[~torch.isfinite(z.detach())] == 0)


@pytest.mark.parametrize("name", ["softmax", "ssmax", "softmax1", "adaptive", "sa-softmax", "softpick",
                                  "sigmoid", "stickbreaking", "topk-sqrt", "topk-log2"])
def test_forward_mode_gradients_finite(name):
    z = random_masked(rows=7, keys=9, seed=12)
    tangent = torch.where(torch.isfinite(z), torch.randn_like(z), torch.zeros_like(z))
    _, jv = torch.func.jvp(NORMALIZERS[name], (z,), (tangent,))
    assert torch.isfinite(jv).all()
    assert torch.all(jv[~torch.isfinite(z)] == 0)


@pytest.mark.parametrize("name", NAMES)
def test_gradcheck_away_from_kinks(name):
    # distinct logits, entropy away from the adaptive threshold, no ties at SA's min/max,
    # no logit at a sparsemax/entmax threshold
    z = torch.tensor([[1.3, -0.4, 0.25, 0.9, -1.7]], dtype=torch.float64, requires_grad=True)
    assert torch.autograd.gradcheck(NORMALIZERS[name], (z,), eps=1e-6, atol=1e-5)


# ------------------------------------------------------------ Lemma 1 on bounded logits (proofs)
@given(st.integers(2, 400), st.floats(0.05, 3.0), st.integers(0, 10_000))
@settings(max_examples=80, deadline=None)
def test_non_escaping_normalisers_obey_a_one_over_l_bound(keys, bound, seed):
    """softmax_1, SA-softmax and adaptive T keep every weight below e^{2 B a} / L (B = 1 or
    the polynomial's maximum 2.4214), the chapter's proofs that they do not escape Lemma 1."""
    gen = torch.Generator().manual_seed(seed)
    z = (2 * torch.rand(keys, generator=gen, dtype=torch.float64) - 1) * bound
    cap = math.exp(2 * bound) / keys
    assert float(N.softmax_one(z).max()) <= cap * (1 + 1e-12)
    assert float(N.self_adjusted_softmax(z).max()) <= cap * (1 + 1e-12)
    assert float(N.adaptive_temperature_softmax(z).max()) <= math.exp(2 * 2.4214 * bound) / keys * (1 + 1e-9)


@pytest.mark.parametrize("keys", [10, 100, 1000, 10_000])
def test_escaping_normalisers_keep_a_constant_top_weight(keys):
    """One logit at +a, the rest at -a (|z| <= a): sparsemax/entmax one-hot for a >= 1/2, 1
    (a = 1.25 here: at entmax's boundary gap of exactly 2, round-off leaves weights ~5e-32);
    SSMax's top weight is 1 / (1 + (L-1) L^{-2 s a})."""
    a = 1.25
    z = torch.full((keys,), -a, dtype=torch.float64)
    z[0] = a
    for w in (N.sparsemax(z), N.entmax15(z)):
        assert abs(float(w[0]) - 1.0) < 1e-12 and bool((w[1:] == 0).all())   # one-hot
    s = 1 / math.log(32)
    expected = 1 / (1 + (keys - 1) * keys ** (-2 * s * a))
    assert abs(float(N.scalable_softmax(z)[0]) - expected) < 1e-12


# ------------------------------------------------------------------- the normalisers since 2024
def softpick_reference(x: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """The reference ``softpick`` of ``naive_softpick_attn.py`` (zaydzuhri/softpick-attention),
    transcribed: shift by the row max, masked keys out of the denominator, eps added."""
    x_m = torch.max(x, dim=-1, keepdim=True).values
    x_e_1 = torch.exp(x - x_m) - torch.exp(-x_m)
    a = torch.where(x.isfinite(), torch.abs(x_e_1), torch.zeros_like(x_e_1))
    return torch.relu(x_e_1) / (a.sum(-1, keepdim=True) + eps)


def test_softpick_matches_the_reference_and_its_formula():
    z = random_masked(rows=12, keys=10, seed=21, scale=3.0)
    ours = N.softpick(z)
    assert torch.allclose(ours, softpick_reference(z), atol=1e-7)
    vis = torch.isfinite(z)
    e = torch.where(vis, torch.exp(torch.where(vis, z, 0.0)) - 1, torch.zeros_like(z))
    formula = torch.relu(e) / e.abs().sum(-1, keepdim=True)
    assert torch.allclose(ours, formula, atol=1e-12)
    assert bool((ours[vis & (z <= 0)] == 0).all())                        # rectified: exact zeros
    neg = torch.tensor([-1.0, -2.0, -0.5], dtype=torch.float64)
    assert torch.equal(N.softpick(neg), torch.zeros(3, dtype=torch.float64))  # attends to nothing
    big = torch.tensor([900.0, 899.0, -3.0], dtype=torch.float64)            # no overflow
    assert torch.isfinite(N.softpick(big)).all() and float(N.softpick(big).sum()) <= 1
    zero = torch.zeros(4, dtype=torch.float64)
    assert torch.equal(N.softpick(zero), zero)                              # 0/0 row -> zeros


def test_sigmoid_attention_has_bias_minus_log_n():
    z = random_masked(rows=8, keys=10, seed=22)
    w = N.sigmoid_attention(z)
    n = torch.isfinite(z).sum(-1, keepdim=True).double()
    expected = torch.where(torch.isfinite(z), torch.sigmoid(z - torch.log(n)), torch.zeros_like(z))
    assert torch.allclose(w, expected, atol=1e-15)
    assert torch.allclose(N.sigmoid_attention(z, n=1024), torch.where(
        torch.isfinite(z), torch.sigmoid(z - math.log(1024)), torch.zeros_like(z)), atol=1e-15)
    flat = torch.zeros(500, dtype=torch.float64)                            # every weight ~ 1/n
    assert torch.allclose(N.sigmoid_attention(flat), torch.full((500,), 1 / 501, dtype=torch.float64))


def stick_reference(z: list[float]) -> list[float]:
    """Stick-breaking in loops: the last key breaks first, w_i = b_i prod_{k > i} (1 - b_k)."""
    betas = [1 / (1 + math.exp(-v)) for v in z]
    out, remaining = [0.0] * len(z), 1.0
    for i in reversed(range(len(z))):
        out[i] = betas[i] * remaining
        remaining *= 1 - betas[i]
    return out


@given(st.lists(st.floats(-12, 12), min_size=1, max_size=15))
@settings(max_examples=120, deadline=None)
def test_stick_breaking_matches_the_loop(values):
    z = torch.tensor(values, dtype=torch.float64)
    w = N.stick_breaking(z)
    assert torch.allclose(w, torch.tensor(stick_reference(values), dtype=torch.float64), atol=1e-12)
    betas = torch.sigmoid(z)
    assert abs(float(w.sum()) - (1 - float(torch.prod(1 - betas)))) < 1e-12


def test_stick_breaking_masked_keys_do_not_break_the_stick_and_order_matters():
    z = torch.tensor([1.0, -0.5, 2.0, 0.3], dtype=torch.float64)
    padded = torch.cat([z, torch.full((3,), NEG_INF, dtype=torch.float64)])
    assert torch.allclose(N.stick_breaking(padded)[:4], N.stick_breaking(z), atol=0)
    assert not torch.allclose(N.stick_breaking(z.flip(0)).flip(0), N.stick_breaking(z))
    # recency: equal logits favour the last key
    w = N.stick_breaking(torch.zeros(6, dtype=torch.float64))
    assert bool((w[1:] > w[:-1]).all()) and abs(float(w[-1]) - 0.5) < 1e-15


def test_asentmax_is_entmax_of_scaled_logits_per_the_entmax_package():
    z = random_masked(rows=10, keys=12, seed=23)
    w = N.asentmax(z)
    n = torch.isfinite(z).sum(-1, keepdim=True).double()
    scale = 1 + torch.log(n + 1) / math.log(32)
    for r in range(z.shape[0]):
        vis = torch.isfinite(z[r])
        ref = entmax.entmax_bisect(scale[r] * z[r, vis], alpha=1.5, n_iter=100)
        assert torch.allclose(w[r, vis], ref, atol=1e-6)
    assert torch.allclose(N.asentmax(z, beta=0.0), N.entmax15(z), atol=1e-12)   # beta = 0: entmax
    assert torch.allclose(N.asentmax_scale(torch.tensor(31.0)), torch.tensor(2.0), atol=1e-12)
    with pytest.raises(ValueError, match="delta"):
        N.asentmax(z, delta=0.0)


@pytest.mark.parametrize("rule, reference", [("sqrt", lambda n: math.isqrt(n - 1) + 1),
                                             ("log2", lambda n: max((n - 1).bit_length(), 1))])
def test_topk_sizes_are_exact_ceilings(rule, reference):
    counts = torch.arange(1, 5000, dtype=torch.float64)
    sizes = N.topk_size(counts, rule)
    assert sizes.tolist() == [float(min(reference(int(n)), int(n))) for n in counts]
    assert N.topk_size(torch.tensor(10.0), 3) == 3 and N.topk_size(torch.tensor(2.0), 5) == 2
    with pytest.raises(ValueError, match="unknown top-k rule"):
        N.topk_size(counts, "cube")
    with pytest.raises(ValueError, match="k >= 1"):
        N.topk_size(counts, 0)


def test_topk_softmax_keeps_exactly_k_with_ties_to_the_lower_index():
    z = random_masked(rows=20, keys=40, seed=24)
    for rule in ("sqrt", "log2"):
        w = N.topk_softmax(z, rule=rule)
        n = torch.isfinite(z).sum(-1).double()
        assert torch.equal((w > 0).sum(-1).double(), N.topk_size(n, rule))
        for r in range(z.shape[0]):
            k = int(N.topk_size(n[r], rule))
            top = torch.topk(z[r], k).indices
            expected = torch.zeros_like(z[r])
            expected[top] = torch.softmax(z[r, top], -1)
            assert torch.allclose(w[r], expected, atol=1e-14)
    tied = torch.tensor([1.0, 3.0, 1.0, 1.0, 0.0], dtype=torch.float64)     # k = 3: keys 1, 0, 2
    w = N.topk_softmax(tied, rule="sqrt")
    assert torch.equal(w > 0, torch.tensor([True, True, True, False, False]))


def test_sink_matches_transformers_gpt_oss_attention_and_softmax_one():
    from types import SimpleNamespace

    from transformers.models.gpt_oss.modeling_gpt_oss import eager_attention_forward

    gen = torch.Generator().manual_seed(25)
    heads, length = 3, 6
    q = torch.randn(1, heads, length, 4, generator=gen, dtype=torch.float64)
    k = torch.randn(1, heads, length, 4, generator=gen, dtype=torch.float64)
    sinks = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64)
    module = SimpleNamespace(num_key_value_groups=1, sinks=sinks, training=False)
    mask = torch.full((length, length), NEG_INF, dtype=torch.float64).triu(1)
    _, reference = eager_attention_forward(module, q, k, torch.eye(length, dtype=torch.float64)
                                           .expand(1, heads, length, length), mask, scaling=0.5)
    logits = (q @ k.transpose(-1, -2) * 0.5 + mask)[0]                      # [heads, L, L]
    ours = N.sink_softmax(logits, sink=sinks.reshape(heads, 1, 1))
    assert torch.allclose(ours, reference[0], atol=1e-14)
    assert torch.allclose(N.sink_normalizer(0.0)(logits), N.softmax_one(logits), atol=1e-14)
    per_head = N.sink_normalizer(sinks.reshape(heads, 1, 1))
    assert per_head.label == "sink (b per head)" and per_head.key == "sink"
    assert N.sink_normalizer(2.0).key == "sink-b2"
    with pytest.raises(ValueError, match="finite"):
        N.sink_softmax(logits, sink=float("-inf"))


def test_ssmax_gamma_variant_is_ssmax_with_that_scale():
    z = random_masked(rows=6, keys=9, seed=26)
    nz = N.ssmax_gamma_normalizer(0.8)
    assert torch.allclose(nz(z), N.scalable_softmax(z, s=0.8), atol=0)
    assert nz.key == "ssmax-g0.8" and nz.options == {"s": 0.8}


# ------------------------------------------------------------------------------------------
# Tests prompted by mutation testing (make mutants): each fails on a mutant that survived
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", NAMES)
def test_normalising_along_the_first_dim_is_the_transpose_of_the_last(name):
    # keys along dim 0; the first *row* is all masked, which is fine: no column is
    logits = torch.tensor([[float("-inf"), float("-inf"), float("-inf")],
                           [0.3, -1.2, 2.0], [1.1, 0.4, float("-inf")], [-0.5, 0.9, 0.2]], dtype=torch.float64)
    nz = NORMALIZERS[name]
    torch.testing.assert_close(nz(logits, dim=0), nz(logits.T.contiguous(), dim=-1).T)


def test_general_normalizer_along_the_first_dim_and_its_errors():
    logits = torch.tensor([[float("-inf"), float("-inf")], [0.5, -1.0], [2.0, 0.1]], dtype=torch.float64)
    torch.testing.assert_close(N.general_normalizer(logits, torch.exp, dim=0), torch.softmax(logits, 0))
    with pytest.raises(ValueError, match=r"magnitude 1e\+03"):                # the worst logit is named
        N.general_normalizer(torch.tensor([[1000.0, 1.0]], dtype=torch.float64), torch.exp)
    for zero_somewhere in (torch.relu, lambda t: t * t):
        with pytest.raises(ValueError, match="must be positive"):
            N.general_normalizer(torch.tensor([[0.0, 1.0]], dtype=torch.float64), zero_somewhere)


def test_softpick_shifts_each_row_by_its_own_maximum():
    # a row 800 above another: one shift for both would underflow the low row to zeros
    logits = torch.tensor([[800.0, 799.0, 0.0], [0.7, 0.1, -2.0]], dtype=torch.float64)
    got = N.softpick(logits)
    for r in range(2):
        torch.testing.assert_close(got[r], N.softpick(logits[r:r + 1])[0])
    e = torch.expm1(logits[1])
    torch.testing.assert_close(got[1], torch.relu(e) / e.abs().sum())


def test_ssmax_gamma_entries_are_ssmax_with_the_scale_bound_in():
    from pathlib import Path

    nz = N.ssmax_gamma_normalizer(0.5)
    ssmax = NORMALIZERS["ssmax"]
    assert (nz.sums_to_one, nz.sparse, nz.length_aware) == (ssmax.sums_to_one, ssmax.sparse, ssmax.length_aware)
    assert nz.key == "ssmax-g0.5" and nz.label == "SSMax, gamma=0.5" and nz.options == {"s": 0.5}
    assert nz.formula.startswith(r"\mathrm{softmax}(\gamma\log n")
    bib = (Path(__file__).resolve().parents[2] / "book" / "references.bib").read_text()
    assert "{" + nz.cite + "," in bib
    logits = torch.randn(3, 7, dtype=torch.float64)
    torch.testing.assert_close(nz(logits), torch.softmax(0.5 * math.log(7) * logits, -1))


def test_adaptive_softmax_uses_the_threshold_it_is_given():
    logits = torch.randn(4, 64, generator=torch.Generator().manual_seed(2), dtype=torch.float64) * 0.3
    # high-entropy rows: beta > 1 at the default threshold, 1 (plain softmax) above every entropy
    assert not torch.allclose(N.adaptive_temperature_softmax(logits), torch.softmax(logits, -1))
    torch.testing.assert_close(N.adaptive_temperature_softmax(logits, threshold=100.0), torch.softmax(logits, -1))


@pytest.mark.parametrize("fn", [N.softpick, N.self_adjusted_softmax])
def test_an_all_zero_row_gives_zero_weights_and_finite_gradients(fn):
    logits = torch.zeros(2, 5, dtype=torch.float64, requires_grad=True)
    out = fn(logits)
    assert torch.equal(out, torch.zeros_like(out))
    out.sum().backward()
    assert torch.isfinite(logits.grad).all()


def test_topk_sizes_are_exact_where_the_float_root_or_logarithm_rounds_down():
    # sqrt(2^52 + 1) and log2(2^50 + 1) round to the integers 2^26 and 50 in float64: the
    # ceilings are one more
    assert float(N.topk_size(2.0 ** 52 + 1, "sqrt")) == 2 ** 26 + 1
    assert float(N.topk_size(2.0 ** 52, "sqrt")) == 2 ** 26
    assert float(N.topk_size(2.0 ** 50 + 1, "log2")) == 51
    assert float(N.topk_size(2.0 ** 50, "log2")) == 50
    counts = torch.arange(1, 5000, dtype=torch.float64)
    assert torch.equal(N.topk_size(counts, "sqrt"), torch.tensor([math.ceil(math.isqrt(int(n) - 1) + 1) if n > 1 else 1.0 for n in counts.tolist()], dtype=torch.float64))
    assert torch.equal(N.topk_size(counts, "log2"), torch.tensor([max(1, (int(n) - 1).bit_length()) for n in counts.tolist()], dtype=torch.float64))


def test_adaptive_beta_leaves_rows_at_the_threshold_alone():
    at, above = torch.tensor([0.5], dtype=torch.float64), torch.tensor([0.5 + 1e-12], dtype=torch.float64)
    assert float(N.adaptive_beta(at, coefficients=[3.0], threshold=0.5)) == 1.0
    assert float(N.adaptive_beta(above, coefficients=[3.0], threshold=0.5)) == 3.0


def test_asentmax_scale_raises_the_log_to_gamma():
    count = torch.tensor([7.0, 31.0], dtype=torch.float64)
    got = N.asentmax_scale(count, beta=0.5, delta=1.0, gamma=2.0)
    torch.testing.assert_close(got, 1.0 + 0.5 * torch.log(count + 1) ** 2)


def test_topk_softmax_takes_k_from_the_given_n():
    logits = torch.randn(2, 16, generator=torch.Generator().manual_seed(5), dtype=torch.float64)
    counted = N.topk_softmax(logits)                       # n = 16 visible keys: k = 4
    given = N.topk_softmax(logits, n=100)                  # n = 100: k = 10
    assert int((counted > 0).sum(-1).max()) == 4 and (given > 0).sum(-1).tolist() == [10, 10]


def test_sink_normalizer_keeps_b_in_double_precision_and_names_it():
    nz = N.sink_normalizer(0.1)
    assert nz.label == "sink (b=0.1)" and nz.key == "sink-b0.1"
    assert N.sink_normalizer(torch.zeros(2, 3, 1, 1)).label == "sink (b per head)"
    z = torch.randn(3, 6, generator=torch.Generator().manual_seed(8), dtype=torch.float64)
    e = torch.exp(z)
    torch.testing.assert_close(nz(z), e / (math.exp(0.1) + e.sum(-1, keepdim=True)), rtol=1e-14, atol=0)


def test_asentmax_passes_gamma_and_the_given_n_to_its_scale():
    # small logits: entmax keeps several keys, so every change of the scale shows
    z = 0.1 * torch.randn(2, 12, generator=torch.Generator().manual_seed(9), dtype=torch.float64)
    assert (N.asentmax(z) > 0).sum(-1).min() > 2
    for n, gamma in ((None, 2.0), (50, 1.0)):
        c = N.asentmax_scale(torch.tensor(12.0 if n is None else float(n), dtype=torch.float64), None,
                             N.ASENTMAX_DELTA, gamma)
        torch.testing.assert_close(N.asentmax(z, n=n, gamma=gamma), N.entmax15(c * z))


def test_a_fixed_top_k_of_one_is_allowed_and_zero_is_not():
    assert N.topk_size(torch.tensor([5.0, 1.0]), 1).tolist() == [1.0, 1.0]
    with pytest.raises(ValueError, match="k >= 1"):
        N.topk_size(5.0, 0)


def test_sink_normalizer_entries_are_softmax_one_with_b():
    from pathlib import Path

    nz, one = N.sink_normalizer(0.0), NORMALIZERS["softmax1"]
    assert (nz.sums_to_one, nz.sparse, nz.length_aware) == (one.sums_to_one, one.sparse, one.length_aware)
    assert nz.formula.startswith(r"\frac{e^{z_i}}{e^{b}")
    bib = (Path(__file__).resolve().parents[2] / "book" / "references.bib").read_text()
    assert "{" + nz.cite + "," in bib
