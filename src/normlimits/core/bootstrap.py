"""Percentile bootstrap intervals over a resampling unit: how much a graded statistic would move
with other corpus windows (or seeds, or Monte Carlo draws).

A graded statistic is computed from per-unit values ``per_unit`` [n, ...] (one slice per corpus
window, say, with the heads inside it). A bootstrap resample draws n units with replacement; the
statistic of each of ``resamples`` resamples gives a distribution whose ``(1 - level)/2`` and
``(1 + level)/2`` quantiles are the percentile interval. Everything a unit holds stays together in
a resample (the heads of one window share that window's text), so the interval reflects the
variability between units, not between heads.

All resamples are drawn at once (indices [resamples, n] from a generator with a fixed seed).
:func:`bootstrap_interval` applies a tensor statistic to the resampled data [resamples, n, ...] in
chunks, with no Python loop over resamples. :func:`bootstrap_values` is for statistics that are
not tensor functions (a threshold crossing on a grid followed by a fit, say): it calls a function
of the resample's unit indices once per resample, for several statistics at once. The same seed,
data and statistic always give the same interval.

With few units (2 to 4 windows, 3 seeds) a percentile bootstrap can only recombine them, so its
interval is close to their range, not a 95% interval. :func:`t_interval` gives the Student t
interval of a mean over the units (``n - 1`` degrees of freedom), whose coverage holds at any
``n >= 2`` for values spread about normally: the method TR's seeds and SSMax's critical-scale
windows use (:data:`T_METHOD`).

An interval always contains the estimate (the statistic of all units, as the ledger records it):
it is the hull of the percentile interval and the estimate. For smooth statistics (means,
medians) this changes nothing; for extremes (a maximum over heads of means over windows, say)
resamples with repeats are biased away from the estimate, and the plain percentile interval can
miss the estimate altogether. Widening it can only make a criterion undecided, never decide one the
percentile interval would not. ``Interval.widened`` says when it happened.

:class:`Interval` is what a ledger row records (:func:`normlimits.claims.make_row`'s
``intervals``): the bounds, and the resampling that produced them.

Few units make a poor 95% interval: n units have only ``C(2n - 1, n)`` distinct resamples (3 for
2 windows, 35 for 4), and the percentile interval is then little more than the spread of the
units' own values. Below :data:`normlimits.core.markup.RANGE_BELOW` units the book calls it a
*range* (:attr:`Interval.is_range`, :func:`level_words`, :func:`resampling_sentence`) and shows
the count beside every interval (:func:`normlimits.core.markup.with_interval`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import torch
from torch import Tensor

from normlimits.core.markup import RANGE_BELOW, count_words

__all__ = ["RESAMPLES", "LEVEL", "SEED", "UNITS", "METHOD", "T_METHOD", "METHODS", "Interval",
           "t_interval", "resample_indices",
           "unit_counts", "weighted_sum", "drawn_mean", "resample_counts", "bootstrap_interval", "bootstrap_values", "bootstrap_counts",
           "median_of_means", "mean_of_means", "units_to_decide", "distinct_resamples", "level_words",
           "resampling_sentence"]

#: resamples per interval (issue 31 asks for at least 2,000)
RESAMPLES = 2000
#: the intervals' coverage
LEVEL = 0.95
#: the generator's seed (fixed: a build's intervals are reproducible)
SEED = 31
#: what can be resampled: corpus windows, training seeds, Monte Carlo draws
UNITS = ("window", "seed", "draw")
#: how every interval is computed (the ledger's ``resampling.method``)
METHOD = "percentile bootstrap, widened to the estimate"
#: the Student t interval of a mean over few units (:func:`t_interval`; no resampling)
T_METHOD = "Student t interval of the mean over the units"
METHODS = (METHOD, T_METHOD)


@dataclass(frozen=True)
class Interval:
    """A percentile bootstrap interval ``[low, high]`` of a statistic over ``n`` units of kind
    ``unit`` (one of :data:`UNITS`), from ``resamples`` resamples at coverage ``level`` with
    generator seed ``seed``; ``widened``: the percentile interval missed the estimate and was
    extended to it (:data:`METHOD`). ``method`` :data:`T_METHOD`: a Student t interval of a mean
    over the ``n`` units (:func:`t_interval`; ``resamples`` and ``seed`` are 0, nothing is drawn)."""

    low: float
    high: float
    n: int
    unit: str = "window"
    resamples: int = RESAMPLES
    level: float = LEVEL
    seed: int = SEED
    widened: bool = False
    method: str = METHOD

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise ValueError(f"interval method {self.method!r} is not one of {METHODS}")
        if self.unit not in UNITS:
            raise ValueError(f"resampling unit {self.unit!r} is not one of {UNITS}")
        if not (self.low <= self.high):        # also refuses NaN bounds
            raise ValueError(f"interval [{self.low}, {self.high}]: low must be <= high, both numbers")
        if self.n < 2:
            raise ValueError(f"an interval over {self.n} {self.unit}(s) says nothing; resample at "
                             "least 2 units")

    @property
    def bounds(self) -> list[float]:
        """``[low, high]`` as a ledger row's criterion records it."""
        return [float(self.low), float(self.high)]

    @property
    def is_range(self) -> bool:
        """Too few units for a percentile bootstrap at its level: a range of the resamples
        (:data:`~normlimits.core.markup.RANGE_BELOW`). A Student t interval (:data:`T_METHOD`)
        keeps its coverage at small n, so it is never a range."""
        return self.n < RANGE_BELOW and self.method == METHOD

    def count_words(self) -> str:
        """The units it rests on, as shown beside it: ``8 windows``, ``range over 3 windows``."""
        return count_words(self.n, self.unit)

    def resampling(self) -> dict:
        """How the interval was computed, as a ledger row records it (``resampling``)."""
        return {"method": self.method, "unit": self.unit, "n": int(self.n),
                "resamples": int(self.resamples), "level": float(self.level), "seed": int(self.seed)}


