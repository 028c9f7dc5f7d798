"""Symbolic derivations for the alternatives chapter: which of the paper's limits each normaliser
escapes.

Two limits have short proofs for every normaliser:

* **vanishing** (Lemma 1): with bounded logits ``|z_j| <= a``, is every weight ``O(1/L)``?
  - SSMax: ``F = n^{s z}`` depends on ``n = L``; one logit at ``+a`` and the rest at ``-a`` give
    a top weight ``1 / (1 + (L-1) L^{-2 s a})`` which tends to 1 when ``2 s a > 1``;
  - sparsemax / 1.5-entmax: a top-logit gap of at least 1 / 2 gives the one-hot row for every L;
  - softmax_1: every weight is below softmax's, ``e^{2a}/L``; its row sum tends to 1;
  - adaptive temperature: ``beta`` lies in ``[1, B]`` with ``B`` the polynomial's maximum, so
    ``alpha_i <= e^{2 B a} / L``;
  - SA-softmax (normalised): ``alpha_i = c_i softmax_i`` with ``0 <= c_i <= 1``.
* **gradient** (Corollary 3): does ``sup_z ||d alpha / d z||`` at temperature T still grow like
  ``1/T``? Yes for all of them; the constants are derived here (sparsemax ``1/T``, 1.5-entmax
  ``1/(sqrt 2 T)`` at a two-way tie, SSMax ``s log(n)/(2T)``, ...).

Every function returns sympy objects (or floats for the polynomial's numeric roots); the chapter
displays them and the tests re-check them.
"""

from __future__ import annotations

from dataclasses import dataclass

import sympy as sp

from normlimits.metrics.normalizers import VELICKOVIC_POLYNOMIAL

from normlimits.theory.algebra import closes

L = sp.Symbol("L", positive=True)            # visible keys
a = sp.Symbol("a", positive=True)            # logit bound |z_j| <= a
s = sp.Symbol("s", positive=True)            # SSMax scale
x = sp.Symbol("x", positive=True)            # 2 s a, SSMax's effective exponent
e = sp.Symbol("epsilon", positive=True)      # a positive margin
g = sp.Symbol("g", positive=True)            # a logit gap
H = sp.Symbol("H", nonnegative=True)         # entropy (nats)
p = sp.Symbol("p", positive=True)            # a probability
k = sp.Symbol("k", integer=True, positive=True)


# ------------------------------------------------------------------------------------ SSMax
@dataclass(frozen=True)
class SSMaxVanishing:
    """SSMax with one logit at ``+a`` and ``L - 1`` at ``-a`` (the corner of Lemma 1's box).

    ``top_weight``: ``L^{s a} / (L^{s a} + (L-1) L^{-s a})`` simplified to
    ``1 / (1 + (L-1) L^{-x})`` with ``x = 2 s a``; ``ratio``: ``F_max / F_min = L^{x}``, which
    depends on L (so Lemma 1's constants do not exist); ``limit_above`` / ``limit_below`` /
    ``limit_at``: the limit of the top weight as L -> oo for ``x = 1 + eps``, ``x = 1 - eps``
    (``0 < eps < 1``) and ``x = 1``; ``scaled_limit_above``: ``L * top_weight -> oo`` (so no
    ``C_2 / L`` bound).
    """

    top_weight: sp.Expr
    top_weight_x: sp.Expr
    ratio: sp.Expr
    limit_above: sp.Expr
    limit_below: sp.Expr
    limit_at: sp.Expr
    scaled_limit_above: sp.Expr


def ssmax_vanishing() -> SSMaxVanishing:
    f_max = L ** (s * a)
    f_min = L ** (-s * a)
    top = f_max / (f_max + (L - 1) * f_min)
    top_x = 1 / (1 + (L - 1) * L ** (-x))
    eps_small = sp.Symbol("epsilon", positive=True)
    below = top_x.subs(x, 1 - eps_small)
    above = top_x.subs(x, 1 + e)
    # 0 < eps < 1 for the limit below: write eps = 1/(1+t), t > 0.
    t = sp.Symbol("t", positive=True)
    below_t = below.subs(eps_small, 1 / (1 + t))
    return SSMaxVanishing(
        top_weight=top,
        top_weight_x=top_x,
        ratio=sp.simplify(f_max / f_min),
        limit_above=sp.limit(above, L, sp.oo),
        limit_below=sp.limit(below_t, L, sp.oo),
        limit_at=sp.limit(top_x.subs(x, 1), L, sp.oo),
        scaled_limit_above=sp.limit(L * above, L, sp.oo),
    )


