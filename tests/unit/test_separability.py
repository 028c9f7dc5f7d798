"""Tests for geometric separability N_s (paper Eq. 10) and Assumption 2's delta."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import HealthCheck, given, settings, strategies as st

from normlimits.metrics import separability as S

SEEDS = st.integers(min_value=0, max_value=2**31 - 1)


# ----------------------------------------------------------------------- slow references
def reference_fraction(weights, vectors, rows, grid, causal=True):
    """Obviously correct N_s/N (loops; sorts each row by (-alpha, index))."""
    return S.reference_fraction(weights, vectors, rows, grid, causal=causal)


def causal_softmax(logits):
    length = logits.shape[-1]
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    return logits.masked_fill(~mask, float("-inf")).softmax(-1)


def random_problem(seed, batch=2, length=24, dim=4, scale=2.0, dtype=torch.float64):
    gen = torch.Generator().manual_seed(seed)
    logits = scale * torch.randn(batch, length, length, generator=gen, dtype=dtype)
    vectors = torch.randn(batch, length, dim, generator=gen, dtype=dtype)
    return causal_softmax(logits), vectors


# ----------------------------------------------------------------------- N_s, vectorised
@pytest.mark.parametrize("row_chunk,block", [(5, 1), (7, 10**9), (64, 10**9)])
def test_matches_loop_reference(row_chunk, block):
    weights, vectors = random_problem(0, batch=3, length=30, dim=5)
    grid = [1, 2, 3, 5, 8, 13, 29]
    res = S.geometric_separability(weights, vectors, grid, row_chunk=row_chunk, block_elements=block)
    ref = reference_fraction(weights, vectors, list(range(30)), grid)
    assert torch.equal(res.fraction.isnan(), ref.isnan())
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=SEEDS, length=st.integers(3, 20), dim=st.integers(1, 6),
       scale=st.floats(0.1, 6.0), data=st.data())
def test_matches_loop_reference_property(seed, length, dim, scale, data):
    weights, vectors = random_problem(seed, batch=2, length=length, dim=dim, scale=scale)
    grid = sorted(data.draw(st.sets(st.integers(1, length - 1), min_size=1, max_size=4)))
    chunk = data.draw(st.integers(1, length))
    res = S.geometric_separability(weights, vectors, grid, row_chunk=chunk)
    ref = reference_fraction(weights, vectors, list(range(length)), grid)
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))


def test_rows_subset_unsorted_and_shared_vectors():
    """Rows given out of order; vectors shared by all heads (like hidden states)."""
    gen = torch.Generator().manual_seed(3)
    heads, length = 3, 26
    weights_all = causal_softmax(torch.randn(heads, length, length, generator=gen, dtype=torch.float64))
    shared = torch.randn(1, length, 4, generator=gen, dtype=torch.float64)
    rows = torch.tensor([25, 3, 17, 9, 0, 12])
    res = S.geometric_separability(weights_all[:, rows], shared, [1, 2, 4, 6], rows=rows, row_chunk=4)
    ref = reference_fraction(weights_all[:, rows], shared, rows.tolist(), [1, 2, 4, 6])
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))
    assert res.fraction.shape == (heads, 6, 4)


def test_row_chunks_bound_rows_and_position_span():
    spaced = S.spaced_rows(1024, 128)
    chunks = S.row_chunks(spaced, 128, 1024)
    assert chunks[0][0] == 0 and chunks[-1][1] == 128 and len(chunks) == 8       # 17 rows a block
    assert all(a[1] == b[0] for a, b in zip(chunks, chunks[1:]))                   # contiguous, no gaps
    for start, stop in chunks:
        assert stop - start <= 128 and int(spaced[stop - 1] - spaced[start]) <= 1024 // 8
    every = torch.arange(1024)
    assert S.row_chunks(every, 128, 1024) == [(i, i + 128) for i in range(0, 1024, 128)]   # as before
    assert S.row_chunks(spaced, 128, None) == [(0, 128)]                          # non-causal: no span
    assert S.row_chunks(torch.tensor([5]), 3, 4) == [(0, 1)]
    assert S.row_chunks(torch.tensor([0, 0, 0, 1, 9]), 2, 16) == [(0, 2), (2, 4), (4, 5)]
    with pytest.raises(ValueError, match="row_chunk must be >= 1"):
        S.row_chunks(every, 0, 1024)


def test_spaced_rows_give_the_same_result_in_any_blocks():
    """Evenly spaced rows (the bench's and the chapter's subsample) whose span splits them into
    several blocks, given sorted and shuffled: the loop reference's N_s/N, and the same radii,
    counts and selections (radii to rounding) whatever row_chunk and block_elements are."""
    weights, vectors = random_problem(21, batch=3, length=64, dim=5)
    rows = S.spaced_rows(64, 16)
    grid = [1, 2, 3, 5, 8, 13]
    results = []
    for row_chunk, block in ((128, 10**9), (16, 10**9), (3, 50), (1, 1)):
        for order in (torch.arange(16), torch.randperm(16, generator=torch.Generator().manual_seed(row_chunk))):
            r = rows[order]
            res = S.geometric_separability(weights[:, r], vectors, grid, rows=r, keep_selection=True,
                                           row_chunk=row_chunk, block_elements=block)
            back = torch.argsort(order)
            results.append([x[:, back] for x in (res.fraction, res.radius, res.count, res.distinguishable)])
    ref = reference_fraction(weights[:, rows], vectors, rows.tolist(), grid)
    assert torch.equal(results[0][0].nan_to_num(-1), ref.nan_to_num(-1))
    for other in results[1:]:                     # radii may differ by the products' rounding only
        torch.testing.assert_close(other[1], results[0][1], rtol=1e-12, atol=1e-14, equal_nan=True)
        for i in (0, 2, 3):
            assert torch.equal(other[i].nan_to_num(-1) if i < 3 else other[i],
                               results[0][i].nan_to_num(-1) if i < 3 else results[0][i])


@pytest.mark.parametrize("method", ["direct", "gram"])
def test_shared_wide_vectors_both_methods(method):
    """Vectors shared by every head and wider than K (the hidden states): the Gram route."""
    gen = torch.Generator().manual_seed(30)
    heads, length, dim = 3, 28, 40
    weights = causal_softmax(2 * torch.randn(heads, length, length, generator=gen, dtype=torch.float64))
    shared = torch.randn(1, length, dim, generator=gen, dtype=torch.float64)
    grid = [1, 2, 5, 9]
    res = S.geometric_separability(weights, shared, grid, method=method, row_chunk=7, block_elements=50)
    ref = reference_fraction(weights, shared, list(range(length)), grid)
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))
    auto = S.geometric_separability(weights, shared, grid)  # d = 40 > K = 9: the Gram route
    assert torch.allclose(auto.radius, res.radius, equal_nan=True)
    with pytest.raises(ValueError, match="shared"):
        S.geometric_separability(weights, shared.expand(heads, -1, -1).clone(), grid, method="gram")
    with pytest.raises(ValueError, match="method"):
        S.geometric_separability(weights, shared, grid, method="fast")


def test_leading_dims_and_non_causal():
    gen = torch.Generator().manual_seed(4)
    w = torch.randn(2, 2, 5, 12, generator=gen, dtype=torch.float64).softmax(-1)  # [layers, heads, R, L]
    x = torch.randn(2, 1, 12, 3, generator=gen, dtype=torch.float64)  # shared over heads
    res = S.geometric_separability(w, x, [1, 3, 11], causal=False)
    assert res.fraction.shape == (2, 2, 5, 3)
    ref = reference_fraction(w.reshape(4, 5, 12), x.expand(2, 2, 12, 3).reshape(4, 12, 3),
                             [11] * 5, [1, 3, 11], causal=False)
    assert torch.equal(res.fraction.reshape(4, 5, 3), ref)


def test_n_equal_one_is_trivially_one_and_short_rows_are_nan():
    weights, vectors = random_problem(5, batch=2, length=16)
    res = S.geometric_separability(weights, vectors, [1, 4])
    assert torch.all(res.fraction[..., 1:, 0] == 1.0)  # N = 1, every row with >= 2 keys
    assert torch.all(res.fraction[..., 0, :].isnan())  # row 0 sees 1 key: nothing non-selected
    assert torch.all(res.fraction[..., :4, 1].isnan()) and not res.fraction[..., 4:, 1].isnan().any()


def test_zero_weights_and_radius():
    """Exact zeros among visible keys (softmax underflow) and the radius itself."""
    gen = torch.Generator().manual_seed(6)
    length = 18
    logits = torch.randn(2, length, length, generator=gen, dtype=torch.float64)
    logits[..., ::3] = -1e4  # underflows to weight 0 but stays visible
    weights = causal_softmax(logits)
    vectors = torch.randn(2, length, 3, generator=gen, dtype=torch.float64)
    grid = [1, 2, 5, 9]
    res = S.geometric_separability(weights, vectors, grid)
    ref = reference_fraction(weights, vectors, list(range(length)), grid)
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))
    # radius of one row by hand
    t, n, b = 15, 5, 1
    order = sorted(range(t + 1), key=lambda j: (-float(weights[b, t, j]), j))
    s = sum(weights[b, t, i] * vectors[b, i] for i in order[:n])
    r = min(float((weights[b, t, j] * vectors[b, j] - s).norm()) for j in order[n:])
    assert math.isclose(float(res.radius[b, t, 2]), r, rel_tol=1e-9)


def test_zero_weight_selected_keys_are_decided_without_the_direct_refinement(monkeypatch):
    """Sparse rows (most visible weights exactly 0, as sparsemax's), with N beyond the support: the
    selected keys of weight 0 tie exactly with the non-selected ones (f = 0 on both sides) and are
    outside; they are decided from the expansion, no problem goes to the direct differences, and
    the fractions are the loop reference's."""
    gen = torch.Generator().manual_seed(11)
    length, dim = 40, 8
    logits = 3.0 * torch.randn(3, length, length, generator=gen, dtype=torch.float64)
    weights = causal_softmax(logits)
    weights = torch.where(weights >= weights.topk(3, -1).values[..., -1:], weights, 0.0)
    weights = weights / weights.sum(-1, keepdim=True)     # at most 3 keys of positive weight
    vectors = torch.randn(3, length, dim, generator=gen, dtype=torch.float64)
    grid = [1, 2, 4, 8, 16]
    solved = []
    original = S._exact_problems
    monkeypatch.setattr(S, "_exact_problems", lambda a, *rest: solved.append(a.shape[0]) or original(a, *rest))
    res = S.geometric_separability(weights, vectors, grid)
    assert solved == [], "zero-weight ties were sent to the direct refinement"
    ref = reference_fraction(weights, vectors, list(range(length)), grid)
    assert torch.equal(res.fraction.nan_to_num(-1), ref.nan_to_num(-1))
    assert float(res.fraction[..., -1].nan_to_num(0).max()) <= 3 / 16    # only positive weights can be inside


def test_the_many_digit_reference_agrees_with_float64_distances_on_ordinary_weights():
    """With weights near 1/L neither rounding decides anything: the 40-digit reference and the
    float64 loop give the same N_s/N on every (row, N), and the vectorised path too; selected keys
    exactly on the boundary (as far from s as the nearest non-selected key) are outside in all three."""
    weights, vectors = random_problem(5, batch=2, length=16, dim=3)
    grid = [1, 2, 4, 8]
    exact = S.reference_fraction(weights, vectors, range(16), grid, digits=40)
    assert torch.equal(exact.nan_to_num(-1), S.reference_fraction(weights, vectors, range(16), grid).nan_to_num(-1))
    assert torch.equal(exact.nan_to_num(-1), S.geometric_separability(weights, vectors, grid).fraction.nan_to_num(-1))
    # weights 0.5, 0.25, 0.25; N = 2 selects keys 0 and 1 (the tie at 0.25 to the earlier key):
    # s = (0.5, 0.5), both selected keys at distance 0.5, the non-selected 0.25 x_2 - s = (0.5, 0)
    w = torch.tensor([[[0.5, 0.25, 0.25]]], dtype=torch.float64)
    x = torch.tensor([[[1.0, 0.0], [0.0, 2.0], [4.0, 2.0]]], dtype=torch.float64)
    for last, expected in ((2.0, 0.0), (2.5, 1.0)):         # on the boundary (strict: outside), beyond
        x[0, 2, 1] = last
        for got in (S.reference_fraction(w, x, [2], [2], digits=30), S.reference_fraction(w, x, [2], [2]),
                    S.geometric_separability(w, x, [2], rows=[2]).fraction):
            assert float(got.reshape(-1)[0]) == expected, (last, got)


def test_tiny_weights_are_decided_exactly_from_the_expansion(monkeypatch):
    """Stick-breaking rows whose weights fall to 1e-227: float64 distances round every tiny-weight
    key's ||alpha x - s|| to ||s||, so the direct differences (and the float64 loop) decide those
    ties by rounding. The expansion's f = alpha (alpha ||x||^2 - 2 <x, s>) keeps them, and its
    error bound per key (proportional to alpha) certifies them: every (row, N) problem equals the
    120-digit reference, with no problem sent to the direct differences."""
    from normlimits.metrics.normalizers import NORMALIZERS

    gen = torch.Generator().manual_seed(3)
    length = 40
    logits = 25.0 * torch.randn(3, length, length, generator=gen, dtype=torch.float64)
    hidden = torch.arange(length)[None, :] > torch.arange(length)[:, None]
    weights = NORMALIZERS["stickbreaking"](logits.masked_fill(hidden, float("-inf")))
    assert 0 < float(weights[weights > 0].min()) < 1e-200
    vectors = torch.randn(3, length, 3, generator=gen, dtype=torch.float64)
    grid = [1, 2, 4, 8, 16]
    solved = []
    original = S._exact_problems
    monkeypatch.setattr(S, "_exact_problems", lambda a, *rest: solved.append(a.shape[0]) or original(a, *rest))
    res = S.geometric_separability(weights, vectors, grid)
    exact = S.reference_fraction(weights, vectors, list(range(length)), grid, digits=120)
    assert torch.equal(res.fraction.nan_to_num(-1), exact.nan_to_num(-1))
    assert solved == []
    rounded = reference_fraction(weights, vectors, list(range(length)), grid)
    assert int((rounded.nan_to_num(-1) != exact.nan_to_num(-1)).sum()) > 100, \
        "the float64 loop no longer errs here: the case does not test tiny weights"


def test_near_ties_of_ordinary_weights_still_go_to_the_direct_differences(monkeypatch):
    """A non-selected key placed at the selected key's distance from s up to a few units of
    rounding (its y the mirror image of the selected y through s), with weights near 1/L: the
    per-key slack does not call that tie decided, and the problem goes to the direct differences
    (with no slack at all it would be decided from the expansion: checked when this was written)."""
    gen = torch.Generator().manual_seed(8)
    length, dim, n = 12, 4, 3
    weights = causal_softmax(0.3 * torch.randn(1, length, length, generator=gen, dtype=torch.float64))
    vectors = torch.randn(1, length, dim, generator=gen, dtype=torch.float64)
    t = length - 1
    w = weights[0, t]
    order = sorted(range(length), key=lambda j: (-float(w[j]), j))
    s = sum(w[i] * vectors[0, i] for i in order[:n])
    inner, mirror = order[0], order[n]
    target = float((w[inner] * vectors[0, inner] - s).norm())
    for j in order[n + 1:]:                         # every other non-selected y at twice that from s
        away = vectors[0, j] / vectors[0, j].norm()
        vectors[0, j] = (s + 2.0 * target * away) / w[j]
    flip = torch.tensor([-1.0] + [1.0] * (dim - 1), dtype=torch.float64)
    # the mirror image, moved off the exact tie by a relative 1e-15 (a few units of f's rounding)
    vectors[0, mirror] = (s + flip * (w[inner] * vectors[0, inner] - s)) / w[mirror] * (1 + 1e-15)
    solved = []
    original = S._exact_problems
    monkeypatch.setattr(S, "_exact_problems", lambda a, *rest: solved.append(a.shape[0]) or original(a, *rest))
    S.geometric_separability(weights[:, t:], vectors, [n], rows=[t])
    assert solved == [1], "a tie within rounding of ordinary weights was decided from the expansion"


def test_float32_agrees_except_near_ties():
    weights, vectors = random_problem(7, batch=4, length=64, dim=8)
    grid = [2, 4, 8, 16]
    r64 = S.geometric_separability(weights, vectors, grid)
    r32 = S.geometric_separability(weights.float(), vectors.float(), grid)
    assert r32.fraction.dtype == torch.float32
    diff = (r32.fraction.double() - r64.fraction).abs().nan_to_num(0)
    assert float((diff > 0).double().mean()) < 0.01
    assert torch.allclose(r32.radius.double(), r64.radius, rtol=1e-4, atol=1e-6, equal_nan=True)


def test_float32_resolves_a_repeated_token_with_nearly_equal_weight():
    """A RoPE model's first layer: values depend on the token alone, so a repeated token gives two
    identical vectors, and RoPE gives them nearly equal weights (SmolLM2-135M, layer 0, window 3,
    row 895). At N = 1 the selected token sits at distance 0 from s and its twin at |a1 - a2|
    ~ 1e-6, so r > 0 and N_s/N = 1 exactly; float32's expansion of r^2 is all rounding there and
    gave 0 (below the sure bound of Assumption 2, which the separability chapter's guard caught)."""
    gen = torch.Generator().manual_seed(0)
    vectors = S.project_to_sphere(torch.randn(6, 64, generator=gen, dtype=torch.float64))
    vectors[3] = vectors[1]                              # the repeated token
    weights = torch.tensor([0.30, 0.024055302143096924, 0.015879511833190918, 0.02405429258942604,
                            0.2, 0.0], dtype=torch.float64)
    weights[0] = 1 - weights[1:].sum() - 0.4
    weights[4] += 0.4                                     # the top key is key 4 or 0; rank 1 is key 1
    weights = weights / weights.sum()
    row = weights[None, None]                             # one head, one query row, 6 keys
    for dtype in (torch.float64, torch.float32):
        res = S.geometric_separability(row.to(dtype), vectors.to(dtype), [1, 2, 3], rows=[5],
                                       causal=False)
        ref = S.reference_fraction(row, vectors[None], [5], [1, 2, 3], causal=False)
        assert torch.equal(res.fraction.double().nan_to_num(-1), ref.nan_to_num(-1)), dtype
    # the twin case itself: only keys 1 and 3 carry weight besides tiny others, N = 1 selects key 1
    twin = torch.tensor([1e-4, 0.024055302143096924, 1e-4, 0.02405429258942604, 1e-4, 1e-4],
                        dtype=torch.float64)
    res32 = S.geometric_separability(twin[None, None].float(), vectors.float(), [1], rows=[5], causal=False)
    assert float(res32.fraction[0, 0, 0]) == 1.0, "float32 must re-solve the near-duplicate problem"
    assert 0 < float(res32.radius[0, 0, 0]) < 1e-5


def test_keep_selection_is_consistent():
    weights, vectors = random_problem(8, batch=2, length=20)
    grid = [1, 3, 6]
    res = S.geometric_separability(weights, vectors, grid, keep_selection=True)
    assert torch.equal(res.distinguishable.sum(-1).double(), res.count.nan_to_num(0))
    masked = weights.masked_fill(~torch.ones(20, 20, dtype=torch.bool).tril(), -1.0)
    top = masked.sort(-1, descending=True).values[..., :6].clamp_min(0)
    assert torch.allclose(res.top_weights, top)
    assert torch.allclose(torch.gather(weights, 2, res.order)[..., :, :].where(res.top_weights > 0, 0.0),
                          res.top_weights)


@pytest.mark.parametrize("grid,match", [([0, 2], "1..L-1"), ([5, 20], "1..L-1"), ([], "empty")])
def test_bad_grid(grid, match):
    weights, vectors = random_problem(9, batch=1, length=20)
    with pytest.raises(ValueError, match=match):
        S.geometric_separability(weights, vectors, grid)


def test_bad_shapes_and_rows():
    weights, vectors = random_problem(9, batch=2, length=10)
    with pytest.raises(ValueError, match="keys"):
        S.geometric_separability(weights, vectors[:, :9], [1])
    with pytest.raises(ValueError, match="rows"):
        S.geometric_separability(weights[:, :4], vectors, [1])
    with pytest.raises(ValueError, match="0..9"):
        S.geometric_separability(weights[:, :2], vectors, [1], rows=[3, 10])
    with pytest.raises(ValueError, match="broadcast|enlarge"):
        S.geometric_separability(weights, torch.randn(3, 10, 2, dtype=torch.float64), [1])


def test_projection():
    gen = torch.Generator().manual_seed(10)
    x = torch.randn(3, 15, 4, generator=gen, dtype=torch.float64)
    p = S.project_to_sphere(x, 2.0)
    assert torch.allclose(p.norm(dim=-1), torch.full((3, 15), 2.0, dtype=torch.float64))
    with pytest.raises(ValueError, match="zero vector"):
        S.project_to_sphere(torch.zeros(2, 3))
    with pytest.raises(ValueError, match="M must be"):
        S.project_to_sphere(x, 0.0)


# ----------------------------------------------------------------------- delta (Assumption 2)
def brute_delta(x):
    """Every pair, one at a time, in float64."""
    x = x.double()
    return torch.tensor([min(float((x[b, i] - x[b, j]).norm()) for i in range(x.shape[1])
                             for j in range(x.shape[1]) if i != j) for b in range(x.shape[0])],
                        dtype=torch.float64)


@pytest.mark.parametrize("shape,sphere", [((3, 15, 4), True), ((2, 60, 64), True),
                                          ((1, 80, 768), True), ((4, 30, 3), False)])
def test_min_distance_is_the_exact_minimum(shape, sphere):
    gen = torch.Generator().manual_seed(shape[1])
    x = torch.randn(*shape, generator=gen) * (1.0 if sphere else 30.0)
    if sphere:
        x = S.project_to_sphere(x)
    fast = S.min_pairwise_distance(x)
    assert fast.dtype == torch.float64 and fast.shape == shape[:1]
    assert torch.equal(fast, S.min_pairwise_distance_reference(x))
    assert torch.allclose(fast, brute_delta(x), rtol=1e-14, atol=0)


def test_min_distance_near_ties_and_duplicates():
    """Pairs closer than the float32 screen can resolve: the float64 check must pick the right one."""
    gen = torch.Generator().manual_seed(11)
    x = S.project_to_sphere(torch.randn(2, 200, 64, generator=gen, dtype=torch.float64))
    eps = 1e-9
    x[0, 5] = S.project_to_sphere(x[0, 7] + eps * torch.randn(64, generator=gen, dtype=torch.float64))
    x[0, 9] = S.project_to_sphere(x[0, 11] + 1.0001 * eps * torch.randn(64, generator=gen, dtype=torch.float64))
    x[1, 3] = x[1, 150]  # an exact duplicate: delta = 0
    fast = S.min_pairwise_distance(x)
    assert torch.equal(fast, S.min_pairwise_distance_reference(x))
    assert float(fast[1]) == 0.0 and 0 < float(fast[0]) < 1e-7
    # a near tie far below float32 resolution, in a float32 input (the chapter's case)
    y = S.project_to_sphere(torch.randn(1, 300, 48, generator=gen))
    y[0, 10] = y[0, 20]
    y[0, 10, 0] += 3e-7
    y[0, 30] = y[0, 40]
    y[0, 30, 1] += 2e-7
    assert torch.equal(S.min_pairwise_distance(y), S.min_pairwise_distance_reference(y))


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, length=st.integers(2, 40), dim=st.integers(1, 20), scale=st.floats(1e-3, 1e3),
       clusters=st.integers(1, 5))
