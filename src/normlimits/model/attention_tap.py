"""Record what every attention layer feeds its softmax, through transformers' own extension point.

transformers 5 dispatches each attention layer to a function looked up by name in its
``AttentionInterface`` registry (``config._attn_implementation``). This module registers one more
name, :data:`IMPLEMENTATION`, whose function receives exactly what the layer passes to its kernel
(``query`` [B, H, L, d] after rotary embeddings, ``key`` and ``value`` [B, H_kv, L, d],
``attention_mask``, ``scaling`` and any family-specific keyword such as ``softcap``), records it,
and then runs the family's own eager attention function (the one the layer runs with
``attn_implementation="eager"``), so the forward pass is the eager one. A mask function is
registered under the same name in ``AttentionMaskInterface`` (transformers' ``eager_mask``):
without it a custom attention function receives no mask and the attention is silently
non-causal.

What is supported is what the book's metrics assume: the logits are ``scaling * q . k`` over the
visible keys, the visible keys are exactly ``j <= t`` (causal), and the weights are their
softmax. Every recorded layer is checked against that on each pass, so nothing is silently wrong:

- the mask must be the plain causal one (an additive bias such as ALiBi passed as a mask is
  refused). A sliding-window layer (one that passes ``sliding_window=W``) whose window is shorter
  than the sequence sees only keys ``max(0, t - W + 1) .. t``: its banded mask is accepted only
  when the recording was opened with ``banded=True`` (what ``sliding="measure"`` of
  :mod:`normlimits.model.capture` asks for), and then it must be exactly that band; the layer's
  window is recorded (:attr:`LayerRecord.window`);
- keywords that change the logits (``softcap``: logit soft-capping; ``s_aux``/``sinks``:
  attention sinks; ``position_bias``/``alibi``) are refused by name;
- the family's own weights on a few query rows must equal ``softmax(scaling * q . k)`` under the
  causal mask (or the layer's accepted band), to 1e-5 in float32, which catches any other
  modification;
- every layer must go through the registry (families whose attention does not, Bloom's and MPT's
  ALiBi layers for example, never call it, and are refused).

Grouped-query keys and values are expanded per query head (``repeat_interleave`` over heads, as
the layer's own ``repeat_kv`` does), so every query head has its own [L, d] keys and values.
"""

from __future__ import annotations

import contextvars
import sys
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

import torch
from torch import Tensor

IMPLEMENTATION = "normlimits_capture"
#: keyword arguments an attention layer may pass that change its logits, and what they are
LOGIT_MODIFIERS = {
    "softcap": "attention-logit soft-capping (tanh(logits / c) * c)",
    "s_aux": "attention sinks (a learned extra logit per head in the softmax's denominator)",
    "sinks": "attention sinks (a learned extra logit per head in the softmax's denominator)",
    "position_bias": "an additive position bias on the logits (ALiBi or relative positions)",
    "alibi": "ALiBi position biases added to the logits",
}
#: configuration attributes that mean a logit modification, checked before any forward pass
CONFIG_MODIFIERS = {
    "attn_logit_softcapping": "attention-logit soft-capping (tanh(logits / c) * c)",
    "alibi": "ALiBi position biases added to the logits",
    "use_alibi": "ALiBi position biases added to the logits",
}
#: families known to add something to the logits outside the registry
FAMILY_MODIFIERS = {
    "bloom": "ALiBi position biases added to the logits",
    "mpt": "ALiBi position biases added to the logits",
    "gpt_oss": "attention sinks (a learned extra logit per head in the softmax's denominator)",
}
#: the capture setting that accepts sliding-window layers beyond their window (named in refusals)
BANDED_OPT_IN = "sliding='measure'"
#: how captures treat sliding-window layers: ``"cap"`` (the default) caps every window at the
#: sliding window, so every layer sees every earlier key; ``"measure"`` captures up to the model's
#: context, each sliding-window layer over its own window (keys ``max(0, t - W + 1) .. t``)
SLIDING = ("cap", "measure")
#: largest tolerated difference between the family's weights and the recomputed ones, by dtype
WEIGHT_TOLERANCE = {torch.float32: 1e-5, torch.float64: 1e-10, torch.float16: 2e-3,
                    torch.bfloat16: 1.6e-2}


