"""Controls for the KS test of Figure 2c: its power at the paper's sample size, and samples that
are independent under grouped-query attention.

The critical-N search (:mod:`normlimits.metrics.critical_n`) compares two samples of per-head
token-means, one value per (layer, head). Two things about those samples differ from the paper's:

- **their size.** The paper's GPT-2 124M has 144 heads (:data:`~normlimits.core.protocol.PAPER_HEADS`);
  another model has more or fewer. A two-sample KS test with more values per sample rejects smaller
  differences (more power), so its critical N tends to come later. :func:`subsampled_critical_n`
  repeats the search on random subsamples of the paper's size (without replacement, a fixed seed),
  for the critical N the paper's sample size would give on this model.
- **their independence.** With grouped-query attention several query heads share one key/value
  head (SmolLM2-135M: 3 query heads per value set, 270 heads on 90 value sets), so their values
  are not independent samples. :func:`per_value_set` reduces the heads to one sample per value set
  (the mean over its query heads, or its first query head); :func:`value_sets` says which set each
  head reads (the layer's ``repeat_interleave`` order: query head h of a layer reads key/value head
  ``h // (heads // kv_heads)``).

:func:`ks_controls` runs all of them on a study's per-head values at every length. Nothing here
re-runs a forward pass: the inputs are the token-means the chapter already has.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from normlimits.core.protocol import KS_ALPHA_TEXT, PAPER_HEADS
from normlimits.metrics.critical_n import ks_critical_n, resampled_critical_n

__all__ = ["KS_SUBSAMPLES", "KS_SUBSAMPLE_SEED", "value_sets", "per_value_set", "head_subsamples",
           "subsampled_critical_n", "KSControls", "ks_controls", "power_words"]

#: book: random head subsamples of the paper's size per length (enough for a median and a spread;
#: each costs one vectorised KS search on values the chapter already has)
KS_SUBSAMPLES = 20
#: book: the subsamples' generator seed (fixed: a build's subsamples are reproducible)
KS_SUBSAMPLE_SEED = 47


def value_sets(layers: int, heads: int, kv_heads: int) -> np.ndarray:
    """Which value set each head reads, int [layers * heads] in the book's head order (layer-major,
    ``layer * heads + head``): ``layer * kv_heads + head // (heads // kv_heads)``, the order of the
    layer's ``repeat_kv`` (each key/value head repeated for its group of query heads, consecutively).
    ``kv_heads == heads``: every head its own set."""
    if min(layers, heads, kv_heads) < 1:
        raise ValueError(f"layers, heads and kv_heads must be >= 1 (got {layers}, {heads}, {kv_heads})")
    if heads % kv_heads:
        raise ValueError(f"{heads} query heads cannot share {kv_heads} key/value heads evenly; "
                         "check the model's num_key_value_heads")
    group = heads // kv_heads
    return (np.arange(layers)[:, None] * kv_heads + np.arange(heads)[None, :] // group).reshape(-1)


def per_value_set(values, sets, how: str = "mean") -> np.ndarray:
    """One sample per value set: ``values`` [heads, n] reduced over the heads of each set
    (``sets`` [heads], ids ``0 .. S - 1``, each used) to [S, n], the mean of the set's heads
    (``how="mean"``) or its first head in the head order (``how="first"``)."""
    x = np.asarray(values, dtype=np.float64)
    ids = np.asarray(sets).reshape(-1)
    if x.ndim != 2 or x.shape[0] != ids.size:
        raise ValueError(f"expected values [heads, n] with one set id per head; got {x.shape} "
                         f"and {ids.size} ids")
    count = np.bincount(ids)
    if ids.min() < 0 or (count == 0).any():
        raise ValueError("set ids must run over 0 .. S - 1, each used by at least one head")
    if how == "mean":
        total = np.zeros((count.size, x.shape[1]))
        np.add.at(total, ids, x)
        return total / count[:, None]
    if how == "first":
        _, first = np.unique(ids, return_index=True)
        return x[first]
    raise ValueError(f"how={how!r}: choose 'mean' or 'first'")


def head_subsamples(heads: int, size: int, count: int = KS_SUBSAMPLES,
                    seed: int = KS_SUBSAMPLE_SEED) -> np.ndarray:
    """``count`` random subsets of ``size`` of ``heads`` heads, each without replacement and in
    head order, int [count, size], from a generator seeded with ``seed`` (one random key per head
    and subsample, the ``size`` smallest kept: all subsamples at once)."""
    if not 1 <= size <= heads:
        raise ValueError(f"a subsample of {size} of {heads} heads: size must lie in 1..{heads}")
    if count < 1:
        raise ValueError(f"count must be >= 1 (got {count})")
    keys = np.random.default_rng(seed).random((count, heads))
    return np.sort(np.argsort(keys, axis=1)[:, :size], axis=1)


def subsampled_critical_n(true_by_head, expected_by_head, n_grid, alpha: float, index) -> np.ndarray:
    """The KS critical N on each head subsample: ``true_by_head``, ``expected_by_head`` [heads, n]
    on the grid ``n_grid`` [n], ``index`` [r, size] (:func:`head_subsamples`); float [r], ``inf``
    where every N of the grid is rejected ("none below L": the critical N, if any, is at least L).
    One vectorised search over all subsamples (:func:`~normlimits.metrics.critical_n.resampled_critical_n`)."""
    a, b = np.asarray(true_by_head, dtype=np.float64), np.asarray(expected_by_head, dtype=np.float64)
    idx = np.asarray(index)
    if idx.ndim != 2:
        raise ValueError(f"index must be [subsamples, size]; got shape {idx.shape}")
    found = resampled_critical_n(a[idx], b[idx], n_grid, alpha)
    return np.where(np.isnan(found), np.inf, found)


def _one(true, expected, grid, alpha) -> float:
    """The critical N of one search (``inf``: none below L)."""
    c = ks_critical_n(true, expected, grid, (alpha,)).critical[float(alpha)]
    return np.inf if c is None else float(c)


@dataclass(frozen=True)
class KSControls:
    """The critical N of Figure 2c under the controls, per length (float [m], ``inf``: none below
    L; divide by ``lengths`` for N/L).

    ``all_heads``: every head (the chapter's search); ``subsampled`` [r, m]: each of ``r`` random
    subsamples of ``size`` heads (None when the model has ``size`` heads or fewer);
    ``set_mean``, ``set_first``: one sample per value set (mean of its query heads; its first query
    head), None without grouped-query attention. ``heads``, ``sets``, ``group`` (query heads per
    value set), ``alpha``, ``seed``.
    """

    lengths: list
    all_heads: np.ndarray
    subsampled: np.ndarray | None
    set_mean: np.ndarray | None
    set_first: np.ndarray | None
    heads: int
    size: int
    sets: int
    group: int
    alpha: float
    seed: int

    def fractions(self, critical) -> np.ndarray:
        """Critical N / L per length (``inf`` stays ``inf``)."""
        return np.asarray(critical, dtype=np.float64) / np.asarray(self.lengths, dtype=np.float64)

    def subsample_summary(self) -> dict | None:
        """Critical N / L over the subsamples, per length: ``median``, ``low``, ``high`` (smallest
        and largest subsample), each float [m]; None without subsamples."""
        if self.subsampled is None:
            return None
        f = self.subsampled / np.asarray(self.lengths, dtype=np.float64)
        return {"median": np.median(f, axis=0), "low": f.min(axis=0), "high": f.max(axis=0)}

    def frame(self):
        """A table of critical N / L per length (rows) and control (columns); "none below L"
        where every N below L is rejected."""
        import pandas as pd

        def text(values):
            return ["none below L" if not np.isfinite(v) else round(float(v), 4) for v in values]

        data = {f"all {self.heads} heads": text(self.fractions(self.all_heads))}
        summary = self.subsample_summary()
        if summary is not None:
            r = self.subsampled.shape[0]
            data[f"{self.size} heads: median of {r}"] = text(summary["median"])
            data[f"{self.size} heads: smallest"] = text(summary["low"])
            data[f"{self.size} heads: largest"] = text(summary["high"])
        if self.set_mean is not None:
            data[f"{self.sets} value sets (mean)"] = text(self.fractions(self.set_mean))
            data[f"{self.sets} value sets (first head)"] = text(self.fractions(self.set_first))
        return pd.DataFrame(data, index=pd.Index(self.lengths, name="L"))


def ks_controls(study, *, layers: int, heads: int, kv_heads: int, size: int = PAPER_HEADS,
                subsamples: int = KS_SUBSAMPLES, seed: int = KS_SUBSAMPLE_SEED,
                alpha: float = KS_ALPHA_TEXT, form: str = "scaled", expectation: str = "mc",
                aggregate: str = "paper") -> KSControls:
    """The critical-N search of :func:`~normlimits.metrics.critical_n.critical_n` (same reading,
    expectation, aggregation and level), at every length of a
    :class:`~normlimits.metrics.token_means.PositionStudy`, on every head, on ``subsamples``
    random subsets of ``size`` heads (when the model has more), and on one sample per value set
    (when ``kv_heads < heads``). ``layers * heads`` must be the study's head count."""
    sets = value_sets(layers, heads, kv_heads)
    total = layers * heads
    index = head_subsamples(total, size, subsamples, seed) if total > size else None
    grouped = kv_heads < heads
    rows = {"all": [], "sub": [], "mean": [], "first": []}
    for L in study.lengths:
        keep = (study.n_grid < L).numpy()
        if not keep.any():
            raise ValueError(f"no N of the study's grid lies below L = {L}; use a grid with N < L")
        grid = study.n_grid.numpy()[keep]
        t = study.per_head(form, "true", L, aggregate).numpy()[:, keep]
        e = study.per_head(form, expectation, L, aggregate).numpy()[:, keep]
        if t.shape[0] != total:
            raise ValueError(f"the study has {t.shape[0]} heads, not layers x heads = {total}")
        rows["all"].append(_one(t, e, grid, alpha))
        if index is not None:
            rows["sub"].append(subsampled_critical_n(t, e, grid, alpha, index))
        if grouped:
            for how in ("mean", "first"):
                rows[how].append(_one(per_value_set(t, sets, how), per_value_set(e, sets, how), grid, alpha))
    return KSControls(lengths=list(study.lengths), all_heads=np.array(rows["all"]),
                      subsampled=np.stack(rows["sub"], axis=1) if index is not None else None,
                      set_mean=np.array(rows["mean"]) if grouped else None,
                      set_first=np.array(rows["first"]) if grouped else None,
                      heads=total, size=size, sets=int(sets.max()) + 1, group=heads // kv_heads,
                      alpha=float(alpha), seed=int(seed))


def _fraction_words(value: float) -> str:
    return "none below L" if not np.isfinite(value) else f"{value:.3f}"


def power_words(controls: KSControls, paper_heads: int = PAPER_HEADS) -> str:
    """The controls at the longest length in words (plain text, for glue): how the sample size
    compares with the paper's and what the subsamples give, then whether the heads share value
    sets and what one sample per set gives."""
    at = -1
    L = controls.lengths[at]
    own = _fraction_words(controls.fractions(controls.all_heads)[at])
    n = controls.heads
    if n > paper_heads:
        summary = controls.subsample_summary()
        size_words = (f"With {n} heads per sample the test has more power than on the paper's "
                      f"{paper_heads}, not less (a two-sample KS test with more values rejects "
                      f"smaller differences, so its critical N tends to come later). On "
                      f"{controls.subsampled.shape[0]} random subsamples of {controls.size} of the "
                      f"{n} heads (seed {controls.seed}) the critical N/L at L = {L} has median "
                      f"{_fraction_words(summary['median'][at])} (smallest "
                      f"{_fraction_words(summary['low'][at])}, largest "
                      f"{_fraction_words(summary['high'][at])}), against {own} with all {n} heads.")
    elif n == paper_heads:
        size_words = (f"With {n} heads per sample the test has the paper's sample size; the critical "
                      f"N/L at L = {L} is {own}.")
    else:
        size_words = (f"With {n} heads per sample, fewer than the paper's {paper_heads}, the test has "
                      f"less power than the paper's, so no subsample is drawn; the critical N/L at "
                      f"L = {L} is {own}.")
    if controls.set_mean is None:
        return size_words + (" Every head has its own value set (no grouped-query attention), so "
                             "the heads need no grouping.")
    mean = _fraction_words(controls.fractions(controls.set_mean)[at])
    first = _fraction_words(controls.fractions(controls.set_first)[at])
    return size_words + (f" The {n} heads are not independent samples: grouped-query attention makes "
                         f"{controls.group} query heads share each of {controls.sets} value sets. With "
                         f"one sample per value set the critical N/L at L = {L} is {mean} (the mean "
                         f"over its query heads) or {first} (its first query head).")
