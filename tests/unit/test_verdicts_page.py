"""The bottom line and the Verdicts page, from ledger rows (normlimits.book.sphinx_ledger), and what the
site offers around them: alt texts from captions (sphinx_figures), the downloaded notebook's
install note and the package archive (sphinx_downloads)."""

from __future__ import annotations

import re
import tarfile
from pathlib import Path

from docutils import nodes

from normlimits import claims
from normlimits.book import sphinx_ledger as S

STANDIN = "standin (2.0M params)"
REAL = "smollm2-135m (134.5M params)"


def graded(cid, values, model, chapter=None, variant=None, **extra):
    """A real ledger row: graded by the claim's registered rule."""
    item = claims.claim(cid)
    row = claims.make_row(cid, values, "measured", chapter=chapter or item.chapter, model=model,
                          variant=variant, reason=extra.pop("reason", None),
                          sensitivity=extra.pop("sensitivity", None))
    row.update(extra)
    return row


C1_LITERAL = {"literal_outside": 0.0, "literal_example": 2, "maxkey_outside": 0.0}
SURVEY = "the architectures survey's protocol"


def ledger_rows():
    """Paper claims on the real model with stand-in replays, a premise and its conclusion, the
    book's own result, a cited claim, an alternatives row in the paper's words, a sensitivity row
    of the architectures survey on the real model and the architectures comparison."""
    return [
        graded("C1", C1_LITERAL, REAL),                                                   # corrected
        graded("C1", {**C1_LITERAL, "literal_outside": 0.02}, STANDIN, variant="standin"),
        graded("NU", {"exponent": -0.4, "entropy": 0.5, "regime": 0.9}, REAL),            # refuted (in scope)
        graded("NU", {"exponent": -0.41, "entropy": 0.5, "regime": 0.9}, STANDIN, variant="standin"),
        graded("LIM", {"closeness": 0.0003, "paper_model": 0}, REAL),                     # not reproduced
        graded("ALT-ssmax-vanishing", {"exponent": 0.0, "gain": 0.5}, REAL),
        graded("C1", C1_LITERAL, REAL, chapter="architectures", variant="smollm2-135m", sensitivity=SURVEY),
        graded("ARCH", {"agreement": 1.0, "majority": 1.0},
               "standin-rope (1.8M params) against standin (2.0M params)", chapter="architectures"),
        graded("MHP", {"rate_ratio": 0.3, "dependence": 0.2}, REAL),                       # refuted
        graded("MH", {"gap": 0.1, "bernoulli": 0.0, "jensen": 0.0, "arithmetic": 0.992}, REAL),
        graded("C1S", {"outside": 0.0}, REAL),
        graded("ALT-gamma", {"below": 0.01, "above": 0.99, "falls": -0.5, "rises": -0.5}, REAL),
    ]


PARTS = ["paper", "control", "paper", "control", "paper", "paper", "sensitivity", "book",
         "premise", "paper", "book", "cited"]


def test_rows_are_sorted_into_the_papers_claims_and_the_rest():
    rows = ledger_rows()
    assert [S.part_of(r) for r in rows] == PARTS
    assert [r["id"] for r in S.paper_rows(rows)] == ["C1", "NU", "LIM", "ALT-ssmax-vanishing", "MH"]
    assert S.about_gpt2(rows[4]) and not S.about_gpt2(rows[0])
    assert S.about_gpt2(graded("F3", {c.key: 0.8 for c in claims.claim("F3").rule.criteria}, REAL))
    # from the registry, not the wording: S80 (Sec. 3.2) and C3 (Fig. 4) are universal
    for cid in ("S80", "C3"):
        assert not S.about_gpt2({"id": cid})
    assert S.model_setting("gpt2 (default) (124.4M params)") == "gpt2"
    assert S.on_paper_model({"model": "gpt2 (default) (124.4M params)"})
    assert not S.on_paper_model({"model": "gpt2-random (124.4M params)"})
    assert S.short_model(REAL) == "smollm2-135m"


