"""A claim of the paper as the book grades it (the registry's entry type)."""

from __future__ import annotations

from dataclasses import dataclass, field

from normlimits.claims.rules import Criterion, Rule

#: whose statement a claim is (see :class:`Claim`); only ``paper`` claims count as the paper's
CLAIM_KINDS = ("paper", "premise", "book", "cited")
#: what a claim is about: a universal statement, or GPT-2's own measurements
ABOUT = ("general", "gpt2")

#: the identity criterion of a claim about GPT-2's measurements (``about="gpt2"``): 1 on the
#: paper's GPT-2 124M, 0 on any other model; its rule gives "refuted" only where it holds
#: (:func:`normlimits.claims.check_gpt2_policy`)
PAPER_MODEL = Criterion("paper_model", "1 when measured on the paper's GPT-2 124M, 0 on any other "
                        "model (a setting of the build)", "==", 1, kind="identity")


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

    ``kind`` (:data:`CLAIM_KINDS`): whose statement it is. ``paper``: a claim the paper makes,
    counted in the bottom line as the paper's; ``premise``: an assumption the paper states in
    order to conclude something (graded, shown beside its conclusion, never counted as a claim);
    ``book``: a statement of the book's own (a sharpened bound, a diagnostic it adds); ``cited``:
    a claim of another paper that the book tests. Only ``paper`` claims are counted as the
    paper's.

    ``about`` (:data:`ABOUT`): ``general`` for a claim worded universally (a bound, a trend the
    paper asserts of softmax attention), graded as such on any model; ``gpt2`` for a claim that
    names GPT-2's own measurements (a figure's number, "GPT-2 operates ..."): on another model it
    can be "not reproduced" but never "refuted", which the registry checks on its rule
    (:func:`normlimits.claims.check_gpt2_policy`).
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
    kind: str = "paper"
    about: str = "general"

    def __post_init__(self) -> None:
        for name in ("id", "chapter", "section", "claim", "paper"):
            if not str(getattr(self, name)).strip():
                raise ValueError(f"claim {self.id!r}: field {name!r} is empty")
        if self.kind not in CLAIM_KINDS:
            raise ValueError(f"claim {self.id!r}: kind {self.kind!r} is not one of {CLAIM_KINDS}")
        if self.about not in ABOUT:
            raise ValueError(f"claim {self.id!r}: about {self.about!r} is not one of {ABOUT}")
