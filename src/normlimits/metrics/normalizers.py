"""Attention normalisers: maps from a row of logits to a row of weights.

Every function takes ``logits`` of any shape and normalises along ``dim``; masked (causal) keys
are ``-inf`` logits and receive weight exactly 0. ``n`` is the number of visible keys where a
normaliser depends on it (length-aware ones); ``None`` means "count the finite logits along dim".

Besides the paper's softmax (Eq. 2) and general normaliser (Eq. 3), the module holds the
alternatives the paper's Section 4 points to, each as ``f(logits, dim=-1, n=None) -> weights``
(``z`` is one row of logits over its ``n`` visible keys):

============================  ====================================================  ===========
name (registry key)           weights                                               sums to 1
============================  ====================================================  ===========
softmax                       ``exp(z_i) / sum_j exp(z_j)``                         yes
sparsemax                     ``[z_i - tau(z)]_+`` (Euclidean projection on the      yes, exact 0s
                              simplex; via the ``entmax`` package)
entmax15 (1.5-entmax)         ``[z_i / 2 - tau(z)]_+^2`` (via ``entmax``)            yes, exact 0s
ssmax (Scalable-Softmax)      ``softmax(s log(n) z)``                               yes
softmax1 (softmax_1)          ``exp(z_i) / (1 + sum_j exp(z_j))``                   no (< 1)
adaptive (adaptive T)         ``softmax(beta(H) z)``, ``H`` = entropy of             yes
                              ``softmax(z)``, ``beta = max(poly(H), 1)`` if H > 0.5
sa-softmax (Self-Adjust)      ``c_i softmax(z)_i``, ``c_i = (z_i - min(z_min, 0)) /   no (<= 1)
                              (max(z_max, 0) - min(z_min, 0))``
softpick                      ``relu(e^{z_i} - 1) / sum_j |e^{z_j} - 1|``             no (<= 1), 0s
sigmoid (bias -log n)         ``sigmoid(z_i - log n)``                               no
stickbreaking                 ``b_i prod_{k > i} (1 - b_k)``, ``b = sigmoid(z)``,     no (<= 1)
                              the stick broken from the last visible key backwards
asentmax (ASEntmax)           ``1.5-entmax((delta + beta log(n + 1)^gamma) z)``       yes, exact 0s
topk-sqrt / topk-log2         softmax over the ``k`` largest logits, ``k =            yes, exact 0s
                              ceil(sqrt n)`` / ``ceil(log2 n)`` (at least 1)
sink (learned sink logit b)   ``exp(z_i) / (exp(b) + sum_j exp(z_j))``              no (< 1)
============================  ====================================================  ===========

:data:`NORMALIZERS` is the registry (ordered; softmax first); :func:`get_normalizer` looks a name
up. Every function works in the dtype of its input and keeps autograd (reverse and forward mode,
except sparsemax and 1.5-entmax, whose ``entmax`` autograd Functions are reverse mode only).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

import torch
from torch import Tensor

from normlimits.core.validation import attention_logits, check_row_maxima
from normlimits.core.selection import top_n

__all__ = [
    "check_temperature",
    "check_temperature_for",
    "softmax_with_temperature",
    "general_normalizer",
    "visible_mask",
    "visible_count",
    "softmax",
    "sparsemax",
    "entmax15",
    "scalable_softmax",
    "ssmax_scale",
    "softmax_one",
    "adaptive_temperature_softmax",
    "adaptive_beta",
    "self_adjusted_softmax",
    "softpick",
    "sigmoid_attention",
    "stick_breaking",
    "asentmax",
    "asentmax_scale",
    "topk_softmax",
    "topk_size",
    "sink_softmax",
    "sink_normalizer",
    "ssmax_gamma_normalizer",
    "ASENTMAX_DELTA",
    "ASENTMAX_GAMMA",
    "TOPK_RULES",
    "VELICKOVIC_POLYNOMIAL",
    "SSMAX_REFERENCE_LENGTH",
    "Normalizer",
    "NORMALIZERS",
    "get_normalizer",
]


def check_temperature(temperature: float, dtype: torch.dtype | None = None) -> float:
    """Return ``temperature`` as a float, or raise a clear error when it is not positive.

    With ``dtype`` (the dtype the logits are divided in), T must also be a finite number of that
    dtype: a T at or above its largest finite value (3.4e38 in float32) becomes infinite there and
    ``l/T`` gives 0 or NaN, so it is refused, as is a T below its smallest normal value (1.2e-38
    in float32), by which ``l/T`` overflows.
    """
    try:
        t = float(temperature)
    except (TypeError, ValueError):
        raise ValueError(f"temperature T must be a positive number (got {temperature!r}).") from None
    if not t > 0:
        raise ValueError(f"temperature T must be > 0 (got {temperature!r}); "
                         "softmax(l/T) is undefined for T <= 0. Pass a positive T.")
    if math.isinf(t):
        raise ValueError("temperature T = inf is a limit, not a temperature: softmax(l/T) tends "
                         "to the uniform distribution over the visible keys. Pass a finite T.")
    if dtype is not None and dtype.is_floating_point:
        info = torch.finfo(dtype)
        name = str(dtype).removeprefix("torch.")
        if not math.isfinite(torch.tensor(t, dtype=dtype).item()) or t >= info.max:
            raise ValueError(f"temperature T = {t:.3g} is too large for {name}, the dtype of the "
                             f"logits: its largest finite value is {info.max:.3g}, so T is infinite "
                             f"there and l/T gives 0 or NaN. Pass T < {info.max:.3g} (rows are "
                             "already uniform to within rounding far below that), or the logits "
                             "in float64.")
    return t


def check_temperature_for(temperature: float, dtype: torch.dtype) -> float:
    """:func:`check_temperature` for a division ``logits / T`` in ``dtype``: also refuses a T
    below the dtype's smallest normal value (``l/T`` would overflow to infinity)."""
    t = check_temperature(temperature, dtype)
    if dtype.is_floating_point and t < torch.finfo(dtype).tiny:
        info = torch.finfo(dtype)
        raise ValueError(f"temperature T = {t:.3g} is too small for "
                         f"{str(dtype).removeprefix('torch.')}, the dtype of the logits: below "
                         f"its smallest normal value {info.tiny:.3g}, l/T overflows to infinity. "
                         f"Pass T >= {info.tiny:.3g}, or the logits in float64.")
    return t