def test_min_distance_property(seed, length, dim, scale, clusters):
    """Clustered points (many near ties) at any scale: the screen never loses the closest pair."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(clusters, dim, generator=gen, dtype=torch.float64)
    x = centres[torch.randint(clusters, (length,), generator=gen)]
    x = scale * (x + 1e-6 * torch.randn(length, dim, generator=gen, dtype=torch.float64))
    got = S.min_pairwise_distance(x[None], pair_chunk=3)
    assert torch.allclose(got, brute_delta(x[None]), rtol=1e-13, atol=0)


@pytest.mark.parametrize("block_rows", [1, 2, 7, 16, 64, 1000])
def test_min_distance_in_row_blocks_is_the_reference_at_every_block_size(block_rows):
    """The upper-triangle screen in row blocks: the closest pair placed inside one diagonal block,
    across two blocks, at the last row, as a duplicate and as near ties below float32's
    resolution; float32 and float64 inputs. The result is the reference's, bit for bit."""
    gen = torch.Generator().manual_seed(block_rows)
    for dtype in (torch.float32, torch.float64):
        x = S.project_to_sphere(torch.randn(6, 50, 24, generator=gen, dtype=torch.float64))
        x[0, 3] = S.project_to_sphere(x[0, 4] + 1e-9 * torch.randn(24, generator=gen, dtype=torch.float64))
        x[1, 2] = S.project_to_sphere(x[1, 45] + 1e-9 * torch.randn(24, generator=gen, dtype=torch.float64))
        x[2, 48] = S.project_to_sphere(x[2, 49] + 1e-9 * torch.randn(24, generator=gen, dtype=torch.float64))
        x[3, 0] = x[3, 49]                                             # a duplicate: delta = 0
        x[4, 10] = x[4, 20]
        x[4, 10, 0] += 3e-7                                            # two near ties, apart
        x[4, 30] = x[4, 40]
        x[4, 30, 1] += 2e-7
        x = x.to(dtype)
        got = S.min_pairwise_distance(x, block_rows=block_rows)
        assert torch.equal(got, S.min_pairwise_distance_reference(x))
        assert float(got[3]) == 0.0 and float(got[0]) < 1e-6
        if dtype == torch.float64:                                  # float32 rounds the pair together
            assert float(got[0]) > 0
        assert torch.equal(got, S.min_pairwise_distance(x, block_rows=block_rows, pair_chunk=2))


