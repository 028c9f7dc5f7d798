"""Symbolic derivations for the vanishing-attention chapter (paper Lemma 1 and Corollary 1).

Lemma 1 (paper): for ``alpha_i = F(l_i) / sum_j F(l_j)`` with a positive F that does not depend on
the number of keys L, and logits in ``[-a, a]``, every weight lies in ``[C1/L, C2/L]`` with
``C1 = F_min / F_max`` and ``C2 = F_max / F_min`` (F's extremes on ``[-a, a]``).

The derivation here is exact rather than a bound of a bound: ``alpha_i = x / (x + s)`` with
``x = F(l_i)`` and ``s = sum_{j != i} F(l_j)``, increasing in ``x`` and decreasing in ``s``. So over
all logit vectors in the box its extremes are attained at a corner:

* ``max alpha_i = F_max / (F_max + (L - 1) F_min) = r / (r + L - 1)``,
* ``min alpha_i = F_min / (F_min + (L - 1) F_max) = 1 / (1 + (L - 1) r)``,

with ``r = F_max / F_min >= 1``. Both imply the paper's constants (the gaps are manifestly
non-negative). For softmax at temperature T, ``F = exp(l / T)`` and ``|l| <= Delta`` give
``r = exp(2 Delta / T)``: Corollary 1 and its sharpened form.

Every function returns sympy objects; the chapter displays them and the tests re-check them.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from normlimits.theory.algebra import closes

# Symbols shared by the derivations (all positive reals; L is the number of visible keys).
L = sp.Symbol("L", positive=True)
F_i = sp.Symbol("F_i", positive=True)            # F(l_i), the numerator
S_rest = sp.Symbol("S_{-i}", positive=True)      # sum_{j != i} F(l_j)
F_min = sp.Symbol("F_min", positive=True)
F_max = sp.Symbol("F_max", positive=True)
r = sp.Symbol("r", positive=True)                # F_max / F_min >= 1
u = sp.Symbol("u", nonnegative=True)             # r - 1 >= 0
m = sp.Symbol("m", nonnegative=True)             # L - 1 >= 0, the number of other keys
Delta = sp.Symbol("Delta", positive=True)        # logit bound, in the model's logit units
T = sp.Symbol("T", positive=True)                # temperature
ell = sp.Symbol("ell", real=True)                # a logit


@dataclass(frozen=True)
class Lemma1:
    """Lemma 1 for a general positive F, derived exactly.

    Fields (sympy expressions in the module's symbols):
    ``alpha``: x/(x+s); ``d_alpha_d_numerator``, ``d_alpha_d_rest``: its partial derivatives;
    ``exact_max``, ``exact_min``: the extremes over the box, in ``F_min, F_max, L``;
    ``exact_max_r``, ``exact_min_r``: the same in ``r = F_max/F_min``;
    ``c1``, ``c2``: the paper's constants; ``upper_gap`` = ``c2/L - exact_max`` and
    ``lower_gap`` = ``exact_min - c1/L`` (factored), and ``upper_gap_u`` / ``lower_gap_u``: the gaps
    with ``F_max = (1 + u) F_min`` and ``L = 1 + m`` (``u, m >= 0``), in which form
    non-negativity is manifest (sympy decides ``is_nonnegative``).
    """

    alpha: sp.Expr
    d_alpha_d_numerator: sp.Expr
    d_alpha_d_rest: sp.Expr
    exact_max: sp.Expr
    exact_min: sp.Expr
    exact_max_r: sp.Expr
    exact_min_r: sp.Expr
    c1: sp.Expr
    c2: sp.Expr
    upper_gap: sp.Expr
    lower_gap: sp.Expr
    upper_gap_u: sp.Expr
    lower_gap_u: sp.Expr


def lemma1() -> Lemma1:
    """Derive Lemma 1 and its exact (sharpened) form for a general positive F."""
    alpha = F_i / (F_i + S_rest)
    d_num = sp.factor(sp.diff(alpha, F_i))        # S/(x+S)^2 > 0
    d_rest = sp.factor(sp.diff(alpha, S_rest))    # -x/(x+S)^2 < 0
    # Monotone: the max takes the largest numerator and the smallest rest, and vice versa.
    exact_max = alpha.subs({F_i: F_max, S_rest: (L - 1) * F_min})
    exact_min = alpha.subs({F_i: F_min, S_rest: (L - 1) * F_max})
    exact_max_r = sp.simplify(exact_max.subs(F_max, r * F_min))
    exact_min_r = sp.simplify(exact_min.subs(F_max, r * F_min))
    c1 = F_min / F_max
    c2 = F_max / F_min
    upper_gap = sp.factor(c2 / L - exact_max)
    lower_gap = sp.factor(exact_min - c1 / L)
    manifest = {F_max: (1 + u) * F_min, L: 1 + m}
    upper_gap_u = sp.factor(sp.simplify(upper_gap.subs(manifest)))
    lower_gap_u = sp.factor(sp.simplify(lower_gap.subs(manifest)))
    return Lemma1(alpha, d_num, d_rest, exact_max, exact_min, exact_max_r, exact_min_r,
                  c1, c2, upper_gap, lower_gap, upper_gap_u, lower_gap_u)


@dataclass(frozen=True)
class Corollary1:
    """Corollary 1 (softmax, ``F = exp(l/T)``, ``|l_j| <= Delta``) and its sharpened form.

    Fields: ``ratio`` = F_max/F_min = exp(2 Delta/T); ``paper_lower``, ``paper_upper``: the paper's
    bounds ``exp(-+2 Delta/T)/L``; ``sharp_max``, ``sharp_min``: the exact extremes;
    ``attained_max``, ``attained_min``: softmax evaluated at the corner logit vectors
    (one logit at +Delta and L-1 at -Delta, or the reverse); ``looseness_upper`` =
    paper_upper / sharp_max and ``looseness_lower`` = sharp_min / paper_lower (both ``>= 1``);
    ``looseness_limit_upper`` / ``looseness_limit_lower``: their limits as ``L -> oo``;
    ``vacuous_below``: the L below which the paper's upper bound exceeds 1.
    """

    ratio: sp.Expr
    paper_lower: sp.Expr
    paper_upper: sp.Expr
    sharp_max: sp.Expr
    sharp_min: sp.Expr
    attained_max: sp.Expr
    attained_min: sp.Expr
    looseness_upper: sp.Expr
    looseness_lower: sp.Expr
    looseness_limit_upper: sp.Expr
    looseness_limit_lower: sp.Expr
    vacuous_below: sp.Expr


def softmax_map() -> sp.Expr:
    """The softmax normaliser's F: ``exp(ell / T)``."""
    return sp.exp(ell / T)


def corollary1() -> Corollary1:
    """Specialise Lemma 1 to softmax and derive the sharpened bounds."""
    lem = lemma1()
    f = softmax_map()
    # exp is increasing, so on [-Delta, Delta] its extremes are at the ends.
    f_max, f_min = f.subs(ell, Delta), f.subs(ell, -Delta)
    ratio = sp.simplify(f_max / f_min)                             # exp(2 Delta / T)
    paper_lower = sp.simplify(lem.c1.subs({F_min: f_min, F_max: f_max}) / L)
    paper_upper = sp.simplify(lem.c2.subs({F_min: f_min, F_max: f_max}) / L)
    sharp_max = lem.exact_max_r.subs(r, ratio)
    sharp_min = lem.exact_min_r.subs(r, ratio)
    # Softmax at the corners, written as the model computes it: e^{l_1/T} / sum_j e^{l_j/T}.
    attained_max = f_max / (f_max + (L - 1) * f_min)
    attained_min = f_min / (f_min + (L - 1) * f_max)
    looseness_upper = sp.simplify(paper_upper / sharp_max)
    looseness_lower = sp.simplify(sharp_min / paper_lower)
    lim_upper = sp.limit(looseness_upper, L, sp.oo)
    lim_lower = sp.limit(looseness_lower, L, sp.oo)
    vacuous = sp.solve(sp.Eq(paper_upper, 1), L)[0]                # L = exp(2 Delta / T)
    return Corollary1(ratio, paper_lower, paper_upper, sharp_max, sharp_min,
                      attained_max, attained_min, looseness_upper, looseness_lower,
                      lim_upper, lim_lower, vacuous)


def entropy_floor() -> sp.Expr:
    """Lower bound on a softmax row's entropy (nats) implied by the sharpened maximum.

    Shannon entropy is at least the min-entropy ``-log max_i alpha_i``, so
    ``H >= -log(sharp_max) = log(1 + (L - 1) exp(-2 Delta / T))``.
    """
    return sp.expand_log(sp.log(1 / corollary1().sharp_max), force=True)




@dataclass(frozen=True)
class LiteralCounterexample:
    """Corollary 1 read literally (a per-key ``Delta_i = ||q|| ||k_i||``) on an exact example.

    Fields: ``logits`` (the row ``q k_j``), ``weights`` (its softmax at ``T``), ``lower`` and
    ``upper`` (the literal bounds ``exp(-+2 Delta_i/T)/L`` per key), all tuples of sympy numbers
    of length L; ``outside``: the indices of the weights outside their literal bounds (decided
    exactly by sympy, no rounding)."""

    logits: tuple
    weights: tuple
    lower: tuple
    upper: tuple
    outside: tuple[int, ...]


def literal_counterexample(q: int = 1, keys: tuple[int, ...] = (1, 0, 0),
                           temperature: int = 1) -> LiteralCounterexample:
    """Corollary 1 with the literal per-key ``Delta_i = |q| |k_i|`` on a one-dimensional query
    ``q`` and ``keys`` (L = len(keys)), exactly. The default, three keys ``1, 0, 0`` with
    ``q = T = 1``, is a counterexample: a key of norm 0 gets the literal bounds
    ``[1/L, 1/L]``, but its weight is ``1/(e + 2) < 1/3``. So the literal statement is false
    whatever a model's weights do, and only ``Delta = ||q|| max_j ||k_j||`` gives a bound
    (:func:`corollary1`). ValueError for an empty row or a non-positive temperature."""
    if not keys:
        raise ValueError("literal_counterexample needs at least one key")
    if temperature <= 0:
        raise ValueError(f"temperature must be positive, got {temperature}")
    n = len(keys)
    t = sp.Integer(temperature)
    logits = tuple(sp.Integer(q) * sp.Integer(k) for k in keys)
    total = sum(sp.exp(x / t) for x in logits)
    weights = tuple(sp.exp(x / t) / total for x in logits)
    deltas = tuple(abs(sp.Integer(q)) * abs(sp.Integer(k)) for k in keys)
    lower = tuple(sp.exp(-2 * d / t) / n for d in deltas)
    upper = tuple(sp.exp(2 * d / t) / n for d in deltas)
    outside = tuple(i for i, (w, lo, hi) in enumerate(zip(weights, lower, upper))
                    if bool(sp.simplify(w - lo).is_negative) or bool(sp.simplify(w - hi).is_positive))
    return LiteralCounterexample(logits, weights, lower, upper, outside)
