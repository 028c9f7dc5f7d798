"""Tests of normlimits.removal: attention with all but the top-N tokens removed."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normlimits import removal as R
from normlimits.capture import capture_window


def test_keep_top_n_keeps_exactly_n_with_ties_to_the_lower_index():
    w = torch.tensor([[[0.1, 0.4, 0.1, 0.1, 0.3]]])
    assert R.keep_top_n(w, 1).tolist() == [[[False, True, False, False, False]]]
    assert R.keep_top_n(w, 3).tolist() == [[[True, True, False, False, True]]]    # tie -> key 0
    assert R.keep_top_n(w, 5).all() and R.keep_top_n(w, 9).all()
    batch = torch.rand(3, 2, 4, 7, generator=torch.Generator().manual_seed(0))
    kept = R.keep_top_n(batch, torch.tensor([1, 3, 7]))
    assert kept.sum(-1).tolist() == [[[1] * 4] * 2, [[3] * 4] * 2, [[7] * 4] * 2]
    top3 = torch.topk(batch[1], 3).indices
    assert bool(kept[1].gather(-1, top3).all())
    with pytest.raises(ValueError, match="N must be >= 1"):
        R.keep_top_n(batch, 0)
    with pytest.raises(ValueError, match="one N per batch"):
        R.keep_top_n(batch, torch.tensor([1, 2]))


def _reference_keep(weights, k):
    """The kept weights by the book's selection rule (normlimits.selection.top_n), row by row."""
    from normlimits.selection import top_n

    if k >= weights.shape[-1]:
        return weights.clone()
    _, idx = top_n(weights, k)
    return torch.zeros_like(weights).scatter_(-1, idx, weights.gather(-1, idx))


@pytest.mark.parametrize("k", [1, 2, 5, 11, 23, 24])
def test_keep_top_n_matches_the_selection_rule_with_ties_and_causal_zeros(k):
    gen = torch.Generator().manual_seed(k)
    logits = torch.randint(0, 4, (3, 2, 24, 24), generator=gen).float()     # many exact ties
    causal = torch.ones(24, 24, dtype=torch.bool).tril()
    w = torch.softmax(logits.masked_fill(~causal, float("-inf")), -1)
    kept = torch.where(R.keep_top_n(w, k), w, torch.zeros_like(w))
    assert torch.equal(kept, _reference_keep(w, k))
    positive = (kept > 0).sum(-1)
    assert torch.equal(positive, torch.clamp(causal.sum(-1), max=k).expand_as(positive))
    # the attention's in-place cut, which skips the causal rows q < N, keeps the same weights
    cut = R._cut_rows(w.clone(), torch.full((3,), k), first_row=0)
    assert torch.equal(cut, kept)
    assert torch.equal(R._cut_rows(w.clone(), torch.full((3,), k), first_row=None), kept)
    # a block of rows 10..23 of the same attention (as the blocked attention cuts it)
    assert torch.equal(R._cut_rows(w[:, :, 10:].clone(), torch.full((3,), k), first_row=10), kept[:, :, 10:])


def _unblocked_top_n(query, key, value, mask, n, renormalise):
    """The cut attention computed on the whole [B, H, L, L] at once (the previous implementation)."""
    scores = torch.matmul(query, key.transpose(-1, -2)) * query.shape[-1] ** -0.5 + mask
    w = torch.softmax(scores, -1)
    w = torch.where(R.keep_top_n(w, n), w, torch.zeros_like(w))
    if renormalise:
        w = w / w.sum(-1, keepdim=True)
    return torch.matmul(w, value).transpose(1, 2)


@pytest.mark.parametrize("block", [5, 64, 100, 256])
@pytest.mark.parametrize("renormalise", [False, True])
def test_blocked_attention_is_bit_for_bit_the_unblocked_one(monkeypatch, block, renormalise):
    """Row blocks, keys cut at each block's last row for the scores: the same numbers exactly."""
    gen = torch.Generator().manual_seed(block)
    q, k, v = (torch.randn(3, 2, 200, 8, generator=gen) for _ in range(3))
    q[1] = torch.randint(0, 3, q[1].shape, generator=gen).float()      # exact ties in the scores
    mask = torch.full((200, 200), torch.finfo(torch.float32).min).triu(1)[None, None].expand(3, 1, 200, 200)
    n = torch.tensor([1, 4, 150])
    monkeypatch.setattr(R, "ATTENTION_ROW_BLOCK", block)
    module = torch.nn.Module()
    module.is_causal = True
    monkeypatch.setattr(R, "_SETTING", R._Setting(n=n, renormalise=renormalise))
    out, weights = R._top_n_forward(module, q, k, v, mask)
    assert weights is None
    assert torch.equal(out, _unblocked_top_n(q, k, v, mask, n, renormalise))
    module.is_causal = False                                # no cut of the keys: every row whole
    assert torch.equal(R._top_n_forward(module, q, k, v, mask)[0], out)


