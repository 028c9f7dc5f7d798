"""The paper's five experiments at GPT-2 124M's size, timed against its Table 1 (``make bench``).

The paper's Appendix B (Table 1) reports, on a 10-core Apple M1 Pro CPU: distance against L
24 min, distance against N 37 min, the critical-N search 17 h 4 min, separability 7 min and
gradient sensitivity 1 min. This module runs the same five workloads with the book's own code
paths (the functions the chapters call) and times them::

    python -m normlimits.experiments.bench                      # gpt2-random, 8 windows of 1024 tokens
    python -m normlimits.experiments.bench --windows 2 --model standin --length 512

What one run does
-----------------
One forward pass per corpus window (:func:`normlimits.model.capture.capture_window`) is shared by every
workload and every L: each workload is a function that consumes an iterable of window captures
(``sweep_length``, ``sweep_top_n``, ``critical_n_search``, ``sensitivity_profile``, ...), and the
:class:`Lockstep` runner feeds every capture to each workload in turn, one window at a time. So
the forward pass runs once per window, the workloads stream their statistics (memory is flat in
the window count: at most the current and the previous window's capture are alive), and the
timings separate cleanly. The distance workloads read the query row ``L - 1`` of the window for
every L of their grids (by causality, one forward pass serves every L), the gradient workload 64 evenly
spaced rows and the separability workload every row, with the grids the chapters use; nothing is
recomputed per L or per N. The paper's Algorithms 1-5 average over every query position ``t``
of every L instead; :data:`WORKLOADS` says what each row here measures.

How the time is attributed
--------------------------
- ``forward_seconds`` (per workload): the whole time of the shared forward passes. Every workload
  consumes every pass, and run alone it would need all of them, so each row is charged in full
  ("standalone" attribution); ``seconds = forward_seconds + metric_seconds`` is what the workload
  would cost on its own, and ``speedup = paper_seconds / seconds`` is conservative.
- ``shared_seconds`` (per workload): ``metric_seconds`` plus an equal share of the forward time
  (forward / number of workloads); these add up to the total row.
- The ``total`` row charges the forward passes once: ``forward_seconds`` is their sum,
  ``metric_seconds`` the sum over workloads, ``seconds`` the wall time of the whole loop (forward,
  metrics and hand-overs; the model load is reported apart as ``setup_seconds``).
- ``metric_over_forward`` is ``metric_seconds / forward_seconds`` (the target is at most 1).
- ``metric_seconds_by_window`` / ``forward_seconds_by_window``: the same per window (the first
  window carries one-time costs); ``final_seconds``: a workload's last step after the stream
  ends (e.g. the KS tests of the critical-N search).
- ``metric_cpu_seconds`` (and ``forward_cpu_seconds`` in the total row): the process's CPU time
  (all threads) over the same stretches. On a machine shared with other jobs the wall times
  inflate and CPU time much less; the unshared wall time lies between CPU time / threads (work
  that keeps every thread busy) and CPU time (serial work, e.g. many small tensor operations).
- ``peak_rss_bytes``: the peak resident set size while the workload ran (Linux: the kernel's
  high-water mark, reset before each slice through ``/proc/self/clear_refs``; elsewhere the
  process's lifetime peak from ``resource``). The total row holds the whole process's peak
  (model load included) and ``run_peak_rss_bytes``, the largest peak of the loop's own slices
  (what a run costs on top of whatever the process held before, e.g. in a notebook kernel).

Output: the table printed beside the paper's Table 1, and ``_build/bench.json`` (written
atomically), a list of rows with ``workload``, ``seconds``, ``forward_seconds``,
``metric_seconds``, ``shared_seconds``, ``metric_over_forward``, ``peak_rss_bytes``,
``paper_seconds``, ``speedup`` and the run's settings, plus one row with ``workload = 'total'``.
"""

from __future__ import annotations

import argparse
import datetime as _dt
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Sequence

import torch
from torch import Tensor

