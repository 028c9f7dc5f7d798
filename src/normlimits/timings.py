"""Chapter execution times against their budgets (``python -m normlimits.timings``).

Each chapter records its time with ``ctx.finish()`` in ``<ledger dir>/<chapter>.timing.json``;
budgets live in :data:`normlimits.protocol.CHAPTER_BUDGET_SECONDS` (stand-in, 2 cores). ``make
book`` prints this table after every build; ``tests/test_book_build.py`` fails a chapter that
took more than twice its budget.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from .ledger import ledger_dir
from .protocol import CHAPTER_BUDGET_SECONDS

#: a chapter over this multiple of its budget fails the build
BUDGET_FACTOR = 2.0


def read_timings(directory: Path | None = None) -> dict[str, dict]:
    """``{chapter: {"seconds", "model", "windows"}}`` from the timing files of ``directory``."""
    folder = Path(directory) if directory is not None else ledger_dir()
    return {p.name.removesuffix(".timing.json"): json.loads(p.read_text())
            for p in sorted(folder.glob("*.timing.json"))}


def budgeted_seconds(timing: dict) -> float:
    """A chapter's time less its one-time work (a training whose result is cached for later
    builds, recorded as ``one_time_seconds``): what its budget is about."""
    return timing["seconds"] - timing.get("one_time_seconds", 0.0)


def over_budget(timings: dict[str, dict], factor: float = BUDGET_FACTOR) -> dict[str, float]:
    """Chapters whose time, less one-time work, exceeds ``factor`` times their budget:
    ``{chapter: seconds}``."""
    return {ch: budgeted_seconds(t) for ch, t in timings.items()
            if budgeted_seconds(t) > factor * CHAPTER_BUDGET_SECONDS.get(ch, float("inf"))}


def format_table(timings: dict[str, dict]) -> str:
    """One line per chapter: seconds, budget, and a mark when over twice the budget."""
    lines = [f"{'chapter':<14} {'seconds':>8} {'budget':>7}  model"]
    for ch, t in timings.items():
        budget = CHAPTER_BUDGET_SECONDS.get(ch)
        mark = "  OVER 2x BUDGET" if ch in over_budget({ch: t}) else ""
        once = t.get("one_time_seconds", 0.0)
        note = f"  (of which one-time training {once:.1f} s, cached now)" if once else ""
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