def check_sliding(sliding: str) -> str:
    """``sliding`` if it is one of :data:`SLIDING`, else a ValueError naming them."""
    if sliding not in SLIDING:
        raise ValueError(f"sliding={sliding!r}: use one of {', '.join(map(repr, SLIDING))} "
                         "('measure' captures each sliding-window layer over its own window).")
    return sliding


class UnsupportedAttention(RuntimeError):
    """A layer's logits are not ``scaling * q . k`` under a causal mask (message: what and where)."""


@dataclass
class LayerRecord:
    """One attention call: ``query``, ``key``, ``value`` [B, H, L, d] (keys and values expanded
    per query head), the factor ``scaling`` on ``q . k``, the layer's index, its attention
    module (where its output projection lives) and its sliding ``window`` W (row t sees keys
    ``max(0, t - W + 1) .. t``; None for a layer that sees every earlier key)."""

    query: Tensor
    key: Tensor
    value: Tensor
    scaling: float
    layer: int | None
    module: torch.nn.Module | None = None
    window: int | None = None


@dataclass
class Recording:
    """What one forward pass recorded, in call order (= layer order)."""

    layers: list[LayerRecord] = field(default_factory=list)
    check_rows: int = 3
    #: accept a sliding-window layer's banded mask beyond its window (else refused)
    banded: bool = False


_ACTIVE: contextvars.ContextVar[Recording | None] = contextvars.ContextVar("normlimits_recording",
                                                                           default=None)


def family_eager(module: torch.nn.Module) -> Callable:
    """The eager attention function of ``module``'s family (``eager_attention_forward`` in the
    module that defines its class): what the layer runs with ``attn_implementation="eager"``."""
    function = getattr(sys.modules.get(type(module).__module__), "eager_attention_forward", None)
    if function is None:
        raise UnsupportedAttention(
            f"{type(module).__name__} (module {type(module).__module__}) has no eager attention "
            "function to run after recording, so its attention cannot be captured exactly.")
    return function


def expand_heads(states: Tensor, heads: int) -> Tensor:
    """[B, H_kv, L, d] -> [B, heads, L, d]: each key/value head repeated for its query group."""
    groups, rest = divmod(heads, states.shape[1])
    if rest:
        raise UnsupportedAttention(f"{heads} query heads cannot share {states.shape[1]} key/value "
                                   "heads evenly.")
    return states if groups == 1 else states.repeat_interleave(groups, dim=1)


def _where(module: torch.nn.Module, layer: int | None) -> str:
    return f"layer {layer if layer is not None else '?'} ({type(module).__name__})"


def visible_keys(length: int, window: int | None = None, rows: Tensor | None = None,
                 device=None) -> Tensor:
    """Which keys each query row sees, bool [R, length] (default every row 0..length-1): ``j <= t``,
    and with a sliding ``window`` W also ``j > t - W`` (keys ``max(0, t - W + 1) .. t``)."""
    rows = torch.arange(length, device=device) if rows is None else rows.to(device)
    keys = torch.arange(length, device=rows.device)[None, :]
    visible = keys <= rows[:, None]
    if window:
        visible &= keys > rows[:, None] - int(window)
    return visible


