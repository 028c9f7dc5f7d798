"""Theorem 2 (geometric separability) and the multi-head coverage formula: the sympy derivations.

The paper's exact spread ``xi_i`` is not recoverable, so the book states and proves its own
version of Theorem 2 (the statement, the bounds and their proof are on the book's separability
page; the numeric bounds are :mod:`normlimits.metrics.separability_bounds`). Setting: ``N >= 2`` selected
tokens with fixed weights ``alpha_1..alpha_N >= 0`` (independent of the points), points
``x_1..x_N`` i.i.d. uniform on the sphere ``S^{d-1}(M)`` (Assumption 1). For a selected token i,

    X_i = || s - alpha_i x_i || = || sum_{j != i} alpha_j x_j ||      (j over the other selected)

with ``q_i = sum_{j != i} alpha_j^2``, ``p_i = sum_{j != i} alpha_j^4``, ``w_i = sum_{j != i} alpha_j``.
:func:`derive` expands X^2 and X^4 in the Gram entries ``g_jk = <x_j, x_k>`` and takes expectations
monomial by monomial (E g = 0, E g_a g_b = 0 for distinct pairs, E g^2 = M^4/d), giving

    E X^2 = M^2 q,   E X^4 = M^4 (q^2 + 2 (q^2 - p)/d),   Var X^2 = (2 M^4/d)(q^2 - p),

the Hoelder lower companion ``xi^- = M sqrt(q) / sqrt(1 + (2/d)(1 - p/q^2)) <= E X``, the
Assumption 2 identity ``(xi^delta)^2 - X^2 = sum_{j<k} a_j a_k (D_jk^2 - delta^2)`` with
``(xi^delta)^2 = M^2 w^2 - (delta^2/2)(w^2 - q)``, and McDiarmid's exponent ``t^2 / (2 M^2 q)``.

:func:`multihead` derives the coverage of H heads that distinguish each token independently:
``1 - prod_h (1 - p_h)``, ``1 - (1 - p)^H`` for equal rates, the convexity of ``(1 - p)^H`` (so
heads whose rate varies over the tokens cover at most the formula at the mean rate: the paper's
"up to"), and the paper's arithmetic at p = 0.8, H = 3.

Only sympy here; every function returns sympy objects and the booleans that say an identity closed.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import sympy as sp

from normlimits.theory.algebra import closes

__all__ = ["Theorem2Derivation", "derive", "MultiHeadDerivation", "multihead", "closes"]

# ----------------------------------------------------------------------------------- sympy
M = sp.Symbol("M", positive=True)          # sphere radius
d = sp.Symbol("d", positive=True)          # dimension
delta = sp.Symbol("delta", positive=True)  # minimum pairwise separation
r = sp.Symbol("r", positive=True)          # ball radius
t = sp.Symbol("t", positive=True)          # deviation below the mean
q = sp.Symbol("q", positive=True)          # sum of squared weights of the other selected tokens
p = sp.Symbol("p", positive=True)          # sum of fourth powers of those weights
w = sp.Symbol("w", positive=True)          # sum of those weights


@dataclass(frozen=True)
class Theorem2Derivation:
    """The steps of the book's Theorem 2 for ``n`` other selected tokens (sympy objects).

    ``alphas``: the weights a_1..a_n of the other selected tokens; ``gram``: the symbols
    g_jk = <x_j, x_k> (j < k); ``x_sq``: X^2 in them; ``second_moment``: E X^2 by the rules
    E g_jk = 0; ``fourth_moment``: E X^4 by E g_jk g_lm = [jk = lm] M^4/d; ``*_closed``: the
    closed forms in q, p; ``second_closes``/``fourth_closes``: sympy closed the difference to 0.
    ``variance``: m4 - m2^2 (Var X^2) and ``variance_closed``: (2 M^4/d)(q^2 - p), ``variance_closes``.
    ``holder``: sqrt(m2^3/m4) and ``holder_closed``: xi^- in closed form; ``holder_closes``.
    ``distances``: D_jk; ``sep_gap``: (xi^delta)^2 - X^2 with g_jk = M^2 - D_jk^2/2, and
    ``sep_gap_manifest``: sum_{j<k} a_j a_k (D_jk^2 - delta^2) (>= 0 term by term when D >= delta);
    ``sep_closes``: the two agree. ``mcdiarmid_exponent``: 2 t^2 / sum_j (2 M a_j)^2 and
    ``mcdiarmid_closes``: it equals t^2 / (2 M^2 q). ``markov``: E X^2 / r^2 = xi^2/r^2.
    """

    n: int
    alphas: tuple
    gram: dict
    x_sq: sp.Expr
    second_moment: sp.Expr
    second_closed: sp.Expr
    second_closes: bool
    fourth_moment: sp.Expr
    fourth_closed: sp.Expr
    fourth_closes: bool
    variance: sp.Expr
    variance_closed: sp.Expr
    variance_closes: bool
    holder: sp.Expr
    holder_closed: sp.Expr
    holder_closes: bool
    distances: dict
    sep_gap: sp.Expr
    sep_gap_manifest: sp.Expr
    sep_closes: bool
    mcdiarmid_exponent: sp.Expr
    mcdiarmid_closes: bool
    markov: sp.Expr


def _expect(poly_expr: sp.Expr, gram: dict) -> sp.Expr:
    """E[.] of a polynomial in the Gram symbols of independent uniform points on S^{d-1}(M).

    Rules (each by a sign flip x_k -> -x_k, or E[x x^T] = (M^2/d) I): E g = 0; E g_a g_b = 0 for
    distinct pairs a, b; E g_a^2 = M^4/d. The polynomials here have degree <= 2 in the g's.
    """
    symbols = list(gram.values())
    poly = sp.Poly(sp.expand(poly_expr), *symbols)
    total = sp.Integer(0)
    for monom, coeff in poly.terms():
        degree = sum(monom)
        if degree == 0:
            total += coeff
        elif degree == 2 and max(monom) == 2:
            total += coeff * M**4 / d
        elif degree in (1, 2):
            continue
        else:  # pragma: no cover - not produced by X^2 or X^4
            raise ValueError("only degree <= 2 in the Gram symbols is supported")
    return sp.expand(total)


def derive(n: int = 3) -> Theorem2Derivation:
    """Derive every step of the book's Theorem 2 for ``n`` other selected tokens (n >= 1)."""
    if n < 1:
        raise ValueError("n (the number of OTHER selected tokens, N - 1) must be >= 1.")
    alphas = sp.symbols(f"a1:{n + 1}", positive=True)
    pairs = list(itertools.combinations(range(n), 2))
    gram = {(j, k): sp.Symbol(f"g_{j + 1}{k + 1}", real=True) for j, k in pairs}
    dist = {(j, k): sp.Symbol(f"D_{j + 1}{k + 1}", positive=True) for j, k in pairs}
    q_sum = sum(a**2 for a in alphas)
    p_sum = sum(a**4 for a in alphas)
    w_sum = sum(alphas)
    x_sq = M**2 * q_sum + 2 * sum(alphas[j] * alphas[k] * gram[(j, k)] for j, k in pairs)
    m2 = _expect(x_sq, gram) if gram else sp.expand(x_sq)
    m4 = _expect(x_sq**2, gram) if gram else sp.expand(x_sq**2)
    m2_closed = M**2 * q
    m4_closed = M**4 * (q**2 + 2 * (q**2 - p) / d)
    subs_qp = {q: q_sum, p: p_sum}
    var_closed = 2 * M**4 * (q**2 - p) / d
    holder = sp.sqrt(m2_closed**3 / m4_closed)
    holder_closed = M * sp.sqrt(q) / sp.sqrt(1 + 2 * (1 - p / q**2) / d)
    x_sq_dist = x_sq.subs({gram[key]: M**2 - dist[key]**2 / 2 for key in pairs})
    xi_delta_sq = M**2 * w**2 - delta**2 / 2 * (w**2 - q)
    sep_gap = sp.expand(xi_delta_sq.subs({w: w_sum, q: q_sum}) - x_sq_dist)
    manifest = sum(alphas[j] * alphas[k] * (dist[(j, k)]**2 - delta**2) for j, k in pairs)
    exponent = 2 * t**2 / sum((2 * M * a)**2 for a in alphas)
    return Theorem2Derivation(
        n=n, alphas=alphas, gram=gram, x_sq=x_sq,
        second_moment=m2, second_closed=m2_closed,
        second_closes=closes(m2 - m2_closed.subs(subs_qp)),
        fourth_moment=m4, fourth_closed=m4_closed,
        fourth_closes=closes(m4 - m4_closed.subs(subs_qp)),
        variance=sp.expand(m4 - m2**2),
        variance_closed=var_closed,
        variance_closes=closes(m4 - m2**2 - var_closed.subs(subs_qp)),
        holder=holder, holder_closed=holder_closed,
        holder_closes=closes(holder**2 - holder_closed**2),
        distances=dist, sep_gap=sep_gap, sep_gap_manifest=manifest,
        sep_closes=closes(sep_gap - manifest),
        mcdiarmid_exponent=exponent,
        mcdiarmid_closes=closes(exponent - (t**2 / (2 * M**2 * q)).subs(q, q_sum)),
        markov=m2_closed / r**2,
    )




