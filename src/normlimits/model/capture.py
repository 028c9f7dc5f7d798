"""Capture per-layer, per-head queries, keys, values (and the logits and weights they imply).

One forward pass per window, for any Hugging Face causal LM whose attention goes through
transformers' attention-function registry: :mod:`normlimits.model.attention_tap` records what every
layer passes to its attention kernel (queries and keys after rotary embeddings; grouped-query
keys and values expanded per query head; the factor ``scale`` the layer puts on ``q.k``) and
checks, on every pass, that the layer's logits are exactly ``scale * q.k`` under the causal mask;
a family that adds anything else to its logits (ALiBi, soft-capping, attention sinks) is refused
with an error naming it. A sliding-window layer (Mistral, Gemma 3's local layers) sees only its
last W keys once the window is longer than W: by default (``sliding="cap"``) such windows are
refused, so every layer of every capture sees every earlier key; with ``sliding="measure"`` they
are captured, each sliding-window layer over its own band (row t sees keys
``max(0, t - W + 1) .. t``), and the capture's ``windows`` say which layers are banded. ``hidden_states`` give the
residual stream entering each layer. Logits ``scale * q.k`` and weights ``softmax(logits / T)``
are then computed for any subset of query rows, with each layer's own mask (keys after the query,
and keys before a sliding-window layer's band, get logit ``-inf`` and weight exactly 0). The LM head is skipped: nothing here needs next-token
logits.

Shapes (W windows, layers, H query heads, L positions, d = d_head, D = d_model, R selected rows):

- ``queries``, ``keys``, ``values``: [layers, H, L, d] for one window, [W, layers, H, L, d] batched;
- ``hidden``: [layers, L, D] / [W, layers, L, D];
- ``scale``: [layers], the factor each layer multiplies q.k by (GPT-2: 1/sqrt(d), or less with
  ``scale_attn_by_inverse_layer_idx``; OPT: 1, its queries come scaled by 1/sqrt(d));
- ``windows``: [layers] long, each layer's sliding window W (0: the layer sees every earlier key),
  the same for every window of a batch; a layer whose W >= L is plain causal in that capture;
- ``logits(rows)``, ``weights(rows)``: [layers, H, R, L] / [W, layers, H, R, L].

Captures live where the model's inputs go (``NORMLIMITS_DEVICE``), in the forward pass's dtype
(``NORMLIMITS_DTYPE``); ``logits()`` and ``weights()`` compute there. In float32 the logits are
the layer's own to rounding; for half-precision captures, ``logits()`` rounds ``q.k`` and the
scaled product to the capture's dtype as the layer's eager attention does (equal to rounding),
and ``weights()`` is float32.

Causality: row t of a window depends only on tokens 0..t, so row L-1 of a forward pass over a
long window equals the last row of the window cut to its first L tokens. One pass over the longest
window therefore serves every L of a sweep (in a banded layer, row L-1 sees ``min(L, W)`` keys).
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor

from normlimits.model import attention_tap
from normlimits.core import validation
from normlimits.metrics.normalizers import softmax_with_temperature
from normlimits.model.errors import UnsupportedModelError


class _Attention:
    """Logits and weights from stored queries and keys; works for any leading dimensions."""

    queries: Tensor
    keys: Tensor
    scale: Tensor
    windows: Tensor | None

    @property
    def length(self) -> int:
        return self.queries.shape[-2]

    @property
    def banded(self) -> bool:
        """Whether some layer sees fewer than all earlier keys (a sliding window W < L)."""
        return self.windows is not None and bool(((self.windows > 0) & (self.windows < self.length)).any())

    def visible(self, rows=None) -> Tensor:
        """Which keys each layer's query rows see, bool [layers, 1, R, L] (broadcasts over heads;
        ``j <= t``, and ``j > t - W`` in a layer with sliding window W)."""
        rows = self._rows(rows)
        windows = self.windows if self.windows is not None else torch.zeros(
            self.scale.shape[-1], dtype=torch.long)
        keys = torch.arange(self.length, device=rows.device)
        causal = keys[None, :] <= rows[:, None]                                  # [R, L]
        reach = torch.where(windows > 0, windows, self.length + 1).to(rows.device)
        band = keys[None, None, :] > rows[None, :, None] - reach[:, None, None]  # [layers, R, L]
        return (causal[None] & band)[:, None]

    def _rows(self, rows) -> Tensor:
        device = self.queries.device
        if rows is None:
            return torch.arange(self.length, device=device)
        rows = torch.as_tensor(rows, dtype=torch.long).reshape(-1).to(device)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= self.length):
            raise IndexError(f"query rows must lie in 0..{self.length - 1} (got {rows.tolist()})")
        return rows

    def logits(self, rows=None) -> Tensor:
        """``scale * q_t . k_j`` for query rows ``rows`` (default all), ``-inf`` where j > t and,
        in a layer with sliding window W, where ``j <= t - W`` (see :attr:`windows`).

        Returns [..., H, R, L] in the capture's dtype, on its device.
        """
        rows = self._rows(rows)
        q = self.queries[..., rows, :]
        scores = q @ self.keys.transpose(-1, -2)
        scale = self.scale.reshape(self.scale.shape + (1, 1, 1))
        if scores.dtype == scale.dtype:
            scores = scores * scale
        else:   # half precision: scale in float32 and round once, as ``tensor * float`` does
            scores = (scores.float() * scale).to(scores.dtype)
        if self.banded:
            return scores.masked_fill(~self.visible(rows), float("-inf"))
        future = torch.arange(self.length, device=scores.device)[None, :] > rows[:, None]
        return scores.masked_fill(future, float("-inf"))

    def weights(self, rows=None, temperature: float = 1.0) -> Tensor:
        """``softmax(logits / T)`` over the visible keys, [..., H, R, L] (rows sum to 1); float32
        for half-precision captures."""
        logits = self.logits(rows)
        if logits.dtype in (torch.float16, torch.bfloat16):
            logits = logits.float()
        return softmax_with_temperature(logits, dim=-1, temperature=temperature)


@dataclass
class WindowCapture(_Attention):
    """What one forward pass over one window exposes; shapes in the module docstring."""

    queries: Tensor
    keys: Tensor
    values: Tensor
    hidden: Tensor
    scale: Tensor
    windows: Tensor | None = None


@dataclass
class BatchCapture(_Attention):
    """Captures of several windows stacked on a leading window axis."""

    queries: Tensor
    keys: Tensor
    values: Tensor
    hidden: Tensor
    scale: Tensor
    windows: Tensor | None = None

    def __post_init__(self) -> None:
        if self.scale.dim() == 1:  # broadcast the per-layer scale over the window axis
            self.scale = self.scale[None, :]

    @property
    def n_windows(self) -> int:
        return self.queries.shape[0]


def layer_scales(model: torch.nn.Module, length: int = 2) -> Tensor:
    """The factor each layer multiplies q.k by, [layers], as the layers pass it to their attention
    function (GPT-2: ``1/sqrt(d)``, divided by ``layer + 1`` with ``scale_attn_by_inverse_layer_idx``;
    OPT: 1, its queries come pre-scaled). Read from a short forward pass of ``length`` tokens."""
    ids = torch.zeros(1, length, dtype=torch.long, device=input_device(model))
    return _forward(model, ids)[4]


#: the names families give the attention output projection W_O: Llama, Qwen2, Mistral ``o_proj``
#: (Linear), GPT-2 ``c_proj`` (Conv1D), GPT-NeoX ``dense``, OPT ``out_proj``
OUTPUT_PROJECTIONS = ("o_proj", "c_proj", "dense", "out_proj")


#: names of a fused query/key/value projection whose output columns are [W_Q | W_K | W_V] in equal
#: thirds (GPT-2's Conv1D ``c_attn``)
FUSED_QKV_PROJECTIONS = ("c_attn",)
#: names of separate query, key and value projections (Llama, Qwen2, Mistral, OPT)
QKV_PROJECTIONS = ("q_proj", "k_proj", "v_proj")

_ATTENTION_MODULES: "weakref.WeakKeyDictionary[torch.nn.Module, list[torch.nn.Module]]" = weakref.WeakKeyDictionary()


@torch.no_grad()
def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """Each layer's attention module, in layer order: the modules the layers pass to their attention
    function in a short forward pass (:mod:`normlimits.model.attention_tap`), so no family's module tree
    is walked by name. The pass runs in eval mode (a training model's dropout draws no random
    numbers here) and its answer is kept for the model's lifetime."""
    known = _ATTENTION_MODULES.get(model)
    if known is not None:
        return known
    device = input_device(model)
    ids = torch.zeros(1, 2, dtype=torch.long, device=device)
    training = model.training
    model.eval()
    try:
        with attention_tap.recording(model) as record:
            model.base_model(input_ids=ids, attention_mask=torch.ones_like(ids), use_cache=False)
    finally:
        model.train(training)
    modules = [layer.module for layer in record.layers]
    _ATTENTION_MODULES[model] = modules
    return modules