from normlimits.core import protocol
from normlimits.core.protocol import PAPER_TABLE1, half_octave_grid
from normlimits.metrics.separability import SPACED_ROW_COUNT, spaced_rows
from normlimits.core.paths import checkout_root
from normlimits.core.streaming import Lockstep, PeakMemory
from normlimits.core.cache import atomic_write_json
from normlimits.core.outputs import check_target_text, FileOutput, OutputError
from normlimits.core.settings import configure_torch, SettingError
from normlimits.experiments.separability_sweep import separability_sweep
from normlimits.metrics.critical_n import critical_n_search
from normlimits.metrics.distances import sweep_length, sweep_top_n
from normlimits.metrics.jacobian import default_rows, default_temperatures, sensitivity_profile
from normlimits.model.corpus import load_corpus, token_windows
from normlimits.model.errors import ModelError

__all__ = [
    "PAPER_TABLE1",
    "BenchConfig",
    "Workload",
    "WORKLOADS",
    "Lockstep",
    "PeakMemory",
    "BenchResult",
    "run_bench",
    "bench_rows",
    "format_table",
    "table_frame",
    "write_rows",
    "read_rows",
    "default_output",
    "main",
]

DEFAULT_MODEL = "gpt2-random"
DEFAULT_WINDOWS = 8
DEFAULT_LENGTH = protocol.MAX_LENGTH

# --------------------------------------------------------------------------------------------
# The five workloads at the paper's grids
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BenchConfig:
    """The grids of the five workloads, all derived from the window length ``length``.

    - distance against L (Alg. 1, Fig. 2a): N = ``fixed_n``, L in :attr:`lengths`
      (32, 48, 64, 96, ..., ``length``), the row ``L - 1`` of each window, with the fixed-set
      bounds and the random-subset expectation (:func:`normlimits.metrics.distances.sweep_length`);
    - distance against N (Alg. 2, Fig. 2b): L = ``length``, N in :attr:`top_n_grid`
      (:func:`normlimits.metrics.distances.sweep_top_n`);
    - critical N (Alg. 3, Fig. 2c): for every L of :attr:`lengths`, the KS test at every N below
      L of :func:`normlimits.metrics.critical_n.critical_grid`, on the last row of each window against the
      closed-form main sum (:func:`normlimits.metrics.critical_n.critical_n_search` with
      ``protocol="last_row"``; the distances chapter runs the paper's every-position protocol);
    - separability (Alg. 4, Fig. 3): N_s/N for N in :attr:`separability_grid` at
      ``separability_row_count`` evenly spaced query positions of the ``length``-token window
      (None: every position, as the paper; the separability chapter measures how little the
      subsample changes), value vectors projected to the unit sphere, the empirical minimum
      separation delta and the Theorem 2 bounds
      (:func:`normlimits.experiments.separability_sweep.separability_sweep`);
    - gradient sensitivity (Alg. 5, Fig. 4): g(T, eps) over :attr:`temperatures` (1e-3..1e2, four
      a decade) and ``epsilons``, plus the exact Jacobian norms, at the same query rows
      (:func:`normlimits.metrics.jacobian.sensitivity_profile`).
    """

    length: int = DEFAULT_LENGTH
    smallest_length: int = 32
    fixed_n: int = protocol.FIXED_N
    top_n: tuple[int, ...] = protocol.TOP_N_GRID
    separability_n: tuple[int, ...] = protocol.SEPARABILITY_N_GRID
    separability_row_count: int | None = SPACED_ROW_COUNT
    rows: int = protocol.JACOBIAN_ROWS
    epsilons: tuple[float, ...] = protocol.EPSILONS
    temperatures_per_decade: int = protocol.TEMPERATURES_PER_DECADE
    alphas: tuple[float, ...] = protocol.KS_ALPHAS

    def __post_init__(self) -> None:
        if self.length < 2:
            raise ValueError(f"the bench needs windows of at least 2 tokens (got L={self.length}).")

    @property
    def lengths(self) -> list[int]:
        """The L grid of Fig. 2a and 2c, as the distances chapter uses it: 32, 48, 64, 96, ...,
        768, 1024 (half octaves), cut at ``length`` (``length`` always included)."""
        return half_octave_grid(min(self.smallest_length, self.length), self.length)

    @property
    def top_n_grid(self) -> list[int]:
        """Fig. 2b's N values that fit in the window (N <= L)."""
        return [n for n in self.top_n if n <= self.length] or [1]

    @property
    def separability_grid(self) -> list[int]:
        """Figure 3's N grid as the separability chapter uses it (1, 2, 4, ..., 96, 128), cut
        below L (N_s needs a non-selected key)."""
        return [n for n in self.separability_n if n <= self.length - 1] or [1]

    @property
    def separability_rows(self) -> list[int] | None:
        """The separability workload's query rows: None means every position (the paper's
        choice), else ``separability_row_count`` evenly spaced positions
        (:func:`normlimits.metrics.separability.spaced_rows`)."""
        if self.separability_row_count is None:
            return None
        return spaced_rows(self.length, self.separability_row_count).tolist()

    @property
    def query_rows(self) -> list[int]:
        """The gradient workload's query rows: ``rows`` positions spread evenly over the window
        (:func:`normlimits.metrics.jacobian.default_rows`, as the gradients chapter uses them)."""
        return default_rows(self.length, self.rows).tolist()

    @property
    def temperatures(self) -> Tensor:
        return default_temperatures(per_decade=self.temperatures_per_decade)

    def describe(self) -> dict:
        """The grids as plain JSON-able values."""
        return {
            "length": self.length, "lengths": self.lengths, "fixed_n": self.fixed_n,
            "top_n_grid": self.top_n_grid, "separability_grid": self.separability_grid,
            "separability_rows": ("every" if self.separability_row_count is None
                                  else len(self.separability_rows)),
            "gradient_rows": len(self.query_rows), "epsilons": list(self.epsilons),
            "temperatures": len(self.temperatures), "alphas": list(self.alphas),
        }