# ------------------------------------------------------------------------- several heads
@dataclass(frozen=True)
class MultiHeadDerivation:
    """Coverage of a token by H heads that distinguish it independently (sympy objects).

    ``rates``: the symbols p_1..p_H; ``coverage``: P(at least one head) = 1 - prod_h (1 - p_h),
    from the product rule for independent misses; ``equal``: that at p_h = p, and
    ``equal_closes``: it equals the paper's 1 - (1 - p)^H. ``curvature``: the second derivative
    of ``phi(p) = 1 - (1 - p)^H`` in p, written with u = 1 - p > 0 and H = k + 1 (k >= 0), and
    ``concave``: sympy decides it is <= 0, so (Jensen) heads whose rate varies over the tokens
    cover on average at most ``phi`` of the mean rate. ``two_point_gap``: phi((a+b)/2) -
    (phi(a)+phi(b))/2 at H = 3, factored. ``paper_coverage``: 1 - (1 - 4/5)^3 (= 124/125) and
    ``paper_heads``: the fewest H with 1 - (1/5)^H >= 99/100.
    """

    rates: tuple
    coverage: sp.Expr
    equal: sp.Expr
    equal_closes: bool
    curvature: sp.Expr
    concave: bool
    two_point_gap: sp.Expr
    paper_coverage: sp.Expr
    paper_heads: int