def test_the_count_excludes_premises_the_books_cited_and_sensitivity_rows():
    rows = ledger_rows()
    text = S.bottom_line(rows)
    assert text.startswith("**Bottom line.** This build graded 5 claims of the paper on SmolLM2-135M")
    for cid in ("MHP", "C1S", "ALT-gamma", "ARCH"):
        assert claims.claim(cid).claim not in text       # never listed as a counted claim
    assert "the premise MHP, the premise of MH (refuted on SmolLM2-135M: premise fails)" in text
    assert "the book's own results and questions (ARCH and C1S)" in text
    assert "other papers' claims (ALT-gamma)" in text and "1 sensitivity row" in text
    # a sensitivity row on the chapter's own model is no replay: only the stand-in's rows are
    replays = [r for r in rows if S.part_of(r) == "control"]
    assert {S.short_model(r["model"]) for r in replays} == {S.short_model(STANDIN)}
    own = {r["id"]: r["verdict"] for r in S.paper_rows(rows)}
    kept = sum(r["verdict"] == own[r["id"]] for r in replays)
    assert f"on the stand-in ({kept} of the {len(replays)} replayed there by the same rules keep their verdict)" in text
    assert "replayed there" not in text.split("on the stand-in")[0]     # none on SmolLM2-135M
    bar = S.bottom_line_html(rows)
    assert 'data-part="paper" data-total="5"' in bar
    apart = S.book_counts_html(rows)
    for part, n in (("premise", 1), ("book", 2), ("cited", 1), ("sensitivity", 1), ("control", 2)):
        assert f'data-part="{part}" data-total="{n}"' in apart


def sentences(text: str) -> int:
    """How many sentences ``text`` holds: full stops followed by a space or the end (the heading
    "**Bottom line.**" is followed by ``**``, and a decimal point by a digit)."""
    return len(re.findall(r"\.(?:\s|$)", text))


def holds_on(rows: list[dict], model: str) -> tuple[int, int]:
    """(how many hold, how many shown) among the paper's claims on ``model``: their own rows
    there and their replays there (a sensitivity, premise, book's or cited row is not one)."""
    shown = [r for r in rows if r["model"] == model and S.part_of(r) in ("paper", "control")]
    return sum(r["verdict"] in ("confirmed", "corrected") for r in shown), len(shown)


def test_bottom_line_counts_per_verdict_and_per_model_in_five_sentences():
    rows = ledger_rows()
    text = S.bottom_line(rows)
    paper = S.paper_rows(rows)
    assert "not the paper's GPT-2 124M" in text and sentences(text) <= 5
    for verdict in {r["verdict"] for r in paper}:
        count = sum(r["verdict"] == verdict for r in paper)
        one, many = S.VERDICT_WORDS[verdict]
        assert f"**{count} {one if count == 1 else many}**" in text
    for r in paper:                       # the scoreboard lists the claims, not the bottom line
        assert f"({r['id']})" not in text and r["claim"] not in text
    held, shown = holds_on(rows, REAL)
    assert f"Model by model, {held} of {shown} hold as stated or once corrected on SmolLM2-135M" in text
    held, shown = holds_on(rows, STANDIN)
    assert f" {held} of {shown} on the stand-in" in text
    assert "LIM names GPT-2's own measurements" in text and "never refuted" in text
    assert S.bottom_line([]) == "No claim of the paper was graded in this build."


def test_bottom_line_changes_with_the_ledger():
    rows = ledger_rows()
    before = S.bottom_line(rows)
    # C1 can no longer be refuted (its max-key form is proven); L2 can, and be corrected elsewhere
    rows[0] = graded("L2", {"bound_holds": 1.0, "softmax_growth": 0.5, "linear_growth": 0.5}, REAL)
    rows[1] = graded("L2", {"bound_holds": 1.0, "softmax_growth": 0.5, "linear_growth": 2.0}, STANDIN,
                     variant="standin")
    assert [rows[0]["verdict"], rows[1]["verdict"]] == ["refuted", "corrected"]
    text = S.bottom_line(rows)
    refuted = sum(r["verdict"] == "refuted" for r in S.paper_rows(rows))
    assert refuted == sum(r["verdict"] == "refuted" for r in S.paper_rows(ledger_rows())) + 1
    assert f"**{S.verdict_words('refuted', refuted - 1)}**" in before
    assert f"**{S.verdict_words('refuted', refuted)}**" in text and f"**{refuted} are refuted**" in text
    replays = [r for r in rows if S.part_of(r) == "control"]
    own = {r["id"]: r["verdict"] for r in S.paper_rows(rows)}
    kept = sum(r["verdict"] == own[r["id"]] for r in replays)
    assert kept == len(replays) - 1          # L2 is corrected on the stand-in, refuted on its own row
    assert f"({kept} of the {len(replays)} replayed there by the same rules keep their verdict)" in text
    held, shown = holds_on(rows, REAL)
    assert f"{held} of {shown} hold as stated or once corrected on SmolLM2-135M" in text
    assert text != before