def _distance_vs_length(captures, cfg: BenchConfig):
    return sweep_length(captures, cfg.lengths, n=cfg.fixed_n)


def _distance_vs_top_n(captures, cfg: BenchConfig):
    return sweep_top_n(captures, cfg.top_n_grid, length=cfg.length)


def _critical_n(captures, cfg: BenchConfig):
    return critical_n_search(captures, cfg.lengths, protocol="last_row", alphas=cfg.alphas)


def _separability(captures, cfg: BenchConfig):
    return separability_sweep(captures, cfg.separability_grid, kinds=("values",),
                              rows=cfg.separability_rows, bounds=True)


def _gradient(captures, cfg: BenchConfig):
    rows = torch.as_tensor(cfg.query_rows, dtype=torch.long)
    return sensitivity_profile((cap.logits(rows) for cap in captures), cfg.temperatures,
                               cfg.epsilons, seed=0)


@dataclass(frozen=True)
class Workload:
    """One of the paper's five experiments: ``run(captures, config)`` consumes window captures;
    ``describe(config)`` says in words what it computes."""

    name: str
    describe: Callable[[BenchConfig], str]
    run: Callable[[Iterable, BenchConfig], Any]

    @property
    def paper_label(self) -> str:
        return PAPER_TABLE1[self.name][0]

    @property
    def paper_seconds(self) -> float:
        return PAPER_TABLE1[self.name][1]


def _span(values: Sequence[int]) -> str:
    return f"{len(values)} lengths L = {values[0]}..{values[-1]}"


def _braces(values: Sequence) -> str:
    return "{" + ", ".join(f"{v:g}" for v in values) + "}"


