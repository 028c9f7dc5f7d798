"""Several heads: the premise (head_sharing, against brute-force loops) and the conclusion
(independent copies, Bernoulli heads) of the multi-head coverage formula."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from hypothesis import given, settings, strategies as st

from normlimits.metrics import multihead as MH
from normlimits.metrics.separability import geometric_separability


def causal_softmax(logits):
    length = logits.shape[-1]
    mask = torch.ones(length, length, dtype=torch.bool).tril()
    return logits.masked_fill(~mask, float("-inf")).softmax(-1)


def layer_result(seed, heads=4, length=24, dim=3, grid=(1, 2, 3, 5, 8)):
    gen = torch.Generator().manual_seed(seed)
    w = causal_softmax(1.5 * torch.randn(heads, length, length, generator=gen, dtype=torch.float64))
    x = torch.randn(heads, length, dim, generator=gen, dtype=torch.float64)
    return geometric_separability(w, x, list(grid), keep_selection=True)


def brute_sharing(res, size):
    """Loops over heads, rows, N and every set of `size` heads containing h."""
    heads, rows, n_g = res.fraction.shape
    nan = float("nan")
    out = {k: torch.full((heads, rows, n_g), nan, dtype=torch.float64)
           for k in ("own", "other", "selecting", "coverage", "null")}
    for r in range(rows):
        for g, n in enumerate(res.n_grid.tolist()):
            if math.isnan(float(res.fraction[0, r, g])):
                continue
            top = [res.order[h, r, :n].tolist() for h in range(heads)]
            dist = [{int(res.order[h, r, k]) for k in range(n) if res.distinguishable[h, r, g, k]}
                    for h in range(heads)]
            for h in range(heads):
                rate = [sum(j in dist[o] for j in top[h]) / n for o in range(heads)]
                out["own"][h, r, g] = rate[h]
                others = [o for o in range(heads) if o != h]
                out["other"][h, r, g] = sum(rate[o] for o in others) / len(others) if others else nan
                out["selecting"][h, r, g] = sum(sum(j in top[o] for o in range(heads)) for j in top[h]) / n
                sets = [(h, *c) for c in itertools.combinations(others, size - 1)]
                cov = [sum(any(j in dist[o] for o in s) for j in top[h]) / n for s in sets]
                null = [1 - math.prod(1 - rate[o] for o in s) for s in sets]
                out["coverage"][h, r, g] = sum(cov) / len(cov)
                out["null"][h, r, g] = sum(null) / len(null)
    return out


@pytest.mark.parametrize("seed,heads,size", [(0, 4, 3), (1, 4, 4), (2, 5, 2), (3, 3, 1), (4, 1, 1)])
def test_head_sharing_matches_brute_force(seed, heads, size):
    res = layer_result(seed, heads=heads)
    got = MH.head_sharing(res, (size,))
    ref = brute_sharing(res, size)
    assert torch.allclose(got.own, ref["own"], equal_nan=True)
    if heads > 1:
        assert torch.allclose(got.other_rate, ref["other"], equal_nan=True)
    assert torch.allclose(got.selecting, ref["selecting"], equal_nan=True)
    assert torch.allclose(got.coverage[size], ref["coverage"], equal_nan=True)
    assert torch.allclose(got.null[size], ref["null"], equal_nan=True)
    assert torch.allclose(got.own, res.fraction, equal_nan=True)  # own rate = N_s/N
    ok = ~got.own.isnan()
    assert torch.all(got.coverage[size][ok] >= got.own[ok] - 1e-12)  # a head covers its own hits


def test_head_sharing_counts_and_sizes():
    res = layer_result(5, heads=4)
    got = MH.head_sharing(res, (3, None))
    assert sorted(got.coverage) == [3, 4]
    defined = (~res.fraction[0].isnan()).sum(0)
    assert torch.equal(got.rows, defined.double())
    assert torch.allclose(got.rank_hits.sum(-1), res.count.nansum(1).double())
    with pytest.raises(ValueError, match="does not fit"):
        MH.head_sharing(res, (5,))
    with pytest.raises(ValueError, match="keep_selection"):
        MH.head_sharing(geometric_separability(torch.eye(3)[None].softmax(-1), torch.randn(1, 3, 2), [1]))


def test_permutation_null_is_the_shuffle_expectation():
    """The null is the exact mean over independent shuffles of each head's hits within I_h."""
    gen = torch.Generator().manual_seed(6)
    n, heads, trials = 6, 3, 20000
    hits = torch.rand(heads, n, generator=gen) < torch.tensor([[0.7], [0.4], [0.2]])
    u = 1 - hits.double().mean(1)
    expected = 1 - float(u.prod())
    keys = torch.rand(trials, heads, n, generator=gen).argsort(-1)
    shuffled = torch.gather(hits[None].expand(trials, -1, -1), 2, keys)
    sampled = float(shuffled.any(1).double().mean())
    assert abs(sampled - expected) < 0.01