def test_counts_and_tables_carry_what_the_tests_of_the_site_read():
    rows = ledger_rows()
    paper = S.paper_rows(rows)
    bar = S.counts_html(paper, "5 claims of the paper", "paper")
    assert 'data-part="paper" data-total="5"' in bar
    for verdict in claims.VERDICTS:
        want = sum(r["verdict"] == verdict for r in paper)
        assert f'data-verdict="{verdict}"><span class="verdict-count-number">{want}</span>' in bar
    vanishing = [r for r in rows if r["chapter"] == "vanishing"]
    table = S.chapter_table_html(vanishing, "vanishing.html")
    assert 'data-columns="5"' in table and "with-paper" in table             # id, claim, paper, 2 models
    assert table.count('class="verdict-cell"') == 5 and table.count("<tr>") == 4
    assert 'href="vanishing.html#verdict"' in table and '<span class="claim-mark">(the book&#x27;s)</span>' in table
    assert "smollm2-135m (134.5M params)" in table and "standin (2.0M params)" in table
    gradients = S.chapter_table_html([rows[4]], None)
    assert "about GPT-2; measured here on smollm2-135m" in gradients
    arch = S.chapter_table_html([r for r in rows if r["chapter"] == "architectures"], None)
    assert "models compared" in arch and "sensitivity row" in arch and 'data-part="sensitivity"' in arch
    assert '<span class="claim-variant"> · survey</span><span class="claim-mark">(sensitivity)</span>' in arch
    counts = S.chapter_counts_html([r for r in rows if r["chapter"] == "architectures"])
    assert counts.startswith("<p class=\"verdict-chapter-counts\">1 rows: 1 confirmed; and 1 sensitivity row")


def test_the_id_cell_names_the_variant_that_tells_a_line_apart():
    """Rows of one claim on one model that differ by text or protocol are told apart in the id
    cell ("F3 · Moby-Dick"), not only inside the collapsed details: the text a row was measured
    on, else its variant without the model the column names; a survey row on the book's own text
    is "survey"; a replay whose variant is just its model, and a comparison, show the bare id."""
    survey = graded("F3", {c.key: 0.8 for c in claims.claim("F3").rule.criteria}, REAL,
                    chapter="architectures", variant="smollm2-135m", sensitivity=SURVEY + " (1 window)")
    other = dict(graded("F3", {c.key: 0.8 for c in claims.claim("F3").rule.criteria}, REAL,
                        chapter="architectures", variant="smollm2-135m on Moby-Dick",
                        sensitivity=SURVEY + " (1 window of Moby-Dick)"), corpus="Moby-Dick")
    heads = graded("MH", {"gap": 0.1, "bernoulli": 0.0, "jensen": 0.0, "arithmetic": 0.992}, REAL,
                   variant="all heads", sensitivity="all 9 heads of a layer")
    replay = graded("C1", C1_LITERAL, STANDIN, variant="standin")
    assert [S.variant_label(r) for r in (survey, other, heads, replay)] == ["survey", "Moby-Dick", "all heads", ""]
    assert S.line_label(other) == "F3 · Moby-Dick (sensitivity)"
    assert S.line_label(replay) == "C1"
    cell = S.line_label_html(other, "architectures.html")
    assert cell == ('<a class="claim-id" href="architectures.html#verdict">F3</a>'
                    '<span class="claim-variant"> · Moby-Dick</span><span class="claim-mark">(sensitivity)</span>')
    table = S.chapter_table_html([survey, other], None)
    assert table.startswith('<div class="ledger-box"><table ') and table.count('class="claim-variant"') == 2
    assert " · survey" in table and " · Moby-Dick" in table


def test_a_conclusion_whose_premise_is_refuted_says_premise_fails():
    rows = [r for r in ledger_rows() if r["chapter"] == "separability"]
    table = S.chapter_table_html(rows, None)
    assert '<span class="claim-mark">(premise)</span>' in table
    assert "premise fails: MHP is refuted on this model" in table
    holds = [graded("MHP", {"rate_ratio": 0.9, "dependence": 0.0}, REAL), rows[1]]
    assert "verdict-premise-note" not in S.chapter_table_html(holds, None)