WORKLOADS: tuple[Workload, ...] = (
    Workload("distance_vs_length",
             lambda c: f"N = {c.fixed_n}; {_span(c.lengths)} (rows L-1); true distance, "
                       "expectation and its Jensen bound, both fixed-set bounds",
             _distance_vs_length),
    Workload("distance_vs_top_n",
             lambda c: f"L = {c.length} (row {c.length - 1}); N in {_braces(c.top_n_grid)}; "
                       "the same statistics",
             _distance_vs_top_n),
    Workload("critical_n",
             lambda c: f"{_span(c.lengths)} (rows L-1); two-sample KS at alpha "
                       f"{' and '.join(map(str, c.alphas))} on the per-head means, at every N "
                       "of a grid per L (1..32, then ~7% steps to L)",
             _critical_n),
    Workload("separability",
             lambda c: f"L = {c.length}; "
                       + ("every query row" if c.separability_rows is None
                          else f"{len(c.separability_rows)} evenly spaced query rows")
                       + f"; N in {_braces(c.separability_grid)}; value vectors on the unit "
                       "sphere, delta, N_s/N and the Theorem 2 bounds",
             _separability),
    Workload("gradient",
             lambda c: f"L = {c.length}; {len(c.query_rows)} query rows; {len(c.temperatures)} "
                       f"temperatures 1e-3..1e2 x eps in {_braces(c.epsilons)}; g(T, eps), ||J v|| "
                       "and the exact Jacobian norms",
             _gradient),
)


# --------------------------------------------------------------------------------------------
# Peak memory
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# Lockstep: one producer (the forward passes), several consumers of the same stream
# --------------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------------
# A whole benchmark run
# --------------------------------------------------------------------------------------------


@dataclass
class BenchResult:
    """One bench run: the JSON rows (:func:`bench_rows`) and each workload's result object."""

    rows: list[dict]
    results: dict[str, Any] = field(default_factory=dict)

    def row(self, workload: str) -> dict:
        for r in self.rows:
            if r["workload"] == workload:
                return r
        raise KeyError(workload)

    @property
    def total(self) -> dict:
        return self.row("total")


def _select(names: Sequence[str] | None) -> list[Workload]:
    if names is None:
        return list(WORKLOADS)
    known = {w.name: w for w in WORKLOADS}
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown workload(s) {unknown}; choose from {sorted(known)}")
    return [known[n] for n in names]


def run_bench(loaded, windows: Tensor, config: BenchConfig | None = None, *,
              workloads: Sequence[str] | None = None, setup_seconds: float = 0.0,
              progress: Callable[[str], None] | None = None) -> BenchResult:
    """Run the workloads over ``windows`` [W, L] of token ids, one forward pass per window.

    ``loaded``: a :class:`normlimits.model.pretrained.LoadedModel`; ``config`` defaults to
    ``BenchConfig(length=L)``. Returns the rows (see the module docstring) and the results.
    """
    from normlimits.model.capture import capture_window

    windows = torch.as_tensor(windows, dtype=torch.long)
    if windows.dim() != 2 or windows.shape[0] < 1:
        raise ValueError(f"windows must be [W, L] token ids with W >= 1 "
                         f"(got {tuple(windows.shape)}).")
    length = int(windows.shape[1])
    config = config or BenchConfig(length=length)
    if config.length != length:
        raise ValueError(f"the config is for L={config.length} but the windows have L={length}.")
    chosen = _select(workloads)
    memory = PeakMemory()
    lockstep = Lockstep({w.name: (lambda caps, w=w: w.run(caps, config)) for w in chosen}, memory)

    def produce():
        for index, ids in enumerate(windows):
            if progress:
                progress(f"window {index + 1}/{len(windows)}")
            yield capture_window(loaded, ids)

    start = time.perf_counter()
    results = lockstep.run(produce())
    wall = time.perf_counter() - start
    rows = bench_rows(lockstep, chosen, loaded=loaded, windows=len(windows), config=config,
                      wall_seconds=wall, setup_seconds=setup_seconds)
    return BenchResult(rows=rows, results=results)


