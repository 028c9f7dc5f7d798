"""The corpus (``NORMLIMITS_CORPUS``): Tolstoy's *War and Peace*, and windows of L tokens cut from it.

The setting is a path or a URL. Unset, it is Project Gutenberg's eBook #2600, downloaded once,
its header and licence stripped, and cached. Offline without a cached copy, or with a file that
is not UTF-8, a :class:`CorpusError` names the setting and the remedy.
"""

from __future__ import annotations

import hashlib
import os
import urllib.error
import urllib.request
import warnings
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import torch

from normlimits.core import validation
from normlimits.core.cache import atomic_save_safetensors, atomic_write_bytes, cache_path
from normlimits.core.settings import CORPUS_ENV, WINDOWS_ENV, SettingError, cache_dir

GUTENBERG_URL = "https://www.gutenberg.org/cache/epub/2600/pg2600.txt"
_START = "*** START OF THE PROJECT GUTENBERG EBOOK"
_END = "*** END OF THE PROJECT GUTENBERG EBOOK"


class CorpusError(SettingError):
    """The corpus setting cannot be honoured; the message names the setting and the remedy."""


@dataclass(frozen=True)
class Corpus:
    """The text used, its sha256 (of the UTF-8 bytes after stripping) and where it came from."""

    text: str
    sha256: str
    source: str
    #: where the value came from, for messages: ``NORMLIMITS_CORPUS`` or an option (``--corpus``)
    origin: str = CORPUS_ENV

    @property
    def n_bytes(self) -> int:
        return len(self.text.encode("utf-8"))


def strip_gutenberg(text: str) -> str:
    """Remove a Project Gutenberg header and licence footer, if present (else return ``text`` as is)."""
    if _START not in text and _END not in text:
        return text
    start = text.find(_START)
    if start >= 0:
        text = text[text.index("\n", start) + 1:]
    end = text.find(_END)
    if end >= 0:
        text = text[:end]
    return text.strip("\n\r ") + "\n"


def _named(origin: str, value: str) -> str:
    """How a message names the value: ``NORMLIMITS_CORPUS='x'`` (a setting) or ``--corpus 'x'``."""
    return f"{origin} {value!r}" if origin.startswith("-") else f"{origin}={value!r}"


def _point(origin: str) -> str:
    """The remedy's verb phrase for ``origin``."""
    return f"pass {origin} with" if origin.startswith("-") else f"point {origin} at"


def _cap(text: str) -> str:
    return text[:1].upper() + text[1:]


def _decode(data: bytes, where: str, origin: str = CORPUS_ENV) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise CorpusError(f"{origin}: {where} is not UTF-8 text ({exc.reason} at byte "
                          f"{exc.start}). Convert it to UTF-8 (e.g. iconv -t utf-8) or "
                          f"{_point(origin)} a UTF-8 file.") from None


def _download(url: str, explicit: bool, origin: str = CORPUS_ENV) -> bytes:
    target = cache_dir() / "corpus" / (hashlib.sha256(url.encode()).hexdigest()[:16] + ".txt")
    if target.is_file():
        return target.read_bytes()
    try:
        with urllib.request.urlopen(url, timeout=30) as response:
            data = response.read()
    except (urllib.error.URLError, OSError) as exc:
        raise CorpusError(
            f"{origin} is {repr(url) if explicit else 'unset'} and the corpus could "
            f"not be downloaded from {url} ({exc}); this machine seems offline. Remedy: "
            f"{_point(origin)} a local UTF-8 copy of War and Peace, e.g. "
            f"{_named(origin, '../shared/data/war-and-peace.txt')}.") from exc
    atomic_write_bytes(target, data)
    return data


def load_corpus(setting: str | None = None, origin: str | None = None) -> Corpus:
    """Read the corpus named by ``setting`` (default ``NORMLIMITS_CORPUS``; unset: Gutenberg #2600).

    ``origin`` names where ``setting`` came from in every message (an option such as
    ``--corpus``); default ``NORMLIMITS_CORPUS``.
    """
    origin = origin or CORPUS_ENV
    setting = (setting if setting is not None else os.environ.get(CORPUS_ENV, "")).strip()
    unset = "" if origin.startswith("-") else ", or unset it to download Project Gutenberg's eBook #2600"
    if setting.startswith(("http://", "https://")) or setting == "":
        url = setting or GUTENBERG_URL
        text = strip_gutenberg(_decode(_download(url, explicit=bool(setting), origin=origin), url,
                                       origin))
        source = url
    else:
        path = Path(setting).expanduser()
        if path.is_dir():
            raise CorpusError(f"{_named(origin, setting)} is a folder, not a text file. "
                              f"{_cap(_point(origin))} a UTF-8 text file inside it (the "
                              f"project uses ../shared/data/war-and-peace.txt offline){unset}.")
        if not path.is_file():
            raise CorpusError(f"{_named(origin, setting)}: no such file. "
                              f"{_cap(_point(origin))} a UTF-8 text file (the project uses "
                              f"../shared/data/war-and-peace.txt offline){unset}.")
        text = strip_gutenberg(_decode(path.read_bytes(), str(path), origin))
        source = str(path.resolve())
    if not text.strip():
        what = "is empty" if not text else "holds only white space"
        raise CorpusError(f"{_named(origin, setting)}: the corpus {what}, so no window of text can "
                          f"be cut from it. {_cap(_point(origin))} a UTF-8 text of some "
                          f"length (the project uses ../shared/data/war-and-peace.txt offline)"
                          f"{unset}.")
    check_is_text(text, setting, origin)
    return Corpus(text=text, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest(), source=source,
                  origin=origin)