@settings(max_examples=25, deadline=None)
@given(seed=SEEDS, length=st.integers(2, 30), dim=st.integers(1, 8), block_rows=st.integers(1, 12),
       clusters=st.integers(1, 4), scale=st.floats(1e-3, 1e3))
def test_min_distance_in_row_blocks_property(seed, length, dim, block_rows, clusters, scale):
    """Clustered points (many near ties) with random block sizes, L = 2 included: the blocked
    screen never loses the closest pair."""
    gen = torch.Generator().manual_seed(seed)
    centres = torch.randn(clusters, dim, generator=gen, dtype=torch.float64)
    x = centres[torch.randint(clusters, (2, length), generator=gen)]
    x = scale * (x + 1e-7 * torch.randn(2, length, dim, generator=gen, dtype=torch.float64))
    got = S.min_pairwise_distance(x, block_rows=block_rows)
    assert torch.equal(got, S.min_pairwise_distance_reference(x))


def test_min_distance_block_rows_must_be_positive():
    with pytest.raises(ValueError, match="block_rows must be >= 1"):
        S.min_pairwise_distance(torch.randn(3, 2), block_rows=0)


def test_min_distance_falls_back_without_full_float32_precision():
    gen = torch.Generator().manual_seed(12)
    x = S.project_to_sphere(torch.randn(2, 50, 16, generator=gen))
    before = torch.get_float32_matmul_precision()
    try:
        torch.set_float32_matmul_precision("medium")
        assert torch.equal(S.min_pairwise_distance(x), S.min_pairwise_distance_reference(x))
    finally:
        torch.set_float32_matmul_precision(before)


