"""The protocol module holds the paper's stated values (checked here against the paper's words)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from normlimits.core import protocol as P

ROOT = Path(__file__).resolve().parents[2]
PAPER_DIGEST = ROOT.parent / "shared" / "spec" / "paper.md"

#: The paper's words each constant comes from (quoted from the digest of the paper the project
#: works from; the second test checks they are still there, verbatim).
QUOTES = {
    "fixed_n": "| N = 5, L = 32…1024 | sweep for Fig. 2a |",
    "top_n": "| L = 1024, N ∈ {1, 5, 10, 20, 100} | sweep for Fig. 2b |",
    "alpha": "| α = 0.01 | KS significance level in the text (0.05 in Alg. 3) |",
    "critical": "| < 6% of tokens, critical N ≈ 0.06·L | Fig. 2c |",
    "knee": "| N ≈ 16 | where N_s/N stops falling |",
    "plateau": "| 0.70–0.85 | plateau of N_s/N; \"≈ 80%\", \"about four fifths\" |",
    "sharp_t": "| T < 0.1 | regime where the empirical Jacobian follows 1/T |",
    "drop": "| 2 orders of magnitude | drop of g once T ≥ 1 |",
    "epsilons": "| ε ∈ {1e-3, 1e-1, 10} | perturbation sizes |",
    "multihead": "| p = 0.8, H = 3 → 1 − 0.2³ = 0.992 ≈ 99% | multi-head coverage argument |",
    "heads": "| 144 | heads aggregated (12 layers × 12 heads) |",
    "table1": ["| Alg. 1 (distance vs L) | 24 min | No |", "| Alg. 2 (distance vs N) | 37 min | No |",
               "| Alg. 3 (critical N) | 17 h 4 min | Yes (Joblib) |", "| Alg. 4 (geometric) | 7 min | No |",
               "| Alg. 5 (gradient) | 1 min | No |"],
    "monitor": "Geometric separability falling to **70–80%** means the head has saturated its capacity.",
}


def _numbers(text: str) -> list[float]:
    return [float(x) for x in re.findall(r"\d+(?:\.\d+)?(?:e-?\d+)?", text)]


def test_paper_stated_values_match_the_quotes():
    assert P.FIXED_N == 5 and P.length_grid()[0] == 32 and P.length_grid()[-1] == P.MAX_LENGTH == 1024
    assert list(P.TOP_N_GRID) == _numbers(QUOTES["top_n"].split("{")[1].split("}")[0])
    assert (P.KS_ALPHA_TEXT, P.KS_ALPHA_ALGORITHM) == (0.01, 0.05)
    assert P.CRITICAL_FRACTION == 0.06
    assert P.SEPARABILITY_KNEE == 16
    assert P.SEPARABILITY_PLATEAU == (0.70, 0.85)
    assert P.SEPARABILITY_MONITOR_BAND == (0.70, 0.80)
    assert P.SHARP_T == 0.1 and P.HIGH_T == 1.0 and P.G_DROP_ORDERS == 2.0
    assert P.EPSILONS == (1e-3, 1e-1, 10.0)
    assert (P.MULTIHEAD_P, P.MULTIHEAD_H) == (0.8, 3)
    assert 1 - (1 - P.MULTIHEAD_P) ** P.MULTIHEAD_H == pytest.approx(0.992)
    assert P.PAPER_HEADS == 144
    minutes = [24, 37, 17 * 60 + 4, 7, 1]
    assert [t.seconds for t in P.PAPER_TABLE1.values()] == [m * 60.0 for m in minutes]
    assert [t.parallel for t in P.PAPER_TABLE1.values()] == [False, False, True, False, False]
    assert [t.label for t in P.PAPER_TABLE1.values()] == [q.split(" | ")[0][2:] for q in QUOTES["table1"]]


@pytest.mark.skipif(not PAPER_DIGEST.is_file(), reason="the paper digest (../shared/spec) is absent")
def test_quotes_are_the_papers_words():
    text = PAPER_DIGEST.read_text(encoding="utf-8")
    for key, quote in QUOTES.items():
        for line in quote if isinstance(quote, list) else [quote]:
            assert line in text, f"{key}: the quoted words are not in the paper digest: {line!r}"


def test_grids_are_the_books_choices_and_protocol_is_used_by_the_bench():
    assert P.length_grid(32, 1024) == [32, 64, 128, 256, 512, 1024]
    assert P.half_octave_grid(32, 1024)[:4] == [32, 48, 64, 96]
    assert P.half_octave_grid(32, 1000)[-1] == 1000
    assert max(P.SEPARABILITY_N_GRID) > P.SEPARABILITY_KNEE
    with pytest.raises(ValueError):
        P.length_grid(64, 32)
    from normlimits.experiments import bench
    config = bench.BenchConfig()
    assert config.fixed_n == P.FIXED_N and tuple(config.top_n) == P.TOP_N_GRID
    assert tuple(config.alphas) == P.KS_ALPHAS and tuple(config.epsilons) == P.EPSILONS
    assert bench.PAPER_TABLE1 is P.PAPER_TABLE1


def test_sampling_is_full_for_the_stand_ins_and_reduced_by_work_above():
    from normlimits.core import protocol as P

    stand_in = P.sampling_for(16, 1024, 8, head_size=48)
    assert stand_in.full and stand_in.study_windows == 8 and stand_in.per_octave == P.POSITIONS_PER_OCTAVE
    assert stand_in.reading_vectors == ("hidden", "values_sphere", "hidden_sphere")
    assert stand_in.removal_windows == P.REMOVAL_WINDOWS
    # the cost grows with the head size: Gemma 3's 72 heads of 256 at L = 512 weigh as much as
    # GPT-2's 144 heads of 64 at 1024, and both as much as each other
    assert P.sampling_work(72, 512, 256) == P.sampling_work(144, 1024, 64)
    for heads, length, size in ((144, 1024, 64), (72, 512, 256), (270, 1024, 64)):
        large = P.sampling_for(heads, length, 8, head_size=size)
        assert not large.full
        assert (large.study_windows, large.separability_windows, large.removal_windows) == (
            P.LARGE_STUDY_WINDOWS, P.LARGE_SEPARABILITY_WINDOWS, P.LARGE_REMOVAL_WINDOWS)
        assert large.per_octave == P.LARGE_POSITIONS_PER_OCTAVE and "hidden" not in large.reading_vectors
    # the same heads and length with a smaller head size are full again
    assert P.sampling_for(72, 512, 8, head_size=64).full
    assert P.sampling_for(270, 1024, 1, head_size=64).study_windows == 1, "never more windows than the setting"
    work = P.sampling_work(270, 1024, 64)
    assert "more than" in P.sampling_for(270, 1024, 8, head_size=64).words(work)
    assert "within" in stand_in.words(P.sampling_work(16, 1024, 48))
    for bad in ((0, 1024, 8, 64), (16, 1024, 8, 0)):
        with pytest.raises(ValueError):
            P.sampling_for(*bad[:3], head_size=bad[3])


def test_the_removal_runs_on_the_protocols_lengths_up_to_the_windows_own():
    assert P.removal_lengths(1024) == list(P.REMOVAL_LENGTHS)
    assert P.removal_lengths(512) == [128, 256, 512]          # Gemma 3, capped at its sliding window
    assert P.removal_lengths(256) == [128, 256]
    for bad in (128, 300, 2048):                                # one length only, or not a protocol length
        with pytest.raises(ValueError, match=f"got L = {bad}"):
            P.removal_lengths(bad)


def test_removal_looks_end_at_the_cap():
    assert P.removal_looks(8) == (2, 4, 8)
    assert P.removal_looks(6) == (2, 4, 6)
    assert P.removal_looks(2) == (2,)
    assert P.removal_looks(1) == (1,)
    assert P.removal_looks(16) == (2, 4, 8, 16)
    import pytest

    with pytest.raises(ValueError, match="at least one window"):
        P.removal_looks(0)
