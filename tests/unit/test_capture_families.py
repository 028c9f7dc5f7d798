"""Capture beyond GPT-2: parity with transformers' own eager attention for tiny random models of
every supported family, and clear refusals for families whose logits capture cannot reproduce."""

from __future__ import annotations

import json

import pytest
import torch

from normlimits.model import attention_tap
from normlimits.model.capture import capture_batch, capture_window
from normlimits.model.pretrained import (
    BYTE_TOKENIZER_FILE, LoadedModel, byte_encode, check_supported)
from normlimits.model.errors import UnsupportedModelError
from normlimits.model.load import load_model

VOCAB = 300
POSITIONS = 64
TINY = dict(vocab_size=VOCAB, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1, pad_token_id=0)


def _config(family: str, **overrides):
    """A tiny configuration of ``family``: 2 layers, 4 query heads of width 8."""
    import transformers as tf

    llama_like = dict(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                      max_position_embeddings=POSITIONS, **TINY)
    configs = {
        "gpt2": lambda: tf.GPT2Config(n_layer=2, n_head=4, n_embd=32, n_positions=POSITIONS, **TINY),
        "gpt_neox": lambda: tf.GPTNeoXConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                             intermediate_size=64, max_position_embeddings=POSITIONS, **TINY),
        "llama": lambda: tf.LlamaConfig(num_key_value_heads=2, **llama_like),        # GQA: 2 groups
        "qwen2": lambda: tf.Qwen2Config(num_key_value_heads=2, **llama_like),
        "opt": lambda: tf.OPTConfig(hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4,
                                    max_position_embeddings=POSITIONS, word_embed_proj_dim=32, **TINY),
        "mistral": lambda: tf.MistralConfig(num_key_value_heads=1, sliding_window=24, **llama_like),
        "gemma2": lambda: tf.Gemma2Config(num_key_value_heads=2, head_dim=8, **llama_like),
        "bloom": lambda: tf.BloomConfig(hidden_size=32, n_layer=2, n_head=4, **TINY),
        "falcon": lambda: tf.FalconConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                          max_position_embeddings=POSITIONS, **TINY),
    }
    config = configs[family]()
    for name, value in overrides.items():
        setattr(config, name, value)
    return config


