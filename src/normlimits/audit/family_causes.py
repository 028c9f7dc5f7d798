"""Why two real families disagree on a claim: candidate causes, each measured, never guessed.

Where a claim's verdict differs between two real pretrained families (SmolLM2-135M and Gemma 3
270M), a candidate cause is tested by changing the one thing it names, on the captures of each
model, and measuring the claim's statistic again with the same yardstick code
(:mod:`normlimits.audit.yardsticks`). Two such changes are implemented, with the quantities a
reader needs to judge a third:

- **head size**: the value vectors (the vectors whose geometry N_s counts) projected onto a random
  ``dim``-dimensional subspace (one orthonormal basis per model and size, seeded), for every
  ``dim`` up to the model's head size (:func:`project_values`); if the two models' statistics
  agree at equal ``dim``, the head size accounts for their difference;
- **local against global layers**: the yardstick on a model's sliding-window layers alone and on
  its global layers alone (:func:`keep_layers`; a model without local layers has one group);
- **window length**: the model surveyed at the longer L cut to its first positions, as many as the
  other's L (:func:`keep_first`; causal attention makes them exactly a window of that length);
- **attention sinks**: the share of each head's weight on the first key, averaged over the query
  rows (:func:`sink_shares`), and the yardstick with the first key taken out of every row
  (:func:`drop_first_key`).

Besides the survey's yardsticks, a claim the survey does not grade can be examined where this
module has a measure for it (:data:`CLAIM_MEASURES`): today guideline 3 (G3, the gradients
chapter's claim that $T<0.1$ raises the Jacobian without improving separability), measured as
that chapter measures it (:func:`guideline3`).

Grouped keys are not a separate change: with one key/value head every query head of a layer
shares its value vectors, which the per-head statistics already see. The 4-bit quantisation is
bounded on the stand-in, whose full-precision weights exist (its round trip, on the stand-in
page), not here.

Shapes: a capture's ``values`` are [layers, H, L, d]; :func:`sink_shares` returns [layers, H].
"""

from __future__ import annotations

import dataclasses
from typing import Iterable, Sequence

import torch

from normlimits.audit.yardsticks import YARDSTICKS, AuditConfig, Measured
from normlimits.claims import make_row
from normlimits.core import protocol as P
from normlimits.experiments import sharpness as SH
from normlimits.metrics.jacobian import default_rows

__all__ = ["project_values", "keep_layers", "sink_shares", "graded_under", "head_size_curve", "local_and_global",
           "cause_rows", "sink_summary", "drop_first_key", "keep_first", "VALUE_YARDSTICKS", "guideline3", "CLAIM_MEASURES"]


def project_values(capture, dim: int, seed: int = 0):
    """``capture`` with its value vectors [..., d] replaced by their coordinates in a random
    ``dim``-dimensional subspace of R^d ([..., dim]; the same orthonormal basis for every layer,
    head and window of one call, drawn from ``seed``). ``dim == d`` returns the capture unchanged."""
    d = int(capture.values.shape[-1])
    if not 1 <= dim <= d:
        raise ValueError(f"dim={dim}: project onto 1..{d} dimensions (the head size is {d}).")
    if dim == d:
        return capture
    generator = torch.Generator().manual_seed(seed)
    gaussian = torch.randn(d, dim, generator=generator, dtype=torch.float64)
    basis, _ = torch.linalg.qr(gaussian)                       # [d, dim], orthonormal columns
    values = (capture.values.double() @ basis).to(capture.values.dtype)
    return dataclasses.replace(capture, values=values)


def keep_layers(capture, layers: Sequence[int]):
    """``capture`` restricted to ``layers`` (indices into its layer axis, the first axis of every
    per-layer field: queries, keys, values, hidden states, the scale and any per-layer window)."""
    n_layers = int(capture.queries.shape[0])
    picked = list(layers)
    if not picked or min(picked) < 0 or max(picked) >= n_layers:
        raise ValueError(f"layers={picked}: choose at least one of 0..{n_layers - 1}.")
    index = torch.tensor(picked, dtype=torch.long)
    changes = {}
    for field in dataclasses.fields(capture):
        value = getattr(capture, field.name)
        if isinstance(value, torch.Tensor) and value.dim() >= 1 and value.shape[0] == n_layers:
            changes[field.name] = value.index_select(0, index.to(value.device))
        elif isinstance(value, (tuple, list)) and len(value) == n_layers:
            changes[field.name] = type(value)(value[i] for i in picked)
    return dataclasses.replace(capture, **changes)