def t_interval(values, *, unit: str = "seed", level: float = LEVEL, log: bool = False) -> Interval:
    """The Student t interval of the mean of ``values`` [n] (one value per unit, n >= 2):
    ``mean ± t_{(1+level)/2, n-1} · sd / sqrt(n)`` with the sample standard deviation (n - 1 in
    the denominator). Its coverage is ``level`` for normally spread values at any n, where a
    percentile bootstrap over 3 units is only their range. ``log``: the interval of the
    geometric mean of positive values (the t interval of their logarithms, exponentiated).
    ValueError for fewer than 2 values, NaN or infinite values, or (``log``) values <= 0."""
    from scipy.stats import t as student_t

    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1) (got {level})")
    x = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if x.numel() < 2:
        raise ValueError(f"a t interval needs at least 2 {unit}s (got {x.numel()})")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"t_interval got a non-finite value among {x.tolist()}: measure every {unit}")
    if log:
        if not bool((x > 0).all()):
            raise ValueError(f"log=True needs positive values (got {x.tolist()})")
        x = x.log()
    n = x.numel()
    half = float(student_t.ppf((1 + level) / 2, n - 1)) * float(x.std()) / math.sqrt(n)
    low, high = float(x.mean()) - half, float(x.mean()) + half
    if log:
        low, high = math.exp(low), math.exp(high)
    return Interval(low, high, n=n, unit=unit, resamples=0, level=float(level), seed=0, method=T_METHOD)