def tiny(family: str, seed: int = 0, **overrides) -> LoadedModel:
    """A tiny random model of ``family`` (eager attention, eval mode) as a LoadedModel."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(_config(family, **overrides), attn_implementation="eager")
    return LoadedModel(model=model.eval(), name=family, source="test", encode=byte_encode,
                       tokenizer_kind="bytes", is_paper_model=False)


#: the output projection each family applies to the heads' weighted values
OUTPUT_PROJECTION = {"gpt2": "c_proj", "gpt_neox": "dense", "llama": "o_proj", "qwen2": "o_proj",
                     "opt": "out_proj", "mistral": "o_proj"}
SUPPORTED = sorted(OUTPUT_PROJECTION)


def _attention_inputs(model, family):
    """Forward pre-hooks on every layer's output projection: what the heads' values produced."""
    seen = []
    hooks = []
    for module in model.modules():
        if "Attention" in type(module).__name__ and hasattr(module, OUTPUT_PROJECTION[family]):
            projection = getattr(module, OUTPUT_PROJECTION[family])
            hooks.append(projection.register_forward_pre_hook(lambda _m, args: seen.append(args[0])))
    return seen, hooks


@pytest.mark.parametrize("family", SUPPORTED)
def test_weights_and_values_equal_the_eager_layers(family):
    """Weights recomputed from the captured logits equal transformers' eager weights (<= 1e-5),
    and the captured values are the ones each layer multiplies the weights with."""
    loaded = tiny(family)
    ids = torch.randint(0, VOCAB, (2, 20))
    seen, hooks = _attention_inputs(loaded.model, family)
    try:
        with torch.no_grad():
            out = loaded.model(ids, output_attentions=True, output_hidden_states=True)
    finally:
        for hook in hooks:
            hook.remove()
    batch = capture_batch(loaded, ids)
    assert batch.queries.shape == (2, loaded.n_layers, loaded.n_heads, 20, loaded.d_head)
    assert batch.keys.shape == batch.values.shape == batch.queries.shape    # GQA expanded per head
    weights = batch.weights()
    assert len(out.attentions) == len(seen) == loaded.n_layers
    for layer, reference in enumerate(out.attentions):
        assert float((weights[:, layer] - reference).abs().max()) <= 1e-5, (family, layer)
        mixed = (weights[:, layer] @ batch.values[:, layer]).transpose(1, 2).reshape(2, 20, -1)
        assert float((mixed - seen[layer]).abs().max()) <= 1e-5, (family, layer)
        assert torch.equal(batch.hidden[:, layer], out.hidden_states[layer])
    assert bool((weights.triu(1) == 0).all()), "future keys get weight exactly 0"


@pytest.mark.parametrize("family", SUPPORTED)
def test_captures_are_causal(family):
    """Changing token t changes nothing captured at positions before t (the registered mask
    function is in force: without it a custom attention function attends to the future)."""
    loaded = tiny(family)
    ids = torch.randint(0, VOCAB, (24,))
    changed = ids.clone()
    changed[15] = (changed[15] + 1) % VOCAB
    a, b = capture_window(loaded, ids), capture_window(loaded, changed)
    for field in ("queries", "keys", "values"):
        assert torch.allclose(getattr(a, field)[..., :15, :], getattr(b, field)[..., :15, :], atol=1e-6)
        assert not torch.allclose(getattr(a, field)[..., 15:, :], getattr(b, field)[..., 15:, :])
    assert torch.allclose(a.weights(rows=range(15))[..., :15], b.weights(rows=range(15))[..., :15], atol=1e-6)


def test_grouped_query_keys_are_expanded_per_query_head():
    loaded = tiny("llama")               # 4 query heads sharing 2 key/value heads
    assert (loaded.n_heads, loaded.n_kv_heads) == (4, 2)
    capture = capture_window(loaded, torch.randint(0, VOCAB, (10,)))
    assert torch.equal(capture.keys[:, 0], capture.keys[:, 1])
    assert torch.equal(capture.values[:, 2], capture.values[:, 3])
    assert not torch.equal(capture.keys[:, 1], capture.keys[:, 2])


def test_loaded_model_fields_read_every_familys_config_names():
    rows = {family: tiny(family) for family in ("gpt2", "llama", "opt", "mistral")}
    assert {f: (m.n_layers, m.n_heads, m.d_head, m.d_model, m.vocab_size) for f, m in rows.items()} == {
        f: (2, 4, 8, 32, VOCAB) for f in rows}
    assert rows["gpt2"].max_positions == rows["llama"].max_positions == POSITIONS
    assert rows["mistral"].max_positions == 24 and rows["mistral"].context_limit == "sliding window=24"
    assert rows["gpt2"].context_limit == f"n_positions={POSITIONS}"
    assert rows["opt"].family == "opt" and rows["llama"].n_kv_heads == 2 and rows["gpt2"].n_kv_heads == 4


def test_opt_queries_come_prescaled_and_scale_is_one():
    """OPT scales its queries by 1/sqrt(d) before the attention function and passes scaling 1:
    the captured logits are the layer's, scale * q.k with scale 1."""
    capture = capture_window(tiny("opt"), torch.randint(0, VOCAB, (8,)))
    assert capture.scale.tolist() == [1.0, 1.0]


def test_eager_implementation_is_restored_after_capture():
    loaded = tiny("llama")
    capture_window(loaded, torch.randint(0, VOCAB, (8,)))
    assert loaded.model.config._attn_implementation == "eager"


# --------------------------------------------------------------------------- refused families
@pytest.mark.parametrize("family, named", [("gemma2", "soft-capping"), ("bloom", "ALiBi")])
def test_families_that_modify_their_logits_are_refused_by_name(family, named):
    with pytest.raises(UnsupportedModelError, match=named) as info:
        check_supported(tiny(family).model, family)
    assert f"NORMLIMITS_MODEL={family!r}" in str(info.value) and "llama" in str(info.value)


def test_a_family_outside_the_registry_is_refused():
    """Falcon (without ALiBi) computes attention in its own code: nothing to capture or check."""
    with pytest.raises(UnsupportedModelError, match="0 of its 2 attention layers.*FalconAttention"):
        check_supported(tiny("falcon").model, "falcon")


def test_bloom_is_refused_even_without_the_family_table(monkeypatch):
    """Families whose attention never calls the registry are caught by counting the layers."""
    monkeypatch.setattr(attention_tap, "FAMILY_MODIFIERS", {})
    with pytest.raises(UnsupportedModelError, match="0 of its 2 attention layers"):
        check_supported(tiny("bloom").model, "bloom")


def test_softcapping_is_refused_even_without_the_config_table(monkeypatch):
    """Gemma2 passes softcap= to the attention function: refused by name at the first layer."""
    monkeypatch.setattr(attention_tap, "CONFIG_MODIFIERS", {})
    with pytest.raises(UnsupportedModelError, match=r"soft-capping .*\(softcap=50.0\)"):
        check_supported(tiny("gemma2").model, "gemma2")


