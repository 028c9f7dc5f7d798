"""Every figure of the book states its finding in its caption with a number computed in its chapter
(issue 48, item 4). myst-nb's cell metadata (``mystnb: figure: caption:``) cannot hold glue roles,
so a figure is glued in its code cell and shown by a ``{glue:figure}`` directive whose caption
carries at least one ``{glue:text}`` role. This checks the sources in milliseconds; the site test
``test_every_figure_caption_carries_a_glued_value`` checks the rendered pages."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.unit.test_glue_keys import literal_glue_keys

BOOK = Path(__file__).resolve().parents[2] / "book"
CHAPTERS = sorted(BOOK.glob("*.md"))

#: a code cell's YAML front matter, between the cell's opening fence and the second ``---``
CELL_HEADER = re.compile(r"^```\{code-cell\}[^\n]*\n---\n(.*?)\n---\n", re.M | re.S)
#: a fenced glue:figure directive: its key and its body (options and caption)
GLUE_FIGURE = re.compile(r"^(?P<fence>`{3,}|:{3,})\{glue:figure\}[ \t]*(?P<key>\S+)[ \t]*\n(?P<body>.*?)^(?P=fence)[ \t]*$",
                         re.M | re.S)
GLUE_TEXT = re.compile(r"\{glue:text\}`([A-Za-z_][A-Za-z0-9_]*)(?::[^`]*)?`")
#: a code cell: its body
CODE_CELL = re.compile(r"^```\{code-cell\}[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)


def metadata_figures(source: str) -> list[str]:
    """The names (or the first caption words) of figures defined through myst-nb cell metadata."""
    found = []
    for header in CELL_HEADER.finditer(source):
        if re.search(r"^mystnb:\s*\n(?:\s+.*\n)*?\s+figure:", header.group(1) + "\n", re.M):
            name = re.search(r"^\s+name:\s*(\S+)", header.group(1), re.M)
            found.append(name.group(1) if name else header.group(1)[:60])
    return found


def glue_figures(source: str) -> list[dict]:
    """Each ``{glue:figure}``: its key, its ``:name:`` and the glue:text keys of its caption."""
    figures = []
    for match in GLUE_FIGURE.finditer(source):
        body = match.group("body")
        name = re.search(r"^:name:\s*(\S+)", body, re.M)
        caption = "\n".join(line for line in body.splitlines() if not line.startswith(":"))
        figures.append({"key": match.group("key"), "name": name.group(1) if name else None,
                        "caption": caption.strip(), "glued": GLUE_TEXT.findall(caption)})
    return figures


def glued_pattern(source: str) -> re.Pattern:
    """The keys a caption may paste, as far as a static scan can tell: those the chapter glues
    literally (``glue("k", ...)``, ``glue_all({"k": ...})``, or a dictionary key ``"k":`` glued
    later), those an f-string builds (``f"{key}_exponent"``, each placeholder standing for any
    identifier part), and those its prose already pastes (keys the package computes, e.g.
    ``glue_all(numbers)``; the strict build fails on a key that is never glued)."""
    literal = set(literal_glue_keys(source)) | set(re.findall(r'"([A-Za-z_][A-Za-z0-9_]*)":', source))
    literal |= set(GLUE_TEXT.findall(GLUE_FIGURE.sub("", source)))
    templates = [t for t in re.findall(r'\bf"([^"\n]+)":', source)
                 if "{" in t and re.sub(r"\{[^}]*\}", "", t)]
    parts = [re.escape(k) for k in literal] + [
        "".join("[A-Za-z0-9_]+" if piece.startswith("{") else re.escape(piece)
                for piece in re.split(r"(\{[^}]*\})", t) if piece) for t in templates]
    return re.compile("^(?:" + "|".join(parts or ["(?!)"]) + ")$")


def test_the_scans_find_metadata_figures_and_bare_captions():
    source = ("```{code-cell} ipython3\n---\ntags: [hide-input]\nmystnb:\n  figure:\n    caption: |\n"
              "      A caption.\n    name: some-figure\n---\nplt.show()\n```\n\n"
              "```{glue:figure} a_figure\n:name: a-figure\n\nNo number here.\n```\n\n"
              "```{glue:figure} b_figure\n:name: b-figure\n\nFalls by {glue:text}`b_fall:.2f`.\n```\n")
    assert metadata_figures(source) == ["some-figure"]
    assert [(f["name"], f["glued"]) for f in glue_figures(source)] == [("a-figure", []), ("b-figure", ["b_fall"])]
    pattern = glued_pattern('glue_all({"b_fall": 1})\nnumbers.update({f"{key}_exponent": 2})')
    assert pattern.match("b_fall") and pattern.match("gpt2_exponent") and not pattern.match("b_rise")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_no_figure_is_captioned_through_cell_metadata(chapter):
    found = metadata_figures(chapter.read_text())
    assert not found, (f"{chapter.name}: figures {found} are captioned through myst-nb cell metadata, which "
                       "cannot hold glue roles; glue the figure and show it with a {glue:figure} directive")


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_every_glued_figure_has_a_name_and_a_caption_with_a_glued_number(chapter):
    source = chapter.read_text()
    glued = glued_pattern(source)
    for figure in glue_figures(source):
        label = f"{chapter.name}: {{glue:figure}} {figure['key']}"
        assert figure["name"], f"{label} has no :name: (numref links need one)"
        assert figure["glued"], f"{label} ({figure['name']}) has no {{glue:text}} role in its caption"
        assert glued.match(figure["key"]), f"{label}: the chapter never glues the figure {figure['key']!r}"
        missing = [k for k in figure["glued"] if not glued.match(k)]
        assert not missing, f"{label}: its caption pastes {missing}, which the chapter never glues"


@pytest.mark.parametrize("chapter", CHAPTERS, ids=lambda p: p.stem)
def test_no_figure_is_shown_without_a_caption(chapter):
    """A figure left to ``plt.show()`` (or the inline backend) gets no caption: each is glued and closed."""
    for cell in CODE_CELL.finditer(chapter.read_text()):
        code = cell.group(1)
        assert "plt.show()" not in code, f"{chapter.name}: a cell shows a figure with plt.show(), uncaptioned"
        for name in re.findall(r"^(\w+)(?:, \w+| *,? *\([^)]*\))* = (?:plt\.subplots|plt\.figure|\w+\.?\w*_figure|"
                               r"\w+\.plot_\w+)\(", code, re.M):
            assert re.search(rf'\bglue\("[A-Za-z0-9_]+", {name}\b', code) and f"plt.close({name})" in code, (
                f"{chapter.name}: a cell draws {name!r} without gluing and closing it "
                f"(first line: {code.strip().splitlines()[0][:80]!r})")
