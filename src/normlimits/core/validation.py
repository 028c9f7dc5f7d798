"""Shared validators for the public boundary: one check per kind of input, one message style.

Every validator names the argument (or setting), the value it got and the remedy, and raises
:class:`InputError`. The public functions the chapters call validate their
inputs here, once; the metrics behind them trust what they are given.
"""

from __future__ import annotations

import torch
from torch import Tensor

from normlimits.core.settings import SettingError


class InputError(SettingError):
    """An argument of a public function has a value the project cannot use (message: remedy).

    A :class:`~normlimits.core.settings.SettingError` (so a ``ValueError``): a window length is bad in
    the same way whether it came from a setting or an argument.
    """


def window_length(length, max_positions: int, *, argument: str = "window length L",
                  limit: str | None = None) -> int:
    """``length`` as an int in 1..``max_positions``.

    ``limit`` names what bounds the length in the message (default ``n_positions=max_positions``).
    """
    limit = limit or f"n_positions={max_positions}"
    if isinstance(length, bool) or not isinstance(length, int):
        raise InputError(f"{argument} must be a positive integer (got {length!r} of type "
                         f"{type(length).__name__}); pass an int such as 1024.")
    if length < 1:
        raise InputError(f"{argument}={length}: a window needs at least one token; "
                         f"use 1 <= L <= {max_positions}.")
    if length > max_positions:
        raise InputError(f"{argument}={length} is beyond the model's context ({limit}); "
                         f"use L <= {max_positions}.")
    return length


def token_ids(ids, *, vocab_size: int, max_positions: int, argument: str = "ids",
              limit: str | None = None) -> Tensor:
    """Token ids as a LongTensor [..., L], checked: integer type, 1 <= L <= ``max_positions``,
    every id in ``0..vocab_size - 1``.

    Floating-point, boolean or complex ids are refused rather than cast (a cast would silently
    truncate 3.7 to 3); so are empty windows and ids outside the vocabulary (they would fail deep
    inside the model's embedding, or index another row of it on some devices).
    """
    try:
        tensor = torch.as_tensor(ids)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise InputError(f"{argument} must be a tensor or a (nested) list of integer token ids "
                         f"of equal lengths ({exc}); pass e.g. token_windows(...) or "
                         "torch.tensor(loaded.encode(text)).") from None
    if tensor.dtype.is_floating_point or tensor.dtype.is_complex or tensor.dtype == torch.bool:
        raise InputError(f"{argument} has dtype {tensor.dtype}: token ids must be integers, and "
                         "floats are not cast silently; pass integer ids (torch.long), e.g. from "
                         "token_windows(...) or loaded.encode(text).")
    if tensor.dim() == 0:
        raise InputError(f"{argument} is a single number ({int(tensor)}); pass a window of ids "
                         "with shape [L] (or [W, L]).")
    length = int(tensor.shape[-1])
    window_length(length, max_positions, argument=f"{argument}: window length L", limit=limit)
    tensor = tensor.to(torch.long)
    if tensor.numel():
        low, high = int(tensor.min()), int(tensor.max())
        if low < 0:
            raise InputError(f"{argument} holds a negative token id ({low}); ids must lie in "
                             f"0..{vocab_size - 1}: encode text with loaded.encode.")
        if high >= vocab_size:
            raise InputError(f"{argument} holds token id {high}, beyond the model's vocabulary "
                             f"(size {vocab_size}, ids 0..{vocab_size - 1}); encode text with "
                             "the model's own tokenizer (loaded.encode).")
    return tensor


def all_finite(tensor: Tensor) -> bool:
    """Whether every entry of ``tensor`` is finite (no NaN, no +-inf), in one fast reduction.

    A sum is finite only if every term is (a NaN or an infinity cannot be cancelled), so a finite
    sum decides at once, about 25 times faster than ``torch.isfinite(tensor).all()`` (which
    writes a boolean tensor first); a non-finite sum (a non-finite entry, or finite entries whose
    sum overflows) is decided entry by entry.
    """
    if tensor.numel() == 0 or not (tensor.is_floating_point() or tensor.is_complex()):
        return True
    return bool(torch.isfinite(tensor.sum())) or bool(torch.isfinite(tensor).all())