def _ids(tiny_loaded, length=48, rows=3):
    gen = torch.Generator().manual_seed(1)
    return torch.randint(0, 250, (rows, length), generator=gen)


def test_full_n_is_the_unmodified_model_and_the_mode_is_restored(tiny_loaded):
    model = tiny_loaded.model
    ids = _ids(tiny_loaded)
    base = R.removal_nll(model, ids, 16)
    for renorm in (False, True):
        same = R.removal_nll(model, ids, 16, torch.full((3,), ids.shape[1]), renorm)
        assert torch.allclose(same, base, atol=1e-6)
    assert model.config._attn_implementation == "eager"
    with torch.no_grad():                                  # the direct reference
        logp = torch.log_softmax(model(ids).logits.double(), -1)
    ref = -logp[:, -17:-1].gather(-1, ids[:, -16:, None]).squeeze(-1)
    assert torch.allclose(base, ref, atol=1e-12)


def test_top_n_attention_is_causal_and_renormalising_matters(tiny_loaded):
    model = tiny_loaded.model
    ids = _ids(tiny_loaded)
    n = torch.tensor([1, 2, 4])
    cut = R.removal_nll(model, ids, 16, n, False)
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 250                # the last token only
    again = R.removal_nll(model, changed, 16, n, False)
    assert torch.allclose(cut[:, :-1], again[:, :-1], atol=1e-10)   # earlier targets unchanged
    renorm = R.removal_nll(model, ids, 16, n, True)
    assert not torch.allclose(cut, renorm)
    base = R.removal_nll(model, ids, 16)
    assert (cut - base).abs().mean() > 1e-4                    # removing tokens changes the loss


def test_top_n_attention_matches_a_direct_computation(tiny_loaded):
    """One layer's attention with top-N kept equals the same computed from a capture by hand."""
    model = tiny_loaded.model
    ids = _ids(tiny_loaded, rows=1)[0]
    seen = {}

    def hook(module, args, kwargs, out):
        seen.setdefault("out", out[0].detach())

    handle = model.transformer.h[0].attn.register_forward_hook(hook, with_kwargs=True)
    try:
        with R.top_n_attention(model, 3, renormalise=True), torch.no_grad():
            model(ids[None])
    finally:
        handle.remove()
    cap = capture_window(tiny_loaded, ids)
    w = cap.weights()[0]                                       # layer 0 [H, L, L]
    keep = R.keep_top_n(w[None], 3)[0]
    kept = torch.where(keep, w, torch.zeros_like(w))
    kept = kept / kept.sum(-1, keepdim=True)
    ctx = (kept @ cap.values[0]).permute(1, 0, 2).reshape(len(ids), -1)
    attn = model.transformer.h[0].attn
    expected = attn.c_proj(ctx)
    assert torch.allclose(seen["out"][0], expected, atol=1e-5)


def test_n_grid_and_effective_set_size():
    assert R.n_grid_for(16) == [1, 2, 4, 8, 16]
    assert R.n_grid_for(10, extra=[5, 99]) == [1, 2, 4, 5, 8, 10]
    with pytest.raises(ValueError):
        R.n_grid_for(1)
    assert R.effective_set_size([1, 2, 4, 8], [0.5, 0.2, 0.04, 0.0], 0.05) == 4
    assert R.effective_set_size([1, 2, 4, 8], [0.5, -0.1, 0.04, 0.0], 0.05) == 2
    with pytest.raises(ValueError, match="full context"):
        R.effective_set_size([1, 2], [0.5, 0.2], 0.05)
    with pytest.raises(ValueError, match="tau"):
        R.effective_set_size([1], [0.0], -1.0)


