"""The whole book's execution time at a model's size, projected from two measured builds.

A chapter's time is, to first order, a fixed part (derivations, synthetic experiments, plots, the
replays on the control models and the architectures chapter's surveys, whatever the model setting)
plus a part that grows with the cost of the model's forward passes and metrics, which ``make bench``
measures in one number: the loop time of its five workloads (the ``total`` row's ``seconds``).
Two strict builds of the book measured on one machine, one per model size, each beside a bench run
on the same model, fix both parts of every chapter (:data:`CALIBRATION`, :func:`chapter_lines`); a
bench run on any model then projects the book at that model's size (:func:`project`).

The calibration builds executed the chapters one after the other, each on both threads, so the
projection is of that (``NORMLIMITS_CHAPTERS_AT_ONCE=1``); ``make book`` now executes them side by
side (:mod:`normlimits.book.execute_chapters`), and its wall time is in the build's timings.

This is a projection, not a measurement: it assumes each chapter's model-dependent part scales
like the bench's loop (the chapters run the same code paths on the same windows); it is exact at
the larger calibration build, and at the smaller one unless a chapter grew faster than in
proportion (see :func:`chapter_lines`). The calibration numbers are recorded measurements
(as the stand-in's diary is): when a chapter changes much, measure both builds again and replace
them.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["BuildRecord", "CALIBRATION", "chapter_lines", "project", "format_projection"]


@dataclass(frozen=True)
class BuildRecord:
    """One measured strict build: the ``model`` setting, the bench's loop seconds on that model
    (``bench_seconds``), every chapter's execution seconds less one-time training (``chapters``),
    and where and when it was measured (``note``)."""

    model: str
    bench_seconds: float
    chapters: dict
    note: str


#: The two builds the projection is fitted on (2 cores, 8 windows, the development machine;
#: chapter seconds less one-time training, replicas included: SmolLM2-135M and Gemma 3 270M in
#: both builds, the stand-in too in the GPT-2-size one). Each bench time is the median of three
#: runs beside its build (right after the GPT-2-size one, right before the stand-in's). The
#: machine's bench varied much that day (gpt2-random: 68.7, 67.6 and 53.0 s after the build,
#: 81.9 s half an hour later, and 84.2 s for commit 275f29b's code beside it, which had given
#: 37.0 s on 2026-12-05), so a projection is a rough guide.
CALIBRATION: tuple[BuildRecord, BuildRecord] = (
    BuildRecord("standin", bench_seconds=7.2,
                chapters={"alternatives": 141.5, "architectures": 343.4, "cost": 25.8, "distances": 284.0,
                          "gradients": 242.2, "separability": 207.3, "setup": 25.8, "standin": 4.7,
                          "vanishing": 81.8},
                note="strict build with NORMLIMITS_MODEL=standin from an empty execution cache, "
                     "2026-12-06 22:22 UTC on an idle machine (commit 488a68f; 1453 s wall; the "
                     "replicas on SmolLM2-135M and Gemma 3 270M, 662 s side by side, and the "
                     "architectures chapter's surveys do not depend on the setting); bench loop on "
                     "the stand-in 6.9, 7.2 and 7.2 s right before"),
    BuildRecord("gpt2-random", bench_seconds=67.6,
                chapters={"alternatives": 373.2, "architectures": 406.1, "cost": 109.4, "distances": 318.1,
                          "gradients": 280.1, "separability": 197.0, "setup": 51.2, "standin": 4.9,
                          "vanishing": 105.5},
                note="strict build with NORMLIMITS_MODEL=gpt2-random from an empty execution cache, "
                     "2026-12-06 21:54 UTC on an idle machine (commit 488a68f; 1969 s wall; the "
                     "removal experiment stopped at its first look, 2 windows; replicas on SmolLM2, "
                     "Gemma 3 and the stand-in, 643 s side by side). Bench loop 68.7, 67.6 and 53.0 s "
                     "right after (forward passes 15.8, 17.2 and 11.6 s; metrics 52.9, 50.4 and 41.4 s)"),
)


def chapter_lines(calibration: tuple[BuildRecord, BuildRecord] = CALIBRATION) -> dict[str, tuple[float, float]]:
    """Each chapter's ``(fixed seconds, seconds per bench second)``: the line through its times in
    the two builds against their bench times. Neither part goes below zero: a chapter that was
    faster on the larger model is held at its larger time, and one that grew faster than in
    proportion is taken as proportional through the larger build (exact there, above the smaller)."""
    small, large = sorted(calibration, key=lambda b: b.bench_seconds)
    if not large.bench_seconds > small.bench_seconds:
        raise ValueError("the two calibration builds need different bench times")
    lines = {}
    for chapter in sorted(set(small.chapters) | set(large.chapters)):
        a, b = small.chapters.get(chapter, 0.0), large.chapters.get(chapter, 0.0)
        slope = max(0.0, (b - a) / (large.bench_seconds - small.bench_seconds))
        fixed = max(a, b) if slope == 0.0 else b - slope * large.bench_seconds
        if fixed < 0:
            fixed, slope = 0.0, b / large.bench_seconds
        lines[chapter] = (fixed, slope)
    return lines


def project(bench_seconds: float, calibration: tuple[BuildRecord, BuildRecord] = CALIBRATION) -> dict[str, float]:
    """Projected seconds of every chapter, and ``total``, for a model whose bench loop took
    ``bench_seconds`` on this machine."""
    if not bench_seconds > 0:
        raise ValueError(f"bench_seconds must be > 0 (got {bench_seconds})")
    chapters = {ch: fixed + slope * bench_seconds for ch, (fixed, slope) in chapter_lines(calibration).items()}
    return {**chapters, "total": sum(chapters.values())}


def format_projection(projected: dict[str, float], calibration: tuple[BuildRecord, BuildRecord] = CALIBRATION) -> str:
    """Two lines for the bench's output: the projected total and each chapter's share."""
    parts = ", ".join(f"{ch} {s:.0f} s" for ch, s in projected.items() if ch != "total")
    return (f"Whole book at this size, projected with the chapters one after the other: "
            f"{projected['total'] / 60:.1f} min ({parts}); linear per chapter between the measured "
            f"builds on {' and '.join(b.model for b in calibration)} "
            "(normlimits.experiments.book_projection). make book executes them side by side "
            "(normlimits execute-chapters), which this projection does not model.")