def softmax_with_temperature(logits: Tensor, dim: int = -1, temperature: float = 1.0) -> Tensor:
    """Softmax at temperature T (paper Eq. 2): ``exp(l_i/T) / sum_j exp(l_j/T)``.

    Shapes: ``logits`` [..., L, ...]; output the same shape, rows along ``dim`` sum to 1.

    The logits are shifted by their row maximum *before* the division, so a tiny T (1e-50) gives
    the arg-max row (ties share the weight) instead of ``inf - inf = NaN``; masked keys are
    ``-inf``; NaN or ``+inf`` logits are refused.
    """
    t = check_temperature(temperature, logits.dtype)
    row_max = logits.amax(dim=dim, keepdim=True)
    check_row_maxima(row_max)                 # the checks of visible_mask, from the maxima
    shifted = logits - row_max
    if t != 1.0:   # (at T = 1 the division is exact and changes nothing)
        # the row maximum stays 0 even where T underflows the dtype (1e-50 is 0 in float32: 0/0)
        shifted = torch.where(shifted == 0, torch.zeros_like(shifted), shifted / t)
    return torch.softmax(shifted, dim=dim)


def general_normalizer(logits: Tensor, positive_map: Callable[[Tensor], Tensor],
                       dim: int = -1) -> Tensor:
    """The paper's general normaliser (Eq. 3): ``F(l_i) / sum_j F(l_j)`` for a positive map F.

    ``positive_map`` is applied elementwise and must return positive values on finite logits;
    masked keys (``-inf`` logits) get weight 0 whatever F returns there.
    Shapes: ``logits`` [..., L, ...]; output the same shape.
    """
    visible_mask(logits, dim)
    finite = torch.isfinite(logits)
    values = positive_map(torch.where(finite, logits, torch.zeros_like(logits)))
    if not bool(torch.isfinite(values[finite]).all()):
        worst = float(logits[finite][~torch.isfinite(values[finite])].abs().max())
        raise ValueError(f"the map F overflowed (F(l) is not finite at a logit of magnitude "
                         f"{worst:.3g}); for F = exp use softmax_with_temperature, which shifts "
                         "by the row maximum, or rescale the logits.")
    if bool((values[finite] <= 0).any()):
        raise ValueError("the map F must be positive on every finite logit (Lemma 1's assumption)")
    values = torch.where(finite, values, torch.zeros_like(values))
    return values / values.sum(dim=dim, keepdim=True)


# ----------------------------------------------------------------------------- shared helpers
def visible_mask(logits: Tensor, dim: int = -1) -> Tensor:
    """Boolean mask of the visible keys (finite logits); raises on NaN, ``+inf`` or empty rows.

    Masked keys must be ``-inf``. Every row along ``dim`` needs at least one visible key.
    """
    attention_logits(logits.movedim(dim, -1))
    visible = logits > float("-inf")
    return visible


