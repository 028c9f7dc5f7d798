"""Chapter execution times against their budgets (``python -m normlimits.book.timings``).

Each chapter records its time with ``ctx.finish()`` in ``<ledger dir>/<chapter>.timing.json``, with
the part of it spent on one-time work (a training or a model conversion whose result is cached for
every later run: :mod:`normlimits.core.one_time`, and what the chapter declares with
``ctx.one_time``); budgets live in :data:`normlimits.core.protocol.CHAPTER_BUDGET_SECONDS` (one run of the chapter on 2
cores). A chapter that replays itself on control models (:mod:`normlimits.book.replicas`) records each
replica's seconds beside its own: each run is held to the budget separately, as each is one
execution of the chapter. The replicas run side by side, so the chapter also records their wall
time together (``replica_wall_seconds``), which is what its own run is measured without. ``make book`` prints this table after every build;
``tests/book/test_book_build.py`` fails a chapter whose own run or any replica took more than twice
its budget.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from normlimits.claims.ledger import ledger_dir
from normlimits.core.protocol import BOOK_FLOOR_GOAL, CHAPTER_BUDGET_SECONDS

#: a chapter over this multiple of its budget fails the build
BUDGET_FACTOR = 2.0


def read_timings(directory: Path | None = None) -> dict[str, dict]:
    """``{chapter: {"seconds", "model", "windows"}}`` from the timing files of ``directory``."""
    folder = Path(directory) if directory is not None else ledger_dir()
    return {p.name.removesuffix(".timing.json"): json.loads(p.read_text())
            for p in sorted(folder.glob("*.timing.json"))}


def recurring_seconds(timing: dict) -> float:
    """A chapter's time less its one-time work (``one_time_seconds``), its replicas included:
    what a run of it costs once the machine has its caches."""
    return timing["seconds"] - timing.get("one_time_seconds", 0.0)


def budgeted_seconds(timing: dict) -> float:
    """A chapter's own run: its time less its one-time work (a training or conversion whose result
    is cached for later builds, ``one_time_seconds``) and less the time of its replicas (each
    budgeted on its own): their wall time together (``replica_wall_seconds``: they run side by
    side) where recorded, else the sum of their runs (``replica_seconds``, one after the other)."""
    replicas = timing.get("replica_wall_seconds")
    if replicas is None:
        replicas = sum(timing.get("replica_seconds", {}).values())
    return recurring_seconds(timing) - replicas


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


def read_execution(directory: Path | None = None) -> dict | None:
    """The record of the last run that executed chapters side by side before the build
    (:data:`normlimits.book.execute_chapters.REPORT_FILE` in ``directory``, default the ledger
    folder), or None if there is none."""
    from normlimits.book.execute_chapters import REPORT_FILE

    folder = Path(directory) if directory is not None else ledger_dir()
    try:
        record = json.loads((folder / REPORT_FILE).read_text())
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and "wall_seconds" in record else None


def replayed_wall(seconds: dict[str, float], order: list[str], width: int, last: list[str]) -> float:
    """The wall time of the run :mod:`normlimits.book.execute_chapters` makes: ``order``'s
    chapters taken in turn by ``width`` workers (each by the first one free), then those of
    ``last`` one after the other; ``seconds``: each chapter's time."""
    free = [0.0] * max(1, int(width))
    for chapter in order:
        worker = free.index(min(free))
        free[worker] += float(seconds.get(chapter, 0.0))
    return max(free) + sum(float(seconds.get(chapter, 0.0)) for chapter in last)


def wall_row(timings: dict[str, dict], execution: dict | None) -> dict | None:
    """The book's row measured by the clock instead of summed: the wall time of the run that
    executed every chapter of ``timings`` (``execution``, :func:`read_execution`), less what its
    one-time work added to it, against their forward passes. None unless that run executed
    exactly these chapters (after a run that executed some of them only, their times come from
    two builds).

    One-time work (a training, a conversion) held up one worker only, so the wall time is
    lowered by what it added to the run's schedule: the schedule replayed with each chapter's
    time (:func:`replayed_wall`, in the run's order) less the same replayed without the one-time
    work, never by the one-time seconds themselves (which would credit the other workers' time
    too). With no one-time work the row is the measured wall time."""
    if not execution or set(execution.get("executed_seconds", {})) != set(timings) or not timings:
        return None
    if any("forward_seconds" not in t for t in timings.values()):
        return None
    executed = {c: float(s) for c, s in execution["executed_seconds"].items()}
    last = [c for c in execution.get("alone_last", []) if c in executed]
    order = [c for c in execution.get("side_by_side", []) if c in executed and c not in last]
    order += [c for c in executed if c not in order and c not in last]
    width = int(execution.get("chapters_at_once", 1))
    recurring = {c: max(s - float(timings[c].get("one_time_seconds", 0.0)), 0.0) for c, s in executed.items()}
    added = replayed_wall(executed, order, width, last) - replayed_wall(recurring, order, width, last)
    run = max(float(execution["wall_seconds"]) - added, 0.0)
    forward = sum(float(t["forward_seconds"]) for t in timings.values())
    return {"chapter": f"book, wall time ({execution['chapters_at_once']} chapters at once)",
            "seconds": run, "forward_seconds": forward, "ratio": run / forward if forward > 0 else None}


