"""The critical N of the paper's Figure 2c: where a KS test stops telling d~ from its expectation.

For each context length L and each N of a grid, the per-head values of the true distance and of
its random-subset expectation form two samples (one value per (layer, head)); the critical N is
the smallest N of the grid at which the two-sample Kolmogorov-Smirnov test fails to reject at
level alpha (``p > alpha``, the paper's "KS(...) is true"), and "none below L" when every N of the
grid is rejected. The grid stops below L: at ``N = L`` nothing is left outside the top-N set,
both samples are identically 0, the test returns ``p = 1`` and a critical N would always be
"found" (:func:`ks_critical_n` also refuses identical samples, for the same reason).

The per-head values come from a :class:`~normlimits.metrics.token_means.PositionStudy`: the paper's protocol
(the token-mean over every query position of the length-L window, ``aggregate="paper"``) or the
last row only (``aggregate="last_row"``, the variant), for any reading of Eq. (7) and with the
Monte Carlo expectation (``mc``) or its closed-form bounds (``main``, ``rms``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Sequence

import numpy as np
import torch

from normlimits.core.protocol import KS_ALPHAS, TOP_N_GRID
from normlimits.core.fits import loglog_fit, slope_through_origin
from normlimits.core.validation import finite_entries
from normlimits.metrics.token_means import PositionStudy, position_study

__all__ = ["critical_grid", "KSResult", "ks_statistics", "ks_critical_n", "resampled_critical_n", "PowerFit", "fit_critical_n",
           "CriticalN", "critical_n", "critical_n_search", "critical_frame"]


def critical_grid(length: int, dense_up_to: int = 16) -> list[int]:
    """The N grid of the critical-N search at context length ``length``: every N below it from
    ``1, ..., dense_up_to``, then ``m * 2^k`` for ``m = 4, 5, 6, 7`` (steps of 14-25 %), and the
    paper's Figure 2b values; all strictly below ``length`` (``N = L`` cannot be tested).

    The ladder does not depend on ``length``, so the grids of shorter lengths are subsets of the
    longest one's and one pass serves every length.
    """
    if length < 2:
        raise ValueError(f"the critical-N search needs L >= 2 (got {length}): N must lie below L")
    values = set(range(1, min(dense_up_to, length - 1) + 1)) | set(TOP_N_GRID)
    k = 2
    while 4 * 2 ** k < length:
        values |= {m * 2 ** k for m in (4, 5, 6, 7)}
        k += 1
    return sorted(v for v in values if 1 <= v < length)


@dataclass(frozen=True)
class KSResult:
    """KS comparison of two per-head samples at every N of a grid.

    ``n_grid``, ``statistic``, ``pvalue`` [n] (scipy's two-sided ``ks_2samp``); ``identical`` [n]
    marks N at which the two samples are equal head by head (no test: such an N is never
    critical; p is reported as NaN); ``critical`` maps each level alpha to the smallest N whose
    test fails to reject (p > alpha), or None: "none below L" on this grid.
    """

    n_grid: np.ndarray
    statistic: np.ndarray
    pvalue: np.ndarray
    identical: np.ndarray
    critical: dict


#: scipy's two-sided two-sample KS p-value by (size of a, size of b, statistic * both sizes): it
#: depends on nothing else, so one call serves every test (and every bootstrap resample) with it
_PVALUES: dict = {}


def ks_statistics(a, b) -> np.ndarray:
    """The two-sample KS statistic ``max_v |F_a(v) - F_b(v)|`` of every column of ``a`` [h_a, n]
    and ``b`` [h_b, n] at once (right-continuous empirical CDFs; the maximum over the pooled
    values, each counted after all its ties, so the order within ties does not matter), [n]: the
    statistic ``scipy.stats.ks_2samp`` computes, column by column, from one sort of the pooled
    columns (numpy's, several times faster here than torch's)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    na, nb = a.shape[0], b.shape[0]
    pooled = np.concatenate([a, b], axis=0).T.copy()                 # [n, h_a + h_b]
    order = np.argsort(pooled, axis=1)
    values = np.take_along_axis(pooled, order, axis=1)
    gap = np.abs(np.cumsum(np.where(order < na, 1.0 / na, -1.0 / nb), axis=1))
    gap[:, :-1][values[:, 1:] == values[:, :-1]] = 0.0                 # inside a run of ties
    return gap.max(axis=1, initial=0.0)


def _pvalue(a_column, b_column, statistic: float) -> float:
    """scipy's two-sided KS p-value of two samples whose statistic is ``statistic`` (cached by
    the sizes and the statistic, on which alone it depends: :data:`_PVALUES`)."""
    from scipy.stats import ks_2samp

    na, nb = len(a_column), len(b_column)
    key = (na, nb, round(float(statistic) * na * nb))
    if key not in _PVALUES:
        _PVALUES[key] = float(ks_2samp(a_column, b_column).pvalue)
    return _PVALUES[key]


def _critical(grid: np.ndarray, pvalue: np.ndarray, identical: np.ndarray, alphas) -> dict:
    """alpha -> the smallest N of ``grid`` whose test fails to reject (p > alpha), or None."""
    out = {}
    for alpha in alphas:
        ok = np.nonzero((pvalue > alpha) & ~identical)[0]
        out[float(alpha)] = int(grid[ok[0]]) if ok.size else None
    return out


def _checked_samples(true_by_head, expected_by_head, n_grid, alphas):
    a = np.asarray(torch.as_tensor(true_by_head, dtype=torch.float64).cpu())
    b = np.asarray(torch.as_tensor(expected_by_head, dtype=torch.float64).cpu())
    grid = np.asarray(list(n_grid), dtype=np.int64).reshape(-1)
    if a.shape != b.shape or a.ndim != 2 or a.shape[1] != grid.size or grid.size == 0:
        raise ValueError(f"expected two [heads, {grid.size}] arrays for the N grid; got "
                         f"{a.shape} and {b.shape}")
    for alpha in alphas:
        if not 0 < alpha < 1:
            raise ValueError(f"significance levels must lie in (0, 1); got {alpha}")
    finite_entries(a, argument="true_by_head", kind="samples")
    finite_entries(b, argument="expected_by_head", kind="samples")
    return a, b, grid


def ks_critical_n(true_by_head, expected_by_head, n_grid: Sequence[int],
                  alphas: Sequence[float] = KS_ALPHAS) -> KSResult:
    """Smallest N at which ``ks_2samp(true[:, N], expected[:, N])`` fails to reject.

    ``true_by_head``, ``expected_by_head``: ``[heads, n]`` (per-head values; 144 heads for GPT-2
    124M). The p-value depends on the samples only through the statistic and the sample sizes,
    so scipy is called once per distinct statistic (:data:`_PVALUES`).
    """
    a, b, grid = _checked_samples(true_by_head, expected_by_head, n_grid, alphas)
    stat = ks_statistics(a, b)
    identical = np.all(a == b, axis=0)
    pvalue = np.full(grid.size, np.nan)
    for j in np.nonzero(~identical)[0]:
        pvalue[j] = _pvalue(a[:, j], b[:, j], stat[j])
    return KSResult(n_grid=grid, statistic=stat, pvalue=pvalue, identical=identical,
                    critical=_critical(grid, pvalue, identical, alphas))


def resampled_critical_n(true, expected, n_grid: Sequence[int], alpha: float) -> np.ndarray:
    """:func:`ks_critical_n` for ``r`` resamples at once: ``true``, ``expected`` [r, heads, n]
    (each resample's per-head values on the grid ``n_grid`` [n]); returns float [r], the critical N
    of each resample at level ``alpha`` (NaN where no N of the grid fails to reject). Every test's
    statistic comes from one sort (:func:`ks_statistics`) and scipy is called once per distinct
    statistic (:data:`_PVALUES`), so the result equals :func:`ks_critical_n` resample by resample."""
    a, b = np.asarray(true, dtype=np.float64), np.asarray(expected, dtype=np.float64)
    grid = np.asarray(list(n_grid), dtype=np.int64).reshape(-1)
    if a.shape != b.shape or a.ndim != 3 or a.shape[2] != grid.size:
        raise ValueError(f"expected two [resamples, heads, {grid.size}] arrays; got {a.shape} and {b.shape}")
    if not 0 < alpha < 1:
        raise ValueError(f"significance levels must lie in (0, 1); got {alpha}")
    r, heads = a.shape[:2]
    stat = ks_statistics(a.transpose(1, 0, 2).reshape(heads, -1),
                         b.transpose(1, 0, 2).reshape(heads, -1)).reshape(r, -1)      # [r, n]
    identical = (a == b).all(1)
    pvalue = np.full(stat.shape, np.nan)
    keys = np.round(stat * heads * heads)
    for key in np.unique(keys[~identical]):
        where = (keys == key) & ~identical
        i, j = np.argwhere(where)[0]
        pvalue[where] = _pvalue(a[i, :, j], b[i, :, j], stat[i, j])
    passed = (pvalue > alpha) & ~identical
    return np.where(passed.any(1), grid[passed.argmax(1)], np.nan).astype(np.float64)


@dataclass(frozen=True)
class PowerFit:
    """Critical N against L: ``slope`` of ``N = slope * L`` (least squares through 0) and the
    power law ``N = prefactor * L ** exponent`` (log-log least squares, :func:`normlimits.core.fits.
    loglog_fit`); ``points`` lengths entered, ``censored`` lengths had "none below L" and were
    left out (their critical N, if any, is at least L: the fit is then an underestimate)."""

    slope: float
    prefactor: float
    exponent: float
    points: int
    censored: int


def fit_critical_n(lengths: Sequence[int], critical: Sequence[int | None]) -> PowerFit | None:
    """Fit critical N against L over the lengths where one was found below L (None: censored,
    left out). None when fewer than two lengths qualify."""
    if len(lengths) != len(critical):
        raise ValueError(f"{len(lengths)} lengths but {len(critical)} critical values")
    pairs = [(float(L), float(n)) for L, n in zip(lengths, critical) if n is not None]
    censored = len(lengths) - len(pairs)
    if len({L for L, _ in pairs}) < 2:
        return None
    Ls, Ns = np.array(pairs).T
    power = loglog_fit(Ls, Ns)
    return PowerFit(slope=slope_through_origin(Ls, Ns), prefactor=float(power.prefactor),
                    exponent=float(power.exponent), points=len(pairs), censored=censored)


@dataclass(frozen=True)
class CriticalN:
    """Figure 2c for one reading, expectation and aggregation.

    ``lengths`` [m]; ``tests[i]`` the :class:`KSResult` at ``lengths[i]`` (its grid: the study's
    N below L); ``critical[alpha]`` one entry per length (None: none below L);
    ``fits[alpha]`` the :class:`PowerFit` over the lengths with one (or None).
    """

    lengths: list
    tests: list
    critical: dict
    fits: dict
    form: str
    expectation: str
    aggregate: str

    def found(self, alpha: float) -> int:
        """How many lengths have a critical N below L at level ``alpha``."""
        return sum(c is not None for c in self.critical[float(alpha)])

    def fraction(self, alpha: float) -> list:
        """Critical N / L per length (None where none below L)."""
        return [None if c is None else c / L for c, L in zip(self.critical[float(alpha)], self.lengths)]


def critical_n(study: PositionStudy, *, form: str = "scaled", expectation: str = "mc",
               aggregate: str = "paper", alphas: Sequence[float] = KS_ALPHAS) -> CriticalN:
    """The KS search on a study's per-head values, at every length, for every N below L."""
    samples = []
    for L in study.lengths:
        keep = torch.nonzero(study.n_grid < L).flatten()   # indices: a mask indexes slowly
        if keep.numel() == 0:
            raise ValueError(f"no N of the study's grid lies below L = {L}; use a grid with N < L")
        samples.append((study.per_head(form, "true", L, aggregate).index_select(1, keep).numpy(),
                        study.per_head(form, expectation, L, aggregate).index_select(1, keep).numpy(),
                        study.n_grid[keep].tolist()))
    tests = [ks_critical_n(t, e, g, alphas) for t, e, g in samples]
    crit = {float(a): [t.critical[float(a)] for t in tests] for a in alphas}
    return CriticalN(lengths=list(study.lengths), tests=tests, critical=crit,
                     fits={a: fit_critical_n(study.lengths, c) for a, c in crit.items()},
                     form=form, expectation=expectation, aggregate=aggregate)


def critical_n_search(captures: Iterable, lengths: Sequence[int], *, protocol: str = "paper",
                      n_grid: Sequence[int] | None = None,
                      alphas: Sequence[float] = KS_ALPHAS, expectation: str | None = None,
                      per_octave: int | None = None, samples: int = 2, mc_keys: int | None = None,
                      seed: int = 0) -> CriticalN:
    """Figure 2c from captured windows in one call: a :func:`~normlimits.metrics.token_means.position_study`
    of the ``scaled`` reading on value vectors, then :func:`critical_n`.

    ``protocol``: ``paper`` (token-means over every query position, or ``per_octave`` per octave; Monte
    Carlo expectation with ``samples`` draws per row unless ``expectation`` says otherwise) or
    ``last_row`` (the row ``L - 1`` of each window only, the closed-form main sum unless
    ``expectation`` says otherwise). ``n_grid`` defaults to :func:`critical_grid` of the longest
    length (each length uses its values below L).
    """
    if protocol not in ("paper", "last_row"):
        raise ValueError(f"protocol={protocol!r}: choose 'paper' or 'last_row'")
    lens = sorted({int(L) for L in lengths})
    if not lens:
        raise ValueError("lengths is empty")
    grid = list(n_grid) if n_grid is not None else critical_grid(lens[-1])
    paper = protocol == "paper"
    expectation = expectation or ("mc" if paper else "main")
    study = position_study(captures, lens, grid, per_octave=per_octave, paper=paper,
                           samples=samples if expectation == "mc" else 0, mc_keys=mc_keys,
                           seed=seed)
    return critical_n(study, expectation=expectation, aggregate=protocol, alphas=alphas)


def critical_frame(searches: dict, alphas: Sequence[float] = KS_ALPHAS):
    """A table of critical N per length: one column per (search label, alpha), "none below L"
    where the test rejects at every N below L. ``searches``: ``{label: CriticalN}`` over the same
    lengths."""
    import pandas as pd

    first = next(iter(searches.values()))
    data = {}
    for label, search in searches.items():
        if search.lengths != first.lengths:
            raise ValueError(f"search {label!r} has lengths {search.lengths}, not {first.lengths}")
        for a in alphas:
            data[f"{label}, α={a:g}"] = ["none below L" if c is None else c
                                        for c in search.critical[float(a)]]
    return pd.DataFrame(data, index=pd.Index(first.lengths, name="L"))
