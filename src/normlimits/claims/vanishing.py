"""Claims graded by the vanishing-attention chapter (paper Section 2.1: Lemma 1, Corollary 1)."""

from __future__ import annotations

from normlimits.claims.base import Claim
from normlimits.core.protocol import VARIANT_EXPONENT_GAP
from normlimits.claims.rules import Criterion, Rule

CHAPTER = "vanishing"

#: NU's scope: the share of rows with L > e^(2 Delta/T) the verdict needs. Lemma 1's sharpened
#: maximum e^(2 Delta/T) / (e^(2 Delta/T) + L - 1) falls below 1/2 only once L - 1 > e^(2 Delta/T):
#: below that the lemma allows a weight near 1 and forces no decay. NU's criteria are medians
#: over heads, which speak for that regime only when at least half of the rows lie in it.
NU_REGIME_SHARE = 0.5

CLAIMS = (
    Claim(
        id="L1", chapter=CHAPTER, section="Sec. 2.1, Lemma 1",
        # kind: the paper's lemma; about: a universal bound on any length-independent normaliser
        kind="paper", about="general",
        paper_value="$C_1/L \\le \\alpha_i \\le C_2/L$ (a bound)",
        claim="Length-independent normalisers give $\\Theta(1/L)$ weights",
        paper=("Lemma 1: for $\\alpha_i = F(\\ell_i)/\\sum_j F(\\ell_j)$ with $F$ smooth, positive and "
               "not depending on $L$, and bounded logits $\\ell_i\\in[-a,a]$: "
               "$C_1/L \\le \\alpha_i \\le C_2/L$ with $C_1, C_2$ independent of $L$."),
        rule=Rule(
            criteria=(
                Criterion("outside", "weights outside the lemma's exact bounds, synthetic bounded "
                          "logits (softmax at three bounds and $F$ = softplus)", "==", 0, kind="proven"),
                Criterion("exponent", "fitted exponent of the largest weight against $L$, worst "
                          "of the uniform bounded-logit families", "between", (-1.1, -0.9)),
            ),
            outcomes=(("all", "confirmed"), ("else", "refuted")),
            headline="outside",
            text=("confirmed when no synthetic weight leaves the proven bounds and the largest "
                  "weight falls as $L^{e}$ with $e$ within 0.1 of $-1$"),
        ),
    ),
    Claim(
        id="C1", chapter=CHAPTER, section="Sec. 2.1, Corollary 1",
        # kind: the paper's corollary; about: a mathematical statement, graded as one on every
        # model (the exact three-key counterexample below decides the literal reading everywhere)
        kind="paper", about="general",
        paper_value="$e^{\\mp 2\\Delta/T}/L$ (a bound)",
        claim="Softmax weights lie within $e^{\\mp 2\\Delta/T}/L$",
        paper=("Corollary 1: $\\tfrac1L e^{-2\\Delta/T} \\le \\alpha_i \\le \\tfrac1L e^{2\\Delta/T}$ "
               "with $\\Delta = \\lVert q\\rVert\\lVert k\\rVert$."),
        rule=Rule(
            criteria=(
                Criterion("literal_outside", "fraction of the model's weights outside the bound "
                          "with the literal per-key $\\Delta_i = \\lVert q\\rVert\\lVert k_i\\rVert$",
                          "==", 0, kind="check"),
                Criterion("literal_example", "weights outside the literal per-key bound in the "
                          "exact three-key example ($q = 1$, keys $1, 0, 0$ in one dimension, "
                          "$T = 1$; sympy): a counterexample on paper, whatever the model",
                          "==", 0, kind="check"),
                Criterion("maxkey_outside", "fraction outside with $\\Delta = \\lVert q\\rVert"
                          "\\max_j\\lVert k_j\\rVert$ (logit units)", "==", 0, kind="proven"),
            ),
            outcomes=(("all", "confirmed"), ("all:maxkey_outside", "corrected"), ("else", "refuted")),
            headline="literal_outside",
            text=("confirmed when the bound holds as written (per-key $\\Delta$) on every weight of "
                  "the model and of the exact three-key example (it cannot: the example breaks it, "
                  "so the literal statement is false on every model); corrected when it holds with "
                  "$\\Delta = \\lVert q\\rVert\\max_j\\lVert k_j\\rVert$ on every weight, the "
                  "statement C1S proves"),
        ),
    ),
    Claim(
        id="C1S", chapter=CHAPTER, section="Sec. 2.1 (the book's sharpened Corollary 1)",
        # kind: the book's own result ("Not in the paper"), never counted as the paper's
        kind="book", about="general",
        paper_value="not in the paper (the book's)",
        claim="Exact softmax extremes $e^{\\pm2\\Delta/T}/(e^{\\pm2\\Delta/T}+L-1)$",
        paper=("Not in the paper: the exact, attained extremes of a softmax weight over "
               "$|\\ell_j|\\le\\Delta$, proven in this book; they imply Corollary 1."),
        rule=Rule(
            criteria=(
                Criterion("outside", "fraction of the model's and the synthetic weights outside "
                          "the sharpened bounds", "==", 0, kind="proven"),
            ),
            outcomes=(("all", "confirmed"), ("else", "refuted")),
            headline="outside",
            text=("confirmed when no measured weight leaves the sharpened bounds (proven, so a "
                  "weight outside them is a bug and stops the build)"),
        ),
    ),
    Claim(
        id="NU", chapter=CHAPTER, section="Sec. 2.1, reading of Lemma 1",
        # kind: the paper's reading of its lemma; about: worded of attention in general
        kind="paper", about="general",
        paper_value="every weight $\\Theta(1/L)$: exponent $-1$",
        claim="Attention becomes near-uniform as the context grows",
        paper=("Attention becomes almost uniform as the context grows: every weight is "
               "$\\Theta(1/L)$, so the model cannot single out the important tokens."),
        scope=("measured at $L\\le 1024$ (the model's context); the claim is asymptotic and "
               "Lemma 1 forces decay only where $L > e^{2\\Delta/T}$: the verdict is given only "
               f"where at least {NU_REGIME_SHARE:.0%} of the rows lie in that regime, and is not "
               "testable elsewhere"),
        rule=Rule(
            criteria=(
                Criterion("exponent", "median over heads of the fitted exponent of the largest "
                          "weight against $L$", "<=", -0.9),
                Criterion("entropy", "median over heads of the row entropy over $\\log L$ at the "
                          "largest $L$", ">=", 0.9),
                Criterion("regime", "share of the model's rows with $L > e^{2\\Delta/T}$, where "
                          "the lemma forces decay", ">=", NU_REGIME_SHARE, kind="scope"),
            ),
            outcomes=(("all:exponent,entropy", "confirmed"), ("else", "refuted")),
            headline="exponent",
            text=("not testable unless at least half of the rows have $L > e^{2\\Delta/T}$ (below "
                  "it the sharpened bound $e^{2\\Delta/T}/(e^{2\\Delta/T}+L-1)$ exceeds 1/2, so "
                  "Lemma 1 forces no decay, and the criteria are medians over heads); there, "
                  "confirmed when the median head's largest weight falls about as $1/L$ (exponent "
                  "$\\le -0.9$) and its entropy reaches 0.9 of the uniform row's, refuted otherwise"),
        ),
    ),
    Claim(
        id="VAR", chapter=CHAPTER, section="Sec. 3, experimental setup",
        # kind: the paper's statement; about: general, although it names the GPT-2 family: it is
        # graded only on GPT-2 124M against its larger variants themselves (not testable where
        # they cannot be loaded), never on another model, so the GPT-2 policy has nothing to govern
        kind="paper", about="general",
        paper_value="identical trends (none shown)",
        claim="Larger GPT-2 variants give the same trends",
        paper=("The experiments use GPT-2 124M; the authors state that larger variants gave "
               "qualitatively identical trends, and show none."),
        scope="the vanishing yardstick (the largest weight against $L$), GPT-2 124M against 355M",
        rule=Rule(
            criteria=(
                Criterion("exponent_gap", "largest difference between a larger variant's and GPT-2 "
                          "124M's median-head exponent of the largest weight against $L$", "<=",
                          VARIANT_EXPONENT_GAP),
                Criterion("same_direction", "fraction of larger variants whose exponent has the "
                          "sign of GPT-2 124M's", "==", 1),
            ),
            outcomes=(("all", "confirmed"), ("else", "refuted")),
            headline="exponent_gap",
            text=(f"confirmed when every larger variant's median exponent has 124M's sign and lies "
                  f"within {VARIANT_EXPONENT_GAP} of it; not testable where the models cannot be "
                  "loaded"),
        ),
    ),
)
