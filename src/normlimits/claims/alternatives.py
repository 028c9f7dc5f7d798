"""Claims graded by the alternatives chapter (paper Section 4: the alternatives and guidelines).

Thirteen alternative normalisers (twelve families; top-k in two sizes) on the paper's four
yardsticks, one claim per (normaliser, yardstick) with the id ``ALT-<key>-<yardstick>``: the
rules are the same for every normaliser, so they are written once per yardstick. Where the paper
recommends a normaliser the claim carries its words; for normalisers it does not discuss (most
were published after it) the claim is the book's question, and says so. Then SSMax's critical
scale, the removal experiment of the authors' follow-up and the top-k guideline.
"""

from __future__ import annotations

import math

from normlimits.core.protocol import (
    ALT_DECOUPLING_FACTOR, ALT_EXPONENT_GAIN, ALT_FLAT_EXPONENT, ALT_GAMMA_REGIME,
    ALT_SEPARABILITY_MARGIN, REMOVAL_EXPONENT_BAND, REMOVAL_PREDICT_FACTOR, REMOVAL_RENORM_FACTOR,
    REMOVAL_TOLERANCE, SEPARABILITY_KNEE)
from normlimits.claims.base import Claim
from normlimits.claims.rules import Criterion, Rule

CHAPTER = "alternatives"

#: the alternatives graded, in the chapter's order: (key, label for the claims page)
ALTERNATIVES = (
    ("sparsemax", "sparsemax"), ("entmax15", "1.5-entmax"), ("ssmax", "SSMax"),
    ("softmax1", "softmax$_1$"), ("adaptive", "adaptive temperature"), ("sa-softmax", "SA-softmax"),
    ("softpick", "softpick"), ("sigmoid", "sigmoid attention"), ("stickbreaking", "stick-breaking"),
    ("asentmax", "ASEntmax"), ("topk-sqrt", "top-$k$ softmax with $k = \\sqrt{L}$ (rounded up)"),
    ("topk-log2", "top-$k$ softmax with $k = \\log_2 L$ (rounded up)"), ("sink", "a sink logit per head"),
)
#: the four yardsticks, in the table's order
YARDSTICKS = ("vanishing", "distance", "separability", "gradient")

_RECOMMENDED = ('"Prefer normalisers that decouple selectivity from gradient health: Sparsemax, '
                'SS-Max, SA-Softmax" (Section 4, guideline 3)')
_SPARSE = ("Section 4 cites sparsity-inducing rules (sparsemax, $\\alpha$-entmax) as an answer to "
           "softmax's limits; guideline 1: \"prefer top-k or sparse attention when $L \\gg k$\"")
_LENGTH = ('Section 4: SS-Max multiplies the logits by $\\log L$ "so the largest weight stays roughly '
           'constant as $L$ grows"; guideline 2: "switching to a length-aware normaliser can restore '
           'separability"')
_COLLAPSE = ("Section 4: the distance collapse (when $N$ grows in proportion to $L$) is the paper's "
             "reason \"sparse or length-aware rules help with long contexts\"")
_SCOPE = ("the model's own logits with only the normaliser swapped (a model trained with softmax), "
          "$L \\le 1024$")

#: which of the paper's statements speaks to (normaliser, yardstick); absent: the book's question
_PAPER = {
    ("sparsemax", "vanishing"): _SPARSE, ("entmax15", "vanishing"): _SPARSE,
    ("ssmax", "vanishing"): _LENGTH,
    ("sparsemax", "distance"): _COLLAPSE, ("entmax15", "distance"): _COLLAPSE,
    ("ssmax", "distance"): _COLLAPSE, ("topk-sqrt", "distance"): _COLLAPSE,
    ("topk-log2", "distance"): _COLLAPSE,
    ("ssmax", "separability"): _LENGTH, ("sparsemax", "separability"): _SPARSE,
    ("topk-sqrt", "separability"): _SPARSE, ("topk-log2", "separability"): _SPARSE,
    ("sparsemax", "gradient"): _RECOMMENDED, ("ssmax", "gradient"): _RECOMMENDED,
    ("sa-softmax", "gradient"): _RECOMMENDED,
}