def visible_count(logits: Tensor, dim: int = -1, n=None, visible: Tensor | None = None) -> Tensor:
    """The number of visible keys per row, shaped to broadcast against ``logits`` (dim kept).

    ``n=None`` counts the finite logits along ``dim``; an int or a tensor broadcastable to
    ``logits`` (size 1 along ``dim``) is used as given and must be >= 1.
    """
    if n is None:
        if visible is None:
            visible = visible_mask(logits, dim)
        return visible.sum(dim=dim, keepdim=True).to(logits.dtype)
    count = torch.as_tensor(n, dtype=logits.dtype, device=logits.device)
    if bool((count < 1).any()):
        raise ValueError(f"the number of visible keys n must be >= 1 (got {n!r}); "
                         "pass n=None to count the finite logits.")
    return count


def _masked(logits: Tensor, visible: Tensor, fill: float = 0.0) -> Tensor:
    """Logits with masked keys replaced by ``fill`` (keeps autograd finite at masked keys)."""
    return torch.where(visible, logits, torch.full_like(logits, fill))


def _softmax_masked(scaled: Tensor, visible: Tensor, dim: int) -> Tensor:
    """Softmax of finite ``scaled`` over the visible keys only (exact 0 at masked keys)."""
    return torch.softmax(torch.where(visible, scaled, torch.full_like(scaled, float("-inf"))), dim=dim)


# ----------------------------------------------------------------------------- the normalisers
def softmax(logits: Tensor, dim: int = -1, n=None) -> Tensor:
    """Softmax (paper Eq. 2 at T = 1): ``exp(z_i) / sum_j exp(z_j)``. ``n`` is unused."""
    visible_mask(logits, dim)
    return torch.softmax(logits, dim=dim)


def sparsemax(logits: Tensor, dim: int = -1, n=None) -> Tensor:
    """Sparsemax (Martins & Astudillo 2016): the Euclidean projection of ``z`` on the simplex.

    ``p_i = [z_i - tau(z)]_+`` with ``tau`` such that the row sums to 1; exact zeros below the
    threshold. Computed by ``entmax.sparsemax`` (sort-based, exact); masked keys get exactly 0.
    ``n`` is unused.
    """
    from entmax import sparsemax as _sparsemax

    visible = visible_mask(logits, dim)
    out = _sparsemax(logits, dim=dim)
    return torch.where(visible, out, torch.zeros_like(out))


def entmax15(logits: Tensor, dim: int = -1, n=None) -> Tensor:
    """1.5-entmax (Peters, Niculae & Martins 2019): ``p_i = [z_i/2 - tau(z)]_+^2``, sums to 1.

    The Tsallis-1.5-regularised argmax; between softmax (alpha = 1) and sparsemax (alpha = 2).
    Computed by ``entmax.entmax15`` (sort-based, exact); masked keys get exactly 0. ``n`` is unused.
    """
    from entmax import entmax15 as _entmax15

    visible = visible_mask(logits, dim)
    out = _entmax15(logits, dim=dim)
    return torch.where(visible, out, torch.zeros_like(out))


#: SSMax's default ``s = 1 / log(32)``: SSMax then equals softmax at n = 32 visible keys, the
#: start of the paper's L sweep (a retrofit choice for fixed logits; Nakanishi learns s).
SSMAX_REFERENCE_LENGTH = 32


def ssmax_scale(s: float | None = None, reference_length: int = SSMAX_REFERENCE_LENGTH) -> float:
    """SSMax's ``s``: as given (must be >= 0), or ``1 / log(reference_length)`` when None."""
    if s is None:
        if reference_length < 2:
            raise ValueError(f"reference_length must be >= 2 (log 1 = 0); got {reference_length}.")
        return 1.0 / math.log(reference_length)
    if not s >= 0:
        raise ValueError(f"SSMax's scale s must be >= 0 (got {s!r}).")
    return float(s)


def scalable_softmax(logits: Tensor, dim: int = -1, n=None, s: float | None = None,
                     reference_length: int = SSMAX_REFERENCE_LENGTH) -> Tensor:
    """Scalable-Softmax (Nakanishi 2025): ``n^{s z_i} / sum_j n^{s z_j} = softmax(s log(n) z)``.

    ``n`` = visible keys per row (default: counted); ``s`` the scaling parameter (learned in the
    original; default ``1 / log(reference_length)``, which makes SSMax coincide with softmax at
    ``n = reference_length``). The factor multiplies the logits (subtracting ``s log n`` would
    change nothing). Rows sum to 1.
    """
    visible = visible_mask(logits, dim)
    s = ssmax_scale(s, reference_length)
    count = visible_count(logits, dim, n, visible)
    factor = s * torch.log(count)
    return _softmax_masked(factor * _masked(logits, visible), visible, dim)