def test_the_legend_defines_every_verdict_and_comes_before_the_tables():
    legend = S.legend_html()
    for verdict in claims.VERDICTS:
        assert f'<dt data-verdict="{verdict}">' in legend
    assert "outside the claim" in legend and "partial hold" in legend
    source = (Path(__file__).parents[2] / "book" / "verdicts.md").read_text()
    assert source.index("{verdict-legend}") < source.index("{claims-ledger}")
    assert source.count("{verdict-legend}") == 1
    # the scoreboard first under the title, the legend directly below it, then the bottom line
    directives = re.findall(r"^```\{([a-z-]+)\}", source, re.M)
    assert directives[:3] == ["claims-scoreboard", "verdict-legend", "claims-bottom-line"]
    assert source.split("```{claims-scoreboard}")[0].strip() == "# Verdicts"
    landing = (Path(__file__).parents[2] / "book" / "intro.md").read_text()
    assert landing.index("{claims-scoreboard}") < landing.index("{claims-bottom-line}")


def test_a_second_row_of_one_claim_on_one_model_opens_a_new_line():
    one = graded("C1", C1_LITERAL, REAL)
    two = graded("C1", {**C1_LITERAL, "literal_outside": 0.1}, REAL, variant="other reading")
    columns, lines = S.table_lines([one, two])
    assert columns == ["smollm2-135m"] and len(lines) == 2


def test_interval_and_inconclusive_are_shown():
    """Issue 31's rows: an interval [low, high] beside the number, and the verdict
    "inconclusive" (a registered verdict since schema 2.0) with its own badge and count."""
    row = graded("NU", {"exponent": -0.85, "entropy": 0.5, "regime": 0.1}, REAL)
    row.update(interval=[-0.95, -0.7], verdict="inconclusive",
               resampling={"method": "percentile bootstrap, widened to the estimate", "unit": "window", "n": 8,
                           "resamples": 2000, "level": 0.95, "seed": 31})
    assert S.number_text(row) == "-0.850 [-0.950, -0.700] (8 windows)"
    few = dict(row, resampling=dict(row["resampling"], n=3))
    assert S.number_text(few) == "-0.850 [-0.950, -0.700] (range over 3 windows)"
    assert S.verdict_order([row]) == list(claims.VERDICTS) and "inconclusive" in claims.VERDICTS
    cell = S.chapter_table_html([row], None)
    assert "verdict-badge verdict-inconclusive" in cell and "-0.850 [-0.950, -0.700] (8 windows)" in cell
    bar = S.counts_html([row], "1 claim", "paper")
    assert 'data-verdict="inconclusive"><span class="verdict-count-number">1</span>' in bar
    assert "inconclusive (its interval straddles" in S.bottom_line([row])
    assert S.css_verdict("not reproduced") == "verdict-not-reproduced"


def test_the_stylesheet_styles_every_verdict_badge():
    css = (S.Path(__file__).resolve().parents[2] / "book" / "_static" / "ledger.css").read_text()
    for verdict in claims.VERDICTS:
        assert f".verdict-badge.{S.css_verdict(verdict)}" in css, verdict


def test_graded_display_is_an_html_table_with_the_rule_in_words(tmp_path, monkeypatch):
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(tmp_path))
    row = graded("F2b", {c.key: 0.5 for c in claims.claim("F2b").rule.criteria}, REAL)
    text = claims.Graded(row)._repr_html_()
    width = len(re.findall(r"<th[ >]", text))
    assert width == 5 and 'data-columns="5"' in text
    for tr in re.findall(r"<tr>(.*?)</tr>", text)[1:]:
        assert tr.count("<td") == width
    assert not re.search(r"\b(all|any|none):[A-Za-z_]", text)
    assert "\\(" in text and "np.float64" not in text


def test_alt_text_comes_from_the_caption():
    from normlimits.book.sphinx_figures import (
        caption_text, describe_figures, first_sentence, is_pathlike)

    assert is_pathlike("") and is_pathlike("_images/abc123.png") and is_pathlike("0123456789abcdef0123")
    assert not is_pathlike("Largest weight against 1/L and N")
    assert first_sentence("True distance at N = 5 (the paper's Fig. 2a). Top: more.") == \
        "True distance at N = 5 (the paper's Fig. 2a)."
    caption = nodes.caption("", "", nodes.Text("Distance "), nodes.math("", r"\tilde d"), nodes.Text(" against L. More."))
    assert caption_text(caption) == "Distance d̃ against L. More."
    figure = nodes.figure("", nodes.image(uri="_images/x.png", alt="_images/x.png"), caption)
    kept = nodes.figure("", nodes.image(uri="y.png", alt="A chosen description"), caption.deepcopy())
    doc = nodes.document(None, None)
    doc += [figure, kept]
    assert describe_figures(None, doc, "page") == 1
    assert figure.children[0]["alt"] == "Distance d̃ against L."
    assert kept.children[0]["alt"] == "A chosen description"