_CLAIM_TEXT = {
    "vanishing": "{label} escapes vanishing attention",
    "distance": "{label} delays the distance collapse",
    "separability": "{label} separates more of its top $N$ than softmax",
    "gradient": "{label} pays less gradient for the same selectivity",
}
_QUESTION = {
    "vanishing": "does its largest weight stay flat as $L$ grows (Lemma 1's $O(1/L)$ escaped)?",
    "distance": "is its top-$N$ set distinct from a random $N$-subset for larger $N/L$ than softmax's?",
    "separability": "is its fraction $N_s/N$ of distinguishable top-$N$ tokens above softmax's?",
    "gradient": "is its Jacobian norm at most half softmax's at the same selectivity?",
}

RULES = {
    "vanishing": Rule(
        criteria=(
            Criterion("exponent", "median over heads of the fitted exponent of the mean largest "
                      "weight against $L$ ($L$ = 32..1024)", ">=", ALT_FLAT_EXPONENT),
            Criterion("gain", "that exponent minus softmax's on the same logits", ">=",
                      ALT_EXPONENT_GAIN),
        ),
        outcomes=(("all", "confirmed"), ("all:gain", "partial"), ("else", "refuted")),
        headline="exponent",
        text=(f"confirmed when the largest weight stays flat (exponent $\\ge {ALT_FLAT_EXPONENT}$) "
              f"and falls slower than softmax's (by at least {ALT_EXPONENT_GAIN} in the exponent); "
              "partial when it only falls slower than softmax's (it slows vanishing attention "
              "without escaping it)"),
    ),
    "distance": Rule(
        criteria=(
            Criterion("later", "$\\log_2$ of its critical $N$ over softmax's (Figure 2c's KS test "
                      "of true against expected distance across heads; no $N$ of the grid: twice the "
                      "largest $N$, a lower bound)", ">=", 1.0),
        ),
        outcomes=(("all", "confirmed"), ("else", "refuted")),
        headline="later",
        text="confirmed when its critical $N$ is at least twice softmax's (one step of the grid)",
    ),
    "separability": Rule(
        criteria=(
            Criterion("support", "median over heads of the median number of keys with non-zero "
                      "weight in the separability rows (the proposition $N_s\\le|S|$ caps "
                      f"$N_s/N$ at $|S|/N$ above the support)", ">=", SEPARABILITY_KNEE,
                      kind="scope"),
            Criterion("every", f"share of the grid's $N \\ge {SEPARABILITY_KNEE}$ within that "
                      f"support where its $N_s/N$ exceeds softmax's by at least "
                      f"{ALT_SEPARABILITY_MARGIN}", ">=", 1.0),
            Criterion("some", "the same share", ">", 0.0),
        ),
        outcomes=(("all:every", "confirmed"), ("all:some", "partial"), ("else", "refuted")),
        headline="every",
        text=(f"not testable where the median support is below $N = {SEPARABILITY_KNEE}$ (above its "
              "support a normaliser's $N_s/N$ is capped at $|S|/N$ by construction, so the "
              "comparison says nothing about separability); there, confirmed when $N_s/N$ beats "
              f"softmax's by {ALT_SEPARABILITY_MARGIN} at every $N \\ge {SEPARABILITY_KNEE}$ of "
              "the grid (the paper's knee) within the support, partial when at some, refuted "
              "when at none"),
    ),
    "gradient": Rule(
        criteria=(
            Criterion("every", f"share of the matched temperatures where its Jacobian norm is at most "
                      f"{ALT_DECOUPLING_FACTOR} of softmax's at the same selectivity (mean largest "
                      "weight)", ">=", 1.0),
            Criterion("some", "the same share", ">", 0.0),
        ),
        outcomes=(("all:every", "confirmed"), ("all:some", "partial"), ("else", "refuted")),
        headline="every",
        text=(f"confirmed when the norm is at most {ALT_DECOUPLING_FACTOR} of softmax's at every "
              "matched selectivity, partial when at some, refuted when at none"),
    ),
}


def claim_id(key: str, yardstick: str) -> str:
    """The id of the claim on normaliser ``key`` and ``yardstick``: ``ALT-<key>-<yardstick>``."""
    return f"ALT-{key}-{yardstick}"


