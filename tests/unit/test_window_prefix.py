"""Windows start as the model's own tokenizer starts a text: with its beginning-of-sequence token
where it adds one (Gemma 3), unchanged where it adds none (GPT-2, SmolLM2, the byte models)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from normlimits.core.settings import SettingError
from normlimits.model.corpus import Corpus, token_windows
from normlimits.model.pretrained import tokenizer_prefix


def test_the_prefix_is_what_the_tokenizer_puts_before_the_text():
    assert tokenizer_prefix([2, 10, 11, 12], [10, 11, 12]) == (2,)          # Gemma 3: <bos>
    assert tokenizer_prefix([10, 11, 12], [10, 11, 12]) == ()               # GPT-2, SmolLM2
    assert tokenizer_prefix([10, 11, 12, 1], [10, 11, 12]) == ()            # an end token only
    assert tokenizer_prefix([5, 2, 10, 11], [10, 11]) == (5, 2)


def loaded(prefix):
    return SimpleNamespace(encode=lambda text: [ord(c) for c in text], prefix=prefix,
                           max_positions=64, context_limit="n_positions=64")


def test_every_window_starts_with_the_prefix_then_as_much_text():
    corpus = Corpus(text="abcdefghijklmnopqrstuvwxyz" * 8, source="test", sha256="x" * 64)
    plain = token_windows(loaded(()), corpus, 16, 3)
    with_bos = token_windows(loaded((2,)), corpus, 16, 3)
    assert plain.shape == with_bos.shape == (3, 16)
    assert bool((with_bos[:, 0] == 2).all())
    # the text after the prefix is a contiguous slice of the corpus, of L - 1 tokens
    text = torch.tensor([ord(c) for c in corpus.text])
    for row in with_bos:
        body = row[1:]
        start = int((text == body[0]).nonzero()[0])
        assert any(torch.equal(text[s:s + 15], body) for s in range(start, len(text) - 14, 26))
    assert not bool((plain[:, 0] == 2).any())
    with pytest.raises(SettingError, match="no room for text"):
        token_windows(loaded((2,)), corpus, 1, 1)
