"""Attention with tokens removed: how many attended tokens does the model need?

The question of the authors' follow-up (arXiv 2609.37879, "Retrieval Capacity of
Self-Attention Under Competition"), whose definitions this module reconstructs from its
abstract (the text was not available): at **every** layer, head and query, keep only the ``N``
keys with the largest softmax weights and

- ``renormalise=False`` ("delete"): keep their original weights, the rest set to 0 (the row then
  sums to the retained mass, as in the follow-up's main protocol);
- ``renormalise=True`` ("delete and renormalise"): divide the retained weights by their sum (this
  is top-k softmax with k = N).

The model's next-token loss (NLL, nats per token) on fixed prediction targets is compared with the
full model's; the **effective set size** ``N*_tau(L)`` is the smallest N of the grid whose loss is
within ``tau`` of the full model at context length L. Ties at the N-th place are broken towards
the lower key index (so exactly N keys are kept; masked future keys have weight 0 and are never
preferred to a visible key).

Protocols (:data:`PROTOCOLS`; windows of the longest length are cut from the corpus):

- "prefix": for context length ``L`` the model sees the first ``L``
  tokens of each window and the targets are that prefix's last ``targets`` next-token
  predictions (rows ``L - targets - 1 .. L - 2``), other tokens at each L. Attention is causal,
  so row q of a pass over the whole window is row q of the pass over the window cut to q + 1
  tokens, and at N >= q + 1 (rows q < N) nothing is removed from it: one pass per (window, N,
  mode) over the first ``span`` tokens (the longest length whose grid has N below it) serves
  every length, and one unmodified pass per window serves every length's full model.
- "suffix" (the default and the alternatives chapter's: one reading of the follow-up's
  "extending context while evaluating the same prediction targets"): the model sees the last ``L`` tokens of each window and the targets are
  its last ``targets`` predictions, the same tokens for every L; one pass per (window, L, N,
  mode).

The (window, N) pairs of a pass length run in batches of about ``BATCH_TOKENS`` tokens (one
forward pass per batch, N mixed within a batch). Exactness (tested on a tiny model): in float32
with lengths that are multiples of :data:`KEY_ALIGN` the prefix protocol's numbers are bit for
bit those of one pass per (L, N) over the window cut to L tokens; at other lengths a
renormalised row is summed over another number of keys (the increases differ by about 1e-9
nats), and in float64 the BLAS rounds a row differently with the number of rows in a product
(one unit in the last place of an NLL). Rows q < N are recomputed with the rest, not taken from
the unmodified pass (they would save about a tenth of the tokens at the book's grid, and a pass
over fewer rows would round differently).

The change of a layer's output is measured on the unmodified model (one layer at a time, from a
capture): ``||W_O concat_h(sum_i (w~_i - alpha_i) v_i)|| / ||W_O concat_h(sum_i alpha_i v_i)||``
with ``w~`` the retained (and possibly renormalised) weights and ``W_O`` the output projection
(the bias cancels in the difference and is left out of both).

The modified forward passes use transformers' ``AttentionInterface``: :func:`top_n_attention`
registers an attention function and the eager causal mask under one name (without the mask
function the model would silently run non-causal attention) and switches the model to it for the
duration of a ``with`` block. Shapes: ids ``[B, L]``; NLL ``[B, targets]``; per-N results
``[n]``. Losses in nats.
"""

from __future__ import annotations

import contextvars
import math
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

from normlimits.model.attention_tap import expand_heads, switched
from normlimits.model.capture import output_projections
from normlimits.claims import claim as registered_claim, undecided_words
from normlimits.core.bootstrap import LEVEL, RESAMPLES, SEED, Interval, bootstrap_values, level_words
from normlimits.core.fits import loglog_fit

__all__ = [
    "ATTENTION_NAME",
    "keep_top_n",
    "top_n_attention",
    "removal_nll",
    "n_grid_for",
    "output_change",
    "RemovalResult",
    "removal_sweep",
    "prefix_spans",
    "forward_tokens",
    "target_rows",
    "effective_set_size",
    "claim_values",
    "merge_results",
    "SequentialRemoval",
    "sequential_sweep",
    "undecided_claims",
    "critical_protocol_words",
]

#: the name the attention function and its mask are registered under
ATTENTION_NAME = "normlimits_top_n"


def keep_top_n(weights: Tensor, n: Tensor | int) -> Tensor:
    """Boolean mask of the ``n`` largest entries of each row (last dim), in the book's order.

    ``weights`` [B, ..., L] non-negative; ``n`` an int or a LongTensor [B] (one N per leading
    batch element). Ties at the N-th place go to the earlier key (the rule of
    :func:`normlimits.core.selection.top_n`), so a row with more than ``n`` positive entries keeps
    exactly ``n``; a row with at most ``n`` positive entries keeps every entry (its zeros carry no
    weight). Returns a bool tensor shaped like ``weights``.
    """
    n = _per_batch(n, weights.shape[0], weights.device)
    if weights.shape[0] and bool((n == n[0]).all()):
        return _top_mask(weights, int(n[0]))
    out = torch.ones_like(weights, dtype=torch.bool)
    for b in range(weights.shape[0]):
        out[b] = _top_mask(weights[b], int(n[b]))
    return out


def _per_batch(n: Tensor | int, batch: int, device) -> Tensor:
    """``n`` (an int, a one-element tensor or one N per batch element) as a LongTensor [batch];
    ValueError unless every N >= 1 and there is one per batch element."""
    n = torch.as_tensor(n, dtype=torch.long, device=device).reshape(-1)
    if bool((n < 1).any()):
        raise ValueError(f"N must be >= 1 (got {n.tolist()})")
    if n.numel() == 1:
        n = n.expand(batch)
    if n.shape[0] != batch:
        raise ValueError(f"one N per batch element: got {n.shape[0]} values for batch {batch}")
    return n


