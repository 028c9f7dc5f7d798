"""GGUF files and saved folders without (all of) their weights are refused, never audited on
random weights (issue 50, item 3); a GGUF without a tokenizer and a folder named ``x.gguf`` get
their own messages (item 8).

The GGUF files are written here with the ``gguf`` package's writer: a tiny Llama (1 layer, width
32, a 97-token BPE vocabulary), complete, with one tensor left out, or with no tensors at all (what
llama.cpp's vocabulary-only ``ggml-vocab-*.gguf`` files are). Conversions go into the test's own
cache.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from conftest import make_tiny_gpt2
from normlimits.audit import command as audit
from normlimits.model import gguf as G
from normlimits.model.errors import ModelError
from normlimits.model.load import load_model
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE

WIDTH, LAYERS, HEADS, KV_HEADS, FFN = 32, 1, 4, 2, 64


def _shapes(vocab: int) -> dict[str, tuple[int, ...]]:
    head = WIDTH // HEADS
    shapes = {"token_embd.weight": (vocab, WIDTH), "output_norm.weight": (WIDTH,)}
    for i in range(LAYERS):
        shapes.update({
            f"blk.{i}.attn_norm.weight": (WIDTH,), f"blk.{i}.attn_q.weight": (WIDTH, WIDTH),
            f"blk.{i}.attn_k.weight": (KV_HEADS * head, WIDTH),
            f"blk.{i}.attn_v.weight": (KV_HEADS * head, WIDTH),
            f"blk.{i}.attn_output.weight": (WIDTH, WIDTH), f"blk.{i}.ffn_norm.weight": (WIDTH,),
            f"blk.{i}.ffn_gate.weight": (FFN, WIDTH), f"blk.{i}.ffn_up.weight": (FFN, WIDTH),
            f"blk.{i}.ffn_down.weight": (WIDTH, FFN)})
    return shapes


def tiny_llama_gguf(path, *, leave_out=(), tensors=True, tokenizer=True):
    """A tiny Llama GGUF file at ``path`` (float32 tensors, seeded), without the tensors named in
    ``leave_out``, without any (``tensors=False``) or without a tokenizer."""
    from gguf import GGUFWriter

    tokens = [chr(c) for c in range(33, 127)] + ["Ġ", "Ġt", "he"]
    writer = GGUFWriter(str(path), "llama")
    writer.add_string("general.name", "tiny llama")
    writer.add_context_length(128)
    writer.add_embedding_length(WIDTH)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(FFN)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_rope_dimension_count(WIDTH // HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    if tokenizer:
        writer.add_tokenizer_model("gpt2")
        writer.add_token_list(tokens)
        writer.add_token_types([1] * len(tokens))
        writer.add_token_merges(["Ġ t", "h e"])
        writer.add_bos_token_id(0)
        writer.add_eos_token_id(1)
    rng = np.random.default_rng(0)
    arrays = {name: (rng.normal(size=shape) * 0.1).astype(np.float32)
              for name, shape in _shapes(len(tokens)).items()}
    if tensors:
        for name, array in arrays.items():
            if name not in leave_out:
                writer.add_tensor(name, array)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path, arrays


def test_a_complete_tiny_gguf_loads_with_every_weight_from_the_file(tmp_path, isolated_cache):
    """The control: the check refuses only what lacks weights."""
    path, arrays = tiny_llama_gguf(tmp_path / "tiny.gguf")
    loaded = load_model(str(path))
    embedding = loaded.model.get_input_embeddings().weight.detach().numpy()
    np.testing.assert_array_equal(embedding, arrays["token_embd.weight"])
    down = loaded.model.model.layers[0].mlp.down_proj.weight.detach().numpy()
    np.testing.assert_array_equal(down, arrays["blk.0.ffn_down.weight"])


def test_a_gguf_with_one_tensor_left_out_is_refused_naming_it(tmp_path, isolated_cache):
    path, _ = tiny_llama_gguf(tmp_path / "holed.gguf", leave_out=("blk.0.attn_q.weight",))
    with pytest.raises(G.GGUFError) as exc:
        load_model(str(path))
    message = str(exc.value)
    assert "lacks 1 of the tensors its llama model needs" in message, message
    assert "blk.0.attn_q.weight (model.layers.0.self_attn.q_proj.weight)" in message, message
    assert "NORMLIMITS_MODEL=" in message and "holed.gguf" in message
    assert not any(p.is_dir() and not p.name.startswith(".") for p in (isolated_cache / "gguf").iterdir()), \
        "an incomplete conversion was cached"


def test_a_vocabulary_only_gguf_is_refused_before_converting(tmp_path, isolated_cache, capsys):
    path, _ = tiny_llama_gguf(tmp_path / "ggml-vocab-tiny.gguf", tensors=False)
    with pytest.raises(G.GGUFError, match=r"holds no tensors.*vocabulary-only file"):
        G.inspect_gguf(path)
    with pytest.raises(SystemExit) as exc:
        audit.main(["--model", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "--model=" in err and "holds no tensors" in err, err
    assert not (tmp_path / "out").exists()


def test_a_gguf_without_a_tokenizer_is_named_not_a_transformers_traceback(tmp_path, isolated_cache):
    path, _ = tiny_llama_gguf(tmp_path / "notok.gguf", tokenizer=False)
    with pytest.raises(G.GGUFError, match=r"holds no tokenizer \(no tokenizer.ggml.tokens"):
        load_model(str(path))


def test_a_folder_named_like_a_gguf_file_is_called_a_folder(tmp_path):
    folder = tmp_path / "x.gguf"
    folder.mkdir()
    with pytest.raises(G.GGUFError, match=r"x\.gguf is a folder, not a GGUF file"):
        load_model(str(folder))


def test_a_saved_folder_whose_weights_lack_a_key_is_refused_naming_it(tmp_path):
    from safetensors.torch import load_file, save_file

    make_tiny_gpt2().save_pretrained(tmp_path)
    (tmp_path / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    weights = load_file(tmp_path / "model.safetensors")
    assert load_model(str(tmp_path)).n_params > 0          # the complete folder loads
    key = next(k for k in weights if k.endswith("h.1.attn.c_attn.weight"))
    del weights[key]
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with pytest.raises(ModelError) as exc:
        load_model(str(tmp_path))
    message = str(exc.value)
    assert "lack 1 of the model's parameters" in message and "h.1.attn.c_attn.weight" in message, message
    assert "save_pretrained" in message


def test_a_conversion_without_room_on_the_disk_is_refused_before_it_starts(tmp_path, isolated_cache,
                                                                           monkeypatch):
    """Issue 50, item 6: the float32 size is known from the header (4 bytes a value), so a disk
    without room for it is named up front, not as an ENOSPC traceback after the dequantising."""
    import collections
    import shutil

    path, arrays = tiny_llama_gguf(tmp_path / "tiny.gguf")
    info = G.inspect_gguf(path)
    assert info.n_values == sum(a.size for a in arrays.values())
    usage = collections.namedtuple("usage", "total used free")
    monkeypatch.setattr(shutil, "disk_usage", lambda folder: usage(10**9, 10**9 - 1000, 1000))
    with pytest.raises(G.CacheError) as exc:
        load_model(str(path))
    message = str(exc.value)
    assert message.startswith("converting tiny.gguf to float32 needs about 0.07 GB in the cache "
                              f"folder {isolated_cache / 'gguf'}, whose disk has 0.00 GB free"), message
    assert "set NORMLIMITS_CACHE to a folder on a disk with room" in message
    assert not [p for p in (isolated_cache / "gguf").iterdir() if p.is_dir()]