def resample_indices(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> Tensor:
    """Indices of ``resamples`` bootstrap resamples of ``n`` units, LongTensor [resamples, n]
    (row r: the units drawn, with replacement, for resample r)."""
    if n < 2:
        raise ValueError(f"bootstrap needs at least 2 units to resample (got {n})")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1 (got {resamples})")
    generator = torch.Generator().manual_seed(int(seed))
    return torch.randint(0, n, (resamples, n), generator=generator)


def bootstrap_interval(per_unit, statistic: Callable[[Tensor], Tensor], *, unit: str = "window",
                       resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED,
                       chunk: int = 250) -> Interval:
    """The percentile bootstrap interval of ``statistic`` over the units of ``per_unit``.

    ``per_unit`` [n, ...]: one slice per unit (float64 is used throughout). ``statistic`` maps a
    batch of resampled data [R, n, ...] to one value per resample [R] (it must treat the R axis as
    a batch: e.g. :func:`median_of_means`). ``chunk`` resamples are evaluated at a time (memory).
    Resamples whose statistic is NaN are left out of the quantiles; if all are, this raises. The
    interval is widened to contain the statistic of all units (the identity resample), when that
    is a number (:data:`METHOD`).
    """
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1) (got {level})")
    data = torch.as_tensor(per_unit, dtype=torch.float64)
    if data.dim() < 1:
        raise ValueError("per_unit needs a leading unit axis [n, ...]")
    index = resample_indices(data.shape[0], resamples, seed)
    values = torch.cat([_checked(statistic(data[index[start:start + chunk]]), len(index[start:start + chunk]))
                        for start in range(0, resamples, chunk)])
    finite = values[~torch.isnan(values)]
    if finite.numel() == 0:
        raise ValueError("the statistic is NaN on every resample; it cannot be given an interval")
    tail = (1 - level) / 2
    low, high = torch.quantile(finite, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
    estimate = float(_checked(statistic(data.unsqueeze(0)), 1)[0])
    return _hull(low, high, estimate, n=int(data.shape[0]), unit=unit, resamples=int(resamples),
                 level=float(level), seed=int(seed))


def _hull(low: float, high: float, estimate: float, **settings) -> Interval:
    """The Interval [low, high] widened to contain ``estimate`` (left alone when it is NaN)."""
    if estimate == estimate and not low <= estimate <= high:
        return Interval(min(low, estimate), max(high, estimate), widened=True, **settings)
    return Interval(low, high, **settings)


def bootstrap_values(n: int, values_of: Callable[[list[int]], dict], keys, *, unit: str = "window",
                     resamples: int = RESAMPLES, level: float = LEVEL, seed: int = SEED,
                     exchangeable: bool = False) -> dict[str, Interval]:
    """Percentile intervals of several statistics computed from the same resamples of ``n``
    units: ``values_of(indices)`` gets one resample's unit indices (a list of n, with repeats)
    and returns a dict holding a number (or None/NaN: left out) for each of ``keys``. Returns
    ``{key: Interval}`` for every key with at least one number, each widened to contain its
    statistic on all units (``values_of(range(n))``; :data:`METHOD`). ``exchangeable``: the
    statistics depend only on which units were drawn and how often, not on their order, so each
    distinct multiset is evaluated once (with few units most resamples repeat one)."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1) (got {level})")
    keys = list(keys)
    drawn = {k: [] for k in keys}
    memo: dict = {}
    for row in resample_indices(n, resamples, seed).tolist():
        if exchangeable:
            multiset = tuple(sorted(row))
            got = memo[multiset] if multiset in memo else memo.setdefault(multiset, values_of(list(multiset)))
        else:
            got = values_of(row)
        for k in keys:
            v = got[k]
            if v is not None and v == v:
                drawn[k].append(float(v))
    tail = (1 - level) / 2
    estimates = values_of(list(range(n)))
    out = {}
    for k, vs in drawn.items():
        if vs:
            low, high = torch.quantile(torch.tensor(vs, dtype=torch.float64),
                                       torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
            estimate = estimates[k]
            estimate = float("nan") if estimate is None else float(estimate)
            out[k] = _hull(low, high, estimate, n=int(n), unit=unit, resamples=int(resamples),
                           level=float(level), seed=int(seed))
    return out


def unit_counts(units, n: int) -> Tensor:
    """How often each of ``n`` units occurs in ``units`` (indices, repeats allowed: one resample),
    float64 [n]; ValueError for an empty list or an index outside 0..n-1."""
    index = torch.as_tensor(list(units), dtype=torch.long)
    if index.numel() == 0 or int(index.min()) < 0 or int(index.max()) >= n:
        raise ValueError(f"window indices must lie in 0..{n - 1} (got {index.tolist()})")
    return torch.bincount(index, minlength=n).double()


def weighted_sum(per_unit: Tensor, counts: Tensor) -> Tensor:
    """``sum_u counts[..., u] per_unit[u]``: ``per_unit`` [n, ...] summed over its units with the
    weights ``counts`` ([n], or [r, n] for r resamples at once), [..., *per_unit.shape[1:]]. One
    matrix(-vector) product: the same weights give the same bits (a resample that draws every
    unit once reproduces a mean taken with ones). A NaN of a unit makes the sum NaN only where
    that unit's weight is not 0: a resample that does not draw it does not see it (a plain
    product would give 0 * NaN = NaN); without NaN the product is the plain one."""
    flat = per_unit.reshape(per_unit.shape[0], -1)
    weights = counts.to(per_unit.dtype)
    bad = torch.isnan(flat)
    if bool(bad.any()):
        total = weights @ torch.where(bad, torch.zeros_like(flat), flat)
        total = torch.where(weights @ bad.to(weights.dtype) > 0, torch.full_like(total, math.nan), total)
    else:
        total = weights @ flat
    return total.reshape(*counts.shape[:-1], *per_unit.shape[1:])


def drawn_mean(per_unit: Tensor, counts: Tensor) -> Tensor:
    """Each resample's mean over the units it drew: :func:`weighted_sum` over the number drawn
    (``counts`` [r, n], each row's sum), [r, *per_unit.shape[1:]]; NaN where a drawn unit is NaN."""
    total = weighted_sum(per_unit, counts)
    return total / counts.to(total.dtype).sum(-1).reshape(-1, *([1] * (per_unit.dim() - 1)))


def resample_counts(n: int, resamples: int = RESAMPLES, seed: int = SEED) -> Tensor:
    """How often each of ``n`` units is drawn in each resample, float64 [resamples, n] (the
    resamples of :func:`resample_indices`, same seed, same draws; each row sums to ``n``)."""
    index = resample_indices(n, resamples, seed)
    return torch.zeros(resamples, n, dtype=torch.float64).scatter_add_(
        1, index, torch.ones_like(index, dtype=torch.float64))


def bootstrap_counts(n: int, values_of: Callable[[Tensor], dict], estimates: dict, *,
                     unit: str = "window", resamples: int = RESAMPLES, level: float = LEVEL,
                     seed: int = SEED, chunk: int = 100) -> dict[str, Interval]:
    """:func:`bootstrap_values` for statistics of the counts, computed for many resamples at once:
    ``values_of`` gets the counts of up to ``chunk`` resamples (float64 [r, n],
    :func:`resample_counts`: the same resamples as :func:`bootstrap_values` draws) and returns
    ``{key: array [r]}`` (NaN: left out); it must depend on the counts only (each distinct row is
    evaluated once); ``estimates``: each key's statistic on all units (as recorded), to which its
    interval is widened (:data:`METHOD`). Returns ``{key: Interval}`` for every key of
    ``estimates`` with at least one number."""
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1) (got {level})")
    counts = resample_counts(n, resamples, seed)
    # a statistic of the counts takes one value per distinct multiset of units: with few units
    # most resamples repeat one (4 windows have 35 multisets), so each is computed once
    distinct, which = torch.unique(counts, dim=0, return_inverse=True)
    drawn: dict = {k: [] for k in estimates}
    for start in range(0, distinct.shape[0], chunk):
        got = values_of(distinct[start:start + chunk])
        for k in estimates:
            drawn[k].append(torch.as_tensor(got[k], dtype=torch.float64).reshape(-1))
    tail = (1 - level) / 2
    out = {}
    for k, parts in drawn.items():
        values = torch.cat(parts)[which]
        values = values[~torch.isnan(values)]
        if values.numel():
            low, high = torch.quantile(values, torch.tensor([tail, 1 - tail], dtype=torch.float64)).tolist()
            estimate = float("nan") if estimates[k] is None else float(estimates[k])
            out[k] = _hull(low, high, estimate, n=int(n), unit=unit, resamples=int(resamples),
                           level=float(level), seed=int(seed))
    return out


