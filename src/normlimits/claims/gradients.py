"""Claims graded by the gradient chapter (paper Section 2.3, Lemma 2, Corollary 3, Section 3.3,
the Discussion's reading of Figure 4 and guideline 3)."""

from __future__ import annotations

from normlimits.core.protocol import (
    G_DROP_ORDERS, HIGH_T, SHARP_T, TR_GRADIENT_RATIO, TR_HARDER_BITS, TR_LEARNED_BITS)
from normlimits.claims.base import PAPER_MODEL, Claim
from normlimits.claims.rules import Criterion, Rule

CHAPTER = "gradients"

#: relative rounding slack on "at most 1/2" (the tie attains 1/2 exactly; float64 rounding)
_ROUNDING = 1e-9

CLAIMS = (
    Claim(
        id="EX", chapter=CHAPTER,
        # kind: the paper's worked example; universal (a computation)
        kind="paper", about="general",
        section="Sec. 2.3, motivating example",
        paper_value="$O(\\varepsilon/T)$",
        claim="Logits $\\sqrt5\\,\\varepsilon$ apart with the top two swapped move softmax by "
              "$O(\\varepsilon/T)$",
        paper=("Two almost identical logit vectors with $\\lVert\\ell^{(1)}-\\ell^{(2)}\\rVert_2="
               "\\sqrt5\\,\\varepsilon$ whose two largest logits swap order give softmax outputs "
               "that differ by $O(\\varepsilon/T)$ (the vectors are not given; reconstructed as "
               "$(c+\\varepsilon, c)$ and $(c-\\varepsilon, c+\\varepsilon)$)."),
        rule=Rule(
            criteria=(
                Criterion("closes", "sympy: the first-order change $\\tfrac{3\\sqrt2}{4}"
                          "\\varepsilon/T$ of the reconstructed pair closes (1 = closes)",
                          "==", 1, kind="identity"),
                Criterion("first_order", "largest relative gap between the computed "
                          "$\\lVert\\alpha^{(1)}-\\alpha^{(2)}\\rVert$ and "
                          "$\\tfrac{3\\sqrt2}{4}\\varepsilon/T$ where $\\varepsilon/T\\le0.01$",
                          "<=", 0.01, kind="check"),
                Criterion("gain", "largest computed $\\lVert\\alpha^{(1)}-\\alpha^{(2)}\\rVert"
                          "\\,T/\\varepsilon$ over every $(T,\\varepsilon)$ of the table, in units "
                          "of $\\tfrac{3\\sqrt2}{4}$", "<=", 1 + _ROUNDING, kind="check"),
            ),
            outcomes=(("all", "confirmed"), ("else", "refuted")),
            headline="first_order",
            text=("confirmed when the computed change is $\\tfrac{3\\sqrt2}{4}\\varepsilon/T$ to "
                  "within 1% for $\\varepsilon/T\\le0.01$ and never exceeds that constant times "
                  "$\\varepsilon/T$ at larger $\\varepsilon/T$"),
        ),
    ),
    Claim(
        id="L2", chapter=CHAPTER,
        # kind: the paper's lemma; universal
        kind="paper", about="general",
        section="Sec. 2.3, Lemma 2",
        paper_value="grows as $\\min_j F \\to 0$ (a bound)",
        claim="A normaliser's Jacobian grows as $\\min_j F(\\ell_j)\\to0$",
        paper=("Lemma 2: for $\\alpha_i=F(\\ell_i,\\theta)/\\sum_jF(\\ell_j,\\theta)$, "
               "$\\lVert\\nabla_\\ell\\alpha\\rVert$ is bounded by two terms that \"scale inversely "
               "with $\\min_jF(\\ell_j,\\theta)$\", so a sharply peaked normaliser has a large "
               "Jacobian (the displayed formula was not recovered; a proven reconstruction of "
               "that shape is graded)."),
        rule=Rule(
            criteria=(
                Criterion("bound_holds", "largest $\\lVert J\\rVert_2$ over the reconstructed "
                          "bound's second line on random rows of four maps $F$", "<=", 1 + _ROUNDING, kind="proven"),
                Criterion("softmax_growth", "softmax at $T=1$: $\\lVert J\\rVert_2$ at the "
                          "smallest $\\min_jF$ over $\\lVert J\\rVert_2$ at the largest", ">=", 1),
                Criterion("linear_growth", "$F(\\ell)=\\ell$: $\\lVert J\\rVert_2$ at the "
                          "smallest $\\min_jF$ over $\\lVert J\\rVert_2$ at the largest", ">=", 1),
            ),
            outcomes=(("all", "confirmed"), ("all:bound_holds,linear_growth", "corrected"),
                      ("else", "refuted")),
            headline="softmax_growth",
            text=("confirmed when the bound holds and the Jacobian itself grows as "
                  "$\\min_jF\\to0$ for softmax and for $F(\\ell)=\\ell$; corrected when the bound "
                  "holds and the growth happens only for a map whose log-derivative $F'/F$ "
                  "diverges (not softmax)"),
        ),
    ),
    Claim(
        id="C3", chapter=CHAPTER,
        # kind: the paper's corollary; a universal bound, graded as one on every model (not about GPT-2 although Fig. 4 draws it)
        kind="paper", about="general",
        section="Sec. 2.3, Corollary 3; Fig. 4 dashed curve",
        paper_value="$\\le \\min\\{1/(4T), \\sqrt2\\}$",
        claim="Softmax: $\\lVert\\nabla_\\ell\\alpha\\rVert_2\\le\\min\\{1/(4T),\\sqrt2\\}$",
        paper=("Corollary 3: $\\lVert\\nabla_\\ell\\alpha\\rVert_2\\le\\min\\{1/(4T),\\sqrt2\\}$, "
               "\"the classic instability\"; the dashed curve of Figure 4."),
        rule=Rule(
            criteria=(
                Criterion("paper_constant", "largest measured $\\lVert J\\rVert_2\\,T$ over the "
                          "model's rows at every $T$ and the adversarial rows (ascent on "
                          "$\\lambda_{\\max}$ from random starts)", "<=", 0.25 * (1 + _ROUNDING), kind="check"),
                Criterion("corrected_constant", "the same largest $\\lVert J\\rVert_2\\,T$",
                          "<=", 0.5 * (1 + _ROUNDING), kind="proven"),
            ),
            outcomes=(("all", "confirmed"), ("all:corrected_constant", "corrected"),
                      ("else", "refuted")),
            headline="paper_constant",
            text=("confirmed when no measured row exceeds $1/(4T)$; corrected when some row "
                  "exceeds $1/(4T)$ but none exceeds $1/(2T)$ (the bound proven here; a row above "
                  "it would be a bug and stops the build)"),
        ),
    ),
    Claim(
        id="F4", chapter=CHAPTER,
        # kind: the paper's figure; about GPT-2 124M's measurements (its slopes and its 100x fall are that model's): off GPT-2 not reproduced, never refuted
        kind="paper", about="gpt2",
        section="Sec. 3.3, Fig. 4",
        paper_value="slope $-1$ below $T = 0.1$; $100\\times$ fall from $T = 1$",
        claim="$g(T,\\varepsilon)$ follows $1/T$ for $T<0.1$, collapses and falls 100x for $T\\ge1$",
        paper=("Figure 4: the finite-difference sensitivity $g(T,\\varepsilon)$ (mean over "
               "tokens, maximum over heads) follows the $1/T$ trend for $T<0.1$; once $T\\ge1$ the "
               "curves for $\\varepsilon\\in\\{10^{-3},10^{-1},10\\}$ collapse together and fall by "
               "two orders of magnitude."),
        scope=f"the book's $T$ grid $10^{{-3}}\\ldots10^2$; \"$T<0.1$\" is $T\\le{SHARP_T:g}$",
        rule=Rule(
            criteria=(
                Criterion("low_slope", "largest distance from $-1$ of the log-log slope of "
                          f"$\\max_{{\\rm heads}} g$ over $T\\le{SHARP_T:g}$, over the three "
                          "$\\varepsilon$", "<=", 0.2),
                Criterion("collapse", f"ratio of the largest to the smallest of the three "
                          f"curves at $T={HIGH_T:g}$", "<=", 1.5),
                Criterion("drop", f"$\\log_{{10}}$ of the smallest fall of a curve from "
                          f"$T={HIGH_T:g}$ to $T=100$", ">=", G_DROP_ORDERS - 0.5),
                PAPER_MODEL,
            ),
            outcomes=(("all:low_slope,collapse,drop", "confirmed"), ("all:collapse,drop", "partial"),
                      ("all:low_slope", "partial"), ("all:paper_model", "refuted"),
                      ("else", "not reproduced")),
            headline="low_slope",
            text=("\"follows $1/T$\" is a slope within 0.2 of $-1$ for every $\\varepsilon$; the "
                  "high-$T$ half needs the curves within a factor 1.5 at $T=1$ and a fall of at "
                  "least $10^{1.5}$ (two orders, rounded) to $T=100$; both halves: confirmed; "
                  "one: partial (no proven statement repairs the other); none: refuted on GPT-2 "
                  "124M, not reproduced on any other model"),
        ),
    ),
    Claim(
        id="EPS", chapter=CHAPTER,
        # kind: the paper's statement; general: worded with a mechanism of softmax ("because the sharpest logits dominate the change"), which the chapter proves in its corrected form
        kind="paper", about="general",
        section="Sec. 3.3, Fig. 4",
        paper_value="smaller $\\varepsilon$, larger $g$",
        claim="Smaller $\\varepsilon$ gives larger $g(T,\\varepsilon)$",
        paper=("Section 3.3: \"smaller $\\varepsilon$ gives larger values, because the sharpest "
               "logits dominate the change\"."),
        scope=f"the grid temperatures below $T={HIGH_T:g}$ (at and above it the paper says the "
              "curves collapse together)",
        rule=Rule(
            criteria=(
                Criterion("ordered", "share of the grid temperatures $T<1$ at which "
                          "$\\max_{\\rm heads}g(T,10^{-3})\\ge g(T,10^{-1})\\ge g(T,10)$ "
                          "(0.1% tolerance): every pair of curves", ">=", 0.9),
                Criterion("extremes", "share of the grid temperatures $T<1$ at which "
                          "$\\max_{\\rm heads}g(T,10^{-3})\\ge g(T,10)$ (0.1% tolerance): the "
                          "smallest $\\varepsilon$ against the largest", ">=", 0.9),
            ),
            outcomes=(("all", "confirmed"), ("all:extremes", "corrected"), ("else", "refuted")),
            headline="ordered",
            text=("confirmed when every pair of curves is ordered by $\\varepsilon$ at 90% of the "
                  "grid temperatures below 1 or more; corrected when only the smallest "
                  "$\\varepsilon$ against the largest is (the statement the chapter proves: $g$ "
                  "does not depend on $\\varepsilon$ while $\\varepsilon$ is below the scale of the "
                  "logits' near-tied gaps, at both ends of the temperature range, and the cap "
                  "$\\sqrt2/\\varepsilon$ lowers it once $\\varepsilon$ is above); refuted otherwise"),
        ),
    ),
    Claim(
        id="LIM", chapter=CHAPTER,
        # kind: the paper's statement; about GPT-2 124M's measurements ("GPT-2 operates close to the theoretical limit"): off GPT-2 not reproduced, never refuted
        kind="paper", about="gpt2",
        section="Sec. 4, Discussion",
        paper_value="close to the limit for $T < 0.1$",
        claim="GPT-2 operates close to the theoretical limit for $T<0.1$",
        paper=("Discussion: Figure 4 shows GPT-2 operating \"close to the theoretical limit when "
               "$T<10^{-1}$\"; the Conclusion: the empirical norm \"tracks the theoretical "
               "$1/(4T)$ law, saturating at low temperature\"."),
        scope=f"the grid temperatures $T\\le{SHARP_T:g}$",
        rule=Rule(
            criteria=(
                Criterion("closeness", f"smallest, over $T\\le{SHARP_T:g}$, of "
                          "$\\max_{\\rm heads}g(T,10^{-3})$ as a fraction of the limit "
                          "$1/(2T)$ (the valid bound; the paper's curve is shown as a reading)",
                          ">=", 0.5),
                PAPER_MODEL,
            ),
            outcomes=(("all:closeness", "confirmed"), ("all:paper_model", "refuted"),
                      ("else", "not reproduced")),
            headline="closeness",
            text=("\"close\" is within a factor 2 of the limit at every $T\\le0.1$ of the grid; "
                  "confirmed when it is; otherwise refuted on GPT-2 124M, not reproduced on any "
                  "other model (the claim names GPT-2's measurement)"),
        ),
    ),
    Claim(
        id="G3", chapter=CHAPTER,
        # kind: the paper's guideline; general (advice for any softmax model)
        kind="paper", about="general",
        section="Sec. 4, guideline 3",
        paper_value="$\\lVert J\\rVert$ up, separability not",
        claim="$T<0.1$ raises Jacobian norms without improving separability",
        paper=("Guideline 3: \"pushing $T$ below $10^{-1}$ raises Jacobian norms without improving "
               "separability (Figs. 3-4)\"."),
        scope=f"$T={SHARP_T / 10:g}$ against $T={SHARP_T:g}$ on the model",
        rule=Rule(
            criteria=(
                Criterion("jacobian_rise", f"$\\max_{{\\rm heads}}$ of the row-mean exact "
                          f"$\\lVert J\\rVert_2$ at $T={SHARP_T / 10:g}$ over the same at "
                          f"$T={SHARP_T:g}$", ">=", 1.5),
                Criterion("largest_row_rise", "the same ratio for the largest row's "
                          "$\\lVert J\\rVert_2$", ">=", 1.5),
                Criterion("separability_gain", f"mean over heads and $N$ of $N_s/N$ at "
                          f"$T={SHARP_T / 10:g}$ minus at $T={SHARP_T:g}$", "<=", 0.01),
            ),
            outcomes=(("all:jacobian_rise,separability_gain", "confirmed"),
                      ("all:largest_row_rise,separability_gain", "partial"),
                      ("else", "refuted")),
            headline="jacobian_rise",
            text=("\"raises\" is a rise by half or more over the decade; \"without improving\" "
                  "is a gain in $N_s/N$ of at most 0.01. Confirmed when the typical row's norm "
                  "rises and separability does not improve; partial when only the largest "
                  "rows' norm rises (no proven statement repairs it); refuted otherwise"),
        ),
    ),
    Claim(
        id="TR", chapter=CHAPTER,
        # kind: the paper's assertion; general ("deep transformers")
        kind="paper", about="general",
        section="Secs. 2.3 and 4 (asserted, not measured)",
        paper_value="training harder (asserted, not measured)",
        claim="Softmax's gradient sensitivity makes training hard at low $T$",
        paper=("Section 2.3: a sharper normaliser \"amplifies gradient variance, which "
               "complicates training of deep transformers\"; guideline 3: avoid $T\\le0.1$."),
        scope=("a 2-layer, 4-head, width-128 byte-level GPT-2 (0.45M parameters) trained briefly, "
               "three seeds per $T$, paired; it says nothing about deep transformers, GPT-2 124M "
               "or long training"),
        rule=Rule(
            criteria=(
                Criterion("harder", "mean over seeds of the paired difference in held-out bits per "
                          "byte, lowest $T$ minus $T=1$ (same seed)", ">", TR_HARDER_BITS),
                Criterion("easier", "the same mean difference", "<", -TR_HARDER_BITS),
                Criterion("gradients", "geometric mean over seeds of the median query/key gradient "
                          "norm at the lowest $T$ over the same at $T=1$", ">=",
                          TR_GRADIENT_RATIO),
                Criterion("learned", "held-out bits per byte of the bigram baseline minus the "
                          "mean over seeds at $T=1$ (did the budget train the stock model at "
                          "all?)", ">=", TR_LEARNED_BITS),
            ),
            outcomes=(("none:learned", "not reproduced"), ("all:harder,gradients", "confirmed"),
                      ("all:harder", "corrected"), ("all:easier", "refuted"),
                      ("else", "not reproduced")),
            headline="harder",
            text=("the comparison needs the $T=1$ models to beat the bigram baseline by "
                  "0.1 bit per byte (otherwise the budget trained nothing to compare: not "
                  "reproduced); then the sign of the mean paired difference decides, each "
                  "criterion holding or failing only where its Student t interval over the seeds "
                  "(n − 1 degrees of freedom) lies on one side of its threshold: harder at low $T$ "
                  "with gradients at least twice as large: confirmed; harder without them: "
                  "corrected; easier: refuted; an interval that contains 0 leaves the verdict "
                  "inconclusive (a mean difference of exactly 0: not reproduced)"),
        ),
    ),
)
