"""Measuring more windows only while a registered criterion is undecided: looks fixed in advance.

An experiment whose cost is its forward passes (the alternatives chapter's removal experiment)
is measured on a pre-declared, increasing sequence of window counts, the *looks* (for example 2,
4, 8). After each look its criteria are graded with intervals whose coverage is corrected for the
number of looks (Bonferroni: each look's intervals at ``1 - (1 - level) / looks``, so that the
chance that any look's interval misses is at most ``1 - level``), and the measurement stops at the
first look where no registered criterion is undecided. A criterion still undecided at the last
look stays undecided (its verdict is "inconclusive"); it is never forced.

The stopping decision depends only on the registered criteria (the ``decided`` function given
here), never on wall time or on how the values look otherwise, and the looks are fixed before any
data are seen (:func:`run_looks` takes them as an argument and measures exactly them, in order).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generic, Sequence, TypeVar

from normlimits.core.bootstrap import LEVEL

__all__ = ["bonferroni_level", "check_looks", "SequentialRun", "run_looks"]

R = TypeVar("R")


def bonferroni_level(level: float, looks: int) -> float:
    """Each look's interval coverage so that ``looks`` looks together keep ``level``."""
    if not 0 < level < 1 or looks < 1:
        raise ValueError(f"need 0 < level < 1 and at least one look (got {level}, {looks})")
    return 1 - (1 - level) / looks


def check_looks(looks: Sequence[int]) -> tuple[int, ...]:
    """``looks`` as a tuple, or ValueError unless they are positive and strictly increasing."""
    looks = tuple(int(n) for n in looks)
    if not looks or looks[0] < 1 or any(b <= a for a, b in zip(looks, looks[1:])):
        raise ValueError(f"looks must be positive, strictly increasing window counts (got {looks})")
    return looks


@dataclass
class SequentialRun(Generic[R]):
    """What :func:`run_looks` measured: the pre-declared ``looks``, the ones ``taken`` (a prefix of
    them), each look's interval ``level``, whether the last look ``decided`` every criterion, and
    the last look's ``result``."""

    looks: tuple[int, ...]
    taken: tuple[int, ...]
    level: float
    decided: bool
    result: R

    @property
    def windows(self) -> int:
        """The windows measured (the last look taken)."""
        return self.taken[-1]

    def words(self) -> str:
        """Why the measurement stopped where it did, in a sentence."""
        planned = ", ".join(str(n) for n in self.looks)
        coverage = f"{100 * self.level:.1f}%"
        if self.decided:
            why = "every registered criterion was decided" + (
                "" if len(self.taken) == len(self.looks) else ", so the later looks were not measured")
        else:
            why = "a criterion was still undecided at the last look, the cap, so its verdict is inconclusive"
        return (f"The windows were measured in looks fixed in advance ({planned} windows), each graded "
                f"with {coverage} intervals (Bonferroni over the {len(self.looks)} looks); the "
                f"experiment stopped after {self.windows} windows: {why}.")


def run_looks(looks: Sequence[int], measure: Callable[[int, float], R], decided: Callable[[R], bool],
              level: float = LEVEL) -> SequentialRun[R]:
    """Measure ``measure(windows, look_level)`` at each look in turn, stopping at the first whose
    result ``decided`` accepts (every registered criterion decided at ``look_level``)."""
    looks = check_looks(looks)
    look_level = bonferroni_level(level, len(looks))
    result = None
    for i, count in enumerate(looks):
        result = measure(count, look_level)
        if decided(result):
            return SequentialRun(looks, looks[:i + 1], look_level, True, result)
    return SequentialRun(looks, looks, look_level, False, result)
