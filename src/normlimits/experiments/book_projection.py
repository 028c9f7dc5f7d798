"""The whole book's execution time at a model's size, projected from two measured builds.

A chapter's time is, to first order, a fixed part (derivations, synthetic experiments, plots, the
architectures chapter's survey of the two stand-ins, whatever the model setting) plus a part that
grows with the cost of the model's forward passes and metrics, which ``make bench`` measures in one
number: the loop time of its five workloads (the ``total`` row's ``seconds``). Two strict builds of
the book measured on one machine, one per model size, each beside a bench run on the same model,
fix both parts of every chapter (:data:`CALIBRATION`, :func:`chapter_lines`); a bench run on any
model then projects the book at that model's size (:func:`project`).

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
#: chapter seconds less one-time training, each with its stand-in replica where it has one).
CALIBRATION: tuple[BuildRecord, BuildRecord] = (
    BuildRecord("standin", bench_seconds=3.4,
                chapters={"alternatives": 44.2, "architectures": 164.8, "cost": 6.7, "distances": 12.1,
                          "gradients": 8.6, "separability": 18.0, "setup": 3.3, "standin": 1.9,
                          "vanishing": 3.4},
                note="strict build with NORMLIMITS_MODEL=standin from an empty execution cache, "
                     "2026-12-05 01:32 UTC (commit 275f29b; 316 s wall; the architectures chapter's "
                     "survey of SmolLM2-135M on four texts and of the two stand-ins, 165 s, does not "
                     "depend on the setting); bench loop on the stand-in 3.4 s right after"),
    BuildRecord("gpt2-random", bench_seconds=37.0,
                chapters={"alternatives": 732.3, "architectures": 167.8, "cost": 46.4, "distances": 174.3,
                          "gradients": 45.6, "separability": 136.5, "setup": 28.8, "standin": 1.8,
                          "vanishing": 17.4},
                note="strict build with NORMLIMITS_MODEL=gpt2-random from an empty execution cache, "
                     "2026-12-05 01:04 UTC on an idle machine (commit 275f29b; 1446 s wall; the "
                     "alternatives chapter holds the removal experiment on 8 windows, about 42,000 "
                     "forward tokens per window). Bench loop 37.0 s right after (32.6 s and 40.0 s in "
                     "two more runs: the forward passes took 17.5, 13.5 and 20.4 s, the metrics "
                     "19.5, 19.1 and 19.5 s)"),
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
    return (f"Whole book at this size, projected: {projected['total'] / 60:.1f} min ({parts}); "
            f"linear per chapter between the measured builds on "
            f"{' and '.join(b.model for b in calibration)} (normlimits.experiments.book_projection).")
