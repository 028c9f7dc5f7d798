"""The architectures chapter: the paper's four yardsticks on several model families, side by side.

Which models: ``NORMLIMITS_ARCHITECTURES`` (comma-separated model settings), by default the two
stand-ins (:data:`OFFLINE_MODELS`: learned absolute positions against RoPE + grouped-query
attention at equal size and corpus, the RoPE one trained for 30% of the steps) and, where the hub or its cache has them,
:data:`ONLINE_MODELS` (GPT-2 124M and 355M, which tests the paper's "larger variants" remark,
Pythia-160M and SmolLM2-135M). A model that cannot be loaded is skipped with the reason its
loader gave (:class:`Skipped`), never silently.

Each loaded model runs the audit's yardsticks (:mod:`normlimits.audit.yardsticks`, the chapters' own
code paths, one forward pass per window) on the same corpus windows' text, at L = the model's
context up to 1024: the vanishing exponent of the largest weight (NU, C1), the critical N under
the paper's protocol (F2c, F2a), the N_s/N plateau (F3) and the Jacobian sensitivity against T
(F4, EPS). Rows are graded by the registered rules, as in the paper's chapters; on two windows or
more every yardstick claim but C1 (a count of weights outside a proven bound) carries the chapters'
bootstrap interval over the windows, and is graded on it.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from typing import Callable, Iterator, Sequence

import pandas as pd
import torch

from normlimits.core.markup import units_of, with_interval
from normlimits.core.protocol import MAX_LENGTH
from normlimits.core.settings import SettingError
from normlimits.model.pretrained import positions_of
from normlimits.audit.compare import plot_overlay, statistics_frame, verdict_frame
from normlimits.audit.yardsticks import AuditConfig
from normlimits.model.capture_cache import cached_captures
from normlimits.model.corpus import token_windows

__all__ = ["ARCHITECTURES_ENV", "OFFLINE_MODELS", "ONLINE_MODELS", "YARDSTICK_CLAIMS", "SURVEY_ROWS", "Skipped",
           "Surveyed", "model_names", "survey", "comparison_table",
           "verdict_table", "holds", "headline_text", "plot_yardstick", "survey_protocol"]

ARCHITECTURES_ENV = "NORMLIMITS_ARCHITECTURES"
OFFLINE_MODELS = ("standin", "standin-rope", "smollm2-135m", "gemma3-270m")
#: windows the survey gives a model when fewer than the build's (its yardsticks' cost per window
#: grows with its heads and layers: 270 heads of 64 dimensions for SmolLM2-135M, 72 of 256 for
#: Gemma 3 270M, 16 for the stand-ins)
SURVEY_WINDOWS = {"smollm2-135m": 1, "gemma3-270m": 1}
#: query rows per window of the separability yardstick where not every position (the default): a
#: quarter of each real model's window, evenly spaced. Theorem 2's bounds cost grows with the rows
#: and the head size: on Gemma 3 270M's 256 dimensions every position of one window ran past the
#: chapter's 1,500 s cell timeout (2026-12-05, 2 shared cores). On SmolLM2-135M (one window of
#: 1024, 2026-12-06) every position gave F3 "partial" at a plateau of 0.416, 256 rows "partial" at
#: 0.412 and 128 rows "partial" at 0.422 (the same knee, N = 48). The yardstick alone took about
#: 8 times as long on every position as on 256 rows, but it is not most of a survey's time: the
#: idle survey of SmolLM2 took 82 s with 256 rows against 97 s with every position (2026-12-06)
SURVEY_ROWS = {"smollm2-135m": 256, "gemma3-270m": 128}
ONLINE_MODELS = ("gpt2", "gpt2-medium", "EleutherAI/pythia-160m", "HuggingFaceTB/SmolLM2-135M")
#: the claims each yardstick grades (the audit's rows), in the paper's order
YARDSTICK_CLAIMS = {"vanishing": ("NU", "C1"), "critical_n": ("F2c", "F2a"),
                    "separability": ("F3",), "jacobian": ("F4", "EPS")}
#: a verdict read as "the paper's limit holds on this model" (in the paper's or a corrected form)
HOLDS = {"confirmed": "holds", "corrected": "holds (corrected form)", "partial": "holds in part",
         "refuted": "does not hold",
         "not reproduced": "does not hold", "inconclusive": "undecided (interval straddles the rule)",
         "not testable": "not testable"}


def model_names(setting: str | None = None) -> list[str]:
    """The models to compare: ``setting`` (default ``NORMLIMITS_ARCHITECTURES``), comma-separated,
    or the offline models (the two stand-ins and the real pretrained smollm2-135m and
    gemma3-270m) then the
    online models. Duplicates are dropped; an empty list is refused."""
    raw = setting if setting is not None else os.environ.get(ARCHITECTURES_ENV)
    if raw is None or raw.strip() == "":
        names = [*OFFLINE_MODELS, *ONLINE_MODELS]
    else:
        names = [n.strip() for n in raw.split(",") if n.strip()]
        if not names:
            raise SettingError(f"{ARCHITECTURES_ENV}={raw!r} names no model; give comma-separated "
                               "model settings (e.g. standin,standin-rope,gpt2) or unset it.")
    return list(dict.fromkeys(names))


@dataclass(frozen=True)
class Skipped:
    """A model that could not be loaded, with the loader's reason."""

    name: str
    reason: str