def _top_mask(weights: Tensor, k: int) -> Tensor:
    """:func:`keep_top_n` for one N: ``weights`` [..., L], ``k >= 1``; bool [..., L].

    The threshold is the k-th largest weight of the row (one ``topk``); entries above it are
    kept, and at the threshold the earliest entries up to k (a cumulative count, only on the rows
    where the threshold is tied). Rows whose threshold is 0 have at most k positive entries and
    keep everything.
    """
    length = weights.shape[-1]
    if k >= length:
        return torch.ones_like(weights, dtype=torch.bool)
    threshold = torch.topk(weights, k, dim=-1, sorted=False).values.amin(-1, keepdim=True)
    keep = weights >= threshold
    tied = (keep.sum(-1) > k) & (threshold.squeeze(-1) > 0)
    if bool(tied.any()):
        rows, t = weights[tied], threshold[tied]
        above, equal = rows > t, rows == t
        room = k - above.sum(-1, keepdim=True)
        keep[tied] = above | (equal & (equal.cumsum(-1) <= room))
    return keep


def _keep_top_in_place(weights: Tensor, k: int) -> None:
    """Zero all but the ``k`` largest entries of each row of ``weights`` [..., L] in place
    (``1 <= k < L``), ties at the k-th place to the earlier key.

    One ``topk`` of ``k + 1`` values, then the row is cleared and its top k written back; rows
    whose k-th and (k+1)-th values tie at a positive weight (where ``topk`` does not say which
    keys it took) are redone with :func:`_top_mask`. For ``k`` above a quarter of the row the
    mask of :func:`_top_mask` is cheaper than clearing and scattering, and is used instead.
    """
    if 4 * k > weights.shape[-1]:
        weights.mul_(_top_mask(weights, k))
        return
    values, indices = torch.topk(weights, k + 1, dim=-1, sorted=True)
    tied = (values[..., k] == values[..., k - 1]) & (values[..., k - 1] > 0)
    saved = weights[tied] if bool(tied.any()) else None
    weights.zero_().scatter_(-1, indices[..., :k], values[..., :k])
    if saved is not None:
        weights[tied] = saved * _top_mask(saved, k)


def _cut_rows(weights: Tensor, n: Tensor, first_row: int | None) -> Tensor:
    """Zero all but the top ``n[b]`` weights of every row of batch element b, in place.

    ``weights`` [B, H, Q, K]. ``first_row``: the query position of row 0 when the rows are
    causal (the query q sees at most ``q + 1`` keys), else None (every row is cut). Causal rows
    at positions ``q < n[b]`` have at most ``n[b]`` positive weights and are left as they are
    without looking at them. Returns ``weights``.
    """
    for b in range(weights.shape[0]):
        k = int(n[b])
        part = weights[b] if first_row is None else weights[b, :, max(0, k - first_row):]
        if part.shape[-2] and k < weights.shape[-1]:
            _keep_top_in_place(part, k)
    return weights


@dataclass(frozen=True)
class _Setting:
    n: Tensor                        # [B] one N per batch element
    renormalise: bool = False


#: the cut of the ``top_n_attention`` block being run (None outside one), read by the attention
#: function; a context variable, as the attention tap's recording is
_SETTING: contextvars.ContextVar[_Setting | None] = contextvars.ContextVar("normlimits_top_n",
                                                                          default=None)


#: query rows per block of :func:`_top_n_forward` (a block's scores and weights stay in cache)
ATTENTION_ROW_BLOCK = 128
#: a causal block's keys are cut at a multiple of this many keys after its last row: torch's
#: softmax reduces a row in SIMD chunks with a scalar tail, so a row cut elsewhere would sum its
#: weights in another order (and round differently) than the whole row
KEY_ALIGN = 64