def _settings(loaded, windows: int, config: BenchConfig) -> dict:
    return {
        "model": loaded.name,
        "n_params": int(loaded.n_params),
        "layers": int(loaded.n_layers),
        "heads": int(loaded.n_heads),
        "windows": int(windows),
        "length": int(config.length),
        "threads": int(torch.get_num_threads()),
    }


def bench_rows(lockstep: Lockstep, workloads: Sequence[Workload], *, loaded, windows: int,
               config: BenchConfig, wall_seconds: float, setup_seconds: float = 0.0) -> list[dict]:
    """The JSON rows of a finished :class:`Lockstep` run (module docstring: field meanings)."""
    forward = lockstep.produce_seconds
    settings = _settings(loaded, windows, config)
    share = forward / max(1, len(workloads))
    rows = []
    for w in workloads:
        metric = lockstep.metric_seconds[w.name]
        seconds = forward + metric
        rows.append({
            "workload": w.name,
            "paper_label": w.paper_label,
            "what": w.describe(config),
            "seconds": seconds,
            "forward_seconds": forward,
            "metric_seconds": metric,
            "shared_seconds": metric + share,
            "metric_cpu_seconds": lockstep.metric_cpu_seconds[w.name],
            "metric_seconds_by_window": list(lockstep.item_seconds[w.name]),
            "final_seconds": lockstep.final_seconds[w.name],
            "metric_over_forward": metric / forward if forward > 0 else math.inf,
            "peak_rss_bytes": int(max(lockstep.peak_rss[w.name], lockstep.produce_peak_rss)),
            "own_peak_rss_bytes": int(lockstep.peak_rss[w.name]),
            "paper_seconds": w.paper_seconds,
            "paper_parallelised": PAPER_TABLE1[w.name][2],
            "speedup": w.paper_seconds / seconds if seconds > 0 else math.inf,
            **settings,
        })
    metric_total = sum(lockstep.metric_seconds[w.name] for w in workloads)
    paper_total = sum(w.paper_seconds for w in workloads)
    rows.append({
        "workload": "total",
        "paper_label": "Table 1, all listed algorithms",
        "what": "one forward pass per window shared by every workload; metrics summed",
        "seconds": wall_seconds,
        "forward_seconds": forward,
        "metric_seconds": metric_total,
        "shared_seconds": forward + metric_total,
        "forward_cpu_seconds": lockstep.produce_cpu_seconds,
        "forward_seconds_by_window": list(lockstep.produce_item_seconds),
        "metric_cpu_seconds": sum(lockstep.metric_cpu_seconds[w.name] for w in workloads),
        "metric_over_forward": metric_total / forward if forward > 0 else math.inf,
        "peak_rss_bytes": int(lockstep.memory.overall()),
        "run_peak_rss_bytes": int(max([lockstep.produce_peak_rss,
                                       *(lockstep.peak_rss[w.name] for w in workloads)])),
        "forward_peak_rss_bytes": int(lockstep.produce_peak_rss),
        "peak_resettable": bool(lockstep.memory.resettable),
        "paper_seconds": paper_total,
        "paper_parallelised": True,
        "speedup": paper_total / wall_seconds if wall_seconds > 0 else math.inf,
        "setup_seconds": float(setup_seconds),
        "forward_seconds_per_window": forward / max(1, lockstep.items),
        "grids": config.describe(),
        "cpu_count": os.cpu_count(),
        "machine": platform.machine(),
        "torch": torch.__version__,
        "finished_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        **settings,
    })
    return rows


# --------------------------------------------------------------------------------------------
# Output
# --------------------------------------------------------------------------------------------


def default_output() -> Path:
    """``_build/bench.json`` at the project's root (the folder holding ``pyproject.toml``), or
    under the current directory when the package is not run from a checkout."""
    return (checkout_root() or Path.cwd()) / "_build" / "bench.json"


