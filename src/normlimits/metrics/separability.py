"""Geometric separability N_s (paper section 2.2, Eq. 10; tested in section 3.2, Figure 3).

Definition (formalised in the book's separability chapter). For one query row with attention
weights ``alpha`` over its visible keys and vectors ``x_j``, let ``I_N`` be the N keys of largest
weight and ``s = sum_{i in I_N} alpha_i x_i`` the context vector. The radius is data-dependent,

    r = min_{j visible, j not in I_N} || s - alpha_j x_j ||_2 ,

so every non-selected token lies outside the open ball of radius r (the closed ball's second
condition holds by construction), and

    N_s = #{ i in I_N : || s - alpha_i x_i ||_2 < r }        (strict: the boundary token does not count).

For N = 1, ``s - alpha_1 x_1 = 0 < r``, so ``N_s / N = 1`` trivially (whenever r > 0; r = 0
only when a non-selected key's ``alpha_j x_j`` equals ``s`` exactly).

Causality: a row at query position t sees keys 0..t only (t + 1 keys). ``N_s`` needs at least
one non-selected visible key, so it is undefined (NaN here) for rows with ``t + 1 <= N``.

Ties in the weights follow the book's rule (:func:`normlimits.core.selection.top_n`: among equal
weights the earlier key ranks first), the same top-N set as the distances and readings use; they
change N_s only at exact ties between positive weights of different vectors (exact zeros are
harmless: a zero-weight token sits at distance ||s|| whether selected or not).

Vectorisation. One partial sort (:func:`normlimits.core.selection.top_n` with K = max N) per row serves every N of
the grid:

- ``s_N`` are prefix sums of the sorted ``alpha_k x_k``, for the whole grid one batched product
  ``[G, K] @ [K, d]`` per row (the [G, K] matrix holds the sorted weights below rank N);
- every distance comes from the expansion ``||alpha_j x_j - s||^2 = ||s||^2 + f_j`` with
  ``f_j = alpha_j (alpha_j ||x_j||^2 - 2 <x_j, s>)``; the inner products with all keys are one
  matrix product ``[rows * G, d] @ [d, keys]`` per block of heads and rows (keys limited to the
  block's causal range); the top-K keys' ``f`` serve both the selected tokens (rank < N) and the
  non-selected ranks N..K-1, and every other key (rank >= K) is non-selected for every N;
- a selected token is inside when ``f_i < min_{j not selected} f_j``: the common ``||s||^2``
  cancels exactly, so near-ties are decided without rounding the large term (single precision
  is enough), and the top-K keys' ``f`` is rounded exactly like every other key's (exact
  duplicates tie exactly);
- each ``f_j``'s rounding error is proportional to its weight (about ``alpha_j ||x_j|| ||s||``
  units, :func:`_tie_slack`; plus an absolute floor for results below float64's smallest
  normal, :func:`_underflow_floor`), so a tie is undecided only within the error of the selected
  key's ``f`` plus that of the minimum (whose weight is at most the N-th largest), and never more
  than the scale-wide bound ``4 (d + 4) u (||s||^2 + max_j ||alpha_j x_j||^2)``. float64's own
  distances would round ``||alpha_j x_j - s||`` to ``||s||`` for every key of weight below about
  1e-16 of the rest (stick-breaking's rows fall to 1e-227) and decide such ties by rounding;
- where the expansion still cannot decide (a selected token's ``f`` within that error bound
  of the minimum, or ``r^2`` below ``2^-9`` of that scale: near-duplicate vectors), that (row, N)
  problem goes to :func:`_exact_problems`: every key's ``f`` again in float64 with its own error
  bound decides most keys, and the rest (the selected keys still within their bound of the
  minimum, the non-selected keys that may be the minimum) are compared in exact integer
  arithmetic, with ``s`` and ``r^2`` exact. One undecided key no longer puts every other key of
  the problem to a float comparison, an exact tie at the radius is outside (strict), and ``r`` is
  the exact radius rounded (two copies of a vector whose weights differ by one unit in the last
  place give ``r`` of about 1e-17 > 0, where float64 differences gave 0). Near-duplicates are
  re-solved whatever the inputs' dtype (the expansion's r is then all rounding, in float32 as in
  float64: a token repeated with nearly equal weight, as in a RoPE model's first layer, whose
  values depend on the token alone); near-ties for float64 inputs only (float32 ones keep single
  precision there). So for float64 inputs the result is N_s of the inputs taken exactly
  (checked against :func:`reference_fraction` with ``digits``, exact integer arithmetic), and
  N = 1 gives ``N_s / N = 1`` whenever ``r > 0``.

No Python loop runs over tokens or N; the loop is over blocks of (layer, head) pairs and of
rows, which bounds memory at about ``block_elements`` floats per temporary. The exact refinement
loops over its own (row, N) problems, each vectorised over its keys (numpy arrays of Python
integers); on a 9-head, 1024-key window with every value a copy of one of 300 token vectors and
nearly equal weights for copies, about 700 of 15,000 problems go there, for under a second.

Assumption 2's delta, the minimum pairwise distance of the vectors, is exact but screened in
float32 (:func:`min_pairwise_distance`). The sweep over a model's windows is
:mod:`normlimits.experiments.separability_sweep`; several heads, :mod:`normlimits.metrics.multihead`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from normlimits.core.protocol import SEPARABILITY_SPACED_ROWS
from normlimits.metrics.gram import GRAM_FLOOR
from normlimits.core.selection import top_n
from normlimits.core.validation import all_finite, finite_vectors, finite_weights
from normlimits.metrics.jacobian import default_rows

__all__ = [
    "SeparabilityResult",
    "check_n_grid",
    "distinct_heads",
    "project_to_sphere",
    "FLOAT32_UNIT",
    "screen_margin",
    "min_pairwise_distance",
    "min_pairwise_distance_reference",
    "SPACED_ROW_COUNT",
    "spaced_rows",
    "row_chunks",
    "geometric_separability",
    "reference_fraction",
]


@dataclass
class SeparabilityResult:
    """N_s/N for every (batch..., row, N).

    Fields (``*batch`` are the leading dims of the weights, e.g. [layers, heads]):

    - ``n_grid``: LongTensor [G], the N values.
    - ``rows``: LongTensor [R], query positions of the rows (causal visibility: keys 0..row).
    - ``fraction``: [*batch, R, G], N_s/N; NaN where the row sees <= N keys.
    - ``radius``: [*batch, R, G], the data-dependent r (same units as the vectors); NaN likewise.
    - ``count``: [*batch, R, G], N_s as float (NaN likewise).
    - ``top_weights``: [*batch, R, K] sorted weights of the top-K keys (K = max N), 0 where a row
      has fewer than K visible keys; only with ``keep_selection=True``, else None.
    - ``order``: LongTensor [*batch, R, K], key indices of those top-K keys (same condition).
    - ``distinguishable``: BoolTensor [*batch, R, G, K], True where the key of rank k is selected
      (k < N) and distinguishable; False elsewhere and on NaN rows (same condition).
    """

    n_grid: Tensor
    rows: Tensor
    fraction: Tensor
    radius: Tensor
    count: Tensor
    top_weights: Tensor | None = None
    order: Tensor | None = None
    distinguishable: Tensor | None = None


def check_n_grid(n_grid, length: int) -> Tensor:
    """Validate an N grid for windows of ``length`` keys; returns a sorted, unique LongTensor.

    Every N must lie in 1..length-1: N_s needs at least one non-selected key (the radius is a
    minimum over them), so N = length has no radius.
    """
    grid = torch.as_tensor(n_grid).flatten()
    if grid.is_floating_point():
        if not bool(torch.isfinite(grid).all()) or not torch.equal(grid, grid.round()):
            raise ValueError(f"top-N sizes must be integers (got {grid.tolist()}).")
    elif grid.dtype == torch.bool or grid.is_complex():
        raise ValueError(f"top-N sizes must be integers (got {grid.tolist()}).")
    grid = grid.long()
    if grid.numel() == 0:
        raise ValueError("the N grid is empty; pass at least one top-N size, e.g. [1, 2, 4, 8].")
    if int(grid.min()) < 1 or int(grid.max()) > length - 1:
        raise ValueError(
            f"every N must lie in 1..L-1 = 1..{length - 1} for windows of L = {length} keys "
            f"(got min {int(grid.min())}, max {int(grid.max())}); N_s needs at least one "
            "non-selected key to define the radius r. Shrink the N grid or use longer windows.")
    return torch.unique(grid)  # sorted


def project_to_sphere(vectors: Tensor, radius: float = 1.0, eps: float = 1e-12) -> Tensor:
    """Scale every vector (last dim) to norm ``radius`` (Assumption 1's sphere S^{d-1}(M)).

    Shape preserved. Zero vectors raise: they have no direction to keep.
    """
    if not radius > 0:
        raise ValueError(f"the sphere radius M must be > 0 (got {radius!r}).")
    norms = vectors.norm(dim=-1, keepdim=True)
    if bool((norms <= eps).any()):
        raise ValueError("cannot project a zero vector onto the sphere; drop it or perturb it.")
    return vectors * (radius / norms)


#: unit roundoff of float32 (2^-24): the screen of :func:`min_pairwise_distance` budgets its
#: rounding in multiples of it
FLOAT32_UNIT = 2.0 ** -24


def screen_margin(dim: int) -> float:
    """Relative rounding margin ``c`` of the float32 screen for ``dim``-dimensional vectors.

    The screen computes every squared distance as ONE float32 dot product of augmented vectors,
    ``[x_i, n_i, 1] . [-2 x_j, 1, n_j] = n_i + n_j - 2 <x_i, x_j>`` (``n = ||x||^2``), so its
    error is the error of a (d+2)-term dot product, ``<= gamma_{d+2} sum_k |a_ik b_jk|`` for any
    summation order (Higham, *Accuracy and Stability of Numerical Algorithms*, Eq. 3.5), plus
    the rounding of the inputs to float32 (``<= 3u (n_i + n_j)``). With ``2|<x_i, x_j>| <= n_i +
    n_j`` the total is below ``c (n_i + n_j)`` for ``c = 1.05 (2 d + 10) u``, ``u = 2^-24``
    (valid while ``(d + 2) u < 0.01``, i.e. d up to ~1.6e6).
    """
    if dim < 1:
        raise ValueError(f"the vectors' dimension must be >= 1 (got {dim}).")
    if (dim + 2) * FLOAT32_UNIT >= 0.01:
        raise ValueError(f"dimension {dim} is too large for the float32 screen's error bound.")
    return 1.05 * (2 * dim + 10) * FLOAT32_UNIT


def _lower_triangle(size: int) -> Tensor:
    """BoolTensor [size, size], True at and below the diagonal (``j <= i``)."""
    return torch.ones(size, size, dtype=torch.bool).tril()


def min_pairwise_distance_reference(vectors: Tensor) -> Tensor:
    """The slow, obviously exact path: float64 ``||x_i - x_j||`` of every pair, one leading index
    at a time (memory L^2 d). ``vectors`` [..., L, d] -> [...] float64."""
    lead = vectors.shape[:-2]
    length = vectors.shape[-2]
    if length < 2:
        raise ValueError("the minimum pairwise distance needs at least two vectors.")
    flat = vectors.reshape(-1, length, vectors.shape[-1]).double()
    iu = torch.triu_indices(length, length, 1)
    out = torch.stack([(x[iu[0]] - x[iu[1]]).norm(dim=-1).min() for x in flat])
    return out.reshape(lead)


def min_pairwise_distance(vectors: Tensor, *, pair_chunk: int = 1 << 16, block_rows: int = 128) -> Tensor:
    """Assumption 2's delta: the minimum Euclidean distance over pairs i != j of the rows of
    ``vectors`` [..., L, d]; returns float64 [...] (one value per leading index).

    Exact, i.e. the float64 norm ``||x_i - x_j||`` of the closest pair, as
    :func:`min_pairwise_distance_reference` computes it, but without an L x L float64 product:

    1. *screen*: every squared distance ``D2_ij``, ``i < j``, in float32 from batched products
       of augmented vectors (:func:`screen_margin`), which is within ``E = 2 c max_i n_i`` of the
       truth. Only the upper triangle is formed: rows in blocks of ``block_rows``, block ``I``
       against the columns from its own first row on (the part of the diagonal block at or
       below the diagonal is discarded), so the products cost about ``(1 + block_rows / L) / 2``
       of the full ``L x L`` one (56 % at L = 1024 and 128-row blocks). Every unordered pair is
       screened exactly once, and the entry's error bound does not depend on which block
       computes it (the bound holds for a dot product in any summation order);
    2. *check*: with ``m`` the screened minimum over the pairs, the closest pair's true ``D2*``
       satisfies ``D2* <= (true D2 of the pair screened at m) <= m + E``, and its own screened
       value is at most ``D2* + E <= m + 2 E``. So every pair whose screened value is within
       ``2 E`` of ``m`` is a candidate (the threshold is rounded up, never down); only those are
       recomputed in float64 (differences ``x_i - x_j``, ``i < j``, exactly as the reference
       path computes them), in chunks of ``pair_chunk``. The result is therefore the float64
       minimum over ALL pairs, bit for bit :func:`min_pairwise_distance_reference`'s.

    Falls back to float64 Gram matrices when torch's float32 matmul precision is not
    ``"highest"`` (reduced-precision products void the bound).
    """
    if vectors.dim() < 2:
        raise ValueError("vectors must be [..., L, d].")
    lead = vectors.shape[:-2]
    length, dim = vectors.shape[-2], vectors.shape[-1]
    if length < 2:
        raise ValueError("the minimum pairwise distance needs at least two vectors.")
    if pair_chunk < 1:
        raise ValueError("pair_chunk must be >= 1.")
    if block_rows < 1:
        raise ValueError("block_rows must be >= 1.")
    x = vectors.reshape(-1, length, dim)
    norms2 = (x.double() ** 2).sum(-1)  # [B, L], float64
    if not bool(torch.isfinite(norms2).all()):
        raise ValueError("the vectors hold inf or NaN; the minimum distance is undefined.")
    screen_dtype = torch.float32
    if torch.get_float32_matmul_precision() != "highest" or float(norms2.max()) > 1e30:
        screen_dtype = torch.float64  # reduced-precision products or float32 overflow void the bound
    c = screen_margin(dim) if screen_dtype == torch.float32 else 1e-13 * (dim + 10)
    xs, n_s = x.to(screen_dtype), norms2.to(screen_dtype)[..., None]
    ones = torch.ones_like(n_s)
    left = torch.cat([xs, n_s, ones], -1)                          # [B, L, d + 2]
    right = torch.cat([-2.0 * xs, ones, n_s], -1).transpose(1, 2)  # [B, d + 2, L]
    blocks = []  # (first row, [B, rows, L - first row]): n_i + n_j - 2 <x_i, x_j> for j > i only
    for i0 in range(0, length, block_rows):
        i1 = min(length, i0 + block_rows)
        d2 = torch.bmm(left[:, i0:i1], right[:, :, i0:])
        d2[:, :, :i1 - i0].masked_fill_(_lower_triangle(i1 - i0), float("inf"))  # j <= i
        blocks.append((i0, d2))
    row_min = torch.cat([d2.amin(-1) for _, d2 in blocks], 1)  # [B, L]
    threshold = row_min.amin(-1).double() + 4.0 * c * norms2.amax(-1)  # screened min + 2 E
    bound = threshold.to(screen_dtype)
    bound = torch.where(bound.double() < threshold, bound.nextafter(torch.full_like(bound, float("inf"))),
                        bound)  # never round the threshold down
    rb, ri = torch.nonzero(row_min <= bound[:, None], as_tuple=True)  # rows holding a candidate
    b_parts, i_parts, j_parts = [], [], []
    for i0, d2 in blocks:  # the candidates' columns, block by block
        here = (ri >= i0) & (ri < i0 + d2.shape[1])
        hb, hi = rb[here], ri[here]
        sub, sj = torch.nonzero(d2[hb, hi - i0] <= bound[hb, None], as_tuple=True)
        b_parts.append(hb[sub])
        i_parts.append(hi[sub])
        j_parts.append(sj + i0)
    b_idx, i_idx, j_idx = torch.cat(b_parts), torch.cat(i_parts), torch.cat(j_parts)
    x = x.double()
    out = torch.full((x.shape[0],), float("inf"), dtype=torch.float64)
    for start in range(0, b_idx.numel(), pair_chunk):
        sl = slice(start, start + pair_chunk)
        dist = (x[b_idx[sl], i_idx[sl]] - x[b_idx[sl], j_idx[sl]]).norm(dim=-1)
        out.scatter_reduce_(0, b_idx[sl], dist, reduce="amin")
    return out.reshape(lead)


#: query rows per window of the benchmark's separability workload (evenly spaced, see
#: :func:`spaced_rows`); the chapter measures what this subsample changes against every row.
SPACED_ROW_COUNT = SEPARABILITY_SPACED_ROWS


def distinct_heads(vectors: Tensor) -> tuple[Tensor, Tensor]:
    """The heads of ``vectors`` [H, L, d] whose vectors differ from the previous head's, and the
    group of every head: ``(vectors[first of each group], LongTensor [H])``.

    Grouped-query attention expands each key/value head to the query heads of its group, which
    sit next to each other and hold bit-identical copies; a per-head statistic of the vectors
    alone (Assumption 2's delta) is then computed once per group. Heads with equal vectors that
    are not adjacent stay separate (still correct, just not shared).
    """
    if vectors.dim() != 3:
        raise ValueError(f"vectors must be [heads, L, d] (got {tuple(vectors.shape)}).")
    heads = vectors.shape[0]
    same = torch.tensor([False] + [torch.equal(vectors[h], vectors[h - 1]) for h in range(1, heads)])
    group = torch.cumsum((~same).long(), 0) - 1
    return vectors[~same], group


def spaced_rows(length: int, count: int = SPACED_ROW_COUNT) -> Tensor:
    """``count`` query positions evenly spaced over a window of ``length`` tokens, LongTensor [count].

    The same positions as :func:`normlimits.metrics.jacobian.default_rows` (the last one is ``length - 1``):
    an unbiased subsample of the paper's average over every token ``t`` of the window.
    """
    return default_rows(length, count)


def _resolve_rows(rows, n_rows: int, length: int, causal: bool) -> Tensor:
    if rows is None:
        if causal and n_rows != length:
            raise ValueError(
                f"causal weights with {n_rows} rows over {length} keys need `rows` (the query "
                "position of each row); pass rows=LongTensor of positions, or causal=False.")
        return torch.arange(n_rows) if causal else torch.full((n_rows,), length - 1)
    rows = torch.as_tensor(rows, dtype=torch.long).flatten()
    if rows.numel() != n_rows:
        raise ValueError(f"`rows` has {rows.numel()} positions but the weights have {n_rows} rows.")
    if n_rows and (int(rows.min()) < 0 or int(rows.max()) > length - 1):
        raise ValueError(f"query positions must lie in 0..{length - 1} (got "
                         f"{int(rows.min())}..{int(rows.max())}).")
    return rows


def row_chunks(positions: Tensor, row_chunk: int, length: int | None) -> list[tuple[int, int]]:
    """Blocks ``[(start, stop), ...]`` of consecutive entries of the sorted query ``positions``
    [R]: at most ``row_chunk`` rows each and, for causal rows (``length`` given), positions at most
    ``max(1, length // 8)`` apart within a block. A block's keys run to its last row's position,
    so this bounds the masked keys a row pays for by L/8 (with 128 evenly spaced rows of a
    1024-token window: 8 blocks of 16 rows instead of one block whose first rows see 16 of its
    1024 keys). Every row's result is the same whatever the blocks (rows are independent).
    ``length`` None (non-causal): blocks of ``row_chunk`` rows."""
    if row_chunk < 1:
        raise ValueError("row_chunk must be >= 1.")
    pos = positions.tolist()
    span = None if length is None else max(1, length // 8)
    out, start = [], 0
    while start < len(pos):
        stop = min(len(pos), start + row_chunk)
        if span is not None:
            limit = pos[start] + span
            stop = start + 1 + sum(1 for q in pos[start + 1:stop] if q <= limit)
        out.append((start, stop))
        start = stop
    return out


def geometric_separability(weights: Tensor, vectors: Tensor, n_grid, rows=None, *,
                           causal: bool = True, keep_selection: bool = False,
                           row_chunk: int = 128, block_elements: int = 8_000_000,
                           method: str = "auto") -> SeparabilityResult:
    """N_s/N (paper Eq. 10) for every row of ``weights`` and every N of ``n_grid`` at once.

    Args:
        weights: [*batch, R, L] attention weights (rows of a softmax; masked keys may hold any
            finite value, they are ignored when ``causal``).
        vectors: [*vbatch, L, d] the x_j per key, ``vbatch`` broadcastable to ``batch`` (e.g.
            values [layers, heads, L, d], or hidden states [layers, 1, L, d] shared by the heads).
        n_grid: the top-N sizes, each in 1..L-1.
        rows: LongTensor [R], query position of each row; None means 0..L-1 (requires R == L)
            when causal, all keys visible otherwise.
        causal: a row at position t sees keys 0..t only. False: every row sees all L keys.
        keep_selection: also return the top-K order, weights and distinguishable masks
            (needed by the multi-head measurements and by the plug-in bounds).
        row_chunk: at most this many rows per block (:func:`row_chunks`: causal rows whose
            positions lie more than L/8 apart go to different blocks, so that a block's keys, cut
            at its last row's position, are not mostly masked for its first rows).
        block_elements: (layer, head) pairs are processed together in blocks of at most
            ``block_elements // (rows * G * keys)`` (the block's rows and key range); memory
            ~ 3 * block_elements floats.
        method: how the inner products ``<x_j, s_N>`` are formed. ``"direct"``: ``s_N`` times
            every key, ``d`` multiply-adds per (row, N, key); ``"gram"`` (vectors shared by the
            whole batch only, e.g. a layer's hidden states): from the Gram matrix ``X X^T``,
            ``<x_j, s_N> = sum_{k<N} alpha_k <x_j, x_k>``, K = max N multiply-adds, cheaper when
            ``d > K``; ``"auto"``: ``"gram"`` when the vectors are shared and ``d > K``.

    Returns:
        :class:`SeparabilityResult`; computation in the dtype of ``weights``/``vectors``.
    """
    if weights.dim() < 2 or vectors.dim() < 2:
        raise ValueError("weights must be [..., R, L] and vectors [..., L, d].")
    finite_vectors(vectors, argument="vectors")
    *batch, n_rows, length = weights.shape
    if vectors.shape[-2] != length:
        raise ValueError(f"weights have {length} keys but vectors have {vectors.shape[-2]}.")
    if row_chunk < 1:
        raise ValueError("row_chunk must be >= 1.")
    grid = check_n_grid(n_grid, length)
    rows = _resolve_rows(rows, n_rows, length, causal)
    if not causal or not all_finite(weights):
        finite_weights(weights)          # raises on NaN/inf anywhere, on negatives when not causal
    elif weights.numel() and float(weights.amin()) < 0:
        # masked keys may hold any finite value: only the visible ones must be >= 0
        finite_weights(weights.masked_fill(torch.arange(length)[None, :] > rows[:, None], 0.0))
    if method not in ("auto", "direct", "gram"):
        raise ValueError(f"method must be 'auto', 'direct' or 'gram' (got {method!r}).")
    dtype = torch.promote_types(weights.dtype, vectors.dtype)
    dim = vectors.shape[-1]
    n_g = grid.numel()
    k_max = int(grid[-1])

    batch = tuple(batch)
    try:
        vbatch = torch.broadcast_shapes(tuple(vectors.shape[:-2]), batch)
    except RuntimeError:
        raise ValueError(f"vectors' leading shape {tuple(vectors.shape[:-2])} does not broadcast "
                         f"to the weights' {batch}.") from None
    if vbatch != batch:
        raise ValueError(f"vectors' leading shape {tuple(vectors.shape[:-2])} would enlarge the "
                         f"weights' batch {batch}.")
    w_flat = weights.reshape(-1, n_rows, length)
    n_batch = w_flat.shape[0]
    # map each flat batch index to the index of its vectors (broadcast without copying)
    v_lead = tuple(vectors.shape[:-2])
    v_index = torch.broadcast_to(torch.arange(math.prod(v_lead)).reshape(v_lead), batch).reshape(-1)
    v_flat = vectors.reshape(-1, length, dim).to(dtype)
    norms2 = (v_flat * v_flat).sum(-1)  # [Bv, L]
    v_t = v_flat.transpose(1, 2).contiguous()  # [Bv, d, L]
    one_set = v_flat.shape[0] == 1
    if method == "gram" and not one_set:
        raise ValueError("method='gram' needs one set of vectors shared by the whole batch "
                         f"(got {v_flat.shape[0]} sets); use 'direct'.")
    # the direct-difference refinement of undecidable problems. Near-duplicate problems (r^2 below
    # GRAM_FLOOR of the scale, e.g. a token repeated with nearly equal weight where a layer's
    # values depend on the token alone, as in a RoPE model's first layer) are re-solved in every
    # dtype: there the expansion's result is all rounding, in float32 as in float64. Near-ties of a
    # selected token's f with the minimum are re-solved for float64 computations only (in float32
    # the expansion's error bound, ~1e-4 of the scale, would send a large share of the problems
    # there; those results keep single precision, which the sweep's margins allow for).
    refine_ties = dtype == torch.float64
    use_gram = method == "gram" or (method == "auto" and one_set and dim > k_max)
    gram = v_flat[0] @ v_t[0] if use_gram else None  # [L, L]: <x_i, x_j>
    per_key = k_max if use_gram else n_g  # the largest temporary: [heads, rows, per_key, keys]

    fraction = torch.full((n_batch, n_rows, n_g), float("nan"), dtype=dtype)
    radius = torch.full_like(fraction, float("nan"))
    count = torch.full_like(fraction, float("nan"))
    top_w = order = dist_mask = None
    if keep_selection:
        top_w = torch.zeros((n_batch, n_rows, k_max), dtype=dtype)
        order = torch.zeros((n_batch, n_rows, k_max), dtype=torch.long)
        dist_mask = torch.zeros((n_batch, n_rows, n_g, k_max), dtype=torch.bool)
    packed = (grid, rows, batch, fraction, radius, count, top_w, order, dist_mask)
    if n_rows == 0:
        return _pack(*packed)

    visible_counts = rows + 1 if causal else torch.full_like(rows, length)
    ranks = torch.arange(k_max)
    selected = ranks[None, :] < grid[:, None]  # [G, K]
    prefix = selected.to(dtype)  # [G, K]: s_N = sum over ranks k < N
    if causal and bool((rows[1:] < rows[:-1]).any()):
        row_sort = torch.argsort(rows)
    else:
        row_sort = None  # rows already in increasing order: chunks are slices (no copies)
    inf = torch.tensor(float("inf"), dtype=dtype)
    zero = torch.zeros((), dtype=dtype)

    ordered = rows if row_sort is None else rows[row_sort]
    for start, stop in row_chunks(ordered, row_chunk, length if causal else None):
        sel_rows = slice(start, stop) if row_sort is None else row_sort[start:stop]
        pos = rows[sel_rows]  # [Rc]
        n_chunk = pos.numel()
        n_keys = max(int(pos.max()) + 1, k_max) if causal else length
        batch_block = max(1, min(n_batch, block_elements // max(1, n_chunk * per_key * n_keys)))
        if causal:
            visible = torch.arange(n_keys)[None, :] <= pos[:, None]  # [Rc, Lc]
        else:
            visible = torch.ones(n_chunk, n_keys, dtype=torch.bool)
        hidden = ~visible
        n_vis = visible_counts[sel_rows]  # [Rc]
        defined = n_vis[:, None] > grid[None, :]  # [Rc, G]
        valid_rank = ranks[None, :] < n_vis[:, None]  # [Rc, K]
        nonsel_top = (~selected)[None] & valid_rank[:, None, :]  # [Rc, G, K]
        keep = selected[None] & defined[..., None]  # [Rc, G, K]
        for b0 in range(0, n_batch, batch_block):
            bs = slice(b0, min(b0 + batch_block, n_batch))
            n_b = bs.stop - bs.start
            a = w_flat[bs, sel_rows, :n_keys].to(dtype)  # [Bg, Rc, Lc]
            vi = v_index[bs]
            shared = bool((vi == vi[0]).all())
            x_t = v_t[vi[0], :, :n_keys] if shared else v_t[vi, :, :n_keys]  # [(Bg,) d, Lc]
            xx = norms2[vi, :n_keys]  # [Bg, Lc]
            # the book's tie rule (normlimits.core.selection): among equal weights the earlier key
            vals, idx = top_n(a.masked_fill(hidden, float("-inf")), k_max)  # [Bg, Rc, K]
            vals = torch.where(valid_rank, vals, zero)
            # s_N for every N of the grid: [Bg*Rc, G, K] @ [Bg*Rc, K, d] -> [Bg, Rc, G, d]
            if use_gram:
                xs = None
            elif shared:
                xs = v_flat[vi[0]][idx]  # [Bg, Rc, K, d]
            else:
                xs = v_flat[vi[:, None, None], idx]
            coef = prefix * vals[:, :, None, :]  # [Bg, Rc, G, K]: the weights summed into s_N
            if use_gram:  # -2 <x_j, s_N> = sum_k (-2 coef_k) <x_k, x_j>, from the Gram rows
                ip = torch.matmul(coef * -2.0, gram[idx, :n_keys])  # [Bg, Rc, G, Lc]
                ip_top = torch.gather(ip, 3, idx[:, :, None, :].expand(n_b, n_chunk, n_g, k_max))
                ss = (coef * ip_top).sum(-1) * -0.5  # ||s_N||^2 = sum_k coef_k <x_k, s_N>
            else:
                s = torch.matmul(coef, xs)  # [Bg, Rc, G, d]
                ss = (s * s).sum(-1)  # [Bg, Rc, G]
                s_m2 = s.mul_(-2.0)  # exact (a power of two): the products are -2 <x_j, s_N>
                if shared:  # one matrix product for the block
                    ip = (s_m2.reshape(-1, dim) @ x_t).view(n_b, n_chunk, n_g, n_keys)
                else:
                    ip = torch.bmm(s_m2.reshape(n_b, -1, dim), x_t).view(n_b, n_chunk, n_g, n_keys)
                ip_top = torch.gather(ip, 3, idx[:, :, None, :].expand(n_b, n_chunk, n_g, k_max))
            # f = alpha^2 ||x||^2 + alpha (-2 <x, s_N>), and dist^2 = ||s||^2 + f; the same
            # expression for the top-K keys and for the rest, so ties are decided alike
            xx_top = torch.gather(xx, 1, idx.reshape(n_b, -1)).view(n_b, n_chunk, k_max)
            # (ip a, then + a^2 ||x||^2: two roundings, exactly the tail's below, so that equal
            # vectors with equal weights get equal f whichever side of the top N they fall on)
            f_top = torch.mul(ip_top, vals[:, :, None, :]).add_((vals * vals * xx_top)[:, :, None, :])
            min_top = f_top.masked_fill(~nonsel_top, inf).amin(-1)  # [Bg, Rc, G]
            # every other visible key (rank >= K) is non-selected for every N of the grid
            tail = visible.expand(n_b, n_chunk, n_keys).scatter(2, idx, False)
            a_t = torch.where(tail, a, zero)
            yy = a * a * xx[:, None, :]  # ||alpha_j x_j||^2, [Bg, Rc, Lc]
            c_t = torch.where(tail, yy, inf)
            f_tail = ip.mul_(a_t[:, :, None, :]).add_(c_t[:, :, None, :]).amin(-1)
            min_f = torch.minimum(min_top, f_tail)  # [Bg, Rc, G]: r^2 = ||s||^2 + min_f
            # X_i < r  <=>  X_i^2 - ||s||^2 < r^2 - ||s||^2: compare the f's, in which ||s||^2
            # cancels exactly (no rounding of the large common term; near-ties stay resolved)
            inside = (f_top < min_f[..., None]) & keep
            r2 = (ss + min_f).clamp_min_(0.0)
            radius_b = r2.sqrt()
            # Where the expansion cannot decide (near-duplicate vectors: r^2 small against
            # ||s||^2 + max ||alpha_j x_j||^2, or a selected token's f within the expansion's
            # error of min f), the problem is solved again, its undecided keys and its radius
            # in exact arithmetic (_exact_problems; such problems are rare in attention data).
            s_bound = (coef * xx_top.sqrt()[:, :, None, :]).sum(-1)  # >= ||s_N||
            scale = s_bound * s_bound + torch.where(visible, yy, zero).amax(-1)[..., None]
            slack = _expansion_error(dim if not use_gram else max(dim, k_max), dtype) * scale
            delicate = r2 < scale * GRAM_FLOOR
            if refine_ties:
                # a selected key of weight 0 is decided without rounding: its f is exactly 0, and
                # so is that of the key ranked N (weight 0 too: the ranks are by weight, which is
                # >= 0, and a defined row has one), so min f <= 0 exactly and the key is outside
                # (the sparse normalisers' rows, softmax's at low T, hold many such keys)
                near = ((f_top - min_f[..., None]).abs() <= _tie_slack(
                    slack, vals, xx_top, xx, visible, s_bound, grid, dim + k_max, dtype)) & keep
                delicate |= (near & (vals != 0)[:, :, None, :]).any(-1)
            delicate &= defined
            if bool(delicate.any()):
                pb, pr, pg = delicate.nonzero(as_tuple=True)
                vecs = v_flat[vi[pb], :n_keys] if not shared else v_flat[vi[0], :n_keys]
                d_rad, d_in = _exact_problems(
                    a[pb, pr], vecs, idx[pb, pr], visible[pr], grid[pg], k_max, block_elements)
                inside[pb, pr, pg] = d_in
                radius_b[pb, pr, pg] = d_rad.to(dtype)
            cnt = inside.sum(-1).to(dtype)
            fraction[bs, sel_rows] = torch.where(defined, cnt / grid.to(dtype), torch.nan)
            count[bs, sel_rows] = torch.where(defined, cnt, torch.nan)
            radius[bs, sel_rows] = torch.where(defined, radius_b, torch.nan)
            if keep_selection:
                top_w[bs, sel_rows] = vals
                order[bs, sel_rows] = idx
                dist_mask[bs, sel_rows] = inside
    return _pack(*packed)


def _expansion_error(dim: int, dtype: torch.dtype) -> float:
    """Relative error bound of the expansion ``||s||^2 + alpha^2 ||x||^2 - 2 alpha <x, s>`` (and
    of the difference of two such values), in units of ``||s||^2 + max ||alpha_j x_j||^2``:
    ``4 (dim + 4) u`` for inner products of ``dim`` terms."""
    return 4.0 * (dim + 4) * torch.finfo(dtype).eps / 2


def _tie_slack(slack: Tensor, vals: Tensor, xx_top: Tensor, xx: Tensor, visible: Tensor,
               s_bound: Tensor, grid: Tensor, terms: int, dtype: torch.dtype) -> Tensor:
    """How far a selected key's f may lie from min f and still be undecided: [Bg, Rc, G, K].

    The error of a computed ``f_j = alpha_j (alpha_j ||x_j||^2 - 2 <x_j, s>)`` is proportional to
    ``alpha_j``: the inner product with the computed ``s`` (its own error, and that of ``s``, a sum
    of K weighted vectors, are both at most ``gamma ||x_j|| s_bound`` over ``terms = dim + K``
    products) is scaled by ``alpha_j``, the rest is ``alpha_j^2 ||x_j||^2`` rounded. So with
    ``e(w, n) = c (w n s_bound + w^2 n^2)``, ``c`` twice :func:`_expansion_error` over ``terms``,
    the selected key i's f is off by at most ``e(alpha_i, ||x_i||)`` and min f by at most
    ``e(alpha_(N), max ||x||)`` (every non-selected key has at most the weight ranked N and at most
    the row's largest norm). Their sum, where it is below the scale-wide ``slack`` [Bg, Rc, G],
    decides keys of tiny weight (stick-breaking's fall to 1e-250) that the scale-wide slack would
    leave undecided. Both bounds carry :func:`_underflow_floor` (below the smallest normal,
    rounding is absolute: a weight of 5e-324 makes f a subnormal with no relative accuracy).
    ``vals`` / ``xx_top`` [Bg, Rc, K] the top-K weights and squared norms, ``xx`` [Bg, Lc],
    ``visible`` [Rc, Lc], ``s_bound`` [Bg, Rc, G]."""
    k_max = vals.shape[-1]
    unit = 2.0 * _expansion_error(terms, dtype)
    own = vals * xx_top.sqrt()                                                  # [Bg, Rc, K]
    ranked_n = vals.gather(-1, grid.clamp(max=k_max - 1).expand(*vals.shape[:-1], -1))   # [Bg, Rc, G]
    largest = torch.where(visible, xx[:, None, :], torch.zeros((), dtype=xx.dtype)).amax(-1).sqrt()
    other = (ranked_n * largest[..., None])[..., None]                          # [Bg, Rc, G, 1]
    own = own[:, :, None, :]                                                    # [Bg, Rc, 1, K]
    per_key = unit * ((own + other) * s_bound[..., None] + own * own + other * other)
    floor = _underflow_floor(terms, own, dtype) + _underflow_floor(terms, other, dtype)
    return torch.minimum(per_key, slack[..., None]) + floor


def _dyadic(values: np.ndarray) -> tuple[np.ndarray, int]:
    """Finite floats as exact integers on one common scale: ``values == ints * 2**exponent``.

    ``values`` a float64 array (any shape) -> (object array of Python ints, same shape; the
    common exponent). Every finite double is ``m * 2**e`` with an integer ``m < 2**53``
    (subnormals included), so the integers hold the inputs exactly, and sums and products of
    them are exact."""
    mant, expo = np.frexp(values)
    ints = (mant * 2.0 ** 53).astype(np.int64)          # exact: a 53-bit significand
    expo = expo.astype(np.int64) - 53
    nonzero = ints != 0
    if not nonzero.any():
        return np.zeros(values.shape, dtype=object), 0
    base = int(expo[nonzero].min())
    shift = np.where(nonzero, expo - base, 0)
    return ints.astype(object) << shift.astype(object), base


def _exact_sqrt(value: int, exponent: int) -> float:
    """``sqrt(value * 2**exponent)`` to double precision for a Python int ``value >= 0`` and an
    even ``exponent`` (the radius from an exact squared distance)."""
    if value == 0:
        return 0.0
    drop = max(0, (value.bit_length() - 110) // 2)       # keep ~110 bits: rounding far below float64
    return math.ldexp(math.sqrt(value >> (2 * drop)), drop + exponent // 2)


def _exact_problems(a: Tensor, vectors: Tensor, order: Tensor, visible: Tensor, n: Tensor,
                    k_max: int, block_elements: int) -> tuple[Tensor, Tensor]:
    """r and the inside mask of P single (row, N) problems for the inputs taken exactly:
    ``a`` [P, Lc] weights, ``vectors`` [P, Lc, d] or [Lc, d] (shared), ``order`` [P, K] the top-K
    keys (the book's order), ``visible`` [P, Lc], ``n`` [P] the N of each. Returns the radii [P]
    (float64, the exact r rounded) and the inside mask [P, K] (ranks >= N False).

    Two steps. (1) Vectorised over the problems, every key's ``f_j = alpha_j (alpha_j ||x_j||^2 -
    2 <x_j, s>)`` in float64 with its own error bound (:func:`_key_error`, proportional to
    ``alpha_j``, plus an underflow floor): a selected key whose f lies beyond the bounds of every
    candidate minimum is decided there. (2) For each problem, in exact integer arithmetic
    (:func:`_dyadic`): ``s``, ``||s||^2`` and the f of the keys step 1 could not decide (the
    selected keys within their bound of the minimum, and every non-selected key that may be the
    minimum), so that r and those keys' places are those of the inputs themselves: exact ties
    (a selected key exactly at distance r) are outside, however the floats would round them."""
    p_count, n_keys = a.shape
    dim = vectors.shape[-1]
    step = max(1, block_elements // max(1, n_keys * dim))
    ranks = torch.arange(k_max)
    radii, masks = [], []
    for p0 in range(0, p_count, step):
        sl = slice(p0, p0 + step)
        ap, op, vp, np_ = a[sl].double(), order[sl], visible[sl], n[sl]
        xp = (vectors[sl] if vectors.dim() == 3 else vectors[None].expand(ap.shape[0], -1, -1)).double()
        chosen = ranks[None, :] < np_[:, None]                               # [p, K]
        selected = torch.zeros_like(vp).scatter_(1, op, chosen)             # [p, Lc]
        a_sel = torch.where(selected, ap, 0.0)
        s = torch.bmm(a_sel[:, None, :], xp)[:, 0]                          # [p, d]
        xx = (xp * xp).sum(-1)                                              # [p, Lc]
        f = ap * (ap * xx - 2.0 * torch.bmm(xp, s[:, :, None])[..., 0])     # [p, Lc]
        own = ap * xx.sqrt()                                                # ||alpha_j x_j||
        s_bound = (a_sel * xx.sqrt()).sum(-1, keepdim=True)                 # >= ||s||
        err = _key_error(own, s_bound, dim + k_max)
        nonsel = vp & ~selected
        inf = torch.tensor(float("inf"), dtype=torch.float64)
        high = torch.where(nonsel, f + err, inf).amin(-1, keepdim=True)     # >= min f (exact)
        low = torch.where(nonsel, f - err, inf).amin(-1, keepdim=True)      # <= min f (exact)
        candidate = nonsel & (f - err <= high)                              # may be the minimum
        f_top, e_top = f.gather(1, op), err.gather(1, op)
        inside = (f_top + e_top < low) & chosen
        undecided = chosen & ~inside & (f_top - e_top < high)
        radius = torch.empty(ap.shape[0], dtype=torch.float64)
        a_np, x_np = ap.numpy(), xp.numpy()
        for q in range(ap.shape[0]):
            sel_keys = op[q, :int(np_[q])].numpy()
            cand_keys = candidate[q].nonzero()[:, 0].numpy()
            zero = a_np[q, cand_keys] == 0            # f = 0 exactly for each: one stands for all
            if zero.sum() > 1:
                cand_keys = np.concatenate([cand_keys[~zero], cand_keys[zero][:1]])
            open_keys = op[q][undecided[q]].numpy()
            keys = np.concatenate([sel_keys, cand_keys, open_keys])
            w_int, w_exp = _dyadic(a_np[q, keys])
            x_int, x_exp = _dyadic(x_np[q, keys])
            y = w_int[:, None] * x_int                                      # exact alpha_j x_j
            s_int = y[:len(sel_keys)].sum(0)
            f_int = (y * y).sum(-1) - 2 * y.dot(s_int)                      # exact f, common scale
            n_sel, n_cand = len(sel_keys), len(cand_keys)
            f_min = min(f_int[n_sel:n_sel + n_cand])
            r2 = int(s_int.dot(s_int) + f_min)
            radius[q] = _exact_sqrt(r2, 2 * (w_exp + x_exp))
            inside[q, undecided[q].nonzero()[:, 0]] = torch.tensor(
                [bool(v < f_min) for v in f_int[n_sel + n_cand:]], dtype=torch.bool)
        radii.append(radius)
        masks.append(inside)
    return torch.cat(radii), torch.cat(masks)


def _key_error(own: Tensor, s_bound: Tensor, terms: int) -> Tensor:
    """Error bound of a float64 ``f_j = alpha_j (alpha_j ||x_j||^2 - 2 <x_j, s>)``: ``own`` the
    keys' ``||alpha_j x_j||`` [..., Lc], ``s_bound`` [..., 1] a bound of ``||s||`` (sum of the
    selected keys' ``||alpha_i x_i||``), ``terms`` the products per inner product (d + K).
    Relative part ``c (own s_bound + own^2)`` with ``c`` twice :func:`_expansion_error`, as in
    :func:`_tie_slack`, and an underflow floor (every rounding below float64's smallest normal is
    absolute, up to half its smallest subnormal)."""
    unit = 2.0 * _expansion_error(terms, torch.float64)
    return unit * (own * s_bound + own * own) + _underflow_floor(terms, own, torch.float64)


def _underflow_floor(terms: int, own: Tensor, dtype: torch.dtype) -> Tensor:
    """Absolute error a float ``f_j`` may carry from results below the dtype's smallest normal
    (each such rounding is absolute: at most the smallest subnormal), for ``own`` the keys'
    ``||alpha_j x_j||`` (the inner products' terms are scaled by up to ``2 alpha_j``)."""
    info = torch.finfo(dtype)
    return 4.0 * (terms + 8) * (info.smallest_normal * info.eps) * (1.0 + own) * (1.0 + terms)


def _pack(grid, rows, batch, fraction, radius, count, top_w, order, dist_mask) -> SeparabilityResult:
    n_rows, n_g = fraction.shape[1], fraction.shape[2]
    shape = (*batch, n_rows, n_g)
    result = SeparabilityResult(grid, rows, fraction.reshape(shape), radius.reshape(shape),
                                count.reshape(shape))
    if top_w is not None:
        k = top_w.shape[-1]
        result.top_weights = top_w.reshape(*batch, n_rows, k)
        result.order = order.reshape(*batch, n_rows, k)
        result.distinguishable = dist_mask.reshape(*batch, n_rows, n_g, k)
    return result


def reference_fraction(weights: Tensor, vectors: Tensor, rows, n_grid, causal: bool = True,
                       digits: int | None = None) -> Tensor:
    """The slow, obviously correct N_s/N: loops over batch, rows and N, sorting each row's keys by
    (-alpha, index) and measuring every distance directly (no expansion). ``weights`` [B, R, L],
    ``vectors`` [B or 1, L, d], ``rows`` the R query positions; returns float64 [B, R, G] (NaN
    where the row sees <= N keys). For tests and the chapter's check of
    :func:`geometric_separability`.

    ``digits`` None: the distances in float64 (they round ``||alpha_j x_j - s||`` to ``||s||`` for
    weights below about 1e-16 of the rest). ``digits`` = n (any int >= 1): in exact arithmetic,
    the float64 inputs taken exactly (subnormals included): N_s of the inputs themselves (slow:
    for a few hundred problems). It was n-digit mpmath arithmetic until issue 47, which no fixed
    n makes exact: 120 digits rounded ``1 + 1e-200`` against ``1 + 1e-250``, and weights of
    5e-324 beside 1 (:func:`_reference_fraction_digits`)."""
    b_count, _, length = weights.shape
    rows, grid = list(rows), list(n_grid)
    out = torch.full((b_count, len(rows), len(grid)), float("nan"), dtype=torch.float64)
    if digits is not None:
        return _reference_fraction_digits(weights, vectors, rows, grid, causal, digits, out)
    for b in range(b_count):
        x = (vectors[b] if vectors.shape[0] > 1 else vectors[0]).double()
        w = weights[b].double()
        for ri, t in enumerate(rows):
            visible = list(range(t + 1)) if causal else list(range(length))
            order = sorted(visible, key=lambda j: (-float(w[ri, j]), j))
            for g, n in enumerate(grid):
                if len(visible) <= n:
                    continue
                s = sum(w[ri, i] * x[i] for i in order[:n])
                r = min(float(torch.linalg.norm(w[ri, j] * x[j] - s)) for j in order[n:])
                inside = sum(float(torch.linalg.norm(w[ri, i] * x[i] - s)) < r for i in order[:n])
                out[b, ri, g] = inside / n
    return out


def _reference_fraction_digits(weights: Tensor, vectors: Tensor, rows: list, grid: list,
                               causal: bool, digits: int, out: Tensor) -> Tensor:
    """:func:`reference_fraction` in exact arithmetic: every float64 input is an integer times a
    power of two (:func:`_dyadic`, subnormals included), so with one scale for the weights and one
    for the vectors every ``alpha_j x_j``, ``s`` and squared distance is an exact Python integer
    (on the common scale), and the comparisons are exact. ``digits`` (an int >= 1) is only
    checked: exact arithmetic needs more digits than any fixed number (weights 1 and 5e-324 in
    one row differ in the 324th), so no finite precision would be exact for every input."""
    if isinstance(digits, bool) or not isinstance(digits, int) or digits < 1:
        raise ValueError(f"digits must be a positive integer (got {digits!r}); the reference is "
                         "then computed in exact arithmetic, or pass digits=None for float64.")
    length = weights.shape[-1]
    for b in range(weights.shape[0]):
        x_int, _ = _dyadic((vectors[b] if vectors.shape[0] > 1 else vectors[0]).double().numpy())
        for ri, t in enumerate(rows):
            wr = weights[b, ri].double()
            visible = list(range(t + 1)) if causal else list(range(length))
            order = sorted(visible, key=lambda j: (-float(wr[j]), j))
            a_int, _ = _dyadic(wr.numpy())
            y = a_int[:, None] * x_int                      # exact alpha_j x_j, [L, d]
            for g, n in enumerate(grid):
                if len(visible) <= n:
                    continue
                s = y[order[:n]].sum(0)
                diff = y[visible] - s
                squared = dict(zip(visible, (diff * diff).sum(-1)))
                r2 = min(squared[j] for j in order[n:])
                out[b, ri, g] = sum(squared[i] < r2 for i in order[:n]) / n
    return out