def test_an_unknown_logit_modification_is_caught_by_the_weight_check(monkeypatch):
    """A family whose eager attention adds something to the logits that no table names."""
    import transformers.models.llama.modeling_llama as llama

    original = llama.eager_attention_forward

    def biased(module, query, key, value, attention_mask, **kwargs):
        bias = torch.linspace(0, 1, key.shape[-2])           # e.g. an ALiBi-like ramp
        return original(module, query, key, value, attention_mask + bias, **kwargs)

    monkeypatch.setattr(llama, "eager_attention_forward", biased)
    loaded = tiny("llama")
    with pytest.raises(UnsupportedModelError, match="differ from softmax"):
        capture_window(loaded, torch.randint(0, VOCAB, (12,)))


def test_a_missing_mask_is_refused():
    with pytest.raises(attention_tap.UnsupportedAttention, match="no attention mask"):
        attention_tap.check_causal_mask(None, 4, "layer 0 (X)")
    bias = torch.zeros(1, 1, 4, 4).masked_fill(~torch.ones(4, 4, dtype=torch.bool).tril(), -1e30)
    attention_tap.check_causal_mask(bias, 4, "layer 0 (X)")              # the plain causal mask
    with pytest.raises(attention_tap.UnsupportedAttention, match="not the plain causal mask"):
        attention_tap.check_causal_mask(bias + torch.arange(4.0), 4, "layer 0 (X)")


def test_sliding_window_beyond_its_width_is_refused():
    """Within its window a sliding-window model is plain causal (parity above); beyond it,
    refused before the pass by the length validator, and by the mask check if that is bypassed."""
    loaded = tiny("mistral")                       # sliding window 24
    with pytest.raises(ValueError, match="sliding window=24"):
        capture_window(loaded, torch.randint(0, VOCAB, (30,)))
    from normlimits.model import capture

    with pytest.raises(UnsupportedModelError, match="sliding window of 24 tokens"):
        capture._forward(loaded.model, torch.randint(0, VOCAB, (1, 30)))