def check_causal_mask(mask: Tensor | None, length: int, where: str, sliding_window=None,
                      banded: bool = False) -> int | None:
    """The additive mask must be 0 exactly where ``j <= t`` and hugely negative elsewhere,
    the same for every head; raises :class:`UnsupportedAttention` naming what differs.

    A layer that passes ``sliding_window`` W < ``length`` may instead carry exactly its band
    (0 where ``t - W < j <= t``): accepted when ``banded`` (returns W), else refused naming
    :data:`BANDED_OPT_IN`. Returns the window the mask applies (None: plain causal)."""
    if mask is None:
        raise UnsupportedAttention(
            f"{where} received no attention mask, so it would attend to future tokens; "
            f"the mask function registered for {IMPLEMENTATION!r} is missing.")
    if mask.dtype == torch.bool:
        raise UnsupportedAttention(f"{where} received a boolean mask; an additive one was expected.")
    if mask.dim() != 4 or mask.shape[1] != 1:
        raise UnsupportedAttention(
            f"{where} received a mask of shape {tuple(mask.shape)} (per head, not per position): "
            "an additive bias on the logits (such as ALiBi) is not supported.")
    grid = mask[:, 0, :, :length]
    if tuple(grid.shape[-2:]) != (length, length):
        raise UnsupportedAttention(f"{where} received a mask of shape {tuple(mask.shape)} for "
                                   f"{length} positions.")
    visible = grid == 0

    def exactly(expected: Tensor) -> bool:
        return bool((visible == expected).all()) and bool((grid[:, ~expected] <= -1e4).all())

    if exactly(visible_keys(length, device=grid.device)):
        return None
    window = int(sliding_window) if sliding_window else None
    if window is not None and window < length and exactly(visible_keys(length, window, device=grid.device)):
        if banded:
            return window
        raise UnsupportedAttention(
            f"{where} attends over a sliding window of {window} tokens, shorter than this "
            f"window of L={length}: its logits are not those of every earlier key. Use windows of "
            f"L <= {window}, or capture with {BANDED_OPT_IN} to measure each sliding-window layer "
            "over its own window.")
    raise UnsupportedAttention(
        f"{where} received an attention mask that is not the plain causal mask (0 for keys "
        "j <= t, -inf after), nor the layer's own sliding-window band: an additive bias or a "
        "restricted window on the logits is not supported.")


def check_weights(weights: Tensor | None, query: Tensor, key: Tensor, scaling: float,
                  rows: Tensor, where: str, window: int | None = None) -> None:
    """The family's own weights on ``rows`` must equal ``softmax(scaling * q . k)`` over the keys
    each row sees (causal; within the band for a sliding ``window``)."""
    if weights is None:
        raise UnsupportedAttention(f"{where}: the family's eager attention returned no weights "
                                   "to check the captured logits against.")
    length = query.shape[-2]
    dtype = torch.promote_types(query.dtype, torch.float32)     # float64 models checked in float64
    scores = (query[..., rows, :] @ key.transpose(-1, -2)).to(dtype) * scaling
    hidden = ~visible_keys(length, window, rows, device=query.device)
    expected = scores.masked_fill(hidden, float("-inf")).softmax(-1)
    error = float((weights[..., rows, :].to(dtype) - expected).abs().max())
    tolerance = WEIGHT_TOLERANCE.get(query.dtype, 1e-5)
    if not error <= tolerance:
        mask = "the causal mask" if window is None else f"its sliding window of {window} keys"
        raise UnsupportedAttention(
            f"{where}: the layer's attention weights differ from softmax(scaling * q . k) under "
            f"{mask} by {error:.3g} (tolerance {tolerance:g} in {query.dtype}): this "
            "family changes its logits in a way normlimits does not capture.")


