"""normlimits.experiments.figure2: the distances chapter's numbers, against direct computations."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from normlimits.metrics import distances as D
from normlimits.experiments import figure2 as F2
from normlimits.metrics import token_means as TM
from normlimits.core.fits import loglog_fit
from normlimits.metrics.readings import FORMS

from test_readings import FakeCapture


def test_synthetic_checks_count_and_tabulate():
    syn = F2.synthetic_checks(trials=6, samples=60, lengths=(8, 32), scales=(0.5,))
    assert len(syn.table) == 4 + 4           # N in {1, 4, L/4, L - 1}: {1, 2, 4, 7} and {1, 4, 8, 31}
    assert set(syn.table["L"]) == {8, 32} and set(syn.table["E"]) == {"exact", "Monte Carlo"}
    assert syn.rows == syn.checks == 6 * len(syn.table)
    assert syn.bound_violations == syn.outside == syn.corrected_violations == 0


def test_count_outside_uses_the_slack():
    assert F2._count_outside(torch.tensor([1.0, 2.0, 3.0]), 1.5, 2.5) == 2
    assert F2._count_outside(torch.tensor([1.0, 2.0, 3.0]), 1.5, 2.5, slack=0.6) == 0


def test_flat_gaussian_case_is_near_sqrt_n_plus_one():
    fg = F2.flat_gaussian_case(L=256, d=16, n=3, samples=64)
    assert fg.limit == pytest.approx((256 - 3) / 256 * 2.0)
    assert abs(fg.ratio - fg.limit) < 0.1 * fg.limit
    assert fg.main_ratio < 1.1 and fg.allowance < 0.3


LENGTHS = [64, 96, 128]


@pytest.fixture(scope="module")
def small_study():
    caps = [FakeCapture(seed=s, L=128, heads=3) for s in range(2)]
    grid = [1, 2, 5, 8, 16, 20, 24, 32, 64, 100, 112]
    study = TM.position_study(iter(caps), LENGTHS, grid, forms=FORMS, samples=4,
                              expectations={"scaled": ("main", "rms", "upper")}, per_octave=8)
    sweep_b = D.sweep_top_n(caps, [1, 20, 100], 128)
    return caps, study, sweep_b


def test_figure2_numbers_match_direct_computations(small_study):
    caps, study, sweep_b = small_study
    got = F2.figure2_numbers(study, sweep_b, n=5)
    grid = study.n_grid.tolist()
    j = grid.index(5)
    true = study.per_head("scaled", "true", 128)[:, j].numpy()
    mc = study.per_head("scaled", "mc", 128)[:, j].numpy()
    main = study.per_head("scaled", "main", 128)[:, j].numpy()
    assert got["ratio"] == pytest.approx(float(np.median(true / mc)))
    assert got["gap"] == pytest.approx(float(np.median((mc - main) / main)))
    curve = [np.median(study.per_head("scaled", "true", L)[:, j].numpy()) for L in LENGTHS]
    assert got["exp_true"] == pytest.approx(float(loglog_fit(LENGTHS, curve).exponent))
    t = study.per_head("scaled", "true", 128).numpy()
    assert got["near_L_n"] == 112
    assert got["near_L"] == pytest.approx(float(np.median(t[:, grid.index(112)] / t.max(1))))
    assert got["retained"] == pytest.approx(float(np.median(t[:, grid.index(32)] / t[:, j])))
    med20, med100 = np.median(t[:, grid.index(20)]), np.median(t[:, grid.index(100)])
    assert got["elasticity"] == pytest.approx(math.log(med100 / med20) / math.log(5))
    ratio_b = (sweep_b.bound_linear / sweep_b.true).reshape(-1, 3).numpy()
    assert got["tightens"] == pytest.approx(float(np.median(ratio_b[:, 2] / ratio_b[:, 1])))
    assert "outside" not in got and "corrected_violations" not in got   # checks, not numbers
    assert got["collapse_lengths"] == 3          # L/4 = 16, 24 and 32 are all in the grid


def test_the_proven_intervals_hold_on_a_study_and_every_cell_is_checked(small_study):
    _, study, _ = small_study
    m = study.means["scaled"]
    assert F2.check_proven_intervals(m, study.lengths, study.n_grid.tolist()) == F2.ProvenCheck(
        cells=m.mc.numel(), flagged=0, recheck_samples=0)
    assert all(not cells for cells in
               F2.proven_interval_breaches(m, study.lengths, study.n_grid.tolist()).values())


def test_a_planted_faulty_estimator_fails_the_build_naming_the_cell(small_study, monkeypatch):
    """An estimator that returns E at 0.3 of its value on one head's rows (a bug of the kind the
    book's 2-draw estimator had on SmolLM2's sink heads) puts E below the proven main sum there:
    the check raises and names (layer, head, L, N), whatever the rules would grade."""
    caps, _, _ = small_study
    from normlimits.metrics import readings as R
    honest = R._stratified_draw

    def faulty(layout, generator):
        vals = honest(layout, generator)
        # the second (layer, head) of the block; the recheck passes that head alone
        vals["scaled"][1 if layout.w.shape[0] > 1 else 0, :, layout.grid == 5] *= 0.3
        return vals

    monkeypatch.setattr(R, "_stratified_draw", faulty)
    study = TM.position_study(iter(caps), [64], [2, 5, 8], forms=("scaled",), samples=4,
                              expectations={"scaled": ("main", "rms", "upper")}, per_octave=8)
    cells = F2.proven_interval_breaches(study.means["scaled"], [64], [2, 5, 8])
    assert {(l, h, L, n) for l, h, L, n, *_ in cells["main <= E <= rms"]} == {(0, 1, 64, 5)}
    with pytest.raises(F2.ProvenBoundError, match=r"layer 0, head 1, L = 64, N = 5: E = "):
        F2.check_proven_intervals(study.means["scaled"], [64], [2, 5, 8])
    # the recheck draws again with the same (faulty) estimator: the breach stays, and is named
    spec = TM.StudySpec([2, 5, 8], samples=4, per_octave=8)
    with pytest.raises(F2.ProvenBoundError, match=r"after a recheck.*layer 0, head 1, L = 64, N = 5"):
        F2.check_proven_intervals(study.means["scaled"], [64], [2, 5, 8],
                                  recheck=lambda cells: F2.recheck_cells(caps, spec, cells, samples=16))


def test_a_cell_outside_by_chance_is_rechecked_and_passes(small_study):
    """A cell the study's few replicates put outside [main, rms] (planted: E moved below main
    with a tiny standard error, as a heavy tail does) is estimated again from many replicates on
    the same rows; that estimate lies inside, so the check passes and counts the flagged cell."""
    import dataclasses

    caps, study, _ = small_study
    m = study.means["scaled"]
    spec = TM.StudySpec(study.n_grid.tolist(), samples=study.samples, mc_keys=study.mc_keys,
                        per_octave=study.per_octave)
    cell = (0, 1, study.lengths[-1], int(study.n_grid[1]))
    again = F2.recheck_cells(caps, spec, [cell], samples=32)
    e, se = again[0]
    assert float(m.main[0, 1, -1, 1]) * (1 - 1e-6) <= e <= float(m.rms[0, 1, -1, 1]) * (1 + 1e-6)
    assert abs(e - float(m.mc[0, 1, -1, 1])) <= 5 * math.hypot(se, float(m.mc_se[0, 1, -1, 1]))
    mc, mse = m.mc.clone(), m.mc_se.clone()
    mc[0, 1, -1, 1] = m.main[0, 1, -1, 1] * 0.9
    mse[0, 1, -1, 1] = 1e-9
    planted = dataclasses.replace(m, mc=mc, mc_se=mse)
    with pytest.raises(F2.ProvenBoundError):
        F2.check_proven_intervals(planted, study.lengths, study.n_grid.tolist())
    seen = []

    def recheck(cells):
        seen.extend(cells)
        return F2.recheck_cells(caps, spec, cells, samples=32)

    got = F2.check_proven_intervals(planted, study.lengths, study.n_grid.tolist(), recheck=recheck)
    assert seen == [cell] and got == F2.ProvenCheck(cells=mc.numel(), flagged=1,
                                                    recheck_samples=F2.RECHECK_SAMPLES)
    with pytest.raises(F2.ProvenBoundError, match="1 cells"):     # too many to recheck
        F2.check_proven_intervals(planted, study.lengths, study.n_grid.tolist(), recheck=recheck,
                                  recheck_limit=0)


def test_the_check_allows_the_standard_errors_and_the_rounding():
    """A cell below main by 4 standard errors, or by 1e-5 of main with no standard error, is no
    breach; by 6 standard errors it is (z = 5)."""
    from types import SimpleNamespace
    main = torch.ones(1, 1, 1, 3, dtype=torch.float64)
    se = torch.tensor([0.01, 0.0, 0.01], dtype=torch.float64).view(1, 1, 1, 3)
    mc = torch.tensor([1 - 0.04, 1 - 1e-5, 1 - 0.06], dtype=torch.float64).view(1, 1, 1, 3)
    means = SimpleNamespace(mc=mc, mc_se=se, main=main, rms=2 * main, upper=None)
    cells = F2.proven_interval_breaches(means, [8], [1, 2, 3])
    assert [(L, n) for _, _, L, n, *_ in cells["main <= E <= rms"]] == [(8, 3)]
def test_subsample_error_is_zero_for_the_same_study_and_positive_otherwise(small_study):
    caps, study, _ = small_study
    assert F2.subsample_error(study, study) == {"true": (0.0, 0.0), "main": (0.0, 0.0)}
    every = TM.position_study(iter(caps), LENGTHS, [5, 20], samples=0, expectations=("main",))
    sampled = TM.position_study(iter(caps), LENGTHS, [5, 20], samples=0, expectations=("main",),
                                per_octave=4)
    err = F2.subsample_error(every, sampled)
    assert 0 < err["true"][0] <= err["true"][1] < 1


def test_figures_draw(small_study):
    import matplotlib

    matplotlib.use("Agg")
    from normlimits.metrics import critical_n as C

    caps, study, sweep_b = small_study
    sweep_a = D.sweep_length(caps, LENGTHS, 5)
    assert F2.plot_fig2a(study, sweep_a).axes
    assert F2.plot_fig2b(study, critical=8).axes
    searches = {"paper": C.critical_n(study), "last row": C.critical_n(study, aggregate="last_row",
                                                                      expectation="main")}
    assert len(F2.plot_fig2c(searches).axes) == 2
    frame = C.critical_frame(searches)
    assert list(frame.index) == LENGTHS and frame.shape[1] == 4


def test_synthetic_checks_enumerate_wherever_the_subsets_are_few():
    """N = 1 and N = L - 1 have L subsets: E is exact there, so a heavy-tailed Monte Carlo
    estimate cannot make a proven inequality look broken on peaked rows."""
    from normlimits.experiments import figure2 as F2

    syn = F2.synthetic_checks(trials=4, samples=20, lengths=(128,), scales=(4.0,))
    kinds = dict(zip(syn.table["N"], syn.table["E"]))
    assert kinds == {1: "exact", 4: "Monte Carlo", 32: "Monte Carlo", 127: "exact"}
    assert syn.corrected_violations == 0 and syn.bound_violations == 0


def test_a_study_records_the_dtype_its_readings_were_computed_in():
    caps = [FakeCapture(seed=0, L=24, heads=2)]
    study64 = TM.position_study(iter(caps), [16, 24], [1, 4], samples=0, expectations=("main",))
    assert study64.dtype == "float64"
    for cap in caps:
        cap.queries, cap.keys, cap.values, cap.hidden = (t.float() for t in (cap.queries, cap.keys,
                                                                              cap.values, cap.hidden))
    study32 = TM.position_study(iter(caps), [16, 24], [1, 4], samples=0, expectations=("main",),
                                window_forms=("scaled",))
    assert study32.dtype == "float32" and study32.resampled([0]).dtype == "float32"


def test_the_proven_interval_check_allows_rounding_of_float32_readings_only(small_study):
    """E below main by a relative 5e-7 (4 units of float32 rounding) with no Monte Carlo error is
    rounding, not a breach; by 1e-3 it is a breach, and the check raises naming the cell."""
    import dataclasses

    caps, study, sweep_b = small_study
    m = study.means["scaled"]
    for shift, breaks in ((5e-7, False), (1e-3, True)):
        mc, se = m.mc.clone(), m.mc_se.clone()
        mc[0, 0, -1, 2] = m.main[0, 0, -1, 2] * (1 - shift)
        se[0, 0, -1, 2] = 0.0
        planted = dataclasses.replace(m, mc=mc, mc_se=se)
        if breaks:
            with pytest.raises(F2.ProvenBoundError, match="layer 0, head 0"):
                F2.check_proven_intervals(planted, study.lengths, study.n_grid.tolist())
        else:
            assert F2.check_proven_intervals(planted, study.lengths, study.n_grid.tolist()).cells == mc.numel()


def _fake_search(lengths=(64, 1024)):
    """A CriticalN-like search whose p-values run from 1e-150 (far below the floor) to 1."""
    from types import SimpleNamespace

    tests = []
    for L in lengths:
        grid = np.array([1, 2, 4, 8, 16, 32, L // 2], float)
        p = np.logspace(-150, 0, grid.size)
        p[0] = np.nan                                  # an N whose samples were identical
        tests.append(SimpleNamespace(n_grid=grid, pvalue=p))
    return SimpleNamespace(lengths=list(lengths), tests=tests)


def test_the_pvalue_panel_is_clipped_to_floor_and_1_and_labels_alpha_and_the_floor():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    F2.pvalue_panel(ax, _fake_search(), alpha=0.01)
    low, high = ax.get_ylim()
    assert (low, high) == (F2.P_FLOOR, 1.0)
    assert all(t <= 1.0 for t in ax.get_yticks() if low <= t <= high)
    for line in ax.get_lines():                       # nothing drawn outside [floor, 1]
        y = np.asarray(line.get_ydata(), float)
        y = y[np.isfinite(y)]
        assert ((y >= F2.P_FLOOR) & (y <= 1.0)).all(), line.get_label()
    names = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "α = 0.01" in names
    alpha_line = [l for l in ax.get_lines() if l.get_label() == "α = 0.01"][0]
    assert set(alpha_line.get_ydata()) == {0.01}
    below = [n for n in names if n.startswith("p < 1e-10")]
    assert len(below) == 1                            # one legend entry however many lengths dip below
    floor_marks = [l for l in ax.get_lines() if l.get_marker() == "v"]
    assert floor_marks and all(set(l.get_ydata()) == {F2.P_FLOOR} for l in floor_marks)
    plt.close(fig)


def test_fig2b_and_2c_mark_the_papers_fraction_from_its_constant(small_study):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from normlimits.core.protocol import CRITICAL_FRACTION

    _, study, _ = small_study
    fig = F2.plot_fig2b(study)
    paper = [l for l in fig.axes[0].get_lines() if l.get_label().startswith("paper")]
    assert len(paper) == 1 and paper[0].get_xdata()[0] == CRITICAL_FRACTION * study.lengths[-1]
    plt.close(fig)