def floor_rows(timings: dict[str, dict], execution: dict | None = None) -> list[dict]:
    """Each chapter's run against the physical floor of its work: ``{"chapter", "seconds" (wall
    time less one-time work, replicas included), "forward_seconds" (its and its replicas' model
    forward passes: :mod:`normlimits.core.forward_clock`), "ratio"}`` (None where no forward pass
    was timed), then a ``"book"`` row over every chapter that timed its forward passes (their
    times summed), then, when ``execution`` recorded a run of all of them side by side, the book's
    :func:`wall_row` (the time the build took). A chapter that reads captures an earlier one
    computed (the capture cache) pays no forward pass for them, so the book's ratio is the one
    that measures the overhead; a chapter's own ratio says where the time beyond the forward
    passes goes."""
    rows = []
    for chapter, t in timings.items():
        if "forward_seconds" not in t:
            continue                      # recorded before forward passes were timed
        run = max(recurring_seconds(t), 0.0)
        forward = float(t["forward_seconds"])
        rows.append({"chapter": chapter, "seconds": run, "forward_seconds": forward,
                     "ratio": run / forward if forward > 0 else None})
    if rows:
        run, forward = sum(r["seconds"] for r in rows), sum(r["forward_seconds"] for r in rows)
        rows.append({"chapter": "book", "seconds": run, "forward_seconds": forward,
                     "ratio": run / forward if forward > 0 else None})
        wall = wall_row(timings, execution)
        if wall is not None:
            rows.append(wall)
    return rows


def floor_html(timings: dict[str, dict], execution: dict | None = None) -> str:
    """:func:`floor_rows` as an HTML table (the cost chapter's ``{build-timings}``); the goal is
    judged on the last row (the wall time where ``execution`` recorded it, else the sum)."""
    import html

    rows = floor_rows(timings, execution)
    if not rows:
        return "<p>No chapter of this build has recorded its forward passes yet.</p>"
    models = {t.get("model") for t in timings.values() if "forward_seconds" in t}

    def ratio(value):
        return f"{value:.1f}" if value is not None else "no forward pass"

    body = "".join(f"<tr><td>{html.escape(r['chapter'])}</td><td>{r['seconds']:.0f}</td>"
                   f"<td>{r['forward_seconds']:.0f}</td><td>{ratio(r['ratio'])}</td></tr>" for r in rows)
    return ('<table class="build-timings"><thead><tr><th>chapter</th><th>wall time (s), one-time work '
            'excluded</th><th>forward passes (s)</th><th>wall / forward</th></tr></thead>'
            f"<tbody>{body}</tbody></table>"
            + _execution_sentence(timings, execution) + _goal_sentence(rows[-1]["ratio"]) +
            f"<p>Primary model of the chapters: {html.escape(', '.join(sorted(m for m in models if m)))}. "
            "Each chapter's time at its last execution (a chapter taken from the execution cache keeps "
            "the time of the build that executed it).</p>")


def _execution_sentence(timings: dict[str, dict], execution: dict | None) -> str:
    """How the chapters were executed: side by side (and what that took), or one after the other."""
    if wall_row(timings, execution) is None:
        return ("<p>The chapters' times are summed: no record shows them executed together in one "
                "run (they ran one after the other, or in different builds).</p>")
    executed = execution["executed_seconds"]
    return (f"<p>The chapters were executed {execution['chapters_at_once']} at a time "
            f"({execution['threads_each']} torch thread{'s' if execution['threads_each'] != 1 else ''} each; "
            f"{', '.join(execution.get('alone_last', [])) or 'none'} alone at the end): their own times add "
            f"up to {sum(executed.values()):.0f} s, and the run took {execution['wall_seconds']:.0f} s "
            "of wall time. A chapter's time includes the slowdown of sharing the machine with "
            "another.</p>")


