"""Symbolic derivations for the gradient chapter (paper §2.3, Lemma 2, Corollary 3).

* The softmax Jacobian ``d alpha / d l = (diag(alpha) - alpha alpha^T) / T`` and the general
  normaliser's ``(diag(F') - alpha F'^T) / S``, derived by differentiation and closed with
  ``simplify(derived - claimed) == 0``; the factorisation ``J = (diag(alpha) - alpha alpha^T)
  diag(F'/F)`` that gives the sharp general bound.
* The tight constants for softmax: spectral norm at most ``1/(2T)`` (a sum-of-squares certificate
  for ``x^T M x <= 2 max_i alpha_i(1 - alpha_i) |x|^2``, attained at a two-way tie), each row's
  norm at most ``sqrt(2)/(4T)``, each diagonal entry at most ``1/(4T)``.
* Lemma 2 (our reconstruction of the two displayed lines, with a complete proof) and its
  specialisation to softmax.
* The sqrt(5) eps example of §2.3, reconstructed and expanded in eps.

Every function returns sympy objects (or booleans computed from them); the chapter displays them
and the tests re-check them. ``n`` is the number of keys used for the finite-dimensional
identities (the identities are checked for that n; their proofs in the chapter hold for every n).
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from normlimits.theory.algebra import closes

T = sp.Symbol("T", positive=True)
eps = sp.Symbol("epsilon", positive=True)
c = sp.Symbol("c", real=True)
p = sp.Symbol("p", nonnegative=True)               # a weight in [0, 1]
Lsym = sp.Symbol("L", positive=True)                # number of keys
S = sp.Symbol("S", positive=True)                   # sum_k F(l_k)
F_min = sp.Symbol("F_min", positive=True)
F_max = sp.Symbol("F_max", positive=True)
D_max = sp.Symbol("D_max", nonnegative=True)        # max_j |F'(l_j)|
alpha_norm = sp.Symbol("A", positive=True)          # ||alpha||_2
alpha_max = sp.Symbol("alpha_max", positive=True)
l_max = sp.Symbol("ell_max", real=True)
l_min = sp.Symbol("ell_min", real=True)
Delta = sp.Symbol("Delta", nonnegative=True)        # l_max - l_min
u = sp.Symbol("u", real=True)                       # eps / T


def logit_symbols(n: int) -> list[sp.Symbol]:
    """Real symbols ``l_1 .. l_n``."""
    if n < 2:
        raise ValueError(f"the derivations need at least n = 2 keys (got {n})")
    return list(sp.symbols(f"ell_1:{n + 1}", real=True))


def weight_symbols(n: int) -> list[sp.Symbol]:
    """Non-negative symbols ``alpha_1 .. alpha_n``."""
    if n < 2:
        raise ValueError(f"the derivations need at least n = 2 keys (got {n})")
    return list(sp.symbols(f"alpha_1:{n + 1}", nonnegative=True))


def on_simplex(expr, weights: list[sp.Symbol]):
    """``expr`` with the last weight replaced by ``1 - sum(others)`` (so ``sum alpha = 1``), expanded."""
    return sp.expand(sp.sympify(expr).subs(weights[-1], 1 - sum(weights[:-1])))


# --------------------------------------------------------------------------- Jacobians

@dataclass(frozen=True)
class SoftmaxJacobian:
    """``alpha = softmax(l / T)`` over ``n`` keys and its Jacobian.

    ``derived``: ``alpha.jacobian(l)`` by differentiation; ``claimed``: ``(diag(alpha) - alpha
    alpha^T) / T`` written in the same ``alpha``; ``closes``: ``simplify(derived - claimed) == 0``;
    ``symmetric``: the derived matrix equals its transpose.
    """

    logits: list
    alpha: sp.Matrix
    derived: sp.Matrix
    claimed: sp.Matrix
    closes: bool
    symmetric: bool


def softmax_jacobian(n: int = 3) -> SoftmaxJacobian:
    """Differentiate softmax at temperature T over ``n`` keys and close the claimed form."""
    ls = logit_symbols(n)
    expo = [sp.exp(li / T) for li in ls]
    total = sum(expo)
    alpha = sp.Matrix([e / total for e in expo])
    derived = alpha.jacobian(sp.Matrix(ls))
    claimed = (sp.diag(*alpha) - alpha * alpha.T) / T
    # exp(l_i/T) -> positive symbols z_i turns both sides into rational functions (fast to cancel)
    z = sp.symbols(f"z_1:{n + 1}", positive=True)
    as_z = {e: zi for e, zi in zip(expo, z)}
    residual = (derived - claimed).subs(as_z)
    return SoftmaxJacobian(ls, alpha, derived, claimed, closes(residual),
                           closes((derived - derived.T).subs(as_z)))


@dataclass(frozen=True)
class GeneralJacobian:
    """``alpha_i = F(l_i) / S`` for an undetermined positive function F over ``n`` keys.

    ``derived``: the Jacobian by differentiation; ``claimed``: ``(diag(F') - alpha F'^T) / S``;
    ``factored``: ``(diag(alpha) - alpha alpha^T) diag(F'/F)``; ``closes`` / ``factor_closes``:
    both equal ``derived`` exactly.
    """

    logits: list
    F: sp.FunctionClass
    alpha: sp.Matrix
    derived: sp.Matrix
    claimed: sp.Matrix
    factored: sp.Matrix
    closes: bool
    factor_closes: bool


def general_jacobian(n: int = 3) -> GeneralJacobian:
    """Differentiate the general normaliser (paper Eq. 3) and close both closed forms."""
    ls = logit_symbols(n)
    F = sp.Function("F", positive=True)
    values = [F(li) for li in ls]
    derivs = [sp.diff(F(li), li) for li in ls]
    total = sum(values)
    alpha = sp.Matrix([v / total for v in values])
    derived = alpha.jacobian(sp.Matrix(ls))
    claimed = (sp.diag(*derivs) - alpha * sp.Matrix(derivs).T) / total
    rho = sp.diag(*[d / v for d, v in zip(derivs, values)])
    factored = (sp.diag(*alpha) - alpha * alpha.T) * rho
    # F(l_i), F'(l_i) -> plain symbols: both sides become rational functions (fast to cancel)
    fs = sp.symbols(f"f_1:{n + 1}", positive=True)
    ds = sp.symbols(f"d_1:{n + 1}", real=True)
    plain = {**dict(zip(derivs, ds))}
    plain_values = dict(zip(values, fs))

    def to_plain(m):
        return m.subs(plain).subs(plain_values)

    return GeneralJacobian(ls, F, alpha, derived, claimed, factored,
                           closes(to_plain(derived) - to_plain(claimed)),
                           closes(to_plain(derived) - to_plain(factored)))


# --------------------------------------------------------------------------- tight constants

@dataclass(frozen=True)
class SpectralBound:
    """The spectral norm of ``M = diag(alpha) - alpha alpha^T`` is at most 1/2 (so ``||J|| <= 1/(2T)``).

    For a vector ``x``: ``quadratic`` = ``x^T M x``; ``variance_form`` = ``1/2 sum_{i,j} alpha_i
    alpha_j (x_i - x_j)^2`` (equal on the simplex: ``variance_closes``); ``certificate`` =
    ``1/2 sum_{i != j} alpha_i alpha_j (x_i + x_j)^2``, a manifest sum of squares with
    ``2 sum_i alpha_i (1 - alpha_i) x_i^2 - x^T M x = certificate`` on the simplex
    (``certificate_closes``); ``quarter_gap`` = ``1/4 - p(1 - p) = (p - 1/2)^2`` (``quarter_closes``).
    So ``x^T M x <= 2 max_i alpha_i(1 - alpha_i) |x|^2 <= |x|^2 / 2``.

    Attainment: ``tie_matrix`` is M at ``alpha = (p, 1 - p)``, ``tie_eigenvalues`` its eigenvalues
    ``{0, 2p(1-p)}``, ``tie_argmax`` the maximising p (1/2), ``tie_max`` the maximum (1/2), with
    eigenvector ``tie_vector`` = (1, -1).
    """

    weights: list
    x: list
    quadratic: sp.Expr
    variance_form: sp.Expr
    certificate: sp.Expr
    variance_closes: bool
    certificate_closes: bool
    quarter_gap: sp.Expr
    quarter_closes: bool
    tie_matrix: sp.Matrix
    tie_eigenvalues: dict
    tie_argmax: sp.Expr
    tie_max: sp.Expr
    tie_vector: sp.Matrix
    tie_vector_closes: bool


def spectral_bound(n: int = 3) -> SpectralBound:
    """Prove ``lambda_max(diag(alpha) - alpha alpha^T) <= 1/2`` for ``n`` keys, attained at a tie."""
    a = weight_symbols(n)
    x = list(sp.symbols(f"x_1:{n + 1}", real=True))
    av, xv = sp.Matrix(a), sp.Matrix(x)
    M = sp.diag(*a) - av * av.T
    quadratic = sp.expand((xv.T * M * xv)[0, 0])
    variance = sp.Rational(1, 2) * sum(a[i] * a[j] * (x[i] - x[j]) ** 2 for i in range(n) for j in range(n))
    certificate = sp.Rational(1, 2) * sum(a[i] * a[j] * (x[i] + x[j]) ** 2
                                          for i in range(n) for j in range(n) if i != j)
    upper = 2 * sum(a[i] * (1 - a[i]) * x[i] ** 2 for i in range(n))
    variance_closes = on_simplex(quadratic - variance, a) == 0
    certificate_closes = on_simplex(upper - quadratic - certificate, a) == 0
    quarter_gap = sp.Rational(1, 4) - p * (1 - p)
    quarter_closes = closes(quarter_gap - (p - sp.Rational(1, 2)) ** 2)
    tie = sp.Matrix([[p * (1 - p), -p * (1 - p)], [-p * (1 - p), p * (1 - p)]])
    tie_alpha = sp.Matrix([p, 1 - p])
    tie_check = closes(tie - (sp.diag(*tie_alpha) - tie_alpha * tie_alpha.T))
    eigen = tie.eigenvals()
    top = 2 * p * (1 - p)
    argmax = sp.solve(sp.diff(top, p), p)[0]
    vector = sp.Matrix([1, -1])
    vector_closes = closes(tie * vector - top * vector) and tie_check
    return SpectralBound(a, x, quadratic, variance, certificate, variance_closes, certificate_closes,
                         quarter_gap, quarter_closes, tie, eigen, argmax, top.subs(p, argmax), vector,
                         vector_closes)


@dataclass(frozen=True)
class RowBound:
    """Row ``i`` of the softmax Jacobian: ``||grad alpha_i||^2 = alpha_i^2 ((1-alpha_i)^2 + sum_{j!=i} alpha_j^2) / T^2``.

    ``row_squared`` (times T^2) for row 1 of ``n`` keys; ``gap`` = ``(1 - alpha_1)^2 - sum_{j>1}
    alpha_j^2`` equals ``cross`` = ``2 sum_{1<j<k} alpha_j alpha_k >= 0`` on the simplex
    (``gap_closes``); hence ``||row||^2 T^2 <= 2 p^2 (1-p)^2`` (``envelope``), maximal at
    ``argmax`` = 1/2 with ``maximum`` = 1/8: ``||row|| <= sqrt(2)/(4T)``. ``tie_value`` is the row
    norm (times T) at the two-way tie, equal to ``sqrt(2)/4``.
    """

    row_squared: sp.Expr
    gap: sp.Expr
    cross: sp.Expr
    gap_closes: bool
    envelope: sp.Expr
    argmax: sp.Expr
    maximum: sp.Expr
    norm_bound: sp.Expr
    tie_value: sp.Expr


def row_bound(n: int = 3) -> RowBound:
    """Derive the largest possible norm of one row of the softmax Jacobian."""
    a = weight_symbols(n)
    row_squared = a[0] ** 2 * ((1 - a[0]) ** 2 + sum(aj ** 2 for aj in a[1:]))
    gap = (1 - a[0]) ** 2 - sum(aj ** 2 for aj in a[1:])
    cross = 2 * sum(a[j] * a[k] for j in range(1, n) for k in range(j + 1, n))
    gap_closes = on_simplex(gap - cross, a) == 0
    envelope = 2 * p ** 2 * (1 - p) ** 2
    critical = [s for s in sp.solve(sp.diff(envelope, p), p) if 0 < s < 1]
    argmax = critical[0]
    maximum = envelope.subs(p, argmax)
    tie = {a[0]: sp.Rational(1, 2), a[1]: sp.Rational(1, 2), **{aj: 0 for aj in a[2:]}}
    tie_value = sp.sqrt(row_squared.subs(tie))
    return RowBound(row_squared, gap, cross, gap_closes, envelope, argmax, maximum,
                    sp.sqrt(maximum) / T, sp.nsimplify(tie_value))


@dataclass(frozen=True)
class DiagonalBound:
    """The diagonal entries ``alpha_i(1 - alpha_i)/T``: maximal at ``argmax`` = 1/2, ``maximum`` = 1/(4T)."""

    entry: sp.Expr
    argmax: sp.Expr
    maximum: sp.Expr


def diagonal_bound() -> DiagonalBound:
    """The largest diagonal entry of the softmax Jacobian, the quantity 1/(4T) does bound."""
    entry = p * (1 - p) / T
    argmax = sp.solve(sp.diff(entry, p), p)[0]
    return DiagonalBound(entry, argmax, sp.simplify(entry.subs(p, argmax)))


# --------------------------------------------------------------------------- Lemma 2

@dataclass(frozen=True)
class Lemma2:
    """Lemma 2 (our reconstruction) for a general positive F, and its softmax specialisation.

    ``first_line`` = ``D_max / S * (1 + sqrt(L) A)`` (A = ||alpha||_2) bounds ``||J||_2`` by the
    triangle inequality and ``||alpha F'^T||_2 = ||alpha||_2 ||F'||_2 <= A sqrt(L) D_max``.
    It decreases in S and increases in A (``d_first_d_S``, ``d_first_d_A``); substituting
    ``S >= L F_min`` and ``A <= F_max / (sqrt(L) F_min)`` gives ``second_line`` =
    ``D_max / L * (1/F_min + F_max/F_min^2)`` (``second_closes``), which grows as F_min -> 0.

    Softmax (``F = e^{l/T}``, ``F' = F/T``): ``softmax_first`` = ``alpha_max/T (1 + sqrt(L) A)``,
    ``softmax_second`` = ``(e^{Delta/T} + e^{2 Delta/T}) / (L T)`` with ``Delta = l_max - l_min``
    (``softmax_second_closes``). ``tie_first`` is the first line at the two-way tie (L = 2): 1/T,
    twice the true norm 1/(2T). ``sharp`` = ``lambda_max * max|F'/F| <= max|F'/F| / 2`` is the
    factorised bound, equal to the norm for softmax.
    """

    first_line: sp.Expr
    second_line: sp.Expr
    d_first_d_S: sp.Expr
    d_first_d_A: sp.Expr
    second_closes: bool
    softmax_first: sp.Expr
    softmax_second: sp.Expr
    softmax_second_closes: bool
    tie_first: sp.Expr
    sharp: sp.Expr


def lemma2() -> Lemma2:
    """Derive the Lemma 2 bound chain and specialise it to softmax."""
    first = D_max / S * (1 + sp.sqrt(Lsym) * alpha_norm)
    d_s = sp.simplify(sp.diff(first, S))
    d_a = sp.simplify(sp.diff(first, alpha_norm))
    substituted = first.subs({S: Lsym * F_min, alpha_norm: F_max / (sp.sqrt(Lsym) * F_min)})
    second = D_max / Lsym * (1 / F_min + F_max / F_min ** 2)
    second_closes = closes(substituted - second)
    # softmax: F = exp(l/T), F' = F/T; max|F'| = F_max / T and alpha_max = F_max / S.
    soft_first = (F_max / T) / S * (1 + sp.sqrt(Lsym) * alpha_norm)
    soft_first = sp.simplify(soft_first.subs(F_max, alpha_max * S))
    soft_second = second.subs({D_max: F_max / T}).subs({F_max: sp.exp(l_max / T), F_min: sp.exp(l_min / T)})
    target = (sp.exp(Delta / T) + sp.exp(2 * Delta / T)) / (Lsym * T)
    soft_second_closes = closes(soft_second - target.subs(Delta, l_max - l_min))
    tie_first = sp.simplify(soft_first.subs({alpha_max: sp.Rational(1, 2), Lsym: 2,
                                             alpha_norm: 1 / sp.sqrt(2)}))
    rho_max = sp.Symbol("rho_max", positive=True)
    lam = sp.Symbol("lambda_max", nonnegative=True)
    return Lemma2(first, second, d_s, d_a, second_closes, soft_first, target, soft_second_closes,
                  tie_first, lam * rho_max)


# --------------------------------------------------------------------------- the sqrt(5) eps example

@dataclass(frozen=True)
class SqrtFiveExample:
    """§2.3's example, reconstructed over two keys (further keys far below change nothing).

    ``l1 = (c + eps, c)`` and ``l2 = (c - eps, c + eps)``: the top two logits swap, and
    ``distance`` = ``||l1 - l2||_2`` = sqrt(5) eps. ``change`` = ``||alpha(l1) - alpha(l2)||_2`` at
    temperature T, exactly; ``series`` its expansion in ``u = eps/T`` to third order, with
    ``leading`` = ``3 sqrt(2)/4 * eps/T`` (``O(eps/T)``); ``linearised`` = ``||J(l1)(l1 - l2)||``
    at the tie (eps -> 0), equal to ``leading``; ``ratio`` = ``leading / distance`` =
    ``3 sqrt(10)/20 / T`` (about 0.474/T, below the bound 1/(2T)); ``saturation`` = the limit of
    ``change`` as ``eps/T -> infinity``: sqrt(2), the simplex's diameter.
    """

    l1: sp.Matrix
    l2: sp.Matrix
    distance: sp.Expr
    change: sp.Expr
    series: sp.Expr
    leading: sp.Expr
    linearised: sp.Expr
    linearised_closes: bool
    ratio: sp.Expr
    saturation: sp.Expr


def sqrt_five_example() -> SqrtFiveExample:
    """Reconstruct and expand the sqrt(5) eps example."""
    l1 = sp.Matrix([c + eps, c])
    l2 = sp.Matrix([c - eps, c + eps])
    distance = sp.sqrt(sp.simplify(((l1 - l2).T * (l1 - l2))[0, 0]))

    def soft(vec):
        e = [sp.exp(v / T) for v in vec]
        return sp.Matrix([x / sum(e) for x in e])

    diff = soft(l1) - soft(l2)
    zero_sum = closes(diff[0] + diff[1])        # the two entries are opposite
    w = sp.Symbol("w", positive=True)           # w = exp(eps/T)
    first = sp.factor(sp.cancel(sp.powsimp(sp.expand(diff[0].subs(eps, u * T)), combine="exp")
                                .subs(sp.exp(u), w).subs(u, sp.log(w))))
    # alpha_1 falls from sigma(eps/T) to sigma(-2 eps/T): first = sigma(u) - sigma(-2u) > 0
    sigma = lambda x: 1 / (1 + sp.exp(-x))  # noqa: E731
    first_u = sigma(u) - sigma(-2 * u)
    check_first = closes((first - first_u.subs(u, sp.log(w))).subs(w, sp.exp(u)).rewrite(sp.exp)
                         .subs(sp.exp(u), w))
    if not (zero_sum and check_first):
        raise AssertionError("the sqrt(5) example's weight change does not reduce to sigma(u) - sigma(-2u)")
    change = sp.sqrt(2) * first_u.subs(u, eps / T)
    in_u = sp.sqrt(2) * first_u
    series = sp.series(in_u, u, 0, 4).removeO()
    leading = sp.simplify(series.coeff(u, 1) * eps / T)
    tie_j = sp.Matrix([[1, -1], [-1, 1]]) / (4 * T)
    lin_vec = tie_j * (l1 - l2)
    linearised = sp.sqrt(sp.simplify((lin_vec.T * lin_vec)[0, 0]))
    ratio = sp.simplify(leading / distance)
    saturation = sp.limit(in_u, u, sp.oo)
    return SqrtFiveExample(l1, l2, distance, change, series, leading, linearised,
                           closes(linearised - leading), ratio, saturation)


# --------------------------------------------------------------------------- the pooled secular tail

@dataclass(frozen=True)
class SecularTail:
    """Why keys far below the second weight can be pooled into one pole (the fast exact norm).

    With ``x = c/mu < 1`` (a key's weight over the root, both in units of the second weight):
    ``remainder`` = ``x/(1-x) - x - x^2`` = ``x^3/(1-x)`` (``remainder_closes``), so a key with
    ``c <= tau`` differs from its first two moments by at most ``x * tau^2/(1-tau)``.
    For two pooled keys ``c_1, c_2`` the pole ``S1/(mu - S2/S1)`` matches the first two moments
    (``pole_first_two``: the coefficients of ``1/mu`` and ``1/mu^2`` vanish in the difference);
    the ``1/mu^3`` coefficient of ``true - pole`` is ``pole_gap`` = ``S3 - S2^2/S1`` =
    ``c_1 c_2 (c_1 - c_2)^2/(c_1 + c_2) >= 0`` (``pole_gap_nonnegative``): the pole never
    overestimates, Jensen's inequality for every higher moment.
    """

    remainder: sp.Expr
    remainder_closes: bool
    pole_first_two: bool
    pole_gap: sp.Expr
    pole_gap_nonnegative: bool


def secular_tail() -> SecularTail:
    """The remainder identity and the two-moment pole of the pooled secular tail."""
    x = sp.Symbol("x", positive=True)
    remainder = sp.factor(sp.simplify(x / (1 - x) - x - x ** 2))
    c1, c2, mu, z = sp.symbols("c_1 c_2 mu z", positive=True)          # z = 1/mu
    s1, s2 = c1 + c2, c1 ** 2 + c2 ** 2
    true = c1 / (mu - c1) + c2 / (mu - c2)
    pole = s1 / (mu - s2 / s1)
    gap = sp.series((true - pole).subs(mu, 1 / z), z, 0, 4).removeO()
    gap3 = sp.factor(sp.simplify(gap.coeff(z, 3)))
    return SecularTail(remainder, closes(remainder - x ** 3 / (1 - x)),
                       closes(gap.coeff(z, 1)) and closes(gap.coeff(z, 2)), gap3,
                       bool(gap3.is_nonnegative))


# --------------------------------------------------------------------------- g at T -> 0

@dataclass(frozen=True)
class ZeroTemperatureSensitivity:
    """Figure 4's ``g(T, eps)`` in the limit ``T -> 0``, where only swaps of the top two logits move
    the (one-hot) weights, each by ``sqrt(2)``: ``g(0+, eps) = sqrt(2) P(swap) / eps``.

    With the top-two gap ``D >= 0`` of density ``f`` and the perturbation's difference
    ``w = v_2 - v_1`` independent of it, ``P(swap) = P(D < eps w)`` and, substituting ``D = eps u``,
    ``P(swap)/eps = int_0^oo f(eps u) P(w > u) du``: non-increasing in ``eps`` whenever ``f`` is
    non-increasing on ``[0, oo)``, and tending to ``f(0) E[w_+]`` as ``eps -> 0``: no dependence
    on ``eps`` while ``eps`` is small against the gaps' scale.

    Worked case (exponential gaps of rate ``lam``, ``w ~ N(0, sigma^2)``): ``g`` (closed form),
    ``small_eps`` its ``eps -> 0`` limit, ``small_eps_general`` whether that equals
    ``sqrt(2) lam E[w_+]`` (``E[w_+] = sigma / sqrt(2 pi)``), ``large_eps`` the limit of
    ``eps g`` as ``eps -> oo`` (``sqrt(2) P(w > 0) = sqrt(2)/2``: half the cap ``sqrt(2)/eps``),
    ``decreasing`` whether ``dg/d eps < 0`` at every sampled ``lam sigma eps`` in ``[1e-3, 30]``.
    """

    g: sp.Expr
    small_eps: sp.Expr
    small_eps_general: bool
    large_eps: sp.Expr
    decreasing: bool


def zero_temperature_sensitivity() -> ZeroTemperatureSensitivity:
    """The T -> 0 sensitivity for exponential top-two gaps and a Gaussian perturbation difference."""
    lam, sigma, x = sp.Symbol("lambda", positive=True), sp.Symbol("sigma", positive=True), sp.Symbol("x", positive=True)
    w = sp.Symbol("w", real=True)
    tail = sp.erfc(x / (sigma * sp.sqrt(2))) / 2                       # P(w > x), w ~ N(0, sigma^2)
    g = sp.simplify(sp.sqrt(2) * sp.integrate(lam * sp.exp(-lam * eps * x) * tail, (x, 0, sp.oo)))
    small = sp.simplify(sp.limit(g, eps, 0, "+"))
    density = sp.exp(-w ** 2 / (2 * sigma ** 2)) / (sigma * sp.sqrt(2 * sp.pi))
    mean_positive = sp.integrate(w * density, (w, 0, sp.oo))
    large = sp.limit(eps * g, eps, sp.oo)
    slope = sp.diff(g, eps).subs({lam: 1, sigma: 1})
    # 30 significant digits (erf - 1 cancels in double precision; beyond lam sigma eps = 30 the
    # exp(x^2/2) factor outruns even those, and the limit large_eps takes over)
    decreasing = all(sp.N(slope.subs(eps, sp.Integer(10) ** sp.Rational(k, 4)), 30) < 0
                     for k in range(-12, 7))
    return ZeroTemperatureSensitivity(g, small, closes(small - sp.sqrt(2) * lam * mean_positive),
                                      large, decreasing)
