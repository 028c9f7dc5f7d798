"""Geometric separability N_s (paper section 2.2, Eq. 10; tested in section 3.2, Figure 3).

Definition (formalised in the book's separability chapter). For one query row with attention
weights ``alpha`` over its visible keys and vectors ``x_j``, let ``I_N`` be the N keys of largest
weight and ``s = sum_{i in I_N} alpha_i x_i`` the context vector. The radius is data-dependent,

    r = min_{j visible, j not in I_N} || s - alpha_j x_j ||_2 ,

so every non-selected token lies outside the open ball of radius r (the closed ball's second
condition holds by construction), and

    N_s = #{ i in I_N : || s - alpha_i x_i ||_2 < r }        (strict: the boundary token does not count).

For N = 1, ``s - alpha_1 x_1 = 0 < r``, so ``N_s / N = 1`` trivially (whenever r > 0).

Causality: a row at query position t sees keys 0..t only (t + 1 keys). ``N_s`` needs at least
one non-selected visible key, so it is undefined (NaN here) for rows with ``t + 1 <= N``.

Ties in the weights are broken by ``torch.topk``; they change N_s only at exact ties between
positive weights of different vectors (a measure-zero event for real attention; exact zeros
are harmless: a zero-weight token sits at distance ||s|| whether selected or not).

Vectorisation. One partial sort (``topk`` with K = max N) per row serves every N of the grid:

- ``s_N`` are prefix sums of the sorted ``alpha_k x_k``, for the whole grid one batched product
  ``[G, K] @ [K, d]`` per row (the [G, K] matrix holds the sorted weights below rank N);
- every distance comes from the expansion ``||alpha_j x_j - s||^2 = ||s||^2 + f_j`` with
  ``f_j = alpha_j (alpha_j ||x_j||^2 - 2 <x_j, s>)``; the inner products with all keys are one
  matrix product ``[rows * G, d] @ [d, keys]`` per block of heads and rows (keys limited to the
  block's causal range); the top-K keys' ``f`` serve both the selected tokens (rank < N) and the
  non-selected ranks N..K-1, and every other key (rank >= K) is non-selected for every N;
- a selected token is inside when ``f_i < min_{j not selected} f_j``: the common ``||s||^2``
  cancels exactly, so near-ties are decided without rounding the large term (single precision
  is enough).

No Python loop runs over tokens or N; the loop is over blocks of (layer, head) pairs and of
rows, which bounds memory at about ``block_elements`` floats per temporary.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch import Tensor

from .normalizers import softmax_with_temperature
from .protocol import SEPARABILITY_SPACED_ROWS

__all__ = [
    "SeparabilityResult",
    "MultiHeadCoverage",
    "check_n_grid",
    "project_to_sphere",
    "min_pairwise_distance",
    "geometric_separability",
    "multihead_coverage",
    "layer_weights",
    "VECTOR_KINDS",
    "SeparabilitySweep",
    "separability_sweep",
    "plateau",
    "Plateau",
    "multihead_summary",
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
    grid = torch.as_tensor(n_grid, dtype=torch.long).flatten()
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


def min_pairwise_distance(vectors: Tensor, exclude_duplicates: bool = False,
                          tol: float = 0.0) -> Tensor:
    """Minimum Euclidean distance over pairs i != j of the rows of ``vectors`` [..., L, d].

    Returns [...] (one value per leading index). Computed exactly by ``torch.cdist`` one leading
    index at a time (memory L^2). ``exclude_duplicates`` ignores pairs closer than ``tol``
    (identical vectors, e.g. a repeated token at layer 0 of a model without positions).
    """
    lead = vectors.shape[:-2]
    length = vectors.shape[-2]
    if length < 2:
        raise ValueError("the minimum pairwise distance needs at least two vectors.")
    flat = vectors.reshape(-1, length, vectors.shape[-1])
    out = torch.empty(flat.shape[0], dtype=vectors.dtype)
    eye = torch.eye(length, dtype=torch.bool)
    for b in range(flat.shape[0]):
        dist = torch.cdist(flat[b].double(), flat[b].double())
        dist = dist.masked_fill(eye, float("inf"))
        if exclude_duplicates:
            dist = dist.masked_fill(dist <= tol, float("inf"))
        out[b] = dist.min()
    return out.reshape(lead)


#: query rows per window of the benchmark's separability workload (evenly spaced, see
#: :func:`spaced_rows`); the chapter measures what this subsample changes against every row.
SPACED_ROW_COUNT = SEPARABILITY_SPACED_ROWS


def spaced_rows(length: int, count: int = SPACED_ROW_COUNT) -> Tensor:
    """``count`` query positions evenly spaced over a window of ``length`` tokens, LongTensor [count].

    The same positions as :func:`normlimits.jacobian.default_rows` (the last one is ``length - 1``):
    an unbiased subsample of the paper's average over every token ``t`` of the window.
    """
    from .jacobian import default_rows

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


def geometric_separability(weights: Tensor, vectors: Tensor, n_grid, rows=None, *,
                           causal: bool = True, keep_selection: bool = False,
                           row_chunk: int = 128,
                           block_elements: int = 8_000_000) -> SeparabilityResult:
    """N_s/N (paper Eq. 10) for every row of ``weights`` and every N of ``n_grid`` at once.

    Args:
        weights: [*batch, R, L] attention weights (rows of a softmax; masked keys may hold any
            value, they are ignored when ``causal``).
        vectors: [*vbatch, L, d] the x_j per key, ``vbatch`` broadcastable to ``batch`` (e.g.
            values [layers, heads, L, d], or hidden states [layers, 1, L, d] shared by the heads).
        n_grid: the top-N sizes, each in 1..L-1.
        rows: LongTensor [R], query position of each row; None means 0..L-1 (requires R == L)
            when causal, all keys visible otherwise.
        causal: a row at position t sees keys 0..t only. False: every row sees all L keys.
        keep_selection: also return the top-K order, weights and distinguishable masks
            (needed by :func:`multihead_coverage` and by the plug-in bounds).
        row_chunk: rows per block.
        block_elements: (layer, head) pairs are processed together in blocks of at most
            ``block_elements // (row_chunk * G * L)``; memory ~ 3 * block_elements floats.

    Returns:
        :class:`SeparabilityResult`; computation in the dtype of ``weights``/``vectors``.
    """
    if weights.dim() < 2 or vectors.dim() < 2:
        raise ValueError("weights must be [..., R, L] and vectors [..., L, d].")
    *batch, n_rows, length = weights.shape
    if vectors.shape[-2] != length:
        raise ValueError(f"weights have {length} keys but vectors have {vectors.shape[-2]}.")
    if row_chunk < 1:
        raise ValueError("row_chunk must be >= 1.")
    grid = check_n_grid(n_grid, length)
    rows = _resolve_rows(rows, n_rows, length, causal)
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
    batch_block = max(1, min(n_batch, block_elements // max(1, row_chunk * n_g * length)))

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
    one = torch.ones((), dtype=dtype)

    for start in range(0, n_rows, row_chunk):
        sel_rows = (slice(start, min(start + row_chunk, n_rows)) if row_sort is None
                    else row_sort[start:start + row_chunk])
        pos = rows[sel_rows]  # [Rc]
        n_chunk = pos.numel()
        n_keys = max(int(pos.max()) + 1, k_max) if causal else length
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
            vals, idx = a.masked_fill(hidden, float("-inf")).topk(k_max, dim=-1)  # [Bg, Rc, K]
            vals = torch.where(valid_rank, vals, zero)
            # s_N for every N of the grid: [Bg*Rc, G, K] @ [Bg*Rc, K, d] -> [Bg, Rc, G, d]
            if shared:
                xs = v_flat[vi[0]][idx]  # [Bg, Rc, K, d]
            else:
                xs = v_flat[vi[:, None, None], idx]
            s = torch.matmul(prefix * vals[:, :, None, :], xs)  # [Bg, Rc, G, d]
            ss = (s * s).sum(-1)  # [Bg, Rc, G]
            if shared:  # <x_j, s_N>: one matrix product for the block
                ip = (s.reshape(-1, dim) @ x_t).view(n_b, n_chunk, n_g, n_keys)
            else:
                ip = torch.bmm(s.reshape(n_b, -1, dim), x_t).view(n_b, n_chunk, n_g, n_keys)
            ip_top = torch.gather(ip, 3, idx[:, :, None, :].expand(n_b, n_chunk, n_g, k_max))
            # top-K keys: f = alpha_k (alpha_k ||x_k||^2 - 2 <x_k, s_N>), dist^2 = ||s||^2 + f
            xx_top = torch.gather(xx, 1, idx.reshape(n_b, -1)).view(n_b, n_chunk, k_max)
            f_top = vals[:, :, None, :] * ip_top.mul_(-2.0).add_((vals * xx_top)[:, :, None, :])
            min_top = f_top.masked_fill(~nonsel_top, inf).amin(-1)  # [Bg, Rc, G]
            # every other visible key (rank >= K) is non-selected for every N of the grid
            tail = visible.expand(n_b, n_chunk, n_keys).scatter(2, idx, False)
            a_t = torch.where(tail, a, one)
            axx = torch.where(tail, a * xx[:, None, :], inf)  # [Bg, Rc, Lc]
            f_tail = ip.mul_(-2.0).add_(axx[:, :, None, :]).mul_(a_t[:, :, None, :]).amin(-1)
            min_f = torch.minimum(min_top, f_tail)  # [Bg, Rc, G]: r^2 = ||s||^2 + min_f
            # X_i < r  <=>  X_i^2 - ||s||^2 < r^2 - ||s||^2: compare the f's, in which ||s||^2
            # cancels exactly (no rounding of the large common term; near-ties stay resolved)
            inside = (f_top < min_f[..., None]) & keep
            r2 = (ss + min_f).clamp_min_(0.0)
            cnt = inside.sum(-1).to(dtype)
            fraction[bs, sel_rows] = torch.where(defined, cnt / grid.to(dtype), torch.nan)
            count[bs, sel_rows] = torch.where(defined, cnt, torch.nan)
            radius[bs, sel_rows] = torch.where(defined, r2.sqrt(), torch.nan)
            if keep_selection:
                top_w[bs, sel_rows] = vals
                order[bs, sel_rows] = idx
                dist_mask[bs, sel_rows] = inside
    return _pack(*packed)


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


@dataclass
class MultiHeadCoverage:
    """How the heads of one layer cover each other's top-N tokens (per head h, row, N).

    With I_h the top-N keys of head h at a row and D_h subset I_h its distinguishable ones:

    - ``coverage`` [H, R, G]: |{j in I_h : j in D_h' for some head h'}| / N, the fraction of head
      h's top-N tokens that are distinguishable in at least one head of the layer;
    - ``own`` [H, R, G]: |D_h| / N (= N_s/N of head h), for reference;
    - ``selecting_heads`` [H, R, G]: mean over j in I_h of #{h' : j in I_h'} (1..H), how many
      heads select the same token (the independence formula assumes all H do);
    - ``independent_given_selection`` [H, R, G]: mean over j in I_h of
      1 - prod_{h' : j in I_h'} (1 - p_h'), with p_h' the head's measured mean N_s/N at that N
      (over the rows supplied): what independent heads would cover given who selects what.

    NaN where N_s is undefined (row sees <= N keys).
    """

    n_grid: Tensor
    coverage: Tensor
    own: Tensor
    selecting_heads: Tensor
    independent_given_selection: Tensor


def multihead_coverage(result: SeparabilityResult, head_p: Tensor | None = None) -> MultiHeadCoverage:
    """Coverage of top-N tokens by at least one head, for a result over ONE layer's heads.

    ``result`` must come from :func:`geometric_separability` with ``keep_selection=True`` and
    weights of shape [H, R, L] (the heads of one layer, the same rows). ``head_p`` [H, G] are the
    per-head success rates for the independence prediction; default: each head's mean N_s/N
    over the rows of ``result``.
    """
    if result.distinguishable is None or result.order is None:
        raise ValueError("multihead_coverage needs geometric_separability(..., keep_selection=True).")
    if result.fraction.dim() != 3:
        raise ValueError("pass the result of ONE layer: weights [H, R, L] (heads, rows, keys).")
    n_heads, n_rows, n_g = result.fraction.shape
    grid = result.n_grid
    defined = ~torch.isnan(result.fraction[0])  # [R, G], identical across heads
    length = int(result.order.max()) + 1
    if head_p is None:
        head_p = torch.nanmean(result.fraction.float(), dim=1)  # [H, G]
    log_miss_head = torch.log1p(-head_p.double().clamp(max=1.0))  # [H, G], -inf where p = 1
    cov = torch.empty(n_heads, n_rows, n_g)
    sh = torch.empty_like(cov)
    ind = torch.empty_like(cov)
    for g, n in enumerate(grid.tolist()):
        idx = result.order[..., :n]  # [H, R, n]
        dist = result.distinguishable[:, :, g, :n]  # [H, R, n]
        covered = torch.zeros(n_rows, length, dtype=torch.bool)
        selecting = torch.zeros(n_rows, length, dtype=torch.int32)
        log_miss = torch.zeros(n_rows, length, dtype=torch.float64)
        for h in range(n_heads):
            covered |= torch.zeros_like(covered).scatter_(1, idx[h], dist[h])
            selecting.scatter_add_(1, idx[h], torch.ones_like(idx[h], dtype=torch.int32))
            log_miss.scatter_add_(1, idx[h], log_miss_head[h, g].expand(n_rows, n).contiguous())
        for h in range(n_heads):
            cov[h, :, g] = torch.gather(covered, 1, idx[h]).float().mean(-1)
            sh[h, :, g] = torch.gather(selecting, 1, idx[h]).float().mean(-1)
            ind[h, :, g] = (1.0 - torch.exp(torch.gather(log_miss, 1, idx[h]))).mean(-1).float()
    nan = torch.tensor(float("nan"))
    return MultiHeadCoverage(grid, torch.where(defined, cov, nan), result.fraction.float(),
                             torch.where(defined, sh, nan), torch.where(defined, ind, nan))


# ----------------------------------------------------------------------------------- sweeps
#: The vector sets a sweep can measure N_s on, per layer and head:
#: ``values``: the head's value vectors projected onto the sphere of radius M (design section 7);
#: ``raw_values``: the value vectors as GPT-2 computes them (no projection; no bounds);
#: ``hidden``: the residual stream entering the block, projected onto the sphere (shared by heads);
#: ``uniform``: i.i.d. uniform points on the sphere in d_head dimensions with the model's weights
#: (Assumption 1 exactly, the weights still the model's).
VECTOR_KINDS = ("values", "raw_values", "hidden", "uniform")
_ON_SPHERE = {"values", "hidden", "uniform"}
#: relative margin on the measured radius for the sure bound: r is float32 (relative rounding
#: ~1e-7); counting a token only when xi^delta < r (1 - 1e-5) keeps the bound valid.
SURE_RTOL = 1e-5


def layer_weights(capture, layer: int, rows=None, temperature: float = 1.0) -> Tensor:
    """Softmax weights of ONE layer, [heads, R, L]: the same numbers as
    ``capture.weights(rows)[layer]`` without materialising every layer at once."""
    q = capture.queries[layer]
    k = capture.keys[layer]
    length = q.shape[-2]
    rows_t = torch.arange(length) if rows is None else torch.as_tensor(rows, dtype=torch.long)
    scores = (q[:, rows_t] @ k.transpose(-1, -2)) * capture.scale[layer]
    future = torch.arange(length)[None, :] > rows_t[:, None]
    return softmax_with_temperature(scores.masked_fill(future, float("-inf")), dim=-1,
                                    temperature=temperature)


def _kind_vectors(capture, kind: str, layer: int, radius: float, gen: torch.Generator) -> Tensor:
    if kind == "values":
        return project_to_sphere(capture.values[layer].float(), radius)
    if kind == "raw_values":
        return capture.values[layer].float()
    if kind == "hidden":
        return project_to_sphere(capture.hidden[layer].float(), radius)[None]
    if kind == "uniform":
        shape = capture.values[layer].shape
        return project_to_sphere(torch.randn(shape, generator=gen), radius)
    raise ValueError(f"unknown vector kind {kind!r}; choose from {VECTOR_KINDS}.")


@dataclass
class SeparabilitySweep:
    """Per-head means of N_s/N and of the plug-in Theorem 2 bounds over windows and rows.

    Every tensor is [layers, heads, G] unless said (mean over windows of the mean over the rows
    where N_s is defined, i.e. rows that see more than N keys), keyed by vector kind:

    - ``fraction[kind]``: N_s/N; ``fraction_windows[kind]``: [W, layers, heads, G] per window;
    - ``lower``, ``upper`` (the theorem's combined bounds), ``lower_markov``,
      ``upper_exponential`` (the paper's two steps alone), ``sure`` (the Assumption 2 bound):
      plug-in bounds at the measured radius r, M = sphere_radius, d = the vectors' dimension,
      delta = the empirical minimum pairwise distance of the head's vectors in the window
      (kinds on the sphere only);
    - ``delta[kind]``: [W, layers, heads] those minimum distances;
    - ``alignment[kind]``: [W, layers, heads] mean pairwise cosine of the head's vectors in the
      window (0 for isotropic points; Assumption 1 needs it near 0);
    - ``sure_violations[kind]``: rows where N_s/N fell below the sure bound (must be 0; it is a
      theorem for every row), ``rows_checked[kind]`` how many (row, N) pairs were checked;
    - multi-head (``values`` only): ``coverage``, ``own``, ``selecting_heads``,
      ``independent_given_selection`` (see :class:`MultiHeadCoverage`), [layers, heads, G];
    - ``forward_seconds`` (waiting for captures), ``metric_seconds`` (everything else).
    """

    n_grid: Tensor
    kinds: tuple
    windows: int
    fraction: dict = field(default_factory=dict)
    fraction_windows: dict = field(default_factory=dict)
    lower: dict = field(default_factory=dict)
    upper: dict = field(default_factory=dict)
    lower_markov: dict = field(default_factory=dict)
    upper_exponential: dict = field(default_factory=dict)
    sure: dict = field(default_factory=dict)
    delta: dict = field(default_factory=dict)
    alignment: dict = field(default_factory=dict)
    sure_violations: dict = field(default_factory=dict)
    rows_checked: dict = field(default_factory=dict)
    coverage: Tensor | None = None
    own: Tensor | None = None
    selecting_heads: Tensor | None = None
    independent_given_selection: Tensor | None = None
    forward_seconds: float = 0.0
    metric_seconds: float = 0.0


def _row_means(values: Tensor) -> Tensor:
    """nanmean over the row axis (-2) of [..., R, G], in float64."""
    return torch.nanmean(values.double(), dim=-2)


def separability_sweep(captures: Iterable, n_grid, *, kinds=("values",), rows=None,
                       sphere_radius: float = 1.0, bounds: bool = True, multihead: bool = False,
                       seed: int = 0, row_chunk: int = 128,
                       bound_row_chunk: int = 256) -> SeparabilitySweep:
    """Figure 3's workload (paper Algorithm 4): N_s/N for every window, layer, head, row and N.

    Args:
        captures: iterable of ``WindowCapture`` (``normlimits.capture.iter_captures``); each is
            consumed once (one forward pass per window).
        n_grid: the N values, each in 1..L-1.
        kinds: vector sets from :data:`VECTOR_KINDS`.
        rows: query positions (default: every position; rows that see <= N keys are skipped
            for that N).
        sphere_radius: M for the projected kinds.
        bounds: also compute the plug-in Theorem 2 bounds (kinds on the sphere).
        multihead: also measure multi-head coverage (kind ``values``).
    """
    kinds = tuple(kinds)
    for kind in kinds:
        if kind not in VECTOR_KINDS:
            raise ValueError(f"unknown vector kind {kind!r}; choose from {VECTOR_KINDS}.")
    if multihead and "values" not in kinds:
        raise ValueError("multihead coverage is measured on kind 'values'; add it to kinds.")
    from .theory.separability import theorem2_bounds

    gen = torch.Generator().manual_seed(seed)
    per_window: dict[str, list] = {}
    acc: dict[tuple, list] = {}
    violations = {k: 0 for k in kinds}
    checked = {k: 0 for k in kinds}
    grid = None
    n_windows = 0
    forward = metric = 0.0
    iterator = iter(captures)
    while True:
        t0 = time.perf_counter()
        try:
            cap = next(iterator)
        except StopIteration:
            break
        t1 = time.perf_counter()
        forward += t1 - t0
        n_layers, n_heads, length, _ = cap.values.shape
        if grid is None:
            grid = check_n_grid(n_grid, length)
        rows_t = None if rows is None else torch.as_tensor(rows, dtype=torch.long)
        window_acc: dict[tuple, list] = {}
        for layer in range(n_layers):
            w = layer_weights(cap, layer, rows_t)
            for kind in kinds:
                vecs = _kind_vectors(cap, kind, layer, sphere_radius, gen)
                with_bounds = bounds and kind in _ON_SPHERE
                keep = with_bounds or (multihead and kind == "values")
                res = geometric_separability(w, vecs, grid, rows_t, keep_selection=keep,
                                             row_chunk=row_chunk)
                window_acc.setdefault((kind, "fraction"), []).append(_row_means(res.fraction))
                if with_bounds:
                    dist = min_pairwise_distance(vecs).double()  # [H] or [1]
                    dl = dist.expand(n_heads)
                    window_acc.setdefault((kind, "delta"), []).append(dl)
                    total = vecs.sum(-2)  # [H or 1, d]
                    cos = ((total * total).sum(-1) / sphere_radius**2 - length) / (length * (length - 1))
                    window_acc.setdefault((kind, "alignment"), []).append(cos.double().expand(n_heads))
                    parts = {name: [] for name in ("lower", "upper", "lower_markov",
                                                   "upper_exponential", "sure")}
                    for r0 in range(0, res.fraction.shape[-2], bound_row_chunk):
                        sl = slice(r0, r0 + bound_row_chunk)
                        radius = res.radius[:, sl].double()
                        b = theorem2_bounds(res.top_weights[:, sl], grid, radius,
                                            sphere_radius=sphere_radius, dim=vecs.shape[-1],
                                            delta=dl[:, None], sure_rtol=SURE_RTOL)
                        undefined = radius.isnan()
                        sure = b.separation.masked_fill(undefined, float("nan"))
                        frac = res.fraction[:, sl].double()
                        ok = ~undefined
                        violations[kind] += int((frac[ok] < sure[ok] - 1e-6).sum())  # float32 k/N vs float64
                        checked[kind] += int(ok.sum())
                        for name, value in (("lower", b.lower), ("upper", b.upper),
                                            ("lower_markov", b.lower_markov),
                                            ("upper_exponential", b.upper_exponential),
                                            ("sure", sure)):
                            parts[name].append(value.masked_fill(undefined, float("nan")))
                    for name, chunks in parts.items():
                        window_acc.setdefault((kind, name), []).append(
                            _row_means(torch.cat(chunks, dim=-2)))
                if multihead and kind == "values":
                    cov = multihead_coverage(res)
                    for name in ("coverage", "own", "selecting_heads", "independent_given_selection"):
                        window_acc.setdefault(("mh", name), []).append(_row_means(getattr(cov, name)))
        for key, layers in window_acc.items():
            acc.setdefault(key, []).append(torch.stack(layers))  # [layers, H, G] or [layers, H]
        n_windows += 1
        metric += time.perf_counter() - t1
    if grid is None:
        raise ValueError("separability_sweep got no captures; pass at least one window.")
    out = SeparabilitySweep(n_grid=grid, kinds=kinds, windows=n_windows,
                            sure_violations=violations, rows_checked=checked,
                            forward_seconds=forward, metric_seconds=metric)
    for (kind, name), stacks in acc.items():
        stacked = torch.stack(stacks)  # [W, layers, H, (G)]
        if kind == "mh":
            setattr(out, name, torch.nanmean(stacked, dim=0))
            continue
        if name in ("delta", "alignment"):
            getattr(out, name)[kind] = stacked
            continue
        getattr(out, name)[kind] = torch.nanmean(stacked, dim=0)
        if name == "fraction":
            out.fraction_windows[kind] = stacked
    return out


@dataclass
class Plateau:
    """A two-segment (hinge) fit of a curve against log2 N: where the decline stops.

    ``y = value_at_stop + slope_before * min(x - x*, 0) + slope_after * max(x - x*, 0)`` with
    ``x = log2 N`` and the breakpoint ``x* = log2 n_stop`` chosen among the grid points by least
    squares (N = 1 is left out: N_s/N = 1 there by definition). Slopes are changes of the curve
    per doubling of N. ``value``: the mean of the curve over N >= n_stop (the plateau level);
    ``saturated``: ``|slope_after| <= tolerance``; ``rms``: the fit's root-mean-square residual.
    """

    n_stop: int
    value: float
    value_at_stop: float
    slope_before: float
    slope_after: float
    saturated: bool
    tolerance: float
    rms: float


def plateau(n_grid, curve, tolerance: float = 0.02) -> Plateau:
    """Fit the hinge of :class:`Plateau` to ``curve`` [G] (e.g. the median over heads of N_s/N)."""
    grid = torch.as_tensor(n_grid, dtype=torch.float64).flatten()
    c = torch.as_tensor(curve, dtype=torch.float64).flatten()
    if c.numel() != grid.numel():
        raise ValueError("curve and n_grid must have the same length.")
    if not tolerance > 0:
        raise ValueError("the plateau tolerance must be > 0 (a change per doubling of N).")
    keep = grid >= 2
    x, y = torch.log2(grid[keep]), c[keep]
    if x.numel() < 4:
        raise ValueError("the hinge fit needs at least 4 grid points with N >= 2.")
    best = None
    for b in range(1, x.numel() - 1):
        dx = x - x[b]
        design = torch.stack([torch.ones_like(x), dx.clamp(max=0.0), dx.clamp(min=0.0)], dim=1)
        coef = torch.linalg.lstsq(design, y[:, None]).solution[:, 0]
        sse = float(((design @ coef - y) ** 2).sum())
        if best is None or sse < best[0] - 1e-15:
            best = (sse, b, coef)
    sse, b, coef = best
    n_stop = int(round(float(2 ** x[b])))
    return Plateau(n_stop=n_stop, value=float(y[b:].mean()), value_at_stop=float(coef[0]),
                   slope_before=float(coef[1]), slope_after=float(coef[2]),
                   saturated=abs(float(coef[2])) <= tolerance, tolerance=tolerance,
                   rms=math.sqrt(sse / x.numel()))


def multihead_summary(sweep: SeparabilitySweep) -> dict:
    """Per N [G] (means over layers and heads) of the multi-head measurements of ``sweep``.

    Keys: ``coverage`` (top-N tokens of a head distinguishable in at least one head of its
    layer), ``p`` (N_s/N of one head), ``formula`` (the paper's 1 - (1 - p)^H with p the layer's
    mean N_s/N and H its head count, averaged over layers), ``independent_given_selection``,
    ``selecting_heads``, and ``heads`` (H, an int).
    """
    if sweep.coverage is None:
        raise ValueError("the sweep has no multi-head data; run separability_sweep(multihead=True).")
    heads = sweep.coverage.shape[1]
    p_layer = sweep.own.double().mean(1)  # [layers, G]
    return {"coverage": sweep.coverage.double().mean((0, 1)),
            "p": sweep.own.double().mean((0, 1)),
            "formula": (1.0 - (1.0 - p_layer) ** heads).mean(0),
            "independent_given_selection": sweep.independent_given_selection.double().mean((0, 1)),
            "selecting_heads": sweep.selecting_heads.double().mean((0, 1)),
            "heads": heads}