def write_rows(rows: list[dict], path: Path | str | None = None) -> Path:
    """Write the rows as JSON atomically (a temporary file in the same folder, then rename)."""
    path = Path(path) if path is not None else default_output()
    return atomic_write_json(path, rows)


def read_rows(path: Path | str | None = None) -> list[dict] | None:
    """The rows of the last run, or None when the file does not exist."""
    import json

    path = Path(path) if path is not None else default_output()
    if not path.is_file():
        return None
    return json.loads(path.read_text())


def _duration(seconds: float) -> str:
    if not math.isfinite(seconds):
        return "-"
    if seconds >= 3600:
        return f"{int(seconds // 3600)} h {int(round(seconds % 3600 / 60))} min"
    if seconds >= 60:
        return f"{seconds / 60:.0f} min" if seconds % 60 < 1 else f"{seconds / 60:.1f} min"
    return f"{seconds:.1f} s"


def table_frame(rows: list[dict]):
    """The rows as a pandas DataFrame with readable columns (for the book and the terminal)."""
    import pandas as pd

    return pd.DataFrame({
        "workload": [r["workload"] for r in rows],
        "paper (Table 1)": [r["paper_label"] for r in rows],
        "paper time": [_duration(r["paper_seconds"]) for r in rows],
        "ours (s)": [round(r["seconds"], 1) for r in rows],
        "forward (s)": [round(r["forward_seconds"], 1) for r in rows],
        "metric (s)": [round(r["metric_seconds"], 1) for r in rows],
        "metric / forward": [round(r["metric_over_forward"], 2) for r in rows],
        "peak RSS (GiB)": [round(r["peak_rss_bytes"] / 2**30, 2) for r in rows],
        "speed-up": [f"{r['speedup']:,.0f}x" for r in rows],
    })


def format_table(rows: list[dict]) -> str:
    """A plain-text table of the rows beside the paper's Table 1."""
    total = rows[-1]
    head = (f"{total['model']} ({total['n_params'] / 1e6:.1f}M params, {total['layers']}x"
            f"{total['heads']} heads), {total['windows']} windows of L = {total['length']}, "
            f"{total['threads']} torch threads on {total.get('cpu_count')} CPUs")
    body = table_frame(rows).to_string(index=False)
    notes = ("Per workload, 'ours' = the shared forward passes (charged in full to each "
             "workload) + its own metrics;\nthe total row charges the forward passes once and "
             f"is the loop's wall time (model load {total.get('setup_seconds', 0):.1f} s apart).")
    if "forward_cpu_seconds" in total:
        notes += (f"\nCPU time (all threads): forward {total['forward_cpu_seconds']:.1f} s, "
                  f"metrics {total['metric_cpu_seconds']:.1f} s. On a machine shared with other "
                  f"jobs the wall times inflate; the unshared wall time lies between CPU time / "
                  f"{total['threads']} (work that uses every thread) and CPU time (serial work).")
    return f"{head}\n{body}\n{notes}"


# --------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------


def _row_count(text: str) -> int | None:
    """``--separability-rows``: a positive count, or 'every' (None)."""
    if text.strip().lower() == "every":
        return None
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a positive number of rows or 'every', got {text!r}")
    return value