@settings(max_examples=30, deadline=None)
@given(values=st.lists(st.floats(0, 1), min_size=1, max_size=7), data=st.data())
def test_elementary_symmetric(values, data):
    order = data.draw(st.integers(0, len(values)))
    t = torch.tensor(values, dtype=torch.float64)
    expected = sum(math.prod(c) for c in itertools.combinations(values, order))
    assert math.isclose(float(MH.elementary_symmetric(t, order)), expected, rel_tol=1e-12, abs_tol=1e-12)
    with pytest.raises(ValueError):
        MH.elementary_symmetric(t, len(values) + 1)


def test_independent_copies_exact_and_sampled():
    """Copies of a head drawn from independent rows: exact expectation against sampling."""
    gen = torch.Generator().manual_seed(7)
    rows, n, heads = 400, 8, 3
    rate_k = torch.linspace(0.95, 0.3, n)  # rank-dependent rates
    patterns = torch.rand(rows, n, generator=gen) < rate_k
    rank_hits = patterns.double().sum(0)[None]  # [G=1, K]
    coverage, formula, p_all = MH.independent_copies(rank_hits, torch.tensor([float(rows)]), [n], heads)
    draws = torch.randint(rows, (20000, heads), generator=gen)
    sampled = float(patterns[draws].any(1).double().mean())
    assert abs(float(coverage) - sampled) < 0.01
    p = float(patterns.double().mean())
    assert math.isclose(float(p_all), p, rel_tol=1e-12)
    assert math.isclose(float(formula), 1 - (1 - p) ** heads, rel_tol=1e-12)
    assert float(coverage) <= float(formula) + 1e-12  # Jensen
    flat = torch.full((1, n), 0.6 * rows, dtype=torch.float64)  # equal rates: equality
    cov_flat, form_flat, _ = MH.independent_copies(flat, torch.tensor([float(rows)]), [n], heads)
    assert math.isclose(float(cov_flat), float(form_flat), rel_tol=1e-12)
    with pytest.raises(ValueError):
        MH.independent_copies(rank_hits, torch.tensor([1.0]), [n], 0)


def test_bernoulli_heads():
    p = torch.tensor([0.2, 0.5, 0.8])
    got = MH.bernoulli_heads(p, 3, tokens=200_000, seed=1)
    assert torch.allclose(got, 1 - (1 - p.double()) ** 3, atol=0.005)
    with pytest.raises(ValueError):
        MH.bernoulli_heads(p, 0)
    with pytest.raises(ValueError, match="chunk"):
        MH.bernoulli_heads(p, 3, chunk=0)


def _bernoulli_whole(p, heads, tokens, seed):
    """The sampler drawn as one tensor: ``any`` of the heads' draws below p."""
    gen = torch.Generator().manual_seed(seed)
    p = torch.as_tensor(p, dtype=torch.float64)
    draws = torch.rand((*p.shape, tokens, heads), generator=gen, dtype=torch.float64)
    return (draws < p[..., None, None]).any(-1).double().mean(-1)


@pytest.mark.parametrize("chunk", [1, 7 * 3, 1000, 50_000, 1 << 22])
def test_bernoulli_heads_same_draws_in_any_chunks(chunk):
    """Chunked into one buffer, the sampler gives the bits of drawing everything at once, whatever
    the chunk (one entry of p per step, several, a step not dividing the entries, all at once),
    NaN p included (never covered)."""
    gen = torch.Generator().manual_seed(3)
    p = torch.rand(3, 4, 5, generator=gen, dtype=torch.float64)
    p[0, 0, 0], p[1, 2, 3], p[2, 3, 4] = 0.0, 1.0, float("nan")
    for heads, tokens in ((3, 7), (12, 500)):
        expected = _bernoulli_whole(p, heads, tokens, seed=5)
        got = MH.bernoulli_heads(p, heads, tokens=tokens, seed=5, chunk=chunk)
        assert got.shape == p.shape
        assert torch.equal(got, expected)
    assert float(MH.bernoulli_heads(p, 3, tokens=50, chunk=chunk)[0, 0, 0]) == 0.0
    assert float(MH.bernoulli_heads(p, 3, tokens=50, chunk=chunk)[1, 2, 3]) == 1.0
