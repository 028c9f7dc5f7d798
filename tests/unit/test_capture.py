"""Capture parity: captured weights equal transformers' own attentions and a recomputed softmax
(on tiny models; the parity on the trained stand-in is a model-tier test, tests/model/test_standin.py)."""

from __future__ import annotations

import pytest
import torch

from conftest import capture_parity, make_tiny_gpt2
from normlimits.model.capture import capture_batch, capture_window, iter_captures
from normlimits.model.pretrained import LoadedModel, byte_encode


def _wrap(model):
    return LoadedModel(model=model, name="t", source="t", encode=byte_encode, tokenizer_kind="bytes",
                       is_paper_model=False)


def test_parity_on_a_tiny_gpt2_configuration(tiny_loaded):
    ids = torch.randint(0, 300, (3, 40))
    batch = capture_parity(tiny_loaded, ids)
    assert batch.queries.shape == (3, 2, 4, 40, 8)
    assert batch.hidden.shape == (3, 2, 40, 32)
    assert batch.logits(rows=[0, 39]).shape == (3, 2, 4, 2, 40)


def test_parity_with_inverse_layer_scaling():
    model = make_tiny_gpt2()
    model.config.scale_attn_by_inverse_layer_idx = True
    for index, block in enumerate(model.transformer.h):
        block.attn.scale_attn_by_inverse_layer_idx = True
        block.attn.scaling = (block.attn.head_dim ** -0.5) / (index + 1)
    loaded = _wrap(model)
    ids = torch.randint(0, 300, (2, 20))
    with torch.no_grad():
        out = model(ids, output_attentions=True)
    weights = capture_batch(loaded, ids).weights()
    for layer, reference in enumerate(out.attentions):
        assert torch.allclose(weights[:, layer], reference, atol=1e-6)


def test_causality_row_l_minus_1_equals_last_row_of_window_l(tiny_loaded):
    """The book's sweep trick: one pass over the longest window serves every L."""
    ids = torch.randint(0, 300, (64,))
    full = capture_window(tiny_loaded, ids)
    for length in (8, 33, 64):
        short = capture_window(tiny_loaded, ids[:length])
        assert torch.allclose(full.weights(rows=[length - 1])[..., :length],
                              short.weights(rows=[length - 1]), atol=1e-6)
        assert bool((full.weights(rows=[length - 1])[..., length:] == 0).all())


def test_window_and_stream_agree_with_batch(tiny_loaded):
    ids = torch.randint(0, 300, (3, 16))
    batch = capture_batch(tiny_loaded, ids)
    for w, capture in enumerate(iter_captures(tiny_loaded, ids)):
        assert torch.allclose(capture.weights(temperature=0.5), batch.weights(temperature=0.5)[w], atol=1e-7)
        assert torch.equal(capture.values, batch.values[w])


def test_bad_rows_and_lengths_are_refused(tiny_loaded):
    capture = capture_window(tiny_loaded, torch.randint(0, 300, (10,)))
    with pytest.raises(IndexError, match="0..9"):
        capture.logits(rows=[10])
    with pytest.raises(ValueError, match="T must be > 0"):
        capture.weights(temperature=0.0)
    with pytest.raises(ValueError, match="beyond the model's context"):
        capture_window(tiny_loaded, torch.zeros(65, dtype=torch.long))


def test_gpt2_captures_are_the_fused_c_attn_split_bit_for_bit(tiny_loaded):
    """Through the attention registry, GPT-2's queries, keys and values are exactly the thirds of
    its fused c_attn projection (what this module captured with forward hooks before)."""
    model = tiny_loaded.model
    fused = []
    hooks = [block.attn.c_attn.register_forward_hook(lambda _m, _i, out: fused.append(out))
             for block in model.transformer.h]
    ids = torch.randint(0, 300, (24,))
    try:
        with torch.no_grad():
            model.transformer(input_ids=ids[None], use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    capture = capture_window(tiny_loaded, ids)
    for layer, qkv in enumerate(fused):
        q, k, v = (t.view(24, 4, 8).transpose(0, 1) for t in qkv[0].split(32, dim=-1))
        assert torch.equal(capture.queries[layer], q) and torch.equal(capture.keys[layer], k)
        assert torch.equal(capture.values[layer], v)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_logits_round_as_the_eager_layer_does(dtype):
    """For half-precision captures (accelerators), logits are what eager attention computes,
    ``matmul(q, k^T) * scaling`` in that dtype, bit for bit; weights come out in float32."""
    from normlimits.model.capture import WindowCapture

    torch.manual_seed(0)
    q, k = torch.randn(2, 3, 16, 8).to(dtype), torch.randn(2, 3, 16, 8).to(dtype)
    scales = [8 ** -0.5, 8 ** -0.5 / 2]
    capture = WindowCapture(q, k, k, torch.zeros(2, 16, 4), torch.tensor(scales))
    eager = torch.stack([torch.matmul(q[i], k[i].transpose(-1, -2)) * scales[i] for i in range(2)])
    eager = eager.masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(), float("-inf"))
    assert capture.logits().dtype == dtype and torch.equal(capture.logits(), eager)
    assert capture.weights().dtype == torch.float32
