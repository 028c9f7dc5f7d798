"""The data behind a figure (:mod:`normlimits.core.figure_data`): what a matplotlib figure draws, as a
long table that round-trips exactly through CSV, and carried by every figure a kernel displays."""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402
import pytest  # noqa: E402

from normlimits.core import figure_data as F  # noqa: E402

RNG = np.random.default_rng(0)
X = np.array([1.0, 2.0, 4.0, 8.0])
Y = RNG.random(4) / 3                     # not short decimals: full precision must survive the CSV


def rows(table, **where):
    mask = np.ones(len(table), dtype=bool)
    for column, value in where.items():
        mask &= (table[column] == value).to_numpy()
    return table[mask]


def drawn_figure():
    """Two panels and a colour bar: lines, a reference line, a band, a scatter, bars, an image."""
    fig, (ax1, ax2) = plt.subplots(2, 1)
    ax1.plot(X, Y, label="median")
    ax1.plot(X, Y * 2)                                       # unlabelled: "line 1"
    ax1.axhline(0.25, ls="--", label="paper: 0.25")
    ax1.axvline(3.0)
    ax1.fill_between(X, Y / 2, Y * 2, label="10th to 90th percentile")
    points = RNG.random((5, 2))
    ax1.scatter(points[:, 0], points[:, 1], c=np.arange(5.0), label="heads")
    ax1.set_title("top")
    ax2.bar(["a", "b", "c"], [3.5, 1 / 7, 2.0], label="counts")
    image = RNG.random((2, 3))
    shown = ax2.inset_axes([0.6, 0.6, 0.3, 0.3]).imshow(image)
    fig.colorbar(shown, ax=ax2)
    ax2.set_ylabel("count")
    return fig, points, image


