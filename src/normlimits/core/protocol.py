"""The paper's experimental protocol, in one place: grids, levels, counts, reference numbers.

Every chapter, the bench and the tests read their grids and the paper's reference numbers from
here, so that "the paper's protocol" means one thing throughout the book. Each constant says
where it comes from:

- **paper**: stated by the paper (section, algorithm, figure caption or Table 1);
- **book**: the paper leaves it open and this book chose it (the reason is given).

``tests/unit/test_protocol.py`` holds the paper-stated values against the paper's text as the
book's notation page quotes it, so a constant cannot drift silently.
"""

from __future__ import annotations

from typing import NamedTuple

__all__ = [
    "PAPER_MODEL", "PAPER_HEADS", "PAPER_PARAMETERS", "MAX_LENGTH", "length_grid",
    "half_octave_grid", "FIXED_N", "TOP_N_GRID", "KS_ALPHA_TEXT", "KS_ALPHA_ALGORITHM",
    "KS_ALPHAS", "CRITICAL_FRACTION", "POSITIONS_PER_OCTAVE", "MC_DRAWS", "MC_KEYS",
    "READING_TABLE_WINDOWS", "SEPARABILITY_N_GRID", "SEPARABILITY_KNEE",
    "SEPARABILITY_PLATEAU", "SEPARABILITY_MONITOR_BAND", "MULTIHEAD_P", "MULTIHEAD_H",
    "MULTIHEAD_COVERAGE", "EPSILONS", "TEMPERATURE_RANGE", "TEMPERATURES_PER_DECADE",
    "SHARP_T", "HIGH_T", "G_DROP_ORDERS", "LINEAR_EXPONENT_BAND", "JACOBIAN_ROWS",
    "GUIDELINE_TEMPERATURES", "GUIDELINE_N_GRID", "SECULAR_TAIL", "TR_TEMPERATURES", "TR_SEEDS",
    "TR_HARDER_BITS", "TR_GRADIENT_RATIO", "TR_LEARNED_BITS",
    "SEPARABILITY_SPACED_ROWS", "SEPARABILITY_SENSITIVITY_ROWS", "SEPARABILITY_HIDDEN_ROWS",
    "SEPARABILITY_FLAT_SLOPE", "SEPARABILITY_TEMPERATURES", "SEPARABILITY_TEMPERATURE_ROWS",
    "PAPER_TABLE1", "PaperTime", "CHAPTER_BUDGET_SECONDS",
    "LARGER_GPT2_VARIANTS", "VARIANT_EXPONENT_GAP",
    "ALT_FLAT_EXPONENT", "ALT_EXPONENT_GAIN", "ALT_SEPARABILITY_MARGIN", "ALT_DECOUPLING_FACTOR",
    "ALT_KS_ALPHA", "ALT_GAMMA_FACTORS", "ALT_GAMMA_REGIME", "ALT_SINK_LOGITS", "ALT_ROWS",
    "ALT_JACOBIAN_ROWS", "ALT_JACOBIAN_WINDOWS", "ALT_LANCZOS_STEPS", "ALT_SWEEP_WINDOWS",
    "ALT_SYNTHETIC_TRIALS",
    "REMOVAL_TOLERANCES", "REMOVAL_TOLERANCE", "REMOVAL_LENGTHS", "removal_lengths", "REMOVAL_TARGETS",
    "REMOVAL_WINDOWS", "REMOVAL_LOOKS", "removal_looks", "REMOVAL_EXPONENT_BAND", "REMOVAL_RENORM_FACTOR", "REMOVAL_PREDICT_FACTOR",
    "FULL_SAMPLING_WORK", "sampling_work", "LARGE_STUDY_WINDOWS", "LARGE_POSITIONS_PER_OCTAVE",
    "LARGE_READING_WINDOWS", "LARGE_SEPARABILITY_WINDOWS", "LARGE_REMOVAL_WINDOWS", "Sampling",
    "sampling_for",
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
#: paper, Section 3: "larger variants" gave "qualitatively identical trends" (not named); book:
#: GPT-2 355M, the next size up, tested when it can be loaded
LARGER_GPT2_VARIANTS = ("gpt2-medium",)
#: book: "identical trend" for the vanishing yardstick means the median head's exponent of the
#: largest weight against L moves by at most this much (a fifth of the 1/L law's exponent)
VARIANT_EXPONENT_GAP = 0.2


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
#: book: the paper's protocol for Fig. 2 averages over every query position; the critical-N
#: search and the reading table use this many positions per octave of t (a stratified sample
#: whose error the distances chapter measures against every position)
POSITIONS_PER_OCTAVE = 16
#: book: independent Monte Carlo replicates of E per query row (their spread gives the standard
#: error: 3 degrees of freedom per row), and the light keys outside the subset each replicate sums
#: over (a sample without replacement; the strata of the heavy keys are exact:
#: normlimits.metrics.readings.MC_STRATA). Issue 47: 4 x 16 with 4 strata replaced 2 x 64 with the
#: largest weight alone; its intervals' coverage on SmolLM2's rows: tests/model/test_estimator.py
MC_DRAWS = 4
MC_KEYS = 16
#: book: windows averaged by the reading table's studies on vectors other than the value vectors
READING_TABLE_WINDOWS = 2
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
#: book: query rows per window for the bench's separability workload, and for the chapter's
#: plug-in bounds and multi-head measurements; the chapter measures the error of this subsample
#: against every row
SEPARABILITY_SPACED_ROWS = 128
#: book: query rows per window for the chapter's sensitivity analyses on the raw value vectors
#: and on uniform points (each costs what the value vectors cost per row); the chapter states the
#: standard error this sample leaves on each head's mean
SEPARABILITY_SENSITIVITY_ROWS = 64
#: book: query rows per window for the 768-dimensional hidden states at GPT-2's size (per row
#: about 3 times the value vectors' cost even through their Gram matrix); the chapter states the
#: standard error this sample leaves on each head's mean
SEPARABILITY_HIDDEN_ROWS = 32
#: book: a decline of N_s/N counts as stopped when its slope per doubling of N is within this of 0
SEPARABILITY_FLAT_SLOPE = 0.02
#: book: softmax temperatures for "a smaller T separates tokens better" (paper, Sec. 2.3; the
#: model's own logits, T = 1 is the model), measured on SEPARABILITY_TEMPERATURE_ROWS spaced rows
SEPARABILITY_TEMPERATURES = (0.03, 0.1, 0.3, 1.0, 3.0, 10.0)
SEPARABILITY_TEMPERATURE_ROWS = 16

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
#: book: training at temperature (the paper trains nothing): temperatures (the lowest against
#: the stock T = 1), seeds per temperature, and the grading thresholds: "harder" is a mean paired
#: held-out difference above this many bits per byte, decided by the Student t interval over the
#: seeds (issue 47: the sign of the difference, with the uncertainty of 3 seeds stated honestly);
#: "larger gradients" is at least this ratio of query/key gradient norms
TR_TEMPERATURES = (0.03, 1.0)
TR_SEEDS = (0, 1, 2)
TR_HARDER_BITS = 0.0
TR_GRADIENT_RATIO = 2.0
#: book: the comparison is meaningful only when the T = 1 models beat the bigram baseline of the
#: held-out split by at least this many bits per byte (the budget trained them at all)
TR_LEARNED_BITS = 0.1


# ------------------------------------------------------- alternatives (Section 4, Discussion)
#: book: a normaliser "escapes" vanishing attention when its median head's largest weight falls
#: no faster than L^-0.1 over L = 32..1024 ...
ALT_FLAT_EXPONENT = -0.1
#: book: ... and "slows" it when its exponent exceeds softmax's by at least 0.1
ALT_EXPONENT_GAIN = 0.1
#: book: N_s/N counts as higher than softmax's at an N when it exceeds it by this margin
ALT_SEPARABILITY_MARGIN = 0.02
#: book: "less gradient at equal selectivity" = at most this fraction of softmax's Jacobian norm
#: (2 is the factor between softmax's and sparsemax's worst cases)
ALT_DECOUPLING_FACTOR = 0.5
#: paper, Section 3.1: the KS level of Figure 2c, used for every normaliser's critical N
ALT_KS_ALPHA = KS_ALPHA_TEXT
#: book: SSMax's scale gamma swept at these multiples of the critical value (arXiv 2510.05554)
ALT_GAMMA_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)
#: book: a phase transition at the critical gamma shows as a mean largest weight (L = 1024) of
#: at most the first number at half the critical gamma and at least the second at twice it
ALT_GAMMA_REGIME = (0.25, 0.75)
#: book: the sink logits b of the sweep (b = 0 is softmax_1)
ALT_SINK_LOGITS = (-4.0, -2.0, 0.0, 2.0, 4.0, 8.0)
#: book: the alternatives chapter's sampling (it measures 13 normalisers and two sweeps within
#: its budget): query rows per window for distance and separability, rows and windows for the
#: Jacobian (the costly yardstick), Lanczos steps for norms without a closed form, windows of the
#: SSMax and sink sweeps, synthetic rows per length. Two Jacobian windows, not one, so that the
#: gradient claims have a resampling unit and an interval (issue 31; two windows give a crude one)
ALT_ROWS = 8
ALT_JACOBIAN_ROWS = 4
ALT_JACOBIAN_WINDOWS = 2
ALT_LANCZOS_STEPS = 16
ALT_SWEEP_WINDOWS = 2
ALT_SYNTHETIC_TRIALS = 128

