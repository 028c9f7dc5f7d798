"""The paper's protocol for Figure 2: per (layer, head), token-means over every query position.

The paper's Algorithms 1-3 compute d~ and its expectation "for every token index t" of a
length-L window, average over the tokens, and keep one value per (layer, head). By causality the
row ``t`` of one forward pass over the longest window *is* the row ``t`` of every window cut to a
length ``L > t``: so one pass per window serves every L of a grid, and the token-mean for L is the
mean of the per-row statistics over the rows ``t < L``.

A causal row ``t`` sees ``t + 1`` keys; where ``t + 1 <= N`` every key is selected, nothing is
left outside the top-N set, and every statistic of the sum-of-norms readings is exactly 0 (the
norm of the sum is ``||T||``). These rows are *kept* in the token-mean with that value, as the
paper's "every token index" says: they scale every head's token-mean of both d~ and its
expectation by the same factor ``(L - N)/L``, which leaves ratios and the KS test (invariant
under a common positive scale) unchanged.

:func:`position_studies` runs several :class:`StudySpec` (vectors, readings, Monte Carlo draws,
subsampling of positions, number of windows) over one pass through the windows; each gives a
:class:`PositionStudy` with the token-means (``means``, the paper's protocol) and the last row
``t = L - 1`` alone (``last``, the named variant) for every length and N.

Intervals over windows (issue 31): a spec's ``window_forms`` keeps, for those readings, each
window's token-means as well (``PositionStudy.per_window``); their means over windows are then
computed from them, and :meth:`PositionStudy.resampled` gives the study of a bootstrap resample of
the windows (the same numbers, bit for bit, for the resample that draws every window once).

Subsampling of query positions (``per_octave``): the work for the row ``t`` grows like ``t``, so
all positions of a window cost ``O(L^2)`` per head. With ``per_octave = k`` each octave
``[2^j, 2^(j+1))`` of positions is cut into ``k`` cells of equal width and the row at the middle
of each cell stands for its cell (weight = its width): a stratified quadrature whose error the
distances chapter measures against every position.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

import torch
from torch import Tensor

from normlimits.core.bootstrap import unit_counts, weighted_sum
from normlimits.metrics.readings import (
    DEFAULT_CHUNK_ELEMENTS, STATISTICS, VECTORS, _check_forms, _grid, row_statistics)

__all__ = ["window_vectors", "query_rows", "ReadingMeans", "PositionStudy", "StudySpec",
           "position_studies", "position_study"]


def window_vectors(capture, vectors: str = "values") -> Tensor:
    """The x_i of one captured window as ``[layers, heads or 1, L, d]``.

    ``values``: the head's value vectors; ``hidden``: the residual stream entering the layer
    (shared by its heads); ``*_sphere``: the same projected onto the unit sphere.
    """
    if vectors not in VECTORS:
        raise ValueError(f"vectors={vectors!r}: choose one of {VECTORS}")
    if vectors.startswith("hidden"):
        if getattr(capture, "hidden", None) is None:
            raise ValueError("this capture has no hidden states (capture.hidden is None); "
                             "keep them to use vectors='hidden'")
        x = capture.hidden[:, None]
    else:
        x = capture.values
    if vectors.endswith("_sphere"):
        x = x / x.norm(dim=-1, keepdim=True).clamp_min(torch.finfo(x.dtype).tiny)
    return x


def query_rows(longest: int, lengths: Sequence[int], per_octave: int | None = None, *,
               paper: bool = True) -> tuple[Tensor, Tensor]:
    """The query positions a study computes, and the weight of each in each token-mean.

    ``per_octave`` None: every position ``t < longest`` (the paper's protocol). An int k (a power
    of 2): within each octave ``[2^j, 2^(j+1))`` every ``max(1, 2^j / k)``-th position, the middle
    of its cell of that many positions, so that each octave of t holds about k rows at a cost per
    octave that does not grow with t; the positions below ``2k`` are all kept. The last row
    ``L - 1`` of every length is always computed (the last-row variant; weight 0 unless it is a
    sampled position). ``paper=False``: the last rows only.

    Returns ``(rows, weights)``: sorted LongTensor [R], and float64 [m, R] with the share of
    positions of ``[0, L_i)`` that row stands for (each row of ``weights`` sums to ``L_i``).
    """
    if per_octave is not None and (per_octave < 1 or per_octave & (per_octave - 1)):
        raise ValueError(f"per_octave must be a power of 2 or None (got {per_octave})")
    lens = torch.as_tensor(sorted({int(L) for L in lengths}), dtype=torch.long)
    starts, widths = [torch.zeros(0, dtype=torch.long)], [torch.zeros(0, dtype=torch.long)]
    if paper:
        lo, hi = 0, 1
        while lo < longest:                     # octaves [0, 1), [1, 2), [2, 4), ...
            step = 1 if per_octave is None else max(1, (hi - lo) // per_octave)
            cell = torch.arange(lo, min(hi, longest), step)
            starts.append(cell)
            widths.append(torch.clamp(torch.full_like(cell, step), max=longest - cell))
            lo, hi = hi, 2 * hi
    starts, widths = torch.cat(starts), torch.cat(widths)
    centres = starts + (widths - 1) // 2
    rows = torch.unique(torch.cat([centres, lens - 1]))
    weights = torch.zeros(lens.numel(), rows.numel(), dtype=torch.float64)
    col = torch.searchsorted(rows, centres)
    for i, L in enumerate(lens.tolist()):     # the part of each cell inside [0, L)
        share = (torch.clamp(starts + widths, max=L) - starts).clamp_min(0)
        weights[i].index_add_(0, col, share.double())
    return rows, weights


@dataclass(frozen=True)
class ReadingMeans:
    """One reading's statistics per (layer, head): float64 tensors ``[layers, heads, m, n]`` for
    the ``m`` lengths and ``n`` values of N of the study. ``true``, ``mc``, ``main``, ``rms`` as in
    :func:`normlimits.metrics.readings.row_statistics` (averaged), and ``upper``, ``individual`` for the
    scaled form; ``mc_se`` the standard error of ``mc`` from the Monte Carlo draws (NaN with one
    draw). Fields the study did not compute are None."""

    true: Tensor
    mc: Tensor | None = None
    mc_se: Tensor | None = None
    main: Tensor | None = None
    rms: Tensor | None = None
    upper: Tensor | None = None
    individual: Tensor | None = None

    def expectation(self, which: str) -> Tensor:
        """``mc``, ``main``, ``rms``, ``upper`` or ``individual`` (ValueError naming what was
        computed otherwise)."""
        names = ("mc", "main", "rms", "upper", "individual")
        value = getattr(self, which, None) if which in names else None
        if value is None:
            raise ValueError(f"statistic {which!r} was not computed; computed: "
                             f"{[k for k in names if getattr(self, k) is not None]}")
        return value


@dataclass(frozen=True)
class PositionStudy:
    """Token-means over query positions (the paper's protocol) and last rows, per reading.

    ``means[form]``: per (layer, head), the mean over the query positions ``t < L`` of the window
    cut to length L (every position, or ``per_octave`` per octave, weighted), then over windows;
    ``last[form]``: the row ``t = L - 1`` alone, mean over windows. ``lengths`` [m] and ``n_grid``
    [n] are the axes; ``positions[i]`` how many query rows entered the token-mean at
    ``lengths[i]``; ``seconds`` the time spent on this study. ``per_window[form][statistic]``:
    for the spec's ``window_forms`` only, each window's token-means ``[windows, layers, heads, m,
    n]`` (``mc_var``: the variance of each window's Monte Carlo token-mean), whose mean over the
    windows is ``means[form]``. ``dtype``: the dtype the readings were computed in (the
    captures', e.g. ``"float32"``; the means are float64 sums of them), whose precision bounds
    how closely two readings can be compared (:func:`normlimits.core.precision.dtype_rtol`).
    """

    lengths: list
    n_grid: Tensor
    vectors: str
    per_octave: int | None
    samples: int
    mc_keys: int | None
    windows: int
    positions: list
    means: dict = field(default_factory=dict)
    last: dict = field(default_factory=dict)
    seconds: float = float("nan")
    per_window: dict = field(default_factory=dict)
    dtype: str = "float64"

    def resampled(self, windows: Sequence[int]) -> "PositionStudy":
        """The study of the windows ``windows`` (indices into the study's windows, repeats
        allowed: a bootstrap resample): ``means`` for the forms kept per window, the mean of those
        windows' token-means (``mc_se`` from their Monte Carlo variances); no ``last`` rows and no
        ``per_window``. ``resampled(range(windows))`` reproduces ``means`` exactly."""
        if not self.per_window:
            raise ValueError("this study kept no per-window token-means; run it with "
                             "StudySpec(window_forms=...) to resample its windows")
        counts = unit_counts(windows, self.windows)
        means = {form: _window_means(stats, counts) for form, stats in self.per_window.items()}
        return PositionStudy(lengths=self.lengths, n_grid=self.n_grid, vectors=self.vectors,
                             per_octave=self.per_octave, samples=self.samples,
                             mc_keys=self.mc_keys, windows=int(counts.sum()),
                             positions=self.positions, means=means, seconds=0.0, dtype=self.dtype)

    def per_head(self, form: str, statistic: str, length: int, aggregate: str = "paper") -> Tensor:
        """``[heads_total, n]`` values of one statistic at one length (``aggregate``: ``paper``
        for the token-means, ``last_row`` for the variant)."""
        table = {"paper": self.means, "last_row": self.last}.get(aggregate)
        if table is None:
            raise ValueError(f"aggregate={aggregate!r}: choose 'paper' or 'last_row'")
        if form not in table:
            raise ValueError(f"form {form!r} was not computed; computed: {list(table)}")
        if length not in self.lengths:
            raise ValueError(f"length {length} is not one of the study's {self.lengths}")
        value = (table[form].true if statistic == "true" else
                 table[form].mc_se if statistic == "mc_se" else
                 table[form].expectation(statistic))
        if value is None:
            raise ValueError(f"statistic {statistic!r} was not computed")
        return value[..., self.lengths.index(length), :].reshape(-1, self.n_grid.numel())


def _window_means(stats: Mapping[str, Tensor], counts: Tensor) -> "ReadingMeans":
    """ReadingMeans from per-window token-means ``{statistic: [windows, ...]}``: the mean over
    the windows, window w counted ``counts[w]`` times (float64 [windows]; a bootstrap resample's
    counts, or ones), ``mc_se`` the square root of the so summed variances over the count squared.
    One matrix-vector product per statistic (much cheaper than gathering the drawn windows)."""
    total = float(counts.sum())
    got = {s: weighted_sum(v, counts) / total for s, v in stats.items() if s != "mc_var"}
    se = (weighted_sum(stats["mc_var"], counts) / total ** 2).sqrt() if "mc_var" in stats else None
    return ReadingMeans(true=got["true"], mc=got.get("mc"), mc_se=se, main=got.get("main"),
                        rms=got.get("rms"), upper=got.get("upper"), individual=got.get("individual"))


@dataclass(frozen=True)
class StudySpec:
    """What one study computes: the vectors x_i (:data:`normlimits.metrics.readings.VECTORS`), the
    readings (``forms``), the N grid, ``samples`` Monte Carlo draws per row (each summing over
    ``mc_keys`` sampled keys, or every key when None), the closed forms (``expectations``: a
    sequence for every form, or a mapping form -> closed forms), the subsampling of positions
    (``per_octave``; None: every position), ``paper`` (False: last rows only) and how many of
    the windows it uses (``max_windows``; None: all); ``window_forms``: the readings (a subset
    of ``forms``) whose token-means are also kept per window, for resampling the windows."""

    n_grid: Sequence[int]
    vectors: str = "values"
    forms: Sequence[str] = ("scaled",)
    samples: int = 2
    mc_keys: int | None = None
    expectations: Sequence[str] | Mapping[str, Sequence[str]] = ("main", "rms")
    per_octave: int | None = None
    paper: bool = True
    max_windows: int | None = None
    window_forms: Sequence[str] = ()

    def __post_init__(self) -> None:
        _check_forms(self.forms)
        extra = [f for f in self.window_forms if f not in self.forms]
        if extra:
            raise ValueError(f"window_forms {extra} are not among the study's forms {list(self.forms)}")
        if self.window_forms and not self.paper:
            raise ValueError("window_forms keeps token-means per window; it needs paper=True")
        _grid(self.n_grid)
        if self.vectors not in VECTORS:
            raise ValueError(f"vectors={self.vectors!r}: choose one of {VECTORS}")
        if self.max_windows is not None and self.max_windows < 1:
            raise ValueError(f"max_windows must be >= 1 or None (got {self.max_windows})")


def _blocks(rows: Tensor, size: int) -> list[slice]:
    """Consecutive blocks of at most ``size`` of the sorted ``rows``, never spanning two octaves
    ``[2^j - 1, 2^(j+1) - 1)`` of position: every row of a block is computed over the keys of its
    longest row, so rows of similar length go together (with ``per_octave`` sampling a block of
    one octave wastes at most half its work)."""
    if size < 1:
        raise ValueError(f"rows_per_call must be >= 1 (got {size})")
    octave = torch.floor(torch.log2(rows.double() + 1)).long().tolist()
    out, start = [], 0
    for i in range(1, len(octave) + 1):
        if i == len(octave) or octave[i] != octave[start] or i - start == size:
            out.append(slice(start, i))
            start = i
    return out


class _Accumulator:
    """Sums of one spec's per-row statistics, weighted into token-means and last rows."""

    def __init__(self, spec: StudySpec, lens: list[int], generator: torch.Generator):
        self.spec, self.lens, self.gen = spec, lens, generator
        self.forms, self.grid = _check_forms(spec.forms), _grid(spec.n_grid)
        self.rows, self.weights = query_rows(lens[-1], lens, spec.per_octave, paper=spec.paper)
        Lt = torch.tensor(lens)
        self.share = self.weights / Lt[:, None].double()                          # [m, R]
        self.is_last = (self.rows[None, :] == (Lt[:, None] - 1)).double()        # [m, R]
        self.sums: dict = {}
        self.kept = set(spec.window_forms)
        self.windowed: dict = {}        # (form, statistic) -> [each window's token-means]
        self.count = 0
        self.seconds = 0.0
        self.dtype = torch.float64          # the readings' dtype (the least precise seen)

    def add(self, cap, rows_per_call: int, chunk_elements: int) -> None:
        started = time.perf_counter()
        spec, lens = self.spec, self.lens
        x_all = window_vectors(cap, spec.vectors)
        window = x_all.shape[-2]
        if lens[0] < 1 or lens[-1] > window:
            raise ValueError(f"lengths {lens} must lie in 1..{window} (the captured window); "
                             "capture a longer window or shrink the grid")
        for cols in _blocks(self.rows, rows_per_call):
            block = self.rows[cols]
            top = int(block.max()) + 1
            vals = row_statistics(cap.weights(block)[..., :top], x_all[..., :top, :], self.grid,
                                  lengths=block + 1, forms=self.forms, samples=spec.samples,
                                  mc_keys=spec.mc_keys, expectations=spec.expectations,
                                  generator=self.gen, chunk_elements=chunk_elements)
            for f, by_stat in vals.items():
                for st, v in by_stat.items():
                    if torch.finfo(v.dtype).eps > torch.finfo(self.dtype).eps:
                        self.dtype = v.dtype
                    v = v.double()
                    parts = {"last_row": torch.einsum("...rn,mr->...mn", v, self.is_last[:, cols])}
                    if spec.paper:    # a variance enters a weighted mean with squared weights
                        w_m = self.share[:, cols] ** 2 if st == "mc_var" else self.share[:, cols]
                        parts["paper"] = torch.einsum("...rn,mr->...mn", v, w_m)
                    for agg, part in parts.items():
                        key = (f, st, "window" if agg == "paper" and f in self.kept else agg)
                        self.sums[key] = self.sums[key] + part if key in self.sums else part
        for key in [k for k in self.sums if k[2] == "window"]:   # this window's token-means
            self.windowed.setdefault(key[:2], []).append(self.sums.pop(key))
        self.count += 1
        self.seconds += time.perf_counter() - started

    def _per_window(self) -> dict:
        out: dict = {}
        for (f, st), parts in self.windowed.items():
            out.setdefault(f, {})[st] = torch.stack(parts)
        return out

    def _means(self, agg: str) -> dict:
        out, count = {}, self.count
        windowed = self._per_window() if agg == "paper" else {}
        for f in self.forms:
            if f in windowed:
                out[f] = _window_means(windowed[f], torch.ones(count, dtype=torch.float64))
                continue
            got = {s: self.sums[(f, s, agg)] / count for s in STATISTICS if (f, s, agg) in self.sums}
            se = None
            if (f, "mc_var", agg) in self.sums:
                se = (self.sums[(f, "mc_var", agg)] / count ** 2).sqrt()
            out[f] = ReadingMeans(true=got["true"], mc=got.get("mc"), mc_se=se,
                                  main=got.get("main"), rms=got.get("rms"),
                                  upper=got.get("upper"), individual=got.get("individual"))
        return out

    def result(self) -> PositionStudy:
        spec = self.spec
        return PositionStudy(lengths=self.lens, n_grid=self.grid, vectors=spec.vectors,
                             per_octave=spec.per_octave, samples=spec.samples,
                             mc_keys=spec.mc_keys, windows=self.count,
                             positions=[int((self.weights[i] > 0).sum()) if spec.paper else 0
                                        for i in range(len(self.lens))],
                             means=self._means("paper") if spec.paper else {},
                             last=self._means("last_row"), seconds=self.seconds,
                             per_window=self._per_window(), dtype=str(self.dtype).removeprefix("torch."))


def position_studies(captures: Iterable, lengths: Sequence[int], specs: Mapping[str, StudySpec],
                     *, rows_per_call: int = 64, seed: int = 0,
                     chunk_elements: int = DEFAULT_CHUNK_ELEMENTS) -> dict[str, PositionStudy]:
    """Every study of ``specs`` over one pass through ``captures`` (a one-shot iterator is fine).

    For each window and spec: the rows of :func:`query_rows`, in blocks of ``rows_per_call`` rows
    that see only the keys they need, then :func:`normlimits.metrics.readings.row_statistics` on the
    spec's vectors; the token-mean for length L is the weighted mean over the rows ``t < L``,
    then the mean over windows. ``seed`` seeds the Monte Carlo draws (one generator per spec).
    ``mc_se`` covers the Monte Carlo error only, not the error of sampling query positions.
    """
    lens = sorted({int(L) for L in lengths})
    if not lens:
        raise ValueError("lengths is empty; pass the window lengths L to average over")
    if not specs:
        raise ValueError("specs is empty; pass at least one StudySpec")
    acc = {name: _Accumulator(spec, lens, torch.Generator().manual_seed(seed + k))
           for k, (name, spec) in enumerate(specs.items())}
    seen = 0
    for cap in captures:
        for a in acc.values():
            if a.spec.max_windows is None or seen < a.spec.max_windows:
                a.add(cap, rows_per_call, chunk_elements)
        seen += 1
    if seen == 0:
        raise ValueError("no windows were given; pass at least one captured window")
    return {name: a.result() for name, a in acc.items()}


def position_study(captures: Iterable, lengths: Sequence[int], n_grid, *,
                   vectors: str = "values", forms: Sequence[str] = ("scaled",),
                   per_octave: int | None = None, paper: bool = True,
                   samples: int = 2, mc_keys: int | None = None,
                   expectations: Sequence[str] | Mapping[str, Sequence[str]] = ("main", "rms"),
                   rows_per_call: int = 64, seed: int = 0,
                   chunk_elements: int = DEFAULT_CHUNK_ELEMENTS,
                   window_forms: Sequence[str] = ()) -> PositionStudy:
    """One study (:func:`position_studies` with one :class:`StudySpec` of these settings)."""
    spec = StudySpec(n_grid=n_grid, vectors=vectors, forms=forms, samples=samples,
                     mc_keys=mc_keys, expectations=expectations, per_octave=per_octave,
                     paper=paper, window_forms=window_forms)
    return position_studies(captures, lengths, {"study": spec}, rows_per_call=rows_per_call,
                            seed=seed, chunk_elements=chunk_elements)["study"]