def _submodule(module: torch.nn.Module, names) -> torch.nn.Module | None:
    """The first of ``names`` that ``module`` has as a submodule, or None."""
    return next((getattr(module, name) for name in names
                 if isinstance(getattr(module, name, None), torch.nn.Module)), None)


def _output_projection(model: torch.nn.Module, module: torch.nn.Module) -> torch.nn.Module:
    """The first of :data:`OUTPUT_PROJECTIONS` that attention ``module`` has (with a weight)."""
    projection = _submodule(module, OUTPUT_PROJECTIONS)
    if projection is None or getattr(projection, "weight", None) is None:
        raise UnsupportedModelError(
            f"{_family(model)}: its attention module {type(module).__name__} has no output "
            f"projection under any of the names {', '.join(OUTPUT_PROJECTIONS)}.")
    return projection


@torch.no_grad()
def output_projections(model: torch.nn.Module) -> list[Tensor]:
    """Each layer's attention output projection as a matrix ``W_O`` [H * d, D] applied as
    ``concat_h(o_h) @ W_O`` (the bias, if any, left out), in layer order.

    The attention modules come from :func:`attention_modules`; within a module the projection is
    the first of :data:`OUTPUT_PROJECTIONS` it has (a Linear's weight is transposed, GPT-2's
    Conv1D already stores [in, out]). Raises :class:`normlimits.model.errors.UnsupportedModelError` when
    a layer has none of them.
    """
    matrices = []
    for module in attention_modules(model):
        projection = _output_projection(model, module)
        weight = projection.weight.detach()
        matrices.append(weight.T if isinstance(projection, torch.nn.Linear) else weight)
    return matrices