def softmax_one(logits: Tensor, dim: int = -1, n=None) -> Tensor:
    """softmax_1 (Miller 2023, "Attention is off by one"): ``exp(z_i) / (1 + sum_j exp(z_j))``.

    Softmax over the keys plus one extra logit fixed at 0, which is then dropped: rows sum to
    ``S / (1 + S) < 1`` with ``S = sum_j exp(z_j)``, so a head can attend to (almost) nothing.
    Computed stably (shift by ``max(z_max, 0)``). ``n`` is unused.
    """
    visible = visible_mask(logits, dim)
    z = _masked(logits, visible)
    shift = torch.where(visible, z, torch.full_like(z, float("-inf"))).amax(dim=dim, keepdim=True)
    shift = shift.clamp_min(0.0).detach()
    e = torch.where(visible, torch.exp(z - shift), torch.zeros_like(z))
    return e / (torch.exp(-shift) + e.sum(dim=dim, keepdim=True))


#: Degree-4 polynomial of Velickovic et al. 2024 (coefficients from the highest power down):
#: ``beta(H) = -0.037 H^4 + 0.481 H^3 - 2.3 H^2 + 4.917 H - 1.791`` (inverse temperature).
VELICKOVIC_POLYNOMIAL: tuple[float, ...] = (-0.037, 0.481, -2.3, 4.917, -1.791)


def _polyval(coefficients: Sequence[float], x: Tensor) -> Tensor:
    out = torch.zeros_like(x)
    for c in coefficients:
        out = out * x + c
    return out


def _entropy_masked(logits_masked: Tensor, visible: Tensor, dim: int) -> tuple[Tensor, Tensor]:
    """(softmax row, its Shannon entropy in nats with dim kept); finite gradients at masked keys."""
    log_p = torch.log_softmax(torch.where(visible, logits_masked,
                                          torch.full_like(logits_masked, float("-inf"))), dim=dim)
    log_p = torch.where(visible, log_p, torch.zeros_like(log_p))
    p = torch.where(visible, log_p.exp(), torch.zeros_like(log_p))
    return p, -(p * log_p).sum(dim=dim, keepdim=True)


def adaptive_beta(entropy: Tensor, coefficients: Sequence[float] = VELICKOVIC_POLYNOMIAL,
                  threshold: float = 0.5) -> Tensor:
    """The inverse temperature of Velickovic et al. 2024 from a row's softmax entropy (nats).

    ``beta = max(poly(H), 1)`` where ``H > threshold``, else 1 (low-entropy rows are left alone;
    beta never raises the entropy). Same shape as ``entropy``.
    """
    poly = _polyval(coefficients, entropy)
    return torch.where(entropy > threshold, poly.clamp_min(1.0), torch.ones_like(entropy))


def adaptive_temperature_softmax(logits: Tensor, dim: int = -1, n=None,
                                 coefficients: Sequence[float] = VELICKOVIC_POLYNOMIAL,
                                 threshold: float = 0.5) -> Tensor:
    """Adaptive-temperature softmax (Velickovic et al. 2024): ``softmax(beta(H) z)``.

    ``H`` is the entropy of ``softmax(z)`` over the visible keys (exact ``-sum p log p``; the
    authors' snippet adds 1e-9 inside the log) and ``beta`` is :func:`adaptive_beta`. Gradients
    flow through ``beta`` (the function as written, no stop-gradient). Rows sum to 1. ``n`` is
    unused: the length enters only through the entropy.
    """
    visible = visible_mask(logits, dim)
    z = _masked(logits, visible)
    _, entropy = _entropy_masked(z, visible, dim)
    beta = adaptive_beta(entropy, coefficients, threshold)
    return _softmax_masked(beta * z, visible, dim)