@dataclass
class Surveyed:
    """One model's yardsticks. ``measured``: yardstick name -> :class:`~normlimits.audit.yardsticks.Measured`;
    ``label``: as the rows name it; ``seconds``: loading and measuring it."""

    name: str
    label: str
    family: str
    positions: str
    layers: int
    heads: int
    kv_heads: int
    params: int
    length: int
    windows: int
    source: str
    measured: dict
    seconds: float = 0.0

    def rows(self) -> list[dict]:
        """Every graded row of every yardstick, in the paper's order."""
        return [row for m in self.measured.values() for row in m.rows]

    def document(self) -> dict:
        """This model's results as an audit document (the parts :mod:`normlimits.audit.compare`'s
        tables and curves read: ``model``, ``settings``, ``rows``, ``statistics``)."""
        return {"model": {"label": self.label, "name": self.name, "family": self.family,
                          "positions": self.positions, "layers": self.layers, "heads": self.heads,
                          "kv_heads": self.kv_heads, "n_params": self.params},
                "settings": {"windows": self.windows, "length": self.length},
                "rows": self.rows(),
                "statistics": {name: m.statistics for name, m in self.measured.items()}}

    def _entry(self, claim_id: str, key: str) -> dict:
        row = next((r for r in self.rows() if r["id"] == claim_id), None)
        return next((c for c in row["criteria"] if c["key"] == key), {}) if row else {}

    def criterion(self, claim_id: str, key: str):
        """The value of criterion ``key`` in the row of ``claim_id`` (None when not graded)."""
        return self._entry(claim_id, key).get("value")

    def criterion_text(self, claim_id: str, key: str, digits: int = 3) -> str:
        """That value as text, ``value [low, high] (n windows)`` where the row has an interval over
        the windows (``range over n windows`` for few); ``n/a`` when not graded."""
        entry = self._entry(claim_id, key)
        if entry.get("value") is None:
            return "n/a"
        row = next((r for r in self.rows() if r["id"] == claim_id), {})
        return with_interval(entry["value"], entry.get("interval"), digits, **units_of(row))

    def with_intervals(self) -> list[str]:
        """The claims whose rows carry an interval over the windows, in the rows' order."""
        return [row["id"] for row in self.rows() if row.get("resampling")]


def load_surveyed(name: str):
    """The model ``name`` as :func:`survey` loads it by default (errors name
    ``NORMLIMITS_ARCHITECTURES``); load it once and pass ``loader=lambda name: loaded`` to survey
    it several times (other texts, other windows) without loading it again."""
    from normlimits.model.load import load_model

    return load_model(name, origin=ARCHITECTURES_ENV)