# ---------------------------------------------------------------------- sparse normalisers
@dataclass(frozen=True)
class SparseOneHot:
    """Sparsemax and 1.5-entmax of ``(z_1, z_2, ...)`` with ``z_1 - z_j >= gap`` for all j > 1.

    ``sparsemax_tau = z_1 - 1`` solves ``sum_j [z_j - tau]_+ = 1`` as soon as the gap is >= 1;
    ``entmax_tau = z_1 / 2 - 1`` solves ``sum_j [z_j / 2 - tau]_+^2 = 1`` as soon as the gap is
    >= 2: the rows are one-hot whatever L. ``sparsemax_two``: the two-key solution
    ``p_1 = (1 + g) / 2`` for a gap ``0 <= g < 1`` (a check of the threshold algebra);
    ``sparsemax_top_residual`` / ``entmax_top_residual``: top weight minus 1 at those
    thresholds (0).
    """

    sparsemax_top_residual: sp.Expr
    entmax_top_residual: sp.Expr
    sparsemax_other_at_gap: sp.Expr
    entmax_other_at_gap: sp.Expr
    sparsemax_two: sp.Expr


def sparse_one_hot() -> SparseOneHot:
    z1 = sp.Symbol("z_1", real=True)
    tau_sp = z1 - 1
    tau_ent = z1 / 2 - 1
    # a competitor exactly at the gap: z_j = z_1 - 1 (sparsemax), z_1 - 2 (entmax)
    other_sp = (z1 - 1) - tau_sp
    other_ent = (z1 - 2) / 2 - tau_ent
    tau = sp.Symbol("tau", real=True)
    z2 = z1 - g
    sol = sp.solve(sp.Eq((z1 - tau) + (z2 - tau), 1), tau)[0]
    return SparseOneHot(
        sparsemax_top_residual=sp.simplify((z1 - tau_sp) - 1),
        entmax_top_residual=sp.simplify((z1 / 2 - tau_ent) ** 2 - 1),
        sparsemax_other_at_gap=sp.simplify(other_sp),
        entmax_other_at_gap=sp.simplify(other_ent),
        sparsemax_two=sp.simplify(z1 - sol),
    )


# ------------------------------------------------------------------------------- softmax_1
@dataclass(frozen=True)
class SoftmaxOneMass:
    """softmax_1's row sum ``S / (1 + S)`` with ``S = sum_j e^{z_j} >= L e^{-a}``.

    ``mass_floor``: ``L e^{-a} / (1 + L e^{-a})`` (the sum is increasing in S);
    ``mass_limit``: its limit as L -> oo (1: the "attend to nothing" option fades);
    ``weight_gap``: ``softmax_i - softmax1_i = e^{z_i} / (S (1 + S)) >= 0``.
    """

    mass_floor: sp.Expr
    mass_limit: sp.Expr
    weight_gap: sp.Expr


def softmax_one_mass() -> SoftmaxOneMass:
    S = sp.Symbol("S", positive=True)
    w = sp.Symbol("w", positive=True)   # e^{z_i}
    floor = (L * sp.exp(-a)) / (1 + L * sp.exp(-a))
    gap = sp.factor(w / S - w / (1 + S))
    return SoftmaxOneMass(mass_floor=floor, mass_limit=sp.limit(floor, L, sp.oo), weight_gap=gap)