def _positive(option: str):
    """An argparse type: a whole number >= 1, the error naming ``option``."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{option} must be a whole number such as 8 "
                                             f"(got {text!r})") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"{option} must be at least 1 (got {value})")
        return value
    return parse


def is_bench_output(path: Path) -> bool:
    """Whether ``path`` holds the bench's JSON rows (an earlier run's output, safe to replace)."""
    import json

    try:
        rows = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError):
        return False
    return (isinstance(rows, list) and bool(rows) and all(isinstance(r, dict) and "workload" in r
                                                           for r in rows)
            and rows[-1]["workload"] == "total")


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m normlimits.experiments.bench",
        description="Time the paper's five experiments (Table 1) with the book's code: one "
                    "forward pass per window shared by every workload. The chapters' settings "
                    "NORMLIMITS_MODEL and NORMLIMITS_WINDOWS do not apply here (the options do); "
                    "the corpus is NORMLIMITS_CORPUS's.")
    p.add_argument("--model", default=DEFAULT_MODEL,
                   help=f"model name as NORMLIMITS_MODEL takes it (default {DEFAULT_MODEL}: GPT-2 "
                        "124M's configuration, random weights; the cost does not depend on them)")
    p.add_argument("--windows", type=_positive("--windows"), default=DEFAULT_WINDOWS,
                   help=f"number of corpus windows (default {DEFAULT_WINDOWS}; NORMLIMITS_WINDOWS "
                        "is not read)")
    p.add_argument("--length", type=_positive("--length"), default=DEFAULT_LENGTH,
                   help=f"window length L, the largest L of the sweeps (default {DEFAULT_LENGTH})")
    p.add_argument("--separability-rows", type=_row_count, default=BenchConfig.separability_row_count,
                   metavar="N|every",
                   help="query rows per window of the separability workload: a count of evenly "
                        "spaced rows, or 'every' for every position as the paper (default "
                        f"{BenchConfig.separability_row_count})")
    p.add_argument("--workloads", nargs="+", choices=[w.name for w in WORKLOADS],
                   help="run only these workloads (default: all five)")
    p.add_argument("--output", default=None,
                   help="where to write the JSON rows (default _build/bench.json); an existing "
                        "file is replaced only if it is an earlier bench output")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    return p


def _output(text: str | None):
    """The output transaction for ``--output``, checked before any computing."""
    path = default_output() if text is None else check_target_text(text, "--output")
    return FileOutput(path, tool="python -m normlimits.experiments.bench", option="--output",
                      is_ours=is_bench_output)


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m normlimits.experiments.bench``: run, print the table, write the JSON rows. A bad argument
    (or setting) exits 2 with the usage line and a message naming it."""
    import json

    from normlimits.model.load import load_model

    p = _parser()
    args = p.parse_args(argv)
    count = args.windows
    if args.length < 2:
        p.error(f"--length {args.length}: the bench needs windows of at least 2 tokens; pass "
                "--length 2 or more")
    try:
        output = _output(args.output)
    except OutputError as exc:
        p.error(str(exc))
    try:
        configure_torch()
        torch.manual_seed(0)

        def say(message: str) -> None:
            if not args.quiet:
                print(f"[bench] {message}", file=sys.stderr, flush=True)

        start = time.perf_counter()
        try:
            loaded = load_model(args.model, origin="--model")
            corpus = load_corpus()
        except (ModelError, SettingError) as exc:
            p.error(str(exc))
        context = int(loaded.max_positions)
        if args.length > context:
            p.error(f"--length {args.length}: the model {loaded.name} has a context of {context} "
                    f"tokens; pass --length {context} or less")
        try:
            windows = token_windows(loaded, corpus, args.length, count, count_origin="--windows")
        except SettingError as exc:
            p.error(f"--windows {count} / --length {args.length}: {exc}")
        setup = time.perf_counter() - start
        say(f"{loaded.name}: {loaded.n_params / 1e6:.1f}M params; {count} windows of "
            f"{args.length} tokens; set-up {setup:.1f} s")
        config = BenchConfig(length=args.length, separability_row_count=args.separability_rows)
        result = run_bench(loaded, windows, config,
                           workloads=args.workloads, setup_seconds=setup, progress=say)
        from normlimits.experiments.book_projection import format_projection, project

        projected = project(result.rows[-1]["seconds"])
        result.rows[-1]["book_projected_seconds"] = projected
        print(format_table(result.rows))
        print(format_projection(projected))
        try:
            path = output.commit((json.dumps(result.rows, indent=2, sort_keys=True) + "\n").encode())
        except OutputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 1
        print(f"rows written to {path}")
        return 0
    finally:
        output.abort()


if __name__ == "__main__":
    raise SystemExit(main())
