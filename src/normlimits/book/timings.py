"""Chapter execution times against their budgets (``python -m normlimits.book.timings``).

Each chapter records its time with ``ctx.finish()`` in ``<ledger dir>/<chapter>.timing.json``, with
the part of it spent on one-time work (a training or a model conversion whose result is cached for
every later run: :mod:`normlimits.core.one_time`, and what the chapter declares with
``ctx.one_time``); budgets live in :data:`normlimits.core.protocol.CHAPTER_BUDGET_SECONDS` (one run of the chapter on 2
cores). A chapter that replays itself on control models (:mod:`normlimits.book.replicas`) records each
replica's seconds beside its own: each run is held to the budget separately, as each is one
execution of the chapter. ``make book`` prints this table after every build;
``tests/book/test_book_build.py`` fails a chapter whose own run or any replica took more than twice
its budget.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from normlimits.claims.ledger import ledger_dir
from normlimits.core.protocol import CHAPTER_BUDGET_SECONDS

#: a chapter over this multiple of its budget fails the build
BUDGET_FACTOR = 2.0


def read_timings(directory: Path | None = None) -> dict[str, dict]:
    """``{chapter: {"seconds", "model", "windows"}}`` from the timing files of ``directory``."""
    folder = Path(directory) if directory is not None else ledger_dir()
    return {p.name.removesuffix(".timing.json"): json.loads(p.read_text())
            for p in sorted(folder.glob("*.timing.json"))}


def budgeted_seconds(timing: dict) -> float:
    """A chapter's own run: its time less its one-time work (a training or conversion whose result
    is cached for later builds, ``one_time_seconds``) and less its replicas' runs (``replica_seconds``,
    each budgeted on its own): what its budget is about."""
    replicas = sum(timing.get("replica_seconds", {}).values())
    return timing["seconds"] - timing.get("one_time_seconds", 0.0) - replicas


def budgeted_runs(chapter: str, timing: dict) -> dict[str, float]:
    """Every run a chapter's timing holds, each to be held to the budget: ``{chapter: seconds}``
    for its own run and ``{"<chapter> on <replica label>": seconds}`` per replica."""
    runs = {chapter: budgeted_seconds(timing)}
    runs.update({f"{chapter} on {label}": seconds
                 for label, seconds in timing.get("replica_seconds", {}).items()})
    return runs


def over_budget(timings: dict[str, dict], factor: float = BUDGET_FACTOR) -> dict[str, float]:
    """Runs (a chapter's own, or one of its replicas) whose time, less one-time work, exceeds
    ``factor`` times the chapter's budget: ``{run: seconds}`` (keys as :func:`budgeted_runs`)."""
    over = {}
    for ch, t in timings.items():
        limit = factor * CHAPTER_BUDGET_SECONDS.get(ch, float("inf"))
        over.update({run: s for run, s in budgeted_runs(ch, t).items() if s > limit})
    return over


def format_table(timings: dict[str, dict]) -> str:
    """One line per chapter: seconds, budget, and a mark when over twice the budget."""
    lines = [f"{'chapter':<14} {'seconds':>8} {'budget':>7}  model"]
    for ch, t in timings.items():
        budget = CHAPTER_BUDGET_SECONDS.get(ch)
        mark = "  OVER 2x BUDGET" if over_budget({ch: t}) else ""
        once = t.get("one_time_seconds", 0.0)
        note = f"  (of which one-time work {once:.1f} s: training or conversion, cached now)" if once else ""
        note += "".join(f"  (of which replica on {label} {s:.1f} s)"
                        for label, s in t.get("replica_seconds", {}).items())
        lines.append(f"{ch:<14} {t['seconds']:>8.1f} {budget if budget else '-':>7}  {t['model']}{mark}{note}")
    lines.append(f"{'total':<14} {sum(t['seconds'] for t in timings.values()):>8.1f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    timings = read_timings(Path(args[0]) if args else None)
    print(format_table(timings) if timings else "no chapter timings recorded yet")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