def test_every_image_links_to_its_full_size_file_and_an_existing_link_is_kept():
    from normlimits.book.sphinx_figures import ENLARGE_CLASS, image_file_href, link_images

    files = {"_build/jupyter_execute/abc.png": ({"page"}, "abc.png"), "pic.png": ({"page"}, "pic1.png")}
    href = image_file_href(files, "../_images")
    in_figure = nodes.image(uri="_build/jupyter_execute/abc.png")
    figure = nodes.figure("", in_figure, nodes.caption("", "A line."))
    by_candidate = nodes.image(uri="pic.*", candidates={"image/png": "pic.png"})
    linked = nodes.image(uri="pic.png")
    existing = nodes.reference("", "", linked, refuri="https://example.org")
    unknown = nodes.image(uri="nowhere.png")
    doc = nodes.document(None, None)
    doc += [figure, nodes.paragraph("", "", by_candidate), nodes.paragraph("", "", existing),
            nodes.paragraph("", "", unknown)]
    assert link_images(doc, href) == 2
    assert isinstance(in_figure.parent, nodes.reference) and in_figure.parent.parent is figure
    assert in_figure.parent["refuri"] == "../_images/abc.png" and ENLARGE_CLASS in in_figure.parent["classes"]
    assert by_candidate.parent["refuri"] == "../_images/pic1.png"
    assert linked.parent is existing and existing["refuri"] == "https://example.org"
    assert isinstance(unknown.parent, nodes.paragraph)          # not copied by Sphinx: no link to nowhere
    assert link_images(doc, href) == 0                          # idempotent: no link inside a link


def test_a_downloaded_notebook_starts_by_saying_how_to_install_the_package(tmp_path):
    from normlimits.book.sphinx_downloads import (
        ARCHIVE, INSTALL_TAG, install_note, with_install_note, write_archive)

    note = install_note("https://github.com/owner/repo", "main")
    assert 'pip install "normlimits @ git+https://github.com/owner/repo@main"' in note
    assert f"pip install {ARCHIVE}" in note and "make install" in note
    assert "git+" not in install_note()
    notebook = {"cells": [{"cell_type": "code", "metadata": {}, "source": "import normlimits"}]}
    with_install_note(with_install_note(notebook, note), note)
    assert [c["cell_type"] for c in notebook["cells"]] == ["markdown", "code"]
    assert notebook["cells"][0]["metadata"]["tags"] == [INSTALL_TAG]
    root = S.Path(__file__).resolve().parents[2]
    archive = write_archive(root, tmp_path / ARCHIVE)
    with tarfile.open(archive) as tar:
        names = tar.getnames()
    assert "normlimits/pyproject.toml" in names and "normlimits/src/normlimits/core/markup.py" in names
    assert not any("__pycache__" in n for n in names)


def test_a_model_the_chapter_describes_itself_is_named_whole_in_the_bottom_line():
    """A row whose model is no model setting (the temperature runs: a byte-level GPT-2 trained
    per temperature) is named by its whole label, not by its first word ("byte-level")."""
    runs = "byte-level GPT-2, 2 layers x 4 heads x 128 (0.45M params), 3 seeds per T"
    rows = ledger_rows() + [graded("TR", {c.key: 0.5 for c in claims.claim("TR").rule.criteria}, runs)]
    text = S.bottom_line(rows)
    assert "byte-level GPT-2, 2 layers x 4 heads x 128, 3 seeds per T (1 of them)" in text
    assert "SmolLM2-135M, a real pretrained model of GPT-2's size (not the paper's GPT-2 124M) (5 of them)" in text
    assert S.model_words(STANDIN).startswith("the stand-in") and S.model_words(runs).startswith("byte-level GPT-2,")


# --- the scoreboard (issue 48) -------------------------------------------------------------------

def scoreboard_tree(rows, chapter_uri=lambda chapter: f"{chapter}.html"):
    """The scoreboard's HTML parsed as XML (so well-formed), and the HTML."""
    import xml.etree.ElementTree as ET

    text = S.scoreboard_html(rows, chapter_uri, lambda chapter: f"Chapter {chapter}")
    return ET.fromstring(f"<root>{text}</root>"), text


def text_of(element) -> str:
    """An element's text, its whitespace collapsed."""
    return " ".join("".join(element.itertext()).split())