def self_adjusted_softmax(logits: Tensor, dim: int = -1, n=None, normalized: bool = True) -> Tensor:
    """Self-Adjust Softmax (Zheng et al. 2025): the softmax row rescaled elementwise by the logits.

    ``normalized=True`` (the variant whose weights stay in [0, 1]):
    ``c_i softmax(z)_i`` with ``c_i = (z_i - min(z_min, 0)) / (max(z_max, 0) - min(z_min, 0))``,
    min and max over the visible keys (``c = 0`` for an all-zero row). ``normalized=False``: the
    plain ``z_i softmax(z)_i`` (weights can be negative). Rows need not sum to 1 (the normalised
    variant sums to at most 1). ``n`` is unused.
    """
    visible = visible_mask(logits, dim)
    z = _masked(logits, visible)
    p = _softmax_masked(z, visible, dim)
    if not normalized:
        return torch.where(visible, z * p, torch.zeros_like(p))
    inf = torch.full_like(z, float("inf"))
    low = torch.where(visible, z, inf).amin(dim=dim, keepdim=True).clamp_max(0.0)
    high = torch.where(visible, z, -inf).amax(dim=dim, keepdim=True).clamp_min(0.0)
    span = high - low
    safe = torch.where(span > 0, span, torch.ones_like(span))
    scale = torch.where(span > 0, (z - low) / safe, torch.zeros_like(z))
    return torch.where(visible, scale * p, torch.zeros_like(p))


def softpick(logits: Tensor, dim: int = -1, n=None) -> Tensor:
    """Softpick (Zuhri et al. 2025, arXiv 2504.20966): ``relu(e^{z_i} - 1) / sum_j |e^{z_j} - 1|``.

    Rectified: a key with ``z_i <= 0`` gets exactly 0, and the row sums to
    ``sum_i relu(e^{z_i} - 1) / sum_j |e^{z_j} - 1| <= 1`` (1 only when no visible logit is
    negative; a row whose logits are all <= 0 is all zeros): a head can attend to nothing
    without a sink token. The sum runs over the visible keys only (masked keys neither receive
    weight nor enter the denominator, as in the reference ``naive_softpick_attn.py``). Computed
    stably as ``e^{-c} (e^{z} - 1)`` with ``c = max(z_max, 0)`` (``expm1`` when ``c = 0``); the
    reference's ``eps = 1e-8`` in the denominator is left out (it only matters when every logit
    is exactly 0, where this returns the zero row). ``n`` is unused.
    """
    visible = visible_mask(logits, dim)
    z = _masked(logits, visible)
    top = torch.where(visible, z, torch.full_like(z, float("-inf"))).amax(dim=dim, keepdim=True)
    shift = top.clamp_min(0.0).detach()
    shifted = torch.exp(z - shift) - torch.exp(-shift)                  # e^{-c} (e^z - 1), c > 0
    small = torch.expm1(z.clamp_max(0.0))                               # c = 0: every z <= 0
    e = torch.where(visible, torch.where(shift > 0, shifted, small), torch.zeros_like(z))
    den = e.abs().sum(dim=dim, keepdim=True)
    safe = torch.where(den > 0, den, torch.ones_like(den))
    return torch.where(den > 0, torch.relu(e) / safe, torch.zeros_like(e))


def sigmoid_attention(logits: Tensor, dim: int = -1, n=None) -> Tensor:
    """Sigmoid attention (Ramapuram et al. 2025, arXiv 2409.04431): ``sigmoid(z_i - log n)``.

    Elementwise, no competition between keys: the bias ``b = -log n`` makes every weight start
    near ``1/n``. ``n`` = visible keys per row (default: counted; the original sets one constant
    from the training sequence length, which equals the count for the last query of a window).
    Rows need not sum to 1. Masked keys get exactly 0.
    """
    visible = visible_mask(logits, dim)
    count = visible_count(logits, dim, n, visible)
    z = _masked(logits, visible)
    return torch.where(visible, torch.sigmoid(z - torch.log(count)), torch.zeros_like(z))


def stick_breaking(logits: Tensor, dim: int = -1, n=None) -> Tensor:
    """Stick-breaking attention (Tan et al. 2025, arXiv 2410.17980): order-dependent weights.

    ``b_i = sigmoid(z_i)``; the key order is the order along ``dim`` and the stick is broken
    from the LAST visible key backwards (the most recent token first, as in the reference
    ``sb_ref.py``): ``w_i = b_i prod_{k > i, k visible} (1 - b_k)``, so the weights sum to
    ``1 - prod_k (1 - b_k) < 1``. Masked keys (``-inf``, e.g. the future under a causal mask)
    neither receive weight nor break the stick. Computed in log space,
    ``log w_i = logsigmoid(z_i) + sum_{k > i} logsigmoid(-z_k)`` (a reversed cumulative sum).
    Under GPT-2's causal mask the query's own key is visible and breaks the stick first; the
    reference excludes it (``attend_current=False``): mask the diagonal to reproduce that.
    ``n`` is unused.
    """
    visible = visible_mask(logits, dim)
    z = _masked(logits, visible)
    log_keep = torch.where(visible, torch.nn.functional.logsigmoid(-z), torch.zeros_like(z))
    suffix = torch.flip(torch.cumsum(torch.flip(log_keep, [dim]), dim), [dim]) - log_keep
    log_w = torch.nn.functional.logsigmoid(z) + suffix
    return torch.where(visible, torch.exp(log_w), torch.zeros_like(z))


