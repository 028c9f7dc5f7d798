"""Tests of normlimits.experiments.removal: attention with all but the top-N tokens removed."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from conftest import make_tiny_gpt2

from normlimits.model import attention_tap
from normlimits.experiments import removal as R
from normlimits.model.capture import capture_window


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
    """The kept weights by the book's selection rule (normlimits.core.selection.top_n), row by row."""
    from normlimits.core.selection import top_n

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
    token = R._SETTING.set(R._Setting(n=n, renormalise=renormalise))
    try:
        out, weights = R._top_n_forward(module, q, k, v, mask)
        assert weights is None
        assert torch.equal(out, _unblocked_top_n(q, k, v, mask, n, renormalise))
        module.is_causal = False                            # no cut of the keys: every row whole
        assert torch.equal(R._top_n_forward(module, q, k, v, mask)[0], out)
    finally:
        R._SETTING.reset(token)
    assert R._SETTING.get() is None


def test_top_n_attention_restores_the_implementation_and_the_cut_after_an_error(tiny_loaded):
    """The switch is the attention tap's (one code path, a context variable): after an error in
    the block neither the model's implementation nor the cut is left behind, and a recording
    inside a cut block sees the cut's implementation switched away and back."""
    model = tiny_loaded.model
    with pytest.raises(RuntimeError, match="inside"):
        with R.top_n_attention(model, 2, renormalise=True):
            assert model.config._attn_implementation == R.ATTENTION_NAME
            assert R._SETTING.get().renormalise and R._SETTING.get().n.tolist() == [2]
            raise RuntimeError("inside the block")
    assert model.config._attn_implementation == "eager" and R._SETTING.get() is None
    with R.top_n_attention(model, 3):
        with attention_tap.recording(model) as record:
            assert model.config._attn_implementation == attention_tap.IMPLEMENTATION
        assert model.config._attn_implementation == R.ATTENTION_NAME and record.layers == []
        assert R._SETTING.get().n.tolist() == [3]
    assert model.config._attn_implementation == "eager" and R._SETTING.get() is None


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


@pytest.mark.parametrize("protocol", R.PROTOCOLS)
def test_removal_sweep_on_a_tiny_model(tiny_loaded, protocol):
    windows = _ids(tiny_loaded, length=64, rows=2)
    caps = [capture_window(tiny_loaded, w) for w in windows]
    res = R.removal_sweep(tiny_loaded, windows, [32, 64], targets=8, batch_tokens=5 * 32,
                          extra_sizes=lambda L: [5], captures=caps, protocol=protocol)
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


def _long_loaded(dtype=torch.float32):
    """A tiny GPT-2 of 256 positions (lengths up to 256, multiples of R.KEY_ALIGN) in ``dtype``."""
    from normlimits.model.pretrained import LoadedModel, byte_encode

    return LoadedModel(model=make_tiny_gpt2(n_positions=256).to(dtype), name="tiny-256", source="test",
                       encode=byte_encode, tokenizer_kind="bytes", is_paper_model=False)


LONG_LENGTHS = (64, 128, 256)


def _sqrt_size(L):
    return [math.isqrt(L - 1) + 1]


def _per_length_passes(model, windows, lengths, targets, grids, protocol):
    """The reference: for every (L, N < L, mode) one removal_nll pass over all windows cut to L
    tokens (the first L for "prefix", the last L for "suffix"). Returns the per-window increases
    ``{mode: {L: [n][W]}}``, the pooled ones ``{mode: {L: [n]}}`` and the full NLL ``{L: float}``."""
    by_window, pooled, full = {m: {} for m in R.MODES}, {m: {} for m in R.MODES}, {}
    for L in lengths:
        ids = windows[:, :L] if protocol == "prefix" else windows[:, -L:]
        base = R.removal_nll(model, ids, targets)
        full[L] = float(base.mean())
        for mode, renorm in R.MODES.items():
            nll = torch.stack([R.removal_nll(model, ids, targets, n, renorm) if n < L else base
                               for n in grids[L]])
            diff = nll - base[None]
            by_window[mode][L] = diff.mean(-1).tolist()
            pooled[mode][L] = diff.reshape(len(grids[L]), -1).mean(-1).tolist()
    return by_window, pooled, full


