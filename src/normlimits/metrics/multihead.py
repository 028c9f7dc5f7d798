"""Several heads of a layer: do they distinguish each other's top-N tokens independently?

The paper (Section 4): "if heads are independent, each with separability p, then H heads cover
up to 1 - (1 - p)^H of the top-N tokens". That is a conditional claim, measured here in two
halves.

**The premise, on the model.** For a query row, head h selects its top-N keys ``I_h`` and
distinguishes ``D_h`` of them (N_s = |D_h|). Take ``I_h`` as the tokens to cover and let
``c_h' = |D_h' ∩ I_h|`` count how many of them head h' distinguishes (``c_h = N_s`` of head h).
The premise has two parts:

- *each head has rate p on these tokens*: the other heads' rate ``c_h'/N`` against head h's own
  ``c_h/N`` (:attr:`HeadSharing.other_rate`, :attr:`HeadSharing.own`);
- *independence*: the fraction of ``I_h`` distinguished by at least one head of a set S of
  heads (``h`` in S, |S| = H) against the same fraction when every head's distinguished tokens
  are shuffled uniformly within ``I_h``, independently across heads, keeping each row's counts
  (the permutation null). Its expectation is exact, ``1 - prod_{h' in S} (1 - c_h'/N)``, so no
  sampling is needed. Observed above the null: heads complement each other; below: they
  distinguish the same tokens.

Coverage and null are averaged over every set S of H heads of the layer that contains h: a token
missed by h and by ``m`` of the other ``H_layer - 1`` heads is missed by a random such set with
probability ``C(m, H-1) / C(H_layer-1, H-1)``, and the null's average is an elementary symmetric
polynomial of the ``1 - c_h'/N``.

**The conclusion, where the premise holds by construction.** H independent copies of head h
(its own distinguishable patterns over the ranks of ``I_h``, drawn from independent rows) cover
rank k with probability ``1 - (1 - p_{h,k})^H``, with ``p_{h,k}`` the head's rate at rank k; on
average over ranks that is at most ``1 - (1 - p_h)^H`` (Jensen: the map is concave), with
equality when the rate does not depend on the rank. :func:`independent_copies` computes both
from the per-rank counts :attr:`HeadSharing.rank_hits` (exact expectations; no sampling), and
:func:`bernoulli_heads` samples heads that distinguish every token with the same probability p.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor

from normlimits.metrics.separability import SeparabilityResult

__all__ = ["HeadSharing", "head_sharing", "elementary_symmetric", "independent_copies",
           "bernoulli_heads"]


@dataclass
class HeadSharing:
    """Per head h, query row and N (each [H, R, G], NaN where N_s is undefined):

    - ``own``: ``c_h / N`` (head h's N_s/N);
    - ``other_rate``: mean over the other heads h' of ``c_h' / N`` (their rate on h's top-N);
    - ``selecting``: mean over ``j in I_h`` of ``#{h' : j in I_h'}`` (1..H_layer);
    - ``coverage[H]``: fraction of ``I_h`` distinguished by at least one head, averaged over
      the sets of H heads containing h; ``null[H]``: its permutation-null expectation;

    and ``rank_hits`` [H, G, K]: over the rows where N_s is defined, how often the key of rank k
    (k < N) is distinguishable in head h; ``rows`` [G]: how many rows that is.
    """

    n_grid: Tensor
    own: Tensor
    other_rate: Tensor
    selecting: Tensor
    coverage: dict
    null: dict
    rank_hits: Tensor
    rows: Tensor


def elementary_symmetric(values: Tensor, order: int) -> Tensor:
    """``e_order`` of the last dimension of ``values`` [..., n]: the sum over all subsets of
    ``order`` entries of their product (``e_0 = 1``). Returns [...]."""
    n = values.shape[-1]
    if not 0 <= order <= n:
        raise ValueError(f"order must lie in 0..{n} (got {order}).")
    e = [torch.ones(values.shape[:-1], dtype=values.dtype)] + \
        [torch.zeros(values.shape[:-1], dtype=values.dtype) for _ in range(order)]
    for i in range(n):
        v = values[..., i]
        for j in range(min(order, i + 1), 0, -1):
            e[j] = e[j] + v * e[j - 1]
    return e[order]


def _heads(size: int | None, n_heads: int) -> int:
    heads = n_heads if size is None else int(size)
    if not 1 <= heads <= n_heads:
        raise ValueError(f"a set of {size} heads does not fit a layer of {n_heads} heads; use "
                         f"1..{n_heads}, or None for all of them.")
    return heads


def head_sharing(result: SeparabilityResult, sizes=(None,)) -> HeadSharing:
    """Measure the premise for ONE layer: ``result`` from
    :func:`~normlimits.metrics.separability.geometric_separability` with ``keep_selection=True`` on
    weights [H, R, L] (the layer's heads, the same rows). ``sizes``: the numbers of heads H to
    cover with (None: all heads of the layer); keys of ``coverage`` and ``null`` are the ints.
    """
    if result.distinguishable is None or result.order is None:
        raise ValueError("head_sharing needs geometric_separability(..., keep_selection=True).")
    if result.fraction.dim() != 3:
        raise ValueError("pass the result of ONE layer: weights [H, R, L] (heads, rows, keys).")
    n_heads, n_rows, n_g = result.fraction.shape
    grid = result.n_grid
    k_max = result.order.shape[-1]
    defined = ~torch.isnan(result.fraction[0])  # [R, G], the same for every head
    length = int(result.order.max()) + 1 if result.order.numel() else 1
    sets = sorted({_heads(s, n_heads) for s in sizes})
    nan = float("nan")
    own = torch.full((n_heads, n_rows, n_g), nan, dtype=torch.float64)
    other = torch.full_like(own, nan)
    selecting = torch.full_like(own, nan)
    coverage = {s: torch.full_like(own, nan) for s in sets}
    null = {s: torch.full_like(own, nan) for s in sets}
    rank_hits = torch.zeros(n_heads, n_g, k_max, dtype=torch.float64)
    others = torch.ones(n_heads, n_heads, dtype=torch.bool).fill_diagonal_(False)
    for g, n in enumerate(grid.tolist()):
        rows_g = defined[:, g]
        if not bool(rows_g.any()):
            continue
        idx = result.order[:, rows_g, :n]  # [H, R', n]
        dist = result.distinguishable[:, rows_g, g, :n]  # [H, R', n]
        r_count = idx.shape[1]
        member = torch.zeros(n_heads, r_count, length, dtype=torch.bool)
        member.scatter_(2, idx, dist)  # D_h' as a key mask
        chosen = torch.zeros(n_heads, r_count, length, dtype=torch.bool)
        chosen.scatter_(2, idx, True)  # I_h' as a key mask
        # hits[h', h, r, k]: the key of rank k in I_h is distinguishable in head h'
        pick = idx[None].expand(n_heads, -1, -1, -1)
        hits = torch.gather(member[:, None].expand(-1, n_heads, -1, -1), 3, pick)
        sel = torch.gather(chosen[:, None].expand(-1, n_heads, -1, -1), 3, pick)
        counts = hits.sum(-1, dtype=torch.float64) / n  # [H', H, R']: c_h' / N on I_h
        own_g = torch.diagonal(counts, 0, 0, 1).T  # [H, R']
        own[:, rows_g, g] = own_g
        if n_heads > 1:
            other[:, rows_g, g] = (counts * others[:, :, None]).sum(0) / (n_heads - 1)
        selecting[:, rows_g, g] = sel.sum(0, dtype=torch.float64).mean(-1)
        rank_hits[:, g, :n] = dist.sum(1, dtype=torch.float64)
        missed_by_others = (~hits & others[:, :, None, None]).sum(0)  # [H, R', n]: m_k
        own_hit = torch.diagonal(hits, 0, 0, 1).permute(2, 0, 1)  # [H, R', n]
        u = 1.0 - counts.permute(1, 2, 0)  # [H, R', H']: 1 - c_h'/N
        u_others = u.masked_select(others[:, None, :]).view(n_heads, r_count, n_heads - 1)
        u_own = torch.diagonal(u.permute(0, 2, 1), 0, 0, 1).T  # [H, R']
        for s in sets:
            ways = math.comb(n_heads - 1, s - 1)
            miss_all = _comb(missed_by_others, s - 1) / ways  # P(the other s-1 heads all miss)
            coverage[s][:, rows_g, g] = 1.0 - ((~own_hit).double() * miss_all).mean(-1)
            null[s][:, rows_g, g] = 1.0 - u_own * elementary_symmetric(u_others, s - 1) / ways
    return HeadSharing(grid, own, other, selecting, coverage, null, rank_hits,
                       defined.sum(0).to(torch.float64))


def _comb(m: Tensor, k: int) -> Tensor:
    """C(m, k) elementwise for an integer tensor ``m`` >= 0 (0 where m < k), float64."""
    out = torch.ones(m.shape, dtype=torch.float64)
    for i in range(k):
        out = out * (m - i).clamp_min(0).double() / (i + 1)
    return out


def independent_copies(rank_hits: Tensor, rows: Tensor, n_grid,
                       heads: int) -> tuple[Tensor, Tensor, Tensor]:
    """H independent copies of each head (the premise by construction), exact expectation.

    ``rank_hits`` [..., G, K] and ``rows`` [G] (or [..., G]) as in :class:`HeadSharing`
    (summed over windows as needed). Returns ``(coverage, formula, p)``, each [..., G]:
    ``mean_{k<N} 1 - (1 - p_k)^H`` with ``p_k = rank_hits / rows``, ``1 - (1 - p)^H``, and
    ``p = mean_{k<N} p_k`` (the head's N_s/N). NaN where no row is defined.
    """
    if heads < 1:
        raise ValueError(f"the number of heads must be >= 1 (got {heads}).")
    grid = torch.as_tensor(n_grid, dtype=torch.long)
    k_max = rank_hits.shape[-1]
    rows = torch.as_tensor(rows, dtype=torch.float64)
    with torch.no_grad():
        p_k = rank_hits.double() / rows[..., None]  # [..., G, K]
        in_n = (torch.arange(k_max)[None, :] < grid[:, None]).double()  # [G, K]
        n = grid.double()
        coverage = ((1.0 - (1.0 - p_k) ** heads) * in_n).sum(-1) / n
        p = (p_k * in_n).sum(-1) / n
        formula = 1.0 - (1.0 - p) ** heads
    return coverage, formula, p


#: random numbers drawn per step of :func:`bernoulli_heads` (32 MiB of float64)
BERNOULLI_CHUNK = 1 << 22


def bernoulli_heads(p: Tensor, heads: int, tokens: int = 4096, seed: int = 0,
                    chunk: int = BERNOULLI_CHUNK) -> Tensor:
    """Sampled coverage of ``tokens`` tokens by ``heads`` heads that distinguish each token
    independently with probability ``p`` (any shape): the fraction distinguished by at least one
    head, same shape as ``p`` (its expectation is ``1 - (1 - p)^heads``).

    The draws are those of one ``torch.rand((*p.shape, tokens, heads))`` from ``seed`` (a
    [..., tokens, heads] uniform ``u``; token covered iff ``u < p`` for some head), made about
    ``chunk`` numbers at a time into one buffer, in the same order, so the result does not depend
    on ``chunk``; a token is covered iff its smallest draw is below p. At GPT-2's size (144 heads,
    13 N, 20,000 tokens, 12 heads) that is 2 s instead of 18 s for the whole tensor at once and
    ``any`` over its last 12 entries, with the same bits (test).
    """
    if heads < 1 or tokens < 1:
        raise ValueError("heads and tokens must be >= 1.")
    if chunk < 1:
        raise ValueError(f"chunk must be >= 1 (got {chunk})")
    gen = torch.Generator().manual_seed(seed)
    p = torch.as_tensor(p, dtype=torch.float64)
    flat = p.reshape(-1)                                                  # [P]
    per_p = tokens * heads
    step = max(1, chunk // per_p)                                         # entries of p per step
    out = torch.empty(flat.shape, dtype=torch.float64)
    buffer = torch.empty(min(step, flat.numel()) * per_p, dtype=torch.float64)
    for i in range(0, flat.numel(), step):
        m = min(step, flat.numel() - i)
        draws = buffer[:m * per_p].uniform_(generator=gen).view(m, tokens, heads)
        out[i:i + m] = (draws.amin(-1) < flat[i:i + m, None]).double().mean(-1)
    return out.view(p.shape)
