"""Capture per-layer, per-head queries, keys, values (and the logits and weights they imply).

One forward pass per window: forward hooks on every block's fused ``c_attn`` projection record
the queries, keys and values exactly as GPT-2 computes them; ``hidden_states`` give the residual
stream entering each block. Logits ``scale * q.k`` and weights ``softmax(logits / T)`` are then
computed for any subset of query rows, with the causal mask (keys after the query get logit
``-inf`` and weight exactly 0). The LM head is skipped: nothing here needs next-token logits.

Shapes (W windows, layers, H heads, L positions, d = d_head, D = d_model, R selected rows):

- ``queries``, ``keys``, ``values``: [layers, H, L, d] for one window, [W, layers, H, L, d] batched;
- ``hidden``: [layers, L, D] / [W, layers, L, D];
- ``scale``: [layers], the factor GPT-2 multiplies q.k by (1/sqrt(d), or less with
  ``scale_attn_by_inverse_layer_idx``);
- ``logits(rows)``, ``weights(rows)``: [layers, H, R, L] / [W, layers, H, R, L].

Causality: row t of a window depends only on tokens 0..t, so row L-1 of a forward pass over a
long window equals the last row of the window cut to its first L tokens. One pass over the longest
window therefore serves every L of a sweep (design section 7).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch
from torch import Tensor

from .normalizers import softmax_with_temperature


class _Attention:
    """Logits and weights from stored queries and keys; works for any leading dimensions."""

    queries: Tensor
    keys: Tensor
    scale: Tensor

    @property
    def length(self) -> int:
        return self.queries.shape[-2]

    def _rows(self, rows) -> Tensor:
        if rows is None:
            return torch.arange(self.length)
        rows = torch.as_tensor(rows, dtype=torch.long).reshape(-1)
        if len(rows) and (int(rows.min()) < 0 or int(rows.max()) >= self.length):
            raise IndexError(f"query rows must lie in 0..{self.length - 1} (got {rows.tolist()})")
        return rows

    def logits(self, rows=None) -> Tensor:
        """``scale * q_t . k_j`` for query rows ``rows`` (default all), ``-inf`` where j > t.

        Returns [..., H, R, L].
        """
        rows = self._rows(rows)
        q = self.queries[..., rows, :]
        scores = q @ self.keys.transpose(-1, -2)
        scores = scores * self.scale.reshape(self.scale.shape + (1, 1, 1))
        future = torch.arange(self.length)[None, :] > rows[:, None]
        return scores.masked_fill(future, float("-inf"))

    def weights(self, rows=None, temperature: float = 1.0) -> Tensor:
        """``softmax(logits / T)`` over the visible keys, [..., H, R, L] (rows sum to 1)."""
        return softmax_with_temperature(self.logits(rows), dim=-1, temperature=temperature)


@dataclass
class WindowCapture(_Attention):
    """What one forward pass over one window exposes; shapes in the module docstring."""

    queries: Tensor
    keys: Tensor
    values: Tensor
    hidden: Tensor
    scale: Tensor


@dataclass
class BatchCapture(_Attention):
    """Captures of several windows stacked on a leading window axis."""

    queries: Tensor
    keys: Tensor
    values: Tensor
    hidden: Tensor
    scale: Tensor

    def __post_init__(self) -> None:
        if self.scale.dim() == 1:  # broadcast the per-layer scale over the window axis
            self.scale = self.scale[None, :]

    @property
    def n_windows(self) -> int:
        return self.queries.shape[0]


def layer_scales(model: torch.nn.Module) -> Tensor:
    """The factor each layer multiplies q.k by, [layers] (GPT2Attention.scaling)."""
    return torch.tensor([float(block.attn.scaling) for block in model.transformer.h])


@torch.no_grad()
def _forward(model: torch.nn.Module, ids: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """One forward pass over ids [B, L]; returns q, k, v [B, layers, H, L, d] and hidden [B, layers, L, D]."""
    config = model.config
    heads, width = config.n_head, config.n_embd
    fused: list[Tensor] = []
    hooks = [block.attn.c_attn.register_forward_hook(lambda _m, _i, out: fused.append(out))
             for block in model.transformer.h]
    try:
        out = model.transformer(input_ids=ids, output_hidden_states=True, use_cache=False)
    finally:
        for hook in hooks:
            hook.remove()
    qkv = torch.stack(fused, dim=1)                     # [B, layers, L, 3D]
    b, layers, length, _ = qkv.shape
    qkv = qkv.view(b, layers, length, 3, heads, width // heads).permute(3, 0, 1, 4, 2, 5)
    hidden = torch.stack(out.hidden_states[:layers], dim=1)   # entering each block
    return qkv[0], qkv[1], qkv[2], hidden


def _as_ids(loaded, ids) -> Tensor:
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.shape[-1] > loaded.max_positions:
        raise ValueError(f"window length L={ids.shape[-1]} is beyond the model's context "
                         f"(n_positions={loaded.max_positions}); use L <= {loaded.max_positions}.")
    return ids


def capture_window(loaded, ids) -> WindowCapture:
    """One forward pass over one window of token ids [L]; returns its :class:`WindowCapture`."""
    ids = _as_ids(loaded, ids).reshape(1, -1)
    q, k, v, hidden = _forward(loaded.model, ids)
    return WindowCapture(q[0], k[0], v[0], hidden[0], layer_scales(loaded.model))


def iter_captures(loaded, windows) -> Iterator[WindowCapture]:
    """One :class:`WindowCapture` per row of ``windows`` [W, L], one forward pass each (memory-flat)."""
    for ids in _as_ids(loaded, windows):
        yield capture_window(loaded, ids)


def capture_batch(loaded, windows) -> BatchCapture:
    """Captures of all ``windows`` [W, L] stacked (memory grows with W: small models only)."""
    windows = _as_ids(loaded, windows)
    parts = [_forward(loaded.model, ids[None]) for ids in windows]
    q, k, v, hidden = (torch.cat(t) for t in zip(*parts))
    return BatchCapture(q, k, v, hidden, layer_scales(loaded.model))