#: ASEntmax's offset delta (the reference code's default ``attn_scale_delta = 1``)
ASENTMAX_DELTA = 1.0
#: ASEntmax's exponent gamma on log n (learned per query in the original; 1 here: "log n")
ASENTMAX_GAMMA = 1.0


def asentmax_scale(count: Tensor, beta: float | None = None, delta: float = ASENTMAX_DELTA,
                   gamma: float = ASENTMAX_GAMMA) -> Tensor:
    """ASEntmax's logit scale ``delta + beta * log(n + 1)^gamma`` for ``n`` visible keys.

    ``log(n + 1)``: the reference code takes ``log(position + 2)`` for the query at 0-based
    ``position``, which sees ``position + 1`` keys. ``beta`` (learned per query from the hidden
    state in the original) defaults to SSMax's ``s = 1/log 32``, so both length-aware
    normalisers grow their scale with the same ``log n`` slope. Must be >= 0.
    """
    b = ssmax_scale(beta)
    if not delta > 0:
        raise ValueError(f"ASEntmax's delta must be > 0 (got {delta!r}); the scale must stay positive.")
    return delta + b * torch.log(count + 1) ** gamma


def asentmax(logits: Tensor, dim: int = -1, n=None, beta: float | None = None,
             delta: float = ASENTMAX_DELTA, gamma: float = ASENTMAX_GAMMA) -> Tensor:
    """Adaptive-Scalable Entmax (Vasylenko et al. 2025, arXiv 2506.16640), on fixed logits.

    ``1.5-entmax(c z)`` with the length-aware scale ``c = delta + beta log(n + 1)^gamma``
    (:func:`asentmax_scale`; ``n`` = visible keys, counted by default). The original learns
    ``beta = softplus(w_b . h)`` and ``gamma = 2 tanh(w_g . h)`` per query; on a model trained
    with softmax nothing is learned, so they are fixed here (defaults: ``delta = 1``,
    ``beta = 1/log 32``, ``gamma = 1``). Exact zeros; rows sum to 1 (``entmax.entmax15``).
    """
    from entmax import entmax15 as _entmax15

    visible = visible_mask(logits, dim)
    c = asentmax_scale(visible_count(logits, dim, n, visible), beta, delta, gamma)
    out = _entmax15(c * logits, dim=dim)
    return torch.where(visible, out, torch.zeros_like(out))


#: top-k rules: name -> k(n) for n visible keys (at least 1)
TOPK_RULES: dict[str, Callable[[Tensor], Tensor]] = {}


def _ceil_sqrt(count: Tensor) -> Tensor:
    k = torch.ceil(torch.sqrt(count))
    k = torch.where((k - 1) ** 2 >= count, k - 1, k)          # guard float round-off both ways
    return torch.where(k ** 2 < count, k + 1, k)


def _ceil_log2(count: Tensor) -> Tensor:
    k = torch.ceil(torch.log2(count))
    k = torch.where(2.0 ** (k - 1) >= count, k - 1, k)
    return torch.where(2.0 ** k < count, k + 1, k)


TOPK_RULES.update({"sqrt": _ceil_sqrt, "log2": _ceil_log2})


def topk_size(count, rule: str | int) -> Tensor:
    """``k`` for ``count`` visible keys: ``ceil(sqrt n)`` ("sqrt"), ``ceil(log2 n)`` ("log2"), or
    a fixed int; never below 1 nor above n. Same shape as ``count`` (float)."""
    count = torch.as_tensor(count, dtype=torch.float64)
    if isinstance(rule, str):
        if rule not in TOPK_RULES:
            raise ValueError(f"unknown top-k rule {rule!r}; use one of {sorted(TOPK_RULES)} or an int k >= 1")
        k = TOPK_RULES[rule](count)
    else:
        if int(rule) < 1:
            raise ValueError(f"top-k needs k >= 1 (got {rule!r})")
        k = torch.full_like(count, float(int(rule)))
    return torch.minimum(k.clamp_min(1.0), count)