def test_every_artist_is_read_with_its_panel_series_and_kind():
    fig, points, image = drawn_figure()
    table = F.figure_table(fig)
    plt.close(fig)
    assert tuple(table.columns) == F.COLUMNS
    median = rows(table, panel=0, series="median")
    assert (median["kind"] == "line").all() and (median["title"] == "top").all()
    np.testing.assert_array_equal(median["x"], X)
    np.testing.assert_array_equal(median["y"], Y)
    np.testing.assert_array_equal(rows(table, series="line 1")["y"], Y * 2)
    hline = rows(table, series="paper: 0.25")
    assert list(hline["kind"]) == ["hline"] and hline["y"].iloc[0] == 0.25 and np.isnan(hline["x"].iloc[0])
    vline = rows(table, kind="vline")
    assert len(vline) == 1 and vline["x"].iloc[0] == 3.0 and np.isnan(vline["y"].iloc[0])
    band = rows(table, series="10th to 90th percentile")
    assert (band["kind"] == "area").all()
    assert set(Y / 2) <= set(band["y"]) and set(Y * 2) <= set(band["y"])
    scatter = rows(table, series="heads")
    np.testing.assert_array_equal(scatter[["x", "y"]].to_numpy(), points)
    np.testing.assert_array_equal(scatter["value"], np.arange(5.0))
    bars = rows(table, series="counts")
    assert list(bars["kind"]) == ["bar"] * 3 and list(bars["y"]) == [3.5, 1 / 7, 2.0]
    assert list(bars["item"]) == [0, 1, 2] and (bars["title"] == "count").all()
    pixels = rows(table, kind="image")
    assert len(pixels) == image.size and pixels["panel"].nunique() == 1
    np.testing.assert_array_equal(pixels["value"], image.ravel())
    np.testing.assert_array_equal(pixels["x"].to_numpy().reshape(image.shape)[0], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(pixels["y"].to_numpy().reshape(image.shape)[:, 0], [0.0, 1.0])
    panels = set(table["panel"])
    assert panels == {0, 1, 2} and len(fig.axes) == 3     # the inset is a panel, the colour bar not


def test_a_mesh_gives_its_cell_centres_and_values():
    fig, ax = plt.subplots()
    values = RNG.random((3, 2))
    ax.pcolormesh([0.0, 1.0, 3.0], [0.0, 2.0, 4.0, 8.0], values)
    table = F.figure_table(fig)
    plt.close(fig)
    assert (table["kind"] == "mesh").all()
    np.testing.assert_array_equal(table["value"], values.ravel())
    np.testing.assert_array_equal(table["x"].to_numpy().reshape(3, 2)[0], [0.5, 2.0])
    np.testing.assert_array_equal(table["y"].to_numpy().reshape(3, 2)[:, 0], [1.0, 3.0, 6.0])


def test_the_csv_round_trips_the_drawn_values_exactly():
    fig, _, _ = drawn_figure()
    table = F.figure_table(fig)
    back = pd.read_csv(io.StringIO(F.figure_csv(fig)))
    plt.close(fig)
    assert list(back.columns) == list(F.COLUMNS) and len(back) == len(table)
    for column in ("panel", "item", "y", "value"):
        np.testing.assert_array_equal(back[column].to_numpy(float), table[column].to_numpy(float))
    numeric = table["kind"] != "bar"                         # the bars' x are category names
    np.testing.assert_array_equal(back["x"][numeric].to_numpy(float), table["x"][numeric].to_numpy(float))


def test_an_empty_figure_gives_an_empty_table_with_the_columns():
    fig = plt.figure()
    table = F.figure_table(fig)
    plt.close(fig)
    assert len(table) == 0 and tuple(table.columns) == F.COLUMNS


def test_a_table_over_the_limit_goes_to_the_cache_not_the_notebook(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_CACHE", str(tmp_path))
    fig, ax = plt.subplots()
    ax.plot(X, Y)
    small = F.figure_payload(fig)
    assert small["rows"] == len(X) and small["csv"] == F.figure_csv(fig)
    large = F.figure_payload(fig, limit=10)
    plt.close(fig)
    assert "csv" not in large and large["rows"] == len(X)
    path = F.spilled_path(large["sha256"])
    assert path.parent.parent == tmp_path and path.read_text() == small["csv"]
    assert large["bytes"] == len(small["csv"].encode())


@pytest.fixture
def shell():
    from IPython.core.interactiveshell import InteractiveShell

    shell = InteractiveShell.instance()
    assert F.install(shell) and F.install(shell)             # twice: one formatter
    yield shell
    shell.display_formatter.formatters.pop(F.MIME, None)


def test_a_figure_displayed_or_glued_in_a_shell_carries_its_data(shell):
    from IPython.display import display
    from IPython.utils.capture import capture_output
    from myst_nb import glue

    fig, ax = plt.subplots()
    ax.plot(X, Y, label="median")
    with capture_output() as shown:
        display(fig)
        glue("a_figure", fig, display=False)
    plt.close(fig)
    displayed, glued = (output.data for output in shown.outputs)
    assert displayed[F.MIME] == {"csv": F.figure_csv(fig), "rows": len(X)}
    assert glued["application/papermill.record/" + F.MIME] == displayed[F.MIME]
    assert F.MIME not in shell.display_formatter.format(object())[0]


def test_a_spilled_table_is_read_back_from_the_cache_or_said_missing(tmp_path, monkeypatch):
    from normlimits.book.figure_data_files import output_figures
    from normlimits.book.sphinx_figure_data import data_line

    monkeypatch.setenv("NORMLIMITS_CACHE", str(tmp_path))
    fig, ax = plt.subplots()
    ax.plot(X, Y)
    png = io.BytesIO()
    fig.savefig(png, format="png")
    payload = F.figure_payload(fig, limit=10)
    plt.close(fig)
    import base64
    import hashlib

    output = {"data": {"application/papermill.record/image/png": base64.b64encode(png.getvalue()).decode(),
                       "application/papermill.record/" + F.MIME: payload}}
    digest = hashlib.sha256(png.getvalue()).hexdigest()
    found = output_figures([output])[digest]
    assert found.spilled and found.rows == len(X)
    assert found.csv == F.spilled_path(payload["sha256"]).read_bytes()
    F.spilled_path(payload["sha256"]).unlink()
    missing = output_figures([output])[digest]
    assert missing.csv is None
    line = data_line(None, "x.csv", missing, "vanishing")
    assert "not in this build" in line and "python -m normlimits chapter vanishing" in line


def test_a_figure_is_labelled_by_its_cell_or_by_the_glue_figure_that_pastes_it():
    import base64

    from normlimits.book.figure_data_files import glue_figure_labels, notebook_figures

    fig, ax = plt.subplots()
    ax.plot(X, Y)
    png = io.BytesIO()
    fig.savefig(png, format="png")
    payload = F.figure_payload(fig)
    plt.close(fig)
    image = base64.b64encode(png.getvalue()).decode()
    prefix = "application/papermill.record/"
    glued = {"output_type": "display_data", "metadata": {"scrapbook": {"name": "k", "mime_prefix": prefix}},
             "data": {prefix + "image/png": image, prefix + F.MIME: payload}}
    markdown = {"cell_type": "markdown", "metadata": {},
                "source": "Text.\n\n```{glue:figure} k\n:figwidth: 80%\n:name: pasted-k\n\nA caption.\n```\n"}
    notebook = {"cells": [markdown, {"cell_type": "code", "metadata": {}, "outputs": [glued]}]}
    assert glue_figure_labels(notebook) == {"k": "pasted-k"}
    (found,) = notebook_figures(notebook).values()
    assert found.label == "pasted-k" and found.csv == payload["csv"].encode()
    # myst-nb's own notebook: the glued output moved to <docname>.glue.json, its prefix removed
    apart = {"k": {**glued, "data": {"image/png": image, F.MIME: payload}}}
    notebook["cells"][1]["outputs"] = []
    assert [f.label for f in notebook_figures(notebook, apart).values()] == ["pasted-k"]
