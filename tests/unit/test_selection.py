"""Top-N selection and its tie rule (normlimits.core.selection)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings, strategies as st

from normlimits.core.selection import top_n


def _reference(row: list[float], k: int) -> list[int]:
    """Slow reference: sort by (weight descending, index ascending)."""
    return sorted(range(len(row)), key=lambda j: (-row[j], j))[:k]


def test_ties_rank_the_earlier_key_first():
    w = torch.tensor([[0.1, 0.3, 0.3, 0.0, 0.3, 0.0, 0.0]], dtype=torch.float64)
    values, idx = top_n(w, 4)
    assert idx.tolist() == [[1, 2, 4, 0]] and values.tolist() == [[0.3, 0.3, 0.3, 0.1]]
    sparse = torch.tensor([[0.0, 0.5, 0.0, 0.5, 0.0, 0.0]])
    assert top_n(sparse, 4)[1].tolist() == [[1, 3, 0, 2]]        # zeros taken in key order


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, 0.1, 0.2, 0.5, 1.0]), min_size=6, max_size=6),
                min_size=1, max_size=5), st.integers(1, 6))
def test_matches_the_slow_reference_on_tie_heavy_rows(rows, k):
    w = torch.tensor(rows, dtype=torch.float64)
    values, idx = top_n(w, k)
    for r, row in enumerate(rows):
        assert idx[r].tolist() == _reference(row, k)
        assert values[r].tolist() == [row[j] for j in _reference(row, k)]


def test_rows_without_ties_equal_topk_and_batches_keep_their_shape():
    w = torch.rand(3, 4, 50, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    values, idx = top_n(w, 7)
    ref_v, ref_i = torch.topk(w, 7)
    assert torch.equal(values, ref_v) and torch.equal(idx, ref_i) and idx.shape == (3, 4, 7)
    assert top_n(w, 50)[1].shape == (3, 4, 50)


def test_bad_k_is_refused():
    with pytest.raises(ValueError, match="1..L"):
        top_n(torch.ones(2, 3), 0)
    with pytest.raises(ValueError, match="1..L"):
        top_n(torch.ones(2, 3), 4)