def test_min_distance_errors_and_margin():
    with pytest.raises(ValueError, match="two vectors"):
        S.min_pairwise_distance(torch.randn(1, 4))
    with pytest.raises(ValueError, match="inf or NaN"):
        S.min_pairwise_distance(torch.tensor([[0.0, 1.0], [float("nan"), 0.0]]))
    with pytest.raises(ValueError, match="pair_chunk"):
        S.min_pairwise_distance(torch.randn(3, 2), pair_chunk=0)
    with pytest.raises(ValueError, match="dimension"):
        S.screen_margin(0)
    assert S.screen_margin(64) > (2 * 64 + 10) * S.FLOAT32_UNIT  # the bound with its 5% slack


def test_screen_margin_covers_the_float32_error():
    """The float32 screen's actual error stays inside the stated margin (worst case over pairs)."""
    gen = torch.Generator().manual_seed(13)
    for dim in (3, 64, 768):
        x = torch.randn(1, 120, dim, generator=gen, dtype=torch.float64) * 4.0
        n = (x * x).sum(-1)
        xs, ns = x.float(), n.float()[..., None]
        one = torch.ones_like(ns)
        d2 = torch.bmm(torch.cat([xs, ns, one], -1), torch.cat([-2 * xs, one, ns], -1).transpose(1, 2))
        exact = ((x[0, :, None] - x[0, None]) ** 2).sum(-1)
        err = (d2[0].double() - exact).abs()
        allowed = S.screen_margin(dim) * (n[0, :, None] + n[0, None])
        assert torch.all(err <= allowed)


