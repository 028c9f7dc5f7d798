"""The second real pretrained model shipped offline: Gemma 3 270M base, its GGUF file joined from
four PyPI wheels (``make install`` installs them). Loaded once through the model setting, in the
session's cache (the conversion to float32 is SmolLM2's code, tested in test_gguf_models.py; the
joining is tested on fake chunks in tests/unit/test_gemma3_chunks.py)."""

from __future__ import annotations

from importlib import metadata

import pytest

from normlimits.model import gemma3 as G3
from normlimits.model.load import load_model

from conftest import check_language_model


def _not_installed() -> list[str]:
    names = [G3.GEMMA3_DISTRIBUTION] + [dist for dist, *_ in G3.GEMMA3_CHUNKS]
    missing = []
    for name in names:
        try:
            metadata.distribution(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    return missing


@pytest.fixture(scope="module")
def gemma():
    missing = _not_installed()
    if missing:
        pytest.skip(f"the Gemma 3 270M wheels are not installed ({', '.join(missing)}): "
                    f"{G3.GEMMA3_INSTALL_REMEDY}")
    return load_model(G3.GEMMA3)


def test_it_is_gemma3_270m_base_as_its_banner_says(gemma):
    config = gemma.model.config
    assert (gemma.family, gemma.n_layers, gemma.n_heads, gemma.n_kv_heads, gemma.d_head,
            gemma.d_model) == ("gemma3_text", 18, 4, 1, 256, 640)
    assert gemma.sliding_window == 512 and gemma.max_positions == 512
    # a global layer every sixth, sliding-window local layers between
    assert [t == "full_attention" for t in config.layer_types] == [(i + 1) % 6 == 0 for i in range(18)]
    attention = gemma.model.model.layers[0].self_attn
    assert hasattr(attention, "q_norm") and hasattr(attention, "k_norm")          # QK-norm
    assert config.attn_logit_softcapping is None and config.final_logit_softcapping is None
    assert gemma.quantisation == "Q4_K/Q5_0/Q6_K/Q8_0"
    assert 268_000_000 < gemma.n_params < 268_200_000 and gemma.vocab_size == 262_144
    assert gemma.source.startswith("Gemma 3 270M base (Google)") and "Gemma terms" in gemma.source
    assert gemma.name == "gemma3-270m" and not gemma.is_paper_model
    assert config._attn_implementation == "eager"
    assert all(p.dtype.is_floating_point and p.dtype.itemsize == 4 for p in gemma.model.parameters())
    text = "The attention heads of War and Peace."
    assert gemma.decode(gemma.encode(text)) == text


def test_it_is_a_language_model_far_below_the_stand_in_and_the_bigram(gemma):
    """Held-out bits per byte on the bytes SmolLM2's test uses, each text started with Gemma's
    <bos> as its tokenizer starts every text (measured: Gemma 1.23; without the <bos> 1.78, the
    stand-in 3.03, the bigram 3.49)."""
    assert gemma.prefix == (2,), "Gemma 3's tokenizer starts every text with <bos> (id 2)"
    check_language_model(gemma, max_bits_per_byte=1.5)


def test_its_provenance_names_the_joined_file_and_its_sha256(gemma):
    from normlimits.audit.provenance import model_source

    source = model_source(gemma)
    assert source["kind"] == "gguf" and source["setting"] == "gemma3-270m"
    assert source["gguf"]["sha256"] == G3.GEMMA3_SHA256
    assert source["gguf"]["bytes"] == G3.GEMMA3_BYTES