#: what each kind of numeric input is for, the second half of :func:`finite_entries`' message
#: (the first, "<argument> has <n> NaN or infinite entries; ", is the same for every kind)
FINITE_REMEDIES = {
    "weights": ("attention weights must be finite rows of a normaliser. Check the logits and the "
                "normaliser that produced them (a NaN logit or an overflowed exp)."),
    "vectors": ("the distances of the selected tokens' representation need finite vectors. "
                "Check the capture."),
    "directions": ("perturbation directions must be finite (unit rows, zero on masked keys: "
                   "draw them with random_unit_directions); a masked key is marked in the "
                   "logits (-inf), not in the direction."),
    "samples": ("every per-head value must be a finite number; a NaN or infinite value comes "
                "from an undefined or overflowed statistic upstream (e.g. a row that sees <= N "
                "keys): drop those heads or N before the test."),
}


def finite_entries(tensor, *, argument: str, kind: str) -> Tensor:
    """Refuse a tensor (or array-like) with NaN or +-inf entries; returns it unchanged.

    The one message of every finite-input check: ``"<argument> has <n> NaN or infinite entries;
    <remedy>"``, the remedy of ``kind`` (:data:`FINITE_REMEDIES`: weights, vectors, directions,
    samples). :func:`finite_weights`, :func:`finite_vectors` and the metrics without a
    non-negativity rule (the readings, the sensitivities, the KS search) call it."""
    if kind not in FINITE_REMEDIES:
        raise ValueError(f"kind must be one of {sorted(FINITE_REMEDIES)} (got {kind!r}).")
    values = tensor if isinstance(tensor, Tensor) else torch.as_tensor(tensor)
    if not all_finite(values):
        bad = int((~torch.isfinite(values)).sum())
        raise InputError(f"{argument} has {bad} NaN or infinite entries; {FINITE_REMEDIES[kind]}")
    return tensor


def finite_weights_and_vectors(weights: Tensor, vectors: Tensor, *,
                               vectors_argument: str = "vectors") -> None:
    """:func:`finite_entries` of attention weights [..., R, L] and their vectors [..., L, d] (the
    messages :func:`normlimits.metrics.distances.distance_profile` gives); the sign of the weights
    is left to the caller."""
    finite_entries(weights, argument="weights", kind="weights")
    finite_entries(vectors, argument=vectors_argument, kind="vectors")


def finite_weights(weights: Tensor, *, argument: str = "weights") -> Tensor:
    """Refuse attention weights with NaN, infinite or negative entries (shape unchanged).

    Such weights come from a failed normalisation upstream (a NaN logit, an overflowed ``exp``);
    every statistic computed from them would be NaN or meaningless, so they are refused here
    rather than spread through a profile.
    """
    finite_entries(weights, argument=argument, kind="weights")
    if weights.numel() and float(weights.amin()) < 0:
        raise InputError(f"{argument} has negative entries (min {float(weights.min()):.3g}); "
                         "attention weights are non-negative. Pass the normaliser's output.")
    return weights


def finite_vectors(vectors: Tensor, *, argument: str = "values") -> Tensor:
    """Refuse vectors with NaN or infinite entries (shape unchanged)."""
    return finite_entries(vectors, argument=argument, kind="vectors")


def attention_logits(logits: Tensor, *, argument: str = "logits") -> Tensor:
    """Refuse logits with NaN or ``+inf`` entries; ``-inf`` is a masked key (shape unchanged).

    Every row along the last dimension needs at least one visible (finite) logit. Decided from
    the row maxima alone (:func:`check_row_maxima`): one reduction over the logits.
    """
    if logits.numel():
        check_row_maxima(logits.amax(-1), argument=argument)
    return logits


def check_row_maxima(row_max: Tensor, *, argument: str = "logits") -> Tensor:
    """:func:`attention_logits`' checks, from the rows' maxima ``row_max`` (any shape): ``amax``
    propagates NaN, so a row holds a NaN exactly when its maximum is NaN, a ``+inf`` (and no NaN)
    when it is ``+inf``, and no visible key when it is ``-inf``."""
    if bool(torch.isnan(row_max).any()) or bool(torch.isposinf(row_max).any()):
        raise InputError(f"{argument} has NaN or +inf entries; logits must be finite, or -inf "
                         "for a masked key (a NaN is not treated as masked). Check the model's "
                         "forward pass or the arithmetic that produced them.")
    if bool(torch.isneginf(row_max).any()):
        raise InputError(f"{argument} has a row with every key masked (-inf); a normaliser needs "
                         "at least one visible (finite) logit per row.")
    return row_max