# --------------------------------------------- tokens removed (the follow-up, arXiv 2609.37879)
#: book: loss tolerances tau for the effective set size N*_tau, nats per token (the follow-up's
#: tau is not recovered); the first is the one the verdicts rest on
REMOVAL_TOLERANCES = (0.05, 0.01)
REMOVAL_TOLERANCE = REMOVAL_TOLERANCES[0]
#: book: context lengths of the removal experiment (suffix protocol: length L sees each window's
#: last L tokens, every length the same targets)
REMOVAL_LENGTHS = (128, 256, 512, 1024)


def removal_lengths(longest: int) -> list[int]:
    """The removal experiment's lengths for windows of ``longest`` tokens: those of
    :data:`REMOVAL_LENGTHS` up to ``longest`` (a model that caps L, such as Gemma 3 at its sliding
    window, runs the experiment up to its cap). The longest must be one of them and at least two
    must remain (an exponent needs two lengths); otherwise a ValueError says so."""
    kept = [L for L in REMOVAL_LENGTHS if L <= longest]
    if len(kept) < 2 or kept[-1] != longest:
        raise ValueError(f"the removal experiment needs windows whose length is one of {REMOVAL_LENGTHS} "
                         f"beyond the first (got L = {longest}): it measures every length of the "
                         "protocol up to the windows' own")
    return kept