#: the characters below U+0020 that prose does not hold (every one but tab, line feed, form feed
#: and carriage return); counted one ``str.count`` each, not one Python step per character (on War
#: and Peace's 3.2M characters, at every corpus load: 0.03 s, against 0.16 s)
CONTROL_CHARACTERS = tuple(chr(c) for c in range(32) if chr(c) not in "\n\r\t\f")


def check_is_text(text: str, setting: str = "", origin: str = CORPUS_ENV) -> None:
    """Refuse a "corpus" that is not prose: more than 1% control characters (NUL bytes, binary
    data decoded as UTF-8), which would silently give windows of meaningless tokens."""
    control = sum(text.count(ch) for ch in CONTROL_CHARACTERS)
    if control > 0.01 * len(text):
        raise CorpusError(f"{_named(origin, setting)}: {control:,} of its {len(text):,} characters "
                          f"({control / len(text):.0%}) are control characters (e.g. NUL bytes): "
                          f"this is not a text. {_cap(_point(origin))} a UTF-8 text file "
                          "such as War and Peace.")


@lru_cache(maxsize=4)
def _encoded(encode, text: str) -> torch.Tensor:
    return torch.tensor(encode(text), dtype=torch.long)


#: the corpora's ids by (tokenizer fingerprint, corpus sha256), within this process
_STORED: dict[tuple[str, str], torch.Tensor] = {}
_STORED_MAX = 4


def corpus_tokens(loaded, corpus: Corpus) -> torch.Tensor:
    """The whole corpus as token ids of ``loaded``'s tokenizer, LongTensor [n_tokens].

    Memoised in the process. Where the tokenizer has a fingerprint (``loaded.tokenizer_id``: a
    real model's BPE tokenizer, :func:`normlimits.model.pretrained.tokenizer_fingerprint`) the ids
    are also kept in the cache (``tokens/``, keyed by the fingerprint and the corpus's sha256), so
    a chapter's fresh kernel, and every later load of the model, reads them instead of encoding
    the corpus again (2-3 s for War and Peace under a BPE tokenizer). A damaged entry is encoded
    again, with a warning; a read-only cache is only read.
    """
    ident = getattr(loaded, "tokenizer_id", None)
    if ident is None:
        return _encoded(loaded.encode, corpus.text)
    key = (ident, corpus.sha256)
    if key not in _STORED:
        path = cache_path("tokens", {"tokenizer": ident, "corpus_sha256": corpus.sha256},
                          ".safetensors")
        ids = _read_tokens(path)
        if ids is None:
            ids = torch.tensor(loaded.encode(corpus.text), dtype=torch.long)
            try:
                atomic_save_safetensors({"ids": ids}, path)
            except OSError:
                pass                        # a read-only cache: the ids are encoded each time
        while len(_STORED) >= _STORED_MAX:
            _STORED.pop(next(iter(_STORED)))
        _STORED[key] = ids
    return _STORED[key]


def _read_tokens(path: Path) -> torch.Tensor | None:
    """The ids stored at ``path`` (a 1-D int64 tensor), None where there is no entry, and None
    with a warning where the entry is damaged (it is then written again)."""
    if not path.is_file():
        return None
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        ids = load_file(str(path)).get("ids")
    except (SafetensorError, OSError, ValueError) as exc:
        ids, why = None, f"{type(exc).__name__}: {exc}"
    else:
        why = "it holds no 1-D int64 tensor 'ids'"
    if ids is not None and ids.dim() == 1 and ids.dtype == torch.long:
        return ids
    warnings.warn(f"token cache: {path} is damaged ({why}); encoding the corpus again.")
    return None


