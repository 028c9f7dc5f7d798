"""Readings of the paper's Eq. (7) and their random-subset expectations, for every query row and N.

The paper's Eq. (7), "the cumulative distance between this context vector s and all non-selected
embeddings", survives only in words, and its readings give different numbers. For one attention
row over ``L`` visible keys with weights ``alpha``, vectors ``x_i`` (value vectors, hidden states,
or either projected to the unit sphere: :data:`VECTORS`), ``y_i = alpha_i x_i``,
``T = sum_i y_i``, a set ``I`` of N keys and its context vector ``s_I = sum_{i in I} y_i``, the
forms (:data:`FORMS`) are

* ``scaled``:      ``sum_{i not in I} ||alpha_i x_i - s_I||`` (the book's first reading);
* ``raw``:         ``sum_{i not in I} ||x_i - s_I||`` (the embeddings themselves);
* ``weighted``:    ``sum_{i not in I} alpha_i ||x_i - s_I||`` (the shape of Theorem 1's first term);
* ``norm_of_sum``: ``||sum_{i not in I} alpha_i x_i - s_I|| = ||T - 2 s_I||``.

The first three are the family ``sum_{i not in I} g_i ||b_i x_i - s_I||`` with
``(b, g) = (alpha, 1), (1, 1), (1, alpha)``. For each form and each N of a grid,
:func:`row_statistics` gives

* ``true``: ``I`` = the N keys with the largest weights (:func:`normlimits.core.selection.top_n`:
  among equal weights the earlier key first);
* ``mc``: a Monte Carlo estimate of ``E = E_{I ~ U(L, N)}[d~(I)]`` from ``samples`` uniform
  subsets per row (nested over N: the first N keys of one uniform random permutation; with
  ``mc_keys`` the sum over the non-selected keys is itself estimated, without bias: each row's
  :data:`MC_HEAVY_KEYS` largest weights exactly, the other keys from ``mc_keys`` keys drawn with
  replacement); ``mc_var`` is the variance of that estimate, from the samples;
* ``main``: the Jensen lower bound on E, ``s_I`` replaced by its conditional mean;
* ``rms``: the upper bound ``E ||.|| <= sqrt(E ||.||^2)`` with the exact second moment;
* ``upper`` (``scaled`` only): the corrected Corollary 2(i) cap, ``min((L-N)(N+1)/L S,
  (L-N)/L sqrt(L R2))`` with ``S = sum_i ||y_i||`` (returned as ``individual``) and
  ``R2 = ((N+1) L Q - (N-1)^2 Q + N (N-3) ||T||^2)/(L-1)``, ``Q = sum_i ||y_i||^2``.

With ``c = N/(L-1)``, ``V_i = N (L-1-N)/(L-2) sigma2_{-i}`` (``sigma2_{-i}`` the population variance
of ``{y_j : j != i}``) and ``sigma2`` that of all ``y_j``:

* family: ``main = (L-N)/L sum_i g_i ||b_i x_i - c (T - y_i)||``,
  ``rms = (L-N)/L sum_i g_i sqrt(||b_i x_i - c (T - y_i)||^2 + V_i)``;
* norm of sum: ``main = |1 - 2N/L| ||T||``,
  ``rms = sqrt((1 - 2N/L)^2 ||T||^2 + 4 N (L-N)/(L-1) sigma2)``.

(``normlimits.theory.distances.reading_expectations`` derives both; ``tests/unit/test_readings.py``
checks them against enumeration of every subset.) A row with ``N >= L`` has no key left outside:
every key is selected, which gives 0 for the family and ``||T||`` for the norm of the sum, in
every statistic. Causal rows at positions ``t <= N - 1`` are such rows.

:mod:`normlimits.metrics.token_means` runs the paper's protocol (token-means over every query position of
a window) on top of this module.

Cost: per row and ordering (the top-N one and each Monte Carlo draw) the context vectors at the
grid's N (segment sums of the ``N_max`` gathered vectors, ``N_max d``, or for wide vectors one
product ``n L d``), one matmul ``x @ S^T`` of ``L d n`` and a few
elementwise passes over ``[L, n]`` (with ``mc_keys``, ``mc_keys`` keys instead of ``L`` for the
draws); rows are processed in chunks of
``chunk_elements`` floats. Shapes: weights ``[..., R, L]`` (zero beyond each row's visible keys),
vectors ``[..., L, d]`` (leading dimensions broadcast), outputs ``[..., R, n]``.
"""