def topk_softmax(logits: Tensor, dim: int = -1, n=None, rule: str | int = "sqrt") -> Tensor:
    """Top-k softmax: softmax over the ``k`` largest visible logits, exactly 0 elsewhere.

    ``k = topk_size(n, rule)`` per row (``n`` = visible keys, counted by default), e.g.
    ``ceil(sqrt n)``: the paper's guideline "limit top-k to a sub-linear function of L" made into
    a normaliser. The keys are chosen by :func:`normlimits.core.selection.top_n` (ties at the k-th
    place: the earlier key first), so exactly k keys are kept. Rows sum to 1.
    """
    visible = visible_mask(logits, dim)
    count = visible_count(logits, dim, n, visible)
    k = topk_size(count, rule).to(logits.dtype)
    z = logits.detach().movedim(dim, -1)
    _, order = top_n(z, int(k.max()))                            # book order: ties to the earlier key
    places = torch.arange(order.shape[-1], device=logits.device, dtype=logits.dtype)
    chosen = places < k.movedim(dim, -1)                         # the first k of each row
    keep = torch.zeros_like(z, dtype=torch.bool).scatter_(-1, order, chosen.expand_as(order))
    keep = keep.movedim(-1, dim) & visible
    return _softmax_masked(_masked(logits, keep), keep, dim)


def sink_softmax(logits: Tensor, dim: int = -1, n=None, sink=0.0) -> Tensor:
    """Softmax with a sink logit ``b``: ``exp(z_i) / (exp(b) + sum_j exp(z_j))``.

    The learnable form of softmax_1 (``b = 0``) used by recent open-weight models (one learned
    logit per head joins the softmax and is dropped after it, e.g. ``modeling_gpt_oss.py`` in
    transformers). ``sink``: a number, or a tensor broadcastable to ``logits`` with size 1 along
    ``dim`` (one b per head). Rows sum to ``S / (e^b + S) < 1``. Computed stably (shift by
    ``max(z_max, b)``). ``n`` is unused.
    """
    visible = visible_mask(logits, dim)
    z = _masked(logits, visible)
    b = torch.as_tensor(sink, dtype=z.dtype, device=z.device)
    if bool(~torch.isfinite(b).all()):
        raise ValueError(f"the sink logit b must be finite (got {sink!r}); b -> -inf is plain softmax.")
    top = torch.where(visible, z, torch.full_like(z, float("-inf"))).amax(dim=dim, keepdim=True)
    shift = torch.maximum(top, b).detach()
    e = torch.where(visible, torch.exp(z - shift), torch.zeros_like(z))
    return e / (torch.exp(b - shift) + e.sum(dim=dim, keepdim=True))


# ----------------------------------------------------------------------------------- registry
@dataclass(frozen=True)
class Normalizer:
    """One normaliser with the facts the book's tables need.

    ``key``: registry name; ``label``: plot/table label; ``function(logits, dim, n)``;
    ``formula``: LaTeX of one weight; ``cite``: key in ``book/references.bib``;
    ``sums_to_one``: rows sum to 1 exactly; ``sparse``: can give exact zeros at visible keys;
    ``length_aware``: depends explicitly on the number of keys n; ``options``: keyword
    arguments bound into ``function``.
    """

    key: str
    label: str
    function: Callable[..., Tensor]
    formula: str
    cite: str
    sums_to_one: bool
    sparse: bool
    length_aware: bool
    options: dict = field(default_factory=dict)

    def __call__(self, logits: Tensor, dim: int = -1, n=None) -> Tensor:
        return self.function(logits, dim=dim, n=n, **self.options)

    def at_temperature(self, logits: Tensor, temperature: float = 1.0, dim: int = -1, n=None) -> Tensor:
        """The normaliser applied to ``logits / T`` (how every yardstick sets a temperature)."""
        return self(logits / check_temperature_for(temperature, logits.dtype), dim=dim, n=n)