def drop_first_key(capture):
    """``capture`` without its first position: queries, keys, values and hidden states of
    positions 1..L-1 (a capture of L - 1 positions), so every row's weights are the softmax over
    the keys it saw except the first, the first key's weight spread over the rest in proportion.
    The forward pass is not re-run: the other keys and queries are those the model computed with
    the first token present."""
    changes = {name: getattr(capture, name)[..., 1:, :] for name in ("queries", "keys", "values", "hidden")}
    return dataclasses.replace(capture, **changes)


def keep_first(capture, length: int):
    """``capture`` cut to its first ``length`` positions (queries, keys, values and hidden states
    [..., length, :]). Attention is causal, so the result is exactly the capture of a window of
    ``length`` tokens; ``length`` must be 2..L."""
    if not 2 <= length <= capture.length:
        raise ValueError(f"length={length}: keep 2..{capture.length} positions of the capture")
    changes = {name: getattr(capture, name)[..., :length, :] for name in ("queries", "keys", "values", "hidden")}
    return dataclasses.replace(capture, **changes)


def sink_shares(capture, rows: Sequence[int] | None = None) -> torch.Tensor:
    """Each head's mean weight on the first key over the query ``rows`` (default: every row from
    the 8th on, so the first rows, which see only a few keys, do not dominate): [layers, H]."""
    if rows is None:
        rows = range(min(8, capture.length - 1), capture.length)
    weights = capture.weights(list(rows))                        # [layers, H, R, L]
    return weights[..., 0].float().mean(-1)


def guideline3(captures: Iterable, config: AuditConfig, model: str) -> Measured:
    """Claim G3 graded as book/gradients.md grades it, without intervals: on each capture's
    ``JACOBIAN_ROWS`` evenly spaced query rows (:func:`~normlimits.metrics.jacobian.default_rows`
    at the captures' own length, so a capture without its first key is read at its L - 1), the
    exact row-mean and largest-row ``||J||_2`` and ``N_s/N`` (value vectors on the unit sphere,
    ``GUIDELINE_N_GRID`` below L) at ``T = SHARP_T / 10`` against ``T = SHARP_T``
    (:func:`~normlimits.experiments.sharpness.guideline3_values`). ``config`` is not read (the
    chapter's protocol fixes every setting); it is taken so the measure has a yardstick's shape."""
    captures = list(captures)
    length = int(captures[0].length)
    low, high = P.SHARP_T / 10, P.SHARP_T
    profile, sep = SH.sharpness_sweep(captures, default_rows(length, P.JACOBIAN_ROWS), (low, high),
                                      P.EPSILONS[:1], separability_temperatures=(low, high),
                                      n_grid=[n for n in P.GUIDELINE_N_GRID if n < length], seed=0)
    values = {k: float(v[0]) for k, v in SH.guideline3_values(profile, sep, low, high).items()}
    row = make_row("G3", values, f"T = {low:g} vs {high:g}: row-mean ‖J‖ ×{values['jacobian_rise']:.2f}, "
                   f"largest row ×{values['largest_row_rise']:.2f}; N_s/N {values['separability_gain']:+.4f}",
                   chapter="audit", model=model, unresampled=f"{len(captures)} window(s) of the survey, "
                   "measured to find a cause, not to grade the claim")
    return Measured("guideline3", [row], values, {"profile": profile, "separability": sep})


#: the measures of claims the survey's yardsticks do not grade: name -> function(captures, config,
#: model) -> Measured, used by :func:`graded_under` beside the yardsticks
CLAIM_MEASURES = {"guideline3": guideline3}


def graded_under(captures: Iterable, config: AuditConfig, model: str, claim_id: str,
                 yardstick: str) -> dict:
    """The audit's graded row of ``claim_id`` measured by ``yardstick`` (a name of
    :data:`~normlimits.audit.yardsticks.YARDSTICKS` or of :data:`CLAIM_MEASURES`) on
    ``captures``: the same code and rule as the survey's row (or the chapter's), on changed
    captures."""
    measure = YARDSTICKS.get(yardstick) or CLAIM_MEASURES.get(yardstick)
    if measure is None:
        raise ValueError(f"no yardstick or claim measure named {yardstick!r}; known: "
                         f"{sorted(YARDSTICKS) + sorted(CLAIM_MEASURES)}")
    measured = measure(list(captures), config, model)
    found = [row for row in measured.rows if row["id"] == claim_id]
    if not found:
        raise ValueError(f"the {yardstick} yardstick grades {[r['id'] for r in measured.rows]}, "
                         f"not {claim_id}")
    return found[0]


