"""The paper's experimental protocol, in one place: grids, levels, counts, reference numbers.

Every chapter, the bench and the tests read their grids and the paper's reference numbers from
here, so that "the paper's protocol" means one thing throughout the book. Each constant says
where it comes from:

- **paper**: stated by the paper (section, algorithm, figure caption or Table 1);
- **book**: the paper leaves it open and this book chose it (the reason is given).

``tests/test_protocol.py`` holds the paper-stated values against the paper's text as the
book's notation page quotes it, so a constant cannot drift silently.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "PAPER_MODEL", "PAPER_HEADS", "PAPER_PARAMETERS", "MAX_LENGTH", "length_grid",
    "half_octave_grid", "FIXED_N", "TOP_N_GRID", "KS_ALPHA_TEXT", "KS_ALPHA_ALGORITHM",
    "KS_ALPHAS", "CRITICAL_FRACTION", "SEPARABILITY_N_GRID", "SEPARABILITY_KNEE",
    "SEPARABILITY_PLATEAU", "SEPARABILITY_MONITOR_BAND", "MULTIHEAD_P", "MULTIHEAD_H",
    "MULTIHEAD_COVERAGE", "EPSILONS", "TEMPERATURE_RANGE", "TEMPERATURES_PER_DECADE",
    "SHARP_T", "HIGH_T", "G_DROP_ORDERS", "LINEAR_EXPONENT_BAND", "JACOBIAN_ROWS",
    "GUIDELINE_TEMPERATURES", "GUIDELINE_N_GRID", "SECULAR_TAIL", "TR_TEMPERATURES", "TR_SEEDS",
    "TR_HARDER_SPREADS", "TR_GRADIENT_RATIO",
    "SEPARABILITY_SPACED_ROWS", "PAPER_TABLE1", "PaperTime", "CHAPTER_BUDGET_SECONDS",
]

# ------------------------------------------------------------------------------- model and data
#: paper, Section 3: "GPT-2 (124M)", the Hugging Face id of that checkpoint
PAPER_MODEL = "gpt2"
#: paper, Section 3: statistics over "all 144 heads" (12 layers x 12 heads)
PAPER_HEADS = 144
#: paper, Section 3: the model size
PAPER_PARAMETERS = 124_000_000
#: paper, Section 3.1: lengths run up to 1024 (GPT-2's context)
MAX_LENGTH = 1024


def length_grid(shortest: int = 32, longest: int = MAX_LENGTH) -> list[int]:
    """Fig. 2a's and Lemma 1's lengths: ``shortest`` doubled up to ``longest``, i.e.
    ``32, 64, ..., 1024`` (paper: L from 32 to 1024; the intermediate values are not stated,
    powers of two are the book's choice)."""
    if shortest < 1 or longest < shortest:
        raise ValueError(f"need 1 <= shortest <= longest (got {shortest}, {longest}).")
    grid, n = [], shortest
    while n <= longest:
        grid.append(n)
        n *= 2
    return grid


def half_octave_grid(shortest: int = 32, longest: int = MAX_LENGTH) -> list[int]:
    """Fig. 2c's lengths: ``2^k`` and ``1.5 * 2^k`` from ``shortest`` to ``longest``, i.e.
    ``32, 48, 64, 96, ..., 768, 1024`` (book: the paper does not list them; half octaves give
    twice as many points for the critical-N fit), ``longest`` itself included."""
    if shortest < 1 or longest < shortest:
        raise ValueError(f"need 1 <= shortest <= longest (got {shortest}, {longest})")
    grid, k = set(), 0
    while 2 ** k <= longest:
        for value in (2 ** k, 3 * 2 ** k // 2):
            if shortest <= value <= longest:
                grid.add(value)
        k += 1
    grid.add(longest)
    return sorted(grid)


# ------------------------------------------------------------------ distances (Section 3.1, Fig. 2)
#: paper, Section 3.1 / Fig. 2a: "N = 5 fixed"
FIXED_N = 5
#: paper, Section 3.1 / Fig. 2b: "L = 1024, N in {1, 5, 10, 20, 100}"
TOP_N_GRID = (1, 5, 10, 20, 100)
#: paper, Section 3.1 text and Fig. 2 caption: the KS test at alpha = 0.01
KS_ALPHA_TEXT = 0.01
#: paper, Algorithm 3: alpha = 0.05 (the book reports both)
KS_ALPHA_ALGORITHM = 0.05
KS_ALPHAS = (KS_ALPHA_TEXT, KS_ALPHA_ALGORITHM)
#: paper, Section 3.1 and guideline 1: "critical N grows ... (approximately 0.06 L)",
#: "fewer than 6% of the tokens"
CRITICAL_FRACTION = 0.06
#: book: a fitted log-log exponent counts as "linear" inside this band (used for Fig. 2a's
#: "grow roughly linearly" and Fig. 2c's "approximately 0.06 L")
LINEAR_EXPONENT_BAND = (0.8, 1.2)

# ----------------------------------------------------------- separability (Section 3.2, Fig. 3)
#: book: Figure 3's N grid (the paper's is not stated; it must reach beyond the knee at 16)
SEPARABILITY_N_GRID = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
#: paper, Section 3.2: "the distinguishable fraction falls until N ~ 16, then saturates"
SEPARABILITY_KNEE = 16
#: paper, Section 3.2 / Fig. 3 caption: "saturates between 0.7 and 0.85"; "about four fifths"
SEPARABILITY_PLATEAU = (0.70, 0.85)
#: paper, Conclusion: N_s/N "falling to 70-80%" signals a saturated head
SEPARABILITY_MONITOR_BAND = (0.70, 0.80)
#: paper, Section 4: "with p = 0.8, about H = 3 heads cover 99%"
MULTIHEAD_P = 0.8
MULTIHEAD_H = 3
MULTIHEAD_COVERAGE = 0.99
#: book: query rows per window for the bench's separability workload (the chapter measures the
#: error of this subsample against every row)
SEPARABILITY_SPACED_ROWS = 128

# ------------------------------------------------------------- gradients (Section 3.3, Fig. 4)
#: paper, Section 3.3: epsilon in {1e-3, 1e-1, 10}
EPSILONS = (1e-3, 1e-1, 10.0)
#: book: the T grid spans 1e-3..1e2 (the paper's spans "T < 0.1" to "T >= 1" without listing it)
TEMPERATURE_RANGE = (1e-3, 1e2)
TEMPERATURES_PER_DECADE = 4
#: paper, Section 3.3 / guideline 3: the sharp regime "T < 0.1" (avoid T <= 0.1)
SHARP_T = 0.1
#: paper, Section 3.3: "once T >= 1, all curves collapse together and fall by two orders of
#: magnitude"
HIGH_T = 1.0
G_DROP_ORDERS = 2.0
#: book: query rows per window for the Jacobian measurements
JACOBIAN_ROWS = 64
#: book: temperatures at which the gradients chapter measures N_s/N beside the Jacobian
#: (guideline 3: "pushing T below 0.1 raises Jacobian norms without improving separability")
GUIDELINE_TEMPERATURES = (0.01, 0.03, 0.1, 0.3, 1.0)
#: book: the N values of that N_s/N measurement (below, at and beyond the paper's knee at 16)
GUIDELINE_N_GRID = (4, 16, 64)
#: book: the exact Jacobian spectral norm is computed with weights below this fraction of the
#: row's second-largest weight summed into two moments; the relative error this allows is at
#: most tail^2 / (1 - tail) (proven in the gradients chapter)
SECULAR_TAIL = 1e-5
#: book: training at temperature (the paper trains nothing): temperatures, seeds per
#: temperature, and the grading thresholds: a held-out difference counts only beyond this many
#: seed spreads; "larger gradients" is at least this ratio of query/key gradient norms
TR_TEMPERATURES = (0.03, 0.1, 1.0, 10.0)
TR_SEEDS = (0, 1, 2)
TR_HARDER_SPREADS = 1.0
TR_GRADIENT_RATIO = 2.0


# ------------------------------------------------------------------------- Table 1 (Appendix B)
class PaperTime(NamedTuple):
    """One row of the paper's Table 1: what it ran, seconds, and whether it was parallelised."""

    label: str
    seconds: float
    parallel: bool


#: paper, Appendix B, Table 1 (10-core Apple M1 Pro, CPU only)
PAPER_TABLE1: dict[str, PaperTime] = {
    "distance_vs_length": PaperTime("Alg. 1 (distance vs L)", 24 * 60.0, False),
    "distance_vs_top_n": PaperTime("Alg. 2 (distance vs N)", 37 * 60.0, False),
    "critical_n": PaperTime("Alg. 3 (critical N)", (17 * 60 + 4) * 60.0, True),
    "separability": PaperTime("Alg. 4 (geometric)", 7 * 60.0, False),
    "gradient": PaperTime("Alg. 5 (gradient)", 60.0, False),
}

# ---------------------------------------------------------------------------- the book's budgets
#: book: each chapter's execution budget in seconds on the stand-in, 2 cores (a chapter that
#: takes more than twice its budget fails tests/test_book_build.py)
CHAPTER_BUDGET_SECONDS: dict[str, float] = {
    "setup": 30.0,
    "standin": 30.0,
    "vanishing": 60.0,
    "distances": 180.0,
    "separability": 180.0,
    "gradients": 180.0,
    "alternatives": 180.0,
    "architectures": 180.0,
    "cost": 180.0,
}