#: (dtype, lengths, largest difference allowed; None: bit for bit) of the test below. float32:
#: bit for bit at lengths that are multiples of R.KEY_ALIGN (the book's 128..1024); at other
#: lengths the pass over the window cut to L sums a renormalised row over its L keys, the long
#: pass over a multiple of R.KEY_ALIGN keys, and the prefix protocol's increases differ by up to
#: 1.1e-9 nats (measured at 48, 100, 200; the suffix protocol's passes are the reference's own).
#: float64: never bit for bit, because the BLAS's float64 matrix products round a row
#: differently with the number of rows in the product (the unmodified model's logits over 17
#: and 256 positions differ by up to 3.3e-16); the increases differ by up to 5.6e-17 nats for
#: both protocols (one unit in the last place of one target's NLL, in a mean over 16 targets),
#: and the full NLL not at all; allowed: one unit in the last place of a 5-nat NLL. Measured with
#: 1 and 2 threads alike.
EXACTNESS = [(torch.float32, (64, 128, 256), None), (torch.float32, (48, 100, 200), 1e-8),
             (torch.float64, (64, 128, 256), 1e-15)]


@pytest.mark.parametrize("protocol", ["prefix", "suffix"])
@pytest.mark.parametrize("dtype, lengths, tolerance", EXACTNESS)
def test_sweep_equals_one_pass_per_length_and_n(protocol, dtype, lengths, tolerance):
    """The sweep (prefix: passes over the longest length, every length read from their rows;
    suffix: one pass per length and N) against one pass per (L, N) over the window cut to L,
    every window at once (the sweep's batches of 3 rows mix N values); see EXACTNESS."""
    loaded = _long_loaded(dtype)
    windows = _ids(loaded, length=max(lengths), rows=2)
    res = R.removal_sweep(loaded, windows, lengths, targets=16, extra_sizes=_sqrt_size,
                          batch_tokens=3 * max(lengths), protocol=protocol)
    assert res.protocol == protocol
    grids = {L: R.n_grid_for(L, _sqrt_size(L)) for L in lengths}
    assert res.grids == grids
    by_window, pooled, full = _per_length_passes(loaded.model, windows, lengths, 16, grids, protocol)
    if tolerance is None:
        assert res.increase_by_window == by_window and res.increase == pooled and res.full_nll == full
    else:
        for mode in R.MODES:
            for L in lengths:
                assert np.allclose(res.increase_by_window[mode][L], by_window[mode][L], rtol=0, atol=tolerance)
                assert np.allclose(res.increase[mode][L], pooled[mode][L], rtol=0, atol=tolerance)
        assert np.allclose([res.full_nll[L] for L in lengths], [full[L] for L in lengths], rtol=0, atol=tolerance)
    assert max(map(abs, res.increase["delete"][lengths[0]])) > 1e-4          # the cut passes did cut


def _fields(res, L):
    """A length's measured values, per mode: (increase, per-window increase, standard error), and its full NLL."""
    return ({m: (res.increase[m][L], res.increase_by_window[m][L], res.increase_se[m][L]) for m in R.MODES},
            res.full_nll[L])


def test_a_length_reads_the_same_values_from_any_shared_grid():
    """Prefix protocol: a length's values do not depend on the other lengths (whose grids add N
    values to the shared passes and change how the batches mix N), and at the longest length,
    when the windows are that long, the prefix and the suffix protocol see the same tokens and
    predict the same targets: the same numbers, bit for bit."""
    loaded = _long_loaded()
    windows = _ids(loaded, length=256, rows=2)
    sweep = lambda lengths, protocol="prefix", **kw: R.removal_sweep(loaded, windows, lengths, targets=16,
                                                                 batch_tokens=3 * 256, protocol=protocol, **kw)
    union = sweep(LONG_LENGTHS, extra_sizes=_sqrt_size)             # shared grid: 1..128 and 12
    fewer = sweep((128, 256))                                       # shared grid: 1..128
    alone = sweep((256,), extra_sizes=_sqrt_size)                   # shared grid: 1..128
    assert 12 in union.grids[128] and 12 not in fewer.grids[128]
    for L in (128, 256):                                            # the N both grids have
        common = [n for n in fewer.grids[L] if n in union.grids[L]]
        pick = lambda res, values: [v for n, v in zip(res.grids[L], values) if n in common]
        for m in R.MODES:
            for name in ("increase", "increase_by_window", "increase_se"):
                assert pick(union, getattr(union, name)[m][L]) == pick(fewer, getattr(fewer, name)[m][L])
        assert union.full_nll[L] == fewer.full_nll[L]
    assert _fields(alone, 256) == _fields(union, 256)
    suffix = sweep((256,), extra_sizes=_sqrt_size, protocol="suffix")
    assert _fields(suffix, 256) == _fields(alone, 256)
    shorter = R.removal_sweep(loaded, windows[:, :128], (128,), targets=16, protocol="suffix")
    assert shorter.full_nll[128] == union.full_nll[128]   # the prefix of 128 is the suffix of the window cut to 128


