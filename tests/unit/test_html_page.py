"""The self-contained HTML pieces (normlimits.audit.html_page)."""

from __future__ import annotations

from normlimits.audit import html_page as H


def test_number_and_value_text_with_and_without_an_interval():
    assert H.number(None) == "n/a" and H.number(0.123456) == "0.1235" and H.number(1e-7) == "1e-07"
    assert H.value_text({"value": 0.25}) == "0.25"
    assert H.value_text({"value": None}) == "n/a"
    assert H.value_text({"value": 0.25, "interval": [0.2, 0.31]}) == "0.25 [0.2, 0.31]"
    assert H.value_text({"value": 0.25, "interval": [0.2, 0.31], "n": 8, "unit": "window"}) == \
        "0.25 [0.2, 0.31] (n = 8, resampled by window)"
    assert H.value_text({"value": 1.0, "n": 3}) == "1 (n = 3)"
    assert H.value_text({"value": 0.25, "interval": [0.2, 0.31], "n": 3, "unit": "window"}) == \
        "0.25 [0.2, 0.31] (range: n = 3, resampled by window)"


def test_table_escapes_its_header_and_keeps_cell_html():
    html = H.table(["a<b", "c"], [["<b>x</b>", "1"]], row_attrs=['data-x="1"'], cls="t")
    assert html.startswith('<table class="t"><thead><tr><th>a&lt;b</th><th>c</th></tr>')
    assert '<tr data-x="1"><td><b>x</b></td><td>1</td></tr>' in html


def test_page_is_one_document_with_inline_styles_and_nothing_fetched():
    doc = H.page("A <title>", "<p>body</p>")
    assert doc.startswith("<!DOCTYPE html>") and "<title>A &lt;title&gt;</title>" in doc
    assert "<style>" in doc and "<link" not in doc and "<script" not in doc and "http" not in doc
    assert H.definition_list([("k<", "<i>v</i>")], cls="p") == '<dl class="p"><dt>k&lt;</dt><dd><i>v</i></dd></dl>'
    assert H.esc(None) == "" and H.esc('"&') == "&quot;&amp;"
