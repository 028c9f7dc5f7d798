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
* ``mc``: an unbiased estimate of ``E = E_{I ~ U(L, N)}[d~(I)]`` from ``samples`` independent
  replicates per row, and ``mc_var`` the variance of that estimate (the replicates' sample
  variance over ``samples``). Each replicate is stratified on which of the row's ``strata``
  largest weights (:data:`MC_STRATA`; the set H) the subset holds: for every pattern P of H it
  draws the other ``N - |P|`` keys of ``I`` uniformly among the light keys (one uniform random
  order of them, nested over N), sums the terms of the heavy keys outside ``I`` exactly and those
  of the light keys outside ``I`` from a simple random sample of ``mc_keys`` of them (the last
  ``mc_keys`` of that order, which are a sample without replacement of the keys outside ``I``
  whatever N; every one when fewer are left, and with ``mc_keys=None``), and weighs the pattern
  by its exact hypergeometric chance ``C(L - |H|, N - |P|) / C(L, N)``
  (:func:`stratum_probabilities`). Where one light key is in ``I`` (or one is left out of it)
  that key is drawn by importance instead, with chance half uniform and half in proportion to
  its weight, and weighted ``1 / (light q_j)``: E over the light key is then a ratio estimate of
  bounded spread. Why: on a trained head's rows E is dominated by rare events, the subsets
  holding the sink, a second key of weight 0.01-0.02 or a light key of relatively large weight
  (chance about N/L each), and a few plain draws miss them and report a standard error far too
  small (the book's estimator before issue 47, stratified on the largest weight only, was off by
  5 to 80 of its own standard errors on SmolLM2's sink heads). Every pattern of H is visited in
  every replicate, so the replicates vary only through the light keys; drawing the light keys
  outside ``I`` without replacement among those outside (not among all keys) keeps the estimate
  exact when at most ``mc_keys`` are left, where the draws with replacement overshot near N = L.
  ``tests/unit/test_readings.py`` and ``tests/model/test_estimator.py`` measure the coverage of its
  intervals against exact E (:func:`exact_expectation`) on synthetic and SmolLM2 rows;
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
elementwise passes over ``[L, n]``; per Monte Carlo replicate the same for ``mc_keys + strata``
keys against ``2^strata n`` context vectors (what the replicates share, everything computed
without a random number, once per chunk: :func:`_draw_layout`); rows are processed in chunks of
``chunk_elements`` floats. Shapes: weights ``[..., R, L]`` (zero beyond each row's visible keys),
vectors ``[..., L, d]`` (leading dimensions broadcast), outputs ``[..., R, n]``.
"""

from __future__ import annotations

from dataclasses import dataclass
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


#: the largest temporary of :func:`row_statistics`, in elements (16M: 128 MB in float64). Its
#: Monte Carlo is bound by per-call overhead on small chunks: on SmolLM2-135M's survey window the
#: critical-N study took 37-45 s at 4M elements and 21-24 s at 16M (2 idle cores; 64M: 30 s). The
#: draws follow the chunks, so the same seed gives the same numbers only at the same chunk size.
DEFAULT_CHUNK_ELEMENTS = 1 << 24
#: the Monte Carlo estimate of E is stratified on which of each row's this many largest weights
#: the subset holds (2^k strata, each with its exact chance; :func:`row_statistics`)
MC_STRATA = 4


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
                   chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
                   strata: int = MC_STRATA) -> dict[str, dict[str, Tensor]]:
    """Every statistic of every form for every row and every N of ``n_grid``.

    Args:
        weights: ``[..., R, L]`` non-negative attention weights; 0 beyond each row's visible keys.
        vectors: ``[..., L, d]`` the x_i; leading dimensions broadcast with ``weights``'.
        n_grid: top-N sizes (ints >= 1; N >= a row's length selects every key of that row).
        lengths: ``[R]`` visible keys per row (``t + 1`` for the causal row t); default L.
        forms: which readings (:data:`FORMS`).
        samples: Monte Carlo replicates per row (0: no ``mc``; 1: ``mc_var`` is NaN).
        mc_keys: estimate each replicate's sum over the non-selected light keys from a sample of
            this many of them without replacement (unbiased); None: sum over every key.
        expectations: which closed forms to compute (``main``, ``rms``, ``upper``; empty for
            none), for every form, or a mapping form -> closed forms (forms not named get none).
        generator: for the Monte Carlo draws (drawn chunk by chunk: the numbers depend on
            ``chunk_elements`` too).
        chunk_elements: the largest temporary, in elements.
        strata: how many of each row's largest weights the estimate stratifies on (2^strata
            strata per replicate; 0: plain uniform subsets).

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
    if samples < 0 or (mc_keys is not None and mc_keys < 1) or strata < 0:
        raise ValueError(f"samples must be >= 0, mc_keys >= 1 or None and strata >= 0 (got "
                         f"{samples}, {mc_keys}, {strata})")
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
    patterns = 2 ** min(strata, L)
    sampled = (min(mc_keys or L, L) + strata + 1) * patterns * n if samples else 0
    per_problem = 4 * L * n + (int(grid.max().clamp(max=L)) + n) * d + L + 4 * sampled \
        + (min(strata, L) + 2) * n * d
    rows_per_chunk = max(1, chunk_elements // per_problem)
    b_step, r_step = ((max(1, rows_per_chunk // R), R) if rows_per_chunk >= R
                      else (1, rows_per_chunk))
    for b0 in range(0, B, b_step):
        for r0 in range(0, R, r_step):
            bs, rs = slice(b0, b0 + b_step), slice(r0, r0 + r_step)
            part = _chunk(w[bs, rs], x[bs], lens[rs], grid, forms, samples, mc_keys,
                          wanted, generator, strata)
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


def _ordered_context(w: Tensor, x: Tensor, order: Tensor, rank: Tensor | None,
                     grid: Tensor) -> Tensor:
    """Context vectors ``s_N`` [b, r, n, d] of the first N keys of ``order`` [b, r, k] (k >= max
    N), for every N of the sorted ``grid``. w [b, r, L], x [b, L, d]; ``rank`` [b, r, L] each key's
    place in ``order`` (:func:`_order_ranks`; None: formed here if the product needs it).

    Only the n prefix sums are formed, never the k partial ones: for wide vectors (d >=
    :data:`CONTEXT_MATMUL_MIN_DIM`, e.g. hidden states) as one batched product of the weights cut
    to each prefix ``[r n, L]`` with ``x``; otherwise the weighted vectors of the k keys are
    gathered once and summed between consecutive N of the grid, then accumulated over the grid.
    """
    b, r, L = w.shape
    n = grid.numel()
    if x.shape[-1] >= CONTEXT_MATMUL_MIN_DIM:
        rank = _order_ranks(order, L) if rank is None else rank
        cut = w[:, :, None, :] * (rank[:, :, None, :] < grid[:, None])      # [b, r, n, L]
        return torch.bmm(cut.view(b, r * n, L), x).view(b, r, n, -1)
    wk = torch.gather(w, -1, order)                                           # [b, r, k]
    rows = (order + (torch.arange(b) * L)[:, None, None]).reshape(-1)         # into x [b L, d]
    xk = x.reshape(b * L, -1).index_select(0, rows).view(*order.shape, -1)   # [b, r, k, d]
    xk.mul_(wk[..., None])
    widths = torch.diff(grid, prepend=grid.new_zeros(1)).tolist()             # keys per segment
    parts = [segment.sum(2) for segment in xk[:, :, :int(grid[-1])].split(widths, 2)]
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


def _strata(k: int) -> Tensor:
    """[2^k, k] bool: the membership patterns of k heavy keys (pattern p holds slot j iff bit j
    of p is set)."""
    return ((torch.arange(2 ** k)[:, None] >> torch.arange(k)) & 1).bool()


def _log_binomial(a: Tensor, c: Tensor) -> Tensor:
    """log C(a, c) in float64 (entries with c outside [0, a] are garbage: mask them)."""
    a, c = a.double(), c.double().clamp(min=0)
    c = torch.minimum(c, a)
    return torch.lgamma(a + 1) - torch.lgamma(c + 1) - torch.lgamma(a - c + 1)


def stratum_probabilities(lens: Tensor, heavy: int, grid: Tensor) -> Tensor:
    """``p[r, P, n]`` (float64): the chance that a uniform N-subset of row r's ``lens[r]`` keys
    holds exactly the heavy keys of pattern P (:func:`_strata` of ``heavy`` slots; a row holds
    ``min(heavy, lens[r])`` heavy keys, and a pattern naming a slot it lacks has chance 0), for
    every N of ``grid`` (N above a row's length: every key). Hypergeometric and exact:
    ``C(len - h, N - |P|) / C(len, N)``; the patterns' chances sum to 1 (Vandermonde)."""
    member = _strata(heavy)                                                   # [P, k]
    size = member.sum(1)                                                      # [P]
    lens = lens.long()
    held = torch.clamp(lens, max=heavy)                                       # [r]
    light = lens - held                                                       # [r]
    ne = torch.minimum(grid[None, :], lens[:, None])                          # [r, n]
    rest = ne[:, None, :] - size[None, :, None]                               # [r, P, n]
    slot_ok = (member[None] <= (torch.arange(heavy)[None, None] < held[:, None, None])).all(-1)
    valid = (rest >= 0) & (rest <= light[:, None, None]) & slot_ok[..., None]
    logp = (_log_binomial(light[:, None, None].expand_as(rest), rest)
            - _log_binomial(lens[:, None, None].expand_as(rest), ne[:, None, :].expand_as(rest)))
    return torch.where(valid, logp.exp(), torch.zeros_like(logp))


def _weighted_terms(xs: Tensor, ws: Tensor, cross: Tensor, s2: Tensor, factor: Tensor,
                    context, forms: tuple[str, ...]) -> dict[str, Tensor]:
    """The family forms' terms ``g_i ||b_i x_i - s||`` of q keys per row (vectors ``xs``
    [b, r, q, d], weights ``ws`` [b, r, q, 1]) against c context vectors per row, from their
    products ``cross`` = <x_i, s> [b, r, q, c] and ``s2`` = ||s||^2 [b, r, c]; each term is
    multiplied by ``factor`` [b, r, q, c] (0: not counted) and summed over the q keys:
    {form: [b, r, c]}. ``context(bi, ri, ci)`` gives the context vectors themselves [k, d], for
    the entries the expansion cannot resolve (:func:`normlimits.metrics.gram.refine_squared`)."""
    def needed():
        return factor != 0

    s2 = s2[:, :, None]                                                       # [b, r, 1, c]
    x2 = (xs * xs).sum(-1)[..., None]                                         # [b, r, q, 1]
    res = {}
    if "scaled" in forms:
        y2s = ws * ws * x2
        reach = y2s + s2                                                      # ||b x||^2 + ||s||^2
        dist = torch.addcmul(reach, cross, ws, value=-2.0)

        def direct_scaled(index):
            bi, ri, qi, ci = index
            return (ws[bi, ri, qi] * xs[bi, ri, qi] - context(bi, ri, ci)).square().sum(-1)

        refine_squared(dist, reach, needed, direct_scaled)
        del reach
        res["scaled"] = dist.clamp_min_(0).sqrt_().mul_(factor).sum(2)
    if "raw" in forms or "weighted" in forms:
        reach = x2 + s2                                                       # ||x||^2 + ||s||^2
        dist = torch.add(reach, cross, alpha=-2.0)

        def direct_raw(index):
            bi, ri, qi, ci = index
            return (xs[bi, ri, qi] - context(bi, ri, ci)).square().sum(-1)

        refine_squared(dist, reach, needed, direct_raw)
        del reach
        dist.clamp_min_(0).sqrt_().mul_(factor)
        if "raw" in forms:
            res["raw"] = dist.sum(2)
        if "weighted" in forms:
            res["weighted"] = (dist * ws).sum(2)
    return res


@dataclass(frozen=True)
class _DrawLayout:
    """What every replicate of one chunk's stratified estimate shares (:func:`_draw_layout`): the
    chunk's inputs and everything computed from them without a random number. Shapes as in
    :func:`_stratified_draw`."""

    w: Tensor                 # [b, r, L]
    x: Tensor                 # [b, L, d]
    total: Tensor             # [b, r, d]
    heavy: Tensor             # [b, r, k] the k heaviest keys
    forms: tuple
    member: Tensor            # [P, k] the patterns, in w's dtype
    grid: Tensor              # [n]
    light: Tensor             # [r] light keys per row
    is_light: Tensor          # [b, r, L] bool
    q: Tensor                 # [b, r, L] the importance chances of the one light key drawn apart
    cdf: Tensor               # [b, r, L] their cumulative sums
    n_light: Tensor           # [1, r, 1] light, in w's dtype
    sizes: Tensor             # [G] the light context sizes |J| > 0 needed, sorted
    left_out_rows: Tensor     # [r'] rows whose J = light - {last} is formed apart (light >= 3
                              # and size light - 1 among ``sizes``)
    left_out_at: Tensor       # [r] where light - 1 is in ``sizes``
    t_light: Tensor | None    # [b, r', d] the sum of every light key's y, rows ``left_out_rows``
    at: Tensor                # [r, P, n] each (P, N)'s light size: index into s_light (0: none)
    at_b: Tensor              # [b, r, P n]
    y_heavy: Tensor           # [b, r, k, d]
    sp2: Tensor               # [b, r, P] ||s_P||^2 of the heavy part
    prob: Tensor              # [1, r, P, n] the patterns' chances, in w's dtype
    one: Tensor               # [1, r, P, n] |J| = 1
    one_out: Tensor           # [1, r, P, n] J = every light key but one
    keys: int                 # m: the light keys sampled outside I
    pos: Tensor               # [r, m] their places in the order
    valid: Tensor             # [1, r, m]
    tail: Tensor | None       # [1, r, m, P, n] the sampled keys' weights before the draw's own
    heavy_out: Tensor | None  # [1, r, k, P, 1] whether a live heavy slot is outside P


def _draw_layout(w: Tensor, x: Tensor, total: Tensor, lens: Tensor, grid: Tensor, heavy: Tensor,
                prob: Tensor, keys: int | None, forms: tuple[str, ...]) -> _DrawLayout:
    """The part of :func:`_stratified_draw` that does not depend on the draw, computed once per
    chunk for all its replicates (the same numbers, bit for bit, as computing it in each)."""
    b, r, L = w.shape
    k = heavy.shape[-1]
    member = _strata(k).to(w.dtype)                                           # [P, k]
    n_pat, n = member.shape[0], grid.numel()
    dtype = w.dtype
    held = torch.clamp(lens, max=k)                                           # [r]
    light = lens - held                                                       # [r] light keys
    visible = torch.arange(L)[None, :] < lens[:, None]                        # [r, L]
    is_heavy = torch.zeros(b, r, L, dtype=torch.bool).scatter_(-1, heavy, True)
    is_light = visible & ~is_heavy                                            # [b, r, L]
    # the one light key drawn apart (J = {first}, or the one left out): chance q_j half uniform,
    # half in proportion to the weight, weighted 1 / (light q_j)
    lw = torch.where(is_light, w, torch.zeros_like(w))
    lw_sum = lw.sum(-1, keepdim=True)
    n_light = light.to(dtype)[None, :, None]                                  # [1, r, 1]
    flat = is_light * (0.5 / n_light.clamp_min(1))
    q = flat + torch.where(lw_sum > 0, 0.5 * lw / lw_sum.clamp_min(torch.finfo(dtype).tiny), flat)
    q = torch.where((light > 0)[None, :, None], q, (torch.arange(L) == 0).to(dtype).expand(b, r, L))
    ne = torch.minimum(grid[None, :], lens[:, None])                          # [r, n]
    rest = (ne[:, None, :] - _strata(k).sum(1)[None, :, None]).clamp(min=0)   # [r, P, n] |J|
    rest = torch.minimum(rest, light[:, None, None])
    sizes = torch.unique(rest[rest > 0])
    wide = light >= 3                                         # [r] J = light - {last} apart
    rows = torch.zeros(0, dtype=torch.long)
    where_out = torch.zeros(r, dtype=torch.long)
    t_light = None
    if sizes.numel() and bool(wide.any()):
        where_out = torch.searchsorted(sizes, light - 1)                      # [r]
        has = wide & (where_out < sizes.numel())
        has &= sizes[where_out.clamp(max=sizes.numel() - 1)] == light - 1
        if bool(has.any()):
            rows = has.nonzero()[:, 0]
            t_light = torch.matmul(lw[:, rows, None, :], x[:, None])[:, :, 0]   # [b, r', d]
    at = torch.searchsorted(sizes, rest) + 1                                  # [r, P, n]
    at = torch.where(rest > 0, at, torch.zeros_like(at))
    at_b = at.reshape(1, r, n_pat * n).expand(b, r, n_pat * n)                # [b, r, P n]
    y_heavy = torch.gather(w, -1, heavy)[..., None] * x[torch.arange(b)[:, None, None], heavy]
    hh = torch.matmul(y_heavy, y_heavy.transpose(-1, -2))                     # [b, r, k, k]
    sp2 = torch.einsum("pk,brkl,pl->brp", member, hh, member)                 # [b, r, P]
    one = (rest == 1)[None]                                                   # [1, r, P, n]
    one_out = ((rest == light[:, None, None] - 1) & wide[:, None, None])[None]
    m = L if keys is None else min(keys, L)
    # the last m light keys of the order: a simple random sample (without replacement) of the
    # light keys outside J, whatever |J| <= light - m; all of them when fewer remain
    pos = light[:, None] - m + torch.arange(m)[None, :]                       # [r, m]
    valid = (pos >= 0)[None]                                                  # [1, r, m]
    tail = heavy_out = None
    if any(f in FAMILY for f in forms):
        outside_n = (light[:, None, None] - rest).to(dtype)                   # [r, P, n]
        taken = torch.minimum(outside_n, torch.full_like(outside_n, float(m)))
        scale = torch.where(taken > 0, outside_n / taken.clamp_min(1), torch.zeros_like(taken))
        tail = ((pos[:, :, None, None] >= rest[:, None]) & (pos[:, :, None, None] >= 0)).to(dtype)
        tail = tail[None] * scale[None, :, None]                              # [1, r, m, P, n]
        slot_live = torch.arange(k)[None, :] < held[:, None]                  # [r, k]
        heavy_out = ((member.t() == 0)[None] & slot_live[..., None]).to(dtype)   # [r, k, P]
        heavy_out = heavy_out[None, ..., None]                                # [1, r, k, P, 1]
    return _DrawLayout(w=w, x=x, total=total, heavy=heavy, forms=tuple(forms), member=member,
                       grid=grid, light=light, is_light=is_light, q=q, cdf=q.cumsum(-1),
                       n_light=n_light, sizes=sizes, left_out_rows=rows,
                       left_out_at=where_out, t_light=t_light, at=at, at_b=at_b, y_heavy=y_heavy,
                       sp2=sp2, prob=prob.to(dtype)[None], one=one, one_out=one_out, keys=m,
                       pos=pos, valid=valid, tail=tail, heavy_out=heavy_out)


def _stratified_draw(lay: _DrawLayout, generator) -> dict[str, Tensor]:
    """One replicate of the stratified estimate of E (see :func:`row_statistics`): {form:
    [b, r, n]}, from the chunk's :func:`_draw_layout` of w [b, r, L], x [b, L, d], total [b, r, d],
    lens [r], grid [n] sorted, heavy [b, r, k] each row's k largest weights (slots beyond a row's
    length are invisible keys), prob [r, P, n] (:func:`stratum_probabilities`) and ``keys`` light
    keys summed per row (None: every one).

    The context vector of pattern P at N is ``s_P + s_J`` (the pattern's heavy vectors and the
    first ``N - |P|`` light keys of a random order), so every product with it is assembled from
    products with the k heavy vectors and the light prefixes: the 2^k patterns cost elementwise
    work on [keys, 2^k, n], never 2^k n context vectors of d entries."""
    w, x, member, sizes, at, at_b, y_heavy = (lay.w, lay.x, lay.member, lay.sizes, lay.at,
                                              lay.at_b, lay.y_heavy)
    b, r, L = w.shape
    k = lay.heavy.shape[-1]
    n_pat, n = member.shape[0], lay.grid.numel()
    dtype = w.dtype
    light, n_light, q, cdf = lay.light, lay.n_light, lay.q, lay.cdf
    # a uniform random order of each row's light keys, then everything else
    u = torch.rand(b, r, L, generator=generator, dtype=dtype)
    perm = torch.argsort(torch.where(lay.is_light, u, torch.full_like(u, 2.0)), dim=-1)

    def draw_key() -> Tensor:                   # [b, r, 1]: a key with chance q (inverse cdf)
        pick = torch.rand(b, r, 1, generator=generator, dtype=dtype) * cdf[..., -1:]
        return torch.searchsorted(cdf, pick, right=True).clamp_(max=L - 1)

    first = draw_key()
    omega = torch.where(light[None, :] > 0,
                        1.0 / (n_light[..., 0] * torch.gather(q, -1, first)[..., 0]),
                        torch.ones(b, r, dtype=dtype))                        # [b, r]
    # likewise the one light key left out when all the others are in (N = L - 1 and near it)
    last = draw_key()
    omega_out = torch.where(light[None, :] > 0,
                            1.0 / (n_light[..., 0] * torch.gather(q, -1, last)[..., 0]),
                            torch.ones(b, r, dtype=dtype))                    # [b, r]
    # the light context vectors s_J at every size |J| needed, 0 for |J| = 0
    s_light = torch.zeros(b, r, sizes.numel() + 1, x.shape[-1], dtype=dtype)
    if sizes.numel():
        prefix = perm[..., :int(sizes.max())]
        s_light[:, :, 1:] = _ordered_context(w, x, prefix, None, sizes)
    if sizes.numel() and int(sizes[0]) == 1:                  # J = {first}, not the order's
        s_light[:, :, 1] = torch.gather(w, -1, first) * x[torch.arange(b)[:, None], first[..., 0]]
    if lay.t_light is not None:                               # J = light - {last}
        rr = lay.left_out_rows
        y_last = torch.gather(w, -1, last)[:, rr] * x[torch.arange(b)[:, None], last[:, rr, 0]]
        s_light[:, rr, lay.left_out_at[rr] + 1] = lay.t_light - y_last

    def spread(by_heavy: Tensor, by_light: Tensor) -> Tensor:
        """[b, r, j, k] and [b, r, j, G] products with the heavy vectors and light prefixes ->
        [b, r, j, P n] products with every pattern's context vector."""
        lead = by_light.shape[:-1]
        pat = torch.matmul(by_heavy, member.t())                              # [b, r, j, P]
        lit = torch.gather(by_light, -1, at_b[:, :, None, :].expand(*lead, n_pat * n))
        return lit.view(*lead, n_pat, n).add_(pat[..., None]).view(*lead, n_pat * n)

    def context(bi, ri, ci):
        pi, ni = ci // n, ci % n
        return torch.einsum("ik,ikd->id", member[pi], y_heavy[bi, ri]) \
            + s_light[bi, ri, at[ri, pi, ni]]

    hl = torch.matmul(y_heavy, s_light.transpose(-1, -2))                     # [b, r, k, G]
    ll = (s_light * s_light).sum(-1)                                          # [b, r, G]
    s2 = (torch.gather(ll, -1, at_b).view(b, r, n_pat, n) + lay.sp2[..., None]
          + 2 * _pattern_light(hl, member, at_b, n_pat, n).view(b, r, n_pat, n))
    s2 = s2.reshape(b, r, n_pat * n).clamp_min_(0)
    one, one_out = lay.one, lay.one_out
    pw = lay.prob * torch.where(one, omega[..., None, None], torch.ones_like(omega)[..., None, None])
    pw = pw * torch.where(one_out, omega_out[..., None, None], torch.ones_like(omega)[..., None, None])
    vals: dict[str, Tensor] = {}
    family = tuple(f for f in lay.forms if f in FAMILY)
    if family:
        m, pos, valid = lay.keys, lay.pos, lay.valid
        # the last m light keys of the order (:func:`_draw_layout`). With J = {first} (drawn
        # apart), the sample less that key: one of the light - 1 others.
        idx_t = torch.gather(perm, -1, pos.clamp(min=0).expand(b, r, m))
        is_first = (idx_t == first) & valid                                   # [b, r, m]
        kept = (torch.minimum(light, torch.tensor(m))[None] - is_first.sum(-1)).to(dtype)
        scale_one = torch.where(kept > 0, (light[None] - 1).to(dtype) / kept.clamp_min(1),
                                torch.zeros_like(kept))                       # [b, r]
        f_one = (valid & ~is_first).to(dtype) * scale_one[..., None]          # [b, r, m]
        f_tail = torch.where(one[:, :, None], f_one[..., None, None], lay.tail) * pw[:, :, None]
        f_tail = f_tail * ~one_out[:, :, None]             # the key left out is summed apart
        f_heavy = lay.heavy_out * pw[:, :, None]                              # [b, r, k, P, n]
        f_last = (one_out * pw)[:, :, None]                                   # [b, r, 1, P, n]
        idx = torch.cat([idx_t, lay.heavy, last], -1)                         # [b, r, m + k + 1]
        factor = torch.cat([f_tail, f_heavy, f_last], 2).reshape(b, r, m + k + 1, n_pat * n)
        xs = x[torch.arange(b)[:, None, None], idx]                           # [b, r, q, d]
        ws = torch.gather(w, -1, idx)[..., None]                              # [b, r, q, 1]
        cross = spread(torch.matmul(xs, y_heavy.transpose(-1, -2)),
                       torch.matmul(xs, s_light.transpose(-1, -2)))          # [b, r, q, P n]
        for f, v in _weighted_terms(xs, ws, cross, s2, factor, context, family).items():
            vals[f] = v.view(b, r, n_pat, n).sum(2)
    if "norm_of_sum" in lay.forms:
        total = lay.total
        # ||T - 2 s||^2 = ||T||^2 - 4 <T, s> + 4 ||s||^2, refined where it cancels
        t2 = (total * total).sum(-1)[..., None]                               # [b, r, 1]
        ts = spread(torch.matmul(total[:, :, None], y_heavy.transpose(-1, -2)),
                    torch.matmul(total[:, :, None], s_light.transpose(-1, -2)))[:, :, 0]
        d2 = t2 - 4 * ts + 4 * s2

        def direct(index):
            bi, ri, ci = index
            return (total[bi, ri] - 2 * context(bi, ri, ci)).square().sum(-1)

        refine_squared(d2, t2 + 4 * s2, None, direct)
        vals["norm_of_sum"] = (d2.clamp_min_(0).sqrt_().view(b, r, n_pat, n) * pw).sum(2)
    return vals


def _pattern_light(hl: Tensor, member: Tensor, at_b: Tensor, n_pat: int, n: int) -> Tensor:
    """<s_P, s_J> [b, r, P n] from the products ``hl`` [b, r, k, G] of the heavy vectors with
    the light prefixes: sum over the pattern's heavy keys at each (P, N)'s prefix."""
    b, r = hl.shape[:2]
    per = torch.einsum("pk,brkg->brpg", member, hl)                           # [b, r, P, G]
    idx = at_b.view(b, r, n_pat, n)
    return torch.gather(per, -1, idx).reshape(b, r, n_pat * n)


def _chunk(w: Tensor, x: Tensor, lens: Tensor, grid: Tensor, forms: tuple[str, ...],
           samples: int, mc_keys: int | None, wanted: dict, generator,
           strata: int = MC_STRATA) -> dict:
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
                           generator, total, strata)
        cols = torch.searchsorted(live_grid, grid.clamp(max=int(live_grid.max())))
        live = grid < int(lens.max())
        for f, by_stat in part.items():
            for st, v in by_stat.items():
                if st != "individual":
                    out[f][st][..., live] = v[..., cols[live]]
    return out


def _chunk_live(w, x, lens, grid, forms, samples, mc_keys, wanted, generator, total, strata):
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
    s = _ordered_context(w, x, order, rank, grid)
    if family:
        outside = (torch.where(visible, rank, -1).transpose(1, 2)[..., None] >= grid)
        for f, v in _family_distances(x, x2, w_t, y2, s, outside, family).items():
            res[f]["true"] = v
        del outside
    if "norm_of_sum" in forms:
        res["norm_of_sum"]["true"] = norm_of_sum(s)
    if samples:
        k = min(strata, L)
        heavy = top_n(torch.where(visible, w, torch.full_like(w, -1.0)), k)[1] if k else \
            torch.zeros(b, r, 0, dtype=torch.long)
        prob = stratum_probabilities(lens, k, grid)                           # [r, P, n]
        layout = _draw_layout(w, x, total, lens, grid, heavy, prob, mc_keys, forms)
        draws: dict[str, list[Tensor]] = {f: [] for f in forms}
        for _ in range(samples):
            vals = _stratified_draw(layout, generator)
            for f, v in vals.items():
                draws[f].append(v)
        for f, got in draws.items():
            got = torch.stack(got)                                            # [samples, b, r, n]
            mean = got.mean(0)
            res[f]["mc"] = mean
            # two-pass: the replicates can agree to 1e-8 of their size (a sink row), where
            # E[v^2] - E[v]^2 would cancel to 0
            res[f]["mc_var"] = (got.var(0) / samples if samples > 1
                                else torch.full_like(mean, float("nan")))
    if any(wanted.values()):
        _closed_forms(res, forms, family, wanted, x, x2, w_t, y2, total, lens, grid, visible)
    return res


def _deviations(x: Tensor, w_t: Tensor, y2: Tensor, yt: Tensor, t2: Tensor, total: Tensor,
                lens: Tensor, vis_t: Tensor) -> Tensor:
    """``||y_i - T/len||^2`` [b, L, r] (0 for invisible keys), from the expansion where it
    resolves the result and from the difference where it cancels (near-duplicate vectors:
    :func:`normlimits.metrics.gram.refine_squared`)."""
    inv = 1.0 / lens.to(x.dtype)                                              # [r]
    z2 = y2 - 2 * yt * inv + (t2 * inv * inv)[:, None, :]

    def direct(index):
        bi, li, ri = index
        return (w_t[bi, li, ri, None] * x[bi, li] - total[bi, ri] * inv[ri, None]).square().sum(-1)

    refine_squared(z2, y2 + (t2 * inv * inv)[:, None, :], vis_t.bool()[None], direct)
    return z2.clamp_min_(0) * vis_t


def _closed_forms(res, forms, family, wanted, x, x2, w_t, y2, total, lens, grid, visible) -> None:
    """The closed forms ``wanted[form]`` (``main``, ``rms``, ``upper``) of every form (module
    docstring), into ``res``.

    Every quantity that cancels on near-duplicate vectors is formed without the cancellation:
    the spread of the y_i from the deviations ``y_i - T/len`` (:func:`_deviations`), so
    ``sum ||y||^2 - ||T||^2/len`` never appears, ``R2`` as ``((N+1) L - (N-1)^2) Q_c / (L-1)
    + (N-1)^2 ||T||^2 / L`` with ``Q_c = sum_i ||y_i - T/L||^2`` (the same polynomial), and each
    ``||b_i x_i - c (T - y_i)||^2`` from the difference where the expansion cannot resolve it."""
    dtype = x.dtype
    Lr = lens.to(dtype)[:, None]                                              # [r, 1]
    Ne = torch.minimum(grid[None, :], lens[:, None]).to(dtype)                # [r, n] N_eff
    vis_t = visible.t().to(dtype)                                             # [L, r]
    t2 = (total * total).sum(-1)                                              # [b, r]
    w_xt = torch.matmul(x, total.transpose(1, 2))                             # [b, L, r] <x_i, T>
    yt = w_t * w_xt                                                           # <y_i, T>
    z2 = _deviations(x, w_t, y2, yt, t2, total, lens, vis_t)                  # [b, L, r]
    qc = z2.sum(1)                                                            # [b, r] Q_c
    if wanted.get("norm_of_sum"):
        shrink = 1 - 2 * Ne / Lr                                              # [r, n]
        sigma2 = qc / Lr.t()                                                  # [b, r]
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
        r2 = (((Ne + 1) * Lr - (Ne - 1) ** 2) * qc[..., None] / (Lr - 1).clamp_min(1)
              + (Ne - 1) ** 2 * t2[..., None] / Lr)
        second = keep * (Lr * r2.clamp_min(0)).sqrt()
        res["scaled"]["upper"] = torch.minimum(keep * (Ne + 1) * individual, second)
    family = tuple(f for f in family if {"main", "rms"} & set(wanted[f]))
    if not family:
        return
    c = torch.where(Lr > 1, Ne / (Lr - 1).clamp_min(1), torch.zeros_like(Ne))  # [r, n]
    u2 = (t2[:, None, :] - 2 * yt + y2).clamp_min_(0)                         # ||T - y_i||^2
    reach = (t2.sqrt()[:, None, :] + y2.sqrt()) ** 2                          # >= ||T - y_i||^2
    groups = []
    if "scaled" in family:
        groups.append((("scaled",), y2, yt - y2, True))                       # a = y_i
    if "raw" in family or "weighted" in family:
        groups.append((tuple(f for f in ("raw", "weighted") if f in family),
                       x2[..., None].expand_as(yt), w_xt - w_t * x2[..., None], False))  # a = x_i
    variance = None
    if any("rms" in wanted[f] for f in family):                               # V_i, per N
        factor = torch.where((Lr > 2) & (Lr - 1 - Ne > 0),
                             Ne * (Lr - 1 - Ne) / (Lr - 2).clamp_min(1), torch.zeros_like(Ne))
        rest = (Lr - 1).clamp_min(1).t()[None]                                # [1, 1, r]
        # the spread of {y_j : j != i} from the deviations: (Q_c - ||z_i||^2 L/(L-1)) / (L-1)
        sigma2_i = ((qc[:, None, :] - z2 * (rest + 1) / rest) / rest).clamp_min(0)   # [b, L, r]
        variance = (sigma2_i[..., None], factor)
    needed = vis_t.bool()[None, :, :, None]
    for names, a2, au, scaled in groups:
        # ||a - c u||^2 = ||a||^2 - 2 c <a, u> + c^2 ||u||^2, for every N at once
        m2 = torch.addcmul(a2[..., None], au[..., None], c, value=-2.0)
        m2.addcmul_(u2[..., None], c * c)

        def direct(index, scaled=scaled):
            bi, li, ri, ni = index
            y = w_t[bi, li, ri, None] * x[bi, li]
            a = y if scaled else x[bi, li]
            return (a - c[ri, ni, None] * (total[bi, ri] - y)).square().sum(-1)

        refine_squared(m2, a2[..., None] + reach[..., None] * c * c, needed, direct)
        m2.clamp_min_(0)
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


#: :func:`exact_expectation` computes E exactly at these N (and their mirror images L - N)
EXACT_N = (1, 2)


def _pair_sets(L: int) -> Tensor:
    """[C(L, 2), 2] every pair j < l of L keys."""
    return torch.combinations(torch.arange(L), 2)


def exact_expectation(weights: Tensor, vectors: Tensor, n: int, form: str = "scaled") -> Tensor:
    """E = E_{I ~ U(L, N)}[d~(I)] exactly, for N in {1, 2, L - 2, L - 1} (:data:`EXACT_N` and
    their mirrors) and N >= L, every key of each row visible: the average over every subset
    (N = 1, 2) or every complement (N = L - 1, L - 2), in float64.

    weights ``[R, L]``, vectors ``[L, d]`` -> ``[R]`` float64. Cost ``O(L^3 d)`` per row at N = 2
    (pairs times keys), ``O(L^2 d)`` at N = 1 and L - 2; for tests and validation, not studies.
    """
    _check_forms([form])
    w = torch.as_tensor(weights, dtype=torch.float64)
    x = torch.as_tensor(vectors, dtype=torch.float64)
    if w.dim() != 2 or x.dim() != 2 or x.shape[0] != w.shape[1]:
        raise ValueError(f"weights must be [R, L] and vectors [L, d]; got {tuple(w.shape)}, "
                         f"{tuple(x.shape)}")
    R_, L = w.shape
    m = min(n, L)
    if m not in (1, 2, L - 2, L - 1, L):
        raise ValueError(f"exact_expectation covers N in {{1, 2, L - 2, L - 1}} and N >= L; got "
                         f"N = {n} at L = {L}: use enumeration or the Monte Carlo estimate")
    out = torch.empty(R_, dtype=torch.float64)
    for row in range(R_):
        alpha = w[row]
        y = alpha[:, None] * x                                                # [L, d]
        T = y.sum(0)
        if m == L:
            out[row] = T.norm() if form == "norm_of_sum" else 0.0
            continue
        if m not in (1, 2):                       # L - 1 or L - 2: every complement
            comp = torch.arange(L)[:, None] if m == L - 1 else _pair_sets(L)  # [S, c]
            s = T - y[comp].sum(1)                                            # [S, d]
            if form == "norm_of_sum":
                out[row] = (T - 2 * s).norm(dim=-1).mean()
                continue
            a = x[comp] * (alpha[comp, None] if form == "scaled" else 1.0)    # [S, c, d]
            g = alpha[comp] if form == "weighted" else torch.ones_like(alpha[comp])
            out[row] = ((a - s[:, None]).norm(dim=-1) * g).sum(1).mean()
            continue
        sets = torch.arange(L)[:, None] if m == 1 else _pair_sets(L)          # [S, m]
        s = y[sets].sum(1)                                                    # [S, d]
        if form == "norm_of_sum":
            out[row] = (T - 2 * s).norm(dim=-1).mean()
            continue
        a = x * (alpha[:, None] if form == "scaled" else 1.0)                 # [L, d]
        g = alpha if form == "weighted" else torch.ones_like(alpha)
        total = torch.zeros((), dtype=torch.float64)
        for lo in range(0, s.shape[0], 4096):
            part = s[lo:lo + 4096]
            dist = (a[:, None, :] - part[None]).norm(dim=-1)                  # [L, S']
            inside = torch.zeros(L, part.shape[0], dtype=torch.bool)
            inside.scatter_(0, sets[lo:lo + 4096].t(), True)
            total = total + (dist * g[:, None] * ~inside).sum()
        out[row] = total / s.shape[0]
    return out
