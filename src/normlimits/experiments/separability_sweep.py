"""Figure 3's workload over a model's windows (paper Algorithm 4), one forward pass per window.

For every window, layer, head, query row and N of a grid: N_s/N
(:func:`normlimits.metrics.separability.geometric_separability`) on one or more vector sets
(:data:`VECTOR_KINDS`), the plug-in Theorem 2 bounds
(:func:`normlimits.metrics.separability_bounds.theorem2_bounds`) at each row's measured radius, and, on
request, means over named subsets of the rows (e.g. the last row, or evenly spaced rows), the
heads' sharing of their top-N tokens (:mod:`normlimits.metrics.multihead`), each head's attention
entropy, and N_s/N at other softmax temperatures. Everything is accumulated as per-head means
over rows and windows, with the spread needed for a standard error, so memory stays flat in the
number of windows.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable

import torch
from torch import Tensor

from normlimits.core.bootstrap import unit_counts, weighted_sum
from normlimits.metrics.multihead import head_sharing
from normlimits.metrics.normalizers import softmax_with_temperature
from normlimits.metrics.separability import (
    SeparabilityResult, check_n_grid, distinct_heads, geometric_separability,
    min_pairwise_distance, project_to_sphere)
from normlimits.metrics.separability_bounds import theorem2_bounds

__all__ = ["VECTOR_KINDS", "SURE_RTOL", "layer_weights", "SeparabilitySweep", "separability_sweep"]

#: The vector sets a sweep can measure N_s on, per layer and head:
#: ``values``: the head's value vectors projected onto the sphere of radius M (the book's reading
#: of the paper's "normalised embeddings");
#: ``raw_values``: the value vectors as GPT-2 computes them (no projection; no bounds);
#: ``hidden``: the residual stream entering the block, projected onto the sphere (shared by heads);
#: ``uniform``: i.i.d. uniform points on the sphere in d_head dimensions with the model's weights
#: (Assumption 1 exactly, the weights still the model's).
VECTOR_KINDS = ("values", "raw_values", "hidden", "uniform")
_ON_SPHERE = {"values", "hidden", "uniform"}
#: relative margin on the measured radius for the sure bound: r is float32 (relative rounding
#: ~1e-7); counting a token only when xi^delta < r (1 - 1e-5) keeps the bound valid.
SURE_RTOL = 1e-5
_BOUND_NAMES = ("lower", "upper", "lower_markov", "upper_exponential", "sure")


def layer_weights(capture, layer: int, rows=None, temperature: float = 1.0,
                  dtype: torch.dtype | None = None) -> Tensor:
    """Softmax weights of ONE layer, [heads, R, L]: ``softmax(q k^T * scale / T)`` with the causal
    mask, the same numbers as ``capture.weights(rows)[layer]`` at T = 1, without materialising
    every layer at once. ``dtype``: compute in this dtype (default: the capture's)."""
    q = capture.queries[layer]
    k = capture.keys[layer]
    if dtype is not None:
        q, k = q.to(dtype), k.to(dtype)
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


class _Moments:
    """Running count, sum and sum of squares over rows and windows, per (layer, head, ...), and
    each window's count and sum (:meth:`end_window`), for resampling the windows."""

    def __init__(self) -> None:
        self.store: dict = {}
        self.current: dict = {}
        self.windows: dict = {}

    def add(self, key, layer: int, n_layers: int, values: Tensor) -> None:
        """``values`` [H, R, ...] with NaN where undefined; reduced over R."""
        v = values.double()
        ok = ~torch.isnan(v)
        v0 = torch.where(ok, v, 0.0)
        parts = (ok.sum(1, dtype=torch.float64), v0.sum(1), (v0 * v0).sum(1))
        if key not in self.store:
            self.store[key] = [torch.zeros((n_layers, *p.shape), dtype=torch.float64) for p in parts]
        if key not in self.current:
            self.current[key] = [torch.zeros((n_layers, *p.shape), dtype=torch.float64) for p in parts[:2]]
        for acc, part in zip(self.store[key], parts):
            acc[layer] += part
        for acc, part in zip(self.current[key], parts[:2]):
            acc[layer] += part

    def end_window(self) -> None:
        """Close a window: its counts and sums join :attr:`windows` (a key the window did not
        touch gets zeros, so every key has one entry per window)."""
        closed = max((len(n) for n, _ in self.windows.values()), default=0)
        for key in self.store:
            zeros = [torch.zeros_like(t) for t in self.store[key][:2]]
            n, s = self.current.pop(key, zeros)
            counts, sums = self.windows.setdefault(key, ([zeros[0]] * closed, [zeros[1]] * closed))
            counts.append(n)
            sums.append(s)

    def window_stacks(self) -> dict:
        """{key: (counts [W, ...], sums [W, ...])}, one entry per closed window."""
        return {key: (torch.stack(n), torch.stack(s)) for key, (n, s) in self.windows.items()}

    def mean(self, key) -> Tensor:
        """The mean over every (window, row) sample: each window's sum over the total count, the
        windows' sums added in window order (:func:`window_mean` with every window once)."""
        if key in self.windows:
            n, s = (torch.stack(part) for part in self.windows[key])
            return window_mean(n, s, torch.ones(n.shape[0], dtype=torch.float64))
        n, s, _ = self.store[key]
        return s / n  # NaN where nothing was defined

    def stderr(self, key) -> Tensor:
        """Standard error of the mean over the pooled (window, row) samples."""
        n, s, q = self.store[key]
        mean = s / n
        var = (q / n - mean * mean).clamp_min(0.0) * n / (n - 1)
        return (var / n).sqrt()


def window_mean(counts: Tensor, sums: Tensor, weights: Tensor) -> Tensor:
    """The pooled mean of windows' samples, window w counted ``weights[w]`` times: ``sum_w
    weights_w sums_w / sum_w weights_w counts_w`` (``counts``, ``sums`` [W, ...]; ``weights``
    float64 [W]: ones, or a bootstrap resample's counts); NaN where no sample is defined."""
    return weighted_sum(sums, weights) / weighted_sum(counts, weights)


@dataclass
class SeparabilitySweep:
    """Per-head means over rows and windows of N_s/N and the plug-in Theorem 2 bounds.

    Tensors are [layers, heads, G] unless said, keyed by vector kind (means over every
    (window, row) pair where N_s is defined, i.e. rows that see more than N keys):

    - ``rows[kind]``: the query positions used (LongTensor; every position when all were used);
    - ``fraction[kind]``: N_s/N; ``stderr[kind]``: its standard error over the pooled rows;
    - ``lower``, ``upper`` (the theorem's combined bounds), ``lower_markov``,
      ``upper_exponential`` (the paper's two steps alone), ``sure`` (the Assumption 2 bound):
      plug-in bounds at the measured radius r, M = sphere_radius, d = the vectors' dimension,
      delta = the exact minimum pairwise distance of the head's vectors in the window (kinds on
      the sphere only);
    - ``delta[kind]``, ``alignment[kind]``: [W, layers, heads] those minimum distances, and the
      mean pairwise cosine of the head's vectors in the window (0 for isotropic points);
    - ``sure_violations[kind]``: (row, N) pairs where N_s/N fell below the sure bound (it is a
      theorem for every row: must be 0), ``rows_checked[kind]`` how many were checked;
    - ``subsets[name]``: for ``values``, {"fraction", "stderr", "upper", "upper_exponential"}
      over the named subset of the rows (the bounds over its rows among the detail rows), and
      ``"rows"``, how many rows the subset has;
    - ``entropy``: [layers, heads] mean over rows t >= 1 of the row's attention entropy over
      ``log(t + 1)`` (1 = uniform over the visible keys);
    - ``temperature[T]``: N_s/N of ``values`` at softmax temperature T (rows
      ``temperature_rows``), ``underflow[T]``: the share of those rows whose K-th largest
      weight (K = max N) is exactly 0 (float64 below T = 1, else the capture's dtype), and
      ``below_float32[T]`` the share whose K-th weight is below float32's smallest normal number
      (2^-126, about 1.2e-38: a weight a float32 model would not hold at full precision, or at all);
    - ``sharing``: for ``values``, the per-head means of :class:`~normlimits.metrics.multihead.HeadSharing`
      (``own``, ``other_rate``, ``selecting``, ``coverage_<H>``, ``null_<H>`` for each H of
      ``head_sets``); ``rank_hits`` [layers, heads, G, K] and ``rank_rows`` [G] summed over windows;
    - ``seconds``: time per part (``forward`` waiting for captures, ``weights``, ``ns_<kind>``,
      ``delta``, ``bounds``, ``multihead``, ``entropy``, ``temperature``); ``forward_seconds``
      and ``metric_seconds`` (everything but the forward passes);
    - ``window_moments[(name, key)]``: each window's (count, sum) of every mean above, [W, ...],
      and ``window_rank``: each window's ``rank_hits`` and ``rank_rows`` (:meth:`resampled`).
    """

    n_grid: Tensor
    kinds: tuple
    windows: int
    rows: dict = field(default_factory=dict)
    fraction: dict = field(default_factory=dict)
    stderr: dict = field(default_factory=dict)
    lower: dict = field(default_factory=dict)
    upper: dict = field(default_factory=dict)
    lower_markov: dict = field(default_factory=dict)
    upper_exponential: dict = field(default_factory=dict)
    sure: dict = field(default_factory=dict)
    delta: dict = field(default_factory=dict)
    alignment: dict = field(default_factory=dict)
    sure_violations: dict = field(default_factory=dict)
    rows_checked: dict = field(default_factory=dict)
    subsets: dict = field(default_factory=dict)
    entropy: Tensor | None = None
    temperature: dict = field(default_factory=dict)
    underflow: dict = field(default_factory=dict)
    below_float32: dict = field(default_factory=dict)
    sharing: dict = field(default_factory=dict)
    head_sets: tuple = ()
    rank_hits: Tensor | None = None
    rank_rows: Tensor | None = None
    seconds: dict = field(default_factory=dict)
    window_moments: dict = field(default_factory=dict)
    window_rank: tuple | None = None

    def resampled(self, windows) -> "SeparabilitySweep":
        """The sweep of the windows ``windows`` (indices, repeats allowed: a bootstrap resample):
        every per-head mean (N_s/N, bounds, subsets, sharing, entropy, temperatures) pooled over
        those windows' rows, the rank hits summed over them, ``delta`` and ``alignment`` of those
        windows; the counts of checks and the timings stay those of all windows, no standard
        errors.
        ``resampled(range(windows))`` reproduces every mean exactly."""
        if not self.window_moments:
            raise ValueError("this sweep kept no per-window moments; resample a sweep made by "
                             "separability_sweep")
        index = torch.as_tensor(list(windows), dtype=torch.long)
        weights = unit_counts(index, self.windows)
        out = SeparabilitySweep(n_grid=self.n_grid, kinds=self.kinds, windows=int(index.numel()),
                                rows=self.rows, sure_violations=self.sure_violations,
                                rows_checked=self.rows_checked, head_sets=self.head_sets,
                                rank_hits=self.rank_hits, rank_rows=self.rank_rows,
                                underflow=self.underflow, below_float32=self.below_float32,
                                delta={k: v[index] for k, v in self.delta.items()},
                                alignment={k: v[index] for k, v in self.alignment.items()})
        _fill_means(out, list(self.window_moments),
                    lambda key: window_mean(*self.window_moments[key], weights))
        if self.window_rank is not None:        # counts: exact sums for whole-number weights
            hits, rows = self.window_rank
            out.rank_hits = weighted_sum(hits, weights)
            out.rank_rows = weighted_sum(rows, weights).to(self.rank_rows.dtype)
        for name, entry in self.subsets.items():
            if "rows" in entry:
                out.subsets.setdefault(name, {})["rows"] = entry["rows"]
        return out

    @property
    def forward_seconds(self) -> float:
        return self.seconds.get("forward", 0.0)

    @property
    def metric_seconds(self) -> float:
        return sum(v for k, v in self.seconds.items() if k != "forward")


def _positions(rows, length: int) -> Tensor:
    if rows is None:
        return torch.arange(length)
    pos = torch.unique(torch.as_tensor(rows, dtype=torch.long).flatten())
    if pos.numel() == 0 or int(pos.min()) < 0 or int(pos.max()) > length - 1:
        raise ValueError(f"query rows must be a non-empty set of positions in 0..{length - 1}.")
    return pos


def _index_in(sub: Tensor, rows: Tensor, name: str) -> Tensor:
    where = torch.searchsorted(rows, sub)
    if bool((where >= rows.numel()).any()) or not torch.equal(rows[where.clamp(max=rows.numel() - 1)], sub):
        raise ValueError(f"the rows of {name!r} must be a subset of the rows measured for 'values'.")
    return where


class _Clock:
    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self.mark = time.perf_counter()

    def tick(self, part: str) -> None:
        now = time.perf_counter()
        self.seconds[part] = self.seconds.get(part, 0.0) + now - self.mark
        self.mark = now


def _slice(res: SeparabilityResult, idx: Tensor | None) -> SeparabilityResult:
    """The rows ``idx`` of a result with ``keep_selection`` (None: all of them)."""
    if idx is None:
        return res
    pick = lambda t: None if t is None else t[:, idx]  # noqa: E731
    return SeparabilityResult(res.n_grid, res.rows[idx], pick(res.fraction), pick(res.radius),
                              pick(res.count), pick(res.top_weights), pick(res.order),
                              pick(res.distinguishable))


def separability_sweep(captures: Iterable, n_grid, *, kinds=("values",), rows=None,
                       kind_rows: dict | None = None, subsets: dict | None = None,
                       detail_rows=None, sphere_radius: float = 1.0, bounds: bool = True,
                       head_sets=(), entropy: bool = False, temperatures=(),
                       temperature_rows=None, seed: int = 0, row_chunk: int = 128,
                       bound_row_chunk: int = 32) -> SeparabilitySweep:
    """Figure 3's workload (paper Algorithm 4) and its sensitivity analyses, in one pass.

    Args:
        captures: iterable of ``WindowCapture`` (e.g. ``ctx.captures(L)``); each is consumed once.
        n_grid: the N values, each in 1..L-1.
        kinds: vector sets from :data:`VECTOR_KINDS`.
        rows: query positions for every kind (None: every position, the paper's protocol); a
            row at position t contributes to the N < t + 1 only.
        kind_rows: per-kind overrides of ``rows`` (e.g. fewer rows for the 768-dimensional
            hidden states).
        subsets: {name: positions} subsets of the ``values`` rows whose N_s/N means (and upper
            bounds, where measured) are also kept.
        detail_rows: positions (a subset of ``rows``) on which the bounds, the multi-head
            measurements and the entropy are measured for the kinds that use ``rows``; None: all.
        sphere_radius: M for the projected kinds.
        bounds: also compute the plug-in Theorem 2 bounds (kinds on the sphere).
        head_sets: numbers of heads H for the multi-head measurements on ``values`` (None: all
            heads of the layer); empty: none.
        entropy: also measure each head's normalised attention entropy.
        temperatures: also measure N_s/N of ``values`` at these softmax temperatures (weights in
            float64 below T = 1, so that low T does not underflow early), on
            ``temperature_rows``.
    """
    kinds = tuple(kinds)
    for kind in kinds:
        if kind not in VECTOR_KINDS:
            raise ValueError(f"unknown vector kind {kind!r}; choose from {VECTOR_KINDS}.")
    kind_rows = dict(kind_rows or {})
    unknown = set(kind_rows) - set(kinds)
    if unknown:
        raise ValueError(f"kind_rows names kinds {sorted(unknown)} that are not measured ({kinds}).")
    head_sets = tuple(head_sets)
    temperatures = tuple(float(t) for t in temperatures)
    if (head_sets or subsets or temperatures or entropy) and "values" not in kinds:
        raise ValueError("head_sets, subsets, entropy and temperatures are measured on kind "
                         "'values'; add it to kinds.")
    if any(not t > 0 for t in temperatures):
        raise ValueError(f"temperatures must be > 0 (got {temperatures}).")

    gen = torch.Generator().manual_seed(seed)
    moments = _Moments()
    per_window: dict = {}
    violations = {k: 0 for k in kinds}
    checked = {k: 0 for k in kinds}
    underflow = {t: [0, 0] for t in temperatures}
    below_float32 = {t: 0 for t in temperatures}
    rank_hits = rank_rows = None
    window_hits, window_rows = [], []
    sets_used: tuple = ()
    grid = None
    n_windows = 0
    clock = _Clock()
    for cap in captures:
        clock.tick("forward")
        n_layers, n_heads, length, _ = cap.values.shape
        if grid is None:  # row bookkeeping, once
            grid = check_n_grid(n_grid, length)
            positions = {k: _positions(kind_rows.get(k, rows), length) for k in kinds}
            every = torch.unique(torch.cat(list(positions.values())))
            where = {k: (None if positions[k].numel() == every.numel()
                         else _index_in(positions[k], every, k)) for k in kinds}
            main = _positions(rows, length)
            detail = {k: (None if detail_rows is None or k in kind_rows
                          else _index_in(_positions(detail_rows, length), main, "detail_rows"))
                      for k in kinds}
            sub_idx = {name: _index_in(_positions(r, length), positions["values"], name)
                       for name, r in (subsets or {}).items()}
            sub_in_detail = {}
            if detail["values"] is not None:  # subsets' positions among the detail rows
                d_pos = positions["values"][detail["values"]]
                sub_in_detail = {n: torch.nonzero(torch.isin(d_pos, positions["values"][i])).flatten()
                                 for n, i in sub_idx.items()}
            t_rows = _positions(temperature_rows, length) if temperatures else None
            w_rows = None if every.numel() == length else every
        window_delta: dict = {}
        for layer in range(n_layers):
            w_all = layer_weights(cap, layer, w_rows)
            clock.tick("weights")
            values_sphere = None
            for kind in kinds:
                w = w_all if where[kind] is None else w_all[:, where[kind]]
                vecs = _kind_vectors(cap, kind, layer, sphere_radius, gen)
                if kind == "values":
                    values_sphere = vecs
                with_bounds = bounds and kind in _ON_SPHERE
                keep = with_bounds or (kind == "values" and bool(head_sets))
                res = geometric_separability(w, vecs, grid, positions[kind], keep_selection=keep,
                                             row_chunk=row_chunk)
                moments.add(("fraction", kind), layer, n_layers, res.fraction)
                for name, idx in (sub_idx.items() if kind == "values" else ()):
                    moments.add(("fraction", f"values@{name}"), layer, n_layers, res.fraction[:, idx])
                clock.tick(f"ns_{kind}")
                part = _slice(res, detail[kind]) if keep else None
                if with_bounds:
                    distinct, group = distinct_heads(vecs)  # grouped-query copies once
                    dist = min_pairwise_distance(distinct)[group].expand(n_heads)  # [H]
                    total = vecs.sum(-2).double()  # [H or 1, d]
                    cos = ((total * total).sum(-1) / sphere_radius**2 - length) / (length * (length - 1))
                    window_delta.setdefault(("delta", kind), []).append(dist)
                    window_delta.setdefault(("alignment", kind), []).append(cos.expand(n_heads))
                    clock.tick("delta")
                    full = _bounds(part, grid, dist, sphere_radius, vecs.shape[-1], bound_row_chunk)
                    ok = ~torch.isnan(full["sure"])
                    frac = part.fraction.double()
                    violations[kind] += int((frac[ok] < full["sure"][ok] - 1e-6).sum())  # float32 k/N
                    checked[kind] += int(ok.sum())
                    for name, value in full.items():
                        moments.add((name, kind), layer, n_layers, value)
                    if kind == "values":
                        sub_rows = sub_in_detail if detail[kind] is not None else sub_idx
                        for sub, idx in sub_rows.items():
                            for name in ("upper", "upper_exponential") if idx.numel() else ():
                                moments.add((name, f"values@{sub}"), layer, n_layers, full[name][:, idx])
                    clock.tick("bounds")
                if kind == "values" and head_sets:
                    share = head_sharing(part, head_sets)
                    sets_used = tuple(sorted(share.coverage))
                    named = {"own": share.own, "other_rate": share.other_rate,
                             "selecting": share.selecting,
                             **{f"coverage_{s}": v for s, v in share.coverage.items()},
                             **{f"null_{s}": v for s, v in share.null.items()}}
                    for name, value in named.items():
                        moments.add(("sharing", name), layer, n_layers, value)
                    if rank_hits is None:
                        rank_hits = torch.zeros((n_layers, *share.rank_hits.shape), dtype=torch.float64)
                        rank_rows = share.rows.clone()
                    elif layer == 0:
                        rank_rows += share.rows
                    rank_hits[layer] += share.rank_hits
                    if layer == 0:      # this window's own counts, for resampling the windows
                        window_hits.append(torch.zeros_like(rank_hits))
                        window_rows.append(share.rows.clone().double())
                    window_hits[-1][layer] += share.rank_hits
                    clock.tick("multihead")
            if entropy:
                pos = positions["values"]
                w_v = w_all if where["values"] is None else w_all[:, where["values"]]
                if detail["values"] is not None:
                    pos, w_v = pos[detail["values"]], w_v[:, detail["values"]]
                ent = torch.special.entr(w_v.double()).sum(-1)  # [H, R]
                ent = torch.where(pos >= 1, ent / torch.log(pos.double() + 1.0), torch.nan)
                moments.add(("entropy", "values"), layer, n_layers, ent[..., None])
                clock.tick("entropy")
            for temp in temperatures:
                w_t = layer_weights(cap, layer, t_rows, temperature=temp,
                                    dtype=torch.float64 if temp < 1.0 else None)
                res = geometric_separability(w_t, values_sphere, grid, t_rows, keep_selection=True,
                                             row_chunk=row_chunk)
                moments.add(("temperature", temp), layer, n_layers, res.fraction)
                deep = t_rows >= int(grid[-1])  # rows with a K-th largest weight
                kth = res.top_weights[:, deep, -1]
                underflow[temp][0] += int((kth == 0).sum())
                below_float32[temp] += int((kth < torch.finfo(torch.float32).tiny).sum())
                underflow[temp][1] += int(deep.sum()) * n_heads
                clock.tick("temperature")
        for key, parts in window_delta.items():
            per_window.setdefault(key, []).append(torch.stack(parts))  # [layers, H]
        moments.end_window()
        n_windows += 1
    if grid is None:
        raise ValueError("separability_sweep got no captures; pass at least one window.")
    out = SeparabilitySweep(n_grid=grid, kinds=kinds, windows=n_windows, rows=positions,
                            sure_violations=violations, rows_checked=checked,
                            head_sets=sets_used, rank_hits=rank_hits, rank_rows=rank_rows,
                            seconds=clock.seconds)
    out.window_moments = moments.window_stacks()
    if window_hits:
        out.window_rank = (torch.stack(window_hits), torch.stack(window_rows))
    _fill_means(out, list(moments.store), moments.mean, moments.stderr)
    for name, idx in sub_idx.items():
        out.subsets.setdefault(name, {})["rows"] = int(idx.numel())
    for (name, kind), stacks in per_window.items():
        getattr(out, name)[kind] = torch.stack(stacks)  # [W, layers, H]
    out.underflow = {t: (a / b if b else float("nan")) for t, (a, b) in underflow.items()}
    out.below_float32 = {t: (below_float32[t] / b if b else float("nan"))
                         for t, (_, b) in underflow.items()}
    return out


def _fill_means(out: SeparabilitySweep, keys, mean_of, stderr_of=None) -> None:
    """Put the mean of every moment key ``(name, key)`` of ``keys`` (``mean_of(key)``) in its
    field of ``out`` (and the standard errors of N_s/N, when ``stderr_of`` is given)."""
    for (name, key) in keys:
        if str(key).startswith("values@"):
            entry = out.subsets.setdefault(str(key).split("@", 1)[1], {})
            entry[name] = mean_of((name, key))
            if name == "fraction" and stderr_of is not None:
                entry["stderr"] = stderr_of((name, key))
        elif name == "fraction":
            out.fraction[key] = mean_of((name, key))
            if stderr_of is not None:
                out.stderr[key] = stderr_of((name, key))
        elif name in _BOUND_NAMES:
            getattr(out, name)[key] = mean_of((name, key))
        elif name == "sharing":
            out.sharing[key] = mean_of((name, key))
        elif name == "entropy":
            out.entropy = mean_of((name, key))[..., 0]
        elif name == "temperature":
            out.temperature[key] = mean_of((name, key))


def _bounds(res: SeparabilityResult, grid: Tensor, delta: Tensor, sphere_radius: float, dim: int,
            chunk: int) -> dict:
    """The plug-in bounds of every row of ``res`` at its measured radius, {name: [H, R, G]}
    (NaN where N_s is undefined); ``delta`` [H]."""
    parts = {name: [] for name in _BOUND_NAMES}
    for r0 in range(0, res.fraction.shape[-2], chunk):
        sl = slice(r0, r0 + chunk)
        radius = res.radius[:, sl].double()
        b = theorem2_bounds(res.top_weights[:, sl], grid, radius, sphere_radius=sphere_radius,
                            dim=dim, delta=delta[:, None], sure_rtol=SURE_RTOL)
        undefined = radius.isnan()
        for name, value in zip(_BOUND_NAMES, (b.lower, b.upper, b.lower_markov,
                                              b.upper_exponential, b.separation)):
            parts[name].append(value.masked_fill(undefined, float("nan")))
    return {name: torch.cat(chunks, dim=-2) for name, chunks in parts.items()}
