"""Sliding-window attention measured, not avoided (issue 49, item 2): a tiny random Gemma 3 with
local layers of 8 keys and a global one, captured over 32 tokens with ``sliding="measure"``.
Captured weights are the model's own, masked keys weigh exactly 0, a local layer's row
statistics are those of the row cut to its window, and every other mask (and the default, capped
capture beyond the window) is still refused."""

from __future__ import annotations

import pytest
import torch

from conftest import make_tiny_gemma3
from normlimits.core.validation import InputError
from normlimits.metrics import vanishing as V
from normlimits.model import attention_tap, capture, capture_cache
from normlimits.model.capture import capture_window
from normlimits.model.errors import UnsupportedModelError
from normlimits.model.pretrained import LoadedModel, byte_encode

WINDOW, LENGTH = 8, 32
TYPES = ("sliding_attention", "full_attention", "sliding_attention", "sliding_attention")
GRID = [1, 4, 8, 9, 16, 31, 32]


@pytest.fixture(scope="module")
def loaded():
    model = make_tiny_gemma3(TYPES, sliding_window=WINDOW, positions=64)
    return LoadedModel(model=model, name="tiny-gemma3", source="test", encode=byte_encode,
                       tokenizer_kind="bytes", is_paper_model=False)


@pytest.fixture(scope="module")
def ids():
    return torch.randint(1, 299, (LENGTH,), generator=torch.Generator().manual_seed(5))


@pytest.fixture(scope="module")
def captured(loaded, ids):
    return capture_window(loaded, ids, sliding="measure")


def test_the_capture_records_each_layers_window(loaded, captured):
    assert captured.windows.tolist() == [WINDOW, 0, WINDOW, WINDOW] and captured.banded
    assert loaded.max_positions == WINDOW and loaded.context_positions == 64
    assert loaded.positions("measure") == 64 and loaded.positions() == WINDOW


def test_captured_weights_are_the_models_own_eager_weights_on_every_layer(loaded, ids, captured):
    with torch.no_grad():
        own = loaded.model(ids[None], output_attentions=True, use_cache=False).attentions
    weights = captured.weights()
    assert len(own) == weights.shape[0] == len(TYPES)
    for layer, attention in enumerate(own):
        assert torch.allclose(weights[layer], attention[0], rtol=0, atol=1e-6), layer


def test_masked_keys_weigh_exactly_zero(captured):
    weights = captured.weights()
    t = torch.arange(LENGTH)[:, None]
    j = torch.arange(LENGTH)[None, :]
    for layer, window in enumerate(captured.windows.tolist()):
        hidden = (j > t) | ((j <= t - window) if window else torch.zeros_like(j > t))
        assert bool((weights[layer][:, hidden] == 0).all()), layer
        assert bool((weights[layer][:, ~hidden] > 0).all()), layer
        assert torch.isneginf(captured.logits()[layer][:, hidden]).all()
    assert torch.allclose(weights.sum(-1), torch.ones((), dtype=weights.dtype))
    # the local layers' last row sees exactly W keys, the global layer's all 32
    assert (weights[:, :, -1] > 0).sum(-1)[:, 0].tolist() == [WINDOW, LENGTH, WINDOW, WINDOW]


def test_a_local_rows_statistics_are_those_of_the_row_cut_to_its_window(captured):
    stats = V.sweep_capture(captured, GRID)
    assert stats.layer_windows == (WINDOW, 0, WINDOW, WINDOW)
    assert stats.local_layers == [0, 2, 3] and stats.global_layers == [1]
    assert stats.keys[0, 0].tolist() == [min(L, WINDOW) for L in GRID]
    assert stats.keys[1, 0].tolist() == GRID
    exact = ("argmax_key", "paper_outside", "sharp_outside", "literal_outside")
    for layer in stats.local_layers:
        for g, L in enumerate(GRID):
            start = max(0, L - WINDOW)
            cut = V.sweep_queries_keys(captured.queries[layer, :, start:L], captured.keys[layer, :, start:L],
                                       captured.scale[layer], [L - start])
            for name in ("max_weight", "min_weight", "entropy", "delta", "logit_range",
                         "first_key_weight", "max_weight_rest", "paper_upper_slack",
                         "sharp_upper_slack", "sharp_lower_slack", "entropy_slack") + exact:
                ours, theirs = getattr(stats, name)[layer, :, g], getattr(cut, name)[:, 0]
                if name in exact:
                    assert torch.equal(ours, theirs), (name, layer, L)
                else:
                    assert torch.allclose(ours, theirs, rtol=1e-12, atol=1e-14, equal_nan=True), (name, layer, L)
    # the global layer is measured as before, over every earlier key
    plain = V.sweep_queries_keys(captured.queries, captured.keys, captured.scale, GRID)
    assert torch.equal(stats.max_weight[1], plain.max_weight[1])
    assert stats.violations("sharp") == 0 and stats.violations("paper") == 0


def test_the_sweeps_parity_and_the_kind_table_use_the_visible_keys(captured):
    stats, parity = V.sweep_captures([captured, captured], GRID)
    assert parity < 1e-6 and stats.layer_windows == (WINDOW, 0, WINDOW, WINDOW)
    table = V.layer_kind_medians(stats)
    assert list(table.columns) == ["global", "global x keys", f"local W={WINDOW}", f"local W={WINDOW} x keys"]
    local = stats.max_weight[:, stats.local_layers].movedim(-1, 0).reshape(len(GRID), -1)
    assert table[f"local W={WINDOW}"].tolist() == local.median(-1).values.tolist()
    heads = V.head_summary(stats)
    assert heads.loc[heads["layer"] == 0, "log_keys_last"].iloc[0] == pytest.approx(torch.log(torch.tensor(8.0)).item())
    assert heads.loc[heads["layer"] == 1, "log_keys_last"].iloc[0] == pytest.approx(torch.log(torch.tensor(32.0)).item())


