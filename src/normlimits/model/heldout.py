"""Is it a language model? Held-out bits per byte of any loaded model on the same bytes.

Models with different tokenizers (the byte-level stand-ins, SmolLM2's BPE of 49,152 ids) are
compared per byte of text, not per token: each held-out text is encoded by the model's own
tokenizer, every token after the first is predicted from the ones before it, and the bits of
those predictions are divided by the UTF-8 bytes of the tokens predicted. The texts are cut from
the stand-in's held-out split (the last :data:`normlimits.model.standin.HELD_OUT_FRACTION` of the
corpus, which no stand-in trained on), at character boundaries, so every model sees exactly the
same bytes; the bigram baseline is the stand-in's, fitted on the training split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from normlimits.model.standin import bigram_log_probs, byte_tokens, split_corpus

LN2 = math.log(2.0)


def held_out_texts(corpus_text: str, count: int = 8, size: int = 1024) -> list[str]:
    """``count`` consecutive texts of about ``size`` UTF-8 bytes from the held-out split of
    ``corpus_text`` (the stand-in's split), each cut at character boundaries (a character split
    by a cut is dropped from both texts); raises ValueError when the split is too short."""
    _, held_out = split_corpus(byte_tokens(corpus_text))
    raw = bytes(held_out.tolist())
    if len(raw) < count * size:
        raise ValueError(f"the held-out split holds {len(raw):,} bytes, fewer than {count} texts "
                         f"of {size} bytes")
    return [raw[k * size:(k + 1) * size].decode("utf-8", errors="ignore") for k in range(count)]


@dataclass(frozen=True)
class BitsPerByte:
    """``bits``: total bits of the predicted tokens; ``bytes``: their UTF-8 bytes; ``tokens``: how
    many were predicted."""

    bits: float
    bytes: int
    tokens: int

    @property
    def per_byte(self) -> float:
        return self.bits / self.bytes

    @property
    def bytes_per_token(self) -> float:
        return self.bytes / self.tokens


@torch.no_grad()
def bits_per_byte(loaded, texts: list[str]) -> BitsPerByte:
    """Bits per byte of ``loaded`` (a :class:`~normlimits.model.pretrained.LoadedModel` with a ``decode``)
    over ``texts``: one forward pass per text, no context carried between texts. A text starts
    with the ids the model's tokenizer puts before every text (``loaded.prefix``), as in training;
    every text token after them is predicted and counted (without a prefix, the first token has
    nothing to be predicted from and is not counted)."""
    if loaded.decode is None:
        raise ValueError(f"{loaded.name}: its tokenizer cannot decode, so its predictions cannot "
                         "be counted in bytes")
    model = loaded.model
    device = model.get_input_embeddings().weight.device
    bits, n_bytes, tokens = 0.0, 0, 0
    for text in texts:
        prefix = list(getattr(loaded, "prefix", ()))
        ids = prefix + loaded.encode(text)
        if len(ids) < 2:
            continue
        ids = torch.tensor(ids[:loaded.max_positions], dtype=torch.long, device=device)[None]
        logits = model(input_ids=ids[:, :-1]).logits.double()
        first = max(len(prefix), 1)          # the first token the model predicts from the text's start
        nats = torch.nn.functional.cross_entropy(logits[0, first - 1:], ids[0, first:], reduction="sum")
        bits += float(nats) / LN2
        n_bytes += len(loaded.decode(ids[0, first:].tolist()).encode("utf-8"))
        tokens += ids.shape[1] - first
    if tokens == 0:
        raise ValueError("no text was long enough to predict a token")
    return BitsPerByte(bits=bits, bytes=n_bytes, tokens=tokens)


def bigram_bits_per_byte(corpus_text: str, texts: list[str]) -> BitsPerByte:
    """The stand-in's bigram baseline (fitted on the training split) on the bytes of ``texts``,
    counted as :func:`bits_per_byte` counts a byte-level model."""
    train, _ = split_corpus(byte_tokens(corpus_text))
    log_probs = bigram_log_probs(train)                  # [vocab, vocab] log2
    bits, n_bytes = 0.0, 0
    for text in texts:
        ids = byte_tokens(text)
        if len(ids) < 2:
            continue
        bits += float(-log_probs[ids[:-1], ids[1:]].sum())
        n_bytes += len(ids) - 1
    return BitsPerByte(bits=bits, bytes=n_bytes, tokens=n_bytes)