from __future__ import annotations

from typing import Mapping, Sequence

import torch
from torch import Tensor

from normlimits.metrics.gram import refine_squared
from normlimits.core.selection import top_n
from normlimits.core.validation import finite_weights_and_vectors

__all__ = ["FORMS", "FAMILY", "VECTORS", "STATISTICS", "CLOSED_FORMS", "row_statistics"]

#: the readings of Eq. (7); the first three form the family sum g_i ||b_i x_i - s||
FORMS = ("scaled", "raw", "weighted", "norm_of_sum")
FAMILY = ("scaled", "raw", "weighted")
#: what x_i is: the head's value vectors, the residual stream entering the layer, or either
#: projected onto the unit sphere
VECTORS = ("values", "hidden", "values_sphere", "hidden_sphere")
STATISTICS = ("true", "mc", "mc_var", "main", "rms", "upper", "individual")
#: the closed forms a study can ask for; ``upper`` (scaled form only) also gives ``individual``
CLOSED_FORMS = ("main", "rms", "upper")


def _wanted(expectations, forms: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """The closed forms per form: ``expectations`` for every form, or a mapping form -> them."""
    if isinstance(expectations, Mapping):
        unknown = [f for f in expectations if f not in forms]
        if unknown:
            raise ValueError(f"expectations name forms {unknown} that are not among forms {list(forms)}")
        wanted = {f: tuple(expectations.get(f, ())) for f in forms}
    else:
        wanted = {f: tuple(expectations) for f in forms}
    bad = sorted({e for v in wanted.values() for e in v if e not in CLOSED_FORMS})
    if bad:
        raise ValueError(f"expectations {bad}: each must be one of {CLOSED_FORMS}")
    return wanted


def _stats(form: str, samples: int, expectations: Sequence[str]) -> list[str]:
    """The statistics computed for ``form``."""
    extra = [e for e in expectations if e != "upper" or form == "scaled"]
    if "upper" in extra:
        extra.append("individual")
    return ["true"] + (["mc", "mc_var"] if samples >= 1 else []) + extra


DEFAULT_CHUNK_ELEMENTS = 1 << 22
#: with ``mc_keys``, each row's this many largest weights are summed exactly in every draw and
#: only the other keys are sampled (a stratified estimate; see :func:`_sampled_family`)
MC_HEAVY_KEYS = 16


def _grid(n_grid) -> Tensor:
    grid = torch.as_tensor([n_grid] if isinstance(n_grid, int) else list(n_grid)).reshape(-1)
    if grid.numel() == 0:
        raise ValueError("n_grid is empty; pass at least one top-N size N >= 1")
    if grid.is_floating_point() and not torch.equal(grid, grid.round()):
        raise ValueError(f"n_grid must hold integers (got {grid.tolist()})")
    grid = grid.long()
    if (grid < 1).any():
        raise ValueError(f"n_grid values must be >= 1 (got {grid.tolist()})")
    return grid


def _check_forms(forms: Sequence[str]) -> tuple[str, ...]:
    forms = tuple(forms)
    bad = [f for f in forms if f not in FORMS]
    if bad or not forms:
        raise ValueError(f"forms {list(forms)}: each must be one of {FORMS}")
    return forms


def row_statistics(weights: Tensor, vectors: Tensor, n_grid, *, lengths=None,
                   forms: Sequence[str] = ("scaled",), samples: int = 2,
                   mc_keys: int | None = None,
                   expectations: Sequence[str] | Mapping[str, Sequence[str]] = ("main", "rms"),
                   generator: torch.Generator | None = None,
                   chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> dict[str, dict[str, Tensor]]:
    """Every statistic of every form for every row and every N of ``n_grid``.

    Args:
        weights: ``[..., R, L]`` non-negative attention weights; 0 beyond each row's visible keys.
        vectors: ``[..., L, d]`` the x_i; leading dimensions broadcast with ``weights``'.
        n_grid: top-N sizes (ints >= 1; N >= a row's length selects every key of that row).
        lengths: ``[R]`` visible keys per row (``t + 1`` for the causal row t); default L.
        forms: which readings (:data:`FORMS`).
        samples: Monte Carlo draws per row (0: no ``mc``; 1: ``mc_var`` is NaN).
        mc_keys: estimate each draw's sum over the non-selected keys from this many keys drawn
            with replacement (unbiased); None: sum over every key.
        expectations: which closed forms to compute (``main``, ``rms``, ``upper``; empty for
            none), for every form, or a mapping form -> closed forms (forms not named get none).
        generator: for the Monte Carlo draws.
        chunk_elements: the largest temporary, in elements.

    Returns ``{form: {statistic: [..., R, n]}}`` in the inputs' dtype, the statistics among
    :data:`STATISTICS` that were asked for (``mc_var`` is NaN with one sample).
    """
    forms = _check_forms(forms)
    if weights.dim() < 2 or vectors.dim() < 2:
        raise ValueError(f"weights must be [..., R, L] and vectors [..., L, d]; got "
                         f"{tuple(weights.shape)} and {tuple(vectors.shape)}")
    finite_weights_and_vectors(weights, vectors)
    L = weights.shape[-1]
    if vectors.shape[-2] != L:
        raise ValueError(f"weights have {L} keys but vectors have {vectors.shape[-2]}")
    if samples < 0 or (mc_keys is not None and mc_keys < 1):
        raise ValueError(f"samples must be >= 0 and mc_keys >= 1 or None (got {samples}, {mc_keys})")
    lead = torch.broadcast_shapes(weights.shape[:-2], vectors.shape[:-2])
    R, d = weights.shape[-2], vectors.shape[-1]
    dtype = torch.promote_types(weights.dtype, vectors.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    w = weights.to(dtype).expand(*lead, R, L).reshape(-1, R, L)
    x = vectors.to(dtype).expand(*lead, L, d).reshape(-1, L, d)
    lens = (torch.full((R,), L, dtype=torch.long) if lengths is None
            else torch.as_tensor(lengths).reshape(-1).long().cpu())
    if lens.numel() != R or (lens < 1).any() or (lens > L).any():
        raise ValueError(f"lengths must give one visible-key count in 1..{L} per row "
                         f"({R} rows; got {lens.tolist()})")
    if (w < 0).any():
        raise ValueError("attention weights must be non-negative")
    visible = torch.arange(L)[None, :] < lens[:, None]
    if (w.masked_fill(visible, 0) != 0).any():
        raise ValueError("weights beyond a row's visible keys must be exactly 0; pass "
                         "lengths = query position + 1 for causal rows")
    grid = _grid(n_grid)
    wanted = _wanted(expectations, forms)
    B, n = w.shape[0], grid.numel()
    out = {f: {s: w.new_empty(B, R, n) for s in _stats(f, samples, wanted[f])} for f in forms}
    per_problem = 4 * L * n + (int(grid.max().clamp(max=L)) + n) * d + L
    rows_per_chunk = max(1, chunk_elements // per_problem)
    b_step, r_step = ((max(1, rows_per_chunk // R), R) if rows_per_chunk >= R
                      else (1, rows_per_chunk))
    for b0 in range(0, B, b_step):
        for r0 in range(0, R, r_step):
            bs, rs = slice(b0, b0 + b_step), slice(r0, r0 + r_step)
            part = _chunk(w[bs, rs], x[bs], lens[rs], grid, forms, samples, mc_keys,
                          wanted, generator)
            for f, by_stat in part.items():
                for s, v in by_stat.items():
                    out[f][s][bs, rs] = v
    return {f: {s: v.reshape(*lead, R, n) for s, v in by_stat.items()} for f, by_stat in out.items()}


def _order_ranks(order: Tensor, length: int) -> Tensor:
    """Each key's place in ``order`` [b, r, k] (the first k keys of an ordering), ``k`` for every
    key not among them: [b, r, length]."""
    k = order.shape[-1]
    rank = torch.full((*order.shape[:-1], length), k, dtype=torch.long)
    return rank.scatter_(-1, order, torch.arange(k).expand_as(order))


#: from this vector dimension on, the context vectors are one matrix product over the keys
#: (:func:`_ordered_context`); below it, segment sums of the gathered vectors are cheaper
CONTEXT_MATMUL_MIN_DIM = 256


def _ordered_context(w: Tensor, x: Tensor, order: Tensor, rank: Tensor, grid: Tensor) -> Tensor:
    """Context vectors ``s_N`` [b, r, n, d] of the first N keys of ``order`` [b, r, k] (k >= max
    N), for every N of the sorted ``grid``. w [b, r, L], x [b, L, d]; ``rank`` [b, r, L] each key's
    place in ``order`` (:func:`_order_ranks`).

    Only the n prefix sums are formed, never the k partial ones: for wide vectors (d >=
    :data:`CONTEXT_MATMUL_MIN_DIM`, e.g. hidden states) as one batched product of the weights cut
    to each prefix ``[r n, L]`` with ``x``; otherwise the weighted vectors of the k keys are
    gathered once and summed between consecutive N of the grid, then accumulated over the grid.
    """
    b, r, L = w.shape
    n = grid.numel()
    if x.shape[-1] >= CONTEXT_MATMUL_MIN_DIM:
        cut = w[:, :, None, :] * (rank[:, :, None, :] < grid[:, None])      # [b, r, n, L]
        return torch.bmm(cut.view(b, r * n, L), x).view(b, r, n, -1)
    wk = torch.gather(w, -1, order)                                           # [b, r, k]
    xk = x[torch.arange(b)[:, None, None], order].mul_(wk[..., None])         # [b, r, k, d]
    bounds = [0] + grid.tolist()
    parts = [xk[:, :, lo:hi].sum(2) for lo, hi in zip(bounds[:-1], bounds[1:])]
    return torch.stack(parts, 2).cumsum_(2)


def _family_distances(x: Tensor, x2: Tensor, w_t: Tensor, y2: Tensor, s: Tensor,
                      outside: Tensor, forms: tuple[str, ...]) -> dict[str, Tensor]:
    """The family forms for one set per (row, N): x [b, L, d]; s [b, r, n, d]; outside
    [b, L, r, n] bool. Returns {form: [b, r, n]}."""
    b, L, _ = x.shape
    r, n = s.shape[1], s.shape[2]
    s2 = (s * s).sum(-1)[:, None]                                             # [b, 1, r, n]
    cross = torch.matmul(x, s.reshape(b, r * n, -1).transpose(-1, -2)).view(b, L, r, n)
    res = {}
    # near-duplicates of s: the expansion is all rounding there, the difference is used instead
    # (normlimits.metrics.gram.refine_squared)
    if "scaled" in forms:      # ||y - s||^2 = ||y||^2 + ||s||^2 - 2 alpha <x, s>
        dist = torch.addcmul(y2[..., None] + s2, cross, w_t[..., None], value=-2.0)

        def direct_scaled(index):
            bi, li, ri, ni = index
            return (w_t[bi, li, ri, None] * x[bi, li] - s[bi, ri, ni]).square().sum(-1)

        refine_squared(dist, y2[..., None] + s2, outside, direct_scaled)
        res["scaled"] = dist.clamp_min_(0).sqrt_().mul_(outside).sum(1)
    if "raw" in forms or "weighted" in forms:
        dist = torch.add(x2[:, :, None, None] + s2, cross, alpha=-2.0)

        def direct_raw(index):
            bi, li, ri, ni = index
            return (x[bi, li] - s[bi, ri, ni]).square().sum(-1)

        refine_squared(dist, x2[:, :, None, None] + s2, outside, direct_raw)
        dist.clamp_min_(0).sqrt_().mul_(outside)
        if "raw" in forms:
            res["raw"] = dist.sum(1)
        if "weighted" in forms:
            res["weighted"] = torch.einsum("blrn,blr->brn", dist, w_t)
    return res


def _gathered_terms(x: Tensor, w: Tensor, rank: Tensor, s: Tensor, grid: Tensor, idx: Tensor,
                    factor: Tensor, forms: tuple[str, ...]) -> dict[str, Tensor]:
    """The family forms' terms of the keys ``idx`` [b, r, m] of each row, each multiplied by
    ``factor`` [b, r, m] (and 0 where the key is selected), summed over the m keys: {form: [b, r, n]}."""
    b, r, _ = w.shape
    xs = x[torch.arange(b)[:, None, None], idx]                               # [b, r, m, d]
    ws = torch.gather(w, -1, idx)[..., None]                                  # [b, r, m, 1]
    keep = (torch.gather(rank, -1, idx)[..., None] >= grid) * factor[..., None]   # [b, r, m, n]
    s2 = (s * s).sum(-1)[:, :, None]                                          # [b, r, 1, n]
    cross = torch.matmul(xs, s.transpose(-1, -2))                             # [b, r, m, n]
    x2 = (xs * xs).sum(-1)[..., None]                                         # [b, r, m, 1]
    res = {}
    if "scaled" in forms:
        y2s = ws * ws * x2
        dist = torch.addcmul(y2s + s2, cross, ws, value=-2.0)

        def direct_scaled(index):
            bi, ri, mi, ni = index
            return (ws[bi, ri, mi] * xs[bi, ri, mi] - s[bi, ri, ni]).square().sum(-1)

        refine_squared(dist, y2s + s2, keep != 0, direct_scaled)
        res["scaled"] = dist.clamp_min_(0).sqrt_().mul_(keep).sum(2)
    if "raw" in forms or "weighted" in forms:
        dist = torch.add(x2 + s2, cross, alpha=-2.0)

        def direct_raw(index):
            bi, ri, mi, ni = index
            return (xs[bi, ri, mi] - s[bi, ri, ni]).square().sum(-1)

        refine_squared(dist, x2 + s2, keep != 0, direct_raw)
        dist.clamp_min_(0).sqrt_().mul_(keep)
        if "raw" in forms:
            res["raw"] = dist.sum(2)
        if "weighted" in forms:
            res["weighted"] = (dist * ws).sum(2)
    return res


def _sampled_family(x: Tensor, w: Tensor, rank: Tensor, s: Tensor, grid: Tensor, lens: Tensor,
                    keys: int, forms: tuple[str, ...], generator,
                    heavy: Tensor | None = None) -> dict[str, Tensor]:
    """The family forms with the sum over non-selected keys estimated from ``keys`` keys per row
    drawn uniformly with replacement among the visible ones (unbiased). rank [b, r, L].

    ``heavy`` [b, r, h] (optional): keys summed exactly instead (each row's largest weights). A
    drawn key that is heavy then counts 0, so the draws estimate the sum over the other keys
    without bias (each is drawn ``keys / len`` times on average). Stratifying so matters on real
    models: an attention sink carries most of a row's weight, its term dwarfs the others, and a
    plain draw of 64 of 1,000 keys misses it most of the time, so the estimate and its variance
    from a few draws are both far off."""
    b, r, L = w.shape
    u = torch.rand(b, r, keys, generator=generator, dtype=w.dtype)
    idx = (u * lens.to(w.dtype)[:, None]).long().clamp(max=L - 1)            # [b, r, m]
    factor = (lens.to(w.dtype)[:, None] / keys).expand(b, r, keys)           # [b, r, m]
    if heavy is not None:
        factor = factor * ~(idx[..., :, None] == heavy[..., None, :]).any(-1)
    res = _gathered_terms(x, w, rank, s, grid, idx, factor, forms)
    if heavy is not None:
        seen = (heavy < lens[None, :, None]).to(w.dtype)                   # invisible: 0
        for f, v in _gathered_terms(x, w, rank, s, grid, heavy, seen, forms).items():
            res[f] = res[f] + v
    return res


def _chunk(w: Tensor, x: Tensor, lens: Tensor, grid: Tensor, forms: tuple[str, ...],
           samples: int, mc_keys: int | None, wanted: dict, generator) -> dict:
    """All statistics for one chunk: w [b, r, L], x [b, L, d]; outputs [b, r, n] for the grid as
    given. Values of N that select every key of every row of the chunk are filled in directly."""
    b, r, L = w.shape
    total = torch.matmul(w, x)                                                # [b, r, d] = T
    t_norm = total.norm(dim=-1)                                               # [b, r]
    n = grid.numel()
    live_grid = torch.unique(grid[grid < int(lens.max())])                   # sorted
    # Every statistic of a row whose N selects all its keys: 0 for the family, ||T|| else.
    def filled(f: str, st: str) -> Tensor:
        if st == "mc_var":            # no spread across draws; undefined from one draw
            return torch.full((b, r, n), 0.0 if samples > 1 else float("nan"), dtype=w.dtype)
        return (t_norm[..., None].expand(b, r, n).clone() if f == "norm_of_sum"
                else w.new_zeros(b, r, n))

    out = {f: {st: filled(f, st) for st in _stats(f, samples, wanted[f])} for f in forms}
    if "individual" in out.get("scaled", {}):     # S does not depend on N
        y_norm = (w * x.norm(dim=-1)[:, None, :]).sum(-1)                    # [b, r]
        out["scaled"]["individual"] = y_norm[..., None].expand(b, r, n).clone()
    if live_grid.numel():
        part = _chunk_live(w, x, lens, live_grid, forms, samples, mc_keys, wanted,
                           generator, total)
        cols = torch.searchsorted(live_grid, grid.clamp(max=int(live_grid.max())))
        live = grid < int(lens.max())
        for f, by_stat in part.items():
            for st, v in by_stat.items():
                if st != "individual":
                    out[f][st][..., live] = v[..., cols[live]]
    return out


def _chunk_live(w, x, lens, grid, forms, samples, mc_keys, wanted, generator, total):
    """:func:`_chunk` for a sorted grid of distinct N below the chunk's longest row."""
    b, r, L = w.shape
    dtype = w.dtype
    visible = torch.arange(L)[None, :] < lens[:, None]                        # [r, L]
    x2 = (x * x).sum(-1)                                                      # [b, L]
    w_t = w.transpose(1, 2)                                                   # [b, L, r]
    y2 = w_t * w_t * x2[..., None]                                            # [b, L, r]
    family = tuple(f for f in forms if f in FAMILY)
    res: dict = {f: {} for f in forms}

    def norm_of_sum(s: Tensor) -> Tensor:
        return (total[:, :, None, :] - 2.0 * s).norm(dim=-1)

    n_max = int(grid.max())
    _, order = top_n(torch.where(visible, w, torch.full_like(w, -1.0)), n_max)   # book's ties
    rank = _order_ranks(order, L)
    # the keys a sampled draw sums exactly: each row's largest weights (see _sampled_family)
    heavy = (order[..., :min(MC_HEAVY_KEYS, n_max)] if mc_keys is not None and MC_HEAVY_KEYS
             else None)
    s = _ordered_context(w, x, order, rank, grid)
    if family:
        outside = (torch.where(visible, rank, -1).transpose(1, 2)[..., None] >= grid)
        for f, v in _family_distances(x, x2, w_t, y2, s, outside, family).items():
            res[f]["true"] = v
        del outside
    if "norm_of_sum" in forms:
        res["norm_of_sum"]["true"] = norm_of_sum(s)
    if samples:
        acc = {f: [0.0, 0.0] for f in forms}
        top = order[..., :1]                                  # [b, r, 1] each row's largest weight
        inside = (grid.to(dtype)[None, None, :] / lens.to(dtype)[None, :, None]).clamp(max=1.0)

        def draw(u: Tensor) -> dict[str, Tensor]:
            order = torch.topk(u, n_max, largest=False).indices   # a uniform random ordered prefix
            rank = _order_ranks(order, L)
            s = _ordered_context(w, x, order, rank, grid)
            if not family:
                vals = {}
            elif mc_keys is None:
                outside = (torch.where(visible, rank, -1).transpose(1, 2)[..., None] >= grid)
                vals = _family_distances(x, x2, w_t, y2, s, outside, family)
            else:
                vals = _sampled_family(x, w, rank, s, grid, lens, mc_keys, family, generator,
                                       heavy)
            if "norm_of_sum" in forms:
                vals["norm_of_sum"] = norm_of_sum(s)
            return vals

        for _ in range(samples):
            # One draw, stratified on the row's largest weight: a subset that holds it (chance
            # N/len) and one that does not, weighted by their chances. An attention sink is in a
            # uniform N-subset rarely, but then every term is large: unstratified, a few draws
            # miss that event and put the estimate (and its variance) far below E.
            u = torch.where(visible, torch.rand(b, r, L, generator=generator, dtype=dtype),
                            torch.full((b, r, L), 2.0, dtype=dtype))
            held = draw(u.scatter(-1, top, -1.0))
            left = draw(u.scatter(-1, top, 3.0))
            vals = {f: inside * held[f] + (1 - inside) * left[f] for f in held}
            for f, v in vals.items():
                acc[f][0] = acc[f][0] + v
                acc[f][1] = acc[f][1] + v * v
        for f, (s1, s2) in acc.items():
            mean = s1 / samples
            res[f]["mc"] = mean
            res[f]["mc_var"] = (((s2 / samples - mean * mean).clamp_min(0) / (samples - 1))
                                if samples > 1 else torch.full_like(mean, float("nan")))
    if any(wanted.values()):
        _closed_forms(res, forms, family, wanted, x, x2, w_t, y2, total, lens, grid, visible)
    return res


def _closed_forms(res, forms, family, wanted, x, x2, w_t, y2, total, lens, grid, visible) -> None:
    """The closed forms ``wanted[form]`` (``main``, ``rms``, ``upper``) of every form (module
    docstring), into ``res``."""
    dtype = x.dtype
    Lr = lens.to(dtype)[:, None]                                              # [r, 1]
    Ne = torch.minimum(grid[None, :], lens[:, None]).to(dtype)                # [r, n] N_eff
    vis_t = visible.t().to(dtype)                                             # [L, r]
    q = (y2 * vis_t).sum(1)                                                   # [b, r] sum ||y||^2
    t2 = (total * total).sum(-1)                                              # [b, r]
    if wanted.get("norm_of_sum"):
        shrink = 1 - 2 * Ne / Lr                                              # [r, n]
        sigma2 = (q / Lr.t() - t2 / Lr.t() ** 2).clamp_min(0)                 # [b, r]
        var = torch.where(Lr > 1, 4 * Ne * (Lr - Ne) / (Lr - 1).clamp_min(1), torch.zeros_like(Ne))
        if "main" in wanted["norm_of_sum"]:
            res["norm_of_sum"]["main"] = shrink.abs() * t2.sqrt()[..., None]
        if "rms" in wanted["norm_of_sum"]:
            res["norm_of_sum"]["rms"] = (shrink ** 2 * t2[..., None] + var * sigma2[..., None]).sqrt()
    family = tuple(f for f in family if wanted[f])
    if not family:
        return
    keep = (Lr - Ne) / Lr                                                     # [r, n] P(i not in I)
    if "upper" in wanted.get("scaled", ()):
        individual = torch.einsum("blr,lr->br", y2.sqrt(), vis_t)[..., None]  # [b, r, 1] S
        r2 = ((Ne + 1) * Lr * q[..., None] - (Ne - 1) ** 2 * q[..., None]
              + Ne * (Ne - 3) * t2[..., None]) / (Lr - 1).clamp_min(1)
        second = keep * (Lr * r2.clamp_min(0)).sqrt()
        res["scaled"]["upper"] = torch.minimum(keep * (Ne + 1) * individual, second)
    family = tuple(f for f in family if {"main", "rms"} & set(wanted[f]))
    if not family:
        return
    c = torch.where(Lr > 1, Ne / (Lr - 1).clamp_min(1), torch.zeros_like(Ne))  # [r, n]
    w_xt = torch.matmul(x, total.transpose(1, 2))                             # [b, L, r] <x_i, T>
    yt = w_t * w_xt                                                           # <y_i, T>
    u2 = t2[:, None, :] - 2 * yt + y2                                         # ||T - y_i||^2
    groups = []
    if "scaled" in family:
        groups.append((("scaled",), y2, yt - y2))                             # a = y_i
    if "raw" in family or "weighted" in family:
        groups.append((tuple(f for f in ("raw", "weighted") if f in family),
                       x2[..., None].expand_as(yt), w_xt - w_t * x2[..., None]))   # a = x_i
    variance = None
    if any("rms" in wanted[f] for f in family):                               # V_i, per N
        factor = torch.where((Lr > 2) & (Lr - 1 - Ne > 0),
                             Ne * (Lr - 1 - Ne) / (Lr - 2).clamp_min(1), torch.zeros_like(Ne))
        rest = (Lr - 1).clamp_min(1).t()[None]                                # [1, 1, r]
        sigma2_i = ((q[:, None, :] - y2) / rest - u2 / rest ** 2).clamp_min(0)  # [b, L, r]
        variance = (sigma2_i[..., None], factor)
    for names, a2, au in groups:
        # ||a - c u||^2 = ||a||^2 - 2 c <a, u> + c^2 ||u||^2, for every N at once
        m2 = torch.addcmul(a2[..., None], au[..., None], c, value=-2.0)
        m2.addcmul_(u2[..., None], c * c).clamp_min_(0)
        keys = [k for k in ("main", "rms") if any(k in wanted[name] for name in names)]
        for key in keys:
            if key == "main":
                part = m2.sqrt() if "rms" in keys else m2.sqrt_()
            else:
                part = m2.addcmul_(*variance).sqrt_()
            for name in (nm for nm in names if key in wanted[nm]):
                g = vis_t if name != "weighted" else w_t * vis_t               # [.., L, r]
                eq = "blrn,lr->brn" if g.dim() == 2 else "blrn,blr->brn"
                res[name][key] = keep * torch.einsum(eq, part, g)