# ----------------------------------------------- tests prompted by mutation testing (make mutants)
def test_reference_fraction_without_causality_and_with_an_unsorted_grid():
    weights, vectors = random_problem(3, batch=2, length=9, dim=3)
    rows = [1, 5, 8]
    full = torch.softmax(torch.randn(2, 3, 9, generator=torch.Generator().manual_seed(4), dtype=torch.float64), -1)
    got = S.reference_fraction(full, vectors, rows, [1, 3, 6], causal=False)
    fast = S.geometric_separability(full, vectors, [1, 3, 6], rows=torch.tensor(rows), causal=False)
    assert not got.isnan().any()                         # every row sees all 9 keys
    assert torch.equal(got, fast.fraction)
    # an N the row cannot serve (row 1 sees 2 keys) before one it can: NaN, then the value
    causal = S.reference_fraction(weights[:, rows], vectors, rows, [3, 1])
    assert causal[:, 0, 0].isnan().all() and not causal[:, 0, 1].isnan().any()
    torch.testing.assert_close(causal.flip(-1), S.reference_fraction(weights[:, rows], vectors, rows, [1, 3]),
                               equal_nan=True)


def test_min_pairwise_distance_reference_of_two_and_of_neighbours():
    two = torch.tensor([[0.0, 0.0], [3.0, 4.0]], dtype=torch.float64)
    assert float(S.min_pairwise_distance_reference(two)) == 5.0
    line = torch.tensor([[0.0], [1.0], [1.5], [4.0]], dtype=torch.float64)   # closest pair: neighbours 1, 2
    assert float(S.min_pairwise_distance_reference(line)) == 0.5
    assert float(S.min_pairwise_distance(line)) == 0.5
    with pytest.raises(ValueError, match="at least two"):
        S.min_pairwise_distance_reference(two[:1])