def test_the_scoreboard_has_one_line_per_paper_claim_and_one_column_per_model():
    rows = ledger_rows()
    tree, text = scoreboard_tree(rows)
    table = tree.find("./div[@class='scoreboard-box']/table")
    assert "claims-scoreboard" in table.get("class") and "claims-ledger" not in text
    paper = S.paper_rows(rows)
    lines = table.findall("./tbody/tr[@data-claim]")
    assert [tr.get("data-claim") for tr in lines] == [r["id"] for r in paper]
    # no line of a premise, the book's or a cited claim; a sensitivity row (C1 on the architectures
    # survey) opens no line of its own, nor a chapter: its claim has one line, its own row's
    apart = {r["id"] for r in rows if S.part_of(r) in ("premise", "book", "cited")}
    assert apart and not apart & {tr.get("data-claim") for tr in lines}
    sensitivity = [r for r in rows if S.part_of(r) == "sensitivity"]
    assert sensitivity and all([tr.get("data-claim") for tr in lines].count(r["id"]) == 1 for r in sensitivity)
    assert not {r["chapter"] for r in sensitivity} & {b.get("data-chapter") for b in table.findall("./tbody")}
    # nor does a reading chosen because it reproduces a figure
    chosen = dict(graded("C1", C1_LITERAL, REAL, variant="chosen reading"), selection="reproduces the figure")
    assert S.part_of(chosen) == "chosen"
    with_chosen, _ = scoreboard_tree(rows + [chosen])
    assert [tr.get("data-claim") for tr in with_chosen.iter("tr") if tr.get("data-claim")] == [r["id"] for r in paper]
    # one column per model of the paper's claims and their replays, in the tables' order
    models = list(dict.fromkeys(S.short_model(r["model"]) for r in rows if S.part_of(r) in ("paper", "control")))
    columns, _ = S.scoreboard_lines(rows)
    assert columns == models == [S.short_model(REAL), S.short_model(STANDIN)]
    head = [text_of(th) for th in table.findall("./thead/tr/th")]
    assert head[:2] == ["claim", "paper"] and head[2:] == [S._column_title(c, rows) for c in columns]
    width = int(table.get("data-columns"))
    assert width == len(head) == 2 + len(columns)
    for tr in table.iter("tr"):            # every line as wide as the header (a chapter line spans it)
        assert sum(int(c.get("colspan", 1)) for c in tr) == width
    # the lines grouped by chapter under a thin chapter line, in the order of the rows
    chapters = list(dict.fromkeys(r["chapter"] for r in paper))
    assert [b.get("data-chapter") for b in table.findall("./tbody")] == chapters
    for body in table.findall("./tbody"):
        first = body.find("./tr")
        assert first.get("class") == "scoreboard-chapter"
        assert text_of(first) == f"Chapter {body.get('data-chapter')}"
        assert first.find("./th/a").get("href") == f"{body.get('data-chapter')}.html"
    # each line: the id (linked to the chapter's verdict) and the claim's few words, the paper's value
    for tr, row in zip(lines, paper):
        claim = tr.find("./th[@class='scoreboard-claim']")
        assert claim.find("./a[@class='claim-id']").text == row["id"]
        assert claim.find("./a").get("href") == f"{row['chapter']}.html#verdict"
        words = text_of(claim.find("./span[@class='claim-text']"))
        assert words and words.split()[0] in row["claim"]
        assert text_of(tr.find("./td[@class='scoreboard-paper']")) == (
            text_of(ET_fragment(S.inline_html(row.get("paper_value") or "—"))))


def ET_fragment(html_text: str):
    """A fragment of HTML parsed as XML inside a span."""
    import xml.etree.ElementTree as ET

    return ET.fromstring(f"<span>{html_text}</span>")


