"""The corpus's token ids: memoised, and kept on disk for a tokenizer with a fingerprint."""

from __future__ import annotations

import hashlib
from types import SimpleNamespace

import pytest
import torch

from normlimits.model import corpus as C
from normlimits.model.pretrained import _tokenizer_for, tokenizer_fingerprint


def _corpus(text: str) -> C.Corpus:
    return C.Corpus(text=text, sha256=hashlib.sha256(text.encode()).hexdigest(), source="test")


def _counting(ident: str | None):
    """A loaded model's stand-in: byte ids plus one, and a count of the encodings made."""
    calls = []

    def encode(text: str) -> list[int]:
        calls.append(text)
        return [b + 1 for b in text.encode("utf-8")]

    return SimpleNamespace(encode=encode, tokenizer_id=ident), calls


@pytest.fixture
def fresh(isolated_cache, monkeypatch):
    """An empty cache and an empty in-process memo."""
    monkeypatch.setattr(C, "_STORED", {})
    return isolated_cache


def test_ids_are_encoded_once_then_read_from_the_cache_in_a_new_process(fresh, monkeypatch):
    loaded, calls = _counting("tok-a")
    corpus = _corpus("Natásha laughed.\n")
    first = C.corpus_tokens(loaded, corpus)
    assert first.dtype == torch.long and first.tolist() == loaded.encode(corpus.text)
    calls.clear()
    assert C.corpus_tokens(loaded, corpus) is first and calls == []         # memo
    stored = list((fresh / "tokens").glob("*.safetensors"))
    assert len(stored) == 1
    monkeypatch.setattr(C, "_STORED", {})                                     # "a new kernel"
    again = C.corpus_tokens(loaded, corpus)
    assert calls == [] and torch.equal(again, first)                          # read, not encoded


def test_another_tokenizer_or_another_corpus_is_encoded_anew(fresh):
    loaded, calls = _counting("tok-a")
    other, other_calls = _counting("tok-b")
    C.corpus_tokens(loaded, _corpus("one text"))
    C.corpus_tokens(other, _corpus("one text"))
    C.corpus_tokens(loaded, _corpus("another text"))
    assert len(calls) == 2 and len(other_calls) == 1
    assert len(list((fresh / "tokens").glob("*.safetensors"))) == 3


def test_a_damaged_entry_is_encoded_again_with_a_warning_and_rewritten(fresh, monkeypatch):
    loaded, calls = _counting("tok-a")
    corpus = _corpus("Pierre.\n")
    expected = C.corpus_tokens(loaded, corpus)
    (path,) = (fresh / "tokens").glob("*.safetensors")
    for damage in (b"not a safetensors file", None):
        if damage is None:                          # a well-formed file with the wrong content
            from safetensors.torch import save_file
            save_file({"ids": torch.zeros(2, 2, dtype=torch.long)}, str(path))
        else:
            path.write_bytes(damage)
        monkeypatch.setattr(C, "_STORED", {})
        calls.clear()
        with pytest.warns(UserWarning, match=r"token cache: .* is damaged"):
            got = C.corpus_tokens(loaded, corpus)
        assert calls == [corpus.text] and torch.equal(got, expected)
        monkeypatch.setattr(C, "_STORED", {})
        assert torch.equal(C.corpus_tokens(loaded, corpus), expected)         # rewritten, sound


def test_without_a_fingerprint_nothing_is_written(fresh):
    loaded, calls = _counting(None)
    got = C.corpus_tokens(loaded, _corpus("Andrei"))
    assert got.tolist() == [b + 1 for b in b"Andrei"] and len(calls) == 1
    assert not list(fresh.glob("tokens/*"))


def test_the_memo_is_bounded(fresh):
    loaded, _ = _counting("tok-a")
    for i in range(C._STORED_MAX + 3):
        C.corpus_tokens(loaded, _corpus(f"text {i}"))
    assert len(C._STORED) == C._STORED_MAX


def _word_level(vocab: dict[str, int]):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Whitespace()
    return PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]")


def test_the_fingerprint_follows_the_vocabulary_not_the_folder(tmp_path):
    """Two loads of the same files (in two folders) share a fingerprint; another vocabulary, or a
    tokenizer without a fast backend, does not have it."""
    import shutil

    vocab = {"[UNK]": 0, "the": 1, "cat": 2}
    one = _word_level(vocab)
    assert tokenizer_fingerprint(one) == tokenizer_fingerprint(_word_level(dict(vocab)))
    assert tokenizer_fingerprint(one) != tokenizer_fingerprint(_word_level({**vocab, "sat": 3}))
    assert tokenizer_fingerprint(SimpleNamespace(init_kwargs={})) is None    # no fast backend
    one.save_pretrained(tmp_path / "tok")
    shutil.copytree(tmp_path / "tok", tmp_path / "moved")
    encode, kind, _, _, ident = _tokenizer_for(str(tmp_path / "tok"), "test")
    assert encode("the cat") == [1, 2] and "(BPE)" in kind and ident is not None
    assert _tokenizer_for(str(tmp_path / "tok"), "test")[4] == ident
    assert _tokenizer_for(str(tmp_path / "moved"), "test")[4] == ident
    _word_level({**vocab, "sat": 3}).save_pretrained(tmp_path / "other")
    assert _tokenizer_for(str(tmp_path / "other"), "test")[4] != ident