#: book: prediction targets per window and length (each window's last tokens)
REMOVAL_TARGETS = 64
#: book: windows of the removal experiment, the first of the chapter's windows (each costs one
#: forward pass per N and mode). Two were too few: on the stand-in the four pairs of its eight
#: windows gave the renormalised N*'s exponent from 0.12 to 0.88 and graded ALT-TOPK both ways
#: (the closing note of 2026-12-01 has the table); every window of the chapter is used.
REMOVAL_WINDOWS = 8
#: book: the looks of the removal experiment (normlimits.core.sequential), fixed before any data:
#: it is measured on the first 2 windows, then 4, then 8, and stops at the first look where no
#: removal claim is undecided (each look's intervals Bonferroni-corrected for the looks)
REMOVAL_LOOKS = (2, 4, 8)


def removal_looks(cap: int) -> tuple[int, ...]:
    """The looks of :data:`REMOVAL_LOOKS` up to ``cap`` windows (the windows the model's sampling
    allows), ``cap`` itself the last look: (2, 4, 8) for 8, (2, 4, 6) for 6, (2,) for 2, (1,) for 1.
    ValueError for a cap below 1."""
    if cap < 1:
        raise ValueError(f"the removal experiment needs at least one window (got {cap})")
    kept = tuple(n for n in REMOVAL_LOOKS if n < cap)
    return kept + (int(cap),)
#: book: "grows with the context while its fraction falls": the exponent of N*_tau against L
#: lies in this band
REMOVAL_EXPONENT_BAND = (0.1, 0.9)
#: book: renormalising "substantially" reduces N*_tau: the median ratio is at most this
REMOVAL_RENORM_FACTOR = 0.5
#: book: the critical N of Figure 2c "predicts" N*_tau when they agree within this factor
#: (median over lengths of |log2(N*_tau / critical N)| <= log2 of it)
REMOVAL_PREDICT_FACTOR = 2.0

# ------------------------------------------------------------- sampling at the model's size
#: book: the position-averaged studies of the distances chapter, the every-position sweep of the
#: separability chapter and the removal experiment cost in proportion to the (head, query
#: position) pairs of a window times the head size (their Monte Carlo means, distances and inner
#: products are d-dimensional). Up to this many (head, position, dimension) products per window a
#: chapter measures the book's full sampling: the stand-ins (16 heads x 1024 x 48 = 786,432) are
#: within it. Above it it measures the LARGE_* sampling below, which fits its time budget on 2 CPU
#: cores: SmolLM2-135M (270 x 1024 x 64 = 17.7M; measured 2026-12-02 with the full sampling, 8
#: windows of 1024 tokens: distances 1355 s, separability's sweep about 680 s), GPT-2 124M and
#: Gemma 3 270M at L = 512 (144 x 1024 x 64 = 72 x 512 x 256 = 9.4M; measured 2026-12-05, Gemma 3
#: with the full sampling: the distances chapter's study cell ran past its 1,500 s timeout, on 2
#: cores shared with other work). A chapter says which sampling it used and measures the
#: subsample's error where it can.
FULL_SAMPLING_WORK = 4_000_000
#: book: windows of the distances chapter's position-averaged studies on a large model
LARGE_STUDY_WINDOWS = 4
#: book: query positions per octave of t in those studies (every position below 2x this)
LARGE_POSITIONS_PER_OCTAVE = 4
#: book: windows of the reading table's studies on vectors other than the value vectors (the
#: hidden-state readings, 576 dimensions per layer, are left out on a large model: 177 s per window)
LARGE_READING_WINDOWS = 1
#: book: windows of the separability sweep on a large model (every query position kept)
LARGE_SEPARABILITY_WINDOWS = 2
#: book: windows of the removal experiment on a large model (one forward pass per N and mode)
LARGE_REMOVAL_WINDOWS = 2