def window_starts(n_tokens: int, length: int, count: int, origin: str = CORPUS_ENV,
                  shift: float = 0.0) -> torch.Tensor:
    """Evenly spaced start offsets of ``count`` windows of ``length`` tokens in a stream, [count];
    ``origin`` names where the corpus came from in the error. ``shift`` in [0, 1) moves every
    start by that fraction of the spacing: 0.5 gives windows from other parts of the text,
    between the default ones (disjoint from them when the spacing exceeds twice ``length``)."""
    if length > n_tokens:
        raise CorpusError(f"the corpus has {n_tokens} tokens, fewer than one window of L={length}; "
                          f"{_point(origin)} a longer text or use a smaller L.")
    if not 0.0 <= shift < 1.0:
        raise ValueError(f"shift={shift!r}: the windows' shift is a fraction of their spacing, in [0, 1)")
    span = n_tokens - length
    if shift == 0.0:
        return torch.tensor([(k * span) // max(count, 1) for k in range(count)], dtype=torch.long)
    return torch.tensor([int((k + shift) * span // max(count, 1)) for k in range(count)],
                        dtype=torch.long)


def check_window_length(length: int, max_positions: int, limit: str | None = None) -> int:
    """Validate a window length L against the model's context (the shared validator); ``limit``
    names what bounds it (default ``n_positions=max_positions``)."""
    return validation.window_length(length, max_positions, limit=limit)


def token_windows(loaded, corpus: Corpus, length: int, count: int, *,
                  count_origin: str | None = None, shift: float = 0.0,
                  sliding: str = "cap") -> torch.Tensor:
    """``count`` deterministic windows of ``length`` tokens, LongTensor [count, length].

    ``length`` is bounded by the model's context, or by its sliding window unless ``sliding`` is
    ``"measure"`` (:meth:`normlimits.model.pretrained.LoadedModel.positions`).

    Windows start at evenly spaced offsets over the whole tokenised text, so the same corpus and
    tokenizer always give the same windows; each starts with the ids the model's tokenizer puts
    before every text (``loaded.prefix``, e.g. Gemma 3's beginning-of-sequence token), followed by
    ``length - len(prefix)`` tokens of text (``shift``: moved by that fraction of the spacing,
    :func:`window_starts`). ``count_origin`` names where ``count`` came from in the errors (an
    option such as ``--windows``); default the setting ``NORMLIMITS_WINDOWS``.
    """
    if hasattr(loaded, "positions"):
        check_window_length(length, loaded.positions(sliding), loaded.positions_limit(sliding))
    else:
        check_window_length(length, loaded.max_positions, getattr(loaded, "context_limit", None))
    if count_origin is None:
        count_remedy = f"Set {WINDOWS_ENV} (or the window count) to"
    else:
        count_remedy = f"Pass {count_origin}"
    if count < 1:
        raise SettingError(f"the window count must be at least 1 (got {count}); "
                           f"{count_remedy[0].lower() + count_remedy[1:]} 1 or more.")
    tokens = corpus_tokens(loaded, corpus)
    origin = getattr(corpus, "origin", CORPUS_ENV)
    prefix = torch.tensor(getattr(loaded, "prefix", ()), dtype=torch.long)
    if len(prefix) >= length:
        raise SettingError(f"L={length} leaves no room for text after the {len(prefix)} token(s) the "
                           f"model's tokenizer starts every text with; use L > {len(prefix)}.")
    body = length - len(prefix)
    fits = len(tokens) // body
    if count > max(fits, 1):
        raise SettingError(f"{count:,} windows of L={length} tokens do not fit in the corpus "
                           f"({len(tokens):,} tokens): at most {fits:,} distinct windows fit. "
                           f"{count_remedy} {fits:,} or fewer, or {_point(origin)} a longer text.")
    starts = window_starts(len(tokens), body, count, origin, shift)
    text = tokens[starts[:, None] + torch.arange(body)[None, :]]
    return torch.cat([prefix.expand(count, -1), text], dim=1)


#: texts :func:`corpus_label` names, by phrases from their title pages or first lines
KNOWN_TEXTS = {
    "Tolstoy, War and Peace": ("war and peace", "tolstoy",
                               "so genoa and lucca are now just family estates"),
    "Melville, Moby-Dick": ("moby dick", "moby-dick", "call me ishmael"),
    "Austen, Pride and Prejudice": ("pride and prejudice",
                                    "it is a truth universally acknowledged"),
}


def corpus_label(corpus: Corpus) -> str:
    """The corpus in words, without a machine path: its title, where it is from, its size."""
    head = corpus.text[:5000].lower()
    # the title page, or the novel's first line when the text is stripped of its front matter
    title = next((name for name, marks in KNOWN_TEXTS.items() if any(k in head for k in marks)),
                 "a user-supplied text")
    where = corpus.source if corpus.source.startswith(("http://", "https://")) \
        else f"local file {Path(corpus.source).name}"
    return f"{title} ({where}, {corpus.n_bytes:,} bytes, sha256 {corpus.sha256})"