def projection_gradients(model: torch.nn.Module) -> list[dict[str, Tensor | None]]:
    """Per layer, the gradients of the attention projections' weights, keys ``q``, ``k``, ``v``,
    ``o`` (each in its parameter's own layout; None where the parameter has no gradient yet).

    A fused projection (:data:`FUSED_QKV_PROJECTIONS`) is split into equal thirds along its output
    dimension; otherwise the module must have :data:`QKV_PROJECTIONS`. Raises
    :class:`normlimits.model.errors.UnsupportedModelError` for a module with neither.
    """
    out = []
    for module in attention_modules(model):
        fused = _submodule(module, FUSED_QKV_PROJECTIONS)
        grads: dict[str, Tensor | None]
        if fused is not None:
            grad = fused.weight.grad
            out_dim = 0 if isinstance(fused, torch.nn.Linear) else 1
            parts = (None,) * 3 if grad is None else torch.chunk(grad, 3, dim=out_dim)
            grads = dict(zip("qkv", parts))
        elif all(isinstance(getattr(module, n, None), torch.nn.Module) for n in QKV_PROJECTIONS):
            grads = {key: getattr(module, n).weight.grad for key, n in zip("qkv", QKV_PROJECTIONS)}
        else:
            raise UnsupportedModelError(
                f"{_family(model)}: its attention module {type(module).__name__} has neither a fused "
                f"projection ({', '.join(FUSED_QKV_PROJECTIONS)}) nor {', '.join(QKV_PROJECTIONS)}.")
        grads["o"] = _output_projection(model, module).weight.grad
        out.append(grads)
    return out


def input_device(model: torch.nn.Module) -> torch.device:
    """Where the model's inputs go: its embedding's device (with a device map, the first one; the
    CPU where Accelerate offloaded the embedding, its hooks then move the inputs)."""
    device = model.get_input_embeddings().weight.device
    return torch.device("cpu") if device.type == "meta" else device


def _gather(tensors, dim: int, device: torch.device) -> Tensor:
    """Stack tensors that may live on several devices (a device map) on ``device``."""
    return torch.stack([t.to(device) for t in tensors], dim=dim)