def _record(module, query, key, value, attention_mask, **kwargs):
    """The registered attention function: check, record, then run the family's eager attention."""
    eager = family_eager(module)
    recording = _ACTIVE.get()
    if recording is None:          # used outside a capture: behave exactly like eager
        return eager(module, query, key, value, attention_mask, **kwargs)
    layer = getattr(module, "layer_idx", None)
    where = _where(module, layer)
    for name, what in LOGIT_MODIFIERS.items():
        if kwargs.get(name) is not None:
            raise UnsupportedAttention(f"{where} applies {what} ({name}={kwargs[name]!r}): its "
                                       "logits are not scaling * q . k, so it cannot be captured.")
    if module.training and kwargs.get("dropout", 0.0):
        raise UnsupportedAttention(f"{where} is in training mode with attention dropout; "
                                   "capture from a model in eval mode (model.eval()).")
    scaling = kwargs.get("scaling")
    scaling = query.shape[-1] ** -0.5 if scaling is None else float(scaling)
    length = query.shape[-2]
    if key.shape[-2] != length:
        raise UnsupportedAttention(f"{where} attends over {key.shape[-2]} keys for {length} "
                                   "queries (a cache or memory tokens); capture needs plain "
                                   "self-attention over the window.")
    window = check_causal_mask(attention_mask, length, where, kwargs.get("sliding_window"),
                               recording.banded)
    output, weights = eager(module, query, key, value, attention_mask, **kwargs)
    heads = query.shape[1]
    keys, values = expand_heads(key, heads), expand_heads(value, heads)
    count = min(recording.check_rows, length)
    rows = torch.linspace(0, length - 1, count, device=query.device).round().long().unique()
    check_weights(weights, query, keys, scaling, rows, where, window)
    sliding = kwargs.get("sliding_window")
    recording.layers.append(LayerRecord(query.detach(), keys.detach(), values.detach(), scaling, layer,
                                        module, int(sliding) if sliding else None))
    return output, weights


def register_implementation(name: str, function: Callable) -> None:
    """Register ``function`` as transformers' attention implementation ``name`` (idempotent),
    with transformers' eager mask function (the causal mask) under the same name."""
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    AttentionInterface.register(name, function)
    AttentionMaskInterface.register(name, eager_mask)


def register() -> None:
    """Register :data:`IMPLEMENTATION` with transformers (idempotent)."""
    register_implementation(IMPLEMENTATION, _record)


@contextmanager
def switched(model: torch.nn.Module, name: str, function: Callable,
             state: contextvars.ContextVar, value) -> Iterator:
    """Run ``model`` under the attention implementation ``name`` (``function``, registered here)
    for the ``with`` block, with the context variable ``state`` set to ``value`` (what
    ``function`` reads); both are restored afterwards, also on errors. The one place a model's
    attention is switched (:func:`recording`, :func:`normlimits.experiments.removal.top_n_attention`)."""
    register_implementation(name, function)
    previous = model.config._attn_implementation
    model.set_attn_implementation(name)
    token = state.set(value)
    try:
        yield value
    finally:
        state.reset(token)
        model.set_attn_implementation(previous)


def recording(model: torch.nn.Module, check_rows: int = 3, banded: bool = False):
    """Switch ``model`` to :data:`IMPLEMENTATION` for the ``with`` block and collect what its
    layers pass (the :class:`Recording` it yields); the previous attention implementation is
    restored afterwards. ``banded``: accept sliding-window layers' bands beyond their window."""
    return switched(model, IMPLEMENTATION, _record, _ACTIVE,
                    Recording(check_rows=check_rows, banded=banded))


def config_refusal(config) -> str | None:
    """What, in ``config``, modifies the logits in a way capture does not support (or None)."""
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    family = getattr(text, "model_type", None) or getattr(config, "model_type", None)
    for name, what in CONFIG_MODIFIERS.items():
        value = getattr(text, name, None)
        if value not in (None, False, 0):
            return f"{what} ({name}={value!r} in its configuration)"
    attn_config = getattr(text, "attn_config", None)
    if getattr(attn_config, "alibi", False) or (isinstance(attn_config, dict) and attn_config.get("alibi")):
        return "ALiBi position biases added to the logits (attn_config.alibi in its configuration)"
    if family in FAMILY_MODIFIERS:
        return f"{FAMILY_MODIFIERS[family]} (every {family!r} model)"
    return None