def test_rows_before_n_are_the_unmodified_models():
    """A causal row q < N sees at most N keys at every layer: its logits with every row cut to N
    are those of the pass with N = L of the same mode, which cuts nothing (bit for bit; the
    renormalised mode divides every row by its sum, so its rows are not the delete mode's bits),
    and the unmodified model's to float32 rounding; the rows from N on are changed."""
    model = _long_loaded().model
    ids = _ids(None, length=256, rows=2)
    everything = torch.arange(256)
    with torch.no_grad():
        plain = R._logits(model, ids, everything)
        for renorm in (False, True):
            uncut = R._logits(model, ids, everything, 256, renorm)
            assert torch.allclose(uncut, plain, rtol=0, atol=1e-5)
            for n in (5, 64, 100):
                cut = R._logits(model, ids, everything, n, renorm)
                assert torch.equal(cut[:, :n], uncut[:, :n])
                assert (cut[:, n:] - uncut[:, n:]).abs().amax(-1).gt(1e-4).all()


@pytest.mark.parametrize("protocol", ["prefix", "suffix"])
def test_sweep_records_its_protocol_its_tokens_and_the_rows_of_the_output_change(tiny_loaded, protocol):
    windows = _ids(tiny_loaded, length=64, rows=2)
    caps = [capture_window(tiny_loaded, w) for w in windows]
    res = R.removal_sweep(tiny_loaded, windows, [32, 64], targets=8, extra_sizes=lambda L: [5] if L == 32 else [],
                          captures=caps, protocol=protocol)
    assert res.protocol == protocol and res.for_windows([1]).protocol == protocol
    cut = {32: [1, 2, 4, 5, 8, 16], 64: [1, 2, 4, 8, 16, 32]}                      # N < L per length
    if protocol == "prefix":             # 2 windows: the full model and N = 1..32 over 64 tokens, N = 5 over 32
        assert res.extra["forward_tokens"] == 2 * 64 + 2 * 2 * (6 * 64 + 32)
    else:
        assert res.extra["forward_tokens"] == sum(2 * (1 + 2 * len(cut[L])) * L for L in cut)
    spans = R.prefix_spans([32, 64], {32: [1, 3, 5, 32], 64: [1, 2, 5, 64]})
    assert spans == {1: 64, 2: 64, 3: 32, 5: 64}         # N = 3 runs over the first 32 tokens only
    w_out = R.output_projections(tiny_loaded.model)
    rows = {"prefix": torch.arange(32 - 9, 32 - 1), "suffix": torch.arange(32 - 8, 32)}[protocol]
    assert torch.equal(R.target_rows(32, 8, protocol), rows)
    for mode, renorm in R.MODES.items():
        want = torch.stack([R.output_change(c, w_out, rows, res.grids[32], renorm) for c in caps]).mean((0, 1))
        assert res.output_change[mode][32] == want.tolist()
    with pytest.raises(ValueError, match="protocol must be one of"):
        R.removal_sweep(tiny_loaded, windows, [32], targets=8, protocol="middle")
    with pytest.raises(ValueError, match="protocol must be one of"):
        R.target_rows(32, 8, "middle")


def test_claim_values_from_a_known_result():
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


def _windows_result(needs_delete, needs_renorm, lengths=(128, 256, 512, 1024)):
    """A RemovalResult whose window w needs N = needs[w][i] at lengths[i] (increase 0.5 below it,
    0 from it on), in both modes."""
    lengths = list(lengths)
    grids = {L: R.n_grid_for(L, [math.isqrt(L - 1) + 1]) for L in lengths}

    def per_window(needs):
        return {L: [[0.5 if n < need[i] else 0.0 for need in needs] for n in grids[L]]
                for i, L in enumerate(lengths)}

    by_window = {"delete": per_window(needs_delete), "renormalise": per_window(needs_renorm)}
    increase = {m: {L: [sum(r) / len(r) for r in rows] for L, rows in per.items()} for m, per in by_window.items()}
    return R.RemovalResult(lengths=lengths, grids=grids, increase=increase, increase_se={},
                           output_change={}, full_nll={}, targets=8, windows=len(needs_delete),
                           increase_by_window=by_window)


