"""Markup that cannot break (normlimits.core.markup) and a rule's outcomes in words (claims.rules)."""

from __future__ import annotations

import math
import re

import pytest

from normlimits.claims import describe_outcomes
from normlimits.claims.rules import describe_condition
from normlimits.core.markup import (RANGE_BELOW, count_words, html_table, inline_html, significant, units_of,
                                   with_interval)


@pytest.mark.parametrize("value, text", [
    (0.000314, "0.000314"), (3.14e-5, "3.14e-05"), (0.5, "0.500"), (12.345, "12.3"),
    (-0.0213, "-0.0213"), (123456.7, "123,457"), (1024, "1024"), (123456, "123,456"), (0, "0"),
    (0.0, "0"), (None, "n/a"), (math.nan, "n/a"), (math.inf, "∞"), (0.99996, "1.00"),
])
def test_significant_keeps_the_digits_of_small_numbers(value, text):
    assert significant(value) == text


def test_significant_never_prints_a_nonzero_value_as_zero():
    for exponent in range(-12, 8):
        for mantissa in (1.0, 3.14159, 9.99):
            value = mantissa * 10.0 ** exponent
            shown = float(significant(value).replace(",", ""))
            assert shown != 0 and abs(shown - value) <= 0.01 * value, (value, significant(value))
    with pytest.raises(ValueError):
        significant(1.0, digits=0)
    with pytest.raises(TypeError):
        significant(True)


def test_with_interval():
    assert with_interval(0.5, (0.41, 0.62)) == "0.500 [0.410, 0.620]"
    assert with_interval(0.5) == "0.500"


def test_with_interval_says_how_many_windows_it_rests_on_and_calls_few_a_range():
    assert with_interval(0.8333, (1 / 3, 1.0), n=8) == "0.833 [0.333, 1.00] (8 windows)"
    assert with_interval(0.8333, (1 / 3, 1.0), n=RANGE_BELOW) == "0.833 [0.333, 1.00] (5 windows)"
    assert with_interval(0.8333, (1 / 3, 1.0), n=RANGE_BELOW - 1) == \
        "0.833 [0.333, 1.00] (range over 4 windows)"
    assert with_interval(0.5, (0.4, 0.6), n=3, unit="seed") == "0.500 [0.400, 0.600] (range over 3 seeds)"
    assert with_interval(0.5, None, n=8) == "0.500"                 # no interval, no count
    assert count_words(1, "draw") == "range over 1 draw" and count_words(2000, "draw") == "2000 draws"
    for bad in (0, 2.5, True):
        with pytest.raises(ValueError, match="whole number"):
            count_words(bad)


def test_units_of_reads_a_rows_resampling_block():
    row = {"resampling": {"method": "m", "unit": "seed", "n": 3, "resamples": 10, "level": 0.95, "seed": 1}}
    assert units_of(row) == {"n": 3, "unit": "seed"}
    assert units_of({}) == {} and units_of({"resampling": None}) == {}
    assert with_interval(1.0, (0.5, 2.0), **units_of(row)) == "1.00 [0.500, 2.00] (range over 3 seeds)"


def test_inline_html_keeps_math_intact_and_escapes_the_rest():
    text = r"median gap $|\tilde d - \mathbb E\tilde d|/\tilde d$ at *N* = 100, `key_a`, **bold**, a_b <c> \$5"
    out = inline_html(text)
    assert r'<span class="math notranslate nohighlight">\(|\tilde d - \mathbb E\tilde d|/\tilde d\)</span>' in out
    assert "<em>N</em>" in out and "<code" in out and "key_a</code>" in out and "<strong>bold</strong>" in out
    assert "a_b" in out and "&lt;c&gt;" in out and "$5" in out
    # emphasis markers inside math are left to MathJax
    assert r"\(N^*_\tau / N_{\mathrm{crit}}\)" in inline_html(r"$N^*_\tau / N_{\mathrm{crit}}$")
    assert "<" not in inline_html("$a < b$").split("\\(")[1].split("\\)")[0]


def test_html_table_has_one_cell_per_column_whatever_the_cells_hold():
    rows = [[inline_html(r"$|x|$"), "1 | 2"], [inline_html("*a*_b_"), "x"]]
    table = html_table(["statistic", "value"], rows, classes=("criterion-table",),
                       column_classes=["", "num"])
    assert 'data-columns="2"' in table and 'class="docutils criterion-table"' in table
    assert table.count("<tr>") == 3 and table.count("<td") == 4 and '<th class="num">' in table
    assert table.count('data-label="statistic"') == 2
    with pytest.raises(ValueError, match="row 0 has 1 cells"):
        html_table(["a", "b"], [["only one"]])
    with pytest.raises(ValueError, match="column classes"):
        html_table(["a", "b"], [["1", "2"]], column_classes=["x"])


@pytest.mark.parametrize("condition, words", [
    ("all", "every criterion passes"), ("any", "at least one criterion passes"),
    ("all:gain", "`gain` passes"), ("all:fraction,spread", "`fraction` and `spread` pass"),
    ("any:a,b,c", "`a`, `b` or `c` passes"), ("none:a", "`a` fails"),
    ("none:a,b", "`a` and `b` both fail"), ("else", "otherwise"),
])
def test_conditions_in_words(condition, words):
    assert describe_condition(condition) == words


def test_outcomes_in_words_never_show_the_internal_strings():
    text = describe_outcomes([("all:fraction,spread", "confirmed"), ("all:paper_model", "refuted"),
                              ("else", "not reproduced")])
    assert text == ("confirmed when `fraction` and `spread` pass; refuted when `paper_model` passes; "
                    "otherwise not reproduced")
    assert not re.search(r"\b(all|any|none):", text)
    with pytest.raises(ValueError):
        describe_condition("most:a")


def test_plain_text_reads_commands_followed_by_a_space():
    from normlimits.claims import plain_text

    assert plain_text(r"$\tilde d - \mathbb E\tilde d$") == "d̃ - 𝔼d̃"
    assert plain_text(r"$\bar \alpha_N$") == "ᾱ_N"


def test_the_verdicts_page_names_the_range_threshold_the_code_uses():
    from pathlib import Path

    page = (Path(__file__).resolve().parents[2] / "book" / "verdicts.md").read_text()
    words = {4: "four", 5: "five", 6: "six", 8: "eight", 10: "ten"}
    assert f"Below {words[RANGE_BELOW]} units it is labelled a range" in page
    assert '"range over 3 windows"' in page and count_words(3) == "range over 3 windows"