def survey(names: Sequence[str], corpus, window_count: int, *,
           loader: Callable[[str], object] | None = None, max_length: int = MAX_LENGTH,
           yardsticks: Sequence[str] | None = None,
           say: Callable[[str], None] = lambda message: None,
           windows_of: dict[str, int] | None = None,
           rows_of: dict[str, int] | None = None,
           shift: float = 0.0) -> Iterator[Surveyed | Skipped]:
    """Load each model in turn (only one in memory at a time), run the audit's yardsticks on
    ``window_count`` windows (``windows_of[name]`` where given, at most ``window_count``) of
    L = min(its context, ``max_length``) tokens of ``corpus`` (their starts moved by ``shift`` of
    their spacing: :func:`normlimits.model.corpus.window_starts`; ``rows_of[name]``: the separability
    yardstick's query rows per window, every position where not given), and yield a :class:`Surveyed`; a
    model whose loader raises (an unknown id, not available offline, an unsupported family, a
    damaged folder) yields a :class:`Skipped` with the message."""
    from normlimits.audit.command import GLOBAL_SEED, model_label, run_audit

    load = loader or load_surveyed
    for name in names:
        start = time.perf_counter()
        try:
            loaded = load(name)
        except (SettingError, OSError, ValueError) as exc:
            say(f"{name}: skipped ({exc})")
            yield Skipped(name, str(exc))
            continue
        length = min(int(loaded.max_positions), int(max_length))
        count = min(window_count, (windows_of or {}).get(name, window_count))
        windows = token_windows(loaded, corpus, length, count, shift=shift)
        config = AuditConfig(length=length, paper_model=bool(loaded.is_paper_model),
                             separability_rows=(rows_of or {}).get(name))
        torch.manual_seed(GLOBAL_SEED)  # as `normlimits audit` does: the same rows for the same model
        # the book's capture cache: a model the chapters ran on is not captured twice
        run = run_audit(loaded, windows, config, yardsticks=yardsticks, say=say,
                        captures=cached_captures(loaded, corpus, length, count, shift))
        cfg = loaded.model.config
        yield Surveyed(name=name, label=model_label(loaded), family=loaded.family,
                       positions=positions_of(cfg), layers=loaded.n_layers, heads=loaded.n_heads,
                       kv_heads=loaded.n_kv_heads, params=int(loaded.n_params), length=length,
                       windows=len(windows), source=loaded.source, measured=run["measured"],
                       seconds=time.perf_counter() - start)
        del loaded


def survey_protocol(windows: int, length: int, text: str | None = None) -> str:
    """What a survey row's protocol is, for its ``sensitivity`` label: the architectures chapter
    grades each yardstick claim on ``windows`` windows of ``length`` tokens (of ``text`` when it is
    another text than the book's corpus), with the audit's grids, which is not the protocol of the
    claim's own chapter. The row is therefore a sensitivity row, never the claim's counted
    verdict. ValueError for a non-positive count."""
    if windows < 1 or length < 1:
        raise ValueError(f"a survey needs at least one window of one token, got {windows} x {length}")
    where = f" of {text}" if text else ""
    return (f"the architectures survey's protocol ({windows} window{'s' if windows != 1 else ''} of "
            f"{length} tokens{where}, the audit's grids), not the claim's own chapter's: its counted "
            "verdict on a model is that chapter's row")


def holds(verdict: str) -> str:
    """The verdict read as "the limit holds / does not hold on this model"."""
    return HOLDS.get(verdict, verdict)


def comparison_table(results: Sequence[Surveyed]) -> pd.DataFrame:
    """One column per model: architecture, size, and the headline statistic of each yardstick
    (:func:`normlimits.audit.compare.statistics_frame`, the table ``normlimits compare`` shows)."""
    results = list(results)
    return statistics_frame([r.document() for r in results], [r.name for r in results])


def headline_text(row: dict) -> str:
    """A row's headline statistic, ``key value [low, high] (n windows)`` where it has an interval
    over the windows (``key value`` without one, ``key n/a`` when not measured)."""
    value = row.get("value")
    text = "n/a" if value is None else with_interval(value, row.get("interval"), **units_of(row))
    return f"{row['headline']} {text}"


def verdict_table(results: Sequence[Surveyed]) -> pd.DataFrame:
    """Claims x models: each cell the verdict by the registered rule, what it says of the limit
    and the headline statistic with its interval over the windows where it has one
    (:func:`headline_text`; :func:`normlimits.audit.compare.verdict_frame`)."""
    results = list(results)
    table = verdict_frame([r.document() for r in results], [r.name for r in results],
                          cell=lambda row: f"{row['verdict']}: {holds(row['verdict'])}; "
                                           f"{headline_text(row)}")
    order = [c for claims in YARDSTICK_CLAIMS.values() for c in claims]
    return table.reindex([c for c in order if c in table.index])


def plot_yardstick(results: Sequence[Surveyed], yardstick: str, ax=None):
    """Every surveyed model's headline curve for ``yardstick`` on ``ax`` (default: a new figure),
    as ``normlimits compare`` overlays audits (:func:`normlimits.audit.compare.plot_overlay`); returns
    the figure."""
    results = list(results)
    return plot_overlay([r.document() for r in results],
                        [f"{r.name} ({r.positions})" for r in results], yardstick, ax=ax)