def test_claim_intervals_resample_the_windows():
    """Windows that agree give a point interval at the pooled value; windows that disagree give
    an interval spanning what subsets of them measure, and the pooled value lies inside it."""
    sqrt_size = lambda L: math.isqrt(L - 1) + 1                                 # noqa: E731
    same = _windows_result([[4, 8, 16, 32]] * 4, [[2, 4, 8, 16]] * 4)
    got = R.claim_intervals(same, {L: None for L in same.lengths}, 0.05, sqrt_size, "x", resamples=200)
    pooled = R.claim_values(same, {L: None for L in same.lengths}, 0.05, sqrt_size, "x")
    e = pooled["ALT-REM-size"][0]["grows"]
    assert got["ALT-REM-size"]["grows"].low == got["ALT-REM-size"]["grows"].high == e == 1.0
    assert got["ALT-REM-predict"] == {}, "no critical N: log_ratio is None on every resample"
    assert set(got["ALT-TOPK"]) == {"sqrt_loss", "exponent"} and got["ALT-TOPK"]["exponent"].n == 4
    mixed = _windows_result([[4, 8, 16, 32], [4, 8, 16, 32], [8, 8, 8, 8], [4, 16, 64, 256]],
                            [[2, 4, 8, 16]] * 4)
    got = R.claim_intervals(mixed, {L: None for L in mixed.lengths}, 0.05, sqrt_size, "x", resamples=400)
    iv = got["ALT-REM-size"]["grows"]
    alone = [mixed.for_windows([w]).exponent(0.05) for w in range(4)]
    assert min(alone) <= iv.low < iv.high <= max(alone)
    assert iv.low <= mixed.exponent(0.05) <= iv.high
    again = R.claim_intervals(mixed, {L: None for L in mixed.lengths}, 0.05, sqrt_size, "x", resamples=400)
    assert again == got, "a fixed seed: the same intervals"


def test_claim_intervals_need_two_windows():
    one = _windows_result([[4, 8, 16, 32]], [[2, 4, 8, 16]])
    got = R.claim_intervals(one, {L: None for L in one.lengths}, 0.05, lambda L: math.isqrt(L - 1) + 1, "x")
    assert got == {cid: {} for cid in R.REMOVAL_CLAIMS}


def test_the_chapter_sentences_on_intervals_for_8_2_and_1_windows():
    """What the alternatives chapter glues about the intervals and the window counts: the
    intervals themselves on 8 windows, the lattice case (a value on its threshold: no window
    count decides it), too few windows for half, and one window (no intervals at all)."""
    sqrt_size = lambda L: math.isqrt(L - 1) + 1                                 # noqa: E731
    crit = {128: 12, 256: 32, 512: 40, 1024: 80}
    needs = [[4, 8, 16, 4], [4, 8, 16, 4], [8, 8, 8, 8], [4, 16, 64, 4]]
    eight = _windows_result(needs * 2, [[2, 4, 8, 16]] * 8)
    ivs = R.claim_intervals(eight, crit, 0.05, sqrt_size, "x")
    text = R.interval_sentence(ivs, 8)
    size = ivs["ALT-REM-size"]["grows"]
    assert f"[{size.low:.2f}, {size.high:.2f}]" in text and "2,000 resamples of the 8 windows" in text
    said = R.undecided_sentence(eight, ivs, crit, 0.05, sqrt_size, "x")
    assert "ALT-REM-predict's criterion 'log_ratio'" in said and "on the first 4" in said
    assert "windows would decide it" in said
    two = _windows_result(needs[:1] + needs[2:3], [[2, 4, 8, 16]] * 2)
    ivs = R.claim_intervals(two, crit, 0.05, sqrt_size, "x")
    said = R.undecided_sentence(two, ivs, crit, 0.05, sqrt_size, "x")
    assert "ALT-REM-size's criterion 'grows' is 0.10" in said and "no number of windows decides it" in said
    assert "too few windows for an interval on half of them" in said
    one = _windows_result(needs[:1], [[2, 4, 8, 16]])
    ivs = R.claim_intervals(one, crit, 0.05, sqrt_size, "x")
    assert "no interval can be given" in R.interval_sentence(ivs, 1)
    assert R.undecided_sentence(one, ivs, crit, 0.05, sqrt_size, "x") == \
        "No verdict of this experiment is inconclusive."