def multihead(heads: int = 3, p_paper=sp.Rational(4, 5), target=sp.Rational(99, 100)) -> MultiHeadDerivation:
    """Derive the independent-heads coverage for ``heads`` heads (>= 1)."""
    if heads < 1:
        raise ValueError(f"the number of heads must be >= 1 (got {heads}).")
    rates = sp.symbols(f"p1:{heads + 1}", nonnegative=True)
    pr = sp.Symbol("p", nonnegative=True)
    coverage = 1 - sp.prod([1 - r for r in rates])
    equal = coverage.subs({r: pr for r in rates})
    h_sym, k_sym = sp.Symbol("H", positive=True, integer=True), sp.Symbol("k", nonnegative=True, integer=True)
    u = sp.Symbol("u", positive=True)
    phi = 1 - (1 - pr) ** h_sym
    curvature = sp.simplify(sp.diff(phi, pr, 2).subs(pr, 1 - u).subs(h_sym, k_sym + 1))
    a, b = sp.symbols("a b", nonnegative=True)
    phi3 = sp.Lambda(pr, 1 - (1 - pr) ** 3)
    gap = sp.factor(sp.expand(phi3((a + b) / 2) - (phi3(a) + phi3(b)) / 2))
    n_heads = 1
    while 1 - (1 - p_paper) ** n_heads < target:
        n_heads += 1
    return MultiHeadDerivation(
        rates=rates, coverage=coverage, equal=sp.factor(equal),
        equal_closes=closes(equal - (1 - (1 - pr) ** heads)),
        curvature=curvature, concave=bool(curvature.is_nonpositive),
        two_point_gap=gap, paper_coverage=1 - (1 - p_paper) ** 3, paper_heads=n_heads)
