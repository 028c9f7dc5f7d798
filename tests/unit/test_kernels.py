"""A notebook executed in a fresh kernel with its own environment (normlimits.book.kernels)."""

from __future__ import annotations

import os

import nbformat
import pytest

from normlimits.book import kernels


def test_a_childs_environment_is_this_ones_changed_and_this_one_is_left_alone(monkeypatch):
    monkeypatch.setenv("NL_TEST_A", "1")
    monkeypatch.delenv("NL_TEST_B", raising=False)
    env = kernels.child_environment({"NL_TEST_A": None, "NL_TEST_B": "2"})
    assert "NL_TEST_A" not in env and env["NL_TEST_B"] == "2" and env["PATH"] == os.environ["PATH"]
    assert os.environ["NL_TEST_A"] == "1" and "NL_TEST_B" not in os.environ


def _notebook(*sources: str):
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(s) for s in sources])
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    return nb


def test_the_kernel_runs_in_the_folder_with_the_changed_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("NL_TEST_GONE", "x")
    nb = _notebook("import os; print(os.getcwd(), os.environ.get('NL_TEST_SET'), 'NL_TEST_GONE' in os.environ)")
    seconds = kernels.run_in_kernel(nb, tmp_path, {"NL_TEST_SET": "7", "NL_TEST_GONE": None}, timeout=60,
                                    record_timing=False)
    assert seconds > 0
    assert nb.cells[0].outputs[0]["text"].split() == [str(tmp_path), "7", "False"]
    assert "execution" not in nb.cells[0].metadata          # no timing recorded when asked not to
    assert "NL_TEST_SET" not in os.environ


def test_a_failing_cell_raises_and_later_cells_do_not_run(tmp_path):
    from nbclient.exceptions import CellExecutionError

    nb = _notebook("raise ValueError('planted')", "print('after')")
    with pytest.raises(CellExecutionError, match="planted"):
        kernels.run_in_kernel(nb, tmp_path, {}, timeout=60)
    assert nb.cells[1].outputs == []
