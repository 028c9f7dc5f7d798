"""``normlimits chapter NAME`` (:mod:`normlimits.book.chapter_command`): the argument handling and what
it keeps, without executing a real chapter."""

from __future__ import annotations

import base64
import io
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402

from normlimits import __main__ as cli  # noqa: E402
from normlimits.book import chapter_command as C  # noqa: E402
from normlimits.book import replicas  # noqa: E402
from normlimits.core import figure_data as F  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]


def refuse_execution(*args, **kwargs):
    raise AssertionError("no chapter may be executed here")


def test_an_unknown_chapter_is_refused_naming_the_chapters(monkeypatch, capsys):
    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(replicas, "execute_chapter", refuse_execution)
    assert cli.main(["chapter", "vanishng"]) == 2
    err = capsys.readouterr().err
    assert "unknown chapter 'vanishng'" in err
    names = C.chapter_names(ROOT)
    assert "vanishing" in names and "bibliography" not in names      # a page without code is no chapter
    assert all(name in err for name in names)


def test_outside_the_book_it_says_so(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    assert C.main(["vanishing"]) == 2
    assert "no book here" in capsys.readouterr().err


def figure_output(scale: float = 1.0):
    """A display output of a drawn figure, its PNG and its data, as a kernel makes it."""
    fig, ax = plt.subplots()
    ax.plot([1.0, 2.0], [scale / 3, scale * 2 / 3])
    png = io.BytesIO()
    fig.savefig(png, format="png")
    payload = F.figure_payload(fig)
    plt.close(fig)
    return nbformat.v4.new_output("display_data", data={
        "image/png": base64.b64encode(png.getvalue()).decode(), F.MIME: payload}), payload["csv"]


def test_a_chapter_is_executed_with_the_current_settings_and_its_figures_data_kept(tmp_path, monkeypatch, capsys):
    output, csv = figure_output()
    second, second_csv = figure_output(3.0)
    calls = []

    def execute(source, env, *, save_to=None, **kwargs):
        calls.append((source, dict(env)))
        named = nbformat.v4.new_code_cell("plot()", outputs=[output],
                                          metadata={"mystnb": {"figure": {"name": "a-line"}}})
        unnamed = nbformat.v4.new_code_cell("plot()", outputs=[second])
        notebook = nbformat.v4.new_notebook(cells=[named, unnamed])
        nbformat.write(notebook, str(save_to))
        return 1.5

    monkeypatch.chdir(ROOT)
    monkeypatch.setattr(replicas, "execute_chapter", execute)
    assert C.main(["vanishing", "--output", str(tmp_path)]) == 0
    assert calls == [(ROOT / "book" / "vanishing.md", {})]             # the environment as it is
    out = capsys.readouterr().out
    assert f"Notebook: {tmp_path / 'vanishing.ipynb'}" in out and "Settings:" in out
    # named as on the site: by the figure's label, else by its place among the chapter's figures
    assert (tmp_path / "a-line.csv").read_text() == csv
    assert (tmp_path / "vanishing-figure-2.csv").read_text() == second_csv
    assert "a-line.csv, vanishing-figure-2.csv" in out