def _checked(values: Tensor, count: int) -> Tensor:
    values = torch.as_tensor(values, dtype=torch.float64)
    if values.shape != (count,):
        raise ValueError(f"the statistic must give one value per resample, shape ({count},); got "
                         f"{tuple(values.shape)}")
    return values


def median_of_means(resampled: Tensor) -> Tensor:
    """[R, n, ...] -> [R]: per resample, the mean over the units, then the median over everything
    else (e.g. heads): the book's usual "median over heads of the mean over windows" (numpy's
    median: the mean of the two middle values when their count is even)."""
    return resampled.mean(1).reshape(resampled.shape[0], -1).quantile(0.5, dim=-1)


def mean_of_means(resampled: Tensor) -> Tensor:
    """[R, n, ...] -> [R]: the mean over the units and everything else."""
    return resampled.reshape(resampled.shape[0], -1).mean(-1)


def units_to_decide(interval: Interval, value: float, threshold: float) -> float:
    """Roughly how many units would make ``interval`` (around ``value``) clear ``threshold``,
    assuming its width shrinks as ``1/sqrt(n)``: ``n * (reach / |value - threshold|)^2``, rounded
    up, where ``reach`` is how far the interval extends from ``value`` towards the threshold (a
    bootstrap interval need not be symmetric: a median of few windows often is not); ``inf`` when
    ``value`` sits on the threshold (then no count decides it), and ``interval.n`` when it already
    clears it."""
    value, threshold = float(value), float(threshold)
    gap = abs(value - threshold)
    if gap == 0:
        return math.inf
    if interval.low > threshold or interval.high < threshold:
        return float(interval.n)
    reach = interval.high - value if threshold > value else value - interval.low
    return float(math.ceil(interval.n * (reach / gap) ** 2))