@torch.no_grad()
def _forward(model: torch.nn.Module, ids: Tensor, banded: bool = False
             ) -> tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
    """One forward pass over ids [B, L] through the model's base (no LM head).

    Returns q, k, v [B, layers, H, L, d], hidden [B, layers, L, D] (the residual stream entering
    each layer), the per-layer scale [layers] (float32) and sliding windows [layers] (long, 0:
    none), on the device of the model's inputs. Raises
    :class:`normlimits.model.errors.UnsupportedModelError` when a layer's logits are not
    ``scale * q . k`` under the causal mask, or under its sliding-window band when ``banded``
    (see :mod:`normlimits.model.attention_tap`).
    """
    device = input_device(model)
    ids = ids.to(device)
    try:
        with attention_tap.recording(model, banded=banded) as record:
            out = model.base_model(input_ids=ids, attention_mask=torch.ones_like(ids),
                                   output_hidden_states=True, use_cache=False)
    except attention_tap.UnsupportedAttention as exc:
        raise UnsupportedModelError(f"{_family(model)}: {exc}") from None
    layers = record.layers
    expected = _layer_count(model)
    if len(layers) != expected:
        classes = sorted({type(m).__name__ for m in model.modules() if "Attention" in type(m).__name__})
        raise UnsupportedModelError(
            f"{_family(model)}: {len(layers)} of its {expected} attention layers went through "
            f"transformers' attention-function registry ({', '.join(classes) or 'no attention class found'}); "
            "the rest compute their logits in their own code (Falcon, GPT-Neo, Bloom and MPT do, "
            "some with ALiBi biases or local windows), where normlimits can neither capture nor "
            "check them.")
    shapes = {tuple(r.query.shape[1:]) for r in layers}
    if len(shapes) != 1:
        raise UnsupportedModelError(f"{_family(model)}: its layers have different head shapes "
                                    f"{sorted(shapes)}; captures stack layers, so they must agree.")
    q = _gather([r.query for r in layers], 1, device)
    k = _gather([r.key for r in layers], 1, device)
    v = _gather([r.value for r in layers], 1, device)
    hidden = _gather(out.hidden_states[:len(layers)], 1, device)
    scale = torch.tensor([r.scaling for r in layers], dtype=torch.float32, device=device)
    windows = torch.tensor([r.window or 0 for r in layers], dtype=torch.long, device=device)
    return q, k, v, hidden, scale, windows


def _family(model: torch.nn.Module) -> str:
    return f"{type(model).__name__} (model_type {getattr(model.config, 'model_type', '?')!r})"


def _layer_count(model: torch.nn.Module) -> int:
    config = model.config.get_text_config()
    return int(config.num_hidden_layers)


def _as_ids(loaded, ids, sliding: str = "cap") -> Tensor:
    """The shared token-id validator with the model's vocabulary and context (for ``sliding``:
    :meth:`normlimits.model.pretrained.LoadedModel.positions`)."""
    return validation.token_ids(ids, vocab_size=loaded.vocab_size, max_positions=loaded.positions(sliding),
                                limit=loaded.positions_limit(sliding))


def _window_capture(loaded, ids: Tensor, sliding: str) -> WindowCapture:
    q, k, v, hidden, scale, windows = _forward(loaded.model, ids.reshape(1, -1),
                                               banded=attention_tap.check_sliding(sliding) == "measure")
    return WindowCapture(q[0], k[0], v[0], hidden[0], scale, windows)


def capture_window(loaded, ids, sliding: str = "cap") -> WindowCapture:
    """One forward pass over one window of token ids [L]; returns its :class:`WindowCapture`.

    ``ids``: integer token ids (a float, negative or out-of-vocabulary id, or L = 0 or beyond the
    context, is an :class:`normlimits.core.validation.InputError`). The capture lives on the device of
    the model's inputs, in the forward pass's dtype. ``sliding``: ``"cap"`` (default) refuses a
    window longer than the model's sliding window; ``"measure"`` captures up to the model's
    context, each sliding-window layer over its own band (:mod:`normlimits.model.capture`).
    """
    ids = _as_ids(loaded, ids, sliding)
    if ids.dim() != 1:
        raise validation.InputError(f"ids has shape {tuple(ids.shape)}; capture_window takes one "
                                    "window [L] (use iter_captures or capture_batch for [W, L]).")
    return _window_capture(loaded, ids, sliding)


def _windows(loaded, windows, sliding: str = "cap") -> Tensor:
    windows = _as_ids(loaded, windows, sliding)
    if windows.dim() != 2:
        raise validation.InputError(f"windows has shape {tuple(windows.shape)}; pass token ids "
                                    "[W, L] (one row per window), e.g. from token_windows(...).")
    return windows


def iter_captures(loaded, windows, sliding: str = "cap") -> Iterator[WindowCapture]:
    """One :class:`WindowCapture` per row of ``windows`` [W, L], one forward pass each (memory-flat);
    ``sliding`` as in :func:`capture_window`."""
    windows = _windows(loaded, windows, sliding)      # validated before the first pass, not lazily

    def generate():
        for ids in windows:
            yield _window_capture(loaded, ids, sliding)

    return generate()


def capture_batch(loaded, windows, sliding: str = "cap") -> BatchCapture:
    """Captures of all ``windows`` [W, L] stacked (memory grows with W: small models only);
    ``sliding`` as in :func:`capture_window`."""
    windows = _windows(loaded, windows, sliding)
    banded = attention_tap.check_sliding(sliding) == "measure"
    parts = [_forward(loaded.model, ids[None], banded=banded) for ids in windows]
    q, k, v, hidden = (torch.cat(t) for t in list(zip(*parts))[:4])
    return BatchCapture(q, k, v, hidden, parts[0][4], parts[0][5])


