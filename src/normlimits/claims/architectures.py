"""The claim graded by the architectures chapter: the limits belong to softmax, not to GPT-2."""

from __future__ import annotations

from normlimits.claims.base import Claim
from normlimits.claims.rules import Criterion, Rule

CHAPTER = "architectures"

#: the yardstick claims whose verdicts are compared across architectures (the audit's rows)
COMPARED = ("NU", "C1", "F2c", "F2a", "F3", "F4", "EPS")

CLAIMS = (
    Claim(
        id="ARCH", chapter=CHAPTER, section="Sec. 3, experimental setup (scope of the experiments)",
        # kind: the book's own question (the paper discusses no other architecture); general
        kind="book", about="general",
        claim="The measured limits are properties of softmax attention, not of GPT-2's architecture",
        paper=("The bounds are stated for the normaliser alone (Lemma 1 for any positive $F$, "
               "Theorems 1-3 for softmax); the experiments use GPT-2 124M only, and the authors "
               "say that larger variants of the GPT-2 family gave qualitatively identical trends, "
               "and show none. Other architectures are not discussed."),
        scope=("the two stand-ins, which differ only in architecture (learned absolute positions "
               "against rotary positions with grouped-query attention; same size, corpus, split, "
               "window shapes, seed and training code; the RoPE stand-in takes 30% of the steps), over the seven yardstick claims "
               f"{', '.join(COMPARED)}; online, each further model against GPT-2 124M as a variant"),
        rule=Rule(
            criteria=(
                Criterion("agreement", "share of the yardstick claims graded the same on both "
                          "models (same verdict by the registered rule)", ">=", 1.0),
                Criterion("majority", "the same share, against one half", ">=", 0.5),
            ),
            outcomes=(("all", "confirmed"), ("all:majority", "partial"), ("else", "refuted")),
            headline="agreement",
            text=("confirmed when every yardstick claim gets the same verdict on both models "
                  "(qualitatively identical trends, the paper's own words for its variants); "
                  "partial when at least half do (the differing claims are named); refuted "
                  "otherwise"),
        ),
    ),
)