def _goal_sentence(ratio: float | None) -> str:
    """Whether the book's wall / forward ratio met :data:`~normlimits.core.protocol.BOOK_FLOOR_GOAL`."""
    if ratio is None:
        return "<p>No forward pass was timed, so the book's overhead cannot be stated.</p>"
    met = "met" if ratio <= BOOK_FLOOR_GOAL else "missed"
    return (f"<p>The whole book ran at {ratio:.2f} times its forward passes; the goal, at most "
            f"{BOOK_FLOOR_GOAL:g} times, is {met}.</p>")


def format_table(timings: dict[str, dict], execution: dict | None = None) -> str:
    """One line per chapter: seconds, budget, and a mark when over twice the budget; then the
    total, and the wall time of the run that executed them side by side where ``execution``
    recorded one (:func:`wall_row`)."""
    lines = [f"{'chapter':<14} {'seconds':>8} {'budget':>7} {'forward':>8} {'wall/fwd':>8}  model"]
    floor = {r["chapter"]: r for r in floor_rows(timings)}
    for ch, t in timings.items():
        budget = CHAPTER_BUDGET_SECONDS.get(ch)
        mark = "  OVER 2x BUDGET" if over_budget({ch: t}) else ""
        once = t.get("one_time_seconds", 0.0)
        note = f"  (of which one-time work {once:.1f} s: training or conversion, cached now)" if once else ""
        runs = t.get("replica_seconds", {})
        if "replica_wall_seconds" in t and runs:     # together (run side by side, they overlap)
            note += (f"  (of which replicas, wall time {t['replica_wall_seconds']:.1f} s: "
                     + ", ".join(f"on {label} {s:.1f} s" for label, s in runs.items()) + ")")
        else:
            note += "".join(f"  (of which replica on {label} {s:.1f} s)" for label, s in runs.items())
        fwd = floor.get(ch)
        forward = f"{fwd['forward_seconds']:>8.1f}" if fwd else f"{'-':>8}"
        ratio = f"{fwd['ratio']:>8.1f}" if fwd and fwd["ratio"] is not None else f"{'-':>8}"
        lines.append(f"{ch:<14} {t['seconds']:>8.1f} {budget if budget else '-':>7} {forward} {ratio}  "
                     f"{t['model']}{mark}{note}")
    total = f"{'total':<14} {sum(t['seconds'] for t in timings.values()):>8.1f}"
    book = floor.get("book")
    if book and book["ratio"] is not None:
        total += (f"  (one-time work excluded: {book['seconds']:.1f} s, of which forward passes "
                  f"{book['forward_seconds']:.1f} s: {book['ratio']:.2f} x the floor)")
    lines.append(total)
    wall = wall_row(timings, execution)
    if wall is not None:
        lines.append(f"{'wall time':<14} {execution['wall_seconds']:>8.1f}  ({execution['chapters_at_once']} "
                     f"chapters at once, {execution['threads_each']} thread(s) each; one-time work "
                     f"excluded: {wall['seconds']:.1f} s, {wall['ratio']:.2f} x the forward passes)"
                     if wall["ratio"] is not None else
                     f"{'wall time':<14} {execution['wall_seconds']:>8.1f}  ({execution['chapters_at_once']} "
                     "chapters at once)")
    return "\n".join(lines + slowest_cell_lines(timings, execution))


def slowest_cell_lines(timings: dict[str, dict], execution: dict | None) -> list[str]:
    """Where each chapter of ``timings`` spent its time, from the execution record's slowest cells
    (:mod:`normlimits.book.execute_chapters`): a heading, then one line per chapter with its
    slowest cell (index, seconds, first line of code) and what the next ones took; no lines when the
    record kept no cells for them."""
    cells = (execution or {}).get("slowest_cells") or {}
    lines = []
    for ch in timings:
        top = cells.get(ch)
        if top:
            rest = ", ".join(f"{c['seconds']:.1f}" for c in top[1:])
            lines.append(f"  {ch:<14} cell {top[0]['cell']}: {top[0]['seconds']:.1f} s ({top[0]['line']})"
                         + (f"; next: {rest} s" if rest else ""))
    return ["slowest cells (seconds each, as executed by make book):", *lines] if lines else []


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    folder = Path(args[0]) if args else None
    timings = read_timings(folder)
    print(format_table(timings, read_execution(folder)) if timings else "no chapter timings recorded yet")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