def test_output_change_is_zero_at_full_n_and_falls_with_n(tiny_loaded):
    ids = _ids(tiny_loaded, rows=1)[0]
    cap = capture_window(tiny_loaded, ids)
    w_out = [b.attn.c_proj.weight.detach() for b in tiny_loaded.model.transformer.h]
    rows = torch.arange(40, 48)
    for renorm in (False, True):
        change = R.output_change(cap, w_out, rows, [1, 4, 16, 48], renorm)
        assert change.shape == (2, 4)
        assert torch.allclose(change[:, -1], torch.zeros(2, dtype=torch.float64), atol=1e-12)
        assert bool((change[:, 0] > change[:, -1]).all())


@pytest.mark.parametrize("renormalise", [False, True])
def test_output_change_matches_the_definition_layer_by_layer(tiny_loaded, renormalise):
    """Rows 20..29 of a 48-token window (their keys stop at 30): every layer by hand, all keys."""
    cap = capture_window(tiny_loaded, _ids(tiny_loaded, rows=1)[0])
    w_out = [b.attn.c_proj.weight.detach().double() for b in tiny_loaded.model.transformer.h]
    rows, grid = torch.arange(20, 30), [1, 3, 8, 30]
    got = R.output_change(cap, w_out, rows, grid, renormalise)
    w = torch.softmax(cap.logits(rows).double(), -1)                    # [layers, H, R, 48]
    v = cap.values.double()
    for layer, w_o in enumerate(w_out):
        full = (w[layer] @ v[layer]).permute(1, 0, 2).reshape(len(rows), -1) @ w_o
        for j, n in enumerate(grid):
            kept = torch.stack([_reference_keep(w[layer, h], n) for h in range(w.shape[1])])
            if renormalise:
                kept = kept / kept.sum(-1, keepdim=True)
            delta = ((kept - w[layer]) @ v[layer]).permute(1, 0, 2).reshape(len(rows), -1) @ w_o
            expected = (delta.norm(dim=-1) / full.norm(dim=-1)).mean()
            assert torch.allclose(got[layer, j], expected, rtol=1e-10, atol=1e-14)


def test_removal_sweep_on_a_tiny_model(tiny_loaded):
    windows = _ids(tiny_loaded, length=64, rows=2)
    caps = [capture_window(tiny_loaded, w) for w in windows]
    res = R.removal_sweep(tiny_loaded, windows, [32, 64], targets=8, batch_tokens=5 * 32,
                          extra_sizes=lambda L: [5], captures=caps)
    assert res.lengths == [32, 64] and res.windows == 2
    for L in res.lengths:
        assert res.grids[L][-1] == L and 5 in res.grids[L]
        for mode in ("delete", "renormalise"):
            inc = res.increase[mode][L]
            assert len(inc) == len(res.grids[L]) and abs(inc[-1]) < 1e-6
            assert len(res.output_change[mode][L]) == len(res.grids[L])
    n_star = res.n_star(0.05)
    assert all(1 <= n <= L for n, L in zip(n_star, res.lengths))
    for mode in ("delete", "renormalise"):     # the pooled increase is the mean of the windows'
        for L in res.lengths:
            per = np.array(res.increase_by_window[mode][L])
            assert per.shape == (len(res.grids[L]), 2)
            assert np.allclose(per.mean(1), res.increase[mode][L], atol=1e-12)
    alone = [res.for_windows([w]) for w in range(2)]
    assert all(a.windows == 1 and len(a.n_star(0.05)) == 2 for a in alone)
    assert all(isinstance(a.exponent(0.05, "renormalise"), float) for a in alone)
    both = res.for_windows([0, 1])
    for mode in ("delete", "renormalise"):
        for L in res.lengths:
            assert np.allclose(both.increase[mode][L], res.increase[mode][L], atol=1e-12)
    assert res.fraction(0.05) == [n / L for n, L in zip(n_star, res.lengths)]
    assert len(res.increase_at(lambda L: 5)) == 2
    with pytest.raises(ValueError, match="targets"):
        R.removal_sweep(tiny_loaded, windows, [8, 64], targets=8)
    with pytest.raises(ValueError, match="need windows"):
        R.removal_sweep(tiny_loaded, windows, [128], targets=8)