def head_size_curve(captures: Sequence, config: AuditConfig, model: str, claim_id: str,
                    yardstick: str, dims: Sequence[int], seed: int = 0) -> dict[int, dict]:
    """``claim_id``'s graded row with the value vectors projected to each size in ``dims`` (those
    at most the head size): ``{dim: row}``."""
    d = int(captures[0].values.shape[-1])
    return {dim: graded_under([project_values(c, dim, seed) for c in captures], config, model,
                              claim_id, yardstick)
            for dim in dims if dim <= d}


def local_and_global(capture) -> tuple[list[int], list[int]]:
    """The capture's sliding-window (local) layers and its global layers (every layer global
    where the capture records no windows)."""
    n_layers = int(capture.queries.shape[0])
    windows = getattr(capture, "windows", None)
    if windows is None:
        return [], list(range(n_layers))
    local = [i for i in range(n_layers) if int(windows[i]) > 0]
    return local, [i for i in range(n_layers) if i not in local]


#: the yardsticks whose claims read the value vectors (a change of head size can move them)
VALUE_YARDSTICKS = ("separability", "critical_n")


def cause_rows(captures: dict[str, Sequence], configs: dict[str, AuditConfig], claim_id: str,
               yardstick: str, seed: int = 0, measured: dict[str, dict] | None = None) -> list[dict]:
    """Every change of this module applied to ``claim_id`` on two models' captures
    (``captures``/``configs``: model name -> its windows' captures and the audit configuration
    they are graded with): rows ``{"claim", "model", "change", "value", "verdict"}``, first each
    model as measured, then (for a yardstick of :data:`VALUE_YARDSTICKS`) the model of larger
    head size with its values projected to the other's, then (where the two were captured at
    different lengths) the longer cut to the shorter's length (:func:`keep_first`), then each model
    without its first key (:func:`drop_first_key`: where a model parks weight on an attention sink,
    this removes it), then each model with local layers on its global layers alone and on its local
    layers alone. ``measured`` (model name -> its row from :func:`graded_under` on the unchanged
    captures, as a caller that already graded them holds it) is reused for the "as measured" rows
    instead of measuring again."""
    names = list(captures)
    if len(names) != 2:
        raise ValueError(f"compare two models (got {names})")
    out = []

    def add(model, change, caps, config=None, row=None):
        row = row or graded_under(caps, config or configs[model], model, claim_id, yardstick)
        out.append({"claim": claim_id, "model": model, "change": change, "value": row.get("value"),
                    "verdict": row["verdict"]})

    for name in names:
        add(name, "as measured", captures[name], row=(measured or {}).get(name))
    sizes = {name: int(captures[name][0].values.shape[-1]) for name in names}
    if yardstick in VALUE_YARDSTICKS and sizes[names[0]] != sizes[names[1]]:
        big, small = sorted(names, key=lambda n: -sizes[n])
        add(big, f"values projected from {sizes[big]} to {sizes[small]} dimensions",
            [project_values(c, sizes[small], seed) for c in captures[big]])
    lengths = {name: int(captures[name][0].length) for name in names}
    if lengths[names[0]] != lengths[names[1]]:
        long, short = sorted(names, key=lambda n: -lengths[n])
        add(long, f"cut to its first {lengths[short]} positions (the other's L)",
            [keep_first(c, lengths[short]) for c in captures[long]],
            dataclasses.replace(configs[long], length=lengths[short]))
    for name in names:
        add(name, "without the first key (the sink)", [drop_first_key(c) for c in captures[name]],
            dataclasses.replace(configs[name], length=configs[name].length - 1))
    for name in names:
        local, glob = local_and_global(captures[name][0])
        if local and glob:
            add(name, f"its {len(glob)} global layers alone", [keep_layers(c, glob) for c in captures[name]])
            add(name, f"its {len(local)} local layers alone", [keep_layers(c, local) for c in captures[name]])
    return out


def sink_summary(captures: Sequence) -> dict[str, float]:
    """How much weight a model's heads park on the first key, over its windows: the median head's
    share (:func:`sink_shares`) and the share of heads that put more than half their weight there."""
    shares = torch.stack([sink_shares(c) for c in captures]).mean(0).flatten()
    return {"median sink share": float(shares.median()),
            "heads with over half on the first key": float((shares > 0.5).double().mean())}