def test_min_pairwise_distance_in_chunks_of_one_pair():
    _, vectors = random_problem(5, batch=2, length=12, dim=3)
    torch.testing.assert_close(S.min_pairwise_distance(vectors, pair_chunk=1),
                               S.min_pairwise_distance_reference(vectors), rtol=0, atol=0)
    with pytest.raises(ValueError, match="pair_chunk must be >= 1"):
        S.min_pairwise_distance(vectors, pair_chunk=0)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_min_pairwise_distance_of_huge_vectors_screens_in_float64(dtype):
    # squared norms near 1e40 overflow float32 (and exceed the 1e30 cap): the screen runs in float64
    _, vectors = random_problem(6, batch=2, length=10, dim=3)
    huge = (vectors * 1e20).to(dtype)
    torch.testing.assert_close(S.min_pairwise_distance(huge), S.min_pairwise_distance_reference(huge),
                               rtol=0, atol=0)


def test_screen_margin_is_the_documented_constant_up_to_the_largest_dimension():
    assert S.screen_margin(4) == 1.05 * (2 * 4 + 10) * 2.0 ** -24
    largest = 167_770                                  # (d + 2) u < 0.01 <=> d < 0.01 * 2^24 - 2
    assert S.screen_margin(largest) == 1.05 * (2 * largest + 10) * 2.0 ** -24
    with pytest.raises(ValueError, match="too large"):
        S.screen_margin(largest + 1)


def test_a_vector_of_norm_exactly_eps_counts_as_zero():
    with pytest.raises(ValueError, match="zero vector"):
        S.project_to_sphere(torch.tensor([[1e-12, 0.0], [1.0, 1.0]], dtype=torch.float64), eps=1e-12)


def test_distinct_heads_groups_adjacent_copies_and_delta_follows():
    gen = torch.Generator().manual_seed(3)
    kv = torch.randn(3, 40, 8, generator=gen)
    expanded = kv.repeat_interleave(3, dim=0)             # grouped-query: 9 heads, 3 groups
    expanded[4, 7, 2] += 1e-6                             # head 4 no longer a copy of head 3
    distinct, group = S.distinct_heads(expanded)
    assert group.tolist() == [0, 0, 0, 1, 2, 3, 4, 4, 4]     # head 5 differs from head 4 now
    assert torch.equal(distinct, expanded[[0, 3, 4, 5, 6]])
    shared = S.min_pairwise_distance(distinct)[group]
    assert torch.equal(shared, S.min_pairwise_distance(expanded))
    with pytest.raises(ValueError, match=r"\[heads, L, d\]"):
        S.distinct_heads(expanded[0])