@pytest.mark.parametrize("protocol", R.PROTOCOLS)
def test_sweeps_on_disjoint_windows_merge_into_the_sweep_on_all_of_them(tiny_loaded, protocol):
    """merge_results of sweeps on windows 0-1 and 2-3 equals one sweep on 0-3: increases, their
    standard errors, per-window increases, output change, full NLL, tokens."""
    windows = _ids(tiny_loaded, length=64, rows=4)
    caps = [capture_window(tiny_loaded, w) for w in windows]
    options = dict(targets=8, extra_sizes=lambda L: [5], protocol=protocol)
    whole = R.removal_sweep(tiny_loaded, windows, [32, 64], captures=caps, **options)
    parts = [R.removal_sweep(tiny_loaded, windows[a:b], [32, 64], captures=caps[a:b], **options)
             for a, b in ((0, 2), (2, 4))]
    merged = R.merge_results(parts)
    assert merged.windows == 4 and merged.extra["forward_tokens"] == whole.extra["forward_tokens"]
    for mode in R.MODES:
        for L in whole.lengths:
            for field in ("increase", "increase_se", "output_change", "increase_sq"):
                assert np.allclose(getattr(merged, field)[mode][L], getattr(whole, field)[mode][L],
                                   rtol=1e-6, atol=1e-9), (field, mode, L)
            assert np.allclose(merged.increase_by_window[mode][L], whole.increase_by_window[mode][L], atol=1e-12)
    assert all(abs(merged.full_nll[L] - whole.full_nll[L]) < 1e-9 for L in whole.lengths)
    assert R.merge_results(parts[:1]) is parts[0]
    with pytest.raises(ValueError, match="same lengths"):
        R.merge_results([parts[0], R.removal_sweep(tiny_loaded, windows[:2], [64], **options)])
    with pytest.raises(ValueError, match="nothing"):
        R.merge_results([])


def test_the_sequential_sweep_measures_each_window_once_and_stops_on_the_registered_rules(tiny_loaded, monkeypatch):
    """Looks 2, 4: every window swept once, in order; the sweep stops at the first look where no
    removal claim is inconclusive, and runs to the cap while one is; intervals carry the
    Bonferroni level."""
    windows = _ids(tiny_loaded, length=64, rows=4)
    sqrt_size = lambda L: math.isqrt(L - 1) + 1                                 # noqa: E731
    swept = []
    real = R.removal_sweep

    def spy(loaded, ids, lengths, **kw):
        swept.append(ids.clone())
        return real(loaded, ids, lengths, **kw)

    monkeypatch.setattr(R, "removal_sweep", spy)
    critical = {32: None, 64: None}
    monkeypatch.setattr(R, "undecided_claims", lambda *a, **k: ["ALT-TOPK"])      # never decided
    found = R.sequential_sweep(tiny_loaded, windows, [32, 64], (2, 4), critical, 0.05, sqrt_size, "x",
                               targets=8, extra_sizes=lambda L: [sqrt_size(L)])
    assert torch.equal(torch.cat(swept), windows) and [len(s) for s in swept] == [2, 2]
    assert found.run.taken == (2, 4) and not found.run.decided and found.result.windows == 4
    level = found.intervals["ALT-REM-size"]["grows"].level
    assert abs(level - (1 - 0.05 / 2)) < 1e-12
    swept.clear()
    monkeypatch.setattr(R, "undecided_claims", lambda *a, **k: [])              # decided at once
    found = R.sequential_sweep(tiny_loaded, windows, [32, 64], (2, 4), critical, 0.05, sqrt_size, "x",
                               targets=8, extra_sizes=lambda L: [sqrt_size(L)])
    assert [len(s) for s in swept] == [2] and found.run.taken == (2,) and found.result.windows == 2
    with pytest.raises(ValueError, match="last look needs 8"):
        R.sequential_sweep(tiny_loaded, windows, [32, 64], (2, 8), critical, 0.05, sqrt_size, "x", targets=8,
                           extra_sizes=lambda L: [sqrt_size(L)])


def test_undecided_claims_follow_the_registered_rules():
    """A result whose windows agree decides every removal claim that has values; one whose
    windows disagree across a threshold leaves the size claim undecided."""
    sqrt_size = lambda L: math.isqrt(L - 1) + 1                                 # noqa: E731
    none = {L: None for L in (128, 256, 512, 1024)}
    same = _windows_result([[4, 8, 16, 32]] * 4, [[2, 4, 8, 16]] * 4)
    ivs = R.claim_intervals(same, none, 0.05, sqrt_size, "x", resamples=200)
    assert R.undecided_claims(same, ivs, none, 0.05, sqrt_size, "x") == []
    mixed = _windows_result([[4, 8, 16, 32], [64, 64, 64, 64], [4, 8, 16, 32], [64, 64, 64, 64]],
                            [[2, 4, 8, 16]] * 4)
    ivs = R.claim_intervals(mixed, none, 0.05, sqrt_size, "x", resamples=400)
    assert "ALT-REM-size" in R.undecided_claims(mixed, ivs, none, 0.05, sqrt_size, "x")
