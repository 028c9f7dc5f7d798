"""Figures as PNG, SVG and PDF (normlimits.audit.figure_files), and SVG inline in one HTML page."""

from __future__ import annotations

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from normlimits.audit.figure_files import FORMATS, inline_svg, render


def _figure(title: str):
    fig, ax = plt.subplots(figsize=(4, 3))
    x = np.arange(1, 20)
    ax.plot(x, 1 / x, "o-", label="one")
    ax.plot(x, np.sqrt(x), "s--", label="two")
    ax.set(xscale="log", title=title, xlabel="$N_s/N$")
    ax.legend()
    return fig


def test_render_writes_three_formats_reproducibly():
    first = render(_figure("same"))
    second = render(_figure("same"))
    assert tuple(first) == FORMATS
    assert first["png"][:8] == b"\x89PNG\r\n\x1a\n" and first["pdf"][:5] == b"%PDF-"
    assert b"<svg" in first["svg"][:600]
    for kind in FORMATS:
        assert first[kind] == second[kind], f"the same figure gives other {kind} bytes"
    assert b"CreationDate" not in first["pdf"]
    assert b"<dc:date>" not in first["svg"]
    assert b">same<" in first["svg"] or b"same</text>" in first["svg"], "SVG text stays text"
    assert render(_figure("other"))["svg"] != first["svg"]


def test_render_closes_the_figure_unless_asked_not_to():
    fig = _figure("x")
    render(fig, close=False)
    assert plt.fignum_exists(fig.number)
    render(fig)
    assert not plt.fignum_exists(fig.number)


def _ids_and_references(markup: str) -> tuple[list[str], set[str]]:
    ids = re.findall(r'\bid="([^"]+)"', markup)
    refs = set(re.findall(r'href="#([^"]+)"', markup)) | set(re.findall(r"url\(#([^)]+)\)", markup))
    return ids, refs


def test_inline_svgs_share_no_id_and_every_reference_resolves():
    a = inline_svg(render(_figure("a"))["svg"], "vanishing", "Vanishing <attention>")
    b = inline_svg(render(_figure("b"))["svg"], "jacobian")
    ids_a, refs_a = _ids_and_references(a)
    ids_b, refs_b = _ids_and_references(b)
    assert ids_a and ids_b and not set(ids_a) & set(ids_b)
    assert len(ids_a) == len(set(ids_a))
    assert refs_a and refs_a <= set(ids_a) and refs_b <= set(ids_b)
    assert all(i.startswith("vanishing-") for i in ids_a)
    assert a.startswith('<svg role="img" aria-label="Vanishing &lt;attention&gt;" data-figure="vanishing"')
    assert "<title>Vanishing &lt;attention&gt;</title>" in a and "<?xml" not in a and "DOCTYPE" not in a
    assert "<title>jacobian</title>" in b


def test_inline_svg_refuses_a_bad_name_or_something_else():
    svg = render(_figure("a"))["svg"]
    with pytest.raises(ValueError, match="figure name '1 bad'"):
        inline_svg(svg, "1 bad")
    with pytest.raises(ValueError, match="is not an SVG document"):
        inline_svg(b"<html></html>", "x")
