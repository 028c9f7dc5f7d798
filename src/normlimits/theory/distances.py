"""Symbolic derivations for the distance chapter (paper Theorem 1 and Corollary 2).

What is derived here (all sympy; the chapter displays the expressions, the tests re-check them):

* :func:`two_point_readings`: the two readings of the paper's Eq. 7 on two orthogonal tokens. The
  sum of norms collapses to 0 at N = L; the norm of the sum stays at ``||s|| >= 1/sqrt(2)``.
* :func:`subset_probabilities`: for a uniform N-subset of L tokens, ``P(i not in I)``,
  ``P(j in I | i not in I)`` and ``P(j, k in I | i not in I)`` from binomial counts.
* :func:`without_replacement_variance`: the variance of the sum of N vectors drawn without
  replacement from M, in closed form ``N (M - N)/(M - 1) * sigma^2``; with ``M = L - 1`` this is
  the Jensen-gap term of the reconstructed Theorem 1 part 2.
* :func:`fixed_set_bound_algebra`: the sums that turn the triangle-inequality chain into the two
  fixed-set bounds, and Lagrange's identity showing the Cauchy-Schwarz form is never tighter.
* :func:`lemma1_regime`: under Lemma 1 (every weight in ``[C1/L, C2/L]``, value norms ``<= X``)
  neither d~ nor the expectation can grow linearly in L.
* :func:`expectation_cap`: for ANY weights, ``E[d~] <= (L-N)(N+1)/L * sum_i ||alpha_i x_i||``, so at
  fixed N the expectation is bounded in L; the true d~ is ``(L - N) ||s_N||`` up to
  ``sum_{k not in I} ||y_k||`` (triangle inequality), so it grows linearly iff ``||s_N||`` does
  not vanish.
* :func:`reading_expectations`: the conditional moments of the context vector that give every
  reading's ``main`` (Jensen) and ``rms`` (exact second moment) in ``normlimits.metrics.readings``.
* :func:`second_moment_sum`: ``sum_i E[||y_i - s||^2 | i not in I]`` in closed form in
  ``sum ||y_i||^2`` and ``||T||^2``; with Cauchy-Schwarz it bounds ``E d~`` from above.
* :func:`flat_gaussian`: flat weights and Gaussian vectors, where ``E d~ / sum ||alpha_i x_i||``
  tends to ``sqrt(N + 1)``: Corollary 2(i)'s limit holds for the main sum
  (:func:`main_sum_limits`) but not for the expectation.
* :func:`sink_model`: an attention sink (weight ``a`` on one token, the rest uniform) makes
  d~ grow like ``a L`` while the expectation's main sum tends to the constant ``2 a``.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from normlimits.theory.algebra import closes

L = sp.Symbol("L", positive=True, integer=True)         # visible keys
N = sp.Symbol("N", positive=True, integer=True)         # top-N size
M = sp.Symbol("M", positive=True, integer=True)         # population size (L - 1 other keys)
a = sp.Symbol("a", positive=True)                       # a weight in (0, 1)
A = sp.Symbol("A", nonnegative=True)                    # sum_j ||y_j||^2
B = sp.Symbol("B", nonnegative=True)                    # ||sum_j y_j||^2
C1 = sp.Symbol("C_1", positive=True)
C2 = sp.Symbol("C_2", positive=True)
X = sp.Symbol("X", positive=True)                       # largest value norm
abar = sp.Symbol(r"\bar{\alpha}_N", nonnegative=True)   # top-N mass
K = sp.Symbol("K", positive=True, integer=True)         # L - N, the non-selected count
i = sp.Symbol("i", positive=True, integer=True)
alpha = sp.IndexedBase(r"\alpha")


def _norm(v: sp.Matrix) -> sp.Expr:
    return sp.sqrt(sum(c ** 2 for c in v))


@dataclass(frozen=True)
class TwoPoint:
    """Two orthogonal unit tokens ``x_1 = e_1``, ``x_2 = e_2`` with weights ``a >= 1/2`` and
    ``1 - a`` (token 1 is the top-1). Fields: the sum-of-norms reading at N = 1 and N = 2,
    the norm-of-sum reading at N = 1 and N = 2, and the minimum over ``a`` of the latter at
    N = 2 (with its argmin)."""

    sum_of_norms_n1: sp.Expr
    sum_of_norms_n2: sp.Expr
    norm_of_sum_n1: sp.Expr
    norm_of_sum_n2: sp.Expr
    norm_of_sum_n2_min: sp.Expr
    argmin: sp.Expr


def two_point_readings() -> TwoPoint:
    """The two readings of Eq. 7 on two tokens, at N = 1 and N = L = 2."""
    x1, x2 = sp.Matrix([1, 0]), sp.Matrix([0, 1])
    y1, y2 = a * x1, (1 - a) * x2
    s1, s2 = y1, y1 + y2                                  # context vectors at N = 1, 2
    sum_norms_1 = _norm(y2 - s1)                          # one non-selected token
    sum_norms_2 = sp.Integer(0)                           # empty sum over the non-selected
    norm_sum_1 = _norm(y2 - s1)
    norm_sum_2 = _norm(sp.zeros(2, 1) - s2)               # ||(empty sum) - s|| = ||s||
    crit = sp.solve(sp.diff(norm_sum_2 ** 2, a), a)[0]
    return TwoPoint(sp.simplify(sum_norms_1), sum_norms_2, sp.simplify(norm_sum_1),
                    sp.simplify(norm_sum_2), sp.simplify(norm_sum_2.subs(a, crit)), crit)


@dataclass(frozen=True)
class SubsetProbabilities:
    """Uniform N-subsets of L tokens: ``excluded`` = P(i not in I); ``included_given_excluded``
    = P(j in I | i not in I); ``pair_given_excluded`` = P(j, k in I | i not in I), j != k,
    all simplified from binomial ratios."""

    excluded: sp.Expr
    included_given_excluded: sp.Expr
    pair_given_excluded: sp.Expr


def subset_probabilities() -> SubsetProbabilities:
    """Inclusion probabilities of a uniform N-subset, from counting subsets."""
    total = sp.binomial(L, N)
    excl = sp.combsimp(sp.binomial(L - 1, N) / total)               # subsets avoiding i
    inc = sp.combsimp(sp.binomial(L - 2, N - 1) / sp.binomial(L - 1, N))
    pair = sp.combsimp(sp.binomial(L - 3, N - 2) / sp.binomial(L - 1, N))
    return SubsetProbabilities(sp.factor(excl), sp.factor(inc), sp.factor(pair))


@dataclass(frozen=True)
class WithoutReplacement:
    """Variance of ``sum_{j in I} y_j`` for a uniform N-subset I of M vectors.

    ``variance``: ``pi1 A + pi2 (B - A) - pi1^2 B`` from the inclusion probabilities
    (A = sum ||y_j||^2, B = ||sum y_j||^2); ``closed_form``: ``N (M - N)/(M - 1) sigma^2`` with
    the population variance ``sigma^2 = A/M - B/M^2``; ``difference``: their difference
    (simplifies to 0); ``jensen_factor``: the closed form's factor at ``M = L - 1``.
    """

    variance: sp.Expr
    closed_form: sp.Expr
    difference: sp.Expr
    jensen_factor: sp.Expr


def without_replacement_variance() -> WithoutReplacement:
    """Derive the without-replacement variance used for the Jensen-gap bound."""
    pi1 = N / M
    pi2 = N * (N - 1) / (M * (M - 1))
    # E||sum 1_j y_j||^2 = sum_j pi1 ||y_j||^2 + sum_{j != k} pi2 <y_j, y_k>; minus ||E sum||^2.
    variance = pi1 * A + pi2 * (B - A) - pi1 ** 2 * B
    sigma2 = A / M - B / M ** 2
    closed = N * (M - N) / (M - 1) * sigma2
    diff = sp.simplify(variance - closed)
    factor = sp.factor((N * (M - N) / (M - 1)).subs(M, L - 1))
    return WithoutReplacement(sp.factor(variance), closed, diff, factor)


@dataclass(frozen=True)
class FixedSetAlgebra:
    """Sums behind the fixed-set bounds, over the K = L - N non-selected tokens.

    ``linear_sum``: ``sum_i (alpha_i + abar)`` (the linear bound's bracket, with
    ``sum_i alpha_i = 1 - abar``); ``square_sum``: ``sum_i (alpha_i + abar)^2`` (under the
    Cauchy-Schwarz bound's root); ``lagrange_3``: ``3 sum a_i^2 - (sum a_i)^2`` for three terms,
    factored into a sum of squares (so ``sqrt(K sum a^2) >= sum a``: the Cauchy form is never
    tighter than the linear one).
    """

    linear_sum: sp.Expr
    square_sum: sp.Expr
    lagrange_3: sp.Expr
    lagrange_3_squares: sp.Expr


def fixed_set_bound_algebra() -> FixedSetAlgebra:
    """The algebra that closes the two fixed-set bounds."""
    outside_mass = sp.Sum(alpha[i], (i, 1, K))
    lin = sp.expand(sp.Sum(alpha[i] + abar, (i, 1, K))).doit()
    lin = lin.subs(outside_mass, 1 - abar)
    sq = sp.expand(sp.Sum(sp.expand((alpha[i] + abar) ** 2), (i, 1, K))).doit()
    sq = sp.expand(sq).subs(sp.Sum(2 * abar * alpha[i], (i, 1, K)), 2 * abar * (1 - abar))
    a1, a2, a3 = sp.symbols("a_1 a_2 a_3", real=True)
    lag = sp.expand(3 * (a1 ** 2 + a2 ** 2 + a3 ** 2) - (a1 + a2 + a3) ** 2)
    squares = ((a1 - a2) ** 2 + (a1 - a3) ** 2 + (a2 - a3) ** 2)
    return FixedSetAlgebra(lin, sq, lag, squares)


@dataclass(frozen=True)
class Lemma1Regime:
    """Corollary 2(i) under Lemma 1 (``alpha_i <= C2/L``, ``||x_i|| <= X``, fixed N).

    ``individual_bound``: ``sum_i ||alpha_i x_i|| <= C2 X``; ``true_bound``: d~ <=
    ``sum_{k not in I} (||y_k|| + ||s_N||) <= C2 X + (L - N) N C2 X / L``;
    ``expected_bound``: main <= ``(L-N)/L ((1 + c) sum_i ||y_i|| + c L ||T||)`` with
    ``c = N/(L-1)`` and ``||T|| <= X``;
    ``*_slope``: the limit of each bound divided by L as L -> oo (all 0: no linear growth).
    """

    individual_bound: sp.Expr
    true_bound: sp.Expr
    expected_bound: sp.Expr
    individual_slope: sp.Expr
    true_slope: sp.Expr
    expected_slope: sp.Expr


def lemma1_regime() -> Lemma1Regime:
    """Bounds on d~ and E when every weight is Theta(1/L): both stay O(1)."""
    individual = L * (C2 / L) * X                                   # L terms, each <= C2 X / L
    s_norm = N * (C2 / L) * X                                       # ||s_N|| <= abar_N X
    true = individual + (L - N) * s_norm
    c = N / (L - 1)
    # ||y_i - c (T - y_i)|| <= ||y_i|| + c (||T|| + ||y_i||), ||T|| <= X, sum_i ||y_i|| <= C2 X
    expected = (L - N) / L * (individual + c * (L * X + individual))
    return Lemma1Regime(sp.simplify(individual), sp.simplify(true), sp.simplify(expected),
                        sp.limit(individual / L, L, sp.oo), sp.limit(true / L, L, sp.oo),
                        sp.limit(expected / L, L, sp.oo))


@dataclass(frozen=True)
class ExpectationCap:
    """A cap on E for ANY weights: ``E[d~] <= factor * sum_i ||alpha_i x_i||``.

    From ``d~ <= sum_{i not in I} ||y_i|| + (L - N) ||s||``, ``E sum_{i not in I} ||y_i|| =
    (L-N)/L S`` and ``E ||s|| <= sum_j P(j in I) ||y_j|| = (N/L) S`` with ``S = sum_i ||y_i||``.
    ``factor`` = ``(L - N)(N + 1)/L``; ``factor_limit`` its limit as L -> oo (``N + 1``);
    ``slope``: lim factor / L (0: E cannot grow linearly in L at fixed N, since
    ``S <= max_i ||x_i||``).
    """

    factor: sp.Expr
    factor_limit: sp.Expr
    slope: sp.Expr


def expectation_cap() -> ExpectationCap:
    """Derive the cap on the random-subset expectation."""
    factor = sp.factor((L - N) / L + (L - N) * N / L)
    return ExpectationCap(factor, sp.limit(factor, L, sp.oo), sp.limit(factor / L, L, sp.oo))


@dataclass(frozen=True)
class SinkModel:
    """An attention sink: weight ``a`` on token 1 (``x_1 = e_1``) and ``(1 - a)/(L - 1)`` on
    each other token (``x_k = e_2``), N = 1. ``true``: d~; ``expected_main``: the main sum of E;
    ``true_slope``: lim d~/L; ``expected_limit``: lim main as L -> oo."""

    true: sp.Expr
    expected_main: sp.Expr
    true_slope: sp.Expr
    expected_limit: sp.Expr


def sink_model() -> SinkModel:
    """Concentrated weights: the true distance grows like a L, the expectation stays bounded."""
    e1, e2 = sp.Matrix([1, 0]), sp.Matrix([0, 1])
    beta = (1 - a) / (L - 1)
    y1, yk = a * e1, beta * e2
    s = y1                                                          # top-1 is the sink
    true = (L - 1) * _norm(yk - s)
    total = y1 + (L - 1) * yk
    c = 1 / (L - 1)                                                 # N / (L - 1), N = 1
    keep = (L - 1) / L                                              # (L - N) / L
    main = keep * (_norm(y1 - c * (total - y1)) + (L - 1) * _norm(yk - c * (total - yk)))
    return SinkModel(sp.simplify(true), sp.simplify(main),
                     sp.limit(true / L, L, sp.oo), sp.limit(main, L, sp.oo))




@dataclass(frozen=True)
class ReadingExpectations:
    """What every reading's expectation needs from a uniform N-subset I of the L keys.

    Family (``sum_{i not in I} g_i ||a_i - s||`` with ``a_i`` fixed): given ``i not in I``,
    ``E[s] = family_mean * (T - y_i)`` and ``Var(s) = family_variance * sigma2_{-i}``.
    Norm of sum (``||T - 2 s||``, I over all L keys): ``E[T - 2s] = norm_sum_mean * T`` and
    ``Var(T - 2s) = norm_sum_variance * sigma2``. ``bias_variance``: ``E(a - s)^2 - ((a - E s)^2
    + Var s)`` for one coordinate (0: the second moment that gives ``rms`` is exact).
    """

    family_mean: sp.Expr
    family_variance: sp.Expr
    norm_sum_mean: sp.Expr
    norm_sum_variance: sp.Expr
    bias_variance: sp.Expr


def reading_expectations() -> ReadingExpectations:
    """Derive the conditional moments behind every reading's ``main`` and ``rms``."""
    probs = subset_probabilities()
    wr = without_replacement_variance()
    factor_all = sp.factor((N * (M - N) / (M - 1)).subs(M, L))        # I drawn from all L keys
    a_, m_, v_ = sp.symbols("a m v", real=True)
    s2_moment = m_ ** 2 + v_                                          # E s^2 = (E s)^2 + Var s
    bias_variance = sp.expand(a_ ** 2 - 2 * a_ * m_ + s2_moment - ((a_ - m_) ** 2 + v_))
    return ReadingExpectations(probs.included_given_excluded, wr.jensen_factor,
                               sp.factor(1 - 2 * N / L), sp.factor(4 * factor_all), bias_variance)


Q = sp.Symbol("Q", nonnegative=True)                    # sum_i ||alpha_i x_i||^2
S = sp.Symbol("S", nonnegative=True)                    # sum_i ||alpha_i x_i||
Tn = sp.Symbol(r"\lVert T\rVert", nonnegative=True)     # ||sum_i alpha_i x_i||


@dataclass(frozen=True)
class SecondMoment:
    """``R2 = sum_i E[||y_i - s||^2 | i not in I]`` for a uniform N-subset of L keys, in terms of
    ``Q = sum ||y_i||^2`` and ``||T||^2`` only.

    ``closed_form`` (simplified); ``checks``: the closed form minus a brute-force expansion over
    all subsets, with symbolic scalar y's, for (L, N) = (4, 2), (5, 1), (5, 3) (each 0);
    ``scaled_limit``: the limit
    of ``L * R2`` as L -> oo at fixed ``L Q`` and ``||T||``, which by Cauchy-Schwarz over i gives
    the upper bound ``E d~ <= (L-N)/L sqrt(L R2)``.
    """

    closed_form: sp.Expr
    checks: tuple
    scaled_limit: sp.Expr


def second_moment_sum() -> SecondMoment:
    """Sum over i of the exact conditional second moment (family reading ``||y_i - s||``)."""
    c = N / (L - 1)
    B2 = Tn ** 2
    # sum_i ||(1 + c) y_i - c T||^2 with sum_i y_i = T, sum_i ||y_i||^2 = Q
    mean_part = (1 + c) ** 2 * Q - 2 * c * (1 + c) * B2 + L * c ** 2 * B2
    # sum_i sigma2_{-i} = sum_i [(Q - ||y_i||^2)/(L-1) - ||T - y_i||^2/(L-1)^2]
    sigma_sum = Q - (L * B2 - 2 * B2 + Q) / (L - 1) ** 2
    closed = sp.factor(sp.simplify(mean_part + N * (L - 1 - N) / (L - 2) * sigma_sum))
    import itertools

    checks = []
    for size, n in ((4, 2), (5, 1), (5, 3)):          # brute force over every subset
        ys = sp.symbols(f"y1:{size + 1}", real=True)
        brute = 0
        for i_ in range(size):
            others = [j for j in range(size) if j != i_]
            subsets = list(itertools.combinations(others, n))
            brute += sum((ys[i_] - sum(ys[j] for j in sub)) ** 2 for sub in subsets) / len(subsets)
        at = closed.subs({L: size, N: n, Q: sum(y ** 2 for y in ys), Tn: sum(ys)})
        checks.append(sp.expand(at - brute))
    q = sp.Symbol("q", positive=True)                                 # q = L Q
    limit = sp.limit(sp.simplify(L * closed.subs(Q, q / L)), L, sp.oo)
    return SecondMoment(closed, tuple(checks), sp.expand(limit.subs(q, L * Q)))


@dataclass(frozen=True)
class FlatGaussian:
    """Flat weights ``alpha_i = 1/L`` and i.i.d. ``x_i ~ N(0, sigma^2 I_d)``; ``m`` stands for the
    mean norm of a standard Gaussian vector in d dimensions.

    ``ratio``: ``E_x[E_I d~] / E_x[sum_i ||alpha_i x_i||]`` (exact); ``ratio_limit``: its limit as
    L -> oo, ``sqrt(N + 1)``; ``allowance``: ``N E_x||T|| / E_x S``, the relative size of the
    old statement's error term; ``gap_over_allowance_limit``: the limit of
    ``(ratio - 1)/allowance`` (oo: the gap is not O(N ||T||)), taken with ``sqrt(N + 1) = 1 + p``,
    p > 0, so that sympy knows the sign.
    """

    ratio: sp.Expr
    ratio_limit: sp.Expr
    allowance: sp.Expr
    gap_over_allowance_limit: sp.Expr


def flat_gaussian() -> FlatGaussian:
    """The counterexample to "E d~ -> sum ||alpha_i x_i|| up to O(N ||sum alpha_i x_i||)"."""
    sigma, m = sp.symbols("sigma m", positive=True)
    # given I (independent of x) and i not in I: y_i - s = (x_i - sum_{j in I} x_j)/L, a Gaussian
    # with covariance (N + 1) sigma^2 / L^2 I_d, whose mean norm is sqrt(N + 1) sigma m / L
    expected = (L - N) * sp.sqrt(N + 1) * sigma * m / L               # (L - N) such terms
    individual = L * sigma * m / L                                     # L terms sigma m / L
    total_norm = sigma * m / sp.sqrt(L)                                # T ~ N(0, sigma^2/L I_d)
    ratio = sp.simplify(expected / individual)
    allowance = sp.simplify(N * total_norm / individual)
    p = sp.Symbol("p", positive=True)
    gap = ((ratio - 1) / allowance).subs(N, p * (p + 2))
    gap = gap.replace(lambda e: e.is_Pow and e.exp == sp.Rational(1, 2),
                      lambda e: sp.sqrt(sp.factor(e.base)))            # sqrt((p + 1)^2) = p + 1
    return FlatGaussian(ratio, sp.limit(ratio, L, sp.oo), allowance, sp.limit(gap, L, sp.oo))


@dataclass(frozen=True)
class MainSumLimits:
    """Corollary 2(i) for the main sum, which it does hold for: with ``S = sum ||y_i||``,
    ``(L-N)/L ((1+c) S - c L ||T||) <= main <= (L-N)/L ((1+c) S + c L ||T||)``, c = N/(L-1).
    ``s_factor`` and ``t_factor``: the limits of ``(L-N)/L (1+c)`` (1) and ``(L-N)/L c L`` (N)."""

    s_factor: sp.Expr
    t_factor: sp.Expr


def main_sum_limits() -> MainSumLimits:
    """The factors of the triangle-inequality sandwich of the main sum, as L -> oo."""
    c = N / (L - 1)
    return MainSumLimits(sp.limit((L - N) / L * (1 + c), L, sp.oo),
                         sp.limit((L - N) / L * c * L, L, sp.oo))