# ---------------------------------------------------------------------- adaptive temperature
@dataclass(frozen=True)
class AdaptiveBeta:
    """The polynomial ``poly(H)`` of Velickovic et al. and what bounds it.

    ``poly``: the polynomial in H; ``beta_max`` (B): its maximum over ``H > 1/2`` and where
    (``beta_argmax``); ``off_above``: the entropy above which ``poly(H) < 1`` for good, so
    ``beta = 1`` (plain softmax); ``on_interval``: the interval of H where ``beta > 1``;
    ``at_log2``: ``poly(log 2)`` (< 1: at a two-way tie beta = 1).
    """

    poly: sp.Expr
    beta_max: float
    beta_argmax: float
    on_interval: tuple[float, float]
    off_above: float
    at_log2: float


def adaptive_beta_bounds() -> AdaptiveBeta:
    poly = sum(sp.Float(c, 15) * H ** i for i, c in enumerate(reversed(VELICKOVIC_POLYNOMIAL)))
    crit = [float(r) for r in sp.Poly(sp.diff(poly, H), H).nroots() if abs(sp.im(r)) < 1e-12]
    crit = [r for r in crit if r > 0.5]
    values = [float(poly.subs(H, r)) for r in crit]
    best = max(range(len(crit)), key=lambda i: values[i])
    ones = sorted(float(sp.re(r)) for r in sp.Poly(poly - 1, H).nroots()
                  if abs(sp.im(r)) < 1e-12 and float(sp.re(r)) > 0.5)
    return AdaptiveBeta(poly=poly, beta_max=values[best], beta_argmax=crit[best],
                        on_interval=(ones[0], ones[-1]), off_above=ones[-1],
                        at_log2=float(poly.subs(H, sp.log(2))))


# ------------------------------------------------------------------------------ Jacobians
@dataclass(frozen=True)
class JacobianConstants:
    """Worst-case Jacobian constants (multiply by 1/T).

    ``sparsemax_projection``: ``P^2 - P`` for ``P = I - 1 1^T / k`` at k = 4 (zero: P is an
    orthogonal projection, eigenvalues 0 and 1, so the norm is 1 on any support of 2+ keys);
    ``sparsemax_eigenvalues``: P's eigenvalues at k = 4;
    ``entmax_two_eigen``: nonzero eigenvalue of ``diag(g) - g g^T / sum g`` for two keys,
    ``2 g_1 g_2 / (g_1 + g_2)``; ``entmax_two_in_p``: the same with ``g = sqrt(p), sqrt(1-p)``;
    ``entmax_two_argmax`` / ``entmax_two_max``: its maximiser (1/2) and maximum (``1/sqrt 2``);
    ``softmax_two_max``: softmax's ``p (1 - p)``-type maximum 1/2 at the tie (for comparison).
    """

    sparsemax_projection: sp.Matrix
    sparsemax_eigenvalues: dict
    entmax_two_eigen: sp.Expr
    entmax_two_in_p: sp.Expr
    entmax_two_argmax: sp.Expr
    entmax_two_max: sp.Expr
    softmax_two_max: sp.Expr


def jacobian_constants() -> JacobianConstants:
    size = 4
    P = sp.eye(size) - sp.ones(size, size) / size
    g1, g2 = sp.symbols("g_1 g_2", positive=True)
    gv = sp.Matrix([g1, g2])
    M = sp.diag(g1, g2) - gv * gv.T / (g1 + g2)
    eig = [sp.simplify(ev) for ev in M.eigenvals()]
    nonzero = [ev for ev in eig if not closes(ev)][0]
    in_p = sp.simplify(nonzero.subs({g1: sp.sqrt(p), g2: sp.sqrt(1 - p)}))
    crit = [r for r in sp.solve(sp.diff(in_p, p), p) if r.is_real and 0 < r < 1]
    arg = crit[0]
    soft = sp.Matrix([p, 1 - p])
    soft_eig = [sp.simplify(ev) for ev in (sp.diag(p, 1 - p) - soft * soft.T).eigenvals()]
    soft_nonzero = [ev for ev in soft_eig if not closes(ev)][0]
    return JacobianConstants(
        sparsemax_projection=sp.simplify(P * P - P),
        sparsemax_eigenvalues=P.eigenvals(),
        entmax_two_eigen=sp.factor(nonzero),
        entmax_two_in_p=in_p,
        entmax_two_argmax=arg,
        entmax_two_max=sp.nsimplify(sp.simplify(in_p.subs(p, arg))),
        softmax_two_max=sp.simplify(soft_nonzero.subs(p, sp.Rational(1, 2))),
    )


