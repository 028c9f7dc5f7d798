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


def test_each_cells_time_is_read_from_the_recorded_timing_and_can_be_dropped(tmp_path):
    nb = _notebook("x = 1", "\n\nimport time; time.sleep(0.5)", "y = 2")
    nb.cells.insert(0, nbformat.v4.new_markdown_cell("# not timed"))
    kernels.run_in_kernel(nb, tmp_path, {}, timeout=60, record_timing=True)
    timed = kernels.cell_seconds(nb)
    assert [(i, line) for i, _, line in timed] == [(1, "x = 1"), (2, "import time; time.sleep(0.5)"),
                                                   (3, "y = 2")]
    assert 0.5 <= timed[1][1] < 30 and timed[0][1] < 0.5
    slowest = kernels.slowest_cells(nb, 2)
    assert [c["cell"] for c in slowest] == [2, max((1, 3), key=lambda i: timed[i - 1][1])]
    assert slowest[0] == {"cell": 2, "seconds": round(timed[1][1], 1), "line": "import time; time.sleep(0.5)"}
    kernels.drop_cell_timing(nb)
    assert all("execution" not in c.metadata for c in nb.cells) and kernels.cell_seconds(nb) == []
    assert kernels.slowest_cells(nb, 2) == []


def test_a_cell_without_both_moments_is_not_timed():
    nb = _notebook("a = 1", "b = 2")
    nb.cells[0].metadata["execution"] = {"iopub.execute_input": "2026-12-07T03:00:00.000000Z",
                                         "shell.execute_reply": "2026-12-07T03:00:02.250000Z"}
    nb.cells[1].metadata["execution"] = {"iopub.execute_input": "2026-12-07T03:00:02.300000Z"}
    assert kernels.cell_seconds(nb) == [(0, 2.25, "a = 1")]
