"""The chapters' banner (model, size and kind, corpus, why; the rest collapsed) and the figure rule
(normlimits.core.plotting: at most 7.2 in wide, text at least 9 pt)."""

from __future__ import annotations

import re

import pytest

from normlimits.book import chapter as book


def test_banner_says_model_kind_corpus_and_why_and_collapses_the_plumbing(tiny_loaded, monkeypatch):
    from normlimits.model.corpus import load_corpus

    monkeypatch.delenv("NORMLIMITS_MODEL", raising=False)
    tiny_loaded.source = "project stand-in: byte-level GPT-2: 4 layers, trained here on the corpus in 9 s (cache ~/x/53f8)"
    tiny_loaded.notes.append("NORMLIMITS_MODEL is unset and GPT-2 is not available here (no local copy), "
                             "so this chapter runs on standin: the point is a model trained here.")
    corpus = load_corpus()
    shown = book.banner(tiny_loaded, corpus, 8)
    text = shown._repr_html_()
    summary = re.search(r"<summary class=\"admonition-title\">(.*?)</summary>", text).group(1)
    assert "tiny, 0.0M parameters: a small model trained here on the corpus (byte-level GPT-2: 4 layers)" in summary
    assert "Not the paper&#x27;s GPT-2 124M" in summary and "cache" not in summary
    assert text.startswith('<details class="admonition warning provenance-banner" open>')
    facts, provenance = text.split('<details class="provenance-details">')
    assert "Tolstoy, War and Peace" in facts and "8 windows per measurement" in facts
    assert "GPT-2 is not available here (no local copy), so this chapter runs on standin" in facts
    assert "sha256" not in facts and "~/x/53f8" not in facts and "NORMLIMITS_MODEL is unset" not in facts
    assert "sha256" in provenance and "~/x/53f8" in provenance and "Settings:" in provenance
    monkeypatch.setenv("NORMLIMITS_MODEL", "standin")
    assert book.why_this_model(tiny_loaded) == "Chosen by the setting NORMLIMITS_MODEL=standin."
    assert repr(shown).startswith("Model: tiny")


def test_model_kind_names_what_the_model_is(tiny_loaded):
    tiny_loaded.source = "GGUF file x.gguf (SmolLM2-135M-Instruct; llama, Q4_1 weights dequantised to float32); GGUF sha256 b179..."
    tiny_loaded.quantisation = "Q4_1"
    assert book.model_kind(tiny_loaded) == ("a real pretrained model, GGUF file x.gguf (SmolLM2-135M-Instruct; llama, "
                                            "Q4_1 weights dequantised to float32), its Q4_1 weights dequantised to float32")
    tiny_loaded.quantisation = None
    tiny_loaded.is_paper_model = True
    assert book.model_kind(tiny_loaded) == "the paper's model, pretrained by OpenAI"


def test_settings_line_shows_values_but_not_paths():
    line = book.settings_line({"NORMLIMITS_MODEL": "standin", "NORMLIMITS_CORPUS": "/home/me/wp.txt",
                               "NORMLIMITS_WINDOWS": "2", "HOME": "/home/me"})
    assert line == ("Settings: NORMLIMITS_CORPUS set, NORMLIMITS_MODEL=standin, NORMLIMITS_WINDOWS=2; "
                    "the rest at their defaults.")
    assert book.settings_line({}) == "Settings: every NORMLIMITS_* setting at its default."


def test_figure_rule_refuses_wide_figures_and_small_text():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from normlimits.core import plotting

    plotting.use_book_style()
    good, ax = plt.subplots()
    ax.plot([1, 2], [3, 4], label="line")
    ax.legend()
    ax.set(xlabel="L", title="fine")
    assert plotting.figure_problems(good) == []
    assert plotting.checked_png(good)[:4] == b"\x89PNG"
    wide, ax = plt.subplots(figsize=(15, 4))
    ax.text(0.5, 0.5, "tiny", fontsize=5)
    problems = plotting.figure_problems(wide)
    assert len(problems) == 2 and "15.00 in wide" in problems[0] and "text of 5 pt" in problems[1]
    with pytest.raises(ValueError, match="not readable"):
        plotting.checked_png(wide)
    plt.close("all")


def test_the_median_band_is_the_median_line_and_the_10th_to_90th_percentile_band():
    """One summary of many curves everywhere (Figure 2, Figure 3's audit figure, the vanishing and
    separability chapters): leading axes pooled, the band in the line's colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    from normlimits.core.plotting import median_band

    x = np.array([1.0, 2.0, 4.0])
    values = np.arange(2 * 5 * 3, dtype=float).reshape(2, 5, 3) ** 1.5      # [windows, heads, x]
    fig, ax = plt.subplots()
    line = median_band(ax, x, values, label="median", band_label="band", color="tab:red")
    pooled = values.reshape(-1, 3)
    assert np.allclose(line.get_ydata(), np.median(pooled, 0)) and line.get_label() == "median"
    (band,) = ax.collections
    ys = band.get_paths()[0].vertices[:, 1]
    for column in range(3):
        assert np.isclose(ys, np.percentile(pooled[:, column], 10)).any()
        assert np.isclose(ys, np.percentile(pooled[:, column], 90)).any()
    assert band.get_label() == "band"
    assert np.allclose(band.get_facecolor()[0][:3], matplotlib.colors.to_rgb("tab:red"))
    plt.close(fig)


def test_a_paper_mark_is_a_labelled_dashed_line_at_the_value():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import pytest
    from matplotlib.colors import to_rgba

    from normlimits.core.plotting import PAPER_STYLE, paper_mark
    from normlimits.core.protocol import SEPARABILITY_KNEE

    fig, ax = plt.subplots()
    line = paper_mark(ax, x=SEPARABILITY_KNEE, label="knee")
    assert set(line.get_xdata()) == {SEPARABILITY_KNEE} and line.get_label() == "paper: knee"
    assert line.get_linestyle() == "--" and to_rgba(line.get_color()) == to_rgba(PAPER_STYLE["color"])
    assert set(paper_mark(ax, y=0.8, label="level").get_ydata()) == {0.8}
    with pytest.raises(ValueError):
        paper_mark(ax, x=1, y=1, label="both")
    plt.close(fig)
