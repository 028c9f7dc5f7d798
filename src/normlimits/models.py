"""Resolve the model setting (``NORMLIMITS_MODEL``) to a loaded GPT-2-architecture model.

Names (design section 3):

- a Hugging Face id (``gpt2``, ``gpt2-medium``, ...) or a local directory written by
  ``save_pretrained``: loaded with transformers' own loading code, eager attention;
- ``standin``: the project's own byte-level GPT-2, trained on the corpus (:mod:`normlimits.standin`);
- ``gpt2-random``: GPT-2 124M's exact configuration with random weights (timing work only).

Unset, the setting means "GPT-2 if it can be had": ``gpt2`` from the local cache or the hub, and
the stand-in where neither answers. Set explicitly, it is strict: a model that cannot be loaded
raises :class:`ModelError`, whose message names the setting and the remedy.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from .settings import MODEL_ENV, SettingError

PAPER_MODEL = "gpt2"
STANDIN = "standin"
GPT2_RANDOM = "gpt2-random"
BYTE_TOKENIZER_FILE = "normlimits_tokenizer.json"
_HUB_ID = re.compile(r"^[A-Za-z0-9_.\-]+(/[A-Za-z0-9_.\-]+)?$")


class ModelError(SettingError):
    """The model setting cannot be honoured; the message names the setting and the remedy."""


def byte_encode(text: str) -> list[int]:
    """Byte-level tokenizer: the UTF-8 bytes of ``text`` as token ids 0..255."""
    return list(text.encode("utf-8"))


@dataclass
class LoadedModel:
    """A loaded GPT-2-architecture model with what the book reports about it.

    ``model`` is a ``GPT2LMHeadModel`` in eval mode with eager attention; ``encode`` maps text to
    token ids; ``source`` says where the weights came from, in words.
    """

    model: torch.nn.Module
    name: str
    source: str
    encode: Callable[[str], list[int]]
    tokenizer_kind: str
    is_paper_model: bool
    notes: list[str] = field(default_factory=list)

    @property
    def config(self):
        return self.model.config

    @property
    def n_params(self) -> int:
        return sum(p.numel() for p in self.model.parameters())

    @property
    def n_layers(self) -> int:
        return int(self.config.n_layer)

    @property
    def n_heads(self) -> int:
        return int(self.config.n_head)

    @property
    def d_model(self) -> int:
        return int(self.config.n_embd)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @property
    def max_positions(self) -> int:
        return int(self.config.n_positions)


def _eager(model: torch.nn.Module) -> torch.nn.Module:
    model.set_attn_implementation("eager")
    if model.config._attn_implementation != "eager":
        raise RuntimeError("could not switch the model to eager attention")
    return model.eval()


def _check_architecture(model: torch.nn.Module, setting: str) -> None:
    if getattr(model.config, "model_type", None) != "gpt2":
        raise ModelError(
            f"{MODEL_ENV}={setting!r} is a {model.config.model_type!r} model; the capture code reads "
            "GPT-2's fused c_attn projection, so only GPT-2-architecture models are supported. "
            f"Set {MODEL_ENV} to gpt2, gpt2-medium, ..., standin or a saved GPT-2 directory.")


def _tokenizer_for(source: str, setting: str) -> tuple[Callable[[str], list[int]], str]:
    """The tokenizer saved with a model: the byte marker file, else transformers' AutoTokenizer."""
    marker = Path(source).expanduser() / BYTE_TOKENIZER_FILE
    if Path(source).expanduser().is_dir() and marker.is_file():
        kind = json.loads(marker.read_text()).get("kind")
        if kind != "bytes":
            raise ModelError(f"{marker} names an unknown tokenizer kind {kind!r}; expected 'bytes'.")
        return byte_encode, "bytes (UTF-8)"
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as exc:
        raise ModelError(
            f"{MODEL_ENV}={setting!r}: the model loaded but no tokenizer was found with it ({exc}). "
            f"Save its tokenizer beside it (tokenizer.save_pretrained) or write {BYTE_TOKENIZER_FILE} "
            "with {\"kind\": \"bytes\"} for a byte-level model.") from exc

    def encode(text: str) -> list[int]:
        return tokenizer(text, add_special_tokens=False)["input_ids"]

    if len(tokenizer) < 2 or not encode("The attention heads."):
        # transformers 5 builds an empty tokenizer, silently, where no tokenizer files exist
        raise ModelError(
            f"{MODEL_ENV}={setting!r}: the model loaded but no tokenizer was found with it (the "
            f"tokenizer in {source} is empty). Save its tokenizer beside it (tokenizer.save_pretrained) "
            f"or write {BYTE_TOKENIZER_FILE} with {{\"kind\": \"bytes\"}} for a byte-level model.")

    return encode, f"{type(tokenizer).__name__} (BPE)"


