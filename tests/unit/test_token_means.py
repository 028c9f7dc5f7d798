"""normlimits.metrics.token_means: the paper's token-mean protocol against loops over query positions."""

from __future__ import annotations

import pytest
import torch

from normlimits.metrics import readings as R
from normlimits.metrics import token_means as TM

from test_readings import DT, FakeCapture


def test_window_vectors():
    cap = FakeCapture()
    assert TM.window_vectors(cap, "values") is cap.values
    h = TM.window_vectors(cap, "hidden_sphere")
    assert h.shape == (2, 1, 24, 5)
    torch.testing.assert_close(h.norm(dim=-1), torch.ones(2, 1, 24, dtype=DT))


def test_query_rows():
    rows, weights = TM.query_rows(12, [6, 12])
    assert rows.tolist() == list(range(12))
    assert weights.tolist() == [[1.0] * 6 + [0.0] * 6, [1.0] * 12]
    rows, weights = TM.query_rows(32, [24, 32], per_octave=2)
    # octaves [0,1) [1,2) [2,4) [4,8) [8,16) [16,32): cells of 1, 1, 1, 2, 4, 8 positions
    assert rows.tolist() == [0, 1, 2, 3, 4, 6, 9, 13, 19, 23, 27, 31]
    assert weights.sum(1).tolist() == [24.0, 32.0]
    assert weights[1].tolist() == [1, 1, 1, 1, 2, 2, 4, 4, 8, 0, 8, 0]
    assert weights[0, rows.tolist().index(19)] == 8 and weights[0, rows.tolist().index(23)] == 0
    rows, weights = TM.query_rows(8, [4, 8], paper=False)
    assert rows.tolist() == [3, 7] and not weights.any()
    with pytest.raises(ValueError, match="power of 2"):
        TM.query_rows(8, [8], per_octave=3)


@pytest.mark.parametrize("vectors", ["values", "hidden"])
def test_position_study_is_the_token_mean_of_row_statistics(vectors):
    caps = [FakeCapture(seed=s, L=12) for s in range(2)]
    grid = [1, 3, 5]
    study = TM.position_study(iter(caps), [6, 12], grid, vectors=vectors, forms=("scaled", "raw"),
                             samples=0, rows_per_call=5)
    assert study.positions == [6, 12] and study.windows == 2
    for i, L in enumerate([6, 12]):
        acc_mean, acc_last = 0, 0
        for cap in caps:
            x = TM.window_vectors(cap, vectors)
            per_row = []
            for t in range(L):
                w = cap.weights(torch.tensor([t]))[..., :t + 1]
                per_row.append(R.row_statistics(w, x[..., :t + 1, :], grid, forms=("raw",),
                                                    samples=0)["raw"]["true"])
            acc_mean = acc_mean + torch.cat(per_row, -2).mean(-2)
            acc_last = acc_last + per_row[-1][..., 0, :]
        torch.testing.assert_close(study.means["raw"].true[..., i, :], acc_mean / 2)
        torch.testing.assert_close(study.last["raw"].true[..., i, :], acc_last / 2)
    assert study.per_head("raw", "true", 12).shape == (4, 3)
    with pytest.raises(ValueError, match="not computed"):
        study.per_head("raw", "mc", 12)
    with pytest.raises(ValueError, match="lengths"):
        TM.position_study(iter(caps), [13], grid)
    with pytest.raises(ValueError, match="no windows"):
        TM.position_study(iter([]), [6], grid)


def test_position_study_monte_carlo_error_is_honest():
    """The stated standard error of the token-mean covers the closed-form bracket's truth: the
    Monte Carlo token-mean lies in [main, rms] within a few standard errors."""
    caps = [FakeCapture(seed=s, L=16, heads=3) for s in range(2)]
    study = TM.position_study(iter(caps), [16], [2, 4], samples=4, seed=1)
    m = study.means["scaled"]
    assert (m.mc >= m.main - 5 * m.mc_se).all() and (m.mc <= m.rms + 5 * m.mc_se).all()
    assert (m.mc_se > 0).all()
    last = TM.position_study(iter(caps), [8, 16], [2], paper=False, samples=0)
    assert last.means == {} and last.last["scaled"].true.shape == (2, 3, 2, 1)


def test_sampled_positions_weight_their_cells():
    """With per_octave >= half the window every position is kept; with fewer, the token-mean is
    the cell-weighted mean of the sampled rows, computed here by hand."""
    caps = [FakeCapture(seed=3, L=16)]
    full = TM.position_study(iter(caps), [16], [2], samples=0, expectations=())
    dense = TM.position_study(iter(caps), [16], [2], per_octave=8, samples=0, expectations=())
    torch.testing.assert_close(dense.means["scaled"].true, full.means["scaled"].true)
    sparse = TM.position_study(iter(caps), [12, 16], [2], per_octave=2, samples=0, expectations=())
    rows, weights = TM.query_rows(16, [12, 16], per_octave=2)
    per_row = torch.stack([R.row_statistics(caps[0].weights(torch.tensor([t]))[..., :t + 1],
                                            caps[0].values[..., :t + 1, :], [2], samples=0,
                                            expectations=())["scaled"]["true"][..., 0, 0]
                           for t in rows.tolist()], -1)                      # [layers, heads, R]
    for i, L in enumerate([12, 16]):
        torch.testing.assert_close(sparse.means["scaled"].true[..., i, 0],
                                   (per_row * weights[i]).sum(-1) / L)


def test_several_specs_in_one_pass_equal_separate_studies():
    """position_studies runs every spec over one pass through the windows (a one-shot iterator),
    each on its own windows (max_windows) and with its own closed forms per reading."""
    caps = [FakeCapture(seed=s, L=16, heads=2) for s in range(3)]
    specs = {"values": TM.StudySpec([2, 5], forms=("scaled", "raw"), samples=0,
                                    expectations={"scaled": ("main",)}),
             "hidden": TM.StudySpec([3], vectors="hidden_sphere", forms=("weighted",), samples=0,
                                    expectations=(), per_octave=2, max_windows=2)}
    got = TM.position_studies(iter(caps), [8, 16], specs)
    ref_v = TM.position_study(iter(caps), [8, 16], [2, 5], forms=("scaled", "raw"), samples=0,
                              expectations=("main",))
    ref_h = TM.position_study(iter(caps[:2]), [8, 16], [3], vectors="hidden_sphere",
                              forms=("weighted",), samples=0, expectations=(), per_octave=2)
    torch.testing.assert_close(got["values"].means["scaled"].main, ref_v.means["scaled"].main)
    torch.testing.assert_close(got["values"].means["raw"].true, ref_v.means["raw"].true)
    assert got["values"].means["raw"].main is None              # no closed forms asked for raw
    torch.testing.assert_close(got["hidden"].means["weighted"].true, ref_h.means["weighted"].true)
    assert got["values"].windows == 3 and got["hidden"].windows == 2
    with pytest.raises(ValueError, match="max_windows"):
        TM.StudySpec([1], max_windows=0)
    with pytest.raises(ValueError, match="not among forms"):
        R.row_statistics(torch.ones(1, 2) / 2, torch.ones(2, 1), [1], expectations={"raw": ("main",)})