# ------------------------------------------------------------- the normalisers since the paper
@dataclass(frozen=True)
class NewcomerVanishing:
    """Lemma 1 for the normalisers published since the paper (logits bounded by ``a``).

    ``sigmoid_scaled_limit``: ``L * sigmoid(a - log L) -> e^a``: every sigmoid weight is
    ``O(1/L)``, the bias ``-log n`` puts L back into F; ``softpick_scaled_limit``: one logit at
    ``a`` and ``L - 1`` at ``-b``: ``L * w_top -> (e^a - 1)/(1 - e^{-b})`` (``O(1/L)`` once the
    other logits stay away from 0); ``softpick_zero_row``: the top weight when the other logits
    are exactly 0 (1, whatever L: keys at logit 0 do not enter the denominator);
    ``stick_last`` / ``stick_sum``: stick-breaking with all L logits equal to z: the last key's
    weight ``sigma(z)`` (independent of L) and the row sum ``1 - (1 - sigma(z))^L``;
    ``topk_bounds``: top-k softmax's extremes ``e^{-2a}/(e^{-2a} + k - 1)`` and
    ``e^{2a}/(e^{2a} + k - 1)`` (Lemma 1 with k kept keys in place of L); ``asentmax_gap``: the
    logit gap above which ASEntmax's row is one-hot, ``2 / (1 + s log(L + 1))``, and its limit 0.
    """

    sigmoid_scaled_limit: sp.Expr
    softpick_scaled_limit: sp.Expr
    softpick_zero_row: sp.Expr
    stick_last: sp.Expr
    stick_sum: sp.Expr
    stick_sum_check: sp.Expr
    topk_bounds: tuple
    asentmax_gap: sp.Expr
    asentmax_gap_limit: sp.Expr


def newcomer_vanishing() -> NewcomerVanishing:
    b = sp.Symbol("b", positive=True)
    z = sp.Symbol("z", real=True)
    kk = sp.Symbol("k", positive=True)
    sig = lambda u: 1 / (1 + sp.exp(-u))  # noqa: E731
    sigmoid_limit = sp.limit(L * sig(a - sp.log(L)), L, sp.oo)
    top = (sp.exp(a) - 1) / ((sp.exp(a) - 1) + (L - 1) * (1 - sp.exp(-b)))
    softpick_limit = sp.simplify(sp.limit(L * top, L, sp.oo))
    zero_row = sp.simplify((sp.exp(a) - 1) / ((sp.exp(a) - 1) + (L - 1) * sp.Abs(sp.exp(0) - 1)))
    j = sp.Symbol("j", integer=True, nonnegative=True)
    n = sp.Symbol("n", integer=True, positive=True)
    weight = sig(z) * (1 - sig(z)) ** (n - 1 - j)
    total = sp.summation(weight, (j, 0, n - 1))
    gap = 2 / (1 + s * sp.log(L + 1))
    return NewcomerVanishing(
        sigmoid_scaled_limit=sp.simplify(sigmoid_limit),
        softpick_scaled_limit=softpick_limit,
        softpick_zero_row=zero_row,
        stick_last=sp.simplify(weight.subs(j, n - 1)),
        stick_sum=sp.simplify(1 - (1 - sig(z)) ** n),
        stick_sum_check=sp.simplify(total - (1 - (1 - sig(z)) ** n)),
        topk_bounds=(sp.exp(-2 * a) / (sp.exp(-2 * a) + kk - 1), sp.exp(2 * a) / (sp.exp(2 * a) + kk - 1)),
        asentmax_gap=gap,
        asentmax_gap_limit=sp.limit(gap, L, sp.oo),
    )


