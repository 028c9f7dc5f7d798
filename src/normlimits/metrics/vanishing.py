"""Vanishing attention: the bounds of Lemma 1 / Corollary 1 and the measurements that test them.

Units and conventions used throughout:

* Logits are in the units the model uses: GPT-2 computes ``l_j = scale * q . k_j`` with
  ``scale = 1/sqrt(d_head)``, and weights ``softmax(l / T)``; T = 1 is the model's operating point.
* ``delta`` (the paper's Delta) bounds every visible logit of a row: for a query row ``t`` it is
  ``scale * ||q_t|| * max_{j <= t} ||k_j||`` (Cauchy-Schwarz), using only the keys the row sees.
* All bounds are returned as natural logarithms, so that ``exp(2 Delta / T)`` never overflows, and
  weights are compared as ``log_softmax`` values, so that tiny weights never underflow to 0.
* A *length sweep* reads, from one forward pass over a window of ``K`` tokens, the query row
  ``L - 1`` for every ``L`` of a grid: by causality it sees exactly the keys ``0 .. L-1`` and equals
  the last row of a window of length ``L`` (same tokens, same positions).
* Sliding-window layers (a capture's ``windows``, W > 0): row ``L - 1`` of such a layer sees only
  the keys ``max(0, L - W) .. L - 1``, ``min(L, W)`` of them. Its statistics are those of the row
  cut to those keys: every bound uses ``min(L, W)`` keys (:attr:`RowStatistics.keys`), ``delta``
  the visible keys only, and key indices (``argmax_key``, ``first_key_weight``,
  ``max_weight_rest``) count from the row's first visible key. Such rows come only from captures
  opened with ``sliding="measure"`` (:mod:`normlimits.model.capture`).

Bounds (``L`` visible keys, ``|l_j| <= Delta``, temperature ``T > 0``):

* paper (Corollary 1): ``exp(-2 Delta/T) / L <= alpha_i <= exp(2 Delta/T) / L``;
* sharpened (exact extremes over the box, attained at the corner logit vectors):
  ``1 / (1 + (L-1) exp(2 Delta/T)) <= alpha_i <= exp(2 Delta/T) / (exp(2 Delta/T) + L - 1)``;
* general F (Lemma 1) with ``r = F_max / F_min``: ``1/(1 + (L-1) r) <= alpha_i <= r/(r + L - 1)``.

See :mod:`normlimits.theory.vanishing` for the sympy derivations.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from typing import Iterable, Sequence

import torch
from torch import Tensor

from normlimits.core.fits import loglog_fit
from normlimits.metrics.normalizers import check_temperature, general_normalizer
from normlimits.core import bootstrap as B

DTYPE = torch.float64


# --------------------------------------------------------------------------------------- bounds
def _as_tensor(x, dtype=DTYPE) -> Tensor:
    return torch.as_tensor(x, dtype=dtype)


def _log_other_keys(length) -> Tensor:
    """``log(L - 1)`` (``-inf`` when L = 1), after checking ``L >= 1``."""
    length = _as_tensor(length)
    if bool((length < 1).any()):
        raise ValueError(f"the number of keys L must be at least 1 (got {length.min().item():g}); "
                         "a query row sees at least its own key.")
    return torch.log(length - 1)


def general_log_bounds(log_ratio, length) -> tuple[Tensor, Tensor]:
    """Exact extremes of ``alpha_i = F(l_i)/sum_j F(l_j)`` when ``F_max/F_min = r`` on the logit box.

    ``log_ratio``: ``log r >= 0`` (any shape), ``length``: L >= 1 (broadcastable).
    Returns ``(log_min, log_max)`` with ``min = 1/(1 + (L-1) r)`` and ``max = r/(r + L - 1)``.
    """
    log_ratio = _as_tensor(log_ratio)
    if bool((log_ratio < 0).any()):
        raise ValueError("log(F_max/F_min) must be >= 0 (F_max >= F_min).")
    log_m = _log_other_keys(length)
    log_max = log_ratio - torch.logaddexp(log_ratio, log_m)
    log_min = -torch.logaddexp(torch.zeros_like(log_max), log_m + log_ratio)
    return log_min, log_max


def lemma1_log_constants(log_ratio) -> tuple[Tensor, Tensor]:
    """The paper's Lemma 1 constants ``(log C1, log C2) = (-log r, log r)``."""
    log_ratio = _as_tensor(log_ratio)
    return -log_ratio, log_ratio


def _log_ratio(delta, temperature: float) -> Tensor:
    t = check_temperature(temperature)
    delta = _as_tensor(delta)
    if bool((delta < 0).any()):
        raise ValueError("Delta (a bound on |logit|) must be >= 0.")
    return 2.0 * delta / t


