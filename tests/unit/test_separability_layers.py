"""normlimits.experiments.separability_layers: exact duplicate value vectors, Figure 3 and S80
without layer 0, and the heads above the 80% cap."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest
import torch

from normlimits.experiments import separability_curves as SC
from normlimits.experiments import separability_layers as SL

GRID = [1, 2, 4, 8, 16, 32, 64]


def test_duplicate_share_counts_rows_with_an_exact_copy_in_their_own_slice():
    a = torch.tensor([[1.0, 2.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [3.0, 4.0]])
    b = torch.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0], [9.0, 1.0]])  # rows of a, once each
    got = SL.duplicate_share(torch.stack([a, b]))
    assert got.tolist() == [0.8, 0.0]                                # no duplicates across slices
    near = torch.tensor([[1.0, 2.0], [1.0, 2.0 + 2 ** -20], [0.0, -0.0], [-0.0, 0.0]])
    assert SL.duplicate_share(near).item() == 0.5                    # exact only; -0 == +0
    nan = torch.tensor([[float("nan"), 1.0], [float("nan"), 1.0], [2.0, 2.0]])
    assert SL.duplicate_share(nan).item() == 0.0
    assert SL.duplicate_share(a.to(torch.bfloat16)[None, None]).shape == (1, 1)
    with pytest.raises(ValueError, match=r"\[\.\.\., L, d\]"):
        SL.duplicate_share(torch.ones(3))


def test_layer_duplicates_finds_repeated_tokens_in_a_token_only_layer():
    """Layer 0's values a function of the token alone (a lookup table): a key is duplicated iff
    its token occurs twice in the window; layer 1's values are all distinct."""
    gen = torch.Generator().manual_seed(0)
    table = torch.randn(6, 2, 4, generator=gen)                     # 6 tokens, 2 heads, d = 4
    captures = []
    expected = []
    for tokens in (torch.tensor([0, 1, 2, 0, 3, 1, 4, 5]), torch.tensor([0, 1, 2, 3, 4, 5, 0, 0])):
        layer0 = table[tokens].permute(1, 0, 2)                       # [heads, L, d]
        layer1 = torch.randn(2, 8, 4, generator=gen)
        captures.append(SimpleNamespace(values=torch.stack([layer0, layer1])))
        expected.append(float((torch.bincount(tokens)[tokens] > 1).double().mean()))
    got = SL.layer_duplicates(captures)
    assert got.shape == (2, 2)
    assert got[0].tolist() == pytest.approx([np.mean(expected)] * 2) and got[1].tolist() == [0.0, 0.0]
    grouped = [SimpleNamespace(values=c.values.repeat_interleave(3, dim=1)) for c in captures]
    assert SL.layer_duplicates(grouped).tolist() == got.repeat_interleave(3, dim=1).tolist()
    with pytest.raises(ValueError, match="no captures"):
        SL.layer_duplicates([])


def _sweep(fraction: np.ndarray, delta: np.ndarray | None = None):
    t = torch.as_tensor(fraction)
    return SimpleNamespace(n_grid=torch.tensor(GRID), fraction={"values": t},
                           upper_exponential={"values": t + 0.1},
                           delta={"values": torch.as_tensor(delta if delta is not None
                                                            else np.ones((2, *fraction.shape[:2])))})


def _planted() -> np.ndarray:
    """4 layers x 3 heads declining to a plateau of about 0.5; layer 0 saturates near 0.95, and
    layer 2 head 1 reaches 0.88 at N = 32."""
    rng = np.random.default_rng(0)
    curve = np.array([1.0, 0.85, 0.7, 0.6, 0.52, 0.5, 0.5])
    f = curve + 0.02 * rng.random((4, 3, len(GRID)))
    f[0] = np.array([1.0, 0.97, 0.96, 0.95, 0.95, 0.94, 0.94])
    f[2, 1, 5] = 0.88
    return f


def test_layer_zero_apart_is_figure3_and_s80_on_the_other_layers():
    f = _planted()
    table = SL.layer_zero_apart(_sweep(f), tolerance=0.02, knee=16)
    assert list(table.columns) == ["every layer", "without layer 0"]
    rest = f[1:].reshape(-1, len(GRID))
    f3 = SC.figure3_statistics(np.array(GRID), rest, rest + 0.1, 0.02)
    for key in SC.F3_KEYS:
        assert table.loc[key, "without layer 0"] == pytest.approx(f3[key])
    assert table.loc["heads", "without layer 0"] == 9 and table.loc["heads", "every layer"] == 12
    assert table.loc["largest_head", "every layer"] == pytest.approx(0.95)
    assert table.loc["largest_head", "without layer 0"] == pytest.approx(0.88)
    after = rest[:, 4:]
    assert table.loc["share_above", "without layer 0"] == pytest.approx((after > 0.8).mean())
    assert table.loc["median_head_largest", "without layer 0"] == pytest.approx(np.median(after.max(1)))
    assert table.loc["median_head_level", "without layer 0"] == pytest.approx(np.median(after.mean(1)))
    with pytest.raises(ValueError, match="must leave"):
        SL.layer_zero_apart(_sweep(f), tolerance=0.02, knee=16, drop=(0, 1, 2, 3))
    with pytest.raises(ValueError, match="knee"):
        SL.s80_statistics(rest, GRID, knee=128)


def test_heads_above_names_the_heads_over_the_cap_largest_first():
    f = _planted()
    table = SL.heads_above(_sweep(f), knee=16)
    assert table[["layer", "head"]].values.tolist() == [[0, 0], [0, 1], [0, 2], [2, 1]]
    assert table["largest N_s/N"].tolist() == pytest.approx([0.95, 0.95, 0.95, 0.88])
    assert table["at N"].tolist() == [16, 16, 16, 32]
    assert table.iloc[3]["mean over N >= 16"] == pytest.approx(f[2, 1, 4:].mean())
    stats = SL.s80_statistics(f.reshape(-1, len(GRID)), GRID, 16)
    words = SL.exceedance_words(table, stats, heads=12, knee=16)
    assert words.startswith("4 of 12 heads exceed 0.80 at some N >= 16 (1 of them outside layer 0), "
                            "4 exceed 0.85 (1 outside layer 0)")
    assert "the largest outside layer 0 layer 2 head 1 (0.880 at N = 32)" in words
    assert f"{stats['median_head_largest']:.3f}" in words
    none = SL.heads_above(_sweep(f * 0.5), knee=16)
    assert len(none) == 0
    assert SL.exceedance_words(none, stats, heads=12, knee=16).startswith("0 of 12 heads exceed 0.80")


def test_layer_table_reports_duplicates_delta_and_levels_per_layer():
    f = _planted()
    delta = np.ones((2, 4, 3))
    delta[:, 0] = 0.0                                  # layer 0: every head, both windows
    delta[1, 3, 2] = 0.0                               # one (window, head) of layer 3
    duplicates = torch.zeros(4, 3, dtype=torch.float64)
    duplicates[0] = torch.tensor([0.6, 0.66, 0.7])
    table = SL.layer_table(_sweep(f, delta), duplicates, knee=16)
    assert table["keys duplicated"].tolist() == pytest.approx([0.6533333, 0, 0, 0])
    assert table["heads with delta = 0"].tolist() == pytest.approx([1.0, 0, 0, 1 / 6])
    assert table.loc[2, "largest head, N >= 16"] == pytest.approx(f[2, :, 4:].mean(1).max())
    with pytest.raises(ValueError, match="duplicates has shape"):
        SL.layer_table(_sweep(f, delta), duplicates[:3], knee=16)