def test_claim_values_from_a_known_result():
    import math

    lengths = [128, 256, 512, 1024]
    grids = {L: R.n_grid_for(L, [math.isqrt(L - 1) + 1]) for L in lengths}

    def increase(L, n_needed):       # a loss curve that drops below 0.05 exactly at n_needed
        return [0.5 if n < n_needed else 0.01 for n in grids[L][:-1]] + [0.0]

    res = R.RemovalResult(lengths=lengths, grids=grids,
                          increase={"delete": {L: increase(L, 2 * int(L ** 0.5)) for L in lengths},
                                    "renormalise": {L: increase(L, int(L ** 0.5) // 2) for L in lengths}},
                          increase_se={}, output_change={}, full_nll={}, targets=8, windows=1)
    assert res.n_star(0.05) == [32, 32, 64, 64]
    values = R.claim_values(res, {128: 12, 256: 32, 512: None, 1024: 256}, 0.05,
                            lambda L: math.isqrt(L - 1) + 1, "a test")
    size, _, _ = values["ALT-REM-size"]
    assert 0.3 < size["grows"] < 0.6 and size["grows"] == size["sublinear"]
    renorm, _, _ = values["ALT-REM-renorm"]
    n_ren = res.n_star(0.05, "renormalise")
    assert n_ren == [8, 8, 16, 16]
    assert renorm["halves"] == pytest.approx(0.25)
    predict, text, why = values["ALT-REM-predict"]
    assert predict["log_ratio"] == pytest.approx(float(np.median([math.log2(32 / 12), 0.0, 2.0])))
    assert why is None
    assert "a test" in text
    topk, _, _ = values["ALT-TOPK"]
    assert topk["sqrt_loss"] == 0.01
    none = R.claim_values(res, {L: None for L in lengths}, 0.05, lambda L: math.isqrt(L - 1) + 1, "x")
    assert none["ALT-REM-predict"][0]["log_ratio"] is None and none["ALT-REM-predict"][2]


def test_exponent_on_the_power_of_two_lattice_is_exact():
    lengths = [128, 256, 512, 1024]
    grids = {L: R.n_grid_for(L) for L in lengths}

    def needing(L, n):                                   # N* = n exactly at tau = 0.05
        return [0.5 if m < n else 0.0 for m in grids[L]]

    res = R.RemovalResult(lengths=lengths, grids=grids,
                          increase={"delete": {L: needing(L, n) for L, n in zip(lengths, [4, 8, 16, 4])}},
                          increase_se={}, output_change={}, full_nll={}, targets=8, windows=1)
    assert res.n_star(0.05) == [4, 8, 16, 4]
    assert res.exponent(0.05) == 0.1                     # the threshold of ALT-REM-size's "grows"


def test_for_windows_reads_the_given_windows_alone():
    lengths = [128, 256]
    grids = {L: R.n_grid_for(L) for L in lengths}
    # window 0 needs N = 4 at both lengths, window 1 needs N = 16 and 64
    by_window = {"delete": {L: [[0.5 if n < a else 0.0, 0.5 if n < b else 0.0] for n in grids[L]]
                            for L, a, b in ((128, 4, 16), (256, 4, 64))}}
    increase = {"delete": {L: [sum(r) / 2 for r in by_window["delete"][L]] for L in lengths}}
    res = R.RemovalResult(lengths=lengths, grids=grids, increase=increase, increase_se={},
                          output_change={}, full_nll={}, targets=8, windows=2,
                          increase_by_window=by_window)
    assert [res.for_windows([w]).n_star(0.05) for w in range(2)] == [[4, 4], [16, 64]]
    assert [res.for_windows([w]).exponent(0.05) for w in range(2)] == [0.0, 2.0]
    assert res.n_star(0.05) == [16, 64]                    # the pooled mean needs both windows
    assert res.for_windows([0, 1]).n_star(0.05) == res.n_star(0.05)
    assert res.for_windows([1]).windows == 1 and res.for_windows([1]).increase_by_window["delete"][128][0] == [0.5]
    with pytest.raises(ValueError, match="subset"):
        res.for_windows([2])
    bare = R.RemovalResult(lengths=lengths, grids=grids, increase=increase, increase_se={},
                           output_change={}, full_nll={}, targets=8, windows=2)
    with pytest.raises(ValueError, match="per-window"):
        bare.for_windows([0])