class Sampling(NamedTuple):
    """How much of each window a chapter measures on a model (see :func:`sampling_for`)."""

    full: bool
    #: windows of the distances chapter's studies and of the separability sweep
    study_windows: int
    separability_windows: int
    removal_windows: int
    per_octave: int
    reading_windows: int
    #: the vectors of the reading table besides the value vectors
    reading_vectors: tuple[str, ...]

    def words(self, work: int) -> str:
        """The sampling in a sentence for the page (``work``: the window's (head, query position,
        dimension) products, :func:`sampling_work`)."""
        if self.full:
            return (f"this model's windows hold {work:,} (head, query position, dimension) products, "
                    f"within the {FULL_SAMPLING_WORK:,} for which the book measures its full sampling")
        return (f"this model's windows hold {work:,} (head, query position, dimension) products, more "
                f"than the {FULL_SAMPLING_WORK:,} for which the book measures its full sampling on "
                f"2 CPU cores, so the heavy studies use fewer windows and positions")


def sampling_work(n_heads_total: int, length: int, head_size: int) -> int:
    """The (head, query position, dimension) products of one window: what the heavy studies'
    cost is proportional to."""
    return int(n_heads_total) * int(length) * int(head_size)


def sampling_for(n_heads_total: int, length: int, windows: int, *, head_size: int) -> Sampling:
    """The sampling of the heavy studies for a model with ``n_heads_total`` heads (all layers) of
    ``head_size`` dimensions, windows of ``length`` tokens and ``windows`` windows (the
    window-count setting): the book's full sampling up to :data:`FULL_SAMPLING_WORK` (head,
    position, dimension) products per window (:func:`sampling_work`), the ``LARGE_*`` constants
    above it (never more windows than the setting gives)."""
    if n_heads_total < 1 or length < 1 or windows < 1 or head_size < 1:
        raise ValueError(f"need heads, length, windows and head size >= 1 (got {n_heads_total}, "
                         f"{length}, {windows}, {head_size})")
    if sampling_work(n_heads_total, length, head_size) <= FULL_SAMPLING_WORK:
        return Sampling(True, windows, windows, min(windows, REMOVAL_WINDOWS), POSITIONS_PER_OCTAVE,
                        min(windows, READING_TABLE_WINDOWS), ("hidden", "values_sphere", "hidden_sphere"))
    return Sampling(False, min(windows, LARGE_STUDY_WINDOWS), min(windows, LARGE_SEPARABILITY_WINDOWS),
                    min(windows, LARGE_REMOVAL_WINDOWS), LARGE_POSITIONS_PER_OCTAVE,
                    min(windows, LARGE_READING_WINDOWS), ("values_sphere",))


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
#: book: each chapter's execution budget in seconds for one run on 2 cores, on the model it runs
#: on (SmolLM2-135M offline for the model chapters, the stand-in for alternatives and cost); a
#: replica on a control model is a second run, held to the same budget on its own (a run over twice
#: its budget is reported as a warning by tests/book/test_book_build.py; normlimits.book.timings)
#: book: the whole build's wall time (one-time work excluded) at most this multiple of the time
#: its model forward passes take (the physical floor on the building machine; normlimits.book.timings)
BOOK_FLOOR_GOAL = 1.5
CHAPTER_BUDGET_SECONDS: dict[str, float] = {
    "setup": 60.0,         # loads and scores both real families (SmolLM2-135M, Gemma 3 270M)
    "standin": 30.0,
    # on the real offline model it pays the build's forward passes, and Gemma 3 270M's 8 windows
    # at L = 1024 for the local-against-global figure
    "vanishing": 240.0,
    "distances": 180.0,
    "separability": 180.0,
    # Gemma 3 270M's replica (72 heads of 256 dimensions; the Jacobian's cost grows with the head
    # size) is the heaviest run of the chapter: 699 s on 2 cores shared three ways
    "gradients": 240.0,
    "alternatives": 180.0,
    # the survey of four models, the real one on three more texts, and each candidate cause of the
    # two real families' disagreements re-measured (F3 and F2a: seven yardstick runs each)
    "architectures": 450.0,
    "cost": 180.0,
}