def test_captures_within_the_window_are_unchanged_by_the_setting(loaded, ids):
    capped, measured = capture_window(loaded, ids[:WINDOW]), capture_window(loaded, ids[:WINDOW], sliding="measure")
    assert not capped.banded and torch.equal(capped.weights(), measured.weights())
    stats = V.sweep_capture(capped, [2, 4, 8])
    plain = V.sweep_queries_keys(capped.queries, capped.keys, capped.scale, [2, 4, 8])
    assert torch.equal(stats.max_weight, plain.max_weight) and torch.equal(stats.keys, plain.keys)


def test_the_default_capture_beyond_the_window_is_refused_naming_the_opt_in(loaded, ids):
    with pytest.raises(InputError, match='sliding="measure"'):
        capture_window(loaded, ids)
    with pytest.raises(UnsupportedModelError, match="sliding='measure'"):     # validation bypassed
        capture._forward(loaded.model, ids[None])
    with pytest.raises(ValueError, match="'cap', 'measure'"):
        capture_window(loaded, ids, sliding="yes")


def _additive(visible: torch.Tensor) -> torch.Tensor:
    return torch.zeros(1, 1, *visible.shape).masked_fill(~visible, -1e30)


def test_a_mask_that_is_neither_causal_nor_the_layers_band_is_refused():
    band = _additive(attention_tap.visible_keys(16, WINDOW))
    assert attention_tap.check_causal_mask(band, 16, "layer 0 (X)", WINDOW, banded=True) == WINDOW
    assert attention_tap.check_causal_mask(_additive(attention_tap.visible_keys(16)), 16, "layer 0 (X)",
                                           WINDOW, banded=True) is None
    with pytest.raises(attention_tap.UnsupportedAttention, match="sliding='measure'"):
        attention_tap.check_causal_mask(band, 16, "layer 0 (X)", WINDOW)
    narrower = _additive(attention_tap.visible_keys(16, WINDOW - 1))             # not its own band
    with pytest.raises(attention_tap.UnsupportedAttention, match="not the plain causal mask"):
        attention_tap.check_causal_mask(narrower, 16, "layer 0 (X)", WINDOW, banded=True)
    with pytest.raises(attention_tap.UnsupportedAttention, match="not the plain causal mask"):
        attention_tap.check_causal_mask(band, 16, "layer 0 (X)", None, banded=True)   # a global layer
    strided = attention_tap.visible_keys(16, WINDOW).clone()
    strided[10, 5] = False
    with pytest.raises(attention_tap.UnsupportedAttention, match="not the plain causal mask"):
        attention_tap.check_causal_mask(_additive(strided), 16, "layer 0 (X)", WINDOW, banded=True)


def test_the_weight_check_compares_against_the_banded_softmax():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 2, 16, 4, generator=gen), torch.randn(1, 2, 16, 4, generator=gen)
    rows = torch.tensor([0, 7, 15])
    scores = q @ k.transpose(-1, -2) * 0.5

    def softmax(window):
        return scores.masked_fill(~attention_tap.visible_keys(16, window), float("-inf")).softmax(-1)

    attention_tap.check_weights(softmax(4), q, k, 0.5, rows, "layer 0 (X)", window=4)
    attention_tap.check_weights(softmax(None), q, k, 0.5, rows, "layer 0 (X)")
    with pytest.raises(attention_tap.UnsupportedAttention, match="sliding window of 4 keys"):
        attention_tap.check_weights(softmax(None), q, k, 0.5, rows, "layer 0 (X)", window=4)
    with pytest.raises(attention_tap.UnsupportedAttention, match="under the causal mask"):
        attention_tap.check_weights(softmax(4), q, k, 0.5, rows, "layer 0 (X)")


def test_the_capture_cache_stores_the_windows(loaded, ids, tmp_path):
    key = {"format": capture_cache.FORMAT, "test": 1}
    first = list(capture_cache.serve(loaded, ids[None], tmp_path / "entry", key, sliding="measure"))[0]
    reused = []
    again = list(capture_cache.serve(loaded, ids[None], tmp_path / "entry", key, sliding="measure",
                                     on_window=lambda i, r: reused.append(r)))[0]
    assert reused == [True] and torch.equal(again.windows, first.windows)
    assert torch.equal(again.weights(), first.weights())
    assert capture_cache.FORMAT == 2 and "windows" in capture_cache.FIELDS


def test_corpus_windows_and_cached_captures_opt_in_by_the_same_setting(loaded, tmp_path, monkeypatch):
    import hashlib

    from normlimits.model.corpus import Corpus, token_windows

    text = "Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. " * 4
    corpus = Corpus(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), source="test")
    with pytest.raises(ValueError, match='sliding="measure"'):
        token_windows(loaded, corpus, LENGTH, 2)
    assert token_windows(loaded, corpus, LENGTH, 2, sliding="measure").shape == (2, LENGTH)
    monkeypatch.setenv(capture_cache.CAPTURE_CACHE_ENV, str(tmp_path / "captures"))
    (first, second) = capture_cache.cached_captures(loaded, corpus, LENGTH, 2, sliding="measure")
    assert first.windows.tolist() == [WINDOW, 0, WINDOW, WINDOW] and first.banded and second.banded