NORMALIZERS: dict[str, Normalizer] = {
    nz.key: nz
    for nz in (
        Normalizer("softmax", "softmax", softmax,
                   r"\frac{e^{z_i}}{\sum_j e^{z_j}}", "vaswani2017attention",
                   sums_to_one=True, sparse=False, length_aware=False),
        Normalizer("sparsemax", "sparsemax", sparsemax,
                   r"[z_i-\tau(z)]_+", "martins2016sparsemax",
                   sums_to_one=True, sparse=True, length_aware=False),
        Normalizer("entmax15", "1.5-entmax", entmax15,
                   r"[z_i/2-\tau(z)]_+^2", "peters2019sparse",
                   sums_to_one=True, sparse=True, length_aware=False),
        Normalizer("ssmax", "SSMax", scalable_softmax,
                   r"\frac{n^{s z_i}}{\sum_j n^{s z_j}},\ s = 1/\log 32", "nakanishi2025scalable",
                   sums_to_one=True, sparse=False, length_aware=True),
        Normalizer("softmax1", "softmax_1", softmax_one,
                   r"\frac{e^{z_i}}{1+\sum_j e^{z_j}}", "miller2023offbyone",
                   sums_to_one=False, sparse=False, length_aware=False),
        Normalizer("adaptive", "adaptive T", adaptive_temperature_softmax,
                   r"\frac{e^{\beta(H) z_i}}{\sum_j e^{\beta(H) z_j}}", "velickovic2024softmax",
                   sums_to_one=True, sparse=False, length_aware=False),
        Normalizer("sa-softmax", "SA-softmax", self_adjusted_softmax,
                   r"\frac{z_i-\min(z_{\min},0)}{\max(z_{\max},0)-\min(z_{\min},0)}"
                   r"\,\frac{e^{z_i}}{\sum_j e^{z_j}}", "zheng2025selfadjust",
                   sums_to_one=False, sparse=False, length_aware=False),
        Normalizer("softpick", "softpick", softpick,
                   r"\frac{\max(e^{z_i}-1,\,0)}{\sum_j |e^{z_j}-1|}", "zuhri2025softpick",
                   sums_to_one=False, sparse=True, length_aware=False),
        Normalizer("sigmoid", "sigmoid", sigmoid_attention,
                   r"\sigma(z_i - \log n)", "ramapuram2025sigmoid",
                   sums_to_one=False, sparse=False, length_aware=True),
        Normalizer("stickbreaking", "stick-breaking", stick_breaking,
                   r"\sigma(z_i)\prod_{k>i}\bigl(1-\sigma(z_k)\bigr)", "tan2025stickbreaking",
                   sums_to_one=False, sparse=False, length_aware=False),
        Normalizer("asentmax", "ASEntmax", asentmax,
                   r"\mathrm{entmax}_{1.5}\bigl((1 + s\log(n+1))\,z\bigr)_i,\ s = 1/\log 32",
                   "vasylenko2026longcontext", sums_to_one=True, sparse=True, length_aware=True),
        Normalizer("topk-sqrt", "top-k, k=ceil(sqrt L)", topk_softmax,
                   r"\mathrm{softmax}(z_{\mathrm{top}\,\lceil\sqrt n\rceil})_i",
                   "mudarisov2025limitations", sums_to_one=True, sparse=True, length_aware=True,
                   options={"rule": "sqrt"}),
        Normalizer("topk-log2", "top-k, k=ceil(log2 L)", topk_softmax,
                   r"\mathrm{softmax}(z_{\mathrm{top}\,\lceil\log_2 n\rceil})_i",
                   "mudarisov2025limitations", sums_to_one=True, sparse=True, length_aware=True,
                   options={"rule": "log2"}),
    )
}


def sink_normalizer(sink, label: str | None = None, key: str | None = None) -> Normalizer:
    """The sink-logit normaliser (:func:`sink_softmax`) with ``b = sink`` bound in: a number, or
    a per-head tensor broadcastable to ``[..., R, L]`` logits (e.g. ``[layers, heads, 1, 1]``).
    ``key`` defaults to ``"sink"`` for a tensor of several b and ``sink-b<b>`` for one number;
    ``label`` to ``sink (b=...)``."""
    b = torch.as_tensor(sink, dtype=torch.float64)
    if label is None:
        label = f"sink (b={float(b):g})" if b.numel() == 1 else "sink (b per head)"
    if key is None:
        key = f"sink-b{float(b):g}" if b.numel() == 1 else "sink"
    return Normalizer(key, label, sink_softmax, r"\frac{e^{z_i}}{e^{b}+\sum_j e^{z_j}}",
                      "miller2023offbyone", sums_to_one=False, sparse=False, length_aware=False,
                      options={"sink": b})


def ssmax_gamma_normalizer(gamma: float) -> Normalizer:
    """SSMax with scale ``gamma``: ``softmax(gamma log(n) z)`` (the critical-scaling sweep; the
    registry's SSMax is ``gamma = 1/log 32``). Key ``ssmax-g<gamma>``."""
    g = ssmax_scale(gamma)
    return Normalizer(f"ssmax-g{g:.4g}", f"SSMax, gamma={g:.3g}", scalable_softmax,
                      r"\mathrm{softmax}(\gamma\log n\, z)_i", "chen2026critical",
                      sums_to_one=True, sparse=False, length_aware=True, options={"s": g})


def get_normalizer(name: str | Normalizer) -> Normalizer:
    """The registered normaliser called ``name`` (or ``name`` itself if already a Normalizer)."""
    if isinstance(name, Normalizer):
        return name
    try:
        return NORMALIZERS[name]
    except KeyError:
        raise KeyError(f"unknown normaliser {name!r}; registered: {', '.join(NORMALIZERS)}") from None