def _top_n_forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Eager attention with every row cut to its top N weights (see module docstring).

    ``query`` [B, H, Q, d], ``key`` / ``value`` [B, H_kv, K, d] (grouped-query keys and values are
    expanded per query head, as the families' own ``repeat_kv`` does). The rows are processed
    :data:`ATTENTION_ROW_BLOCK` at a time (scores, softmax and cut of one block stay in cache;
    at GPT-2's size and L = 1024 1.5-1.7 times faster than the whole [B, H, L, L] at once). For
    causal self-attention (Q == K) a block's scores and softmax run only over the keys its last
    row sees, rounded up to :data:`KEY_ALIGN` (the masked keys after them add exact zeros); its
    weights are padded back to K keys for the product with the values, because a shorter
    reduction over keys would round differently. So the result is bit for bit the unblocked
    computation's (tested). Returns ``(out [B, Q, H, d], None)``: the weights are not kept.
    """
    if scaling is None:
        scaling = query.size(-1) ** -0.5
    batch, heads, rows, keys = query.shape[0], query.shape[1], query.shape[2], key.shape[-2]
    key, value = expand_heads(key, heads), expand_heads(value, heads)
    causal = getattr(module, "is_causal", True) and rows == keys
    setting = _SETTING.get()
    n = None if setting is None else _per_batch(setting.n, batch, query.device)
    out = query.new_empty(batch, heads, rows, value.shape[-1])
    for r0 in range(0, rows, ATTENTION_ROW_BLOCK):
        r1 = min(rows, r0 + ATTENTION_ROW_BLOCK)
        seen = min(keys, -(-r1 // KEY_ALIGN) * KEY_ALIGN) if causal else keys
        scores = torch.matmul(query[:, :, r0:r1], key[:, :, :seen].transpose(-1, -2)) * scaling
        if attention_mask is not None:
            scores = scores + attention_mask[:, :, r0:r1, :seen]
        weights = torch.softmax(scores, dim=-1)
        if n is not None:
            _cut_rows(weights, n, r0 if causal else None)
            if setting.renormalise:
                weights = weights / weights.sum(-1, keepdim=True)
        weights = weights.type(value.dtype)
        if seen < keys:
            weights = torch.nn.functional.pad(weights, (0, keys - seen))
        out[:, :, r0:r1] = torch.matmul(weights, value)
    return out.transpose(1, 2), None


@contextmanager
def top_n_attention(model, n: Tensor | Sequence[int] | int, renormalise: bool = False):
    """Run ``model`` with every attention row cut to its top ``n`` weights inside the block.

    ``n``: one N for the whole batch or one per batch element. The model's attention
    implementation is restored afterwards (also on errors).
    """
    setting = _Setting(torch.as_tensor(n, dtype=torch.long).reshape(-1), bool(renormalise))
    with switched(model, ATTENTION_NAME, _top_n_forward, _SETTING, setting):
        yield model


def _logits(model, ids: Tensor, keep: Tensor | int, n: Tensor | Sequence[int] | None = None,
            renormalise: bool = False) -> Tensor:
    """The model's logits ``[B, R, V]`` at ``keep`` (transformers' ``logits_to_keep``: the last
    ``keep`` positions, or the positions of a LongTensor [R]) for ``ids`` [B, L]; with every
    attention row cut to its top ``n`` (one per row, or one for all) unless ``n`` is None."""
    if n is None:
        return model(ids, logits_to_keep=keep).logits
    with top_n_attention(model, n, renormalise):
        return model(ids, logits_to_keep=keep).logits


def _next_token_nll(logits: Tensor, tokens: Tensor) -> Tensor:
    """``-log p(token)`` in float64 from ``logits`` [B, R, V] and the predicted ``tokens`` [B, R];
    returns [B, R]."""
    logp = torch.log_softmax(logits.double(), -1)
    return -logp.gather(-1, tokens[..., None]).squeeze(-1)


@torch.no_grad()
def removal_nll(model, ids: Tensor, targets: int, n: Tensor | Sequence[int] | None = None,
                renormalise: bool = False) -> Tensor:
    """Next-token NLL (nats) of the last ``targets`` predictions of each row of ``ids`` [B, L].

    ``n``: None for the unmodified model, else one N per row (or one for all). Returns
    ``[B, targets]``: entry ``[b, j]`` is ``-log p(ids[b, L - targets + j] | ids[b, :L - targets + j])``.
    """
    ids = torch.as_tensor(ids, dtype=torch.long)
    if not 1 <= targets < ids.shape[-1]:
        raise ValueError(f"targets must lie in 1..{ids.shape[-1] - 1} (got {targets})")
    logits = _logits(model, ids, targets + 1, n, renormalise)
    return _next_token_nll(logits[:, -targets - 1:-1], ids[:, -targets:])


def n_grid_for(length: int, extra: Sequence[int] = ()) -> list[int]:
    """N grid at context length ``length``: the powers of two below it (``1, 2, 4, ...``), the
    ``extra`` sizes, and ``length`` itself (the full model: at N = L nothing is removed)."""
    if length < 2:
        raise ValueError(f"context length must be >= 2 (got {length})")
    grid, k = {length}, 0
    while 2 ** k < length:
        grid.add(2 ** k)
        k += 1
    grid |= {int(e) for e in extra if 1 <= int(e) <= length}
    return sorted(grid)


@torch.no_grad()
def output_change(capture, out_weights: Sequence[Tensor], rows: Tensor, n_grid: Sequence[int],
                  renormalise: bool) -> Tensor:
    """Relative change of each layer's attention output when its rows keep only their top N.

    ``capture``: a :class:`~normlimits.model.capture.WindowCapture` of the unmodified model;
    ``out_weights``: per layer the output projection ``W_O`` [H * d, D] applied as ``x @ W_O``
    (:func:`normlimits.model.capture.output_projections`); ``rows``: query positions; ``n_grid``: the N values.
    Returns ``[layers, n]``: mean over rows of ``||W_O concat_h(o~_N - o)|| / ||W_O concat_h(o)||``.
    Only the keys the rows can see (up to the last row) enter; every layer in one product.
    """
    rows = torch.as_tensor(rows, dtype=torch.long)
    seen = int(rows.max()) + 1                                           # keys after it are masked
    weights = torch.softmax(capture.logits(rows)[..., :seen].double(), -1)   # [layers, H, R, K]
    values = capture.values[..., :seen, :].double()                      # [layers, H, K, d]
    layers, heads, n_rows, length = weights.shape
    w_o = torch.stack([w.double() for w in out_weights])                 # [layers, D, D]

    def project(x: Tensor) -> Tensor:                                    # [layers, H, R, d] -> [layers, R]
        return torch.bmm(x.permute(0, 2, 1, 3).reshape(layers, n_rows, -1), w_o).norm(dim=-1)

    full = project(weights @ values).clamp_min(1e-300)
    out = torch.empty(layers, len(n_grid), dtype=torch.float64)
    for j, n in enumerate(n_grid):
        keep = keep_top_n(weights.reshape(layers * heads, n_rows, length), int(n))
        kept = torch.where(keep.reshape(weights.shape), weights, torch.zeros_like(weights))
        if renormalise:
            kept = kept / kept.sum(-1, keepdim=True)
        out[:, j] = (project((kept - weights) @ values) / full).mean(-1)
    return out


def effective_set_size(n_grid: Sequence[int], loss_increase: Sequence[float], tau: float) -> int:
    """``N*_tau``: the smallest N of the grid whose loss increase is at most ``tau`` (the grid must
    end at the full context, where the increase is 0 by construction, so one always exists)."""
    if not tau >= 0:
        raise ValueError(f"the tolerance tau must be >= 0 (got {tau!r})")
    for n, d in zip(n_grid, loss_increase):
        if float(d) <= tau:
            return int(n)
    raise ValueError("no N of the grid is within tau; the grid must include the full context "
                     f"(last N = {list(n_grid)[-1]}, increase {float(list(loss_increase)[-1]):.3g})")


@dataclass
class RemovalResult:
    """The removal experiment. ``lengths`` [m]; per length ``grids[L]`` (the N values) and, per
    mode ("delete", "renormalise"), ``increase[mode][L]`` [n] (mean NLL increase over windows and
    targets, nats per token), ``increase_se[mode][L]`` [n] (its standard error over targets),
    ``output_change[mode][L]`` [n] (relative change of the layer output, mean over layers);
    ``full_nll[L]`` the full model's mean NLL at length L's targets; ``targets``, ``windows``,
    ``seconds``; ``protocol`` (:data:`PROTOCOLS`: which tokens length L sees and predicts);
    ``extra["forward_tokens"]``: the tokens of all forward passes of the sweep."""

    lengths: list
    grids: dict
    increase: dict
    increase_se: dict
    output_change: dict
    full_nll: dict
    targets: int
    windows: int
    seconds: float = 0.0
    extra: dict = field(default_factory=dict)
    #: per mode and length, the loss increase of each window alone: ``[n][W]`` (mean over its targets)
    increase_by_window: dict = field(default_factory=dict)
    #: "prefix" or "suffix" (see :func:`removal_sweep`)
    protocol: str = "suffix"
    #: per mode and length, the mean squared increase over windows and targets ``[n]`` (with
    #: ``increase`` it pools the standard error of sweeps on other windows: :func:`merge_results`)
    increase_sq: dict = field(default_factory=dict)

    def n_star(self, tau: float, mode: str = "delete") -> list[int]:
        """``N*_tau`` per length."""
        return [effective_set_size(self.grids[L], self.increase[mode][L], tau) for L in self.lengths]

    def fraction(self, tau: float, mode: str = "delete") -> list[float]:
        """``N*_tau / L`` per length."""
        return [n / L for n, L in zip(self.n_star(tau, mode), self.lengths)]

    def exponent(self, tau: float, mode: str = "delete") -> float:
        """Fitted exponent e of ``N*_tau ~ L^e`` over the lengths, rounded to 12 decimals.

        With N* on a power-of-two grid and L = 128..1024 the least-squares slope takes values on
        a lattice (multiples of 0.1 for four lengths), and a rule's threshold may sit on it: the
        rounding makes ``>=`` at such a point a property of N*, not of floating-point error
        (unrounded, N* = 4, 8, 16, 4 gives 0.10000000000000005)."""
        return round(float(loglog_fit(self.lengths, self.n_star(tau, mode)).exponent), 12)

    def for_windows(self, windows: Sequence[int]) -> "RemovalResult":
        """The experiment as the given windows alone would have measured it (from
        ``increase_by_window``: every window has the same number of targets, so the mean increase
        is the mean of the windows' own). Its ``increase_se``, ``output_change`` and ``full_nll`` are
        left empty (they are not kept per window)."""
        windows = list(windows)
        if not self.increase_by_window:
            raise ValueError("no per-window increases were kept; run removal_sweep")
        if not windows or min(windows) < 0 or max(windows) >= self.windows:
            raise ValueError(f"windows must be a non-empty subset of 0..{self.windows - 1} (got {windows})")
        by_window = {mode: {L: [[row[w] for w in windows] for row in rows] for L, rows in per_length.items()}
                     for mode, per_length in self.increase_by_window.items()}
        increase = {mode: {L: [float(np.mean(row)) for row in rows] for L, rows in per_length.items()}
                    for mode, per_length in by_window.items()}
        return RemovalResult(lengths=self.lengths, grids=self.grids, increase=increase, increase_se={},
                             output_change={}, full_nll={}, targets=self.targets, windows=len(windows),
                             increase_by_window=by_window, protocol=self.protocol)

    def increase_at(self, n_of_length, mode: str = "renormalise") -> list[float]:
        """The loss increase at ``N = n_of_length(L)`` (a size on each length's grid) per length."""
        out = []
        for L in self.lengths:
            n = int(n_of_length(L))
            out.append(float(self.increase[mode][L][self.grids[L].index(n)]))
        return out


#: tokens per forward pass of the removal sweep (``max(1, BATCH_TOKENS // L)`` rows of length
#: L): at GPT-2's size on 2 cores the cost per row is lowest near 2048 tokens (L = 1024: 1.79 s a
#: row in pairs, 2.45 s in batches of 8)
BATCH_TOKENS = 2048

#: the protocols of :func:`removal_sweep`: "prefix" (length L sees the first L tokens of each
#: window; one pass per N over the longest length serves every length) and "suffix" (length L
#: sees the last L tokens, the same targets at every length; one pass per length and N)
PROTOCOLS = ("prefix", "suffix")

#: the two modes of the removal experiment: name -> renormalise the kept weights
MODES = {"delete": False, "renormalise": True}


def _checked(protocol: str) -> str:
    """``protocol`` if it is one of :data:`PROTOCOLS`, else ValueError naming them."""
    if protocol not in PROTOCOLS:
        raise ValueError(f"protocol must be one of {PROTOCOLS} (got {protocol!r}); "
                         "'prefix' reads every length from one pass per N, 'suffix' runs one per length and N")
    return protocol


def target_rows(length: int, targets: int, protocol: str) -> Tensor:
    """Query positions of a window of the longest length at which :func:`removal_sweep` measures
    the layer-output change for context length ``length``: LongTensor [targets].

    "prefix": ``L - targets - 1 .. L - 2``, the rows whose predictions are the targets of length
    L (row q of the window is row q of its prefix cut to L tokens, so these are the scored rows
    themselves). "suffix": ``L - targets .. L - 1``, rows that see up to L keys, as the sweep has
    always read them (the suffix's scored rows sit at other positions of the window).
    """
    if _checked(protocol) == "prefix":
        return torch.arange(length - targets - 1, length - 1)
    return torch.arange(length - targets, length)


def forward_tokens(grids: dict, windows: int, protocol: str) -> int:
    """Tokens of all forward passes of :func:`removal_sweep` with the N grids ``grids`` (length ->
    its N values, ending at the length) on ``windows`` windows: "suffix" ``W sum_L L (1 + 2
    |{N < L}|)``; "prefix" ``W (max L + 2 sum_N span(N))`` (:func:`prefix_spans`)."""
    if _checked(protocol) == "suffix":
        return windows * sum(L * (1 + len(MODES) * sum(n < L for n in grid)) for L, grid in grids.items())
    return windows * (max(grids) + len(MODES) * sum(prefix_spans(list(grids), grids).values()))


def _cut_passes(pairs: list, batch: int, run):
    """Run the (window, N) ``pairs`` ``batch`` at a time: ``run(windows, ns)`` with the windows'
    indices (a list) and their N (LongTensor [b]) returns [b, ...]; yields ``((w, n), row)``."""
    for i in range(0, len(pairs), batch):
        chunk = pairs[i:i + batch]
        part = run([w for w, _ in chunk], torch.tensor([n for _, n in chunk]))
        yield from zip(chunk, part)


def _suffix_nll(model, windows: Tensor, lengths: list, grids: dict, targets: int, batch_tokens: int):
    """The NLLs of the suffix protocol: length L sees ``windows[:, -L:]``, one pass per (window
    batch, L, N < L, mode). Returns ``(base, nll)``: ``base[L]`` [W, targets] of the full
    model and ``nll[mode][L]`` [n, W, targets] per N of ``grids[L]`` (N = L: the full model's)."""
    count = windows.shape[0]
    base, nll = {}, {m: {} for m in MODES}
    for L in lengths:
        grid, ids = grids[L], windows[:, -L:]
        batch = max(1, batch_tokens // L)
        base[L] = removal_nll(model, ids, targets)                                # [W, K]
        pairs = [(w, n) for n in grid if n < L for w in range(count)]
        for mode, renorm in MODES.items():
            # at N = L nothing is removed: that entry is the full model itself, no pass needed
            out = base[L][None].expand(len(grid), count, targets).clone()
            for (w, n), values in _cut_passes(pairs, batch,
                                              lambda ws, ns: removal_nll(model, ids[ws], targets, ns, renorm)):
                out[grid.index(n), w] = values
            nll[mode][L] = out
    return base, nll


def prefix_spans(lengths: Sequence[int], grids: dict) -> dict:
    """The passes of the prefix protocol: ``{N: span}`` for every N of the union of the lengths'
    grids that lies below some length, ``span`` the longest such length. N's pass runs over the
    first ``span`` tokens of each window and serves every length whose grid has N (they are all
    at most ``span``)."""
    spans = {}
    for L in lengths:
        for n in grids[L]:
            if n < L:
                spans[n] = max(spans.get(n, 0), L)
    return dict(sorted(spans.items()))


@torch.no_grad()
def _prefix_nll(model, windows: Tensor, lengths: list, grids: dict, targets: int, batch_tokens: int):
    """The NLLs of the prefix protocol: length L sees ``windows[:, :L]`` and predicts its last
    ``targets`` tokens, read from rows ``L - targets - 1 .. L - 2`` of longer passes (causal
    attention: row q never sees a later key). One unmodified pass over the longest length per
    window batch; per (window batch, N, mode) one cut pass over the first
    :func:`prefix_spans` tokens; each length reads its own grid out of them. Returns
    ``(base, nll)`` as :func:`_suffix_nll` does."""
    count, longest = windows.shape[0], max(lengths)
    ids = windows[:, :longest]
    rows = torch.cat([torch.arange(L - targets - 1, L - 1) for L in lengths]).unique()   # [R] sorted
    at = {L: torch.searchsorted(rows, torch.arange(L - targets - 1, L - 1)) for L in lengths}
    predicted = ids[:, rows + 1]                                                      # [W, R]
    step = max(1, batch_tokens // longest)
    base = torch.cat([_next_token_nll(_logits(model, ids[i:i + step], rows), predicted[i:i + step])
                      for i in range(0, count, step)])                                # [W, R]
    spans = prefix_spans(lengths, grids)
    shared = list(spans)
    nll = {}
    for mode, renorm in MODES.items():
        # rows past a pass's span are never read (no length beyond it has that N below it)
        cut = torch.full((len(shared), count, len(rows)), math.nan, dtype=base.dtype)   # [N, W, R]
        for span in sorted(set(spans.values())):
            cols = torch.nonzero(rows < span).flatten()
            pairs = [(w, n) for n in shared if spans[n] == span for w in range(count)]
            for (w, n), values in _cut_passes(pairs, max(1, batch_tokens // span), lambda ws, ns: _next_token_nll(
                    _logits(model, ids[ws, :span], rows[cols], ns, renorm), predicted[ws][:, cols])):
                cut[shared.index(n), w, cols] = values
        # N >= L at a length is its full model: nothing of its window is removed
        nll[mode] = {L: torch.stack([(cut[shared.index(n)] if n < L else base)[:, at[L]] for n in grids[L]])
                     for L in lengths}
    return {L: base[:, at[L]] for L in lengths}, nll


def removal_sweep(loaded, windows: Tensor, lengths: Sequence[int], *, targets: int = 32,
                  extra_sizes=None, batch_tokens: int = BATCH_TOKENS,
                  captures: Sequence | None = None, protocol: str = "suffix") -> RemovalResult:
    """The removal experiment on ``windows`` [W, L_w] for every context length of ``lengths``
    (``L_w >= max(lengths)``).

    The N grid of length L is :func:`n_grid_for` with ``extra_sizes(L)`` added (e.g.
    ``ceil(sqrt L)``); N = L is the full model (increase 0 by construction, no pass). Both modes.
    ``protocol`` (:data:`PROTOCOLS`):

    - "prefix": length L sees ``windows[:, :L]`` and its targets are the last
      ``targets`` tokens of that prefix (different tokens at each length). One forward pass per
      (window, N, mode) of the union of the lengths' grids serves every length whose grid has
      that N (row q of a causal pass is row q of the pass over the window cut to q + 1 tokens);
      it runs over the first :func:`prefix_spans` tokens (the longest length that needs it), and
      one unmodified pass over the longest length per window serves every length's full model:
      ``W (max(lengths) + 2 sum_N span(N))`` tokens.
    - "suffix" (default): length L sees ``windows[:, -L:]``, the same targets (the windows' last
      ``targets`` tokens) at every length: ``W sum_L (1 + 2 (|grid(L)| - 1))`` rows of length L.

    The (window, N) pairs run in batches of ``max(1, batch_tokens // L)`` rows of the pass's
    length L. ``captures`` (optional, one :class:`~normlimits.model.capture.WindowCapture` per window,
    of the unmodified model on the whole window) add the layer-output change at the rows of
    :func:`target_rows`. Nothing is cached.
    """
    start = time.perf_counter()
    model = loaded.model
    windows = torch.as_tensor(windows, dtype=torch.long)
    lengths = [int(L) for L in lengths]
    _checked(protocol)
    if max(lengths) > windows.shape[-1]:
        raise ValueError(f"lengths up to {max(lengths)} need windows at least that long "
                         f"(got {windows.shape[-1]})")
    if targets >= min(lengths):
        raise ValueError(f"targets ({targets}) must be below the shortest length ({min(lengths)})")
    if batch_tokens < 1:
        raise ValueError(f"batch_tokens must be >= 1 (got {batch_tokens})")
    grids = {L: n_grid_for(L, extra_sizes(L) if extra_sizes else ()) for L in lengths}
    passes = _prefix_nll if protocol == "prefix" else _suffix_nll
    base, nll = passes(model, windows, lengths, grids, targets, batch_tokens)
    w_out = output_projections(model)
    increase, se, change, by_window, squares = ({m: {} for m in MODES} for _ in range(5))
    for L in lengths:
        for mode, renorm in MODES.items():
            diff = nll[mode][L] - base[L][None]                                  # [n, W, K]
            by_window[mode][L] = diff.mean(-1).tolist()                          # [n][W]
            diff = diff.reshape(len(grids[L]), -1)                               # [n, W*K]
            increase[mode][L] = diff.mean(-1).tolist()
            squares[mode][L] = diff.square().mean(-1).tolist()
            se[mode][L] = (diff.std(-1) / math.sqrt(diff.shape[-1])).tolist()
            if captures is not None:
                rows = target_rows(L, targets, protocol)
                per = torch.stack([output_change(c, w_out, rows, grids[L], renorm) for c in captures])
                change[mode][L] = per.mean((0, 1)).tolist()
    return RemovalResult(lengths=lengths, grids=grids, increase=increase, increase_se=se,
                         output_change=change, full_nll={L: float(base[L].mean()) for L in lengths},
                         targets=targets, windows=windows.shape[0], seconds=time.perf_counter() - start,
                         extra={"forward_tokens": forward_tokens(grids, windows.shape[0], protocol)},
                         increase_by_window=by_window,
                         protocol=protocol, increase_sq=squares)


def merge_results(parts: Sequence[RemovalResult]) -> RemovalResult:
    """Sweeps of the same lengths, grids, targets and protocol on disjoint windows, as one sweep
    over all their windows (in order): the increases, the full model's NLL and the layer-output
    change are the window-weighted means of the parts' (every window has the same targets, so
    this is the pooled mean), the standard error is pooled from each part's mean and mean square,
    the per-window increases are concatenated; seconds and forward tokens add up."""
    parts = list(parts)
    if not parts:
        raise ValueError("nothing to merge")
    first = parts[0]
    for part in parts[1:]:
        if (part.lengths, part.grids, part.targets, part.protocol) != (first.lengths, first.grids, first.targets,
                                                                        first.protocol):
            raise ValueError("only sweeps of the same lengths, grids, targets and protocol can be merged")
    if len(parts) == 1:
        return first
    if any(not p.increase_sq for p in parts):
        raise ValueError("a part kept no mean squares; run removal_sweep")
    weights = np.array([p.windows for p in parts], dtype=float)
    windows = int(weights.sum())

    def pooled(get) -> list:
        return list(np.average(np.array([get(p) for p in parts], dtype=float), axis=0, weights=weights))

    increase, squares, se, change, by_window = ({m: {} for m in MODES} for _ in range(5))
    count = windows * first.targets                                      # targets pooled
    for mode in MODES:
        for L in first.lengths:
            increase[mode][L] = [float(x) for x in pooled(lambda p: p.increase[mode][L])]
            squares[mode][L] = [float(x) for x in pooled(lambda p: p.increase_sq[mode][L])]
            variance = [max(q - m * m, 0.0) * count / (count - 1) for m, q in zip(increase[mode][L], squares[mode][L])]
            se[mode][L] = [math.sqrt(v / count) for v in variance]
            by_window[mode][L] = [sum((p.increase_by_window[mode][L][i] for p in parts), [])
                                  for i in range(len(first.grids[L]))]
            if all(p.output_change.get(mode) for p in parts):
                change[mode][L] = [float(x) for x in pooled(lambda p: p.output_change[mode][L])]
    return RemovalResult(lengths=first.lengths, grids=first.grids, increase=increase, increase_se=se,
                         output_change=change,
                         full_nll={L: float(np.average([p.full_nll[L] for p in parts], weights=weights))
                                   for L in first.lengths},
                         targets=first.targets, windows=windows, seconds=sum(p.seconds for p in parts),
                         extra={"forward_tokens": sum(p.extra.get("forward_tokens", 0) for p in parts)},
                         increase_by_window=by_window, protocol=first.protocol, increase_sq=squares)


@dataclass
class SequentialRemoval:
    """The removal experiment measured in looks (:func:`sequential_sweep`): the merged ``result``
    on the windows measured, the claims' ``intervals`` at the looks' corrected level, and the
    ``run`` (:class:`normlimits.core.sequential.SequentialRun`: looks, level, why it stopped)."""

    result: RemovalResult
    intervals: dict
    run: object


def undecided_claims(removal: RemovalResult, intervals: dict, critical: dict, tau: float, sqrt_size,
                     protocol: str) -> list[str]:
    """The removal claims whose registered rule grades them "inconclusive" on ``removal`` with
    ``intervals`` (an undecided criterion could change the verdict)."""
    values = claim_values(removal, critical, tau, sqrt_size, protocol)
    return [cid for cid in REMOVAL_CLAIMS
            if values[cid][2] is None and registered_claim(cid).rule.grade(values[cid][0], intervals[cid] or None)
            == "inconclusive"]


def sequential_sweep(loaded, windows: Tensor, lengths: Sequence[int], looks: Sequence[int], critical: dict,
                     tau: float, sqrt_size, critical_protocol: str, *, captures: Sequence | None = None,
                     **sweep_options) -> SequentialRemoval:
    """:func:`removal_sweep` on the first ``looks[0]`` windows, then on the next ones up to each
    later look, stopping at the first look where no removal claim is undecided
    (:func:`undecided_claims` with :func:`claim_intervals` at the Bonferroni-corrected level:
    :func:`normlimits.core.sequential.run_looks`). ``windows`` [W, L_w] must hold the last look's
    windows; ``captures`` (one per window) as :func:`removal_sweep` takes them; ``critical`` (Figure
    2c's critical N per length) is held fixed. Each window is measured once, whatever the looks."""
    from normlimits.core.sequential import check_looks, run_looks

    looks = check_looks(looks)
    if looks[-1] > len(windows):
        raise ValueError(f"the last look needs {looks[-1]} windows (got {len(windows)})")
    parts: list[RemovalResult] = []

    def measure(count: int, level: float):
        done = sum(p.windows for p in parts)
        parts.append(removal_sweep(loaded, windows[done:count], lengths,
                                   captures=None if captures is None else captures[done:count], **sweep_options))
        merged = merge_results(parts)
        return merged, claim_intervals(merged, critical, tau, sqrt_size, critical_protocol, level=level)

    run = run_looks(looks, measure, lambda found: not undecided_claims(found[0], found[1], critical, tau,
                                                                       sqrt_size, critical_protocol))
    merged, intervals = run.result
    return SequentialRemoval(merged, intervals, run)


def critical_protocol_words(critical, per_octave: int) -> str:
    """How Figure 2c's critical-N search (``critical``, from
    :func:`normlimits.metrics.critical_n.critical_n_search`) aggregated its query positions, in
    words for the removal claims' sentences."""
    aggregate = getattr(critical, "aggregate", None)
    if aggregate == "paper":
        return f"the paper's protocol (every query position, sampled {per_octave} per octave)"
    if aggregate in ("last_row", None):
        return "the last query row of each window"
    raise ValueError(f"unknown aggregation of the critical-N search: {aggregate!r}")


def claim_values(removal: RemovalResult, critical: dict, tau: float, sqrt_size, protocol: str) -> dict:
    """The values the removal claims are graded on, with a sentence each and a reason when missing.

    ``critical``: length -> Figure 2c's critical N (None: none found); ``sqrt_size(L)``: the
    ``ceil(sqrt L)`` of top-k; ``protocol``: how the critical N was computed (for the sentence).
    Returns ``{claim id: (values, measured, reason or None)}`` for ALT-REM-size, ALT-REM-renorm,
    ALT-REM-predict and ALT-TOPK.
    """
    n_del, n_ren = removal.n_star(tau, "delete"), removal.n_star(tau, "renormalise")
    e_del, e_ren = removal.exponent(tau, "delete"), removal.exponent(tau, "renormalise")
    ratio = float(np.median([r / d for r, d in zip(n_ren, n_del)]))
    pairs = [(n, critical.get(L)) for n, L in zip(n_del, removal.lengths) if critical.get(L) is not None]
    logs = [abs(math.log2(n / c)) for n, c in pairs]
    sqrt_loss = removal.increase_at(sqrt_size, "renormalise")
    lengths = removal.lengths
    return {
        "ALT-REM-size": ({"grows": e_del, "sublinear": e_del},
                         f"$N^*_\\tau$ = {n_del} at $L$ = {lengths}; exponent {e_del:.2f}", None),
        "ALT-REM-renorm": ({"halves": ratio, "reduces": ratio},
                           f"$N^*_\\tau$ renormalised {n_ren} against {n_del} deleted; median ratio {ratio:.2f}",
                           None),
        "ALT-REM-predict": ({"log_ratio": float(np.median(logs)) if logs else None},
                            f"($N^*_\\tau$, critical $N$) = {pairs} at the lengths where both exist "
                            f"(critical $N$ from {protocol})",
                            None if logs else "the critical-N search found no N below L at any length"),
        "ALT-TOPK": ({"sqrt_loss": max(sqrt_loss), "exponent": e_ren},
                     f"loss increase with $k = \\lceil\\sqrt L\\rceil$: {[round(x, 4) for x in sqrt_loss]} "
                     f"nats at $L$ = {lengths}; $k$ needed ($N^*_\\tau$ renormalised) {n_ren}, exponent {e_ren:.2f}",
                     None),
    }



#: the claims :func:`claim_values` grades, in order
REMOVAL_CLAIMS = ("ALT-REM-size", "ALT-REM-renorm", "ALT-REM-predict", "ALT-TOPK")


def claim_intervals(removal: RemovalResult, critical: dict, tau: float, sqrt_size, protocol: str, *,
                    resamples: int = RESAMPLES, seed: int = SEED,
                    level: float = LEVEL) -> dict[str, dict[str, Interval]]:
    """Percentile bootstrap intervals over the corpus windows of every value :func:`claim_values`
    grades: each resample of the windows (drawn with repeats) is measured as
    :meth:`RemovalResult.for_windows` measures a set of windows (mean increase over the drawn
    windows, then ``N*_tau``, its exponent, the ratio, the top-k loss), Figure 2c's ``critical``
    held fixed (another experiment's numbers). Returns ``{claim id: {criterion key: Interval}}``
    (a criterion whose value is None on every resample gets none; with fewer than 2 windows no
    interval can be given, and every claim gets none)."""
    if removal.windows < 2:
        return {cid: {} for cid in REMOVAL_CLAIMS}

    def values_of(rows: list[int]) -> dict:
        drawn = claim_values(removal.for_windows(rows), critical, tau, sqrt_size, protocol)
        return {(cid, key): value for cid in REMOVAL_CLAIMS for key, value in drawn[cid][0].items()}

    keys = list(values_of(list(range(removal.windows))))
    found = bootstrap_values(removal.windows, values_of, keys, resamples=resamples, seed=seed, level=level)
    out: dict[str, dict[str, Interval]] = {cid: {} for cid in REMOVAL_CLAIMS}
    for (cid, key), interval in found.items():
        out[cid][key] = interval
    return out

def interval_sentence(intervals: dict[str, dict[str, Interval]], windows: int) -> str:
    """The chapter's sentence on the removal claims' intervals (:func:`claim_intervals`), or why
    there are none."""
    if windows < 2:
        return ("With one window no interval can be given: these claims are graded on the one "
                "window's values, and their rows carry no interval.")
    size, ratio = intervals["ALT-REM-size"]["grows"], intervals["ALT-REM-renorm"]["halves"]
    loss, exponent = intervals["ALT-TOPK"]["sqrt_loss"], intervals["ALT-TOPK"]["exponent"]
    return (f"Each of these claims' statistics gets a {level_words(size, plural=False, method=True)} "
            f"over the windows ({size.resamples:,} resamples of the {windows} windows, drawn with "
            "repeats, each measured as the pooled experiment is: mean loss increase over the drawn "
            "windows, then N*_τ and the fits; Figure 2c's critical N is held fixed; "
            f"normlimits.core.bootstrap): the exponent of N*_τ lies in [{size.low:.2f}, {size.high:.2f}], "
            f"the renormalised-to-deleted ratio in [{ratio.low:.2f}, {ratio.high:.2f}], the largest "
            f"top-⌈√L⌉ loss in [{loss.low:.3f}, {loss.high:.3f}] nats and the exponent of the k "
            f"needed in [{exponent.low:.2f}, {exponent.high:.2f}].")


def undecided_sentence(removal: RemovalResult, intervals: dict[str, dict[str, Interval]],
                       critical: dict, tau: float, sqrt_size, protocol: str) -> str:
    """For every undecided criterion of an inconclusive removal claim (issue 31 item 3): its
    interval on all windows and on the first half of them, and roughly how many windows would
    decide it (:func:`normlimits.core.bootstrap.units_to_decide`), or that none would, when the value
    sits on the threshold itself."""
    half = list(range(removal.windows // 2))
    level = next((iv.level for ivs in intervals.values() for iv in ivs.values()), LEVEL)
    half_intervals = (claim_intervals(removal.for_windows(half), critical, tau, sqrt_size, protocol, level=level)
                      if half else {cid: {} for cid in REMOVAL_CLAIMS})
    values = claim_values(removal, critical, tau, sqrt_size, protocol)
    parts = undecided_words({cid: values[cid][0] for cid in REMOVAL_CLAIMS},
                            {cid: intervals[cid] for cid in REMOVAL_CLAIMS}, half_intervals,
                            on_threshold="N*_τ lies on a grid of powers of two, so this statistic "
                                         "takes values on a lattice")
    return ("How many windows would decide it: " + "; ".join(parts) + "." if parts
            else "No verdict of this experiment is inconclusive.")
