"""A model whose layers attend over a sliding window shorter than its context (Gemma 3): the
audit names the sliding window, not a wrong context, and audit.json records the true context
(issue 50, item 7). A tiny Gemma 3 (2 layers, width 32, window 64, context 256) saved here."""

from __future__ import annotations

import json

import pytest
import torch

from normlimits.audit import command as audit
from normlimits.model.load import load_model
from normlimits.model.pretrained import BYTE_TOKENIZER_FILE


@pytest.fixture(scope="module")
def gemma3(tmp_path_factory):
    from transformers import Gemma3ForCausalLM, Gemma3TextConfig

    folder = tmp_path_factory.mktemp("gemma3")
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=300, hidden_size=32, intermediate_size=64,
                              num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                              head_dim=8, max_position_embeddings=256, sliding_window=64,
                              attn_implementation="eager")
    Gemma3ForCausalLM(config).save_pretrained(folder)
    (folder / BYTE_TOKENIZER_FILE).write_text(json.dumps({"kind": "bytes"}))
    return folder


def test_a_length_beyond_the_sliding_window_names_the_window(gemma3, tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        audit.main(["--model", str(gemma3), "--length", "65", "--windows", "1", "--yardsticks",
                    "vanishing", "--out", str(tmp_path / "out"), "--quiet"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "attends over a sliding window of 64 tokens in some layers (its context is 256 " \
           "tokens)" in err and "pass --length 64 or less" in err, err
    assert "has a context of 64" not in err


def test_the_audit_records_the_true_context_and_the_window_in_its_notes(gemma3):
    block = audit.model_block(load_model(str(gemma3)))
    assert block["context"] == 256
    assert any("sliding window of 64 tokens (its context is 256)" in note for note in block["notes"])