def test_every_scoreboard_cell_carries_its_verdict_number_rule_and_link():
    rows = ledger_rows()
    tree, _ = scoreboard_tree(rows)
    columns, groups = S.scoreboard_lines(rows)
    shown = 0
    for tr in tree.iter("tr"):
        if not tr.get("data-claim"):
            continue
        cells = tr.findall("./td[@data-model]")
        assert [td.get("data-model") for td in cells] == columns
        for td in cells:
            row = next((r for r in rows if r["id"] == tr.get("data-claim") and S.part_of(r) in ("paper", "control")
                        and S.short_model(r["model"]) == td.get("data-model")), None)
            classes = td.get("class").split()
            if row is None:                 # not run on this model: an empty cell, no verdict
                assert "scoreboard-absent" in classes and not any(c.startswith("verdict-") for c in classes)
                assert "not run" in td.get("title") and text_of(td) == "—"
                continue
            shown += 1
            assert S.css_verdict(row["verdict"]) in classes and td.get("data-verdict") == row["verdict"]
            assert text_of(td).startswith(f"{row['verdict']} {S.number_text(row)}")
            assert S.rule_text(row) in td.get("title") and S.plain_text(row["rule"]) in td.get("title")
            assert "$" not in td.get("title")
            link = td.find("./a[@class='scoreboard-link']")
            assert link.get("href") == f"{row['chapter']}.html#verdict"
            assert link.find("./span").get("class") == f"verdict-badge {S.css_verdict(row['verdict'])}"
    # every paper row and every replay of it is shown once
    assert shown == sum(S.part_of(r) in ("paper", "control") for r in rows)
    # a missing model is there: LIM was not replayed on the stand-in
    lim = next(tr for tr in tree.iter("tr") if tr.get("data-claim") == "LIM")
    absent = lim.find(f"./td[@data-model='{S.short_model(STANDIN)}']")
    assert "scoreboard-absent" in absent.get("class")
    assert "about GPT-2" in text_of(lim.find("./th"))
    # without a page to link to, the cell is not a link
    bare, _ = scoreboard_tree(rows, lambda chapter: None)
    assert not [a for a in bare.iter("a")]


def test_a_scoreboard_cell_follows_its_rows_verdict_and_premise():
    rows = ledger_rows()
    rows[0] = graded("L2", {"bound_holds": 1.0, "softmax_growth": 0.5, "linear_growth": 0.5}, REAL)
    tree, _ = scoreboard_tree(rows)
    cell = next(td for td in tree.iter("td") if td.get("data-claim") == "L2")
    assert S.css_verdict(rows[0]["verdict"]) in cell.get("class").split() and rows[0]["verdict"] == "refuted"
    # MH on the model where its premise MHP is refuted says so, in the cell and on hover
    mh = next(td for td in tree.iter("td") if td.get("data-claim") == "MH")
    assert "premise fails" in text_of(mh) and "MHP is refuted" in mh.get("title")
    assert S.scoreboard_html([]).startswith('<p class="scoreboard-empty">')


def test_the_scoreboard_placeholder_is_registered_filled_and_its_page_rewritten(tmp_path):
    from types import SimpleNamespace

    (tmp_path / "intro.md").write_text("# Intro\n\n```{claims-scoreboard}\n```\n")
    (tmp_path / "vanishing.md").write_text("# A chapter\n")
    env = SimpleNamespace(found_docs={"intro", "vanishing"}, doc2path=lambda doc: tmp_path / f"{doc}.md")
    assert S._ledger_docs(env) == ["intro"]
    assert S.ScoreboardDirective.run(SimpleNamespace())[0]["kind"] == "scoreboard"
    app = SimpleNamespace(env=SimpleNamespace(found_docs={"book/vanishing", "book/alternatives"},
                                              doc2path=lambda doc: tmp_path / "none.md"),
                          builder=SimpleNamespace(get_relative_uri=lambda a, b: b.split("/")[-1] + ".html"))
    node = S.ledger_placeholder(kind="scoreboard")
    raw = S._fill(node, ledger_rows(), app, "book/intro")
    assert 'href="vanishing.html#verdict"' in raw.astext() and "claims-scoreboard" in raw.astext()


def test_the_stylesheet_tints_every_verdicts_scoreboard_cell():
    css = (S.Path(__file__).resolve().parents[2] / "book" / "_static" / "ledger.css").read_text()
    for verdict in claims.VERDICTS:
        assert f"table.claims-scoreboard td.{S.css_verdict(verdict)}" in css, verdict
    assert "div.scoreboard-box { max-width: 100%; overflow-x: auto;" in css
    # automatic layout: no cell narrower than its widest formula or word (tests/book/test_site.py
    # checks in Chromium that nothing in a Verdicts table is wider than its box)
    assert "table-layout: auto" in css.split("table.claims-scoreboard {")[1].split("}")[0]
    assert "table-layout: auto" in css.split("table.claims-ledger {")[1].split("}")[0]


GEMMA = "gemma3-270m (268.1M params)"