def _yardstick_claims() -> list[Claim]:
    out = []
    for key, label in ALTERNATIVES:
        for yardstick in YARDSTICKS:
            paper = _PAPER.get((key, yardstick)) or (
                f"Not in the paper (it does not discuss {label}): the book's question, "
                + _QUESTION[yardstick])
            # kind: the paper's claim where its Section 4 speaks to this normaliser and yardstick
            # (its recommendation, in its words), else the book's own question; about: general
            out.append(Claim(
                id=claim_id(key, yardstick), chapter=CHAPTER,
                kind="paper" if (key, yardstick) in _PAPER else "book", about="general",
                section="Sec. 4" if (key, yardstick) in _PAPER else "Sec. 4 (book's question)",
                claim=_CLAIM_TEXT[yardstick].format(label=label), paper=paper,
                rule=RULES[yardstick], scope=_SCOPE, tags=("alternatives", key, yardstick)))
    return out


_LOW, _HIGH = ALT_GAMMA_REGIME
_E_LOW, _E_HIGH = REMOVAL_EXPONENT_BAND

CLAIMS = tuple(_yardstick_claims()) + (
    Claim(
        id="ALT-gamma", chapter=CHAPTER, section="Sec. 4 (length-aware rescaling); arXiv 2510.05554",
        # kind: another paper's theorem (Chen, Lin, Polyanskiy and Rigollet), cited and tested
        kind="cited", about="general",
        claim="SSMax changes regime at the critical scale $\\gamma_c$",
        paper=("Chen, Lin, Polyanskiy and Rigollet (2026) prove a phase transition of the logit "
               "scale $\\beta_n = \\gamma\\log n$ at a critical $\\gamma_c$ (= $1/(1-\\rho)$ for "
               "simplex tokens): uniform attention below it, one key above it. The paper cites "
               "SS-Max's $\\log L$ scaling without a critical value."),
        scope=("$\\gamma_c$ per row: the scale at which the top key holds half the mass (the "
               "simplex model's $\\gamma_c$ at finite $n$); rows of $L$ = 32..1024 keys of the "
               "model, every window of the chapter; the claim is asymptotic ($n\\to\\infty$), "
               "so the levels at $L = 1024$ are read with the trends over $L$"),
        rule=Rule(
            criteria=(
                Criterion("below", "mean largest weight at $L = 1024$ with $\\gamma = \\gamma_c/2$",
                          "<=", _LOW),
                Criterion("above", "mean largest weight at $L = 1024$ with $\\gamma = 2\\gamma_c$",
                          ">=", _HIGH),
                Criterion("falls", "fitted exponent against $L$ of the mean largest weight at "
                          "$\\gamma_c/2$ (negative: toward uniform as $L$ grows)", "<", 0.0),
                Criterion("rises", "fitted exponent against $L$ of one minus the mean largest "
                          "weight at $2\\gamma_c$ (negative: toward one key)", "<", 0.0),
            ),
            outcomes=(("all", "confirmed"), ("all:falls,rises", "not reproduced"),
                      ("else", "refuted")),
            headline="above",
            text=(f"each criterion decided by its Student t interval over the windows; confirmed "
                  f"when halving the critical scale leaves the rows diffuse (mean largest weight "
                  f"$\\le {_LOW}$ at $L = 1024$) and doubling it concentrates them ($\\ge {_HIGH}$), "
                  "both moving toward their limits as $L$ grows; not reproduced when both move "
                  "toward their limits but a level has not reached its cut-off by $L = 1024$ (the "
                  "transition is asymptotic: one finite length cannot refute it); refuted when a "
                  "trend goes away from its limit"),
        ),
    ),
    Claim(
        id="ALT-REM-size", chapter=CHAPTER, section="arXiv 2609.37879 (the authors' follow-up)",
        # kind: the follow-up paper's claim, cited and tested
        kind="cited", about="general",
        claim="Few attended tokens keep the loss; their share falls as the context grows",
        paper=("The follow-up: \"Relatively small selected sets can keep NLL close to the "
               "full-attention baseline\"; \"extending context while evaluating the same prediction "
               "targets increases the required set size, while its fraction of context decreases\"."),
        scope=(f"the stand-in or GPT-2, top-$N$ kept at every layer, head and query without "
               f"renormalising, $\\tau$ = {REMOVAL_TOLERANCE} nats per token, $L$ = 128..1024"),
        rule=Rule(
            criteria=(
                Criterion("grows", "fitted exponent of $N^*_\\tau$ against $L$", ">=", _E_LOW),
                Criterion("sublinear", "the same exponent", "<=", _E_HIGH),
            ),
            outcomes=(("all", "confirmed"), ("else", "refuted")),
            headline="grows",
            text=(f"confirmed when $N^*_\\tau$ grows with $L$ (exponent $\\ge {_E_LOW}$) while its "
                  f"share $N^*_\\tau/L$ falls (exponent $\\le {_E_HIGH}$)"),
        ),
    ),
    Claim(
        id="ALT-REM-renorm", chapter=CHAPTER, section="arXiv 2609.37879 (the authors' follow-up)",
        # kind: the follow-up paper's claim, cited and tested
        kind="cited", about="general",
        claim="Renormalising the kept weights needs fewer tokens",
        paper=("The follow-up: \"Renormalizing the retained weights can substantially reduce the "
               "required set size\"."),
        scope=f"as ALT-REM-size; $\\tau$ = {REMOVAL_TOLERANCE} nats per token",
        rule=Rule(
            criteria=(
                Criterion("halves", "median over $L$ of $N^*_\\tau$ renormalised over $N^*_\\tau$ "
                          "deleted", "<=", REMOVAL_RENORM_FACTOR),
                Criterion("reduces", "the same ratio", "<", 1.0),
            ),
            outcomes=(("all", "confirmed"), ("all:reduces", "partial"), ("else", "refuted")),
            headline="halves",
            text=(f"confirmed when renormalising cuts $N^*_\\tau$ at least {1 / REMOVAL_RENORM_FACTOR:g}-fold "
                  "(median over lengths), partial when it only reduces it"),
        ),
    ),
    Claim(
        id="ALT-REM-predict", chapter=CHAPTER, section="Sec. 3.1, Fig. 2c; Sec. 4, guideline 1",
        # kind: the book's own question ("the book tests whether that critical N is the number of
        # tokens the model needs"), joining the paper's critical N to the follow-up's N*; not a
        # statement either paper makes
        kind="book", about="general",
        claim="Figure 2c's critical $N$ predicts how many tokens the model needs",
        paper=("\"Only a small subset of tokens can be separated before attention behaves as if its "
               "weights were uniform\" (critical $N \\approx 0.06L$); guideline 1: \"keep the active "
               "set small ... selecting more gives diminishing returns\". The book tests whether "
               "that critical $N$ is the number of tokens the model needs, $N^*_\\tau$."),
        scope=(f"critical $N$ from the distances chapter's search (softmax, KS at $\\alpha$ = 0.01); "
               f"$N^*_\\tau$ without renormalising, $\\tau$ = {REMOVAL_TOLERANCE}; lengths where both exist"),
        rule=Rule(
            criteria=(
                Criterion("log_ratio", "median over $L$ of $|\\log_2(N^*_\\tau / N_{\\mathrm{crit}})|$",
                          "<=", math.log2(REMOVAL_PREDICT_FACTOR)),
            ),
            outcomes=(("all", "confirmed"), ("else", "refuted")),
            headline="log_ratio",
            text=(f"confirmed when the two agree within a factor {REMOVAL_PREDICT_FACTOR:g} "
                  "(median over the lengths)"),
        ),
    ),
    Claim(
        id="ALT-TOPK", chapter=CHAPTER, section="Sec. 4, Conclusion (take-away 1)",
        # kind: the paper's take-away, in its words; about: general
        kind="paper", about="general",
        claim="A top-$k$ that grows sub-linearly in $L$ keeps the model's loss",
        paper=("\"Limit the top-k set to a sub-linear function of context length\" (Conclusion); "
               "guideline 1: \"prefer top-k or sparse attention when $L \\gg k$\"."),
        scope=(f"top-$k$ softmax at every layer and head of the model (delete and renormalise), "
               f"$\\tau$ = {REMOVAL_TOLERANCE} nats per token, $L$ = 128..1024"),
        rule=Rule(
            criteria=(
                Criterion("sqrt_loss", "largest loss increase over $L$ with $k = \\sqrt{L}$ rounded up "
                          "(nats per token)", "<=", REMOVAL_TOLERANCE),
                Criterion("exponent", "fitted exponent of the $k$ needed ($N^*_\\tau$ renormalised) "
                          "against $L$", "<=", _E_HIGH),
            ),
            outcomes=(("all", "confirmed"), ("all:exponent", "partial"), ("else", "refuted")),
            headline="sqrt_loss",
            text=(f"confirmed when $k = \\sqrt{{L}}$ (rounded up) keeps the loss within $\\tau$ at every "
                  f"$L$ and the $k$ needed grows sub-linearly (exponent $\\le {_E_HIGH}$); partial "
                  "when the $k$ needed is sub-linear but $\\sqrt L$ is not enough"),
        ),
    ),
)
