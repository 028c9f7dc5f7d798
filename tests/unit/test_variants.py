"""The larger-variants comparison: measured where the models load, a stated reason where not."""

import hashlib

import pytest

from normlimits.metrics import vanishing as V
from normlimits.model.capture import iter_captures
from normlimits.claims import REGISTRY
from normlimits.model.corpus import Corpus, token_windows
from normlimits.model.errors import ModelError
from normlimits.experiments.variants import (
    VariantResult, comparison_values, measure_variants, median_exponent, missing_reason,
    results_frame)

TEXT = "Well, Prince, so Genoa and Lucca are now just family estates of the Buonapartes. " * 40


@pytest.fixture
def corpus():
    return Corpus(text=TEXT, sha256=hashlib.sha256(TEXT.encode()).hexdigest(), source="test")


@pytest.fixture(autouse=True)
def no_capture_cache(monkeypatch):
    monkeypatch.setenv("NORMLIMITS_CAPTURE_CACHE", "off")


def test_median_exponent_is_the_chapters_head_summary(tiny_loaded, corpus):
    lengths = [8, 16, 32, 64]
    exponent, heads = median_exponent(tiny_loaded, corpus, lengths, 2)
    stats, _ = V.sweep_captures(iter_captures(tiny_loaded, token_windows(tiny_loaded, corpus, 64, 2)),
                                lengths)
    assert heads == 2 * 4
    assert exponent == pytest.approx(float(V.head_summary(stats)["exponent"].median()), abs=1e-12)


def test_a_model_that_cannot_be_loaded_gets_its_reason(tiny_loaded, corpus):
    def loader(name):
        if name == "gpt2-medium":
            raise ModelError("NORMLIMITS_MODEL=gpt2-medium is not in the local cache and the hub "
                             "is disabled")
        return tiny_loaded

    results = measure_variants(["tiny", "gpt2-medium"], corpus, [8, 16, 32, 64], 1, loader=loader)
    assert results[0].measured and results[0].heads == 8
    assert not results[1].measured and "hub is disabled" in results[1].reason
    base = VariantResult("gpt2", None, None, reason="offline")
    assert missing_reason(base, results[1:]) == ("gpt2: offline; gpt2-medium: not in the local "
                                                 "cache and the hub is disabled")
    both = [VariantResult(name, None, None, reason=f"NORMLIMITS_MODEL='{name}' is not available: the hub "
                          "is disabled (HF_HUB_OFFLINE=1). Remedy: run once with network access.")
            for name in ("gpt2", "gpt2-medium")]
    assert missing_reason(both[0], both[1:]) == ("gpt2 and gpt2-medium: not available: the hub is "
                                                 "disabled (HF_HUB_OFFLINE=1)")
    frame = results_frame(both)
    assert list(frame.index) == ["gpt2", "gpt2-medium"]
    assert frame.loc["gpt2", "not measured because"] == "not available: the hub is disabled (HF_HUB_OFFLINE=1)"
    assert comparison_values(base, results) == {"exponent_gap": None, "same_direction": None}


def test_the_rule_grades_the_gap_and_the_direction():
    rule = REGISTRY["VAR"].rule
    base = VariantResult("gpt2", -0.6, 144)
    close = comparison_values(base, [VariantResult("gpt2-medium", -0.5, 384)])
    assert close == {"exponent_gap": pytest.approx(0.1), "same_direction": 1.0}
    assert missing_reason(base, [VariantResult("gpt2-medium", -0.5, 384)]) is None
    assert rule.grade(close) == "confirmed"
    far = comparison_values(base, [VariantResult("gpt2-medium", 0.1, 384)])
    assert far["same_direction"] == 0.0
    assert rule.grade(far) == "refuted"
