"""Distance statistics of the top-N selected tokens (paper Theorem 1, Corollary 2, Figure 2).

Notation (one attention row, ``L`` visible keys, weights ``alpha`` summing to 1, value vectors
``x_i``): ``y_i = alpha_i x_i``; ``I_N`` the indices of the N largest weights; the context vector
``s_N = sum_{i in I_N} y_i``; the top-N mass ``abar_N = sum_{i in I_N} alpha_i``.

* **true distance** (paper Eq. 7, read as a sum of norms; the other readings are in
  :mod:`normlimits.metrics.readings`):
  ``d~_N = sum_{i not in I_N} ||y_i - s_N||``.
* **norm-of-sum reading** (the other rendering of Eq. 7, kept to show that it cannot collapse):
  ``||sum_{i not in I_N} y_i - s_N|| = ||T - 2 s_N||`` with ``T = sum_i y_i``.
* **random-subset expectation** (Theorem 1 part 2, in the form reconstructed and proven in the
  book's distances chapter):
  ``E = E_{I ~ U(L, N)}[d~] = main + eps`` with
  ``main = (L-N)/L * sum_i ||y_i - c (T - y_i)||``, ``c = N/(L-1)``, and
  ``0 <= eps <= (L-N)/L * sum_i sqrt(N (L-1-N)/(L-2) * sigma2_{-i})`` (the Jensen gap), where
  ``sigma2_{-i}`` is the population variance of ``{y_j : j != i}``. A tighter upper bound (ours):
  ``E <= rms = (L-N)/L * sum_i sqrt(||(1+c) y_i - c T||^2 + N (L-1-N)/(L-2) * sigma2_{-i})``
  (Jensen for the square root: ``E||a - s|| <= sqrt(E||a - s||^2)``), and
  ``rms <= main + eps-bound``.
* **fixed-set bounds** ``d_max`` (Theorem 1 part 1, two reconstructions [R], both proven in the
  chapter), with ``d_1 = max_{i not in I_N, j in I_N} ||x_i - x_j||``, ``X_max = max_{j in I_N}
  ||x_j||`` and ``m_out = sum_{i not in I_N} alpha_i`` (``= 1 - abar_N`` for a softmax row):

  - linear:  ``d~ <= m_out d_1 + X_max (m_out + (L-N) abar_N)``
  - Cauchy:  ``d~ <= m_out d_1 + X_max sqrt(L-N) sqrt(sum_{i not in I_N} alpha_i^2
    + 2 abar_N m_out + (L-N) abar_N^2)`` (Cauchy-Schwarz applied to the same terms, so never
    below the linear one: ``sum a_i <= sqrt(n) ||a||_2``). The linear bound is the one plotted.

How it is computed (all N of a grid from ONE sort per row; no loop over tokens or N): sort the
visible weights once (:func:`normlimits.core.selection.top_n`, the book's tie rule: among equal weights
the earlier key ranks first; only the first ``max(grid)`` places matter);
``s_N`` for every N of the grid is a cumulative sum over the sorted ``y``; then
``||y_k - s_N||^2 = alpha_k^2 ||x_k||^2 - 2 alpha_k <x_k, s_N> + ||s_N||^2`` needs only
``<x_k, s_N>``: one matmul ``x @ S^T`` of cost ``L * d * n`` per row and head, cheaper than the
``L x L`` Gram matrix whenever the grid has fewer than ``L`` points, and it never materialises an
``[L, L]`` array per row. Where that expansion cannot resolve the distance (near-duplicates of
``s_N``: ``||y_k - s_N||^2`` below ``2^-9 (||y_k||^2 + ||s_N||^2)``), the entry is recomputed
from the difference ``y_k - s_N`` itself (:mod:`normlimits.metrics.gram`); the same holds for E's main
sum, ``||y_i - lam T||``. ``m_out`` and ``sum_{i not in I_N} alpha_i^2`` are sums over the keys
outside (exactly 0 at N = L). The Jensen term separates (``sqrt(f_N sigma2_i) = sqrt(f_N)
sqrt(sigma2_i)``), so it costs ``O(L)`` per row for the whole grid; the main sum and the rms bound
cost ``L * n`` each. ``d_1`` uses the distances from every key to the ``max(grid)`` top keys
(``L * N_max * d``) and a running maximum. The work is split into chunks of (head, row) problems
so that memory stays bounded (``chunk_elements`` floats per temporary).

Shapes: weights ``[..., R, L]`` (R query rows, zero beyond each row's visible keys), values
``[..., L, d]``; leading dimensions broadcast (typically ``[layers, heads]``). Every output is
``[..., R, n]`` for a grid of ``n`` values of N. Distances are in the units of the value vectors.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Protocol, Sequence

import numpy as np
import torch
from torch import Tensor

from normlimits.metrics.critical_n import ks_critical_n
from normlimits.core.bootstrap import unit_counts, weighted_sum
from normlimits.metrics.gram import refine_squared
from normlimits.core.selection import top_n
from normlimits.core.validation import finite_vectors, finite_weights

__all__ = [
    "DistanceProfile",
    "distance_profile",
    "sampled_expectation",
    "enumerated_expectation",
    "synthetic_rows",
    "WindowLike",
    "SweepResult",
    "sweep_length",
    "sweep_top_n",
    "ks_critical_n",
]

DEFAULT_CHUNK_ELEMENTS = 1 << 22


# --------------------------------------------------------------------------------------------
# The core metric: every quantity for a grid of N, one sort per row
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DistanceProfile:
    """Distance statistics for a grid of N. Every tensor is ``[..., R, n]`` unless stated.

    ``n_grid`` [n] and ``lengths`` [R] (visible keys per row) are LongTensors. ``true`` is d~,
    ``norm_of_sum`` the other reading of Eq. 7, ``expected_main`` the main sum of E and
    ``jensen_bound`` the bound on the Jensen gap (so E lies in ``[expected_main,
    expected_upper]``). ``top_n_mass`` = abar_N, ``context_norm`` = ||s_N||,
    ``individual_sum`` = sum_i ||alpha_i x_i|| (Corollary 2(i)'s limit; constant in N);
    ``expected_rms`` = ``(L-N)/L sum_i sqrt(||y_i - E[s | i not in I]||^2 + Var[s | i not in I])``,
    a tighter upper bound on E than ``expected_upper`` (E <= rms <= main + Jensen bound). The
    bound fields (``d1``, ``x_max``, ``bound_linear``, ``bound_cauchy``) are None when not
    requested.
    """

    n_grid: Tensor
    lengths: Tensor
    true: Tensor
    norm_of_sum: Tensor
    top_n_mass: Tensor
    context_norm: Tensor
    individual_sum: Tensor
    expected_main: Tensor | None = None
    jensen_bound: Tensor | None = None
    expected_rms: Tensor | None = None
    d1: Tensor | None = None
    x_max: Tensor | None = None
    bound_linear: Tensor | None = None
    bound_cauchy: Tensor | None = None

    @property
    def expected_upper(self) -> Tensor:
        """Upper end of the interval that holds E: ``expected_main + jensen_bound``."""
        if self.expected_main is None or self.jensen_bound is None:
            raise ValueError("this profile was computed with expectation=False; "
                             "call distance_profile(..., expectation=True)")
        return self.expected_main + self.jensen_bound


def _as_grid(n_grid: int | Sequence[int] | Tensor) -> Tensor:
    grid = torch.as_tensor(n_grid).reshape(-1)
    if grid.numel() == 0:
        raise ValueError("the N grid is empty; pass at least one top-N size (1 <= N <= L)")
    if grid.is_floating_point():
        if not torch.equal(grid, grid.round()):
            raise ValueError(f"top-N sizes must be integers (got {grid.tolist()})")
    return grid.long()


def _prepare(weights: Tensor, values: Tensor, n_grid, lengths):
    if weights.dim() < 2 or values.dim() < 2:
        raise ValueError(f"weights must be [..., R, L] and values [..., L, d]; got shapes "
                         f"{tuple(weights.shape)} and {tuple(values.shape)}")
    L = weights.shape[-1]
    if values.shape[-2] != L:
        raise ValueError(f"weights have {L} keys but values have {values.shape[-2]}; both must "
                         "cover the same keys (truncate both to the longest visible length)")
    finite_weights(weights)
    finite_vectors(values)
    lead = torch.broadcast_shapes(weights.shape[:-2], values.shape[:-2])
    R, d = weights.shape[-2], values.shape[-1]
    dtype = torch.promote_types(weights.dtype, values.dtype)
    if not dtype.is_floating_point:
        dtype = torch.get_default_dtype()
    w = weights.to(dtype).expand(*lead, R, L).reshape(-1, R, L)
    x = values.to(dtype).expand(*lead, L, d).reshape(-1, L, d)
    if lengths is None:
        lens = torch.full((R,), L, dtype=torch.long)
    else:
        lens = torch.as_tensor(lengths).reshape(-1).long().cpu()
        if lens.numel() != R:
            raise ValueError(f"lengths has {lens.numel()} entries but weights have {R} rows; "
                             "pass one visible-key count per row (row position + 1)")
        if (lens < 1).any() or (lens > L).any():
            raise ValueError(f"lengths must lie in 1..{L} (got {lens.tolist()})")
    grid = _as_grid(n_grid)
    if (grid < 1).any():
        raise ValueError(f"top-N sizes must be >= 1 (got {grid.tolist()})")
    if (grid > lens.min()).any():
        raise ValueError(f"top-N sizes {grid.tolist()} exceed the shortest row's visible keys "
                         f"L = {int(lens.min())}; N must lie in 1..L for every row: drop the "
                         "rows shorter than max(N) or shrink the grid")
    if (w < 0).any():
        raise ValueError("attention weights must be non-negative")
    visible = torch.arange(L)[None, :] < lens[:, None]                      # [R, L]
    if (w.masked_fill(visible.to(w.device), 0) != 0).any():
        raise ValueError("weights beyond a row's visible keys must be exactly 0; pass "
                         "lengths = query position + 1 for causal rows")
    return w, x, lens.to(w.device), grid.to(w.device), visible.to(w.device), lead, R


def distance_profile(weights: Tensor, values: Tensor, n_grid: int | Sequence[int] | Tensor, *,
                     lengths: Sequence[int] | Tensor | None = None, expectation: bool = True,
                     jensen: bool = True, bounds: bool = True,
                     chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> DistanceProfile:
    """All distance statistics of Theorem 1 for every N of ``n_grid`` at once.

    Args:
        weights: ``[..., R, L]`` non-negative attention weights, one row per query; entries
            beyond a row's visible keys must be 0.
        values: ``[..., L, d]`` the vectors x_i (value vectors per head); broadcast with weights'
            leading dimensions.
        n_grid: the top-N sizes (ints, each in ``1..min(lengths)``).
        lengths: ``[R]`` visible keys per row (``t + 1`` for the causal row at position t);
            default: all L keys.
        expectation / jensen / bounds: compute the random-subset main sum / its Jensen-gap
            bound / the fixed-set bounds (skip what you do not need: the critical-N search
            needs only ``true`` and ``expected_main``).
        chunk_elements: the largest temporary, in elements; bounds memory.

    Returns a :class:`DistanceProfile` with ``[..., R, n]`` tensors (dtype of the inputs).
    """
    w, x, lens, grid, visible, lead, R = _prepare(weights, values, n_grid, lengths)
    B, _, L = w.shape
    n = grid.numel()
    n_max = int(grid.max())
    width = 2 * n + (2 * n_max if bounds else 0)
    per_problem = L * width
    rows_per_chunk = max(1, chunk_elements // per_problem)

    names = ["true", "norm_of_sum", "top_n_mass", "context_norm", "individual_sum"]
    if expectation:
        names.append("expected_main")
        if jensen:
            names += ["jensen_bound", "expected_rms"]
    if bounds:
        names += ["d1", "x_max", "bound_linear", "bound_cauchy"]
    out = {k: w.new_empty(B, R, n) for k in names}

    # Chunk over (batch, row) problems: b-chunks of whole rows when they fit, else row chunks.
    if rows_per_chunk >= R:
        b_step, r_step = max(1, rows_per_chunk // R), R
    else:
        b_step, r_step = 1, rows_per_chunk
    for b0 in range(0, B, b_step):
        for r0 in range(0, R, r_step):
            bs, rs = slice(b0, b0 + b_step), slice(r0, r0 + r_step)
            part = _profile_chunk(w[bs, rs], x[bs], lens[rs], grid, visible[rs],
                                  expectation, jensen, bounds, n_max)
            for k, v in part.items():
                out[k][bs, rs] = v
    shaped = {k: v.reshape(*lead, R, n) for k, v in out.items()}
    return DistanceProfile(n_grid=grid.cpu(), lengths=lens.cpu(), **shaped)


def _profile_chunk(w: Tensor, x: Tensor, lens: Tensor, grid: Tensor, visible: Tensor,
                   expectation: bool, jensen: bool, bounds: bool, n_max: int) -> dict:
    """The metric for one chunk: ``w`` [b, r, L], ``x`` [b, L, d]; outputs [b, r, n].

    The big temporaries are laid out ``[b, L, r, n]`` (keys outermost) so that the one matmul
    per head, ``x @ S^T``, writes them directly and every elementwise pass is contiguous.
    """
    b, r, L = w.shape
    d = x.shape[-1]
    dtype, dev = w.dtype, w.device
    n = grid.numel()
    # One (partial) sort per row (the book's tie rule, normlimits.core.selection.top_n): only the
    # order of the n_max largest weights matters, every
    # other key is "outside the top N" for every N of the grid. Invisible keys (weight exactly 0
    # by contract) get key -1 and never enter the top n_max <= min(lengths).
    key = torch.where(visible, w, torch.full_like(w, -1.0))
    w_s, top = top_n(key, n_max)                    # [b, r, n_max]; ties: earlier key first
    rank = torch.full_like(w, n_max, dtype=torch.long)
    rank.scatter_(-1, top, torch.arange(n_max, device=dev).expand_as(top))
    # sorted position of each visible key (n_max beyond the top); -1 for invisible keys
    rank = torch.where(visible, rank, torch.full_like(rank, -1)).transpose(1, 2)   # [b, L, r]
    outside = rank[..., None] >= grid                                         # [b, L, r, n]

    # Context vectors s_N for every N of the grid: one cumulative sum over the sorted y.
    bidx = torch.arange(b, device=dev)[:, None, None]
    x_top = x[bidx, top]                                                      # [b, r, n_max, d]
    s = torch.cumsum(w_s[..., None] * x_top, dim=-2)[..., grid - 1, :]        # [b, r, n, d]
    s2 = (s * s).sum(-1)                                                      # [b, r, n]

    x2 = (x * x).sum(-1)                                                      # [b, L]
    w_t = w.transpose(1, 2)                                                   # [b, L, r]
    y2 = w_t * w_t * x2[..., None]                                            # ||y_k||^2
    # ||y_k - s_N||^2 = ||y_k||^2 - 2 alpha_k <x_k, s_N> + ||s_N||^2, in place.
    dist = torch.matmul(x, s.reshape(b, r * n, d).transpose(-1, -2)).view(b, L, r, n)
    dist.mul_(w_t[..., None] * -2.0).add_(y2[..., None]).add_(s2[:, None])
    # near-duplicates of s_N: the expansion is all rounding there, use the difference itself

    def direct(index):
        bi, li, ri, ni = index
        return (w[bi, ri, li, None] * x[bi, li] - s[bi, ri, ni]).square().sum(-1)

    refine_squared(dist, y2[..., None] + s2[:, None], outside, direct)
    dist.clamp_min_(0).sqrt_().mul_(outside)
    true = dist.sum(1)                                                        # [b, r, n]
    del dist

    total = torch.matmul(w, x)                                                # [b, r, d] = T
    t_minus_2s = total[:, :, None, :] - 2.0 * s
    res = {
        "true": true,
        "norm_of_sum": (t_minus_2s * t_minus_2s).sum(-1).sqrt(),
        "top_n_mass": torch.cumsum(w_s, -1)[..., grid - 1],
        "context_norm": s2.sqrt(),
    }

    Lf = lens.to(dtype)[:, None]                                              # [r, 1]
    gf = grid.to(dtype)[None, :]                                              # [1, n]
    keep = (Lf - gf) / Lf                                                     # P(i not in I_N)
    vis_t = visible.t().to(dtype)                                             # [L, r]
    # Corollary 2(i)'s limit of E for N << L: sum_i ||alpha_i x_i|| (same for every N).
    res["individual_sum"] = torch.einsum("blr,lr->br", y2.sqrt(), vis_t)[..., None].expand(
        b, r, n).contiguous()
    if expectation:
        # main = (L-N)/L sum_i ||(1+c) y_i - c T|| = (L-N)/L (1+c) sum_i ||y_i - lam T||,
        # c = N/(L-1), lam = c/(1+c) = N/(L-1+N).
        c = torch.where(Lf > 1, gf / (Lf - 1).clamp_min(1), torch.zeros_like(gf))   # [r, n]
        lam = c / (1 + c)
        t2 = (total * total).sum(-1)                                          # [b, r]
        yt = w_t * torch.matmul(x, total.transpose(1, 2))                     # [b, L, r] <y,T>
        m = yt[..., None] * (-2.0 * lam)                                      # [b, L, r, n]
        m.add_(y2[..., None]).add_((lam * lam) * t2[:, None, :, None])
        vis_n = visible.t()[None, :, :, None]                                 # [1, L, r, 1]

        def direct_main(index):
            bi, li, ri, ni = index
            return (w[bi, ri, li, None] * x[bi, li]
                    - lam[ri, ni, None] * total[bi, ri]).square().sum(-1)

        refine_squared(m, y2[..., None] + (lam * lam) * t2[:, None, :, None], vis_n, direct_main)
        m.clamp_min_(0).sqrt_()
        res["expected_main"] = keep * (1 + c) * torch.einsum("blrn,lr->brn", m, vis_t)
        if jensen:
            # sigma2_{-i} = (Q - |y_i|^2)/(L-1) - |T - y_i|^2/(L-1)^2 (population variance);
            # Var of a without-replacement sum of N draws out of L-1: N (L-1-N)/(L-2) sigma2.
            q = y2.sum(1, keepdim=True)                                       # [b, 1, r]
            rest = (Lf - 1).clamp_min(1).t()[None]                            # [1, 1, r]
            t_minus_y2 = t2[:, None, :] - 2 * yt + y2
            sigma2 = ((q - y2) / rest - t_minus_y2 / rest ** 2).clamp_min(0)  # [b, L, r]
            factor = torch.where(Lf - 1 - gf > 0, gf * (Lf - 1 - gf) / (Lf - 2).clamp_min(1),
                                 torch.zeros_like(gf))                         # [r, n]
            # sqrt(factor_N * sigma2_i) separates, so the sum over i is done once.
            spread = (sigma2.sqrt() * vis_t).sum(1)[..., None]                # [b, r, 1]
            res["jensen_bound"] = keep * factor.sqrt() * spread
            # E||a - s|| <= sqrt(||a - E s||^2 + Var s) (Jensen for the square root); m holds
            # ||y_i - lam T|| and ||a - E s|| = (1 + c) ||y_i - lam T||.
            m.square_().mul_((1 + c) ** 2).add_(sigma2[..., None] * factor)  # [b, L, r, n]
            m.clamp_min_(0).sqrt_()
            res["expected_rms"] = keep * torch.einsum("blrn,lr->brn", m, vis_t)
        del m

    if bounds:
        top2 = (x_top * x_top).sum(-1)                                        # [b, r, n_max]
        x_max = torch.cummax(top2.sqrt(), dim=-1).values[..., grid - 1]        # [b, r, n]
        # ||x_k - x_j||^2 for every key k and the n_max top keys j, then a running max over j.
        dd = torch.matmul(x, x_top.reshape(b, r * n_max, d).transpose(-1, -2))
        dd = dd.view(b, L, r, n_max)
        dd.mul_(-2.0).add_(x2[:, :, None, None]).add_(top2[:, None]).clamp_min_(0)
        run = _running_max_at(dd, grid)                                       # [b, L, r, n]
        del dd
        d1 = run.mul_(outside).amax(1).sqrt()                                 # [b, r, n]
        abar = res["top_n_mass"]
        # m_out and sum_{i not in I_N} alpha_i^2 summed over the keys outside (not a total minus
        # the top-N part, whose rounding noise is not 0 at N = L)
        out_f = outside.to(dtype)
        m_out = torch.einsum("blr,blrn->brn", w_t, out_f)
        sq_out = torch.einsum("blr,blrn->brn", w_t * w_t, out_f)
        del out_f
        n_out = (lens[:, None] - grid[None, :]).to(dtype)[None]              # [1, r, n] = L - N
        linear = m_out + n_out * abar
        res["d1"] = d1
        res["x_max"] = x_max
        res["bound_linear"] = m_out * d1 + x_max * linear
        # (L - N) (sq_out + 2 abar m_out + (L - N) abar^2) = linear^2 + ((L - N) sq_out - m_out^2),
        # the excess >= 0 by Cauchy-Schwarz: the Cauchy bound is never below the linear one
        excess = (n_out * sq_out - m_out * m_out).clamp_min(0)
        cauchy = torch.maximum((linear * linear + excess).sqrt(), linear)
        res["bound_cauchy"] = m_out * d1 + x_max * cauchy
    return res


def _running_max_at(a: Tensor, grid: Tensor) -> Tensor:
    """``max(a[..., :N])`` for every N of ``grid`` (any order), as ``[..., n]``.

    One ``amax`` per segment between consecutive sorted grid points and a running maximum:
    torch's ``cummax`` is an unvectorised scan, far slower than this on CPU.
    """
    sorted_grid, back = torch.sort(grid)
    parts, cur, prev = [], None, 0
    for g in sorted_grid.tolist():
        if g > prev:
            seg = a[..., prev:g].amax(-1)
            cur = seg if cur is None else torch.maximum(cur, seg)
            prev = g
        parts.append(cur)
    return torch.stack(parts, -1)[..., torch.argsort(back)]


def sampled_expectation(weights: Tensor, values: Tensor, n: int, samples: int, *,
                        lengths: Sequence[int] | Tensor | None = None,
                        generator: torch.Generator | None = None,
                        chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> tuple[Tensor, Tensor]:
    """Monte Carlo estimate of E = E_{I ~ U(L, N)}[d~] with uniformly drawn N-subsets.

    Shapes as in :func:`distance_profile`; returns ``(mean, standard_error)``, each ``[..., R]``.
    Each sample draws one uniform N-subset of a row's visible keys (independently per row and
    head) and evaluates ``sum_{i not in I} ||y_i - s_I||`` exactly.
    """
    w, x, lens, _, visible, lead, R = _prepare(weights, values, [n], lengths)
    if samples < 2:
        raise ValueError("samples must be at least 2 (the standard error needs two)")
    B, _, L = w.shape
    per = max(1, chunk_elements // (B * R * L * x.shape[-1]))
    total = w.new_zeros(B, R)
    total_sq = w.new_zeros(B, R)
    y = w[..., None] * x[:, None]                                            # [B, R, L, d]
    done = 0
    while done < samples:
        k = min(per, samples - done)
        u = torch.rand(k, B, R, L, generator=generator, dtype=w.dtype).to(w.device)
        u = torch.where(visible, u, torch.full_like(u, 2.0))                 # invisible last
        pick = torch.topk(u, n, dim=-1, largest=False).indices                # uniform N-subset
        chosen = torch.zeros_like(u).scatter_(-1, pick, 1.0)                  # [k, B, R, L]
        s = torch.einsum("kbrl,brld->kbrd", chosen, y)
        diff = (y[None] - s[:, :, :, None, :]).norm(dim=-1)                  # [k, B, R, L]
        d = (diff * (1 - chosen) * visible.to(w.dtype)).sum(-1)              # [k, B, R]
        total += d.sum(0)
        total_sq += (d * d).sum(0)
        done += k
    mean = total / samples
    var = (total_sq / samples - mean ** 2).clamp_min(0) * samples / (samples - 1)
    se = (var / samples).sqrt()
    return mean.reshape(*lead, R), se.reshape(*lead, R)


def synthetic_rows(trials: int, length: int, dim: int, logit_scale: float, *,
                   generator: torch.Generator | None = None,
                   dtype: torch.dtype = torch.float64) -> tuple[Tensor, Tensor]:
    """Random softmax rows and Gaussian vectors for Monte Carlo checks.

    Returns ``weights`` [trials, 1, length] = softmax(logit_scale * z), z standard normal
    (small scale: near uniform; large: concentrated), and ``values`` [trials, length, dim]
    standard normal.
    """
    z = torch.randn(trials, 1, length, generator=generator, dtype=dtype)
    x = torch.randn(trials, length, dim, generator=generator, dtype=dtype)
    return torch.softmax(logit_scale * z, -1), x


def enumerated_expectation(weights: Tensor, values: Tensor, n: int, *,
                           max_subsets: int = 20000) -> Tensor:
    """Exact E = E_{I ~ U(L, N)}[d~] by enumerating all C(L, N) subsets (small L only).

    ``weights`` [..., L] (every key visible), ``values`` [..., L, d]; returns [...].
    """
    import itertools

    L = weights.shape[-1]
    if not 1 <= n <= L:
        raise ValueError(f"N must lie in 1..L = {L} (got {n})")
    finite_weights(weights)
    finite_vectors(values)
    count = math.comb(L, n)
    if count > max_subsets:
        raise ValueError(f"C({L}, {n}) = {count} subsets exceed max_subsets = {max_subsets}; "
                         "use sampled_expectation for long rows")
    chosen = torch.zeros(count, L, dtype=weights.dtype, device=weights.device)
    for row, subset in enumerate(itertools.combinations(range(L), n)):
        chosen[row, list(subset)] = 1
    y = weights[..., None] * values                                          # [..., L, d]
    s = torch.einsum("cl,...ld->...cd", chosen, y)                           # [..., C, d]
    dist = (y[..., None, :, :] - s[..., :, None, :]).norm(dim=-1)            # [..., C, L]
    return (dist * (1 - chosen)).sum(-1).mean(-1)


# --------------------------------------------------------------------------------------------
# Sweeps over windows (Figure 2): one forward pass per window, rows L-1 for every L
# --------------------------------------------------------------------------------------------


class WindowLike(Protocol):
    """What the sweeps need from a captured window (``normlimits.model.capture.WindowCapture``)."""

    values: Tensor                                   # [layers, heads, L_window, d_head]

    def weights(self, rows: Tensor | None = None, temperature: float = 1.0) -> Tensor:
        """``[layers, heads, R, L_window]`` softmax weights of the query rows."""
        ...


@dataclass(frozen=True)
class SweepResult:
    """Per-head statistics averaged over windows.

    ``lengths`` [R] and ``n_grid`` [n] are the sweep's axes; every other field is a float64
    tensor ``[layers, heads, R, n]``: the mean over windows of the :class:`DistanceProfile`
    field of the same name (``expected_upper`` = main + Jensen bound). ``windows`` is the count.
    ``worst_true_over_bound`` is the largest ``d~ / bound_linear`` over every window, head, row
    and N (the fixed-set bound holds iff it is <= 1), and ``worst_linear_over_cauchy`` the
    largest ``bound_linear / bound_cauchy`` (<= 1 by Cauchy-Schwarz); NaN without bounds.
    ``per_window[name]``: the same field for each window, ``[windows, layers, heads, R, n]``
    (the fields are their means over the windows).
    """

    lengths: Tensor
    n_grid: Tensor
    windows: int
    fields: dict = field(default_factory=dict)
    worst_true_over_bound: float = float("nan")
    worst_linear_over_cauchy: float = float("nan")
    per_window: dict = field(default_factory=dict)

    def __getattr__(self, name: str) -> Tensor:
        try:
            return self.__dict__["fields"][name]
        except KeyError:
            raise AttributeError(name) from None

    def resampled(self, windows: Sequence[int]) -> "SweepResult":
        """The sweep of the windows ``windows`` (indices, repeats allowed: a bootstrap resample):
        every field the mean of those windows' values (``resampled(range(windows))`` reproduces
        the fields exactly); the worst ratios stay those of all windows, no ``per_window``."""
        counts = unit_counts(windows, self.windows)
        return SweepResult(lengths=self.lengths, n_grid=self.n_grid, windows=int(counts.sum()),
                           fields={k: _window_mean(v, counts) for k, v in self.per_window.items()},
                           worst_true_over_bound=self.worst_true_over_bound,
                           worst_linear_over_cauchy=self.worst_linear_over_cauchy)


_SWEEP_FIELDS = ("true", "norm_of_sum", "top_n_mass", "context_norm", "individual_sum",
                 "expected_main", "jensen_bound", "expected_upper", "expected_rms", "d1", "x_max",
                 "bound_linear", "bound_cauchy")


def _window_mean(per_window: Tensor, counts: Tensor) -> Tensor:
    """The mean over windows of ``per_window`` [windows, ...], window w counted ``counts[w]``
    times (float64 [windows]: ones, or a bootstrap resample's counts)."""
    return weighted_sum(per_window, counts) / float(counts.sum())


def _accumulate(acc: dict, prof: DistanceProfile) -> None:
    for name in _SWEEP_FIELDS:
        if name == "expected_upper":
            v = prof.expected_upper if prof.jensen_bound is not None else None
        else:
            v = getattr(prof, name)
        if v is None:
            continue
        acc.setdefault(name, []).append(v.detach().to(torch.float64).cpu().clone())


def _rows_for(lengths: Sequence[int], window: int) -> Tensor:
    lens = torch.as_tensor(list(lengths), dtype=torch.long)
    if lens.numel() == 0 or (lens < 1).any() or (lens > window).any():
        raise ValueError(f"lengths {lens.tolist()} must lie in 1..{window} (the captured "
                         "window's length); capture a longer window or shrink the grid")
    return lens


def sweep_length(captures: Iterable[WindowLike], lengths: Sequence[int], n: int = 5, *,
                 bounds: bool = True, chunk_elements: int = DEFAULT_CHUNK_ELEMENTS
                 ) -> SweepResult:
    """Figure 2a: statistics at fixed N for every context length L of ``lengths``.

    Uses the causality trick: the row at position ``L - 1`` of one forward pass over a longer
    window is the last row of the window of length L (it sees keys ``0..L-1``). So each window
    costs one weight evaluation for ``len(lengths)`` rows. Returns [layers, heads, len(lengths), 1]
    tensors averaged over windows.
    """
    return _sweep(captures, lengths, [n], bounds, chunk_elements)


def sweep_top_n(captures: Iterable[WindowLike], n_grid: Sequence[int] = (1, 5, 10, 20, 100),
                length: int | None = None, *, bounds: bool = True,
                chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> SweepResult:
    """Figure 2b: statistics at one context length (default: the window's) for every N.

    Returns [layers, heads, 1, len(n_grid)] tensors averaged over windows.
    """
    return _sweep(captures, None if length is None else [length], n_grid, bounds, chunk_elements)


def _worst_ratio(num: Tensor, den: Tensor) -> float:
    """max(num / den) over entries with den > 0 (entries with den == 0 must have num == 0)."""
    num, den = num.double(), den.double()
    pos = den > 0
    worst = float((num[pos] / den[pos]).max()) if bool(pos.any()) else 0.0
    if bool((num[~pos] > 0).any()):
        return float("inf")
    return worst


def _sweep(captures, lengths, n_grid, bounds, chunk_elements) -> SweepResult:
    acc: dict = {}
    count = 0
    lens = None
    worst_t, worst_c = float("nan"), float("nan")
    for cap in captures:
        window = cap.values.shape[-2]
        lens = _rows_for(lengths if lengths is not None else [window], window)
        longest = int(lens.max())
        w = cap.weights(lens - 1)[..., :longest]
        v = cap.values[..., :longest, :]
        prof = distance_profile(w, v, n_grid, lengths=lens, bounds=bounds,
                                chunk_elements=chunk_elements)
        _accumulate(acc, prof)
        if bounds:
            worst_t = np.nanmax([worst_t, _worst_ratio(prof.true, prof.bound_linear)])
            worst_c = np.nanmax([worst_c, _worst_ratio(prof.bound_linear, prof.bound_cauchy)])
        count += 1
    if count == 0:
        raise ValueError("no windows were given; pass at least one captured window")
    per_window = {k: torch.stack(v) for k, v in acc.items()}
    ones = torch.ones(count, dtype=torch.float64)
    return SweepResult(lengths=lens, n_grid=_as_grid(n_grid), windows=count,
                       fields={k: _window_mean(v, ones) for k, v in per_window.items()},
                       worst_true_over_bound=float(worst_t),
                       worst_linear_over_cauchy=float(worst_c), per_window=per_window)