@dataclass(frozen=True)
class NewcomerJacobians:
    """Worst-case Jacobian facts for the newcomers (multiply by 1/T).

    ``sigmoid_max``: ``max_u sigma(u)(1 - sigma(u)) = 1/4`` (at u = 0, i.e. a logit at log n);
    ``softpick_tie``: d w_1 / d z_1 for two keys tied at logit ``eps > 0``: ``1/(4 eps)`` (and
    ``softpick_tie_limit`` its limit oo as eps -> 0+: unbounded); ``stick_one``: one key,
    ``sigma'(z)`` at 0 (1/4).
    """

    sigmoid_max: sp.Expr
    softpick_tie: sp.Expr
    softpick_tie_limit: sp.Expr
    stick_one: sp.Expr


def newcomer_jacobians() -> NewcomerJacobians:
    u = sp.Symbol("u", real=True)
    sig = 1 / (1 + sp.exp(-u))
    d = sp.diff(sig, u)
    crit = sp.solve(sp.diff(d, u), u)
    sigmoid_max = sp.simplify(max(d.subs(u, c) for c in crit))
    x1 = sp.Symbol("x_1", positive=True)
    eps_ = sp.Symbol("epsilon", positive=True)
    w1 = (sp.exp(x1) - 1) / ((sp.exp(x1) - 1) + (sp.exp(eps_) - 1))
    tie = sp.simplify(sp.diff(w1, x1).subs(x1, eps_))
    tie_series = sp.simplify(sp.series(tie, eps_, 0, 1).removeO())
    return NewcomerJacobians(sigmoid_max=sigmoid_max, softpick_tie=tie_series,
                             softpick_tie_limit=sp.limit(tie, eps_, 0, "+"),
                             stick_one=sp.simplify(d.subs(u, 0)))


@dataclass(frozen=True)
class CriticalScaling:
    """SSMax's critical scale on Chen et al.'s simplex rows (one logit 1, ``n - 1`` logits rho).

    ``top``: the top weight at scale gamma, ``1 / (1 + (n-1) n^{-gamma (1 - rho)})``;
    ``gamma_half``: the gamma at which it is 1/2, ``log(n-1) / ((1-rho) log n)``;
    ``gamma_c``: its limit ``1/(1 - rho)``; ``below`` / ``above``: the top weight's limit at
    ``gamma_c / 2`` (0) and ``2 gamma_c`` (1).
    """

    top: sp.Expr
    gamma_half: sp.Expr
    gamma_c: sp.Expr
    below: sp.Expr
    above: sp.Expr


def critical_scaling() -> CriticalScaling:
    rho = sp.Symbol("rho", positive=True)
    gamma = sp.Symbol("gamma", positive=True)
    n = sp.Symbol("n", positive=True)
    top = 1 / (1 + (n - 1) * n ** (-gamma * (1 - rho)))
    half = sp.solve(sp.Eq((n - 1) * n ** (-gamma * (1 - rho)), 1), gamma)[0]
    gc = sp.limit(half, n, sp.oo)
    r = sp.Rational(1, 2)      # a concrete rho for the limits (sympy needs rho < 1 decided)
    top_r = top.subs(rho, r)
    return CriticalScaling(top=top, gamma_half=sp.simplify(half), gamma_c=sp.simplify(gc),
                           below=sp.limit(top_r.subs(gamma, gc.subs(rho, r) / 2), n, sp.oo),
                           above=sp.limit(top_r.subs(gamma, 2 * gc.subs(rho, r)), n, sp.oo))


@dataclass(frozen=True)
class SinkMatch:
    """A sink logit ``b`` equal to the first key's logit reproduces softmax on the other keys:
    ``difference`` = sink weight of key i over keys 1..t minus softmax weight of key i over
    keys 0..t (0)."""

    difference: sp.Expr


def sink_match() -> SinkMatch:
    l0, li, b = sp.symbols("ell_0 ell_i b", real=True)
    rest = sp.Symbol("S", positive=True)          # sum of e^{l_j} over the keys 1..t
    sink = sp.exp(li) / (sp.exp(b) + rest)        # a sink over keys 1..t
    soft = sp.exp(li) / (sp.exp(l0) + rest)       # softmax over keys 0..t
    return SinkMatch(difference=sp.simplify((sink - soft).subs(b, l0)))
