"""The paper's four yardsticks on any loaded model, through the chapters' own code paths.

Each yardstick is a function of an iterable of window captures (:mod:`normlimits.model.capture`, one
forward pass per window, all windows the same length L) and an :class:`AuditConfig`; it consumes
the captures once and returns a :class:`Measured`: the ledger rows of the registered claims its
statistic grades (built by :func:`normlimits.claims.make_row`, the same rule and row format as the
book's ledger), the statistics themselves (JSON-able) and the chapter objects they came from.

- :func:`vanishing`: the largest softmax weight against L (``vanishing.sweep_captures``,
  ``head_summary``, ``non_vanishing_report``, as book/vanishing.md calls them): grades NU (median
  head's exponent, entropy ratio at the largest L, share of rows with L > e^(2 Delta/T)) and C1
  (share of weights outside Corollary 1 with the per-key and the max-key Delta).
- :func:`critical_n`: Figure 2c's critical N under the paper's protocol (token-means over query
  positions, ``POSITIONS_PER_OCTAVE`` per octave, Monte Carlo expectation; the study
  ``critical_n_search`` runs, then the reading table's numbers for the book's primary reading,
  ``reading_table.reading_rows``, as book/distances.md reads them): grades F2c and F2a on that
  reading by ``reading_table.gradings``, the one policy of the book (the claim's own row on the
  primary reading; the book tries more readings, the audit only the primary one), with the
  distances chapter's intervals over the windows (``figure2_windows.figure2_intervals`` on the
  study's per-window token-means; the last-row protocol keeps none and has no interval).
- :func:`separability`: N_s/N against N on value vectors on the unit sphere
  (``separability_sweep`` then ``separability_curves.figure3_statistics``, as
  book/separability.md calls them): grades F3, with the chapter's intervals over the windows
  (``separability_curves.separability_intervals``).
- :func:`jacobian`: Figure 4's sensitivity g(T, eps), maximum over heads
  (``jacobian.sensitivity_profile`` as the bench calls it, read by ``figure4.curves`` and
  ``figure4.statistics`` as book/gradients.md reads them): grades F4 and EPS.

On two windows or more every statistic these rows are graded on, but C1's counts, carries a 95%
percentile bootstrap interval over the windows (the chapters' own functions, so an audit row and
the chapter's row follow one policy), recorded in the row with ``n`` and the resampling unit; a
criterion whose interval straddles its threshold is undecided and the verdict resting on it
inconclusive. With one window there is nothing to resample and the rows are graded on their values.

Shapes: captures hold queries/keys/values [layers, heads, L, d]; per-head results are flattened
over (layer, head).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np
import torch

from normlimits.core import protocol
from normlimits.core.protocol import half_octave_grid, length_grid
from normlimits.claims import ONE_WINDOW, make_row, why_unresampled
from normlimits.core.plotting import median_band
from normlimits.experiments import figure2_windows as FW, figure4 as F4, reading_table as RT
from normlimits.experiments import separability_curves as SC
from normlimits.experiments.figure2 import plot_fig2c
from normlimits.experiments.figure4 import plot_figure4
from normlimits.experiments.separability_sweep import separability_sweep
from normlimits.metrics import critical_n as C, jacobian as J, vanishing as V
from normlimits.metrics.jacobian import default_rows, default_temperatures
from normlimits.metrics.separability import spaced_rows
from normlimits.metrics.token_means import position_study
from normlimits.theory.vanishing import literal_counterexample

__all__ = ["AuditConfig", "Measured", "YARDSTICKS", "CRITICAL_PROTOCOLS", "critical_reading",
           "vanishing", "critical_n", "separability",
           "jacobian", "MIN_LENGTH", "head_max_weights"]

#: the critical-N protocols: the paper's (every position, Monte Carlo; the book's primary reading)
#: and the bench's (last row, main sum)
CRITICAL_PROTOCOLS = ("paper", "last_row")

#: the shortest window the audit accepts: the critical-N grid must hold N = FIXED_N below L and the
#: length sweeps need at least two lengths
MIN_LENGTH = 16


@dataclass(frozen=True)
class AuditConfig:
    """The grids of the four yardsticks, derived from the window length ``length`` (defaults
    from :mod:`normlimits.core.protocol`, the chapters' values).

    ``shortest``: the smallest L of the length sweeps (default ``min(32, length // 4)``);
    ``separability_rows``: query rows per window for N_s/N (None: every position, the paper's
    protocol; a count: that many evenly spaced rows, as the bench). ``critical_protocol``:
    ``"paper"`` (token-means over query positions with the Monte Carlo expectation: the book's
    primary reading) or ``"last_row"`` (the last row of each window against the closed-form main
    sum: the bench's protocol, one of the readings the distances chapter tabulates; a quick look).
    ``monte_carlo_seed``, ``separability_seed``, ``direction_seed``: the seeds of the critical-N
    Monte Carlo expectation, of the separability sweep's random kinds and of Figure 4's random
    directions (the chapters' defaults; :meth:`seeds` lists them for the provenance).
    """

    length: int
    shortest: int | None = None
    alphas: tuple[float, ...] = protocol.KS_ALPHAS
    per_octave: int | None = protocol.POSITIONS_PER_OCTAVE
    mc_draws: int = protocol.MC_DRAWS
    mc_keys: int | None = protocol.MC_KEYS
    separability_n: tuple[int, ...] = protocol.SEPARABILITY_N_GRID
    separability_rows: int | None = None
    jacobian_rows: int = protocol.JACOBIAN_ROWS
    epsilons: tuple[float, ...] = protocol.EPSILONS
    temperatures_per_decade: int = protocol.TEMPERATURES_PER_DECADE
    paper_model: bool = False
    critical_protocol: str = "paper"
    monte_carlo_seed: int = 0
    separability_seed: int = 0
    direction_seed: int = 0

    def __post_init__(self) -> None:
        if self.critical_protocol not in CRITICAL_PROTOCOLS:
            raise ValueError(f"critical_protocol={self.critical_protocol!r}: choose one of "
                             f"{', '.join(CRITICAL_PROTOCOLS)}")
        if int(self.length) < MIN_LENGTH:
            raise ValueError(f"window length {self.length} is too short: the yardsticks need "
                             f"L >= {MIN_LENGTH}")
        if self.shortest is not None and not 2 <= self.shortest <= self.length // 2:
            raise ValueError(f"shortest={self.shortest}: choose 2 <= shortest <= length/2 = "
                             f"{self.length // 2}")
        if self.separability_rows is not None and self.separability_rows < 1:
            raise ValueError(f"separability_rows={self.separability_rows}: use a count >= 1 or "
                             "None for every position")

    @property
    def smallest(self) -> int:
        return self.shortest if self.shortest is not None else min(32, self.length // 4)

    @property
    def vanishing_lengths(self) -> list[int]:
        """Doubling L grid (book/vanishing.md's ``length_grid``) from :attr:`smallest` to L."""
        return length_grid(self.smallest, self.length)

    @property
    def critical_lengths(self) -> list[int]:
        """Half-octave L grid (book/distances.md's ``half_octave_grid``) from :attr:`smallest`."""
        return half_octave_grid(self.smallest, self.length)

    @property
    def separability_grid(self) -> list[int]:
        """Figure 3's N grid cut below L (N_s needs a non-selected key)."""
        return [n for n in self.separability_n if n <= self.length - 1]

    def separability_positions(self):
        return None if self.separability_rows is None else spaced_rows(self.length,
                                                                       self.separability_rows)

    def query_rows(self) -> torch.Tensor:
        return torch.as_tensor(default_rows(self.length, self.jacobian_rows), dtype=torch.long)

    def temperatures(self) -> torch.Tensor:
        return default_temperatures(per_decade=self.temperatures_per_decade)

    def seeds(self) -> dict[str, int]:
        """Every random seed the yardsticks use, by what it seeds."""
        return {"critical_n_monte_carlo": int(self.monte_carlo_seed),
                "separability_random_vectors": int(self.separability_seed),
                "jacobian_directions": int(self.direction_seed)}

    def describe(self) -> dict:
        """The grids as JSON-able values."""
        return {"length": self.length, "vanishing_lengths": self.vanishing_lengths,
                "critical_lengths": self.critical_lengths, "ks_alphas": list(self.alphas),
                "positions_per_octave": self.per_octave, "mc_draws": self.mc_draws,
                "mc_keys": self.mc_keys, "separability_grid": self.separability_grid,
                "separability_rows": ("every" if self.separability_rows is None
                                      else len(self.separability_positions())),
                "critical_protocol": self.critical_protocol,
                "jacobian_rows": self.jacobian_rows, "epsilons": list(self.epsilons),
                "temperatures": len(self.temperatures()), "paper_model": self.paper_model}


@dataclass
class Measured:
    """One yardstick's outcome: ``rows`` (ledger rows of the registered claims it grades),
    ``statistics`` (JSON-able numbers, graded or not), ``ungraded`` (empty, or why the statistics
    carry no verdict), ``result`` (the chapter objects, for figures and tests) and ``plot``
    (``plot(result)`` -> a matplotlib figure)."""

    name: str
    rows: list[dict]
    statistics: dict
    result: Any
    ungraded: str = ""
    plot: Callable[[Any], Any] | None = field(default=None, repr=False)


def _f(x) -> float | None:
    x = float(x)
    return x if np.isfinite(x) else None


#: why an audit row graded on the last-row protocol has no interval (schema 3.0's ``unresampled``;
#: one window: :data:`normlimits.claims.ONE_WINDOW`)
LAST_ROW = ("the last-row protocol keeps no per-window token-means to resample (the paper's "
            "protocol does)")


def _row(claim_id: str, values: dict, measured: str, model: str, *, unresampled: str = ONE_WINDOW,
         **kw) -> dict:
    """The audit's row of ``claim_id``: "not testable" with a reason where a value is missing; a
    row graded on measurements without intervals says why (``unresampled``: one window, unless the
    caller knows another reason)."""
    missing = [k for k, v in values.items() if v is None or (isinstance(v, float) and np.isnan(v))]
    reason = (f"{', '.join(missing)} could not be computed on this model and grid" if missing
              else None)
    return make_row(claim_id, values, measured, chapter="audit", model=model, reason=reason,
                    unresampled=why_unresampled(claim_id, kw.get("intervals"), reason, unresampled), **kw)


# ------------------------------------------------------------------------------ vanishing weights
def vanishing(captures: Iterable, config: AuditConfig, model: str) -> Measured:
    """NU and C1 from the length sweep of book/vanishing.md (T = 1, the model's own logits)."""
    lengths = config.vanishing_lengths
    stats, parity = V.sweep_captures(captures, lengths, 1.0)
    heads = V.head_summary(stats)
    heads["head"] = [f"L{l}H{h}" for l, h in zip(heads["layer"], heads["head"])]
    report = V.non_vanishing_report(heads, stats)
    n_weights = int(stats.keys.sum())
    shares = {k: float(getattr(stats, f"{k}_outside").sum()) / n_weights for k in ("literal", "paper")}
    values = {"exponent": float(heads["exponent"].median()),
              "entropy": float(heads["entropy_ratio_last"].median()),
              "regime": float(report["bite_fraction"])}
    rows = [
        _row("NU", values, f"$L$ = {lengths[0]}..{lengths[-1]}: max-weight exponents "
             f"{heads['exponent'].min():.2f} to {heads['exponent'].max():.2f} (median "
             f"{values['exponent']:.2f}); median entropy / log L at the largest L "
             f"{values['entropy']:.2f}; $L > e^{{2\\Delta/T}}$ in {values['regime']:.1%} of rows",
             model, intervals=V.nu_intervals(stats)),
        _row("C1", {"literal_outside": shares["literal"],
                    "literal_example": len(literal_counterexample().outside),
                    "maxkey_outside": shares["paper"]},
             f"{int(stats.literal_outside.sum()):,} of {n_weights:,} weights break the bound with "
             f"the per-key $\\Delta_i$ (and {len(literal_counterexample().outside)} of the exact "
             f"three-key example's 3); {int(stats.paper_outside.sum()):,} with the max-key $\\Delta$",
             model),
    ]
    statistics = {**values, "literal_outside": shares["literal"], "maxkey_outside": shares["paper"],
                  "parity": _f(parity), "lengths": lengths, "heads": len(heads),
                  "median_max_weight": [float(v) for v in np.median(head_max_weights(stats), 0)],
                  "exponent_min": float(heads["exponent"].min()),
                  "exponent_max": float(heads["exponent"].max()), "weights": n_weights}
    return Measured("vanishing", rows, statistics, {"stats": stats, "heads": heads},
                    plot=_plot_vanishing)


def head_max_weights(stats) -> np.ndarray:
    """The largest weight per head and L, geometric mean over windows: [layers * heads, G] from the
    sweep's ``max_weight`` [W, layers, heads, G]."""
    lengths = stats.lengths.numpy()
    return torch.exp(torch.log(stats.max_weight).mean(0)).reshape(-1, len(lengths)).numpy()


def _plot_vanishing(result):
    import matplotlib.pyplot as plt

    stats = result["stats"]
    lengths = stats.lengths.numpy()
    maxw = head_max_weights(stats)
    fig, ax = plt.subplots(figsize=(6.4, 4))
    for curve in maxw:
        ax.plot(lengths, curve, color="tab:blue", alpha=0.35, lw=1)
    ax.plot(lengths, np.median(maxw, 0), color="k", lw=2, label="median head")
    ax.plot(lengths, 1 / lengths, "k--", lw=1, label="1/L (uniform)")
    ax.set(xscale="log", yscale="log", xlabel="L (keys visible)", ylabel="largest weight",
           title="Vanishing attention: largest weight against L")
    ax.legend()
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------ critical N
def critical_n(captures: Iterable, config: AuditConfig, model: str) -> Measured:
    """F2c (and F2a) on the book's primary reading under the paper's protocol."""
    lengths = config.critical_lengths
    paper = config.critical_protocol == "paper"
    primary = critical_reading(config.critical_protocol)
    study = position_study(captures, lengths, C.critical_grid(config.length),
                           per_octave=config.per_octave if paper else None, paper=paper,
                           samples=config.mc_draws, mc_keys=config.mc_keys,
                           expectations=("main", "rms") if paper else ("main",),
                           seed=config.monte_carlo_seed,
                           window_forms=(primary.form,) if paper else ())
    (row,) = RT.reading_rows({"values": study}, [primary], alphas=config.alphas)
    # the distances chapter's intervals over the windows (none with one window, nor for the
    # last-row protocol, whose study keeps no per-window token-means)
    intervals = (FW.figure2_intervals(study, None, {primary: ("F2c", "F2a")},
                                      paper_model=config.paper_model).readings or None
                 if paper else None)
    alpha = protocol.KS_ALPHA_TEXT
    f2c = RT.claim_values(row, "F2c", config.paper_model)
    f2a = RT.claim_values(row, "F2a", config.paper_model)
    only = (f"{POLICY}; only the primary reading was tried here (the distances chapter tries "
            "more, and shows a reading that reproduces as a labelled variant)" if paper
            else "the last row against the main sum (the bench's protocol), not the paper's "
                 "every-position protocol: a quick look, not the book's primary reading")
    crit = row.search.critical[alpha]
    rows = [_row(cid, g.values, g.measured, model, reading=g.reading, readings=g.readings,
                 intervals=g.intervals, unresampled=ONE_WINDOW if paper else LAST_ROW)
            for cid in ("F2c", "F2a")
            for g in RT.gradings([row], cid, config.paper_model, _critical_words(lengths), only,
                                 intervals=intervals)]
    statistics = {**{k: _f(v) for k, v in {**f2c, **f2a}.items()}, "alpha": alpha,
                  "lengths": lengths, "critical_n": crit,
                  "critical_fraction": row.search.fraction(alpha),
                  "critical_n_alpha_0.05": row.search.critical[protocol.KS_ALPHA_ALGORITHM]
                  if protocol.KS_ALPHA_ALGORITHM in row.search.critical else None,
                  "windows": row.windows, "reading": primary.label}
    return Measured("critical_n", rows, statistics, {"study": study, "row": row},
                    plot=_plot_critical_n)


#: what the audit's F2a/F2c rows say of the reading policy (:mod:`normlimits.experiments.reading_table`)
POLICY = ("graded on the book's primary reading, as the distances and architectures chapters "
          "grade the claim's own row")


def _critical_words(lengths):
    """The audit's phrase for one reading's F2c/F2a numbers (``reading_table.gradings``' words)."""
    def words(row, claim_id, paper_model):
        v = RT.claim_values(row, claim_id, paper_model)
        if claim_id == "F2c":
            return (f"critical N/L {v['fraction']:.3f} at L = {lengths[-1]} (1: none below L); "
                    f"spread {v['spread']:.2f} over L = {lengths[0]}..{lengths[-1]}")
        return (f"N = {protocol.FIXED_N}: median true/expected {v['close']:.3f} at L = "
                f"{lengths[-1]}; exponents in L {v['exp_true']:.2f} (true), "
                f"{v['exp_expected']:.2f} (expected)")
    return words


def critical_reading(critical_protocol: str = "paper"):
    """The reading of the distances chapter's table a critical-N protocol grades on: the book's
    primary reading for ``"paper"``, the last row against the main sum for ``"last_row"``."""
    tried = RT.readings_tried()
    if critical_protocol == "paper":
        return tried[0]
    return next(r for r in tried if r.form == tried[0].form and r.vectors == tried[0].vectors
                and r.aggregate == "last_row" and r.expectation == "main")


def _plot_critical_n(result):
    return plot_fig2c({"paper protocol": result["row"].search}, alpha=protocol.KS_ALPHA_TEXT,
                      fraction=protocol.CRITICAL_FRACTION)


# ------------------------------------------------------------------------------ separability
def separability(captures: Iterable, config: AuditConfig, model: str) -> Measured:
    """F3 from N_s/N on value vectors on the unit sphere (Figure 3's workload)."""
    grid = config.separability_grid
    rows_at = config.separability_positions()
    sweep = separability_sweep(captures, grid, kinds=("values",), rows=rows_at, sphere_radius=1.0,
                               bounds=True, seed=config.separability_seed)
    per_head = sweep.fraction["values"].reshape(-1, len(grid)).numpy()
    upper = sweep.upper_exponential["values"].reshape(-1, len(grid)).numpy()
    st = SC.figure3_statistics(sweep.n_grid, per_head, upper, protocol.SEPARABILITY_FLAT_SLOPE)
    keys = ("slope_after", "knee", "level", "tracks", "flattening")
    values = {**{k: _f(st[k]) for k in keys}, "paper_model": int(config.paper_model)}
    reading = ("every query position (paper, Algorithm 4)" if rows_at is None
               else f"{len(rows_at)} evenly spaced query rows per window")
    # the separability chapter's intervals over the windows (none with one window); the knee
    # only places S80's statistic, which the audit does not grade, inside a short window's grid
    intervals = SC.separability_intervals(sweep, knee=min(protocol.SEPARABILITY_KNEE, grid[-1]),
                                          tolerance=protocol.SEPARABILITY_FLAT_SLOPE,
                                          band=protocol.SEPARABILITY_MONITOR_BAND,
                                          only=[f"F3.{k}" for k in SC.F3_KEYS])
    rows = [_row("F3", values, f"median over {per_head.shape[0]} heads ({reading}): slope "
                 f"{st['slope_before']:.3f} per doubling up to $N$ = {st['knee']}, "
                 f"{st['slope_after']:.3f} after; plateau {st['level']:.3f}; exponential bound vs "
                 f"largest head {st['tracks']:.3f}", model, reading=reading,
                 intervals=intervals.get("F3"))]
    statistics = {**values, "slope_before": _f(st["slope_before"]), "n_grid": grid,
                  "median": [float(v) for v in st["median"]],
                  "largest": [float(v) for v in st["largest"]], "reading": reading}
    return Measured("separability", rows, statistics, {"sweep": sweep, "figure3": st},
                    plot=_plot_separability)


def _plot_separability(result):
    import matplotlib.pyplot as plt

    sweep, st = result["sweep"], result["figure3"]
    grid = np.asarray(sweep.n_grid)
    per_head = sweep.fraction["values"].reshape(-1, len(grid)).numpy()
    fig, ax = plt.subplots(figsize=(6.4, 4))
    median_band(ax, grid, per_head, color="tab:blue", label="median head",
                band_label="heads, 10th-90th percentile", alpha=0.25)
    ax.plot(grid, st["largest"], "k:", label="largest head")
    ax.plot(grid, st["bound"], "r--", lw=1, label="exponential upper bound (median)")
    ax.set(xscale="log", xlabel="N (top-N tokens)", ylabel="$N_s/N$", ylim=(0, 1.05),
           title="Geometric separability")
    ax.legend()
    fig.tight_layout()
    return fig


# ------------------------------------------------------------------------------ Jacobian
def jacobian(captures: Iterable, config: AuditConfig, model: str) -> Measured:
    """F4 and EPS from Figure 4's sensitivity g(T, eps) (max over heads), as book/gradients.md
    reads them (``figure4.curves``, ``figure4.statistics``)."""
    rows_at = config.query_rows()
    profile = J.sensitivity_profile((cap.logits(rows_at) for cap in captures),
                                    config.temperatures(), config.epsilons,
                                    seed=config.direction_seed)
    curves = F4.curves(profile)
    st = F4.statistics(curves)
    values = {**F4.claim_values(curves)["F4"], "paper_model": int(config.paper_model)}
    intervals = F4.claim_intervals(profile)
    rows = [
        _row("F4", values, f"slopes $T \\le$ {protocol.SHARP_T:g}: "
             f"{', '.join(f'{s:.2f}' for s in st['low_slopes'])}; spread at $T$ = {protocol.HIGH_T:g} "
             f"{st['spread_t1']:.2f}; fall $T$ = {protocol.HIGH_T:g} → 100 {st['drop_min']:.0f}-"
             f"{st['drop_max']:.0f}x ({int(profile.rows)} rows)", model, intervals=intervals.get("F4")),
        _row("EPS", {"ordered": st["ordered"], "extremes": st["ordered_extremes"]},
             f"curves ordered by $\\varepsilon$ (every pair) at {st['ordered']:.0%} of the grid "
             f"temperatures below {protocol.HIGH_T:g}, smallest against largest at "
             f"{st['ordered_extremes']:.0%}", model, intervals=intervals.get("EPS")),
    ]
    statistics = {"epsilons": [float(e) for e in profile.epsilons],
                  "slope_low_T": [float(v) for v in st["low_slopes"]],
                  "slope_high_T": [float(v) for v in st["high_slopes"]],
                  "low_T_up_to": protocol.SHARP_T, "spread_t1": _f(st["spread_t1"]),
                  "drop_min": _f(st["drop_min"]), "ordered": _f(st["ordered"]),
                  "ordered_extremes": _f(st["ordered_extremes"]),
                  "ordered_pairs": [_f(v) for v in st["ordered_pairs"]],
                  "temperatures": [float(t) for t in curves.t], "g_max": curves.g.tolist(),
                  "rows": int(profile.rows)}
    return Measured("jacobian", rows, statistics, {"profile": profile, "curves": curves},
                    plot=_plot_jacobian)


def _plot_jacobian(result):
    return plot_figure4(result["curves"])


#: the yardsticks in the paper's order: name -> function(captures, config, model) -> Measured
YARDSTICKS: dict[str, Callable[[Iterable, AuditConfig, str], Measured]] = {
    "vanishing": vanishing, "critical_n": critical_n, "separability": separability,
    "jacobian": jacobian,
}