def load_pretrained(source: str, setting: str | None = None) -> LoadedModel:
    """Load a hub id or a ``save_pretrained`` directory with transformers' loading code.

    Raises :class:`ModelError` naming the setting: unknown id, unavailable offline, a directory
    without a model.
    """
    from transformers import AutoModelForCausalLM

    setting = source if setting is None else setting
    path = Path(source).expanduser()
    looks_like_path = source.startswith((".", "/", "~")) or source.count("/") > 1
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise ModelError(
                f"{MODEL_ENV}={setting!r} is a directory without a model (no config.json in {path}). "
                "Point it at a folder written by model.save_pretrained(...), or use gpt2 or standin.")
        where = f"local directory {path.resolve()}"
        source = str(path)
    elif looks_like_path:
        raise ModelError(f"{MODEL_ENV}={setting!r}: no such directory {path}. Point it at a folder "
                         "written by model.save_pretrained(...), or use gpt2 or standin.")
    elif not _HUB_ID.match(source):
        raise ModelError(f"{MODEL_ENV}={setting!r} is not a model name this project knows: use a "
                         "Hugging Face id such as gpt2, a save_pretrained directory, 'standin' or "
                         "'gpt2-random'.")
    else:
        where = f"Hugging Face id {source!r}"
    try:
        model = AutoModelForCausalLM.from_pretrained(source, attn_implementation="eager")
    except OSError as exc:
        text = f"{exc} {exc.__cause__!r}"
        if "not a valid model identifier" in text or "RepositoryNotFound" in text:
            raise ModelError(f"{MODEL_ENV}={setting!r} is an unknown model: the hub has no such id. "
                             "Use gpt2 (or gpt2-medium, ...), a save_pretrained directory, 'standin' "
                             "or 'gpt2-random'.") from exc
        offline = os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0")
        raise ModelError(
            f"{MODEL_ENV}={setting!r} is not available: it is not in the local Hugging Face cache and "
            f"the hub {'is disabled (HF_HUB_OFFLINE=1)' if offline else 'did not answer'}. Remedy: run "
            f"once with network access to cache it, point {MODEL_ENV} at a save_pretrained directory, "
            f"or set {MODEL_ENV}=standin to use the project's offline stand-in.") from exc
    _check_architecture(model, setting)
    encode, kind = _tokenizer_for(source, setting)
    return LoadedModel(model=_eager(model), name=setting, source=where, encode=encode,
                       tokenizer_kind=kind, is_paper_model=(source == PAPER_MODEL))


def gpt2_random(seed: int = 0) -> LoadedModel:
    """GPT-2 124M's exact configuration with random weights (for timing and memory work only).

    Its tokenizer is byte-level (ids 0..255 are valid GPT-2 ids): the cost of a forward pass does
    not depend on which ids are fed, and GPT-2's BPE files cannot be had offline.
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="eager"))
    return LoadedModel(model=_eager(model), name=GPT2_RANDOM,
                       source=f"random weights (seed {seed}), GPT-2 124M configuration",
                       encode=byte_encode, tokenizer_kind="bytes (UTF-8), timing only",
                       is_paper_model=False,
                       notes=["Random weights: only timings and memory are meaningful, not the values."])


def load_model(name: str | None = None) -> LoadedModel:
    """Resolve ``name`` (default: ``NORMLIMITS_MODEL``) to a :class:`LoadedModel`.

    Unset means GPT-2 if the local cache or the hub has it, else the stand-in (the returned
    model's ``notes`` say why). Set explicitly, any failure raises :class:`ModelError`.
    """
    setting = name if name is not None else os.environ.get(MODEL_ENV, "")
    setting = setting.strip()
    if setting == "":
        try:
            return load_pretrained(PAPER_MODEL, setting="gpt2 (default)")
        except ModelError as exc:
            from .standin import load_standin

            loaded = load_standin()
            loaded.notes.append(f"{MODEL_ENV} is unset and GPT-2 could not be loaded, so the "
                                f"stand-in is used. Reason: {exc}")
            return loaded
    if setting == STANDIN:
        from .standin import load_standin

        return load_standin()
    if setting == GPT2_RANDOM:
        return gpt2_random()
    return load_pretrained(setting)
