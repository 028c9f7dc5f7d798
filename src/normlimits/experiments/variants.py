"""The paper's untested remark that larger GPT-2 variants "gave qualitatively identical trends".

The paper (Section 3) measures GPT-2 124M only and says the larger variants behave the same,
showing nothing. The book tests the remark on the one yardstick every chapter starts from: how
fast the largest attention weight falls with the context length (the median head's exponent of
``max_i alpha_i`` against L, :func:`normlimits.metrics.vanishing.head_summary`). It needs GPT-2 124M as
the build's model and each larger variant loadable; where either is missing the comparison is
"not testable", with the reason for each model (never a silent gap).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Sequence

from normlimits.metrics import vanishing as V
from normlimits.model.capture_cache import cached_captures
from normlimits.model.errors import ModelError
from normlimits.model.load import load_model


@dataclass(frozen=True)
class VariantResult:
    """One model of the comparison: its median-head exponent, or why it has none."""

    model: str
    exponent: float | None
    heads: int | None
    reason: str | None = None

    @property
    def measured(self) -> bool:
        return self.exponent is not None and math.isfinite(self.exponent)


def median_exponent(loaded, corpus, lengths: Sequence[int], windows: int,
                    temperature: float = 1.0) -> tuple[float, int]:
    """The median over (layer, head) of the fitted exponent of the largest weight against L,
    with the number of heads; one forward pass per window (the chapters' capture path)."""
    stats, _ = V.sweep_captures(cached_captures(loaded, corpus, lengths[-1], windows), lengths,
                                temperature)
    heads = V.head_summary(stats)
    return float(heads["exponent"].median()), len(heads)


def measure_variants(names: Sequence[str], corpus, lengths: Sequence[int], windows: int, *,
                     loader: Callable[[str], object] = load_model) -> list[VariantResult]:
    """:func:`median_exponent` for each model name that loads; a model that cannot be loaded
    (offline, unknown, damaged) gets its loader's error as the reason."""
    results = []
    for name in names:
        try:
            loaded = loader(name)
        except ModelError as exc:
            results.append(VariantResult(name, None, None, reason=str(exc)))
            continue
        usable = [L for L in lengths if L <= loaded.max_positions]
        exponent, heads = median_exponent(loaded, corpus, usable, windows)
        results.append(VariantResult(name, exponent, heads))
    return results


def comparison_values(base: VariantResult, larger: Sequence[VariantResult]) -> dict:
    """The statistics the claim's rule grades: the largest gap between a larger variant's median
    exponent and GPT-2 124M's, and the fraction of larger variants whose exponent has the same
    sign as 124M's. None where the base or every larger variant is missing."""
    measured = [r for r in larger if r.measured]
    if not base.measured or not measured:
        return {"exponent_gap": None, "same_direction": None}
    gap = max(abs(r.exponent - base.exponent) for r in measured)
    same = sum((r.exponent < 0) == (base.exponent < 0) for r in measured) / len(measured)
    return {"exponent_gap": gap, "same_direction": same}


def results_frame(results: Sequence[VariantResult]):
    """The comparison as a table: one row per model (its median exponent and head count, or why
    it was not measured, in a few words)."""
    import pandas as pd

    return pd.DataFrame([{"model": r.model, "median exponent": r.exponent, "heads": r.heads,
                          "not measured because": short_reason(r.reason) if r.reason else ""}
                         for r in results]).set_index("model")


def short_reason(message: str) -> str:
    """A loader's error in a few words for the prose: without the setting it names
    (``NORMLIMITS_MODEL='gpt2' is not available: ...`` -> ``not available: ...``) and without its
    remedy."""
    text = re.sub(r"^\S+=\S+ (is )?", "", message.strip())
    text = text.split(" Remedy:")[0].strip()
    return text.rstrip(".")


def missing_reason(base: VariantResult, larger: Sequence[VariantResult]) -> str | None:
    """Why the comparison cannot be made on this build (None when it can), in a few words: the
    models that share a reason are named together (``gpt2 and gpt2-medium: ...``)."""
    missing = [r for r in [base, *larger] if not r.measured]
    if base.measured and len(missing) < len(larger):
        return None
    grouped: dict[str, list[str]] = {}
    for r in missing:
        grouped.setdefault(short_reason(r.reason or "not measured"), []).append(r.model)
    return "; ".join(f"{' and '.join(models)}: {reason}" for reason, models in grouped.items())