def distinct_resamples(n: int) -> int:
    """How many different resamples (multisets of n draws from n units) exist: ``C(2n - 1, n)``."""
    if n < 1:
        raise ValueError(f"n must be >= 1 (got {n})")
    return math.comb(2 * n - 1, n)


def level_words(interval: Interval, *, plural: bool = True, method: bool = False) -> str:
    """What an interval is, for the prose: ``95% intervals`` (``95% percentile bootstrap
    interval`` with ``method`` and not ``plural``), or, below
    :data:`~normlimits.core.markup.RANGE_BELOW` units, ``ranges (over 3 windows, too few for 95%
    intervals)``."""
    s = "s" if plural else ""
    how = "percentile bootstrap " if method else ""
    if not interval.is_range:
        return f"{interval.level:.0%} {how}interval{s}"
    return (f"{how}range{s} (over {count_words(interval.n, interval.unit).removeprefix('range over ')}, "
            f"too few for {'' if plural else 'a '}{interval.level:.0%} interval{s})")


def resampling_sentence(n: int, unit: str = "window", level: float = LEVEL) -> str:
    """One sentence on what a percentile bootstrap over ``n`` units can say: how many distinct
    resamples there are and, below :data:`~normlimits.core.markup.RANGE_BELOW` units, that each
    interval is a range of what they give, not an interval at ``level``."""
    units = count_words(n, unit).removeprefix("range over ")
    distinct = distinct_resamples(n)
    if n < RANGE_BELOW:
        return (f"With {units} there are only {distinct:,} distinct resamples, so each interval is "
                f"the range of what they give, not a {level:.0%} interval; the count beside each "
                "interval says how many units it rests on.")
    return (f"Each interval rests on {units} ({distinct:,} distinct resamples); the count beside "
            "each interval says so.")