def paper_log_bounds(delta, length, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """Corollary 1 as published: ``(log lower, log upper) = (-2D/T - log L, 2D/T - log L)``.

    ``delta`` in logit units (any shape), ``length`` = L (broadcastable), ``temperature`` > 0.
    """
    log_r = _log_ratio(delta, temperature)
    _log_other_keys(length)
    log_l = torch.log(_as_tensor(length))
    return -log_r - log_l, log_r - log_l


def sharpened_log_bounds(delta, length, temperature: float = 1.0) -> tuple[Tensor, Tensor]:
    """Exact extremes of softmax weights over all logit vectors with ``|l_j| <= Delta``.

    Returns ``(log_min, log_max)``: ``max = e^{2D/T}/(e^{2D/T} + L - 1)``,
    ``min = e^{-2D/T}/(e^{-2D/T} + L - 1)``.
    """
    return general_log_bounds(_log_ratio(delta, temperature), length)


def entropy_floor(delta, length, temperature: float = 1.0) -> Tensor:
    """Lower bound (nats) on a row's entropy: ``-log(sharpened max) = log(1 + (L-1) e^{-2D/T})``."""
    return -sharpened_log_bounds(delta, length, temperature)[1]


def corner_logits(delta: float, length: int, kind: str = "max") -> Tensor:
    """The logit vector that attains the sharpened bound for ``alpha_0``.

    ``kind='max'``: ``l_0 = +Delta``, the other ``L-1`` at ``-Delta``; ``kind='min'``: the reverse.
    Returns a float64 tensor [L].
    """
    if kind not in ("max", "min"):
        raise ValueError(f"kind must be 'max' or 'min' (got {kind!r}).")
    if int(length) < 1:
        raise ValueError(f"the number of keys L must be at least 1 (got {length}).")
    sign = 1.0 if kind == "max" else -1.0
    logits = torch.full((int(length),), -sign * float(delta), dtype=DTYPE)
    logits[0] = sign * float(delta)
    return logits


# ------------------------------------------------------------------------------ row extraction
def check_lengths(lengths: Sequence[int] | Tensor, available: int) -> Tensor:
    """Validate a grid of key counts against the window length; returns a LongTensor [G]."""
    grid = torch.as_tensor(lengths, dtype=torch.long).reshape(-1)
    if grid.numel() == 0:
        raise ValueError("the grid of lengths L is empty; pass e.g. [32, 64, ..., 1024].")
    if bool((grid < 1).any()) or bool((grid > available).any()):
        raise ValueError(f"every L must lie in 1..{available} (the window length); got "
                         f"{grid.tolist()}. Use longer windows or a smaller grid.")
    return grid


def _scale(scale, leading: int, trailing: int) -> Tensor:
    """The logit scale as float64, shaped to broadcast over ``leading`` dims then ``trailing`` ones.

    ``scale`` is a number or a tensor whose shape is a prefix of the leading dims (e.g. the
    per-layer scales [layers] of a capture whose leading dims are [layers, heads]).
    """
    scale = torch.as_tensor(scale, dtype=DTYPE)
    if scale.dim() > leading:
        raise ValueError(f"scale has shape {tuple(scale.shape)}, more dims than the queries' "
                         f"leading dims ({leading}).")
    return scale.reshape(tuple(scale.shape) + (1,) * (leading - scale.dim() + trailing))


def row_logits(queries: Tensor, keys: Tensor, scale, lengths) -> Tensor:
    """Logits of query rows ``L - 1`` for each L in ``lengths``, causally masked.

    ``queries``, ``keys``: [..., K, d] (per head, as the model computes them); ``scale``: the
    model's logit scale (GPT-2: 1/sqrt(d_head)), a number or a tensor over a prefix of the
    leading dims (a capture's per-layer [layers]). Returns float64 [..., G, Kmax] where
    ``Kmax = max(lengths)``; entry ``[g, j]`` is ``scale * q_{L_g - 1} . k_j`` for ``j < L_g``
    and ``-inf`` otherwise.
    """
    grid = check_lengths(lengths, queries.shape[-2])
    kmax = int(grid.max())
    q = queries[..., grid - 1, :].to(DTYPE)                        # [..., G, d]
    k = keys[..., :kmax, :].to(DTYPE)                              # [..., Kmax, d]
    logits = _scale(scale, q.dim() - 2, 2) * (q @ k.transpose(-1, -2))   # [..., G, Kmax]
    visible = torch.arange(kmax)[None, :] < grid[:, None]          # [G, Kmax]
    return logits.masked_fill(~visible, float("-inf"))


def row_deltas(queries: Tensor, keys: Tensor, scale, lengths) -> tuple[Tensor, Tensor]:
    """Per-row Delta and per-key Delta_j for query rows ``L - 1``.

    Returns ``(delta [..., G], key_delta [..., G, Kmax])`` in logit units:
    ``delta = scale * ||q|| * max_{j < L} ||k_j||`` (the bound Corollary 1 needs) and
    ``key_delta[g, j] = scale * ||q|| * ||k_j||`` (the paper's literal ``||q|| ||k||`` read per key;
    0 for masked keys).
    """
    grid = check_lengths(lengths, queries.shape[-2])
    kmax = int(grid.max())
    q_norm = queries[..., grid - 1, :].to(DTYPE).norm(dim=-1)     # [..., G]
    k_norm = keys[..., :kmax, :].to(DTYPE).norm(dim=-1)            # [..., Kmax]
    visible = torch.arange(kmax)[None, :] < grid[:, None]          # [G, Kmax]
    k_vis = k_norm.unsqueeze(-2) * visible                         # [..., G, Kmax]
    key_delta = _scale(scale, q_norm.dim() - 1, 2) * q_norm.unsqueeze(-1) * k_vis
    return key_delta.amax(dim=-1), key_delta


# --------------------------------------------------------------------------------- statistics
@dataclass(frozen=True)
class RowStatistics:
    """Statistics of softmax rows with ``L`` visible keys, for each ``L`` of a grid.

    Leading dimensions ``...`` are whatever the inputs had, e.g. [layers, heads] for one window
    or [windows, layers, heads] after :func:`stack_statistics`; the last dimension is the grid, G.

    Fields:
    ``lengths`` [G] (L); ``temperature``; ``delta`` [..., G] (logit units);
    ``logit_range`` [..., G]: max - min visible logit (the smallest ``2 Delta`` any box bound
    could use); ``max_weight``, ``min_weight`` [..., G]; ``entropy`` [..., G] (nats);
    ``first_key_weight`` [..., G]: weight on key 0; ``argmax_key`` [..., G] (long);
    ``paper_outside``, ``sharp_outside``, ``literal_outside`` [..., G]: keys whose weight lies
    outside the paper's bounds (max-key Delta), the sharpened bounds, and the paper's bounds read
    literally with Delta_j = ||q|| ||k_j|| for key j (counts; the row has L keys);
    ``paper_upper_slack`` = log(upper) - log(max weight), ``paper_lower_slack`` =
    log(min weight) - log(lower), and the same for ``sharp_*`` (nats; >= 0 when the bound holds);
    ``entropy_slack`` = entropy - entropy_floor (nats, >= 0 when the floor holds);
    ``tolerance`` [..., G]: the round-off allowance (nats) used for every comparison;
    ``max_weight_rest`` [..., G]: the largest weight of the row with key 0 removed and the rest
    renormalised (softmax over keys 1..L-1; NaN for L = 1): how the row looks without a
    first-token sink; ``layer_windows``: each layer's sliding window W (0: the layer sees every
    earlier key; None: the rows came without layer windows), for leading dims ending in
    [layers, heads]. A layer with W > 0 has ``min(L, W)`` visible keys per row, and every field is
    that of its row cut to them (module docstring).
    """

    lengths: Tensor
    temperature: float
    delta: Tensor
    logit_range: Tensor
    max_weight: Tensor
    min_weight: Tensor
    entropy: Tensor
    first_key_weight: Tensor
    argmax_key: Tensor
    paper_outside: Tensor
    sharp_outside: Tensor
    literal_outside: Tensor
    paper_upper_slack: Tensor
    paper_lower_slack: Tensor
    sharp_upper_slack: Tensor
    sharp_lower_slack: Tensor
    entropy_slack: Tensor
    tolerance: Tensor
    max_weight_rest: Tensor
    layer_windows: tuple[int, ...] | None = None

    @property
    def keys(self) -> Tensor:
        """Number of keys each row sees, broadcast to ``delta``'s shape [..., G]: L, or
        ``min(L, W)`` in a layer with sliding window W."""
        lengths = self.lengths.to(DTYPE)
        if self.layer_windows is None:
            return lengths.expand_as(self.delta)
        windows = torch.tensor([w if w > 0 else math.inf for w in self.layer_windows], dtype=DTYPE)
        return torch.minimum(lengths, windows[:, None, None]).expand_as(self.delta)

    @property
    def banded(self) -> bool:
        """Whether some rows see fewer keys than their L (a layer's window W below the longest L)."""
        return any(0 < w < int(self.lengths.max()) for w in self.layer_windows or ())

    @property
    def local_layers(self) -> list[int]:
        """The layers with a sliding window (each row sees at most its last W keys)."""
        return [i for i, w in enumerate(self.layer_windows or ()) if w > 0]

    @property
    def global_layers(self) -> list[int]:
        """The layers whose rows see every earlier key (all of them without ``layer_windows``)."""
        if self.layer_windows is None:
            return list(range(self.delta.shape[-3]))
        return [i for i, w in enumerate(self.layer_windows) if w <= 0]

    def fraction_inside(self, kind: str) -> float:
        """Fraction of all (row, key) weights inside a bound: kind in 'paper', 'sharp', 'literal'."""
        outside = {"paper": self.paper_outside, "sharp": self.sharp_outside,
                   "literal": self.literal_outside}[kind]
        return float(1.0 - outside.to(DTYPE).sum() / self.keys.sum())

    def violations(self, kind: str) -> int:
        """Number of weights outside a proven bound ('paper' or 'sharp'), or rows below the
        entropy floor ('entropy')."""
        if kind == "entropy":
            return int((self.entropy_slack < -self.tolerance).sum())
        return int({"paper": self.paper_outside, "sharp": self.sharp_outside}[kind].sum())


def default_tolerance(delta: Tensor, temperature: float) -> Tensor:
    """Round-off allowance (nats) when comparing float64 log-weights with log-bounds."""
    return 1e-9 * (1.0 + 2.0 * delta / temperature)


def row_statistics(logits: Tensor, delta: Tensor, lengths, temperature: float = 1.0,
                   key_delta: Tensor | None = None, tolerance: Tensor | None = None
                   ) -> RowStatistics:
    """Measure softmax rows against the paper's and the sharpened bounds.

    ``logits`` [..., G, K]: row g has its ``L_g`` visible logits first and ``-inf`` after them
    (``K >= max L``); ``delta`` [..., G]: a bound on the row's |visible logits| (logit units);
    ``lengths`` [G]; ``key_delta`` [..., G, K] optional per-key Delta_j for the literal reading
    (defaults to ``delta``); ``tolerance`` [..., G] in nats (default :func:`default_tolerance`).
    """
    t = check_temperature(temperature)
    grid = check_lengths(lengths, logits.shape[-1])
    logits = logits.to(DTYPE)
    delta = delta.to(DTYPE)
    visible = torch.arange(logits.shape[-1])[None, :] < grid[:, None]            # [G, K]
    if bool((torch.isfinite(logits) != visible).any()):
        raise ValueError("logits must be finite exactly on the first L_g keys of row g "
                         "and -inf after them (a causally masked row).")
    tol = default_tolerance(delta, t) if tolerance is None else tolerance.to(DTYPE)
    log_w = torch.log_softmax(logits / t, dim=-1)                                 # [..., G, K]
    weights = log_w.exp()
    lw_vis = log_w.masked_fill(~visible, float("inf"))
    log_max = log_w.amax(dim=-1)
    log_min = lw_vis.amin(dim=-1)
    entropy = -(weights * log_w.masked_fill(~visible, 0.0)).sum(dim=-1)
    l_max = logits.amax(dim=-1)
    l_min = logits.masked_fill(~visible, float("inf")).amin(dim=-1)

    p_lo, p_hi = paper_log_bounds(delta, grid, t)
    s_lo, s_hi = sharpened_log_bounds(delta, grid, t)

    def outside(lo: Tensor, hi: Tensor) -> Tensor:
        bad = (log_w > hi.unsqueeze(-1) + tol.unsqueeze(-1)) | \
              (log_w < lo.unsqueeze(-1) - tol.unsqueeze(-1))
        return (bad & visible).sum(dim=-1)

    kd = delta.unsqueeze(-1).expand_as(logits) if key_delta is None else key_delta.to(DTYPE)
    lit_lo, lit_hi = paper_log_bounds(kd, grid.unsqueeze(-1), t)
    lit_bad = ((log_w > lit_hi + tol.unsqueeze(-1)) | (log_w < lit_lo - tol.unsqueeze(-1)))
    max_rest = torch.full_like(log_max, float("nan"))                # key 0 removed, renormalised
    if logits.shape[-1] > 1:
        rest = torch.log_softmax(logits[..., 1:] / t, dim=-1).amax(dim=-1).exp()
        max_rest = torch.where(grid > 1, rest, max_rest)
    return RowStatistics(
        lengths=grid,
        temperature=t,
        delta=delta,
        logit_range=l_max - l_min,
        max_weight=log_max.exp(),
        min_weight=log_min.exp(),
        entropy=entropy,
        first_key_weight=weights[..., 0],
        argmax_key=log_w.argmax(dim=-1),
        paper_outside=outside(p_lo, p_hi),
        sharp_outside=outside(s_lo, s_hi),
        literal_outside=(lit_bad & visible).sum(dim=-1),
        paper_upper_slack=p_hi - log_max,
        paper_lower_slack=log_min - p_lo,
        sharp_upper_slack=s_hi - log_max,
        sharp_lower_slack=log_min - s_lo,
        entropy_slack=entropy - entropy_floor(delta, grid, t),
        tolerance=tol.expand_as(delta),
        max_weight_rest=max_rest,
    )


def sweep_queries_keys(queries: Tensor, keys: Tensor, scale, lengths,
                       temperature: float = 1.0, windows=None) -> RowStatistics:
    """Length sweep from one window's queries and keys [..., K, d]: rows ``L - 1``, keys ``< L``.

    ``windows``: each layer's sliding window W [layers] (0: none), for queries and keys
    [..., layers, heads, K, d] (a capture's ``windows``); row ``L - 1`` of a layer with W < L then
    sees keys ``L - W .. L - 1`` only, and its statistics are those of that cut row.
    """
    layer_windows = _layer_windows(windows, queries)
    grid = check_lengths(lengths, queries.shape[-2])
    kmax = int(grid.max())
    if layer_windows is None or not any(0 < w < kmax for w in layer_windows):
        logits = row_logits(queries, keys, scale, lengths)
        delta, key_delta = row_deltas(queries, keys, scale, lengths)
        stats = row_statistics(logits, delta, lengths, temperature, key_delta=key_delta)
        return stats if layer_windows is None else replace(stats, layer_windows=layer_windows)
    axis = queries.dim() - 4                                       # the layer axis
    scale = torch.as_tensor(scale, dtype=DTYPE)
    groups: dict[int, list[int]] = {}
    for layer, w in enumerate(layer_windows):
        groups.setdefault(w if 0 < w < kmax else 0, []).append(layer)
    parts, order = [], []
    for w, layers in groups.items():
        index = torch.tensor(layers)
        s = scale.index_select(axis, index) if scale.dim() > axis else scale
        parts.append(window_statistics(queries.index_select(axis, index), keys.index_select(axis, index),
                                       s, grid, w, temperature))
        order += layers
    inverse = torch.argsort(torch.tensor(order))
    merged = {f.name: torch.cat([getattr(p, f.name) for p in parts], dim=axis).index_select(axis, inverse)
              for f in fields(RowStatistics) if isinstance(getattr(parts[0], f.name), Tensor)
              and f.name != "lengths"}
    return replace(parts[0], **merged, layer_windows=layer_windows)


def _layer_windows(windows, queries: Tensor) -> tuple[int, ...] | None:
    """``windows`` as a tuple of ints over the layer axis of ``queries`` [..., layers, heads, K, d];
    None when absent or when no layer has a window."""
    if windows is None:
        return None
    values = tuple(int(w) for w in torch.as_tensor(windows).reshape(-1).tolist())
    if queries.dim() < 4 or len(values) != queries.shape[-4]:
        raise ValueError(f"windows has {len(values)} entries for queries of shape "
                         f"{tuple(queries.shape)}: one per layer ([..., layers, heads, K, d]).")
    return values if any(w > 0 for w in values) else None


def window_statistics(queries: Tensor, keys: Tensor, scale, lengths, window: int,
                      temperature: float = 1.0) -> RowStatistics:
    """Length sweep of layers that all have sliding window ``window`` (0: none): row ``L - 1``
    cut to its ``n = min(L, W)`` visible keys ``L - n .. L - 1``, measured as a row of ``n`` keys;
    ``lengths`` of the result are the grid's L (its :attr:`RowStatistics.keys` then need the
    layers' windows). Shapes as :func:`sweep_queries_keys`."""
    grid = check_lengths(lengths, queries.shape[-2])
    logits = row_logits(queries, keys, scale, grid)                      # [..., G, Kmax]
    delta, key_delta = row_deltas(queries, keys, scale, grid)
    if not 0 < window < int(grid.max()):
        return row_statistics(logits, delta, grid, temperature, key_delta=key_delta)
    counts = grid.clamp(max=window)
    width = int(counts.max())
    visible = torch.arange(width)[None, :] < counts[:, None]             # [G, n]
    columns = torch.where(visible, (grid - counts)[:, None] + torch.arange(width)[None, :], 0)

    def cut(values: Tensor, hidden: float) -> Tensor:
        taken = values.gather(-1, columns.expand(values.shape[:-2] + columns.shape))
        return taken.masked_fill(~visible, hidden)

    key_delta = cut(key_delta, 0.0)
    stats = row_statistics(cut(logits, float("-inf")), key_delta.amax(-1), counts, temperature,
                           key_delta=key_delta)
    return replace(stats, lengths=grid)


def sweep_capture(capture, lengths, temperature: float = 1.0) -> RowStatistics:
    """Length sweep of one :class:`normlimits.model.capture.WindowCapture`; leading dims [layers, heads].
    Each layer's rows see the keys its own mask leaves (the capture's ``windows``)."""
    return sweep_queries_keys(capture.queries, capture.keys, capture.scale, lengths, temperature,
                              getattr(capture, "windows", None))


def layer_kind_medians(stats: RowStatistics):
    """Per L, the median largest weight of the global layers and of each sliding window's local
    layers (over windows, layers of that kind and heads), and the same times the keys the rows see
    (``keys * max alpha``: constant where the largest weight falls as 1 / keys). Columns
    ``global``, ``local W=512``, ..., and ``... x keys``; index L (pandas). Statistics of any
    leading dims ending in [layers, heads, G]."""
    import pandas as pd

    kinds = {"global": stats.global_layers}
    for w in sorted({w for w in stats.layer_windows or () if w > 0}):
        kinds[f"local W={w}"] = [i for i, v in enumerate(stats.layer_windows) if v == w]
    table = {}
    for name, layers in kinds.items():
        if not layers:
            continue
        index = torch.tensor(layers)
        axis = stats.delta.dim() - 3
        weight = stats.max_weight.index_select(axis, index).movedim(-1, 0).reshape(len(stats.lengths), -1)
        keys = stats.keys.index_select(axis, index).movedim(-1, 0).reshape(len(stats.lengths), -1)
        table[name] = weight.median(-1).values.numpy()
        table[f"{name} x keys"] = (weight * keys).median(-1).values.numpy()
    return pd.DataFrame(table, index=pd.Index(stats.lengths.tolist(), name="L"))


def stack_statistics(parts: Iterable[RowStatistics]) -> RowStatistics:
    """Stack per-window statistics along a new leading (window) dimension."""
    parts = list(parts)
    if not parts:
        raise ValueError("no statistics to stack (zero windows).")
    first = parts[0]
    values = {}
    for f in fields(RowStatistics):
        if f.name in ("lengths", "temperature", "layer_windows"):
            values[f.name] = getattr(first, f.name)
        else:
            values[f.name] = torch.stack([getattr(p, f.name) for p in parts])
    return replace(first, **values)


def sweep_captures(captures: Iterable, lengths, temperature: float = 1.0
                   ) -> tuple[RowStatistics, float]:
    """Length sweep over window captures, with a parity check on the first window.

    Returns the statistics stacked over windows ([W, layers, heads, G]) and the largest absolute
    difference between the largest weight recomputed here (float64, from queries and keys) and the
    largest of the model's own weights (``capture.weights``) on the first window.
    """
    parts, parity = [], float("nan")
    for capture in captures:
        stats = sweep_capture(capture, lengths, temperature)
        if not parts:
            rows = torch.as_tensor(list(lengths)) - 1
            own = capture.weights(rows, temperature=temperature).to(DTYPE).amax(-1)
            parity = float((own - stats.max_weight).abs().max())
        parts.append(stats)
    return stack_statistics(parts), parity


def bound_room_table(stats: RowStatistics):
    """How much room the bounds leave on measured rows (pandas): per reading of the bound (the
    paper's with the max-key Delta, the sharpened one, the paper's with the literal per-key
    Delta), the fraction of weights inside, and the median slack above the largest and below the
    smallest weight (nats; the literal reading has no single row bound, so no slack)."""
    import pandas as pd

    nan = float("nan")
    return pd.DataFrame({
        "inside (fraction of weights)": [stats.fraction_inside("paper"), stats.fraction_inside("sharp"),
                                         stats.fraction_inside("literal")],
        "median upper slack log(bound / max alpha)": [float(stats.paper_upper_slack.median()),
                                                      float(stats.sharp_upper_slack.median()), nan],
        "median lower slack log(min alpha / bound)": [float(stats.paper_lower_slack.median()),
                                                      float(stats.sharp_lower_slack.median()), nan],
    }, index=["paper, Delta = |q| max|k_j|", "sharpened", "paper, literal Delta_j = |q||k_j|"])


def synthetic_families(lengths, bounds: Sequence[float] = (0.5, 2.0, 5.0), sink_bound: float = 8.0,
                       trials: int = 256, temperature: float = 1.0, seed: int = 1
                       ) -> dict[str, tuple[float, RowStatistics]]:
    """Softmax rows where Lemma 1's assumptions hold exactly, by family.

    For each bound ``a`` of ``bounds``: i.i.d. logits uniform on ``[-a, a]``
    (:func:`synthetic_bounded_logits`); plus the sink pattern at ``sink_bound``
    (:func:`synthetic_sink_logits`). Returns ``{name: (a, statistics [trials, G])}`` with names
    ``"uniform, a = 0.5"``, ..., ``"sink, a = 8"``; seeds ``seed``, ``seed + 1`` (sink).
    """
    families = {}
    for a in bounds:
        rows = synthetic_bounded_logits(lengths, a, trials, seed=seed)
        families[f"uniform, a = {a:g}"] = (float(a), row_statistics(
            rows, torch.full((trials, len(lengths)), float(a), dtype=DTYPE), lengths, temperature))
    rows = synthetic_sink_logits(lengths, sink_bound, trials, seed=seed + 1)
    families[f"sink, a = {sink_bound:g}"] = (float(sink_bound), row_statistics(
        rows, torch.full((trials, len(lengths)), float(sink_bound), dtype=DTYPE), lengths, temperature))
    return families


def family_table(families: dict[str, tuple[float, RowStatistics]]):
    """One row per family: the fitted exponent of the mean largest weight against L, ``L max alpha``
    at the shortest and longest L, ``e^(2a)`` and the weights outside the proven bounds (pandas)."""
    import pandas as pd

    rows = []
    for name, (a, stats) in families.items():
        mean_max = stats.max_weight.mean(0)
        l_max = mean_max * stats.lengths.to(DTYPE)
        rows.append({"logits": name,
                     "exponent of max alpha": float(loglog_fit(stats.lengths, mean_max).exponent),
                     f"L * max alpha (L={int(stats.lengths[0])})": float(l_max[0]),
                     f"L * max alpha (L={int(stats.lengths[-1])})": float(l_max[-1]),
                     "e^(2a)": math.exp(2 * a),
                     "outside": stats.violations("sharp") + stats.violations("paper")})
    return pd.DataFrame(rows).set_index("logits")


def general_normalizer_check(lengths, F, bound: float, trials: int = 256, seed: int = 3) -> dict:
    """Lemma 1 for a non-exponential ``F`` on uniform logits in ``[-bound, bound]``.

    ``F`` must be positive and continuous on the interval; ``F_max / F_min`` is taken over a grid of
    20,001 points of it (exact for monotone ``F``, and for any ``F`` whose extremes sit on the
    grid). Returns ``{"ratio": F_max/F_min, "outside": weights outside the exact bounds,
    "weights": how many were checked, "exponent": fitted exponent of the mean largest weight
    against L}``.
    """
    rows = synthetic_bounded_logits(lengths, bound, trials, seed=seed)
    weights = general_normalizer(rows, F)
    values = F(torch.linspace(-float(bound), float(bound), 20_001, dtype=DTYPE))
    if not bool((values > 0).all()):
        raise ValueError("F must be positive on [-bound, bound] (Lemma 1's assumption)")
    log_r = float(torch.log(values.max() / values.min()))
    lo, hi = general_log_bounds(log_r, torch.as_tensor(list(lengths), dtype=DTYPE))
    visible = torch.isfinite(rows)
    log_w = torch.log(weights.clamp_min(1e-300))
    outside = ((log_w > hi[:, None] + 1e-12) | (log_w < lo[:, None] - 1e-12)) & visible
    return {"ratio": math.exp(log_r), "outside": int(outside.sum()), "weights": int(visible.sum()),
            "exponent": float(loglog_fit(lengths, weights.amax(-1).mean(0)).exponent)}


def synthetic_bounded_logits(lengths, bound: float, trials: int, seed: int = 0) -> Tensor:
    """Logits where Lemma 1's assumptions hold exactly: i.i.d. uniform on ``[-bound, bound]``.

    Returns float64 [trials, G, Kmax]: row g holds ``L_g`` logits (independent of other rows)
    then ``-inf``. Deterministic for a given seed.
    """
    grid = check_lengths(lengths, int(torch.as_tensor(lengths).max()))
    if trials < 1:
        raise ValueError(f"trials must be >= 1 (got {trials}).")
    if bound < 0:
        raise ValueError(f"the logit bound must be >= 0 (got {bound}).")
    gen = torch.Generator().manual_seed(seed)
    kmax = int(grid.max())
    logits = (2.0 * torch.rand(trials, grid.numel(), kmax, generator=gen, dtype=DTYPE) - 1.0) * bound
    visible = torch.arange(kmax)[None, :] < grid[:, None]
    return logits.masked_fill(~visible, float("-inf"))


def synthetic_sink_logits(lengths, bound: float, trials: int, seed: int = 0) -> Tensor:
    """Bounded logits with one dominant key: key 0 at ``+bound``, the rest uniform on ``[-bound, 0]``.

    Lemma 1's assumptions hold exactly (``|l_j| <= bound``), yet key 0 keeps a weight near
    ``1 / (1 + (L-1) (1 - e^{-bound}) / (bound e^{bound}))``: roughly constant while
    ``L << bound * e^{bound}``, and ``~ 1/L`` only beyond. Same layout as
    :func:`synthetic_bounded_logits`: float64 [trials, G, Kmax], ``-inf`` after ``L_g`` keys.
    """
    logits = synthetic_bounded_logits(lengths, bound, trials, seed)
    logits = torch.where(torch.isfinite(logits), (logits - bound) / 2.0, logits)   # [-bound, 0]
    logits[..., 0] = float(bound)
    return logits


def head_summary(stats: RowStatistics, sink_exponent: float = -0.5):
    """One row per (layer, head) from window-stacked statistics [W, layers, heads, G].

    Columns: ``layer``, ``head``, ``exponent`` (fit of the windows' geometric-mean max weight
    against L), ``exponent_rest`` (the same fit for the largest weight with key 0 removed and the
    row renormalised, ``RowStatistics.max_weight_rest``: is a first-token sink what keeps the
    weight up?), ``max_weight_first`` / ``max_weight_last`` (mean max weight at the smallest and
    largest L), ``entropy_ratio_last`` (mean entropy / log L at the largest L),
    ``first_key_weight_last`` (mean weight on key 0 at the largest L), ``argmax_first_key``
    (fraction of rows, over windows and L, whose largest weight is on key 0),
    ``argmax_distance`` (median over windows and L of how many positions before the query its
    largest weight sits: 0 = the query's own token, ``L - 1`` = key 0),
    ``two_delta_over_t_last`` and ``range_over_t_last`` (median over windows of 2 Delta / T and
    of (max - min logit) / T at the largest L), ``log_keys_last`` (log of the keys a row sees at
    the largest L: L, or min(L, W) in a sliding-window layer; entropy ratios divide by it),
    ``sharp_max_last`` (median sharpened upper bound at the largest L) and ``non_vanishing``
    (exponent > ``sink_exponent``: the largest weight falls slower than ``L^sink_exponent``).
    Returns a pandas DataFrame.
    """
    import pandas as pd

    if stats.delta.dim() != 4:
        raise ValueError("head_summary expects statistics stacked over windows: [W, layers, heads, G].")
    t = stats.temperature
    exponent = loglog_fit(stats.lengths, stats.max_weight.log().mean(0).exp()).exponent
    last = stats.lengths[-1]
    sharp_max = sharpened_log_bounds(stats.delta[..., -1], last, t)[1].exp().median(0).values
    layers, heads = stats.delta.shape[1:3]
    lay, hd = torch.meshgrid(torch.arange(layers), torch.arange(heads), indexing="ij")
    if not stats.banded:
        log_keys = log_column = math.log(int(last))
        before_query = stats.lengths - 1 - stats.argmax_key
    else:                                    # sliding-window layers: the keys each row sees
        log_keys = torch.log(stats.keys[..., -1])                      # [W, layers, heads]
        log_column = log_keys[0].reshape(-1).numpy()
        before_query = stats.keys.long() - 1 - stats.argmax_key
    table = pd.DataFrame({
        "layer": lay.reshape(-1).numpy(),
        "head": hd.reshape(-1).numpy(),
        "exponent": exponent.reshape(-1).numpy(),
        "exponent_rest": loglog_fit(stats.lengths, stats.max_weight_rest.log().mean(0).exp())
                         .exponent.reshape(-1).numpy(),
        "max_weight_first": stats.max_weight[..., 0].mean(0).reshape(-1).numpy(),
        "max_weight_last": stats.max_weight[..., -1].mean(0).reshape(-1).numpy(),
        "entropy_ratio_last": (stats.entropy[..., -1] / log_keys).mean(0).reshape(-1).numpy(),
        "first_key_weight_last": stats.first_key_weight[..., -1].mean(0).reshape(-1).numpy(),
        "argmax_first_key": (stats.argmax_key == 0).to(DTYPE).mean((0, -1)).reshape(-1).numpy(),
        "argmax_distance": before_query.movedim(0, -2)
                           .reshape(layers * heads, -1).to(DTYPE).median(-1).values.numpy(),
        "two_delta_over_t_last": (2 * stats.delta[..., -1] / t).median(0).values.reshape(-1).numpy(),
        "range_over_t_last": (stats.logit_range[..., -1] / t).median(0).values.reshape(-1).numpy(),
        "log_keys_last": log_column,
        "sharp_max_last": sharp_max.reshape(-1).numpy(),
    })
    table["non_vanishing"] = table["exponent"] > sink_exponent
    return table


def nu_intervals(stats: RowStatistics, **bootstrap_settings) -> dict:
    """Percentile bootstrap intervals over the corpus windows of NU's three statistics, each
    computed from a resample of windows exactly as :func:`head_summary` and
    :func:`non_vanishing_report` compute it from all of them (a window's heads stay together).

    ``stats`` stacked over windows [W, layers, heads, G]. Returns ``{"exponent", "entropy",
    "regime"}`` -> :class:`normlimits.core.bootstrap.Interval`: the median over heads of the fitted
    exponent of the resample's geometric-mean largest weight against L; the median over heads of
    the mean entropy / log L at the largest L; the share of rows with L > e^(2 Delta/T). Empty
    with fewer than two windows (nothing to resample). ``bootstrap_settings`` go to
    :func:`normlimits.core.bootstrap.bootstrap_interval` (resamples, level, seed).
    """
    if stats.delta.dim() != 4:
        raise ValueError("nu_intervals expects statistics stacked over windows: [W, layers, heads, G].")
    if stats.delta.shape[0] < 2:
        return {}
    lengths = stats.lengths

    def exponent(resampled: Tensor) -> Tensor:                      # [R, n, layers, heads, G]
        fitted = loglog_fit(lengths, resampled.mean(1).exp()).exponent   # [R, layers, heads]
        return fitted.reshape(fitted.shape[0], -1).quantile(0.5, dim=-1)

    last = torch.log(stats.keys[..., -1]) if stats.banded else math.log(int(lengths[-1]))
    bites = (torch.log(stats.keys) > 2 * stats.delta / stats.temperature).to(DTYPE)
    return {
        "exponent": B.bootstrap_interval(stats.max_weight.to(DTYPE).log(), exponent, **bootstrap_settings),
        "entropy": B.bootstrap_interval(stats.entropy[..., -1].to(DTYPE) / last, B.median_of_means,
                                        **bootstrap_settings),
        "regime": B.bootstrap_interval(bites, B.mean_of_means, **bootstrap_settings),
    }


def nu_interval_sentence(values: dict, intervals: dict) -> str:
    """NU's statistics with their intervals in a sentence for the prose ("95% bootstrap intervals
    over the 8 windows: median exponent -0.41 [-0.47, -0.36], ..."), or why there are none."""
    if not intervals:
        return ("With a single corpus window there is nothing to resample, so the statistics carry "
                "no interval and are graded on their values.")
    first = next(iter(intervals.values()))
    words = {"exponent": "median exponent {:.2f}", "entropy": "median entropy / log L {:.2f}",
             "regime": "share of rows with L > e^(2Δ/T) {:.3f}"}
    digits = {"exponent": 2, "entropy": 2, "regime": 3}
    parts = [words[k].format(values[k]) + f" [{iv.low:.{digits[k]}f}, {iv.high:.{digits[k]}f}]"
             for k, iv in intervals.items()]
    return (f"Resampling the {first.n} corpus windows ({first.resamples:,} percentile bootstrap "
            f"resamples) gives {B.level_words(first)}: " + "; ".join(parts) + ".")


def non_vanishing_report(heads, stats: RowStatistics) -> dict:
    """What the chapter says about the heads whose largest weight does not vanish.

    ``heads``: :func:`head_summary` with a ``head`` label column; ``stats`` stacked over windows.
    Returns ``table`` (the non-vanishing heads, or every head when none is) and the numbers and
    sentences the prose quotes: ``sink_sentence`` (are they first-token sinks, or where do they
    look), ``most_first``, ``nv_2d_min/max`` (their 2 Delta / T at the largest L), ``nv_excess``
    (e^(2 Delta/T) / L at the smallest of those), ``nv_range_min/max``, ``nv_sharp_min``,
    ``nv_range_vs_log``, ``vanish_compare`` (2 Delta / T of vanishing against non-vanishing
    heads), ``rank_corr`` (Spearman, exponent against 2 Delta / T) and ``bite_fraction`` (share of
    rows with L > e^(2 Delta/T), where the lemma forces decay).
    """
    last = int(stats.lengths[-1])
    non_vanishing = heads[heads["non_vanishing"]]
    vanishing_heads = heads[~heads["non_vanishing"]]
    sinks = non_vanishing[non_vanishing["argmax_first_key"] > 0.5]
    most_first = float(heads["argmax_first_key"].max())
    if len(sinks):
        sink_sentence = (f"{len(sinks)} of the {len(non_vanishing)} non-vanishing heads put their largest "
                         f"weight on the first key in most rows: attention sinks.")
    elif len(non_vanishing):
        where = ", ".join(f"{h} {d:.0f}" for h, d in zip(non_vanishing["head"], non_vanishing["argmax_distance"]))
        sink_sentence = (f"None of them is a first-token sink: no head puts its largest weight on key 0 in "
                         f"more than {most_first:.1%} of the rows. Their largest weight sits a median "
                         f"{float(non_vanishing['argmax_distance'].median()):.0f} positions before the query "
                         f"(per head: {where}), so they attend to a recent position, not to the first one.")
    else:
        sink_sentence = "No head is non-vanishing on this model."
    nv = non_vanishing if len(non_vanishing) else heads
    if len(vanishing_heads) and len(non_vanishing):
        compare = (f"the heads that do vanish have a median 2Δ/T of "
                   f"{float(vanishing_heads['two_delta_over_t_last'].median()):.1f}, against "
                   f"{float(nv['two_delta_over_t_last'].median()):.1f} for the non-vanishing ones")
    else:  # one group is empty: say so instead of comparing with a median of nothing
        compare = (f"on this model {'every' if len(non_vanishing) else 'no'} head is non-vanishing, so "
                   f"the two groups cannot be compared here (median 2Δ/T over all heads "
                   f"{float(heads['two_delta_over_t_last'].median()):.1f})")
    two_d_min = float(nv["two_delta_over_t_last"].min())
    return {
        "table": nv.set_index("head")[["exponent", "max_weight_last", "argmax_first_key", "argmax_distance",
                                       "two_delta_over_t_last", "range_over_t_last", "sharp_max_last"]],
        "sink_sentence": sink_sentence, "most_first": most_first,
        "nv_2d_min": two_d_min, "nv_2d_max": float(nv["two_delta_over_t_last"].max()),
        "nv_excess": math.exp(two_d_min) / last,
        "nv_range_min": float(nv["range_over_t_last"].min()),
        "nv_range_max": float(nv["range_over_t_last"].max()),
        "nv_sharp_min": float(nv["sharp_max_last"].min()),
        "nv_range_vs_log": ("is above" if float(nv["range_over_t_last"].min()) > math.log(last)
                            else "is not always above"),
        "vanish_compare": compare,
        "rank_corr": float(heads["exponent"].corr(heads["two_delta_over_t_last"], method="spearman")),
        "bite_fraction": float((torch.log(stats.keys) > 2 * stats.delta / stats.temperature).double().mean()),
    }