def test_claims_graded_on_two_real_families_are_counted_as_holding_on_both_one_or_neither():
    rows = ledger_rows()
    # replays of C1 (corrected on SmolLM2), NU and LIM on Gemma 3: C1 holds there too, NU and LIM not
    rows += [graded("C1", C1_LITERAL, GEMMA, variant="gemma3-270m"),
             graded("NU", {"exponent": -0.9, "entropy": 0.5, "regime": 0.9}, GEMMA, variant="gemma3-270m"),
             graded("LIM", {"closeness": 0.0003, "paper_model": 0}, GEMMA, variant="gemma3-270m")]
    on = {r["id"]: {S.model_setting(x["model"]): x["verdict"] for x in rows if x["id"] == r["id"]}
          for r in S.paper_rows(rows)}
    both = [c for c in on if {"smollm2-135m", "gemma3-270m"} <= set(on[c])]
    assert both == ["C1", "NU", "LIM"]
    held = {c: [on[c][m] in S.HOLDS for m in ("smollm2-135m", "gemma3-270m")] for c in both}
    every, none = sum(all(h) for h in held.values()), sum(not any(h) for h in held.values())
    text = S.holds_sentence(rows)
    assert (f"of the 3 claims graded on SmolLM2-135M and Gemma 3 270M, {every} hold on both, "
            f"{3 - every - none} on one and {none} on neither.") in text, text
    assert every >= 1                                      # C1 holds (corrected) on both
    assert sentences(S.bottom_line(rows)) <= 5
    # one real family: no such clause
    assert "on both" not in S.holds_sentence(ledger_rows())


def test_a_chapters_verdict_card_holds_its_own_claims_on_every_model_and_points_to_its_verdict():
    from types import SimpleNamespace

    rows = ledger_rows()
    directive = SimpleNamespace(env=SimpleNamespace(docname="book/vanishing"))
    node = S.ChapterVerdictsDirective.run(directive)[0]
    assert (node["kind"], node["chapter"]) == ("card", "vanishing")
    app = SimpleNamespace(env=SimpleNamespace(found_docs={"book/vanishing", "book/verdicts"},
                                              doc2path=lambda doc: Path("none.md")),
                          builder=SimpleNamespace(get_relative_uri=lambda a, b: b.split("/")[-1] + ".html"))
    text = S._fill(node, rows, app, "book/vanishing").astext()
    own = [r["id"] for r in S.paper_rows(rows) if r["chapter"] == "vanishing"]
    other = [r["id"] for r in S.paper_rows(rows) if r["chapter"] != "vanishing"]
    assert own and other
    assert re.findall(r'<tr data-claim="([^"]+)"', text) == own      # its own claims only, once each
    assert 'href="vanishing.html#verdict"' in text and 'href="verdicts.html"' in text
    assert "scoreboard-chapter" not in text                       # one chapter: no chapter header line
    # the control model's replay of C1 sits in its own column of the card
    assert text.count('class="model-column"') == 2
    # a chapter with no claim of the paper says so instead of drawing an empty table
    empty = S.chapter_card_html(rows, "cost", "cost.html", "verdicts.html")
    assert "verdict-card-empty" in empty and "<table" not in empty


def test_the_build_timings_placeholder_is_filled_from_the_timing_files_and_its_page_rewritten(tmp_path, monkeypatch):
    """The cost chapter's ``{build-timings}``: filled at resolve time (after every chapter has
    executed) from the timing files beside the ledger, and its page re-read on every rebuild."""
    import json
    from types import SimpleNamespace

    (tmp_path / "cost.md").write_text("# Cost\n\n```{build-timings}\n```\n")
    env = SimpleNamespace(found_docs={"cost"}, doc2path=lambda doc: tmp_path / f"{doc}.md")
    assert S._ledger_docs(env) == ["cost"]
    assert S.BuildTimingsDirective.run(SimpleNamespace())[0]["kind"] == "timings"
    ledger_folder = tmp_path / "ledger"
    ledger_folder.mkdir()
    (ledger_folder / "vanishing.timing.json").write_text(json.dumps(
        {"chapter": "vanishing", "seconds": 60.0, "one_time_seconds": 0.0, "forward_seconds": 20.0,
         "model": "standin (2.0M params)", "windows": 8}))
    monkeypatch.setenv("NORMLIMITS_LEDGER_DIR", str(ledger_folder))
    app = SimpleNamespace(env=SimpleNamespace(found_docs={"book/cost"}, doc2path=lambda doc: tmp_path / "none.md"))
    monkeypatch.setattr(S, "_root", lambda app: tmp_path)
    raw = S._fill(S.ledger_placeholder(kind="timings"), [], app, "book/cost").astext()
    assert "build-timings" in raw and "<td>vanishing</td><td>60</td><td>20</td><td>3.0</td>" in raw
    assert "3.00 times its forward passes" in raw
