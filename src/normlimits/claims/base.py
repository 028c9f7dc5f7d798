"""A claim of the paper as the book grades it (the registry's entry type)."""

from __future__ import annotations

from dataclasses import dataclass, field

from normlimits.claims.rules import Rule


@dataclass(frozen=True)
class Claim:
    """One claim of the paper (or a claim the book adds, say so in ``paper``).

    ``claim``: a few words for the Verdicts page (MyST, ``$math$`` allowed); ``paper``: the
    paper's wording, quoted or faithfully paraphrased, with its place; ``scope``: what range the
    verdict covers (required for asymptotic claims, e.g. "at L ≤ 1024"); ``premise``: for one half
    of a conditional claim, the id of the other half (the premise and the conclusion are graded
    separately); ``paper_value``: what the paper reports, in a few words beside the measured
    numbers on the Verdicts page (its number where it gives one, "≈ 0.06 L"; else the form of its
    statement, "a bound, no number"; "not in the paper" for the book's own statements).
    """

    id: str
    chapter: str
    section: str
    claim: str
    paper: str
    rule: Rule
    scope: str = ""
    premise: str = ""
    tags: tuple[str, ...] = field(default_factory=tuple)
    paper_value: str = ""

    def __post_init__(self) -> None:
        for name in ("id", "chapter", "section", "claim", "paper"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"claim {self.id!r}: field {name!r} is empty")