# --------------------------------------------------------------------------- loading from folders
def test_load_model_on_a_saved_tiny_llama_folder(tmp_path):
    """A Llama written by save_pretrained loads through the hub code path; its captures match."""
    reference = tiny("llama")
    reference.model.save_pretrained(tmp_path)
    (tmp_path / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    loaded = load_model(str(tmp_path))
    assert loaded.family == "llama" and loaded.model.config._attn_implementation == "eager"
    assert next(loaded.model.parameters()).dtype == torch.float32
    ids = torch.randint(0, VOCAB, (16,))
    assert torch.equal(capture_window(loaded, ids).keys, capture_window(reference, ids).keys)


def test_a_saved_tokenizer_is_the_one_used(tmp_path):
    """The real path: the tokenizer saved beside the model (a tokenizers-library BPE here)."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {"<unk>": 0, "a": 1, "b": 2, "ab": 3, " ": 4}
    bpe = Tokenizer(models.BPE(vocab=vocab, merges=[("a", "b")], unk_token="<unk>"))
    bpe.pre_tokenizer = pre_tokenizers.Split(" ", behavior="isolated")
    PreTrainedTokenizerFast(tokenizer_object=bpe, unk_token="<unk>").save_pretrained(tmp_path)
    tiny("llama").model.save_pretrained(tmp_path)
    loaded = load_model(str(tmp_path))
    assert loaded.encode("ab a") == [3, 4, 1]


def test_a_saved_gemma2_folder_is_refused_naming_the_setting(tmp_path):
    tiny("gemma2").model.save_pretrained(tmp_path)
    with pytest.raises(UnsupportedModelError, match="soft-capping") as info:
        load_model(str(tmp_path))
    assert f"NORMLIMITS_MODEL='{tmp_path}'" in str(info.value)


def test_device_map_auto_through_accelerate_on_the_cpu(tmp_path):
    """NORMLIMITS_DEVICE=map loads with device_map="auto" (Accelerate plans the placement; with no
    GPU everything lands on the CPU) and captures the same. A real spread over several devices
    needs GPUs: not tested here."""
    from transformers.integrations import accelerate as hf_accelerate

    planned = []
    original = hf_accelerate.infer_auto_device_map
    reference = tiny("qwen2")
    reference.model.save_pretrained(tmp_path)
    (tmp_path / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hf_accelerate, "infer_auto_device_map",
                      lambda *a, **k: planned.append(original(*a, **k)) or planned[-1])
        loaded = load_model(str(tmp_path), device="map")
    assert loaded.placement.device_map == "auto" and planned, "Accelerate planned the device map"
    assert set(planned[0].values()) == {"cpu"}
    assert {p.device.type for p in loaded.model.parameters()} == {"cpu"}
    ids = torch.randint(0, VOCAB, (12,))
    assert torch.equal(capture_window(loaded, ids).queries, capture_window(reference, ids).queries)


@pytest.mark.parametrize("family", SUPPORTED)
def test_output_projections_are_each_layers_w_o_in_layer_order(family):
    """output_projections(model)[l] maps layer l's concatenated head outputs to what its output
    projection returns (less its bias): checked on the projection's own input and output."""
    from normlimits.model.capture import output_projections

    loaded = tiny(family)
    matrices = output_projections(loaded.model)
    seen = []
    modules = [m for m in loaded.model.modules() if hasattr(m, OUTPUT_PROJECTION[family])
               and "Attention" in type(m).__name__]
    hooks = [getattr(m, OUTPUT_PROJECTION[family]).register_forward_hook(
        lambda mod, inputs, output: seen.append((inputs[0].detach(), output.detach(), mod)))
        for m in modules]
    ids = torch.randint(0, VOCAB, (1, 12))
    with torch.no_grad():
        loaded.model(ids)
    for h in hooks:
        h.remove()
    assert len(matrices) == len(seen) == loaded.n_layers
    for w_o, (x, y, mod) in zip(matrices, seen):
        bias = mod.bias if getattr(mod, "bias", None) is not None else 0.0
        assert torch.allclose(x @ w_o + bias, y, atol=1e-5)


def test_removal_sweep_runs_on_a_llama():
    """The removal experiment finds each layer's output projection through the capture layer, so a
    Llama (no GPT-2 module names) runs it; at N = L nothing is removed."""
    from normlimits.experiments import removal as R
    from normlimits.model.capture import capture_window

    loaded = tiny("llama")
    windows = torch.randint(0, VOCAB, (2, 32))
    caps = [capture_window(loaded, w) for w in windows]
    res = R.removal_sweep(loaded, windows, [16, 32], targets=4, captures=caps)
    for L in (16, 32):
        for mode in ("delete", "renormalise"):
            assert abs(res.increase[mode][L][-1]) < 1e-6
            change = res.output_change[mode][L]
            assert change[-1] < 1e-9 and max(change) > 0


#: where each family keeps W_Q, W_K, W_V: one fused projection split in thirds, or three
QKV_GRADIENTS = {"gpt2": ("c_attn",), "llama": ("q_proj", "k_proj", "v_proj"),
                 "qwen2": ("q_proj", "k_proj", "v_proj"), "mistral": ("q_proj", "k_proj", "v_proj"),
                 "opt": ("q_proj", "k_proj", "v_proj")}


@pytest.mark.parametrize("family", sorted(QKV_GRADIENTS))
def test_projection_gradients_are_each_layers_own_parameter_gradients(family):
    """projection_gradients(model)[l] holds layer l's W_Q, W_K, W_V, W_O weight gradients: the sum
    of their squares equals the one read from the family's own parameter names (GPT-2's fused
    c_attn: its three column blocks), and a model without gradients gives None."""
    from normlimits.model.capture import projection_gradients

    loaded = tiny(family)
    model = loaded.model
    assert all(g is None for layer in projection_gradients(model) for g in layer.values())
    ids = torch.randint(0, VOCAB, (1, 12))
    logits = model(ids).logits
    torch.nn.functional.cross_entropy(logits[0, :-1], ids[0, 1:]).backward()
    grads = projection_gradients(model)
    modules = [m for m in model.modules() if hasattr(m, OUTPUT_PROJECTION[family])
               and "Attention" in type(m).__name__]
    assert len(grads) == len(modules) == loaded.n_layers
    for layer, module in zip(grads, modules):
        assert set(layer) == {"q", "k", "v", "o"}
        names = QKV_GRADIENTS[family]
        if len(names) == 1:
            fused = getattr(module, names[0]).weight.grad
            width = fused.shape[1] // 3
            expected = [fused[:, i * width:(i + 1) * width] for i in range(3)]
        else:
            expected = [getattr(module, n).weight.grad for n in names]
        for key, want in zip("qkv", expected):
            assert torch.equal(layer[key], want), (family, key)
        assert torch.equal(layer["o"], getattr(module, OUTPUT_PROJECTION[family]).weight.grad)


def test_projection_gradients_refuse_a_module_with_unknown_projections():
    """GPT-NeoX fuses Q, K, V per head (query_key_value, interleaved): not split as thirds, refused."""
    from normlimits.model.capture import projection_gradients
    from normlimits.model.errors import UnsupportedModelError

    with pytest.raises(UnsupportedModelError, match="neither a fused projection"):
        projection_gradients(tiny("gpt_neox").model)
